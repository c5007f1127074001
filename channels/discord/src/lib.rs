//! Discord adapter for switchboard, on serenity 0.12.
//!
//! - [`DiscordChannel`] implements [`switchboard_channel::Channel`]: `run` keeps a gateway
//!   connection up, `send` posts replies, `typing` shows the indicator.
//! - `gateway`: the serenity client's life cycle: preflight checks (token, gateway URL),
//!   start, a watchdog that restarts a stalled or stuck client with backoff, prompt shutdown.
//! - `client`: the serenity client on a thread and runtime of its own, and the way out of
//!   serenity's spins over a dead socket.
//! - `handler`: serenity's event handlers (READY, RESUMED, `MESSAGE_CREATE`).
//! - `backfill`: after a new session (a resume that failed), the messages sent meanwhile are
//!   fetched over REST and handled as if the gateway had sent them.
//! - `intake`: `MESSAGE_CREATE` → [`switchboard_channel::InboundMessage`] (mentions,
//!   replies, attachments, a forum post's title), published through the gateway's
//!   `InboundSender`.
//! - `mentions`: `<@id>`, `<@&role>`, `<#channel>` in a message's text as names.
//! - `places`: what a channel is (DM, thread, forum) and its name, from serenity's cache,
//!   thread events or REST; where a message stands (a thread the bot takes part in, the
//!   first message of a forum post).
//! - `follow`: the threads the bot posted in, whose messages are addressed to it.
//! - `memory`: what intake and `send` share (places, followed threads, DM channels opened
//!   for user ids, refusals explained).
//! - `files`: attached files downloaded into the workspace inbox when the gateway asks
//!   (`Channel::fetch_files`), before the message's turn.
//! - `order`: messages of one channel are published in the order the gateway sent them,
//!   although serenity runs each event's handler in its own task.
//! - `rest`: the few REST calls the adapter makes itself (message posts, typing, `/users/@me`,
//!   `/gateway`, a channel, opening a DM), with 429 `retry_after` and Discord's error codes
//!   visible, which serenity hides when its rate limiter is disabled.
//! - `send`: rendering and chunking through `switchboard_channel::format`, replies, safe
//!   `allowed_mentions`, retries without ever posting a delivered chunk twice, a user id
//!   as a target (its DM channel).
//! - `refused`: a post refused for a missing permission says in the log, once per channel,
//!   what to grant.

mod backfill;
mod client;
mod files;
mod follow;
mod gateway;
mod handler;
mod intake;
mod memory;
mod mentions;
mod order;
mod places;
mod refused;
mod rest;
mod send;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use switchboard_channel::{
    Capabilities, Channel, ChannelError, ChatKey, Dialect, InboundMessage, InboundSender,
    OutboundMessage, SendError, SendReceipt,
};
use tokio_util::sync::CancellationToken;

/// Files downloaded at once, across chats.
const PARALLEL_DOWNLOADS: usize = 8;

/// Discord's public API; any other `api_url` is a proxy or a fake.
pub const DISCORD_API_URL: &str = "https://discord.com";

/// Whether `key` names a channel replies can be sent to: `discord:<channel id>` with a
/// snowflake (what sending parses).
pub fn is_channel_key(key: &ChatKey) -> bool {
    send::channel_id(key).is_ok()
}

/// Settings of the Discord adapter (`[channels.discord]`).
#[derive(Clone)]
pub struct DiscordConfig {
    /// Bot token (from the environment variable named by `token_env`). Never logged.
    pub token: String,
    /// `https://discord.com`, or a proxy / fake base such as `http://127.0.0.1:PORT`.
    pub api_url: String,
    /// Longest message posted, in characters (Discord: 2000).
    pub max_message_len: usize,
    /// A client that received no gateway event and no heartbeat ACK for this long is
    /// restarted. Keep it above Discord's heartbeat interval (about 41 s).
    pub stall_timeout: Duration,
    /// Longest `retry_after` that `send` waits out itself; a longer one is returned as
    /// [`SendError::RetryAfter`] for the outbox to schedule.
    pub max_inline_wait: Duration,
    /// Where attached files are downloaded (`<workspace>/inbox`); `None`: they are handed
    /// on as their CDN URLs.
    pub inbox_dir: Option<PathBuf>,
    /// Largest file downloaded.
    pub max_file_bytes: u64,
    /// Longest one file's download may take.
    pub file_download_timeout: Duration,
    /// Where the last handled message of each recently active channel, and the threads the
    /// bot takes part in, are kept across restarts, so that what was sent while the gateway
    /// was stopped is fetched at the next start and a thread's follow-ups need no mention
    /// after one; `None`: kept in memory only (gaps between sessions are still caught up on;
    /// after a restart a thread needs a mention again).
    pub state_file: Option<PathBuf>,
}

