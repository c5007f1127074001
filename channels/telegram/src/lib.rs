//! Telegram adapter for switchboard, on teloxide (long polling, rustls).
//!
//! - [`config`]: [`TelegramConfig`] and its defaults.
//! - `intake`: start-up (`getMe`, `deleteWebhook`, `setMyCommands`) and our own
//!   `getUpdates` loop, which confirms an update only after it was published.
//! - `mapping`: a Telegram update → `InboundMessage` (key, sender, mention, text).
//! - `media`: photos, documents, voice and audio downloaded into the workspace inbox when
//!   the gateway asks ([`Channel::fetch_files`]), before the message's turn.
//! - `send`: replies rendered to Telegram HTML, split, sent with retries and a plain-text
//!   fallback; a reply that failed part-way resumes where it stopped; typing indicator.
//! - `pacing`: Telegram's published send limits, when enabled.
//! - `errors`: teloxide errors classified, the token scrubbed, backoff.
//!
//! Data flow: Telegram → `intake` → `mapping` → `InboundSender::publish` → the gateway
//! (→ `media` before the turn); the gateway → [`TelegramChannel::send`] → `send` (+ `pacing`) → Telegram.

pub mod config;
mod errors;
mod intake;
mod mapping;
mod media;
mod pacing;
mod send;

use std::time::Duration;

use async_trait::async_trait;
use switchboard_channel::{
    Capabilities, Channel, ChannelError, ChatKey, Dialect, InboundMessage, InboundSender,
    OutboundMessage, SendError, SendReceipt,
};
use teloxide::Bot;
use tokio_util::sync::CancellationToken;

pub use config::TelegramConfig;

/// Whether `key` names a chat replies can be sent to: `telegram:<chat id>` with a number,
/// or `telegram:<chat id>:topic:<thread id>` (what sending parses).
pub fn is_chat_key(key: &ChatKey) -> bool {
    send::Target::parse(key).is_ok()
}

/// Whether `key` is a group's (or a topic in one): a group's id is negative. `None` for a
/// key that is not a Telegram chat's.
pub fn is_group_key(key: &ChatKey) -> Option<bool> {
    send::Target::parse(key).ok().map(|t| t.is_group())
}

/// Longest a file download may take (`getFile` and the bytes): 20 MB (the Bot API's limit)
/// at ~170 KB/s. Its chat's turn waits for it, so it is bounded (a file past it is named to
/// the model, not read).
const DOWNLOAD_TIMEOUT: Duration = Duration::from_secs(120);
/// Files downloaded at once, across chats (the gateway fetches at most two messages of one
/// chat at once, so one chat's album leaves room for others).
const PARALLEL_DOWNLOADS: usize = 8;

/// The Telegram channel: one bot token, polling and sending through one HTTP client (and
/// downloading files through another, with a longer time limit).
pub struct TelegramChannel {
    cfg: TelegramConfig,
    bot: Bot,
    /// For file downloads, which a slow link makes outlast any API call's time limit.
    files_bot: Bot,
    /// Downloads under way ([`PARALLEL_DOWNLOADS`]).
    downloads: tokio::sync::Semaphore,
    pacer: pacing::Pacer,
    /// What was posted of replies that failed part-way, for the outbox's retries.
    delivered: send::DeliveredChunks,
}

impl std::fmt::Debug for TelegramChannel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TelegramChannel")
            .field("cfg", &self.cfg)
            .finish_non_exhaustive()
    }
}

impl TelegramChannel {
    /// Check the configuration and build the client; no network traffic yet.
    pub fn new(cfg: TelegramConfig) -> Result<Self, ChannelError> {
        if cfg.token.trim().is_empty() {
            return Err(ChannelError::Unauthorized(
                "the Telegram bot token is empty".into(),
            ));
        }
        let url = reqwest::Url::parse(&cfg.api_url).map_err(|e| {
            ChannelError::Other(format!("channels.telegram.api_url {:?}: {e}", cfg.api_url))
        })?;
        // The client's total timeout must outlast a long poll plus the watchdog margin.
        let timeout = (cfg.poll_timeout + cfg.watchdog_margin + Duration::from_secs(2))
            .max(Duration::from_secs(17));
        let client = |timeout| {
            teloxide::net::default_reqwest_settings()
                .timeout(timeout)
                .build()
                .map_err(|e| ChannelError::Other(format!("telegram HTTP client: {e}")))
        };
        // Every error text is scrubbed of it from now on (see `errors::scrub`).
        switchboard_channel::redact::register(&cfg.token);
        let bot = Bot::with_client(cfg.token.clone(), client(timeout)?).set_api_url(url.clone());
        let files_bot =
            Bot::with_client(cfg.token.clone(), client(DOWNLOAD_TIMEOUT)?).set_api_url(url);
        Ok(Self {
            files_bot,
            downloads: tokio::sync::Semaphore::new(PARALLEL_DOWNLOADS),
            pacer: pacing::Pacer::new(cfg.pacing),
            delivered: send::DeliveredChunks::default(),
            bot,
            cfg,
        })
    }

    fn sender(&self) -> send::Sender<'_> {
        send::Sender {
            bot: &self.bot,
            pacer: &self.pacer,
            delivered: &self.delivered,
            caps: self.capabilities(),
            attempts: self.cfg.send_attempts.max(1),
            retry_initial: self.cfg.retry_initial,
            retry_max: self.cfg.retry_max,
            max_inline_retry_after: self.cfg.max_inline_retry_after,
        }
    }
}

#[async_trait]
impl Channel for TelegramChannel {
    fn name(&self) -> &str {
        "telegram"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            edits: true,
            typing: true,
            threads: true,
            max_message_len: self.cfg.max_message_len,
            dialect: Dialect::TelegramHtml,
        }
    }

    async fn run(
        &self,
        inbound: InboundSender,
        shutdown: CancellationToken,
    ) -> Result<(), ChannelError> {
        let intake = intake::Intake {
            bot: &self.bot,
            cfg: &self.cfg,
            inbound: &inbound,
            shutdown: &shutdown,
        };
        match intake.start().await? {
            Some(me) => intake.poll(&me).await,
            None => Ok(()),
        }
    }

    async fn send(&self, msg: &OutboundMessage) -> Result<SendReceipt, SendError> {
        self.sender().send(msg).await
    }

    async fn typing(&self, key: &ChatKey) -> Result<(), SendError> {
        self.sender().typing(key).await
    }

    async fn fetch_files(&self, msg: &mut InboundMessage) {
        let limit = DOWNLOAD_TIMEOUT;
        media::fetch(&self.files_bot, &self.cfg, &self.downloads, limit, msg).await;
    }
}
