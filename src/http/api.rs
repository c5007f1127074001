//! The `api` channel: `POST /v1/chat/completions`, OpenAI-compatible (stream and not).
//!
//! The session key is `api:<user>` from the request's `user` field (`api:default` without
//! it); the last user message is the input and the gateway's own session is the history.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use axum::extract::{ConnectInfo, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use switchboard_channel::{
    Capabilities, Channel, ChannelError, ChatKey, Dialect, InboundMessage, InboundSender,
    OutboundKind, OutboundMessage, Published, SendError, SendReceipt, Sender, TokenUsage,
};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use super::access::access;
use crate::agent::StreamRegistry;
use crate::gateway::Shared;
use crate::llm::DeltaSink;

mod request;
mod stream;

use stream::{StreamedReply, stream_reply};

/// Largest `POST /v1/chat/completions` body.
const BODY_LIMIT: usize = 32 * 1024 * 1024;

/// Longest a request (or `switchboard chat`) waits for its reply; for a stream, longest
/// without a piece of it. A turn's own limits (steps, LLM retries and timeouts, tool
/// timeouts) bound it too, but may add up to hours as configured, so this is no bound on
/// a turn: past it, the request gives up and its turn is stopped.
pub const REPLY_TIMEOUT: Duration = Duration::from_secs(30 * 60);

struct Waiter {
    key: ChatKey,
    reply: oneshot::Sender<OutboundMessage>,
    /// Unbounded: a slow reader must not lose text (an answer is at most `max_tokens`).
    deltas: Option<mpsc::UnboundedSender<String>>,
}

/// Replies for API requests, routed to the HTTP request waiting for them. The CLI's `cli`
/// channel is another instance under its own name.
pub struct ApiChannel {
    name: &'static str,
    waiters: Mutex<HashMap<String, Waiter>>,
}

impl Default for ApiChannel {
    fn default() -> Self {
        Self::named("api")
    }
}

/// Stops waiting for a reply when the request ends. A request that ends before its reply
/// came (its client went away: the Stop button of a chat UI, a client's timeout) withdraws
/// its message: its turn stops as by `/stop`, or it leaves the queue, so the abandoned
/// answer neither holds up the user's next request nor enters the conversation.
struct WaiterGuard<'a> {
    api: &'a ApiChannel,
    bus: &'a crate::bus::Bus,
    key: ChatKey,
    id: String,
    armed: bool,
    /// Set when the request went away, for a publish still under way to withdraw the
    /// message once it is queued.
    gone: Option<Arc<std::sync::atomic::AtomicBool>>,
}

impl WaiterGuard<'_> {
    /// Another guard takes over.
    fn disarm(mut self) {
        self.armed = false;
    }
}

impl Drop for WaiterGuard<'_> {
    fn drop(&mut self) {
        if !self.armed || !self.api.forget(&self.id) {
            return;
        }
        if let Some(gone) = &self.gone {
            gone.store(true, std::sync::atomic::Ordering::SeqCst);
        }
        if self.bus.withdraw(&self.key, &self.id) {
            tracing::info!(key = %self.key, id = %self.id, "the request went away: its turn is stopped");
        }
    }
}

impl ApiChannel {
    pub fn named(name: &'static str) -> Self {
        Self {
            name,
            waiters: Mutex::new(HashMap::new()),
        }
    }

