//! `spawn`: a background sub-agent with its own session, read-only tools and no `spawn` or
//! `message`, at most [`MAX_SUBAGENTS`] at once. Its result is published back onto the bus
//! as a `System(Subagent)` message for the parent chat, so the parent agent tells the user.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use serde_json::{Value, json};
use switchboard_channel::{InboundMessage, Origin, Sender, SystemOrigin};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use super::Registry;
use crate::agent::publisher::Publisher;
use crate::agent::run::{self, LoopEnd, LoopSpec, LoopState};
use crate::agent::tool::{Tool, ToolContext, ToolError};
use crate::config::Config;
use crate::llm::{ChatMessage, LlmProvider, Role};
use crate::metrics::Metrics;

/// Most sub-agents running at once (gateway-wide).
pub const MAX_SUBAGENTS: usize = 5;

/// Everything a sub-agent run needs; shared by every `spawn` tool instance.
pub struct Subagents {
    pub config: Arc<Config>,
    pub llm: Arc<dyn LlmProvider>,
    /// Read-only tools (never `spawn` or `message`).
    pub tools: Registry,
    pub publisher: Arc<dyn Publisher>,
    pub metrics: Arc<Metrics>,
    pub shutdown: CancellationToken,
    /// Where the sub-agents run (see `Agent::with_tasks`).
    pub tasks: tokio_util::task::TaskTracker,
    pub slots: Arc<Semaphore>,
    next: AtomicU64,
}

impl Subagents {
    pub fn new(
        config: Arc<Config>,
        llm: Arc<dyn LlmProvider>,
        tools: Registry,
        publisher: Arc<dyn Publisher>,
        metrics: Arc<Metrics>,
        (shutdown, tasks): (CancellationToken, tokio_util::task::TaskTracker),
    ) -> Self {
        let tools = Registry::new(
            tools
                .read_only()
                .names()
                .iter()
                .filter_map(|n| tools.get(n))
                .filter(|t| !matches!(t.name(), "spawn" | "message"))
                .collect(),
        );
        Self {
            config,
            llm,
            tools,
            publisher,
            metrics,
            shutdown,
            tasks,
            slots: Arc::new(Semaphore::new(MAX_SUBAGENTS)),
            next: AtomicU64::new(1),
        }
    }

    async fn run(self: Arc<Self>, id: String, task: String, parent: ToolContext) {
        let ctx = ToolContext {
            key: parent.key.clone(),
            sender_is_owner: false,
            workspace: parent.workspace.clone(),
            restrict_to_workspace: true,
            cancel: self.shutdown.child_token(),
        };
        let spec = LoopSpec {
            model: self.config.llm.model.clone(),
            system: format!(
                "You are a background sub-agent of {}. Do the task below on your own with the read-only \
                 tools you have, then answer with the result only: it is passed to the main assistant.",
                self.config.agent.name
            ),
            system_dynamic: super::super::prompt::dynamic(&self.config, &self.config.llm.model),
            max_tokens: self.config.llm.max_tokens,
            max_iterations: self.config.agent.max_iterations,
            tool_timeout: self.config.agent.tool_timeout.get(),
            context_window: self.config.llm.context_window,
            steering: Vec::new(),
            user_text: task.clone(),
        };
        let mut state = LoopState {
            history: vec![ChatMessage::new(Role::User, task.clone())],
            ..Default::default()
        };
        let end = run::run(
            self.llm.as_ref(),
            &self.tools,
            &ctx,
            &spec,
            &mut state,
            None,
            &self.metrics,
            None,
        )
        .await;
        let text = match end {
            LoopEnd::Answer(t) if !t.trim().is_empty() => t,
            LoopEnd::Answer(_) => "(the sub-agent gave no answer)".into(),
            LoopEnd::Limit(t) => format!("(stopped at the step limit) {t}"),
            // Cut off by a restart: said, so the chat is not left waiting for it.
            LoopEnd::Cancelled => {
                "(stopped: the gateway restarted before the sub-agent finished; start it again if the result is still needed)".into()
            }
            LoopEnd::Overflow => "(the sub-agent's work did not fit the model's context)".into(),
            LoopEnd::Failed(e) => format!("(the sub-agent failed: {e})"),
        };
        let mut msg = InboundMessage::text(
            format!("subagent:{id}:result"),
            parent.key.clone(),
            Sender {
                id: format!("subagent:{id}"),
                username: None,
                display_name: "sub-agent".into(),
                is_owner: false,
            },
            format!("Task: {task}\n\nResult:\n{text}"),
        );
        msg.origin = Origin::System(SystemOrigin::Subagent { id: id.clone() });
        if let Err(e) = self.publisher.publish(msg).await {
            tracing::error!(%id, key = %parent.key, "could not publish the sub-agent's result: {e}");
        }
    }
}

/// `spawn`: start a sub-agent on a task.
pub struct Spawn {
    subagents: Arc<Subagents>,
}

impl Spawn {
    pub fn new(subagents: Arc<Subagents>) -> Self {
        Self { subagents }
    }
}

#[async_trait]
impl Tool for Spawn {
    fn name(&self) -> &'static str {
        "spawn"
    }
    fn description(&self) -> &'static str {
        "Start a background sub-agent on a self-contained research task (read-only tools). Its result arrives later as a message in this chat; do not wait for it."
    }
    fn schema(&self) -> Value {
        json!({"type": "object", "required": ["task"], "properties": {"task": {"type": "string", "minLength": 1}}})
    }
    async fn call(&self, args: Value, ctx: &ToolContext) -> Result<String, ToolError> {
        let task = args["task"].as_str().unwrap_or_default().to_string();
        let permit = self
            .subagents
            .slots
            .clone()
            .try_acquire_owned()
            .map_err(|_| {
                ToolError::Failed(format!(
                    "{MAX_SUBAGENTS} sub-agents are already running; wait for one to finish"
                ))
            })?;
        let n = self.subagents.next.fetch_add(1, Ordering::Relaxed);
        // Random part: result ids must stay unique across restarts (the bus dedups by id).
        let id = format!("{:08x}-{n}", rand::random::<u32>());
        let subs = self.subagents.clone();
        let parent = ctx.clone();
        let sid = id.clone();
        self.subagents.tasks.spawn(async move {
            subs.run(sid, task, parent).await;
            drop(permit);
        });
        Ok(format!(
            "sub-agent {id} started; its result will arrive as a message in this chat"
        ))
    }
}
