//! The Slack Web API calls the adapter makes, over slack-morphism's hyper client.
//!
//! The connector allows plain `http://` so `api_url` can point at a proxy or a fake.
//! Errors are reduced to [`WebError`], which knows how to become a [`SendError`].

use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use slack_morphism::errors::SlackClientError;
use slack_morphism::hyper_tokio::{SlackClientHyperConnector, SlackClientHyperHttpsConnector};
use slack_morphism::{SlackApiToken, SlackApiTokenValue, SlackClient};
use switchboard_channel::{ChannelError, SendError, redact};

/// The connector type used for both the Web API and Socket Mode.
pub(crate) type Connector = SlackClientHyperHttpsConnector;

/// Who the bot is (`auth.test`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BotIdentity {
    pub user_id: String,
    pub bot_id: Option<String>,
    /// The workspace the bot token belongs to.
    pub team_id: Option<String>,
}

#[cfg(test)]
impl BotIdentity {
    /// The bot of the unit tests: user `UBOT`, bot `BBOT`, workspace unknown.
    pub(crate) fn test() -> Self {
        BotIdentity {
            user_id: "UBOT".into(),
            bot_id: Some("BBOT".into()),
            team_id: None,
        }
    }
}

/// A failed Web API call.
#[derive(Debug, Clone, thiserror::Error)]
pub(crate) enum WebError {
    #[error("rate limited (retry after {0:?})")]
    RateLimited(Option<Duration>),
    /// `{"ok":false,"error":code}`.
    #[error("slack error: {0}")]
    Api(String),
    #[error("http status {0}")]
    Http(u16),
    #[error("network: {0}")]
    Network(String),
}

/// API error codes that mean the token itself is refused.
const AUTH_ERRORS: &[&str] = &[
    "not_authed",
    "invalid_auth",
    "account_inactive",
    "token_revoked",
    "token_expired",
    "not_allowed_token_type",
];

/// API error codes worth retrying.
const TRANSIENT_ERRORS: &[&str] = &[
    "internal_error",
    "fatal_error",
    "service_unavailable",
    "request_timeout",
    "ratelimited",
];

impl WebError {
    fn from_client(e: SlackClientError) -> Self {
        match e {
            SlackClientError::RateLimitError(r) => WebError::RateLimited(r.retry_after),
            SlackClientError::ApiError(a) => WebError::Api(short(&a.code)),
            SlackClientError::HttpError(h) => WebError::Http(h.status_code.as_u16()),
            other => WebError::Network(short(&other.to_string())),
        }
    }

    /// The token was refused.
    pub fn is_auth(&self) -> bool {
        matches!(self, WebError::Api(c) if AUTH_ERRORS.contains(&c.as_str()))
            || matches!(self, WebError::Http(401 | 403))
    }

    /// What the outbox should do about it.
    pub fn to_send_error(&self) -> SendError {
        match self {
            WebError::RateLimited(d) => SendError::RetryAfter(d.unwrap_or(Duration::from_secs(1))),
            WebError::Api(c) if TRANSIENT_ERRORS.contains(&c.as_str()) => {
                SendError::Transient(c.clone())
            }
            WebError::Api(c) => SendError::Permanent(c.clone()),
            WebError::Http(s) if *s >= 500 || *s == 408 => SendError::Transient(self.to_string()),
            WebError::Http(_) => SendError::Permanent(self.to_string()),
            WebError::Network(m) => SendError::Transient(m.clone()),
        }
    }
}

/// Keep error text short (slack-morphism errors carry whole response bodies), and free of
/// secrets: a body may quote the request's `Authorization` header.
pub(crate) fn short(s: &str) -> String {
    redact(s).chars().take(300).collect()
}

#[derive(Serialize)]
struct PostMessage<'a> {
    channel: &'a str,
    text: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    thread_ts: Option<&'a str>,
    mrkdwn: bool,
}

#[derive(Deserialize)]
struct Posted {
    ts: String,
}

#[derive(Serialize)]
struct AddReaction<'a> {
    channel: &'a str,
    name: &'a str,
    timestamp: &'a str,
}

#[derive(Serialize)]
struct Empty {}

#[derive(Deserialize)]
struct Ignored {}

#[derive(Deserialize)]
struct AuthTest {
    user_id: String,
    bot_id: Option<String>,
    team_id: Option<String>,
}

#[derive(Deserialize)]
struct UsersInfo {
    user: UserInfo,
}

#[derive(Deserialize)]
struct UserInfo {
    name: Option<String>,
    real_name: Option<String>,
    profile: Option<UserProfile>,
}

#[derive(Deserialize)]
struct UserProfile {
    display_name: Option<String>,
    real_name: Option<String>,
}

/// A user's names: the handle (`name`) and the name to show.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct UserNames {
    pub username: Option<String>,
    pub display_name: String,
}

