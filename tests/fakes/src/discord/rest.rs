//! The fake's REST API under `/api/v10`: gateway discovery, the bot user, channels,
//! message posts and edits (recorded, with injected faults) and typing.

use std::sync::Arc;

use axum::Json;
use axum::Router;
use axum::extract::{Path, RawQuery, State as AxState};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, patch, post};
use serde_json::{Value, json};

use super::{Author, Fault, Recorded, Shared, message_json};

type S = AxState<Arc<Shared>>;

/// The REST router.
pub(crate) fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/api/v10/gateway", get(gateway))
        .route("/api/v10/gateway/bot", get(gateway_bot))
        .route("/api/v10/users/@me", get(me))
        .route(
            "/api/v10/users/@me/channels",
            post(super::channels::open_dm),
        )
        .route("/api/v10/channels/{id}", get(super::channels::get_channel))
        .route(
            "/api/v10/channels/{id}/messages",
            post(create_message).get(channel_messages),
        )
        .route("/api/v10/channels/{id}/messages/{mid}", patch(edit_message))
        .route("/api/v10/channels/{id}/typing", post(typing))
        .route("/attachments/{channel}/{id}/{name}", get(super::cdn::serve))
        .fallback(not_found)
        .with_state(shared)
}

fn error(status: StatusCode, message: &str) -> Response {
    (status, Json(json!({"message": message, "code": 0}))).into_response()
}

/// `Authorization: Bot <token>` must carry the fake's token; `Some` is the 401 to answer.
pub(crate) fn check_auth(shared: &Shared, headers: &HeaderMap) -> Option<Response> {
    let expected = format!("Bot {}", shared.lock().token);
    match headers.get("authorization").and_then(|v| v.to_str().ok()) {
        Some(v) if v == expected => None,
        _ => Some(error(StatusCode::UNAUTHORIZED, "401: Unauthorized")),
    }
}

async fn not_found() -> Response {
    error(StatusCode::NOT_FOUND, "404: Not Found")
}

async fn gateway(AxState(shared): S) -> Response {
    let url = shared.lock().gateway_url.clone();
    Json(json!({ "url": url })).into_response()
}

async fn gateway_bot(AxState(shared): S, headers: HeaderMap) -> Response {
    if let Some(r) = check_auth(&shared, &headers) {
        return r;
    }
    let url = shared.lock().gateway_url.clone();
    Json(json!({
        "url": url,
        "shards": 1,
        "session_start_limit": {"total": 1000, "remaining": 999, "reset_after": 0, "max_concurrency": 1}
    }))
    .into_response()
}

async fn me(AxState(shared): S, headers: HeaderMap) -> Response {
    let delay = {
        let mut st = shared.lock();
        st.me_calls += 1;
        st.me_delay
    };
    shared.bump();
    if let Some(d) = delay {
        tokio::time::sleep(d).await;
    }
    if let Some(r) = check_auth(&shared, &headers) {
        return r;
    }
    let mut user = Author::this_bot().to_json();
    user["verified"] = json!(true);
    user["mfa_enabled"] = json!(false);
    user["flags"] = json!(0);
    Json(user).into_response()
}

/// `GET /channels/{id}/messages`: `limit` (1–100, default 50) messages; with `after`, the
/// first ones after that id, else the latest; newest first, as Discord answers.
async fn channel_messages(
    AxState(shared): S,
    headers: HeaderMap,
    Path(channel_id): Path<u64>,
    RawQuery(query): RawQuery,
) -> Response {
    if let Some(r) = check_auth(&shared, &headers) {
        return r;
    }
    let query = query.unwrap_or_default();
    let params: Vec<(String, String)> = serde_urlencoded::from_str(&query).unwrap_or_default();
    let param = |k: &str| {
        params
            .iter()
            .find(|(n, _)| n == k)
            .and_then(|(_, v)| v.parse::<u64>().ok())
    };
    // Injected faults answer reads too (a test that wants one here posts nothing meanwhile).
    if let Some(r) = take_fault(&shared) {
        return r;
    }
    let limit = param("limit").unwrap_or(50);
    if !(1..=100).contains(&limit) {
        return error(StatusCode::BAD_REQUEST, "Invalid Form Body");
    }
    let mut st = shared.lock();
    st.history_reads.push((channel_id, query.clone()));
    let all = st.history.get(&channel_id).cloned().unwrap_or_default();
    drop(st);
    shared.bump();
    let id_of = |m: &Value| {
        m["id"]
            .as_str()
            .and_then(|s| s.parse::<u64>().ok())
            .unwrap_or(0)
    };
    let mut picked: Vec<Value> = match param("after") {
        Some(after) => all
            .into_iter()
            .filter(|m| id_of(m) > after)
            .take(limit as usize)
            .collect(),
        None => {
            let skip = all.len().saturating_sub(limit as usize);
            all.into_iter().skip(skip).collect()
        }
    };
    picked.reverse();
    Json(Value::Array(picked)).into_response()
}

