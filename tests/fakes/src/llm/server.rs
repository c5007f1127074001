//! HTTP side of the fake LLM: routes, request recording, reply selection, responses.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{ConnectInfo, DefaultBodyLimit, State};
use axum::http::{HeaderMap, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::reply::{Reply, StreamFault, estimate_tokens};
use super::{Fallback, RecordedRequest, Shared, anthropic, body_last_user_text, openai};

/// Which wire format a request speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Provider {
    OpenAi,
    Anthropic,
}

/// What a renderer needs to know about the request being answered.
pub(super) struct Ctx<'a> {
    /// Unique number of this request, used in ids.
    pub id: u64,
    pub model: &'a str,
    pub stream: bool,
    /// OpenAI `stream_options.include_usage`.
    pub include_usage: bool,
    pub prompt_tokens: u64,
    pub chunk_chars: usize,
    /// Unix seconds.
    pub created: u64,
}

/// A rendered answer: status, optional `Retry-After`, JSON or SSE events.
pub(super) struct Rendered {
    pub status: u16,
    pub retry_after: Option<u64>,
    pub body: Rendering,
}

/// Body of a [`Rendered`] answer.
pub(super) enum Rendering {
    Json(Value),
    /// Complete SSE events, each ending in a blank line.
    Events(Vec<String>),
}

impl Rendered {
    pub fn json(status: u16, body: Value) -> Self {
        Self {
            status,
            retry_after: None,
            body: Rendering::Json(body),
        }
    }
}

/// Serves `listener` until `token` is cancelled.
pub(super) fn spawn(listener: TcpListener, shared: Arc<Shared>, token: CancellationToken) {
    let app = Router::new()
        .route("/v1/chat/completions", post(openai_chat))
        .route("/chat/completions", post(openai_chat))
        .route("/v1/messages", post(anthropic_messages))
        .route("/messages", post(anthropic_messages))
        .route("/v1/models", get(models))
        .route("/models", get(models))
        .fallback(not_found)
        // Context-overflow tests send large prompts; the real APIs accept megabytes.
        .layer(DefaultBodyLimit::disable())
        .with_state(shared);
    tokio::spawn(async move {
        // Each request records its client's address: one port is one connection.
        let app = app.into_make_service_with_connect_info::<SocketAddr>();
        let served = axum::serve(listener, app)
            .with_graceful_shutdown(token.cancelled_owned())
            .await;
        if let Err(error) = served {
            tracing::warn!(%error, "fake LLM server stopped");
        }
    });
}

async fn openai_chat(
    State(shared): State<Arc<Shared>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    complete(&shared, Provider::OpenAi, peer, uri, headers, body).await
}

async fn anthropic_messages(
    State(shared): State<Arc<Shared>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    complete(&shared, Provider::Anthropic, peer, uri, headers, body).await
}

