//! The fake's message history: `conversations.history` and `conversations.replies`.
//!
//! Every message the fake knows of is in it: the bot's `chat.postMessage` posts, the user
//! messages tests push over a socket, and those added without being delivered (posted
//! before the test, or while the gateway was away). As Slack does:
//! - `conversations.history` lists a conversation's top-level messages and thread
//!   broadcasts, newest first, between `oldest` and `latest` (both excluded unless
//!   `inclusive`), `limit` at a time (default 100, at most 999), with `has_more` and
//!   `response_metadata.next_cursor` (empty on the last page) for the next `cursor`;
//! - `conversations.replies` lists a thread, oldest first: its root first (on the first
//!   page, whatever `oldest` says), then the replies between `oldest` and `latest`;
//! - a thread's root carries `thread_ts`, `reply_count`, `reply_users` (up to 5),
//!   `reply_users_count` and `latest_reply`; a reply carries `thread_ts` and
//!   `parent_user_id`.

use std::cmp::Ordering;

use serde_json::{Map, Value, json};

use super::{APP_ID, BOT_ID, BOT_USER_ID, Inner, Post};

/// A ts as `(seconds, microseconds)`, so that `"9.5"` sorts before `"10.1"`.
pub(crate) fn ts_key(ts: &str) -> (u64, u32) {
    let (secs, frac) = ts.split_once('.').unwrap_or((ts, ""));
    let micros: String = frac.chars().chain(std::iter::repeat('0')).take(6).collect();
    (secs.parse().unwrap_or(0), micros.parse().unwrap_or(0))
}

fn cmp_ts(a: &str, b: &str) -> Ordering {
    ts_key(a).cmp(&ts_key(b))
}

fn ts_of(m: &Value) -> &str {
    m["ts"].as_str().unwrap_or("")
}

/// An event as the message the history keeps, or `None` for events that are no new message
/// (edits, deletions, other event types).
pub(crate) fn stored(event: &Value) -> Option<(String, String, Value)> {
    let kind = event["type"].as_str()?;
    if kind != "message" && kind != "app_mention" {
        return None;
    }
    if let Some(sub) = event["subtype"].as_str() {
        if matches!(
            sub,
            "message_changed" | "message_deleted" | "message_replied"
        ) {
            return None;
        }
    }
    let channel = event["channel"].as_str()?.to_string();
    let ts = event["ts"].as_str()?.to_string();
    let mut m = event.as_object()?.clone();
    for k in ["channel", "channel_type", "event_ts"] {
        m.remove(k);
    }
    m.insert("type".into(), json!("message"));
    Some((channel, ts, Value::Object(m)))
}

fn post_json(p: &Post) -> Value {
    let mut m = json!({"type": "message", "user": BOT_USER_ID, "bot_id": BOT_ID,
                       "app_id": APP_ID, "text": p.text, "ts": p.ts});
    if let Some(t) = &p.thread_ts {
        m["thread_ts"] = json!(t);
    }
    m
}

/// Every message of `channel`, oldest first, with thread fields filled in.
fn messages(g: &Inner, channel: &str) -> Vec<Value> {
    let mut all: Vec<Value> = g
        .posts
        .iter()
        .filter(|p| p.channel == channel)
        .map(post_json)
        .chain(
            g.history
                .iter()
                .filter(|((c, _), _)| c == channel)
                .map(|(_, m)| m.clone()),
        )
        .collect();
    all.sort_by(|a, b| cmp_ts(ts_of(a), ts_of(b)));
    let snapshot = all.clone();
    for m in all.iter_mut() {
        let ts = ts_of(m).to_string();
        match m["thread_ts"].as_str().map(str::to_string) {
            Some(root) if root != ts => {
                let parent = snapshot.iter().find(|r| ts_of(r) == root);
                if let Some(user) = parent.and_then(|r| r["user"].as_str()) {
                    m["parent_user_id"] = json!(user);
                }
            }
            _ => {
                let replies: Vec<&Value> = snapshot
                    .iter()
                    .filter(|r| r["thread_ts"] == json!(ts) && ts_of(r) != ts)
                    .collect();
                let Some(latest) = replies.last() else {
                    continue;
                };
                let mut users: Vec<Value> = Vec::new();
                for r in &replies {
                    if !users.contains(&r["user"]) {
                        users.push(r["user"].clone());
                    }
                }
                m["thread_ts"] = json!(ts);
                m["reply_count"] = json!(replies.len());
                m["reply_users_count"] = json!(users.len());
                m["latest_reply"] = json!(ts_of(latest));
                users.truncate(5);
                m["reply_users"] = json!(users);
            }
        }
    }
    all
}

