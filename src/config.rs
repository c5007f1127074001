//! Configuration: the `config.toml` schema, loading, and validation with key paths.
//!
//! Unknown keys are warnings (with a did-you-mean); invalid values are errors that name the
//! full key path (`agent.max_iterations: expected an integer`). Secrets are never inline:
//! `*_env` keys name environment variables, read when a channel or provider starts.

mod duration;
mod load;
mod places;

use std::net::SocketAddr;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

pub use duration::{DurationStr, parse_duration};
pub(crate) use load::closest;
pub use load::{ConfigError, Loaded, check_timezone, load, load_str, parse_active_hours};

/// The whole configuration file.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Config {
    pub gateway: GatewayConfig,
    pub agent: AgentConfig,
    pub llm: LlmConfig,
    pub channels: ChannelsConfig,
    pub heartbeat: HeartbeatConfig,
    pub cron: CronConfig,
}

impl Config {
    /// Whether any chat channel names owners (in `allow_from`, besides `"*"`): then the
    /// others it lets in are members ([`crate::agent::member`]).
    pub fn names_owners(&self) -> bool {
        crate::channels::PLATFORMS.iter().any(|c| {
            self.access_for(c)
                .is_some_and(|a| crate::access::names_an_owner(&a))
        })
    }

    /// The access rules of a platform channel; `None` for the others (API, terminal).
    pub fn access_for(&self, channel: &str) -> Option<Access> {
        let c = &self.channels;
        match channel {
            "telegram" => Some(c.telegram.access()),
            "discord" => Some(c.discord.access()),
            "slack" => Some(c.slack.access()),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default)]
pub struct GatewayConfig {
    pub data_dir: PathBuf,
    pub workspace: PathBuf,
    pub skills_dirs: Vec<PathBuf>,
    pub http_listen: String,
    pub max_concurrent_turns: usize,
    pub timezone: String,
}

impl Default for GatewayConfig {
    fn default() -> Self {
        Self {
            data_dir: "data".into(),
            workspace: "workspace".into(),
            skills_dirs: vec!["skills".into()],
            http_listen: "127.0.0.1:8080".into(),
            max_concurrent_turns: 64,
            timezone: "UTC".into(),
        }
    }
}

/// `ip:port`, or `host:port` with a host name the system resolves (`localhost:8080`; its
/// IPv4 address first, which clients given "localhost" try too).
pub(crate) fn listen_addr(s: &str) -> Option<SocketAddr> {
    let s = s.trim();
    if s.is_empty() {
        return None;
    }
    if let Ok(addr) = s.parse() {
        return Some(addr);
    }
    // Only a name and a port: a bare word would otherwise be looked up with no port.
    let (host, port) = s.rsplit_once(':')?;
    if host.is_empty() || port.parse::<u16>().is_err() {
        return None;
    }
    let addrs: Vec<SocketAddr> = std::net::ToSocketAddrs::to_socket_addrs(s).ok()?.collect();
    addrs
        .iter()
        .find(|a| a.is_ipv4())
        .or(addrs.first())
        .copied()
}

impl GatewayConfig {
    /// The HTTP listen address, `None` when HTTP is disabled (`""`) or the address does not
    /// resolve (the config's validation refuses that).
    pub fn http_addr(&self) -> Option<SocketAddr> {
        listen_addr(&self.http_listen)
    }

    pub fn tz(&self) -> chrono_tz::Tz {
        self.timezone.parse().unwrap_or(chrono_tz::UTC)
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default)]
pub struct AgentConfig {
    pub name: String,
    pub max_iterations: u32,
    pub history_messages: usize,
    pub tool_timeout: DurationStr,
    pub restrict_to_workspace: bool,
    /// The variable holding the Brave Search API key `web_search` uses.
    pub web_search_key_env: String,
    /// Brave Search's web search endpoint (or a proxy's).
    pub web_search_url: String,
}

impl Default for AgentConfig {
    fn default() -> Self {
        Self {
            name: "Switchboard".into(),
            max_iterations: 20,
            history_messages: 50,
            tool_timeout: DurationStr::secs(60),
            restrict_to_workspace: true,
            web_search_key_env: "BRAVE_API_KEY".into(),
            web_search_url: "https://api.search.brave.com/res/v1/web/search".into(),
        }
    }
}

/// Which wire protocol the LLM speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Provider {
    Openai,
    Anthropic,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default)]
pub struct LlmConfig {
    pub provider: Provider,
    pub base_url: String,
    pub api_key_env: String,
    pub model: String,
    pub fallback_models: Vec<String>,
    pub max_tokens: u32,
    pub context_window: u32,
    pub max_retries: u32,
    pub request_timeout: DurationStr,
}

impl Default for LlmConfig {
    fn default() -> Self {
        Self {
            provider: Provider::Openai,
            base_url: "https://api.openai.com/v1".into(),
            api_key_env: "OPENAI_API_KEY".into(),
            model: "gpt-4o-mini".into(),
            fallback_models: Vec::new(),
            max_tokens: 4096,
            context_window: 128_000,
            max_retries: 8,
            request_timeout: DurationStr::secs(120),
        }
    }
}

/// Who may talk to the bot in direct messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DmPolicy {
    Pairing,
    Allowlist,
    Open,
}

/// When the bot answers in groups.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GroupPolicy {
    Mention,
    Open,
    Disabled,
}

/// The access keys every channel shares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Access {
    pub dm_policy: DmPolicy,
    pub allow_from: Vec<String>,
    pub group_policy: GroupPolicy,
}