/// One completion request, whichever the provider.
async fn complete(
    shared: &Shared,
    provider: Provider,
    peer: SocketAddr,
    uri: Uri,
    headers: HeaderMap,
    raw: Bytes,
) -> Response {
    let at = Instant::now();
    let id = shared.ids.fetch_add(1, Ordering::Relaxed);
    let body: Value = serde_json::from_slice(&raw).unwrap_or(Value::Null);
    let model = body
        .get("model")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let stream = body.get("stream").and_then(Value::as_bool) == Some(true);
    let include_usage = body
        .pointer("/stream_options/include_usage")
        .and_then(Value::as_bool)
        == Some(true);

    let (api_key, rules) = {
        let state = shared.lock();
        let rules = openai::Rules {
            refuses_max_tokens: state.no_max_tokens.contains(&model),
            refuses_stream_options: state.no_stream_options.contains(&model),
            strict_role_order: state.strict_role_order,
        };
        (state.api_key.clone(), rules)
    };
    let invalid = match provider {
        Provider::OpenAi => openai::validate(&headers, &body, api_key.as_deref(), rules),
        Provider::Anthropic => anthropic::validate(&headers, &body, api_key.as_deref()),
    };
    // Scripts are consumed only by requests the real API would have accepted.
    let picked = invalid.is_none().then(|| pick(shared, &model, &body));
    record(shared, peer, uri.path(), &model, &headers, body, stream, at);

    if let Some(rendered) = invalid {
        return respond(rendered, Duration::ZERO, id, false);
    }
    let Some((reply, delay, chunk_chars)) = picked else {
        return StatusCode::INTERNAL_SERVER_ERROR.into_response();
    };
    let wait = delay + reply.delay;
    if !wait.is_zero() {
        tokio::time::sleep(wait).await;
    }
    let ctx = Ctx {
        id,
        model: &model,
        stream: stream && !reply.ignore_stream,
        include_usage,
        prompt_tokens: estimate_tokens(raw.len()),
        chunk_chars,
        created: unix_now(),
    };
    let mut rendered = match (&reply.raw_events, provider) {
        (Some(events), _) => Rendered {
            status: 200,
            retry_after: None,
            body: Rendering::Events(events.clone()),
        },
        (None, Provider::OpenAi) => openai::render(&reply, &ctx),
        (None, Provider::Anthropic) => anthropic::render(&reply, &ctx),
    };
    let mut disconnect = false;
    if let (Some((keep, fault)), Rendering::Events(events)) =
        (reply.stream_fault, &mut rendered.body)
    {
        events.truncate(keep);
        match fault {
            StreamFault::ErrorEvent => events.push(match provider {
                Provider::OpenAi => openai::stream_error_event(),
                Provider::Anthropic => anthropic::stream_error_event(),
            }),
            StreamFault::Disconnect => disconnect = true,
            StreamFault::EndEarly => {}
        }
    }
    if let (true, Rendering::Events(events)) = (reply.sse_comments, &mut rendered.body) {
        let with_comments = std::mem::take(events)
            .into_iter()
            .flat_map(|event| [": keep-alive\n\n".to_owned(), event]);
        *events = with_comments.collect();
    }
    respond(rendered, reply.chunk_delay, id, disconnect)
}

/// Chooses the reply: failing model, routed FIFO, global FIFO, default responder.
/// Returns it with the global delay and the stream chunk size.
fn pick(shared: &Shared, model: &str, body: &Value) -> (Reply, Duration, usize) {
    let default = {
        let mut state = shared.lock();
        let (delay, chunk) = (state.delay, state.chunk_chars);
        if let Some((_, reply)) = state.failing.iter().find(|(m, _)| m == model) {
            return (reply.clone(), delay, chunk);
        }
        if !state.routed.is_empty() {
            let text = body_last_user_text(body).unwrap_or_default();
            let hit = state
                .routed
                .iter()
                .position(|(matcher, _)| text.contains(matcher.as_str()));
            if let Some(index) = hit {
                let queue = &mut state.routed[index].1;
                let reply = queue.pop_front();
                if queue.is_empty() {
                    // Keeps the matcher list short when thousands of chats script replies.
                    state.routed.remove(index);
                }
                if let Some(reply) = reply {
                    return (reply, delay, chunk);
                }
            }
        }
        if let Some(reply) = state.queue.pop_front() {
            return (reply, delay, chunk);
        }
        (state.default.clone(), delay, chunk)
    };
    // The custom responder runs outside the lock: it may call back into the fake.
    let (default, delay, chunk) = default;
    let reply = match default {
        Fallback::Echo => Reply::echo(&body_last_user_text(body).unwrap_or_default()),
        Fallback::Fixed(reply) => reply,
        Fallback::Custom(responder) => responder(body),
    };
    (reply, delay, chunk)
}

