//! Shared set-up for the agent tests: a config in a temp dir, a sled store, the real
//! provider stack pointed at the fake LLM, and the real `Agent`.
#![allow(dead_code)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use switchboard::agent::{Agent, Publisher};
use switchboard::bus::{TurnHandler, TurnInput, TurnOutput};
use switchboard::config::{Config, DurationStr, Provider};
use switchboard::llm::LlmProvider;
use switchboard::metrics::Metrics;
use switchboard::store::{SledStore, Store};
use switchboard_channel::{ChatKey, InboundMessage, OutboundMessage, Sender};
use switchboard_fakes::llm::FakeLlm;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

pub struct Harness {
    pub dir: tempfile::TempDir,
    pub config: Arc<Config>,
    pub store: Arc<dyn Store>,
    pub llm: FakeLlm,
    pub metrics: Arc<Metrics>,
}

pub fn config_for(dir: &std::path::Path, llm: &FakeLlm, provider: Provider) -> Config {
    let mut c = Config::default();
    c.gateway.data_dir = dir.join("data");
    c.gateway.workspace = dir.join("workspace");
    c.gateway.skills_dirs = vec![dir.join("skills")];
    std::fs::create_dir_all(&c.gateway.workspace).unwrap();
    c.llm.provider = provider;
    c.llm.base_url = match provider {
        Provider::Openai => llm.base_url(),
        Provider::Anthropic => llm.url(),
    };
    c.llm.api_key_env = "SWITCHBOARD_TEST_LLM_KEY".into();
    c.llm.max_retries = 2;
    c.agent.tool_timeout = DurationStr(Duration::from_secs(5));
    c
}

impl Harness {
    pub async fn new() -> Self {
        Self::with(|_| {}).await
    }

    pub async fn with(tweak: impl FnOnce(&mut Config)) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let llm = FakeLlm::start().await;
        let mut c = config_for(dir.path(), &llm, Provider::Openai);
        tweak(&mut c);
        let store: Arc<dyn Store> = Arc::new(SledStore::open(&dir.path().join("data")).unwrap());
        Harness {
            dir,
            config: Arc::new(c),
            store,
            llm,
            metrics: Arc::new(Metrics::default()),
        }
    }

    pub fn provider(&self) -> Arc<dyn LlmProvider> {
        switchboard::llm::from_config(&self.config.llm).unwrap()
    }

    pub fn agent(&self) -> Agent {
        Agent::new(
            self.config.clone(),
            self.store.clone(),
            self.provider(),
            self.metrics.clone(),
        )
    }

    pub fn workspace(&self) -> std::path::PathBuf {
        self.config.gateway.workspace.clone()
    }
}

pub fn key() -> ChatKey {
    "telegram:42".parse().unwrap()
}

pub fn msg(id: &str, text: &str) -> InboundMessage {
    let sender = Sender {
        id: "42".into(),
        username: None,
        display_name: "Ada".into(),
        is_owner: false,
    };
    InboundMessage::text(id, key(), sender, text)
}

pub fn input(m: InboundMessage) -> TurnInput {
    TurnInput {
        key: m.key.clone(),
        messages: vec![m],
        cancel: CancellationToken::new(),
    }
}

/// Run one turn and apply its writes, as the bus would.
pub async fn turn(agent: &Agent, store: &Arc<dyn Store>, m: InboundMessage) -> TurnOutput {
    let out = agent.handle(input(m)).await.expect("turn not interrupted");
    store.apply(out.writes.clone()).unwrap();
    out
}

/// The stored session of `key()` as JSON.
pub fn stored_session(store: &Arc<dyn Store>) -> serde_json::Value {
    let raw = store
        .get(
            switchboard::store::Tree::Sessions,
            key().to_string().as_bytes(),
        )
        .unwrap()
        .unwrap_or_default();
    serde_json::from_slice(&raw).unwrap_or(serde_json::Value::Null)
}

/// A publisher that records what the agent publishes and sends.
#[derive(Default)]
pub struct RecordingPublisher {
    pub published: Mutex<Vec<InboundMessage>>,
    pub sent: Mutex<Vec<OutboundMessage>>,
    pub known: Vec<ChatKey>,
    pub tx: Mutex<Option<mpsc::Sender<InboundMessage>>>,
}

#[async_trait]
impl Publisher for RecordingPublisher {
    async fn publish(&self, msg: InboundMessage) -> Result<(), String> {
        self.published.lock().unwrap().push(msg.clone());
        let tx = self.tx.lock().unwrap().clone();
        if let Some(tx) = tx {
            let _ = tx.send(msg).await;
        }
        Ok(())
    }
    async fn send(&self, msg: OutboundMessage) -> Result<switchboard::bus::Delivery, String> {
        self.sent.lock().unwrap().push(msg);
        Ok(switchboard::bus::Delivery::Delivered)
    }
    fn known_key(&self, key: &ChatKey) -> bool {
        self.known.contains(key)
    }
}

/// Messages of a recorded OpenAI request body.
pub fn messages(body: &serde_json::Value) -> Vec<serde_json::Value> {
    body["messages"].as_array().cloned().unwrap_or_default()
}

/// Tool results (role tool) of a recorded OpenAI request body.
pub fn tool_results(body: &serde_json::Value) -> Vec<String> {
    messages(body)
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// A provider request for `model`: a system prompt, the user asking `question`, and one
/// tool, `read_file`.
pub fn read_file_request(model: &str, question: &str) -> switchboard::llm::LlmRequest {
    use switchboard::llm::{ChatMessage, LlmRequest, Role, ToolSpec};
    LlmRequest {
        model: model.into(),
        system: "You are Switchboard.".into(),
        system_dynamic: "Current time: 12:00.".into(),
        messages: vec![ChatMessage::new(Role::User, question)],
        tools: vec![ToolSpec {
            name: "read_file".into(),
            description: "Read a file".into(),
            parameters: serde_json::json!({"type": "object", "required": ["path"], "properties": {"path": {"type": "string"}}}),
        }]
        .into(),
        answer_only: false,
        max_tokens: 512,
    }
}