fn param<'a>(p: &'a Map<String, Value>, k: &str) -> Option<&'a str> {
    p.get(k).and_then(Value::as_str).filter(|s| !s.is_empty())
}

/// `oldest` < ts < `latest` (or ≤ with `inclusive`).
fn in_range(p: &Map<String, Value>) -> impl Fn(&Value) -> bool {
    let oldest = ts_key(param(p, "oldest").unwrap_or("0"));
    let latest = param(p, "latest").map(ts_key).unwrap_or((u64::MAX, 0));
    let inclusive = matches!(param(p, "inclusive"), Some("true" | "1"));
    move |m| {
        let t = ts_key(ts_of(m));
        if inclusive {
            oldest <= t && t <= latest
        } else {
            oldest < t && t < latest
        }
    }
}

fn limit(p: &Map<String, Value>, default: usize) -> usize {
    param(p, "limit")
        .and_then(|l| l.parse::<usize>().ok())
        .unwrap_or(default)
        .clamp(1, 999)
}

/// The ts a cursor points at (`None`: no cursor); `Err` for one the fake never gave.
fn cursor(p: &Map<String, Value>) -> Result<Option<String>, ()> {
    let Some(c) = param(p, "cursor") else {
        return Ok(None);
    };
    let bytes = hex::decode(c).map_err(|_| ())?;
    let text = String::from_utf8(bytes).map_err(|_| ())?;
    text.strip_prefix("next_ts:")
        .map(|ts| Some(ts.to_string()))
        .ok_or(())
}

/// Slack's cursors are opaque (base64 of `next_ts:<ts>`); this one is its hex.
fn make_cursor(ts: &str) -> String {
    hex::encode(format!("next_ts:{ts}"))
}

/// One page of `list` from `from` on (a cursor's ts), `limit` long.
fn page(list: Vec<Value>, from: Option<&str>, limit: usize, first: Option<Value>) -> Value {
    let start = from
        .and_then(|ts| list.iter().position(|m| ts_of(m) == ts))
        .unwrap_or(0);
    let rest = &list[start..];
    let mut messages: Vec<Value> = first.into_iter().collect();
    let room = limit.saturating_sub(messages.len());
    messages.extend(rest.iter().take(room).cloned());
    let next = rest.get(room).map(|m| make_cursor(ts_of(m)));
    json!({
        "messages": messages,
        "has_more": next.is_some(),
        "response_metadata": {"next_cursor": next.unwrap_or_default()},
    })
}

/// `conversations.history`: `Err(code)` for a Slack error.
pub(crate) fn history(g: &Inner, p: &Map<String, Value>) -> Result<Value, &'static str> {
    let channel = param(p, "channel").ok_or("channel_not_found")?;
    let from = cursor(p).map_err(|_| "invalid_cursor")?;
    let keep = in_range(p);
    let mut list: Vec<Value> = messages(g, channel)
        .into_iter()
        .filter(|m| {
            let ts = ts_of(m);
            let top = m["thread_ts"].as_str().is_none_or(|root| root == ts);
            (top || m["subtype"] == json!("thread_broadcast")) && keep(m)
        })
        .collect();
    list.reverse();
    let mut body = page(list, from.as_deref(), limit(p, 100), None);
    body["pin_count"] = json!(0);
    Ok(body)
}

