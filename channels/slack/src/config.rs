//! [`SlackConfig`]: tokens, endpoint and behaviour switches of the Slack adapter.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

pub use switchboard_channel::SLACK_MAX_MESSAGE_LEN;

/// Configuration of the Slack adapter. Secrets are held here but never printed (`Debug`
/// redacts them).
#[derive(Clone)]
pub struct SlackConfig {
    /// Bot token (`xoxb-…`) for the Web API.
    pub bot_token: String,
    /// App-level token (`xapp-…`, scope `connections:write`): Socket Mode when set.
    pub app_token: Option<String>,
    /// Signing secret: the Events API handler accepts requests when set.
    pub signing_secret: Option<String>,
    /// The environment variable the bot token came from, named (never its value) in the
    /// messages that ask for a new one.
    pub bot_token_env: String,
    /// The environment variable the app token came from, named likewise.
    pub app_token_env: String,
    /// Web API base URL, `https://slack.com/api` (GovSlack, a proxy or a fake otherwise);
    /// a plain `http://` URL is allowed.
    pub api_url: String,
    /// Answer channel messages in a thread (keys `slack:<channel>:<thread_ts>`).
    pub reply_in_thread: bool,
    /// Longest message sent, in characters (Slack's limit is 40 000).
    pub max_message_len: usize,
    /// Socket Mode connections kept open at once (slack-morphism opens each one after
    /// the previous by one second).
    pub socket_connections: u32,
    /// Socket Mode: wait between attempts to open a connection.
    pub socket_reconnect_delay: Duration,
    /// Socket Mode watchdog: with nothing (no `hello`, no event) received for this long, all
    /// sockets are torn down and opened again. Dead TCP connections are caught sooner by
    /// slack-morphism's ping/pong check (`socket_ping_interval` × 3 without a pong).
    pub socket_idle_timeout: Duration,
    /// Socket Mode: websocket ping interval (whole seconds, at least 1).
    pub socket_ping_interval: Duration,
    /// `send`: longest `Retry-After` waited inside one send before handing the wait back
    /// to the caller as `SendError::RetryAfter`.
    pub max_inline_retry_after: Duration,
    /// Where files users share are downloaded (`<workspace>/inbox`); `None`: not
    /// downloaded, the message says so.
    pub inbox_dir: Option<PathBuf>,
    /// Largest file downloaded (Socket Mode events carry no size: the download stops here).
    pub max_file_bytes: u64,
    /// Longest time one file's download may take (files come down before the message's
    /// turn, not at intake). A file not done by then is named, with its URL.
    pub file_download_timeout: Duration,
    /// Where the last handled message of each recently active conversation is kept across
    /// restarts, so that what was sent while the gateway was stopped is fetched at the next
    /// start (`<data_dir>/slack-recent.json`); `None`: kept in memory only (gaps in the
    /// connection are still caught up on).
    pub state_file: Option<PathBuf>,
    /// Catch-up: the first wait before a page is asked again after a passing fault (5xx,
    /// network; doubling, 3 times); a conversation whose catch-up failed all the same is
    /// tried again after 30 times it, doubling up to 15 minutes.
    pub catch_up_backoff: Duration,
    /// Who may write is decided by names too (`allow_from` lists one): a message whose
    /// sender's name `users.info` has not given yet (slow, or failing) is not taken in, and
    /// Slack delivers it again, rather than its sender being judged a stranger.
    pub names_decide_access: bool,
    /// The user ids `allow_from` lists: someone listed by id is let in without their name,
    /// so their messages are never held for it.
    pub ids_let_in: Vec<String>,
}

impl SlackConfig {
    /// A configuration with the documented defaults: `https://slack.com/api`, replies in
    /// threads, 40 000-character messages, two sockets.
    pub fn new(bot_token: impl Into<String>) -> Self {
        Self {
            bot_token: bot_token.into(),
            app_token: None,
            signing_secret: None,
            bot_token_env: "SLACK_BOT_TOKEN".to_string(),
            app_token_env: "SLACK_APP_TOKEN".to_string(),
            api_url: "https://slack.com/api".to_string(),
            reply_in_thread: true,
            max_message_len: SLACK_MAX_MESSAGE_LEN,
            socket_connections: 2,
            socket_reconnect_delay: Duration::from_secs(5),
            socket_idle_timeout: Duration::from_secs(3600),
            socket_ping_interval: Duration::from_secs(10),
            max_inline_retry_after: Duration::from_secs(30),
            inbox_dir: None,
            max_file_bytes: 20 * 1024 * 1024,
            file_download_timeout: Duration::from_secs(120),
            state_file: None,
            catch_up_backoff: Duration::from_secs(1),
            names_decide_access: false,
            ids_let_in: Vec::new(),
        }
    }

    /// Builder: Socket Mode with this app-level token.
    pub fn with_app_token(mut self, token: impl Into<String>) -> Self {
        self.app_token = Some(token.into());
        self
    }

    /// Builder: accept Events API requests signed with this secret.
    pub fn with_signing_secret(mut self, secret: impl Into<String>) -> Self {
        self.signing_secret = Some(secret.into());
        self
    }

    /// Builder: download shared files into this folder.
    pub fn with_inbox_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.inbox_dir = Some(dir.into());
        self
    }

    /// Builder: keep the catch-up state in this file.
    pub fn with_state_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.state_file = Some(path.into());
        self
    }

    /// Builder: Web API base URL.
    pub fn with_api_url(mut self, url: impl Into<String>) -> Self {
        self.api_url = url.into();
        self
    }

    /// The message limit actually used: at least 100, at most Slack's 40 000.
    pub(crate) fn effective_max_len(&self) -> usize {
        self.max_message_len
            .clamp(switchboard_channel::MIN_MESSAGE_LEN, SLACK_MAX_MESSAGE_LEN)
    }
}

impl fmt::Debug for SlackConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let redact = |s: &Option<String>| s.as_ref().map(|_| "<redacted>");
        f.debug_struct("SlackConfig")
            .field("bot_token", &"<redacted>")
            .field("app_token", &redact(&self.app_token))
            .field("signing_secret", &redact(&self.signing_secret))
            .field("bot_token_env", &self.bot_token_env)
            .field("app_token_env", &self.app_token_env)
            .field("api_url", &self.api_url)
            .field("reply_in_thread", &self.reply_in_thread)
            .field("max_message_len", &self.max_message_len)
            .field("socket_connections", &self.socket_connections)
            .field("socket_reconnect_delay", &self.socket_reconnect_delay)
            .field("socket_idle_timeout", &self.socket_idle_timeout)
            .field("socket_ping_interval", &self.socket_ping_interval)
            .field("max_inline_retry_after", &self.max_inline_retry_after)
            .field("inbox_dir", &self.inbox_dir)
            .field("max_file_bytes", &self.max_file_bytes)
            .field("file_download_timeout", &self.file_download_timeout)
            .field("state_file", &self.state_file)
            .field("catch_up_backoff", &self.catch_up_backoff)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_never_shows_secrets() {
        let c = SlackConfig::new("xoxb-secret")
            .with_app_token("xapp-secret")
            .with_signing_secret("sign-secret");
        let s = format!("{c:?}");
        assert!(!s.contains("secret\""), "{s}");
        assert!(!s.contains("xoxb-"), "{s}");
        assert!(!s.contains("xapp-"), "{s}");
        assert!(!s.contains("sign-"), "{s}");
    }
}