    /// Publish `msg` on the bus and wait for its reply.
    pub async fn ask(
        &self,
        bus: &Arc<crate::bus::Bus>,
        msg: InboundMessage,
        timeout: Duration,
    ) -> Result<OutboundMessage, String> {
        let id = msg.id.clone();
        let rx = self.wait_for(&id, &msg.key, None);
        let key = msg.key.clone();
        let (publishing, gone) = publish_withdrawable(bus, msg);
        let _guard = WaiterGuard {
            api: self,
            bus,
            key,
            id,
            armed: true,
            gone: Some(gone),
        };
        match publishing.await {
            Ok(Ok(Published::Accepted)) => {}
            Ok(Ok(other)) => return Err(format!("message not accepted: {other:?}")),
            Ok(Err(e)) => return Err(e.to_string()),
            Err(e) => return Err(format!("the message could not be taken: {e}")),
        }
        match tokio::time::timeout(timeout, rx).await {
            // The model could not answer: the caller (`chat`) fails with that message.
            Ok(Ok(reply)) if reply.kind == OutboundKind::Error => Err(reply.text),
            Ok(Ok(reply)) => Ok(reply),
            Ok(Err(_)) => Err("the reply was lost".into()),
            Err(_) => Err(format!("no reply within {timeout:?}")),
        }
    }

    /// Stop waiting for the reply to `id`; whether it had not come yet.
    fn forget(&self, id: &str) -> bool {
        self.waiters
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(id)
            .is_some()
    }

    fn wait_for(
        &self,
        id: &str,
        key: &ChatKey,
        deltas: Option<mpsc::UnboundedSender<String>>,
    ) -> oneshot::Receiver<OutboundMessage> {
        let (tx, rx) = oneshot::channel();
        let waiter = Waiter {
            key: key.clone(),
            reply: tx,
            deltas,
        };
        self.waiters
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id.to_string(), waiter);
        rx
    }
}

/// Publish `msg` in a task of its own, which withdraws the message once it is queued should
/// the flag returned be set by then: its waiter was gone while it was being stored (a
/// [`WaiterGuard`] given the flag sets it when it leaves, and withdraws it itself later).
fn publish_withdrawable(
    bus: &Arc<crate::bus::Bus>,
    msg: InboundMessage,
) -> (
    tokio::task::JoinHandle<Result<Published, crate::bus::BusError>>,
    Arc<std::sync::atomic::AtomicBool>,
) {
    let gone = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (bus, key, id, flag) = (bus.clone(), msg.key.clone(), msg.id.clone(), gone.clone());
    let publishing = tokio::spawn(async move {
        let published = bus.publish(msg).await;
        if matches!(published, Ok(Published::Accepted))
            && flag.load(std::sync::atomic::Ordering::SeqCst)
        {
            bus.withdraw(&key, &id);
        }
        published
    });
    (publishing, gone)
}

impl ApiChannel {
    /// At shutdown: tell every request still waiting, so the HTTP server can drain. Its turn
    /// is interrupted; the message stays in the conversation and runs after the restart,
    /// but its answer can no longer come back over this request.
    pub fn close_waiters(&self) {
        let waiters = std::mem::take(&mut *self.waiters.lock().unwrap_or_else(|p| p.into_inner()));
        for (id, w) in waiters {
            let mut reply = OutboundMessage::new(
                w.key,
                "⚠️ The gateway is restarting. Your message is kept and answered once it is back, but not over this request: ask again in a moment to see the answer.",
            );
            reply.kind = OutboundKind::Error;
            reply.in_reply_to_inbound = Some(id);
            let _ = w.reply.send(reply);
        }
    }
}

impl StreamRegistry for ApiChannel {
    fn sink_for(&self, inbound_id: &str) -> Option<DeltaSink> {
        let tx = self
            .waiters
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(inbound_id)?
            .deltas
            .clone()?;
        Some(Arc::new(move |d: &str| {
            // Fails only once the request is gone.
            let _ = tx.send(d.to_string());
        }))
    }

    fn stopped(&self, inbound_id: &str) {
        self.answer_now(inbound_id, "Stopped.", None);
    }

    fn silent(&self, inbound_id: &str, usage: TokenUsage) {
        self.answer_now(inbound_id, "", Some(usage));
    }
}

impl ApiChannel {
    /// Answer the request waiting for `inbound_id`, if one still does, with `text`.
    fn answer_now(&self, inbound_id: &str, text: &str, usage: Option<TokenUsage>) {
        let waiter = self
            .waiters
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(inbound_id);
        if let Some(w) = waiter {
            let mut reply = OutboundMessage::new(w.key, text);
            reply.in_reply_to_inbound = Some(inbound_id.to_string());
            reply.usage = usage;
            let _ = w.reply.send(reply);
        }
    }
}