/// The first messages of a thread (`conversations.replies`), its root first.
#[derive(Debug, Clone, Default, Deserialize)]
pub(crate) struct Thread {
    #[serde(default)]
    pub messages: Vec<ThreadMessage>,
    /// More messages follow those read.
    #[serde(default)]
    pub has_more: bool,
}

/// One message of a thread (`conversations.replies`): who posted it and what it says, and on
/// the root, who replied.
#[derive(Debug, Clone, Default, Deserialize)]
pub(crate) struct ThreadMessage {
    pub user: Option<String>,
    pub bot_id: Option<String>,
    #[serde(default)]
    pub ts: String,
    /// Slack's mrkdwn, as posted.
    #[serde(default)]
    pub text: String,
    /// The name a bot posted under.
    pub username: Option<String>,
    /// On the root: up to 5 users who replied.
    #[serde(default)]
    pub reply_users: Vec<String>,
    /// Files shared with the message (only counted).
    #[serde(default)]
    pub files: Vec<serde::de::IgnoredAny>,
}

/// One page of `conversations.history` or `conversations.replies`: the messages as Slack
/// sent them (JSON, fed to intake like an event's), and where the next page starts.
#[derive(Debug, Deserialize)]
pub(crate) struct Page {
    #[serde(default)]
    pub messages: Vec<serde_json::Value>,
    #[serde(default)]
    pub has_more: bool,
    #[serde(default)]
    response_metadata: Option<PageMeta>,
}

#[derive(Debug, Deserialize)]
struct PageMeta {
    #[serde(default)]
    next_cursor: Option<String>,
}

impl Page {
    /// The cursor of the next page, when there is one.
    pub fn next_cursor(&self) -> Option<&str> {
        self.response_metadata
            .as_ref()
            .and_then(|m| m.next_cursor.as_deref())
            .filter(|c| !c.is_empty())
    }
}

#[derive(Deserialize)]
struct ConnectionsOpen {
    #[allow(dead_code)]
    url: String,
}

/// Messages of a thread read to tell whether the bot took part in it, and what was said.
pub(crate) const THREAD_LOOKUP: usize = 50;

/// Messages asked for per page of a catch-up (Slack's default; at most 999).
pub(crate) const CATCH_UP_PAGE: usize = 100;

/// Web API client bound to the bot token.
pub(crate) struct WebApi {
    client: Arc<SlackClient<Connector>>,
    bot_token: SlackApiToken,
}

impl WebApi {
    /// A client for `api_url` (trailing `/` ignored).
    pub fn new(api_url: &str, bot_token: &str) -> Result<Self, ChannelError> {
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_native_roots()
            .map_err(|e| ChannelError::Other(format!("slack: no TLS root certificates: {e}")))?
            .https_or_http()
            .enable_http1()
            .build();
        let connector = SlackClientHyperConnector::with_connector(https)
            .with_slack_api_url(api_url.trim_end_matches('/'));
        Ok(Self {
            client: Arc::new(SlackClient::new(connector)),
            bot_token: SlackApiToken::new(SlackApiTokenValue(bot_token.to_string())),
        })
    }

    /// The underlying client (Socket Mode shares it).
    pub fn client(&self) -> Arc<SlackClient<Connector>> {
        self.client.clone()
    }

    async fn call<RQ, RS>(
        &self,
        token: &SlackApiToken,
        method: &str,
        req: &RQ,
    ) -> Result<RS, WebError>
    where
        RQ: Serialize + Send + Sync,
        RS: for<'de> Deserialize<'de> + Send,
    {
        self.client
            .open_session(token)
            .http_session_api
            .http_post(method, req, None)
            .await
            .map_err(WebError::from_client)
    }

    /// `auth.test`: the bot's user id and bot id.
    pub async fn auth_test(&self) -> Result<BotIdentity, WebError> {
        let r: AuthTest = self.call(&self.bot_token, "auth.test", &Empty {}).await?;
        Ok(BotIdentity {
            user_id: r.user_id,
            bot_id: r.bot_id,
            team_id: r.team_id,
        })
    }

    /// `apps.connections.open` with the app token, to check it before Socket Mode starts.
    pub async fn check_app_token(&self, app_token: &str) -> Result<(), WebError> {
        let token = SlackApiToken::new(SlackApiTokenValue(app_token.to_string()));
        let _: ConnectionsOpen = self
            .call(&token, "apps.connections.open", &Empty {})
            .await?;
        Ok(())
    }

    /// `users.info`: the user's handle and display name (profile display name, else real
    /// name, else handle).
    pub async fn user_names(&self, user: &str) -> Result<Option<UserNames>, WebError> {
        let params = vec![("user", Some(user))];
        let r: UsersInfo = self
            .client
            .open_session(&self.bot_token)
            .http_session_api
            .http_get("users.info", &params, None)
            .await
            .map_err(WebError::from_client)?;
        let u = r.user;
        let nonempty = |s: Option<String>| s.filter(|x| !x.trim().is_empty());
        let profile = u.profile.unwrap_or(UserProfile {
            display_name: None,
            real_name: None,
        });
        let display = nonempty(profile.display_name)
            .or_else(|| nonempty(profile.real_name))
            .or_else(|| nonempty(u.real_name))
            .or_else(|| nonempty(u.name.clone()));
        Ok(display.map(|d| UserNames {
            username: nonempty(u.name),
            display_name: d,
        }))
    }

