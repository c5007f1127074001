//! The agent loop shared by every channel: commands, session, prompt, LLM call, reply.
//!
//! - [`session`]: stored conversation history per chat.
//! - [`tool`]: the tool interface.
//! - [`commands`]: `/new`, `/status`, `/help`, answered without the LLM.

pub mod commands;
pub mod session;
pub mod tool;

use std::sync::Arc;
use std::sync::atomic::Ordering;

use async_trait::async_trait;
use switchboard_channel::{InboundMessage, Origin, OutboundKind, OutboundMessage, SystemOrigin};

use crate::bus::{Interrupted, TurnHandler, TurnInput, TurnOutput};
use crate::config::Config;
use crate::llm::{ChatMessage, DeltaSink, LlmError, LlmProvider, LlmRequest, Role};
use crate::metrics::Metrics;
use crate::store::{Batch, Store, Tree};

use session::Session;

/// Streams a turn's text to whoever waits for it (the API channel), by inbound id.
pub trait StreamRegistry: Send + Sync + 'static {
    fn sink_for(&self, inbound_id: &str) -> Option<DeltaSink>;
}

/// The agent: turns inbound messages into replies.
pub struct Agent {
    config: Arc<Config>,
    store: Arc<dyn Store>,
    llm: Arc<dyn LlmProvider>,
    metrics: Arc<Metrics>,
    streams: Option<Arc<dyn StreamRegistry>>,
    status: Arc<dyn Fn(&switchboard_channel::ChatKey) -> String + Send + Sync>,
}

impl Agent {
    pub fn new(
        config: Arc<Config>,
        store: Arc<dyn Store>,
        llm: Arc<dyn LlmProvider>,
        metrics: Arc<Metrics>,
    ) -> Self {
        Self {
            config,
            store,
            llm,
            metrics,
            streams: None,
            status: Arc::new(|_| String::new()),
        }
    }

    /// Stream replies to waiting API requests.
    pub fn with_streams(mut self, streams: Arc<dyn StreamRegistry>) -> Self {
        self.streams = Some(streams);
        self
    }

    /// Extra `/status` lines about the chat (queue depth…), supplied by the gateway.
    pub fn with_status(
        mut self,
        status: Arc<dyn Fn(&switchboard_channel::ChatKey) -> String + Send + Sync>,
    ) -> Self {
        self.status = status;
        self
    }

    fn system_prompt(&self, last: &InboundMessage) -> String {
        let name = &self.config.agent.name;
        let chat = if last.is_group { "a group chat" } else { "a direct chat" };
        let now = chrono::Utc::now().with_timezone(&self.config.gateway.tz());
        format!(
            "You are {name}, a helpful personal assistant reachable over several chat apps.\n\
             Channel: {channel} ({chat}). Talking with: {who}.\n\
             Current time: {now} ({tz}).",
            channel = last.key.channel,
            who = last.sender.display_name,
            now = now.format("%Y-%m-%d %H:%M"),
            tz = self.config.gateway.timezone,
        )
    }

    /// The user turn as the model sees it.
    fn user_content(messages: &[InboundMessage]) -> String {
        let mut parts = Vec::with_capacity(messages.len());
        for m in messages {
            let mut text = match &m.origin {
                Origin::User if m.is_group => format!("[{}] {}", m.sender.display_name, m.text),
                Origin::User => m.text.clone(),
                Origin::System(SystemOrigin::Cron { job_id }) => {
                    format!("[scheduled job {job_id}] {}", m.text)
                }
                Origin::System(SystemOrigin::Heartbeat) => format!("[heartbeat] {}", m.text),
                Origin::System(SystemOrigin::Subagent { id }) => {
                    format!("[sub-agent {id} finished] {}", m.text)
                }
            };
            if let Some(quoted) = m.metadata.get("reply_to_text").and_then(|v| v.as_str()) {
                text = format!("(replying to: \"{quoted}\")\n{text}");
            }
            for a in &m.attachments {
                text.push_str(&format!("\n[attachment: {:?} {}]", a.kind, a.location));
            }
            parts.push(text);
        }
        parts.join("\n\n")
    }

