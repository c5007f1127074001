//! [`TelegramConfig`]: what the adapter needs to run, with the documented defaults.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

/// Settings of the Telegram adapter. Build it with [`TelegramConfig::new`] and override
/// fields as needed.
#[derive(Clone)]
pub struct TelegramConfig {
    /// Bot token from BotFather. Never logged (the `Debug` impl hides it).
    pub token: String,
    /// Bot API endpoint (`https://api.telegram.org`, a self-hosted Bot API server, a fake).
    /// Must not carry a path: teloxide replaces it with `/bot<token>/<Method>`.
    pub api_url: String,
    /// Where received files are downloaded (`<workspace>/inbox`).
    pub inbox_dir: PathBuf,
    /// Pace sends within Telegram's published limits (≈1/s per chat, 20/min per group,
    /// 30/s overall). Off for a self-hosted Bot API server or the benchmark.
    pub pacing: bool,
    /// Longest message sent, in characters of visible text (Telegram: 4096).
    pub max_message_len: usize,
    /// Files larger than this are not downloaded; the message gets a note instead.
    pub max_file_bytes: u64,
    /// Long-poll timeout of `getUpdates`. Must stay well below the HTTP client timeout.
    pub poll_timeout: Duration,
    /// How long past `poll_timeout` a `getUpdates` call may hang before the watchdog
    /// abandons it and starts a new one.
    pub watchdog_margin: Duration,
    /// First delay after a failed poll or send; doubles up to `retry_max`, with jitter.
    pub retry_initial: Duration,
    /// Longest delay between retries.
    pub retry_max: Duration,
    /// Attempts per message chunk before `send` gives up (429, 5xx, network).
    pub send_attempts: u32,
    /// Longest `retry_after` waited inside `send`; a longer one is returned to the caller
    /// as `SendError::RetryAfter` (a retry of the reply goes on from the refused chunk).
    pub max_inline_retry_after: Duration,
}

impl TelegramConfig {
    /// Defaults: pacing on, 4096 characters, 20 MB files, 10 s long polls, 5 s watchdog
    /// margin, retries from 1 s up to 30 s, 6 send attempts, inline waits up to 60 s.
    pub fn new(
        token: impl Into<String>,
        api_url: impl Into<String>,
        inbox_dir: impl Into<PathBuf>,
    ) -> Self {
        Self {
            token: token.into(),
            api_url: api_url.into(),
            inbox_dir: inbox_dir.into(),
            pacing: true,
            max_message_len: switchboard_channel::TELEGRAM_MAX_MESSAGE_LEN,
            max_file_bytes: 20 * 1024 * 1024,
            poll_timeout: Duration::from_secs(10),
            watchdog_margin: Duration::from_secs(5),
            retry_initial: Duration::from_secs(1),
            retry_max: Duration::from_secs(30),
            send_attempts: 6,
            max_inline_retry_after: Duration::from_secs(60),
        }
    }
}

impl fmt::Debug for TelegramConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TelegramConfig")
            .field("token", &"<hidden>")
            .field("api_url", &self.api_url)
            .field("inbox_dir", &self.inbox_dir)
            .field("pacing", &self.pacing)
            .field("max_message_len", &self.max_message_len)
            .field("max_file_bytes", &self.max_file_bytes)
            .field("poll_timeout", &self.poll_timeout)
            .field("watchdog_margin", &self.watchdog_margin)
            .field("retry_initial", &self.retry_initial)
            .field("retry_max", &self.retry_max)
            .field("send_attempts", &self.send_attempts)
            .field("max_inline_retry_after", &self.max_inline_retry_after)
            .finish()
    }
}