/// Records the request (when recording is on) and bumps the count, in that order, so a
/// waiter woken by the count finds the request recorded.
#[allow(clippy::too_many_arguments)]
fn record(
    shared: &Shared,
    peer: SocketAddr,
    path: &str,
    model: &str,
    headers: &HeaderMap,
    body: Value,
    stream: bool,
    at: Instant,
) {
    if shared.recording.load(Ordering::Relaxed) {
        let mut map = std::collections::BTreeMap::new();
        for (name, value) in headers {
            let value = String::from_utf8_lossy(value.as_bytes()).into_owned();
            map.entry(name.as_str().to_owned())
                .and_modify(|v: &mut String| {
                    v.push_str(", ");
                    v.push_str(&value);
                })
                .or_insert(value);
        }
        let request = RecordedRequest {
            peer,
            path: path.to_owned(),
            model: model.to_owned(),
            headers: map,
            body,
            stream,
            at,
        };
        shared.lock().requests.push(request);
    }
    shared.count.send_modify(|count| *count += 1);
}

/// `GET /v1/models`, in Anthropic's shape when `anthropic-version` is sent.
async fn models(
    State(shared): State<Arc<Shared>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    let at = Instant::now();
    let id = shared.ids.fetch_add(1, Ordering::Relaxed);
    let models = shared.lock().models.clone();
    let anthropic = headers.contains_key("anthropic-version");
    record(
        &shared,
        peer,
        uri.path(),
        "",
        &headers,
        Value::Null,
        false,
        at,
    );
    let body = if anthropic {
        let data: Vec<Value> = models
            .iter()
            .map(|m| {
                json!({"type": "model", "id": m, "display_name": m,
                       "created_at": "2025-01-01T00:00:00Z"})
            })
            .collect();
        json!({"data": data, "has_more": false,
               "first_id": models.first(), "last_id": models.last()})
    } else {
        let data: Vec<Value> = models
            .iter()
            .map(|m| json!({"id": m, "object": "model", "created": 1_700_000_000, "owned_by": "fake"}))
            .collect();
        json!({"object": "list", "data": data})
    };
    respond(Rendered::json(200, body), Duration::ZERO, id, false)
}

async fn not_found(uri: Uri) -> Response {
    let body = json!({"error": {"message": format!("Unknown path {}", uri.path()),
                                "type": "invalid_request_error", "param": null, "code": "unknown_url"}});
    (StatusCode::NOT_FOUND, axum::Json(body)).into_response()
}

/// Builds the HTTP response. SSE events are sent in one write unless `chunk_delay` is
/// set or the connection is to be cut after them (`disconnect`).
fn respond(rendered: Rendered, chunk_delay: Duration, id: u64, disconnect: bool) -> Response {
    let status = StatusCode::from_u16(rendered.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut builder = Response::builder()
        .status(status)
        .header("x-request-id", format!("req_fake{id}"))
        .header("request-id", format!("req_fake{id}"));
    if let Some(secs) = rendered.retry_after {
        builder = builder.header(header::RETRY_AFTER, secs.to_string());
    }
    let built = match rendered.body {
        Rendering::Json(value) => builder
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(value.to_string())),
        Rendering::Events(events) => {
            let builder = builder
                .header(header::CONTENT_TYPE, "text/event-stream; charset=utf-8")
                .header(header::CACHE_CONTROL, "no-cache");
            if chunk_delay.is_zero() && !disconnect {
                builder.body(Body::from(events.concat()))
            } else {
                builder.body(Body::from_stream(paced(events, chunk_delay, disconnect)))
            }
        }
    };
    built.unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

/// The events one by one, `delay` apart; then an I/O error if `disconnect`, which makes
/// hyper abort the connection mid-body.
fn paced(
    events: Vec<String>,
    delay: Duration,
    disconnect: bool,
) -> impl futures_util::Stream<Item = Result<Bytes, std::io::Error>> {
    let first = true;
    futures_util::stream::unfold(
        (events.into_iter(), first, disconnect),
        move |(mut events, first, disconnect)| async move {
            let Some(event) = events.next() else {
                if !disconnect {
                    return None;
                }
                // Pending once, so hyper flushes the head and the events already
                // yielded before the error makes it drop the connection.
                tokio::task::yield_now().await;
                let cut = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "fake cut");
                return Some((Err(cut), (events, false, false)));
            };
            if !first && !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            Some((Ok(Bytes::from(event)), (events, false, disconnect)))
        },
    )
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}