#[async_trait]
impl Channel for ApiChannel {
    fn name(&self) -> &str {
        self.name
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            edits: false,
            typing: false,
            threads: false,
            max_message_len: usize::MAX,
            dialect: Dialect::Markdown,
        }
    }

    async fn run(
        &self,
        _inbound: InboundSender,
        shutdown: CancellationToken,
    ) -> Result<(), ChannelError> {
        shutdown.cancelled().await;
        Ok(())
    }

    async fn send(&self, msg: &OutboundMessage) -> Result<SendReceipt, SendError> {
        if msg.kind == OutboundKind::Progress {
            return Ok(SendReceipt::default());
        }
        let waiter = msg.in_reply_to_inbound.as_ref().and_then(|id| {
            self.waiters
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(id)
        });
        match waiter {
            Some(w) => {
                let _ = w.reply.send(msg.clone());
            }
            // Nobody waits (the client left, or this is a replay after a restart).
            None => tracing::debug!(key = %msg.key, "API reply with no waiting request"),
        }
        Ok(SendReceipt::default())
    }

    async fn typing(&self, _key: &ChatKey) -> Result<(), SendError> {
        Ok(())
    }
}

fn error(status: StatusCode, message: &str, kind: &str) -> Response {
    (
        status,
        axum::Json(json!({"error": {"message": message, "type": kind, "code": Value::Null}})),
    )
        .into_response()
}

/// Any other path or method: the same JSON error shape, so a client names the problem.
pub async fn no_route(method: axum::http::Method, uri: axum::http::Uri) -> Response {
    error(
        StatusCode::NOT_FOUND,
        &format!("no route for {method} {}", uri.path()),
        "invalid_request_error",
    )
}

/// A route's other methods (axum answers 405 with an `Allow` header): the JSON error shape.
pub async fn wrong_method(method: axum::http::Method, uri: axum::http::Uri) -> Response {
    error(
        StatusCode::METHOD_NOT_ALLOWED,
        &format!("{method} is not allowed on {}", uri.path()),
        "invalid_request_error",
    )
}

/// The error response for a request the API's access rules refuse (see `access`).
fn refused(headers: &HeaderMap, peer: SocketAddr) -> Option<Response> {
    let token = crate::config::secret("SWITCHBOARD_API_TOKEN");
    let (status, message, kind) = access(token.as_deref(), headers, peer.ip()).err()?;
    Some(error(status, message, kind))
}

/// `GET /v1/models`: the one model this API serves (clients such as Open WebUI list
/// models before they chat). The name is free: requests may name any model.
pub async fn models(ConnectInfo(peer): ConnectInfo<SocketAddr>, headers: HeaderMap) -> Response {
    if let Some(refused) = refused(&headers, peer) {
        return refused;
    }
    axum::Json(json!({
        "object": "list",
        "data": [{"id": "switchboard", "object": "model", "created": 0, "owned_by": "switchboard"}],
    }))
    .into_response()
}

