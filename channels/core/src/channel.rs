//! The [`Channel`] trait adapters implement, and the [`InboundSender`] they publish through.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio_util::sync::CancellationToken;

use crate::{ChatKey, InboundMessage, OutboundMessage};

/// The markup a platform renders.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// Plain text, no markup.
    Plain,
    /// Markdown as written (Discord, the API channel).
    Markdown,
    /// Telegram's HTML subset.
    TelegramHtml,
    /// Slack mrkdwn.
    SlackMrkdwn,
}

/// What a channel can do, as data rather than as optional trait methods.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capabilities {
    /// Sent messages can be edited (streaming by edits).
    pub edits: bool,
    /// A typing indicator exists.
    pub typing: bool,
    /// Conversations can be threaded.
    pub threads: bool,
    /// Longest message the platform accepts, in characters of visible text.
    pub max_message_len: usize,
    pub dialect: Dialect,
}

/// The platform accepted a message; `message_id` is its id there, when it has one.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SendReceipt {
    pub message_ids: Vec<String>,
}

/// Why a send failed, so the outbox knows whether and when to retry.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SendError {
    /// The platform asked us to wait (HTTP 429 `retry_after` / `Retry-After`).
    #[error("rate limited: retry after {0:?}")]
    RetryAfter(Duration),
    /// Network trouble or a 5xx: worth retrying with backoff.
    #[error("temporary failure: {0}")]
    Transient(String),
    /// The platform refused for good (chat gone, bot blocked): retrying will not help.
    #[error("refused: {0}")]
    Permanent(String),
}

/// Why a channel stopped running.
#[derive(Debug, thiserror::Error)]
pub enum ChannelError {
    /// Credentials were refused; the channel stays down (the others keep running).
    #[error("credentials refused: {0}")]
    Unauthorized(String),
    #[error("{0}")]
    Other(String),
}

/// What happened to a published message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Published {
    /// Durably stored; it will be handled.
    Accepted,
    /// Seen before (a platform redelivery); dropped.
    Duplicate,
    /// Not allowed in (access policy, group without a mention); dropped on purpose.
    Ignored,
}

/// Publishing failed; the adapter must not acknowledge the message upstream, so the platform
/// redelivers it later.
#[derive(Debug, Clone, thiserror::Error)]
#[error("could not publish: {0}")]
pub struct PublishError(pub String);

/// The gateway side of intake. Implemented by the gateway, called by adapters.
#[async_trait]
pub trait InboundSink: Send + Sync + 'static {
    /// Store the message durably (or drop it as a duplicate / not allowed). When this
    /// returns `Ok`, the adapter may acknowledge the message upstream.
    async fn publish(&self, msg: InboundMessage) -> Result<Published, PublishError>;

    /// [`InboundSink::publish`] for several messages in order (one poll's worth), which the
    /// gateway stores with one durable write: one result per message. On `Err` none of
    /// them may be acknowledged; the ones already stored are dropped as duplicates when
    /// the platform redelivers them.
    async fn publish_many(
        &self,
        msgs: Vec<InboundMessage>,
    ) -> Result<Vec<Published>, PublishError> {
        let mut results = Vec::with_capacity(msgs.len());
        for msg in msgs {
            results.push(self.publish(msg).await?);
        }
        Ok(results)
    }

    /// The adapter's connection went up or down; `detail` says why, for `/readyz`.
    fn set_connected(&self, channel: &str, connected: bool, detail: &str);

    /// A chat moved to a new key for good (a Telegram group that became a supergroup has a
    /// new id): what the gateway keeps by chat (its conversation, its reminders) follows it.
    /// Told again (each side of the move reports it), it changes nothing more.
    async fn moved(&self, from: &ChatKey, to: &ChatKey) -> Result<(), PublishError> {
        let _ = (from, to);
        Ok(())
    }
}

/// Cheap, cloneable handle an adapter publishes through.
#[derive(Clone)]
pub struct InboundSender(Arc<dyn InboundSink>);

impl InboundSender {
    pub fn new(sink: Arc<dyn InboundSink>) -> Self {
        Self(sink)
    }

    pub async fn publish(&self, msg: InboundMessage) -> Result<Published, PublishError> {
        self.0.publish(msg).await
    }

    pub async fn publish_many(
        &self,
        msgs: Vec<InboundMessage>,
    ) -> Result<Vec<Published>, PublishError> {
        self.0.publish_many(msgs).await
    }

    /// Report that a chat moved to a new key ([`InboundSink::moved`]).
    pub async fn moved(&self, from: &ChatKey, to: &ChatKey) -> Result<(), PublishError> {
        self.0.moved(from, to).await
    }

    /// Report the connection state; `detail` is served by `/readyz`, so secrets are
    /// blotted out of it here, whatever error text an adapter built it from.
    pub fn set_connected(&self, channel: &str, connected: bool, detail: &str) {
        self.0
            .set_connected(channel, connected, &crate::redact(detail))
    }
}

/// A chat platform. Small on purpose: optional behaviour is described by [`Capabilities`].
#[async_trait]
pub trait Channel: Send + Sync + 'static {
    /// The channel part of every `ChatKey` this adapter produces (`telegram`).
    fn name(&self) -> &str;

    fn capabilities(&self) -> Capabilities;

    /// Receive until `shutdown` is cancelled, publishing every message through `inbound`
    /// before acknowledging it upstream. Reconnects on its own; returns only on shutdown or
    /// on a fault it cannot recover from (such as refused credentials).
    async fn run(
        &self,
        inbound: InboundSender,
        shutdown: CancellationToken,
    ) -> Result<(), ChannelError>;

    /// Deliver one reply: render, split at the platform limit, send in order.
    async fn send(&self, msg: &OutboundMessage) -> Result<SendReceipt, SendError>;

    /// Show a typing indicator in the chat (no-op where the platform has none).
    async fn typing(&self, key: &ChatKey) -> Result<(), SendError>;

    /// Download the files [`Channel::run`] left on `msg` (see [`crate::files`]) into the
    /// workspace inbox: an attachment for each, or a note in the text for one that could
    /// not come. The gateway calls this before the message's turn. By default a channel
    /// leaves no files to fetch.
    async fn fetch_files(&self, _msg: &mut InboundMessage) {}
}
