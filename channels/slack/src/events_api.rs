//! Events API intake: `POST /slack/events`, signed by Slack, answered before any turn runs.
//!
//! The gateway mounts [`SlackChannel::handle_events_request`] on its HTTP router. The
//! signature (`x-slack-signature`, HMAC-SHA256 over `v0:{timestamp}:{body}`, compared in
//! constant time) and the timestamp (at most 5 minutes off) are checked first; then
//! `url_verification` is answered, or the event is published and 200 returned at once.
//! Slack's retries (`x-slack-retry-num`) carry the same message, so its id
//! (`slack:msg:<channel>:<ts>`) lets the gateway drop the duplicate.

use std::sync::Arc;

use http::HeaderMap;
use serde_json::{Value, json};
use slack_morphism::SlackSigningSecret;
use slack_morphism::signature_verifier::{
    SlackEventSignatureVerifier, SlackEventSignatureVerifierError,
};
use tracing::{debug, warn};

use crate::{IntakeError, Shared, SlackChannel};

const TEXT: &str = "text/plain; charset=utf-8";
const JSON: &str = "application/json";

fn text(status: u16, body: &str) -> (u16, String, &'static str) {
    (status, body.to_string(), TEXT)
}

fn header<'a>(h: &'a HeaderMap, name: &str) -> Option<&'a str> {
    h.get(name).and_then(|v| v.to_str().ok())
}

impl SlackChannel {
    /// Handle one Events API request: returns `(status, body, content type)`.
    ///
    /// 401 for a missing or wrong signature or a timestamp more than 5 minutes off, 400 for a
    /// body that is not an event, 404 when no signing secret is configured, 503 when the
    /// event cannot be taken in yet (the body says why: the channel starting, or stopped and
    /// why, a catch-up, a sender's name), 500 when publishing failed (Slack will retry), else
    /// 200 — as soon as the message is published, never after the turn.
    pub async fn handle_events_request(
        &self,
        headers: &HeaderMap,
        body: &[u8],
    ) -> (u16, String, &'static str) {
        handle(&self.shared, headers, body).await
    }
}

async fn handle(sh: &Arc<Shared>, headers: &HeaderMap, body: &[u8]) -> (u16, String, &'static str) {
    let Some(secret) = sh.cfg.signing_secret.as_deref() else {
        return text(404, "slack events api is not enabled");
    };
    let (Some(ts), Some(sig)) = (
        header(headers, SlackEventSignatureVerifier::SLACK_SIGNED_TIMESTAMP),
        header(
            headers,
            SlackEventSignatureVerifier::SLACK_SIGNED_HASH_HEADER,
        ),
    ) else {
        return text(401, "missing slack signature headers");
    };
    // A body that is not UTF-8 cannot match the signature after lossy decoding: 401.
    let body_str = String::from_utf8_lossy(body);
    let verifier = SlackEventSignatureVerifier::new(&SlackSigningSecret::new(secret.to_string()));
    if let Err(e) = verifier.verify(sig, &body_str, ts) {
        let why = match e {
            SlackEventSignatureVerifierError::IncorrectOrExpiredTimestampError(_) => {
                "stale or invalid timestamp"
            }
            _ => "invalid signature",
        };
        warn!(reason = why, "slack events api request refused");
        return text(401, why);
    }
    let Ok(v) = serde_json::from_slice::<Value>(body) else {
        return text(400, "body is not JSON");
    };
    match v.get("type").and_then(Value::as_str) {
        Some("url_verification") => match v.get("challenge").and_then(Value::as_str) {
            Some(c) => (200, json!({ "challenge": c }).to_string(), JSON),
            None => text(400, "url_verification without a challenge"),
        },
        Some("event_callback") => {
            if v.get("event").is_none_or(|e| !e.is_object()) {
                return text(400, "event_callback without an event");
            }
            if let Some(n) = header(headers, "x-slack-retry-num") {
                debug!(retry = n, "slack events api retry");
            }
            match sh.intake(&v).await {
                Ok(()) => text(200, ""),
                Err(IntakeError::NotRunning(why)) => {
                    text(503, &format!("slack channel not running: {why}"))
                }
                // Slack retries; by then the catch-up has published it (or it goes in).
                Err(IntakeError::CatchingUp) => text(503, "slack channel catching up"),
                Err(IntakeError::NameUnknown) => text(503, "slack sender's name not known yet"),
                Err(IntakeError::Publish(e)) => {
                    warn!(error = %e, "slack event not published; slack will retry");
                    text(500, "could not publish")
                }
            }
        }
        Some(_) => text(200, ""),
        None => text(400, "no event type"),
    }
}