pub async fn chat_completions(
    State(shared): State<Arc<Shared>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    body: axum::body::Body,
) -> Response {
    if let Some(refused) = refused(&headers, peer) {
        return refused;
    }
    // Read only once the caller may call: a large limit (chat UIs resend the whole
    // conversation, images included, though only its last message is taken). Too large a
    // body, or one that broke off, gets the same JSON error shape as the rest.
    let body = match axum::body::to_bytes(body, BODY_LIMIT).await {
        Ok(b) => b,
        Err(e) => {
            let too_large = std::error::Error::source(&e)
                .is_some_and(|s| s.is::<http_body_util::LengthLimitError>());
            return if too_large {
                error(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    &format!("the request body is over {} MiB", BODY_LIMIT >> 20),
                    "invalid_request_error",
                )
            } else {
                error(
                    StatusCode::BAD_REQUEST,
                    &format!("the request body could not be read: {e}"),
                    "invalid_request_error",
                )
            };
        }
    };
    let parsed = request::parse(&body);
    // Let go of the body (up to 32 MiB) before the wait for the reply, which may be long.
    drop(body);
    let request::ChatRequest {
        text,
        user,
        stream,
        include_usage,
        model,
    } = match parsed {
        Ok(r) => r,
        Err(e) => return error(StatusCode::BAD_REQUEST, &e, "invalid_request_error"),
    };
    let key: ChatKey = match format!("api:{user}").parse() {
        Ok(k) => k,
        Err(_) => {
            return error(
                StatusCode::BAD_REQUEST,
                "`user` must be a non-empty string",
                "invalid_request_error",
            );
        }
    };

    let id = format!(
        "api:req:{:016x}{:016x}",
        rand::random::<u64>(),
        rand::random::<u64>()
    );
    // Not the owner: any program or account on this machine may call, and a chat UI in
    // front passes on all its users (the owner may message any chat, read and change every
    // chat's reminders, and set them at any frequency).
    let sender = Sender {
        id: user.clone(),
        username: None,
        display_name: user,
        is_owner: false,
    };
    let mut msg = InboundMessage::text(id.clone(), key.clone(), sender, text);
    // Every request waits for its own answer, so API messages are never joined.
    msg.metadata.insert("join".into(), Value::Bool(false));

    let (delta_tx, delta_rx) = if stream {
        let (tx, rx) = mpsc::unbounded_channel();
        (Some(tx), Some(rx))
    } else {
        (None, None)
    };
    let reply_rx = shared.api.wait_for(&id, &key, delta_tx);
    let (publishing, gone) = publish_withdrawable(&shared.bus, msg);
    // A client gone meanwhile is noticed (the publishing task then withdraws the message).
    let guard = WaiterGuard {
        api: &shared.api,
        bus: &shared.bus,
        key: key.clone(),
        id: id.clone(),
        armed: true,
        gone: Some(gone),
    };
    let published = match publishing.await {
        Ok(published) => published,
        Err(e) => {
            tracing::error!(%key, "publishing an API message failed: {e}");
            return error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "the message could not be taken",
                "server_error",
            );
        }
    };
    let refused = match published {
        Ok(Published::Accepted) => None,
        Ok(other) => Some(error(
            StatusCode::CONFLICT,
            &format!("message not accepted: {other:?}"),
            "invalid_request_error",
        )),
        Err(e) => Some(error(
            StatusCode::SERVICE_UNAVAILABLE,
            &e.to_string(),
            "server_error",
        )),
    };
    if let Some(response) = refused {
        return response;
    }
    let created = chrono::Utc::now().timestamp();
    let completion_id = format!("chatcmpl-{}", &id[8..]);
    if let (true, Some(deltas)) = (stream, delta_rx) {
        // The stream's task has its own.
        guard.disarm();
        let reply = StreamedReply {
            key,
            id,
            completion_id,
            model,
            created,
            include_usage,
        };
        return stream_reply(shared, reply, reply_rx, deltas).into_response();
    }
    let reply = match tokio::time::timeout(REPLY_TIMEOUT, reply_rx).await {
        Ok(Ok(r)) => r,
        _ => {
            return error(
                StatusCode::GATEWAY_TIMEOUT,
                "no reply in time",
                "server_error",
            );
        }
    };
    drop(guard);
    axum::Json(json!({
        "id": completion_id,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [{
            "index": 0,
            "message": {"role": "assistant", "content": reply.text},
            "finish_reason": "stop",
        }],
        "usage": usage_json(reply.usage.unwrap_or_default()),
    }))
    .into_response()
}

/// OpenAI's `usage` object.
fn usage_json(u: TokenUsage) -> Value {
    json!({
        "prompt_tokens": u.prompt_tokens,
        "completion_tokens": u.completion_tokens,
        "total_tokens": u.prompt_tokens + u.completion_tokens,
    })
}
