//! The REST calls the adapter makes itself, on the reqwest client serenity already links.
//!
//! serenity's `Http` drops a 429's `retry_after` when its rate limiter is disabled (the
//! proxy mode), so posts and typing go through here, where status, headers and body stay
//! visible.

use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;
use serenity::model::id::ChannelId;
use switchboard_channel::{ChannelError, redact};

/// Why a REST call failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum RestError {
    /// HTTP 429: wait this long.
    #[error("rate limited: retry after {0:?}")]
    RateLimited(Duration),
    /// HTTP 401: the token was refused.
    #[error("the bot token was refused (HTTP 401)")]
    Unauthorized,
    /// Any other unsuccessful status, with Discord's message and JSON error code (10003
    /// Unknown Channel, 50013 Missing Permissions…).
    #[error("HTTP {status}: {message}{}", code.map(|c| format!(" (code {c})")).unwrap_or_default())]
    Status {
        status: u16,
        code: Option<u64>,
        message: String,
    },
    /// Connection trouble or timeout.
    #[error("network error: {0}")]
    Network(String),
    /// A successful response that is not what Discord sends.
    #[error("unexpected response: {0}")]
    Decode(String),
}

impl RestError {
    /// Worth retrying with backoff (5xx or network).
    pub(crate) fn is_transient(&self) -> bool {
        match self {
            RestError::Network(_) => true,
            RestError::Status { status, .. } => *status >= 500,
            _ => false,
        }
    }

    /// Discord's JSON error code, when it gave one.
    pub(crate) fn code(&self) -> Option<u64> {
        match self {
            RestError::Status { code, .. } => *code,
            _ => None,
        }
    }
}

/// Discord's "Unknown Channel": the id is no channel the bot can reach (a user id, say).
pub(crate) const UNKNOWN_CHANNEL: u64 = 10003;
/// "Missing Access": the bot cannot see the channel.
pub(crate) const MISSING_ACCESS: u64 = 50001;
/// "Missing Permissions": it sees the channel but lacks a permission for the call.
pub(crate) const MISSING_PERMISSIONS: u64 = 50013;

/// A channel as `GET /channels/{id}` and `POST /users/@me/channels` describe it: the few
/// fields the adapter reads.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct ChannelInfo {
    pub(crate) id: ChannelId,
    /// Discord's channel type (0 text, 1 DM, 11/12 threads, 15 forum…).
    #[serde(rename = "type")]
    pub(crate) kind: u8,
    #[serde(default)]
    pub(crate) name: Option<String>,
    #[serde(default)]
    pub(crate) parent_id: Option<ChannelId>,
}

/// A minimal Discord REST client bound to one token and one base URL.
#[derive(Clone)]
pub(crate) struct Rest {
    client: reqwest::Client,
    /// `{api_url}/api/v10`.
    base: String,
    /// `Bot <token>`; never logged.
    auth: String,
}

