//! `spawn`: a background sub-agent with its own session, read-only tools and no `spawn` or
//! `message`, at most [`MAX_SUBAGENTS`] at once and [`MAX_PER_CHAT`] per chat. Its result is
//! published back onto the bus as a `System(Subagent)` message for the parent chat, so the
//! parent agent tells the user. `/stop` and `/new` in that chat stop it: it posts nothing.
//! The result carries the [`crate::chain::Chain`] that led to it: a result's turn may spawn a follow-up,
//! but results [`crate::chain::MAX_SPAWNS`] deep spawn no more (a task that says "spawn
//! this task" would otherwise go on for ever).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use serde_json::{Value, json};
use switchboard_channel::{ChatKey, InboundMessage, Origin, Sender, SystemOrigin};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
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
/// Most sub-agents running at once for one chat, so one chat cannot take every slot.
pub const MAX_PER_CHAT: usize = 2;

/// The running sub-agents of each chat: id and stop token (a child of the shutdown token).
type RunningByChat = HashMap<ChatKey, Vec<(String, CancellationToken)>>;

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
    running: Mutex<RunningByChat>,
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
            running: Mutex::new(HashMap::new()),
            next: AtomicU64::new(1),
        }
    }

    /// Stop the running sub-agents of `key` (`/stop`, `/new`); how many there were.
    pub fn stop_chat(&self, key: &ChatKey) -> usize {
        let stopped = self.lock_running().remove(key).unwrap_or_default();
        for (id, token) in &stopped {
            tracing::info!(%id, %key, "sub-agent stopped by its chat");
            token.cancel();
        }
        stopped.len()
    }

    fn lock_running(&self) -> std::sync::MutexGuard<'_, RunningByChat> {
        self.running.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Take a slot for a sub-agent of `key`: its id and stop token, or why there is none.
    fn admit(
        &self,
        key: &ChatKey,
    ) -> Result<(String, CancellationToken, OwnedSemaphorePermit), ToolError> {
        let mut running = self.lock_running();
        let of_chat = running.get(key).map_or(0, Vec::len);
        if of_chat >= MAX_PER_CHAT {
            return Err(ToolError::Failed(format!(
                "this chat already has {of_chat} sub-agents running (at most {MAX_PER_CHAT}); wait for one to finish"
            )));
        }
        let permit = self.slots.clone().try_acquire_owned().map_err(|_| {
            ToolError::Failed(format!(
                "{MAX_SUBAGENTS} sub-agents are already running; wait for one to finish"
            ))
        })?;
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        // Random part: result ids must stay unique across restarts (the bus dedups by id).
        let id = format!("{:08x}-{n}", rand::random::<u32>());
        let token = self.shutdown.child_token();
        running
            .entry(key.clone())
            .or_default()
            .push((id.clone(), token.clone()));
        Ok((id, token, permit))
    }

    /// Forget the sub-agent `id` of `key`, which ended; `false` when its chat stopped it.
    fn finish(&self, key: &ChatKey, id: &str) -> bool {
        let mut running = self.lock_running();
        let Some(list) = running.get_mut(key) else {
            return false;
        };
        let before = list.len();
        list.retain(|(i, _)| i != id);
        let found = list.len() < before;
        if list.is_empty() {
            running.remove(key);
        }
        found
    }

    async fn run(
        self: Arc<Self>,
        id: String,
        task: String,
        parent: ToolContext,
        cancel: CancellationToken,
    ) {
        let ctx = ToolContext {
            key: parent.key.clone(),
            sender_is_owner: false,
            workspace: parent.workspace.clone(),
            restrict_to_workspace: true,
            cancel,
            set_by: parent.set_by.clone(),
            chain: parent.chain.clone(),
            member: parent.member.clone(),
            owner_only: parent.owner_only,
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
        if !self.finish(&parent.key, &id) {
            // `/stop` or `/new` in its chat: the user asked for it to end, and the bus (or
            // the command) already answered; a result, or a note the agent would be asked
            // to word, would undo that.
            return;
        }
        let text = match end {
            LoopEnd::Answer(t) if !t.trim().is_empty() => t,
            LoopEnd::Answer(_) => "(the sub-agent gave no answer)".into(),
            LoopEnd::Limit(t) => format!("(stopped at the step limit) {t}"),
            // Cut off by a restart: said, so the chat is not left waiting for it.
            LoopEnd::Cancelled => {
                "(stopped: the gateway restarted before the sub-agent finished; start it again if the result is still needed)".into()
            }
            LoopEnd::Overflow => "(the sub-agent's work did not fit the model's context)".into(),
            // The chat may see this text: the brief form, as every user is told (the log
            // keeps the provider's own words).
            LoopEnd::Failed(e) => {
                tracing::warn!(%id, key = %parent.key, "sub-agent failed: {e}");
                format!("(the sub-agent failed: {})", e.brief())
            }
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
        parent.chain.then_spawn().stamp(&mut msg);
        // The turn that answers it acts for whoever asked for the sub-agent (a job it sets
        // is theirs: see `crate::access::setters`).
        if !parent.set_by.is_empty() {
            if let Ok(v) = serde_json::to_value(&parent.set_by) {
                msg.metadata.insert(crate::access::SET_BY.into(), v);
            }
        }
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
        if let Some(why) = ctx.chain.refuses_spawn() {
            return Err(ToolError::Refused(why));
        }
        let (id, cancel, permit) = self.subagents.admit(&ctx.key)?;
        let subs = self.subagents.clone();
        let parent = ctx.clone();
        let sid = id.clone();
        self.subagents.tasks.spawn(async move {
            subs.run(sid, task, parent, cancel).await;
            drop(permit);
        });
        Ok(format!(
            "sub-agent {id} started; its result will arrive as a message in this chat"
        ))
    }
}