/// The 404 or 403 a post or typing call in `channel_id` gets (see `channels`).
fn refusal(shared: &Shared, channel_id: u64) -> Option<Response> {
    let r = shared.lock().channels.refusal(channel_id);
    shared.bump();
    r
}

/// Take the next injected fault, if any, as a response.
fn take_fault(shared: &Shared) -> Option<Response> {
    let mut st = shared.lock();
    let fault = st.faults.pop_front()?;
    st.faulted_posts += 1;
    drop(st);
    shared.bump();
    Some(match fault {
        Fault::RateLimited { retry_after } => {
            let mut r = (
                StatusCode::TOO_MANY_REQUESTS,
                Json(json!({"message": "You are being rate limited.", "retry_after": retry_after, "global": false})),
            )
                .into_response();
            let secs = retry_after.ceil().max(0.0) as u64;
            if let Ok(v) = HeaderValue::from_str(&secs.to_string()) {
                r.headers_mut().insert("retry-after", v);
            }
            r
        }
        Fault::ServerError => error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "500: Internal Server Error",
        ),
        // Only message posts lose their answer; elsewhere it is a plain 502.
        Fault::LostAnswer => error(StatusCode::BAD_GATEWAY, "502: Bad Gateway"),
    })
}

fn bot_message(id: u64, channel_id: u64, body: &Value) -> Value {
    let content = body["content"].as_str().unwrap_or("");
    message_json(id, channel_id, None, &Author::this_bot(), content, |m| {
        if let Some(r) = body.get("message_reference").filter(|r| !r.is_null()) {
            m.insert("message_reference".into(), r.clone());
            m.insert("type".into(), json!(19));
        }
    })
}

async fn create_message(
    AxState(shared): S,
    headers: HeaderMap,
    Path(channel_id): Path<u64>,
    body: Option<Json<Value>>,
) -> Response {
    if let Some(r) = check_auth(&shared, &headers) {
        return r;
    }
    if let Some(r) = refusal(&shared, channel_id) {
        return r;
    }
    let Some(Json(body)) = body else {
        return error(StatusCode::BAD_REQUEST, "400: body must be JSON");
    };
    // As Discord: a repeat of a nonce it has seen (with `enforce_nonce`) returns the
    // message it created then, and creates none.
    let nonce = body["nonce"]
        .as_str()
        .filter(|_| body["enforce_nonce"] == json!(true))
        .map(|n| (channel_id, n.to_string()));
    if let Some(n) = &nonce {
        if let Some(existing) = shared.lock().nonces.get(n).cloned() {
            return Json(existing).into_response();
        }
    }
    let lost_answer = {
        let mut st = shared.lock();
        let lost = st.faults.front() == Some(&Fault::LostAnswer);
        if lost {
            st.faults.pop_front();
            st.faulted_posts += 1;
        }
        lost
    };
    if !lost_answer {
        if let Some(r) = take_fault(&shared) {
            return r;
        }
    }
    let content_len = body["content"]
        .as_str()
        .map(|c| c.chars().count())
        .unwrap_or(0);
    if content_len > 2000 {
        return (
            StatusCode::BAD_REQUEST,
            Json(json!({"message": "Invalid Form Body", "code": 50035,
                "errors": {"content": {"_errors": [{"code": "BASE_TYPE_MAX_LENGTH",
                "message": "Must be 2000 or fewer in length."}]}}})),
        )
            .into_response();
    }
    let mut st = shared.lock();
    let id = st.new_id();
    st.posts.push(Recorded {
        channel_id,
        message_id: id,
        body: body.clone(),
    });
    let created = bot_message(id, channel_id, &body);
    st.remember(channel_id, &created);
    if let Some(n) = nonce {
        st.nonces.insert(n, created.clone());
    }
    drop(st);
    shared.bump();
    if lost_answer {
        return error(StatusCode::BAD_GATEWAY, "502: Bad Gateway");
    }
    Json(created).into_response()
}

async fn edit_message(
    AxState(shared): S,
    headers: HeaderMap,
    Path((channel_id, message_id)): Path<(u64, u64)>,
    body: Option<Json<Value>>,
) -> Response {
    if let Some(r) = check_auth(&shared, &headers) {
        return r;
    }
    let Some(Json(body)) = body else {
        return error(StatusCode::BAD_REQUEST, "400: body must be JSON");
    };
    if let Some(r) = take_fault(&shared) {
        return r;
    }
    shared.lock().edits.push(Recorded {
        channel_id,
        message_id,
        body: body.clone(),
    });
    shared.bump();
    let mut msg = bot_message(message_id, channel_id, &body);
    msg["edited_timestamp"] = json!("2025-01-01T00:00:01.000000+00:00");
    Json(msg).into_response()
}

async fn typing(AxState(shared): S, headers: HeaderMap, Path(channel_id): Path<u64>) -> Response {
    if let Some(r) = check_auth(&shared, &headers) {
        return r;
    }
    if let Some(r) = refusal(&shared, channel_id) {
        return r;
    }
    shared.lock().typing.push(channel_id);
    shared.bump();
    StatusCode::NO_CONTENT.into_response()
}
