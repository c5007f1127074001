//! The HTTP side of [`super::FakeTelegram`]: parameter parsing and one handler per method.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;
use serde_json::{Map, Value, json};

use super::{PollFault, SendFault, SentMessage, Shared, unix_now, wait_until};

fn reply(status: StatusCode, body: Value) -> Response {
    (status, axum::Json(body)).into_response()
}

fn ok(result: Value) -> Response {
    reply(StatusCode::OK, json!({"ok": true, "result": result}))
}

fn error(code: u16, description: &str) -> Response {
    let status = StatusCode::from_u16(code).unwrap_or(StatusCode::BAD_REQUEST);
    reply(
        status,
        json!({"ok": false, "error_code": code, "description": description}),
    )
}

/// Parameters from the query string and a JSON or form body, merged into one object.
fn params(query: Option<&str>, headers: &HeaderMap, body: &[u8]) -> Map<String, Value> {
    let mut out = Map::new();
    let form = |s: &[u8], out: &mut Map<String, Value>| {
        let pairs: Vec<(String, String)> = serde_urlencoded::from_bytes(s).unwrap_or_default();
        for (k, v) in pairs {
            // Form values are strings; nested objects (reply_parameters) arrive as JSON text.
            let value = match serde_json::from_str::<Value>(&v) {
                Ok(j @ (Value::Object(_) | Value::Array(_))) => j,
                _ => Value::String(v),
            };
            out.insert(k, value);
        }
    };
    if let Some(q) = query {
        form(q.as_bytes(), &mut out);
    }
    let is_form = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/x-www-form-urlencoded"));
    if is_form {
        form(body, &mut out);
    } else if let Ok(Value::Object(m)) = serde_json::from_slice::<Value>(body) {
        out.extend(m);
    }
    out
}

