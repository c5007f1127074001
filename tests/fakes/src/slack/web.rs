//! The fake's Web API: `/api/<method>` with token checks, fault injection and recording.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};

use super::{
    APP_TOKEN, BOT_ID, BOT_TOKEN, BOT_USER_ID, Call, Fault, Post, Reaction, Shared, TEAM_ID, Update,
};

fn json_response(status: StatusCode, body: Value) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

fn slack_error(code: &str) -> Response {
    json_response(StatusCode::OK, json!({"ok": false, "error": code}))
}

/// Parameters from the query string and a JSON or form body, merged.
fn params(headers: &HeaderMap, query: Option<&str>, body: &[u8]) -> Map<String, Value> {
    let mut out = Map::new();
    let mut add_form = |bytes: &[u8]| {
        if let Ok(pairs) = serde_urlencoded::from_bytes::<Vec<(String, String)>>(bytes) {
            for (k, v) in pairs {
                out.insert(k, Value::String(v));
            }
        }
    };
    if let Some(q) = query {
        add_form(q.as_bytes());
    }
    let is_json = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if is_json {
        if let Ok(Value::Object(m)) = serde_json::from_slice::<Value>(body) {
            out.extend(m);
        }
    } else if !body.is_empty() {
        add_form(body);
    }
    out
}

fn str_param(p: &Map<String, Value>, k: &str) -> Option<String> {
    match p.get(k)? {
        Value::String(s) => Some(s.clone()),
        Value::Null => None,
        other => Some(other.to_string()),
    }
}

fn bool_param(p: &Map<String, Value>, k: &str) -> Option<bool> {
    match p.get(k)? {
        Value::Bool(b) => Some(*b),
        Value::String(s) => Some(s == "true" || s == "1"),
        _ => None,
    }
}

pub(super) async fn api(
    State(shared): State<Arc<Shared>>,
    Path(method): Path<String>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let p = params(&headers, query.as_deref(), &body);
    let token = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::to_string)
        .or_else(|| str_param(&p, "token"));
    {
        let mut g = shared.lock();
        g.calls.push(Call {
            method: method.clone(),
            params: p.clone(),
        });
    }
    shared.bump();
    let expected = if method == "apps.connections.open" {
        APP_TOKEN
    } else {
        BOT_TOKEN
    };
    match token.as_deref() {
        None => return slack_error("not_authed"),
        Some(t) if t != expected => return slack_error("invalid_auth"),
        Some(_) => {}
    }
    let fault = shared
        .lock()
        .faults
        .get_mut(&method)
        .and_then(|q| q.pop_front());
    match fault {
        Some(Fault::RateLimited { retry_after_secs }) => {
            return (
                StatusCode::TOO_MANY_REQUESTS,
                [
                    (header::CONTENT_TYPE, "application/json".to_string()),
                    (header::RETRY_AFTER, retry_after_secs.to_string()),
                ],
                json!({"ok": false, "error": "ratelimited"}).to_string(),
            )
                .into_response();
        }
        Some(Fault::Error(code)) => return slack_error(&code),
        Some(Fault::Status(s)) => {
            let status = StatusCode::from_u16(s).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            return json_response(status, json!({"ok": false, "error": "fake_status"}));
        }
        Some(Fault::Delay(d)) => tokio::time::sleep(d).await,
        Some(Fault::Pass) | None => {}
    }
    let resp = web_method(&shared, &method, &p);
    shared.bump();
    resp
}

fn web_method(shared: &Shared, method: &str, p: &Map<String, Value>) -> Response {
    let ok = |mut v: Value| {
        v["ok"] = json!(true);
        json_response(StatusCode::OK, v)
    };
    match method {
        "auth.test" => ok(json!({
            "url": "https://fake.slack.com/",
            "team": "Fake Team",
            "user": "switchboard",
            "team_id": TEAM_ID,
            "user_id": BOT_USER_ID,
            "bot_id": BOT_ID,
        })),
        "apps.connections.open" => {
            let n = shared.next_id();
            ok(json!({"url": format!("ws://{}/socket?ticket={n}", shared.addr)}))
        }
        "chat.postMessage" => {
            let (Some(channel), Some(text)) = (str_param(p, "channel"), str_param(p, "text"))
            else {
                return slack_error("no_text");
            };
            let n = shared.next_id();
            let ts = format!("1700001000.{n:06}");
            shared.lock().posts.push(Post {
                channel: channel.clone(),
                text: text.clone(),
                thread_ts: str_param(p, "thread_ts"),
                mrkdwn: bool_param(p, "mrkdwn"),
                ts: ts.clone(),
            });
            ok(json!({
                "channel": channel,
                "ts": ts,
                "message": {"type": "message", "text": text, "ts": ts,
                            "user": BOT_USER_ID, "bot_id": BOT_ID},
            }))
        }
        "chat.update" => {
            let (Some(channel), Some(ts)) = (str_param(p, "channel"), str_param(p, "ts")) else {
                return slack_error("message_not_found");
            };
            let text = str_param(p, "text").unwrap_or_default();
            shared.lock().updates.push(Update {
                channel: channel.clone(),
                ts: ts.clone(),
                text: text.clone(),
            });
            ok(json!({"channel": channel, "ts": ts, "text": text}))
        }
        "reactions.add" => {
            let r = Reaction {
                channel: str_param(p, "channel").unwrap_or_default(),
                timestamp: str_param(p, "timestamp").unwrap_or_default(),
                name: str_param(p, "name").unwrap_or_default(),
            };
            let mut g = shared.lock();
            if g.reactions.contains(&r) {
                return slack_error("already_reacted");
            }
            g.reactions.push(r);
            ok(json!({}))
        }
        "users.info" => {
            let id = str_param(p, "user").unwrap_or_default();
            let Some(name) = shared.lock().users.get(&id).cloned() else {
                return slack_error("user_not_found");
            };
            ok(json!({"user": {
                "id": id, "team_id": TEAM_ID, "name": name, "real_name": name,
                "profile": {"display_name": name, "real_name": name},
            }}))
        }
        "conversations.history" => match super::history::history(&shared.lock(), p) {
            Ok(body) => ok(body),
            Err(code) => slack_error(code),
        },
        "conversations.replies" => match super::history::replies(&shared.lock(), p) {
            Ok(body) => ok(body),
            Err(code) => slack_error(code),
        },
        "conversations.info" => {
            let id = str_param(p, "channel").unwrap_or_default();
            let is_im = id.starts_with('D');
            ok(json!({"channel": {
                "id": id, "name": format!("chan-{}", id.to_lowercase()),
                "is_channel": !is_im, "is_im": is_im, "is_private": id.starts_with('G'),
            }}))
        }
        _ => slack_error("unknown_method"),
    }
}