/// `conversations.replies`: `Err(code)` for a Slack error.
pub(crate) fn replies(g: &Inner, p: &Map<String, Value>) -> Result<Value, &'static str> {
    let channel = param(p, "channel").ok_or("channel_not_found")?;
    let root_ts = param(p, "ts").ok_or("thread_not_found")?;
    let from = cursor(p).map_err(|_| "invalid_cursor")?;
    let all = messages(g, channel);
    let root = all
        .iter()
        .find(|m| ts_of(m) == root_ts)
        .cloned()
        .ok_or("thread_not_found")?;
    let keep = in_range(p);
    let list: Vec<Value> = all
        .into_iter()
        .filter(|m| m["thread_ts"] == json!(root_ts) && ts_of(m) != root_ts && keep(m))
        .collect();
    // The root leads the first page only.
    let first = from.is_none().then_some(root);
    Ok(page(list, from.as_deref(), limit(p, 1000), first))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inner_with(msgs: &[(&str, &str, Option<&str>)]) -> Inner {
        let mut g = Inner::default();
        for (ts, user, thread) in msgs {
            let mut m = json!({"type": "message", "user": user, "text": "hi", "ts": ts});
            if let Some(t) = thread {
                m["thread_ts"] = json!(t);
            }
            g.history.insert(("C1".into(), ts.to_string()), m);
        }
        g
    }

    fn params(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap_or_default()
    }

    fn tss(body: &Value) -> Vec<&str> {
        body["messages"]
            .as_array()
            .map(|a| a.iter().map(ts_of).collect())
            .unwrap_or_default()
    }

    #[test]
    fn history_is_newest_first_excludes_oldest_and_pages_with_a_cursor() {
        let g = inner_with(&[
            ("9.5", "U1", None),
            ("10.1", "U1", None),
            ("10.2", "U2", Some("10.1")),
            ("11.0", "U1", None),
            ("12.0", "U1", None),
        ]);
        let first = history(
            &g,
            &params(json!({"channel": "C1", "oldest": "9.5", "limit": "2"})),
        )
        .expect("ok");
        assert_eq!(tss(&first), ["12.0", "11.0"]);
        assert_eq!(first["has_more"], true);
        let c = first["response_metadata"]["next_cursor"]
            .as_str()
            .expect("cursor");
        let second = history(
            &g,
            &params(json!({"channel": "C1", "oldest": "9.5", "limit": "2", "cursor": c})),
        )
        .expect("ok");
        assert_eq!(tss(&second), ["10.1"], "the reply is not top-level");
        assert_eq!(second["has_more"], false);
        assert_eq!(second["response_metadata"]["next_cursor"], "");
        assert_eq!(second["messages"][0]["reply_count"], 1);
        assert_eq!(second["messages"][0]["latest_reply"], "10.2");
        let inclusive = history(
            &g,
            &params(
                json!({"channel": "C1", "oldest": "9.5", "latest": "11.0", "inclusive": "true"}),
            ),
        )
        .expect("ok");
        assert_eq!(tss(&inclusive), ["11.0", "10.1", "9.5"]);
        assert_eq!(
            history(&g, &params(json!({"channel": "C1", "cursor": "zz"}))).err(),
            Some("invalid_cursor")
        );
    }

    #[test]
    fn replies_lead_with_the_root_and_honour_oldest() {
        let g = inner_with(&[
            ("10.1", "U1", None),
            ("10.2", "U2", Some("10.1")),
            ("10.3", "U3", Some("10.1")),
        ]);
        let body = replies(
            &g,
            &params(json!({"channel": "C1", "ts": "10.1", "oldest": "10.2"})),
        )
        .expect("ok");
        assert_eq!(tss(&body), ["10.1", "10.3"]);
        assert_eq!(body["messages"][1]["parent_user_id"], "U1");
        assert_eq!(
            replies(&g, &params(json!({"channel": "C1", "ts": "1.0"}))).err(),
            Some("thread_not_found")
        );
    }
}