/// An integer parameter, sent as a number or as a numeric string.
fn int(p: &Map<String, Value>, key: &str) -> Option<i64> {
    match p.get(key)? {
        Value::Number(n) => n.as_i64(),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

fn text_param(p: &Map<String, Value>, key: &str) -> Option<String> {
    match p.get(key)? {
        Value::String(s) => Some(s.clone()),
        other => Some(other.to_string()),
    }
}

fn token_ok(shared: &Shared, seg: &str) -> bool {
    seg.strip_prefix("bot") == Some(shared.token.as_str())
}

pub(super) async fn file(
    State(shared): State<Arc<Shared>>,
    Path((bot, path)): Path<(String, String)>,
) -> Response {
    if !token_ok(&shared, &bot) {
        return error(401, "Unauthorized");
    }
    let st = shared.lock();
    let Some((_, bytes)) = st.files.values().find(|(f, _)| f.file_path == path) else {
        return error(404, "Not Found");
    };
    let Some(rate) = st.file_rate else {
        return (StatusCode::OK, bytes.clone()).into_response();
    };
    // A slow link: ten pieces, each after its share of the time the whole file takes.
    let bytes = bytes.clone();
    let pause = Duration::from_secs_f64(bytes.len() as f64 / rate as f64 / 10.0);
    let pieces: Vec<Bytes> = bytes
        .chunks(bytes.len().div_ceil(10).max(1))
        .map(Bytes::copy_from_slice)
        .collect();
    let body = futures_util::stream::iter(pieces).then(move |piece| async move {
        tokio::time::sleep(pause).await;
        Ok::<_, std::io::Error>(piece)
    });
    let len = bytes.len().to_string();
    (
        StatusCode::OK,
        [(header::CONTENT_LENGTH, len)],
        axum::body::Body::from_stream(body),
    )
        .into_response()
}

pub(super) async fn method(
    State(shared): State<Arc<Shared>>,
    Path((bot, method)): Path<(String, String)>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if !token_ok(&shared, &bot) {
        return error(401, "Unauthorized");
    }
    let name = method.to_ascii_lowercase();
    let p = params(query.as_deref(), &headers, &body);
    shared
        .lock()
        .requests
        .push((name.clone(), Value::Object(p.clone())));
    shared.changed.notify_waiters();
    match name.as_str() {
        "getme" => ok(bot_user(&shared, true)),
        "deletewebhook" | "setmycommands" | "sendchataction" | "setwebhook" => ok(json!(true)),
        "getupdates" => get_updates(&shared, &p).await,
        "sendmessage" => send_message(&shared, &p),
        "editmessagetext" => edit_message_text(&shared, &p),
        "getfile" => get_file(&shared, &p),
        _ => error(404, "Not Found: method not found"),
    }
}

fn bot_user(shared: &Shared, me: bool) -> Value {
    let mut u = json!({
        "id": shared.bot_id,
        "is_bot": true,
        "first_name": "Switchboard",
        "username": shared.bot_username,
    });
    if me {
        let extra = json!({
            "can_join_groups": true,
            "can_read_all_group_messages": false,
            "supports_inline_queries": false,
            "can_connect_to_business": false,
            "has_main_web_app": false,
        });
        if let (Some(u), Value::Object(extra)) = (u.as_object_mut(), extra) {
            u.extend(extra);
        }
    }
    u
}

async fn get_updates(shared: &Shared, p: &Map<String, Value>) -> Response {
    let offset = int(p, "offset").unwrap_or(0);
    let timeout = int(p, "timeout").unwrap_or(0).clamp(0, 600) as u64;
    let limit = int(p, "limit").unwrap_or(100).clamp(1, 100) as usize;
    let fault = {
        let mut st = shared.lock();
        let fault = st.poll_faults.pop_front();
        if fault != Some(PollFault::Conflict) && offset > 0 {
            // An offset confirms every update below it: they are gone for good.
            while st.queue.front().is_some_and(|(id, _)| *id < offset) {
                st.queue.pop_front();
            }
            if st.confirmed.is_none_or(|c| c < offset - 1) {
                st.confirmed = Some(offset - 1);
            }
        }
        fault
    };
    shared.changed.notify_waiters();
    match fault {
        Some(PollFault::Conflict) => {
            return error(
                409,
                "Conflict: terminated by other getUpdates request; make sure that only one bot instance is running",
            );
        }
        Some(PollFault::Stall) => {
            let _ = tokio::time::timeout(Duration::from_secs(600), shared.unstall.notified()).await;
            return ok(json!([]));
        }
        None => {}
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(timeout);
    let batch = wait_until(shared, deadline, |st| {
        let batch: Vec<Value> = st
            .queue
            .iter()
            .filter(|(id, _)| *id >= offset)
            .take(limit)
            .map(|(_, u)| u.clone())
            .collect();
        (!batch.is_empty()).then_some(batch)
    })
    .await
    .unwrap_or_default();
    ok(Value::Array(batch))
}

fn send_message(shared: &Shared, p: &Map<String, Value>) -> Response {
    let Some(chat_id) = int(p, "chat_id") else {
        return error(400, "Bad Request: chat_id is empty");
    };
    let Some(text) = text_param(p, "text").filter(|t| !t.is_empty()) else {
        return error(400, "Bad Request: message text is empty");
    };
    let parse_mode = text_param(p, "parse_mode");
    let reply_params = p.get("reply_parameters");
    let reply_to = reply_params
        .and_then(|r| r.get("message_id"))
        .and_then(Value::as_i64)
        .or_else(|| int(p, "reply_to_message_id"));
    let allow_without_reply = reply_params
        .and_then(|r| r.get("allow_sending_without_reply"))
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let thread_id = int(p, "message_thread_id");
    let mut st = shared.lock();
    if st.blocked.contains(&chat_id) {
        return error(403, "Forbidden: bot was blocked by the user");
    }
    if let Some(new) = st.migrated.get(&chat_id).copied() {
        return reply(
            StatusCode::BAD_REQUEST,
            json!({"ok": false, "error_code": 400,
                   "description": "Bad Request: group chat was upgraded to a supergroup chat",
                   "parameters": {"migrate_to_chat_id": new}}),
        );
    }
    match st.send_faults.pop_front() {
        Some(SendFault::RetryAfter(secs)) => {
            return reply(
                StatusCode::TOO_MANY_REQUESTS,
                json!({"ok": false, "error_code": 429,
                       "description": format!("Too Many Requests: retry after {secs}"),
                       "parameters": {"retry_after": secs}}),
            );
        }
        Some(SendFault::ServerError) => return error(500, "Internal Server Error"),
        Some(SendFault::Pass) | None => {}
    }
    if st.reject_html
        && parse_mode
            .as_deref()
            .is_some_and(|m| m.eq_ignore_ascii_case("html"))
    {
        return error(
            400,
            "Bad Request: can't parse entities: Unsupported start tag \"x\" at byte offset 0",
        );
    }
    let message_id = st.next_message_id;
    st.next_message_id += 1;
    st.texts.insert(message_id, text.clone());
    st.sent.push(SentMessage {
        message_id,
        chat_id,
        text: text.clone(),
        parse_mode,
        reply_to,
        allow_without_reply,
        thread_id,
        at: Instant::now(),
    });
    drop(st);
    shared.changed.notify_waiters();
    ok(bot_message(shared, message_id, chat_id, &text, thread_id))
}

/// A `Message` sent by the bot, as `sendMessage` / `editMessageText` return it.
fn bot_message(
    shared: &Shared,
    message_id: i64,
    chat_id: i64,
    text: &str,
    thread: Option<i64>,
) -> Value {
    let chat = if chat_id < 0 {
        json!({"id": chat_id, "type": "supergroup", "title": "Test group"})
    } else {
        json!({"id": chat_id, "type": "private", "first_name": "User"})
    };
    let mut m = json!({
        "message_id": message_id,
        "date": unix_now(),
        "chat": chat,
        "from": bot_user(shared, false),
        "text": text,
    });
    if let (Some(t), Some(obj)) = (thread, m.as_object_mut()) {
        obj.insert("message_thread_id".into(), json!(t));
        obj.insert("is_topic_message".into(), json!(true));
    }
    m
}

fn edit_message_text(shared: &Shared, p: &Map<String, Value>) -> Response {
    let (Some(chat_id), Some(message_id), Some(text)) = (
        int(p, "chat_id"),
        int(p, "message_id"),
        text_param(p, "text"),
    ) else {
        return error(400, "Bad Request: message to edit not found");
    };
    let mut st = shared.lock();
    match st.texts.get(&message_id) {
        None => return error(400, "Bad Request: message to edit not found"),
        Some(old) if *old == text => {
            return error(
                400,
                "Bad Request: message is not modified: specified new message content and reply markup are exactly the same as a current content and reply markup of the message",
            );
        }
        Some(_) => {}
    }
    st.texts.insert(message_id, text.clone());
    drop(st);
    ok(bot_message(shared, message_id, chat_id, &text, None))
}

fn get_file(shared: &Shared, p: &Map<String, Value>) -> Response {
    let id = text_param(p, "file_id").unwrap_or_default();
    let st = shared.lock();
    match st.files.get(&id) {
        Some((f, _)) => ok(json!({
            "file_id": f.file_id,
            "file_unique_id": f.file_unique_id,
            "file_size": f.size,
            "file_path": f.file_path,
        })),
        None => error(400, "Bad Request: invalid file_id"),
    }
}
