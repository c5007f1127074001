//! The tool interface: a tool declares its name, description and JSON schema; the registry
//! validates arguments against the schema before calling it, and turns every failure into
//! an error result for the model (never a crash).

use std::path::PathBuf;

use async_trait::async_trait;
use switchboard_channel::ChatKey;
use tokio_util::sync::CancellationToken;

/// What a tool knows about the turn that called it.
#[derive(Debug, Clone)]
pub struct ToolContext {
    /// The chat the turn belongs to (the default target of `cron` and `message`).
    pub key: ChatKey,
    /// The sender is the gateway's owner (may act on other chats).
    pub sender_is_owner: bool,
    /// The agent's workspace folder.
    pub workspace: PathBuf,
    /// Confine file tools to the workspace (`agent.restrict_to_workspace`).
    pub restrict_to_workspace: bool,
    /// Cancelled by `/stop` or shutdown.
    pub cancel: CancellationToken,
    /// Who the turn acts for ([`crate::access::setters`]): a job the `cron` tool adds
    /// records them, and fires only while they still have access.
    pub set_by: Vec<crate::access::Setter>,
    /// The job runs and sub-agent results that led to the turn: `cron run` and `spawn`
    /// refuse to go on a loop.
    pub chain: crate::chain::Chain,
    /// The turn acts for a member, not the owner ([`crate::agent::member`]): fewer powers.
    pub member: Option<Member>,
    /// The turn is the owner's alone: in a direct chat, for no member. Only such a turn
    /// sees the memory notes kept for the owner, and what it remembers is kept for them
    /// unless said to be shared.
    pub owner_only: bool,
}

impl ToolContext {
    /// A context in chat `key` with workspace `workspace`, confined to it, for no one in
    /// particular (not the owner, no member): what a test or a tool's own caller adjusts
    /// (`ToolContext { sender_is_owner: true, ..ToolContext::new(key, ws) }`).
    pub fn new(key: ChatKey, workspace: impl Into<PathBuf>) -> Self {
        Self {
            key,
            sender_is_owner: false,
            workspace: workspace.into(),
            restrict_to_workspace: true,
            cancel: CancellationToken::new(),
            set_by: Vec::new(),
            chain: Default::default(),
            member: None,
            owner_only: false,
        }
    }
}

/// Someone the owner lets talk, for whom a turn acts ([`crate::agent::member`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Member {
    /// Who, as others are to read it: `Sam (@sam, telegram 6006)`.
    pub name: String,
    /// Their own folder (`members/telegram-6006`), where their file tools may write; `None`
    /// when the turn acts for several people.
    pub folder: Option<String>,
    /// The files sent in this chat: the only ones of the inbox its file tools may open.
    pub files: Vec<PathBuf>,
}

/// A tool failed; the message goes back to the model as the tool result.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ToolError {
    /// The arguments do not match the schema (`missing required count`).
    #[error("invalid arguments: {0}")]
    InvalidArguments(String),
    /// The tool ran and failed in a way the model can act on.
    #[error("{0}")]
    Failed(String),
    /// Not allowed (path outside the workspace, denied command, private address…).
    #[error("refused: {0}")]
    Refused(String),
}

/// One tool the model can call.
#[async_trait]
pub trait Tool: Send + Sync + 'static {
    /// Name as the model sees it (`read_file`).
    fn name(&self) -> &'static str;
    /// One or two sentences for the model.
    fn description(&self) -> &'static str;
    /// JSON schema of the arguments object (`{"type":"object","properties":…,"required":…}`).
    fn schema(&self) -> serde_json::Value;
    /// Whether a read-only sub-agent may use it.
    fn read_only(&self) -> bool {
        false
    }
    /// How long this call may run when that is shorter than `agent.tool_timeout` (a command
    /// given its own `timeout_secs`, plus a moment to report it); `None`, or a longer time,
    /// keeps the configured limit: `agent.tool_timeout` is the longest any call may run.
    fn time_limit(&self, _args: &serde_json::Value) -> Option<std::time::Duration> {
        None
    }
    /// Run with arguments already validated against [`Tool::schema`].
    async fn call(&self, args: serde_json::Value, ctx: &ToolContext) -> Result<String, ToolError>;
}
