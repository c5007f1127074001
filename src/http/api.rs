//! The `api` channel: `POST /v1/chat/completions`, OpenAI-compatible (stream and not).
//!
//! The session key is `api:<user>` from the request's `user` field (`api:default` without
//! it); the last user message is the input and the gateway's own session is the history.
//! A request with an `Idempotency-Key` header is answered once, its retries given the same
//! answer ([`idem`]). The channel routing replies back to the requests is [`channel`].

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{ConnectInfo, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use switchboard_channel::{ChatKey, InboundMessage, Published, Sender, TokenUsage};
use tokio::sync::mpsc;

use super::access::access;
use crate::gateway::Shared;

mod channel;
mod idem;
mod request;
mod stream;

pub use channel::ApiChannel;
use channel::{WaiterGuard, publish_withdrawable};
pub use idem::prune as prune_answers;
use stream::{StreamedReply, stream_reply};

/// Largest `POST /v1/chat/completions` body.
const BODY_LIMIT: usize = 32 * 1024 * 1024;

/// Longest a request (or `switchboard chat`) waits for its reply; for a stream, longest
/// without a piece of it. A turn's own limits (steps, LLM retries and timeouts, tool
/// timeouts) bound it too, but may add up to hours as configured, so this is no bound on
/// a turn: past it, the request gives up and its turn is stopped.
pub const REPLY_TIMEOUT: Duration = Duration::from_secs(30 * 60);

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
    let idem_key = match idem::key(&headers) {
        Ok(k) => k,
        Err(e) => return error(StatusCode::BAD_REQUEST, &e, "invalid_request_error"),
    };
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

    // With a key, the same for every retry of the request by the same caller.
    let id = match &idem_key {
        Some(k) => idem::message_id(k, &key, super::access::bearer(&headers)),
        None => format!(
            "api:req:{:016x}{:016x}",
            rand::random::<u64>(),
            rand::random::<u64>()
        ),
    };
    // Not the owner: any program or account on this machine may call, and a chat UI in
    // front passes on all its users (the owner may message any chat, read and change every
    // chat's reminders, and set them at any frequency).
    let sender = Sender {
        id: user.clone(),
        username: None,
        display_name: user,
        is_owner: false,
    };
    let fingerprint = idem::fingerprint(&model, &text);
    let mut msg = InboundMessage::text(id.clone(), key.clone(), sender, text);
    // Every request waits for its own answer, so API messages are never joined.
    msg.metadata.insert("join".into(), Value::Bool(false));
    let reply = StreamedReply {
        key: key.clone(),
        completion_id: completion_id(&id),
        id: id.clone(),
        model,
        created: chrono::Utc::now().timestamp(),
        include_usage,
        place: None,
    };
    if idem_key.is_some() {
        return idem::respond(shared, msg, fingerprint, reply, stream).await;
    }

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
        place: None,
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
    if let (true, Some(deltas)) = (stream, delta_rx) {
        // The stream's task has its own.
        guard.disarm();
        return stream_reply(shared, reply, reply_rx, deltas).into_response();
    }
    let answer = match tokio::time::timeout(REPLY_TIMEOUT, reply_rx).await {
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
    completion(&reply, &answer.text, answer.usage)
}

/// A completion's id: from its message's, the random or hashed part.
fn completion_id(id: &str) -> String {
    format!("chatcmpl-{}", id.rsplit(':').next().unwrap_or(id))
}

/// The body of a (not streamed) chat completion answering with `text`.
fn completion(reply: &StreamedReply, text: &str, usage: Option<TokenUsage>) -> Response {
    axum::Json(json!({
        "id": reply.completion_id,
        "object": "chat.completion",
        "created": reply.created,
        "model": reply.model,
        "choices": [{
            "index": 0,
            "message": {"role": "assistant", "content": text},
            "finish_reason": "stop",
        }],
        "usage": usage_json(usage.unwrap_or_default()),
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