    async fn call_llm(&self, req: &LlmRequest, sink: Option<DeltaSink>) -> Result<String, LlmError> {
        let max = self.config.llm.max_retries;
        let mut attempt = 0;
        loop {
            attempt += 1;
            self.metrics.llm_requests.fetch_add(1, Ordering::Relaxed);
            match self.llm.complete(req, sink.clone()).await {
                Ok(r) => {
                    self.metrics
                        .llm_prompt_tokens
                        .fetch_add(r.usage.prompt_tokens, Ordering::Relaxed);
                    self.metrics
                        .llm_completion_tokens
                        .fetch_add(r.usage.completion_tokens, Ordering::Relaxed);
                    return Ok(r.text);
                }
                Err(e) => {
                    self.metrics.llm_errors.fetch_add(1, Ordering::Relaxed);
                    if !e.is_retryable() || attempt > max {
                        return Err(e);
                    }
                    let wait = match &e {
                        LlmError::RateLimited { retry_after: Some(d) } => *d,
                        _ => crate::backoff::delay(
                            attempt,
                            std::time::Duration::from_secs(2),
                            std::time::Duration::from_secs(60),
                        ),
                    };
                    tracing::warn!("LLM request failed (attempt {attempt}), retrying in {wait:?}: {e}");
                    tokio::time::sleep(wait).await;
                }
            }
        }
    }

    fn reply(last: &InboundMessage, text: impl Into<String>, kind: OutboundKind) -> OutboundMessage {
        let mut r = OutboundMessage::new(last.key.clone(), text);
        r.kind = kind;
        r.in_reply_to_inbound = Some(last.id.clone());
        r.reply_to = last
            .metadata
            .get("message_id")
            .and_then(|v| v.as_str())
            .map(String::from);
        r
    }

    async fn run_turn(&self, turn: &TurnInput) -> TurnOutput {
        let last = turn.messages.last().expect("a turn has at least one message");
        let key = &turn.key;
        if let Some(out) = commands::handle(self, turn) {
            return out;
        }
        let mut session = match Session::load(self.store.as_ref(), key) {
            Ok(s) => s,
            Err(e) => {
                tracing::error!(%key, "cannot load the session: {e}");
                Session::default()
            }
        };
        let user = ChatMessage::new(Role::User, Self::user_content(&turn.messages));
        let mut messages: Vec<ChatMessage> =
            session.window(self.config.agent.history_messages).to_vec();
        messages.push(user.clone());
        let req = LlmRequest {
            model: self.config.llm.model.clone(),
            system: self.system_prompt(last),
            messages,
            tools: Vec::new(),
            max_tokens: self.config.llm.max_tokens,
        };
        let sink = self.streams.as_ref().and_then(|s| s.sink_for(&last.id));
        let mut writes = Batch::default();
        if last.origin == Origin::User {
            writes.put(Tree::Meta, "last_active", key.to_string());
        }
        match self.call_llm(&req, sink).await {
            Ok(text) => {
                session.messages.push(user);
                session.messages.push(ChatMessage::new(Role::Assistant, text.clone()));
                session.turns += 1;
                session.save(key, &mut writes);
                let replies = if text.trim().is_empty() {
                    Vec::new()
                } else {
                    vec![Self::reply(last, text, OutboundKind::Final)]
                };
                TurnOutput { replies, writes }
            }
            Err(e) => {
                self.metrics.turns_failed.fetch_add(1, Ordering::Relaxed);
                tracing::error!(%key, "turn failed: {e}");
                let text = format!("⚠️ Sorry, I couldn't get an answer from the language model ({e}). Please try again in a moment.");
                TurnOutput {
                    replies: vec![Self::reply(last, text, OutboundKind::Error)],
                    writes,
                }
            }
        }
    }
}

#[async_trait]
impl TurnHandler for Agent {
    async fn handle(&self, turn: TurnInput) -> Result<TurnOutput, Interrupted> {
        tokio::select! {
            out = self.run_turn(&turn) => Ok(out),
            _ = turn.cancel.cancelled() => Err(Interrupted),
        }
    }
}