impl Rest {
    pub(crate) fn new(token: &str, api_url: &str) -> Result<Self, ChannelError> {
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(30))
            .connect_timeout(Duration::from_secs(10))
            .user_agent("DiscordBot (https://github.com/switchboard, 0.1) switchboard")
            .build()
            .map_err(|e| ChannelError::Other(format!("discord: building the HTTP client: {e}")))?;
        let token = token.trim();
        let auth = if token.starts_with("Bot ") {
            token.to_string()
        } else {
            format!("Bot {token}")
        };
        Ok(Self {
            client,
            base: format!("{}/api/v10", api_url.trim_end_matches('/')),
            auth,
        })
    }

    /// The token as serenity wants it.
    pub(crate) fn token(&self) -> &str {
        &self.auth
    }

    async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<&Value>,
        authorized: bool,
    ) -> Result<Option<Value>, RestError> {
        let mut req = self.client.request(method, format!("{}{path}", self.base));
        if authorized {
            req = req.header("authorization", &self.auth);
        }
        if let Some(b) = body {
            req = req.json(b);
        }
        let network =
            |e: reqwest::Error| RestError::Network(redact(&e.without_url().to_string()).into());
        let resp = req.send().await.map_err(network)?;
        let status = resp.status();
        let retry_header = resp
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<f64>().ok());
        let bytes = resp.bytes().await.map_err(network)?;
        let json: Option<Value> = serde_json::from_slice(&bytes).ok();
        if status.is_success() {
            return Ok(json);
        }
        Err(match status.as_u16() {
            401 => RestError::Unauthorized,
            429 => {
                let body_secs = json.as_ref().and_then(|j| j["retry_after"].as_f64());
                let secs = body_secs.or(retry_header).unwrap_or(1.0);
                RestError::RateLimited(Duration::from_secs_f64(secs.clamp(0.0, 3600.0)))
            }
            // The server's own words: a proxy may well quote the request's headers.
            code => RestError::Status {
                status: code,
                code: json.as_ref().and_then(|j| j["code"].as_u64()),
                message: redact(
                    json.as_ref()
                        .and_then(|j| j["message"].as_str())
                        .unwrap_or("(no message)"),
                )
                .into(),
            },
        })
    }

    /// `GET /users/@me`: the bot's user id and username.
    pub(crate) async fn current_user(&self) -> Result<(u64, String), RestError> {
        let v = self
            .call(reqwest::Method::GET, "/users/@me", None, true)
            .await?
            .unwrap_or_default();
        let id = v["id"].as_str().and_then(|s| s.parse().ok());
        let name = v["username"].as_str().unwrap_or_default().to_string();
        id.map(|id| (id, name))
            .ok_or_else(|| RestError::Decode("/users/@me without an id".into()))
    }

    /// `GET /gateway`: the websocket URL serenity will connect to.
    pub(crate) async fn gateway_url(&self) -> Result<String, RestError> {
        let v = self
            .call(reqwest::Method::GET, "/gateway", None, false)
            .await?
            .unwrap_or_default();
        match v["url"].as_str() {
            Some(u) if u.starts_with("ws://") || u.starts_with("wss://") => Ok(u.to_string()),
            _ => Err(RestError::Decode(
                "/gateway answered without a ws:// or wss:// url".into(),
            )),
        }
    }

    /// `POST /channels/{id}/messages`; returns the new message id.
    pub(crate) async fn create_message(
        &self,
        channel_id: u64,
        body: &Value,
    ) -> Result<String, RestError> {
        let path = format!("/channels/{channel_id}/messages");
        let v = self
            .call(reqwest::Method::POST, &path, Some(body), true)
            .await?
            .unwrap_or_default();
        v["id"]
            .as_str()
            .map(str::to_string)
            .ok_or_else(|| RestError::Decode("message post answered without an id".into()))
    }

    /// `GET /channels/{id}/messages?after=…&limit=100`: the first messages after `after`, in
    /// the order they were sent (Discord answers newest first).
    pub(crate) async fn messages_after(
        &self,
        channel_id: u64,
        after: u64,
    ) -> Result<Vec<serenity::model::channel::Message>, RestError> {
        let path = format!("/channels/{channel_id}/messages?after={after}&limit=100");
        let v = self
            .call(reqwest::Method::GET, &path, None, true)
            .await?
            .unwrap_or_default();
        let mut msgs: Vec<serenity::model::channel::Message> =
            serde_json::from_value(v).map_err(|e| RestError::Decode(format!("messages: {e}")))?;
        msgs.sort_by_key(|m| m.id);
        Ok(msgs)
    }

    /// `GET /channels/{id}`: the channel's type, name and parent.
    pub(crate) async fn channel(&self, channel_id: u64) -> Result<ChannelInfo, RestError> {
        let path = format!("/channels/{channel_id}");
        let v = self
            .call(reqwest::Method::GET, &path, None, true)
            .await?
            .unwrap_or_default();
        serde_json::from_value(v).map_err(|e| RestError::Decode(format!("channel: {e}")))
    }

    /// `POST /users/@me/channels`: open (or find) the DM channel with user `user_id`; returns
    /// its channel id.
    pub(crate) async fn open_dm(&self, user_id: u64) -> Result<u64, RestError> {
        let body = serde_json::json!({ "recipient_id": user_id.to_string() });
        let v = self
            .call(
                reqwest::Method::POST,
                "/users/@me/channels",
                Some(&body),
                true,
            )
            .await?
            .unwrap_or_default();
        let dm: ChannelInfo =
            serde_json::from_value(v).map_err(|e| RestError::Decode(format!("DM channel: {e}")))?;
        Ok(dm.id.get())
    }

    /// `POST /channels/{id}/typing`.
    pub(crate) async fn typing(&self, channel_id: u64) -> Result<(), RestError> {
        let path = format!("/channels/{channel_id}/typing");
        self.call(reqwest::Method::POST, &path, None, true)
            .await
            .map(|_| ())
    }
}