impl Default for Access {
    fn default() -> Self {
        Self {
            dm_policy: DmPolicy::Pairing,
            allow_from: Vec::new(),
            group_policy: GroupPolicy::Mention,
        }
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct ChannelsConfig {
    pub telegram: TelegramConfig,
    pub discord: DiscordConfig,
    pub slack: SlackConfig,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default)]
pub struct TelegramConfig {
    pub enabled: bool,
    pub token_env: String,
    pub api_url: String,
    pub dm_policy: DmPolicy,
    pub allow_from: Vec<String>,
    pub group_policy: GroupPolicy,
    pub pacing: bool,
    /// Longest message sent, in characters (Telegram's limit, or lower).
    pub max_message_len: usize,
}

impl TelegramConfig {
    pub fn access(&self) -> Access {
        Access {
            dm_policy: self.dm_policy,
            allow_from: self.allow_from.clone(),
            group_policy: self.group_policy,
        }
    }
}

impl Default for TelegramConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            token_env: "TELEGRAM_BOT_TOKEN".into(),
            api_url: "https://api.telegram.org".into(),
            dm_policy: DmPolicy::Pairing,
            allow_from: Vec::new(),
            group_policy: GroupPolicy::Mention,
            pacing: true,
            max_message_len: switchboard_channel::TELEGRAM_MAX_MESSAGE_LEN,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default)]
pub struct DiscordConfig {
    pub enabled: bool,
    pub token_env: String,
    pub api_url: String,
    pub dm_policy: DmPolicy,
    pub allow_from: Vec<String>,
    pub group_policy: GroupPolicy,
    /// Longest message sent, in characters (Discord's limit, or lower).
    pub max_message_len: usize,
}

impl DiscordConfig {
    pub fn access(&self) -> Access {
        Access {
            dm_policy: self.dm_policy,
            allow_from: self.allow_from.clone(),
            group_policy: self.group_policy,
        }
    }
}

impl Default for DiscordConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            token_env: "DISCORD_BOT_TOKEN".into(),
            api_url: "https://discord.com".into(),
            dm_policy: DmPolicy::Pairing,
            allow_from: Vec::new(),
            group_policy: GroupPolicy::Mention,
            max_message_len: switchboard_channel::DISCORD_MAX_MESSAGE_LEN,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default)]
pub struct SlackConfig {
    pub enabled: bool,
    pub bot_token_env: String,
    pub app_token_env: String,
    pub signing_secret_env: String,
    pub api_url: String,
    pub dm_policy: DmPolicy,
    pub allow_from: Vec<String>,
    pub group_policy: GroupPolicy,
    pub reply_in_thread: bool,
    /// Longest message sent, in characters (Slack's limit, or lower).
    pub max_message_len: usize,
}

impl SlackConfig {
    /// Why the channel cannot start with the environment as it is (`None`: it can): it
    /// needs the bot token and a way to receive events, Socket Mode or the Events API (which
    /// needs the gateway's HTTP listener, `http_on`).
    pub fn missing_credentials(&self, http_on: bool) -> Option<String> {
        if secret(&self.bot_token_env).is_none() {
            return Some(format!("${} is not set", self.bot_token_env));
        }
        match (
            secret(&self.app_token_env).is_some(),
            secret(&self.signing_secret_env).is_some(),
        ) {
            (false, false) => Some(format!(
                "neither ${} (Socket Mode) nor ${} (Events API) is set",
                self.app_token_env, self.signing_secret_env
            )),
            (false, true) if !http_on => Some(format!(
                "only ${} (Events API) is set, and gateway.http_listen is \"\": Slack could not reach /slack/events",
                self.signing_secret_env
            )),
            _ => None,
        }
    }

    pub fn access(&self) -> Access {
        Access {
            dm_policy: self.dm_policy,
            allow_from: self.allow_from.clone(),
            group_policy: self.group_policy,
        }
    }
}

impl Default for SlackConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            bot_token_env: "SLACK_BOT_TOKEN".into(),
            app_token_env: "SLACK_APP_TOKEN".into(),
            signing_secret_env: "SLACK_SIGNING_SECRET".into(),
            api_url: "https://slack.com/api".into(),
            dm_policy: DmPolicy::Pairing,
            allow_from: Vec::new(),
            group_policy: GroupPolicy::Mention,
            reply_in_thread: true,
            max_message_len: switchboard_channel::SLACK_MAX_MESSAGE_LEN,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default)]
pub struct HeartbeatConfig {
    pub enabled: bool,
    pub interval: DurationStr,
    pub target: String,
    pub active_hours: String,
    /// Model for heartbeat turns; `""` means `llm.model`.
    pub model: String,
}

impl Default for HeartbeatConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            interval: DurationStr::secs(30 * 60),
            target: "last".into(),
            active_hours: String::new(),
            model: String::new(),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default)]
pub struct CronConfig {
    pub enabled: bool,
}

impl Default for CronConfig {
    fn default() -> Self {
        Self { enabled: true }
    }
}

/// Read a secret from the environment variable a `*_env` key names; empty counts as unset.
/// Surrounding whitespace is not part of it (a line end from an env file: `\r`, `\n`).
/// Every secret is read here, so the redactor knows each one before it can be used.
pub fn secret(env_name: &str) -> Option<String> {
    if env_name.is_empty() {
        return None;
    }
    let value = std::env::var(env_name)
        .ok()
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())?;
    switchboard_channel::redact::register(&value);
    Some(value)
}