    /// `conversations.replies`: the first [`THREAD_LOOKUP`] messages of thread `ts`, its
    /// root first.
    pub async fn thread(&self, channel: &str, ts: &str) -> Result<Thread, WebError> {
        let limit = THREAD_LOOKUP.to_string();
        let params = vec![
            ("channel", Some(channel)),
            ("ts", Some(ts)),
            ("limit", Some(limit.as_str())),
        ];
        let r: Thread = self
            .client
            .open_session(&self.bot_token)
            .http_session_api
            .http_get("conversations.replies", &params, None)
            .await
            .map_err(WebError::from_client)?;
        if r.messages.is_empty() {
            return Err(WebError::Api("thread_not_found".into()));
        }
        Ok(r)
    }

    /// `conversations.history`: the top-level messages (and thread broadcasts) of `channel`
    /// posted after `oldest` (not `oldest` itself), newest first, [`CATCH_UP_PAGE`] a page.
    pub async fn history_after(
        &self,
        channel: &str,
        oldest: &str,
        cursor: Option<&str>,
    ) -> Result<Page, WebError> {
        self.page_after("conversations.history", channel, None, oldest, cursor)
            .await
    }

    /// `conversations.replies`: the replies of thread `root` in `channel` posted after
    /// `oldest`, oldest first (Slack puts the root first on the first page whatever
    /// `oldest` says), [`CATCH_UP_PAGE`] a page from `cursor`.
    pub async fn replies_after(
        &self,
        channel: &str,
        root: &str,
        oldest: &str,
        cursor: Option<&str>,
    ) -> Result<Page, WebError> {
        self.page_after("conversations.replies", channel, Some(root), oldest, cursor)
            .await
    }

    /// One page of `method` (history, or the replies of thread `root`) after `oldest`.
    async fn page_after(
        &self,
        method: &str,
        channel: &str,
        root: Option<&str>,
        oldest: &str,
        cursor: Option<&str>,
    ) -> Result<Page, WebError> {
        let limit = CATCH_UP_PAGE.to_string();
        let params = [
            ("channel", Some(channel)),
            ("ts", root),
            ("oldest", Some(oldest)),
            ("inclusive", Some("false")),
            ("limit", Some(limit.as_str())),
            ("cursor", cursor),
        ];
        self.get(method, &params).await
    }

    async fn get<RS>(&self, method: &str, params: &[(&str, Option<&str>)]) -> Result<RS, WebError>
    where
        RS: for<'de> Deserialize<'de> + Send,
    {
        self.client
            .open_session(&self.bot_token)
            .http_session_api
            .http_get(method, &params.to_vec(), None)
            .await
            .map_err(WebError::from_client)
    }

    /// `chat.postMessage` with `mrkdwn: true`; returns the new message's ts.
    pub async fn post_message(
        &self,
        channel: &str,
        thread_ts: Option<&str>,
        text: &str,
    ) -> Result<String, WebError> {
        let req = PostMessage {
            channel,
            text,
            thread_ts,
            mrkdwn: true,
        };
        let r: Posted = self.call(&self.bot_token, "chat.postMessage", &req).await?;
        Ok(r.ts)
    }

    /// `reactions.add`; `already_reacted` counts as success.
    pub async fn add_reaction(&self, channel: &str, ts: &str, name: &str) -> Result<(), WebError> {
        let req = AddReaction {
            channel,
            name,
            timestamp: ts,
        };
        match self
            .call::<_, Ignored>(&self.bot_token, "reactions.add", &req)
            .await
        {
            Ok(_) => Ok(()),
            Err(WebError::Api(c)) if c == "already_reacted" => Ok(()),
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_map_to_send_errors() {
        assert_eq!(
            WebError::RateLimited(Some(Duration::from_secs(7))).to_send_error(),
            SendError::RetryAfter(Duration::from_secs(7))
        );
        assert!(matches!(
            WebError::Api("channel_not_found".into()).to_send_error(),
            SendError::Permanent(_)
        ));
        assert!(matches!(
            WebError::Api("internal_error".into()).to_send_error(),
            SendError::Transient(_)
        ));
        assert!(matches!(
            WebError::Http(502).to_send_error(),
            SendError::Transient(_)
        ));
        assert!(matches!(
            WebError::Http(404).to_send_error(),
            SendError::Permanent(_)
        ));
        assert!(WebError::Api("invalid_auth".into()).is_auth());
        assert!(!WebError::Api("channel_not_found".into()).is_auth());
    }
}