impl DiscordConfig {
    /// Config with Discord's defaults for everything but the token and the API URL.
    pub fn new(token: impl Into<String>, api_url: impl Into<String>) -> Self {
        Self {
            token: token.into(),
            api_url: api_url.into(),
            max_message_len: switchboard_channel::DISCORD_MAX_MESSAGE_LEN,
            stall_timeout: Duration::from_secs(90),
            max_inline_wait: Duration::from_secs(30),
            inbox_dir: None,
            max_file_bytes: 20 * 1024 * 1024,
            file_download_timeout: Duration::from_secs(120),
            state_file: None,
        }
    }

    /// Whether `api_url` is Discord itself (serenity's own rate limiter stays on).
    pub fn is_discord(&self) -> bool {
        self.api_url.trim_end_matches('/') == DISCORD_API_URL
    }
}

impl std::fmt::Debug for DiscordConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DiscordConfig")
            .field("token", &"<redacted>")
            .field("api_url", &self.api_url)
            .field("max_message_len", &self.max_message_len)
            .field("stall_timeout", &self.stall_timeout)
            .field("max_inline_wait", &self.max_inline_wait)
            .field("inbox_dir", &self.inbox_dir)
            .field("max_file_bytes", &self.max_file_bytes)
            .field("file_download_timeout", &self.file_download_timeout)
            .field("state_file", &self.state_file)
            .finish()
    }
}

/// The Discord channel: servers, threads (each its own chat) and DMs.
pub struct DiscordChannel {
    cfg: DiscordConfig,
    rest: rest::Rest,
    sent: send::DeliveredChunks,
    /// Shared with intake: channels, followed threads, DM channels of user ids.
    memory: Arc<memory::Memory>,
    /// For attachment downloads from the CDN (no token).
    files_http: reqwest::Client,
    /// Downloads under way ([`PARALLEL_DOWNLOADS`]).
    downloads: tokio::sync::Semaphore,
}

impl DiscordChannel {
    /// Build the adapter; fails only on an unusable config (no network I/O here).
    pub fn new(cfg: DiscordConfig) -> Result<Self, ChannelError> {
        if cfg.token.trim().is_empty() {
            return Err(ChannelError::Unauthorized(
                "discord: the bot token is empty".into(),
            ));
        }
        if !(cfg.api_url.starts_with("http://") || cfg.api_url.starts_with("https://")) {
            return Err(ChannelError::Other(format!(
                "discord: api_url {:?} must start with http:// or https://",
                cfg.api_url
            )));
        }
        // Every error text is scrubbed of it from now on (see `rest` and `gateway`).
        switchboard_channel::redact::register(&cfg.token);
        let rest = rest::Rest::new(&cfg.token, &cfg.api_url)?;
        let files_http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::limited(5))
            .build()
            .map_err(|e| ChannelError::Other(format!("discord: http client: {e}")))?;
        Ok(Self {
            cfg,
            rest,
            sent: send::DeliveredChunks::default(),
            memory: Arc::default(),
            files_http,
            downloads: tokio::sync::Semaphore::new(PARALLEL_DOWNLOADS),
        })
    }
}

#[async_trait]
impl Channel for DiscordChannel {
    fn name(&self) -> &str {
        "discord"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            edits: true,
            typing: true,
            threads: true,
            max_message_len: self.cfg.max_message_len,
            dialect: Dialect::Markdown,
        }
    }

    async fn run(
        &self,
        inbound: InboundSender,
        shutdown: CancellationToken,
    ) -> Result<(), ChannelError> {
        gateway::run(&self.cfg, &self.rest, &self.memory, inbound, shutdown).await
    }

    async fn send(&self, msg: &OutboundMessage) -> Result<SendReceipt, SendError> {
        let caps = self.capabilities();
        send::send(&self.rest, caps, &self.cfg, &self.sent, &self.memory, msg).await
    }

    async fn typing(&self, key: &ChatKey) -> Result<(), SendError> {
        let channel_id = send::target(&self.memory, key)?;
        self.rest
            .typing(channel_id)
            .await
            .map_err(send::to_send_error)
    }

    async fn fetch_files(&self, msg: &mut InboundMessage) {
        let downloader = files::Downloader {
            http: &self.files_http,
            inbox: self.cfg.inbox_dir.as_deref(),
            max_bytes: self.cfg.max_file_bytes,
            timeout: self.cfg.file_download_timeout,
            slots: &self.downloads,
        };
        downloader.fetch_into(msg).await;
    }
}
