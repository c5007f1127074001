//! Builders for Slack event payloads and an Events API client helper (signing).
//!
//! The builders return the inner `event` object of an `event_callback`; wrap it with
//! [`event_callback`] / [`event_callback_body`] for the Events API, or hand it to
//! [`super::FakeSlack::push_event`] for Socket Mode. [`sign`] and [`signed_headers`] produce
//! what Slack puts on an Events API request.

use axum::http::{HeaderMap, HeaderValue};
use hmac::{Hmac, KeyInit, Mac};
use serde_json::{Value, json};
use sha2::Sha256;

/// Team id the fake and the builders use.
pub const TEAM_ID: &str = "T0FAKE";
/// App id the fake and the builders use.
pub const APP_ID: &str = "A0FAKE";

/// `app_mention` in a channel (`<@BOT>` should be part of `text`).
pub fn app_mention(channel: &str, user: &str, text: &str, ts: &str) -> Value {
    json!({
        "type": "app_mention",
        "user": user,
        "text": text,
        "ts": ts,
        "channel": channel,
        "event_ts": ts,
    })
}

/// `app_mention` inside an existing thread.
pub fn app_mention_in_thread(
    channel: &str,
    user: &str,
    text: &str,
    ts: &str,
    thread_ts: &str,
) -> Value {
    let mut ev = app_mention(channel, user, text, ts);
    ev["thread_ts"] = json!(thread_ts);
    ev
}

/// A plain `message` in a public channel (`channel_type: channel`).
pub fn channel_message(channel: &str, user: &str, text: &str, ts: &str) -> Value {
    message(channel, "channel", user, text, ts)
}

/// A `message` with any `channel_type` (`channel`, `group`, `im`, `mpim`).
pub fn message(channel: &str, channel_type: &str, user: &str, text: &str, ts: &str) -> Value {
    json!({
        "type": "message",
        "channel": channel,
        "channel_type": channel_type,
        "user": user,
        "text": text,
        "ts": ts,
        "event_ts": ts,
    })
}

/// A direct message to the bot (`channel_type: im`).
pub fn dm(channel: &str, user: &str, text: &str, ts: &str) -> Value {
    message(channel, "im", user, text, ts)
}

/// A reply in a channel thread rooted at `thread_ts`.
pub fn thread_reply(channel: &str, user: &str, text: &str, ts: &str, thread_ts: &str) -> Value {
    let mut ev = channel_message(channel, user, text, ts);
    ev["thread_ts"] = json!(thread_ts);
    ev
}

/// The same event with a `subtype` (`message_changed`, `channel_join`, `file_share`…).
pub fn with_subtype(mut event: Value, subtype: &str) -> Value {
    event["subtype"] = json!(subtype);
    event
}

/// A message posted by a bot (`subtype: bot_message`, `bot_id`).
pub fn bot_message(channel: &str, bot_id: &str, text: &str, ts: &str) -> Value {
    json!({
        "type": "message",
        "subtype": "bot_message",
        "channel": channel,
        "channel_type": "channel",
        "bot_id": bot_id,
        "text": text,
        "ts": ts,
        "event_ts": ts,
    })
}

/// The same event with files attached, each `(name, mimetype, size, url_private)`.
pub fn with_files(mut event: Value, files: &[(&str, &str, u64, &str)]) -> Value {
    let files: Vec<Value> = files
        .iter()
        .enumerate()
        .map(|(i, (name, mime, size, url))| {
            json!({
                "id": format!("F{i:04}"),
                "name": name,
                "mimetype": mime,
                "size": size,
                "url_private": url,
            })
        })
        .collect();
    event["files"] = Value::Array(files);
    event
}

/// `app_uninstalled`: the app was removed from the workspace (its tokens no longer work).
pub fn app_uninstalled() -> Value {
    json!({"type": "app_uninstalled", "event_ts": "1700000000.000000"})
}

/// `tokens_revoked`: the tokens of these bot users and people were revoked.
pub fn tokens_revoked(bot_users: &[&str], people: &[&str]) -> Value {
    json!({
        "type": "tokens_revoked",
        "tokens": {"oauth": people, "bot": bot_users},
        "event_ts": "1700000000.000000",
    })
}

/// An `event_callback` envelope around `event`.
pub fn event_callback(event_id: &str, event: Value) -> Value {
    json!({
        "token": "verification-token-unused",
        "team_id": TEAM_ID,
        "api_app_id": APP_ID,
        "event": event,
        "type": "event_callback",
        "event_id": event_id,
        "event_time": 1_700_000_000u64,
        "authorizations": [],
    })
}

/// [`event_callback`] serialised, ready to POST to the Events API.
pub fn event_callback_body(event_id: &str, event: Value) -> String {
    event_callback(event_id, event).to_string()
}

/// A `url_verification` request body.
pub fn url_verification_body(challenge: &str) -> String {
    json!({"token": "unused", "challenge": challenge, "type": "url_verification"}).to_string()
}

/// Slack's request signature: `v0=` + hex(HMAC-SHA256(secret, `v0:{timestamp}:{body}`)).
pub fn sign(signing_secret: &str, timestamp: &str, body: &str) -> String {
    // An HMAC key of any length is valid, so this cannot fail.
    let mut mac = Hmac::<Sha256>::new_from_slice(signing_secret.as_bytes())
        .expect("HMAC accepts keys of any length");
    mac.update(b"v0:");
    mac.update(timestamp.as_bytes());
    mac.update(b":");
    mac.update(body.as_bytes());
    format!("v0={}", hex::encode(mac.finalize().into_bytes()))
}

/// Current Unix time in seconds, as Slack puts it in `x-slack-request-timestamp`.
pub fn now_timestamp() -> String {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default()
        .to_string()
}

/// The headers of a signed Events API request (`x-slack-request-timestamp`,
/// `x-slack-signature`, `content-type`), signed at `timestamp` (see [`now_timestamp`]).
pub fn signed_headers(signing_secret: &str, timestamp: &str, body: &str) -> HeaderMap {
    let mut h = HeaderMap::new();
    let sig = sign(signing_secret, timestamp, body);
    h.insert(
        "x-slack-request-timestamp",
        HeaderValue::from_str(timestamp).expect("timestamp is ASCII"),
    );
    h.insert(
        "x-slack-signature",
        HeaderValue::from_str(&sig).expect("hex is ASCII"),
    );
    h.insert("content-type", HeaderValue::from_static("application/json"));
    h
}
