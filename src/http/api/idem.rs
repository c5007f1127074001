//! `Idempotency-Key`: a request sent again with the same key by the same caller is the same
//! request. Its message id is derived from the key and the caller, so the bus's dedup drops
//! the retry's message; the retry waits for the answer of the turn still running (the
//! inbox replay's, after a restart), or gets the one kept ([`record`]) without anything
//! running. The same key with another request (model or last user message) is refused.
//!
//! Such a request's client going away does not withdraw its message (as one without a key
//! does): its retry is to find the answer.

mod record;

use std::sync::Arc;
use std::time::Duration;

use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};
use switchboard_channel::{ChatKey, InboundMessage, OutboundMessage, Published};
use tokio::sync::{mpsc, oneshot};

use super::channel::is_restart_notice;
use super::{REPLY_TIMEOUT, StreamedReply, WaiterGuard, completion, error, stream_reply};
use crate::gateway::Shared;
use crate::store::Store;

pub use record::prune;
pub(super) use record::{Answer, keep_answer, keep_answer_now};

/// The request header.
const HEADER: &str = "Idempotency-Key";
/// Longest key, in bytes.
const KEY_MAX_BYTES: usize = 255;
/// Ids of keyed requests' messages start with this (those of others with `api:req:`).
const ID_PREFIX: &str = "api:idem:";
/// How long a client is told to wait before it retries a request the restart cut off.
const RETRY_AFTER_SECS: u64 = 5;
/// How long a retry whose request is found neither running nor answered waits for an
/// answer on its way (between two of the store's writes) before it is told there is none.
const SETTLE_GRACE: Duration = Duration::from_secs(2);

/// The request's key: `None` without the header; the error is a message for a 400.
pub(super) fn key(headers: &HeaderMap) -> Result<Option<String>, String> {
    let mut values = headers.get_all(HEADER).iter();
    let Some(value) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err(format!("`{HEADER}` must be sent once"));
    }
    let bytes = value.as_bytes();
    let wanted = format!("1 to {KEY_MAX_BYTES} visible ASCII characters");
    if bytes.is_empty() {
        return Err(format!("`{HEADER}` is empty: it must be {wanted}"));
    }
    if bytes.len() > KEY_MAX_BYTES {
        return Err(format!(
            "`{HEADER}` is {} bytes long: it must be {wanted}",
            bytes.len()
        ));
    }
    if !bytes.iter().all(u8::is_ascii_graphic) {
        return Err(format!(
            "`{HEADER}` must be {wanted} (no spaces, control characters or other bytes)"
        ));
    }
    Ok(Some(String::from_utf8_lossy(bytes).into_owned()))
}

/// The message id of the request with key `idem_key` from the caller: its chat (`api:<user>`)
/// and its bearer token, if any. Hashed: of fixed length, and neither the key nor the token
/// shows in the store or the logs.
pub(super) fn message_id(idem_key: &str, chat: &ChatKey, bearer: Option<&str>) -> String {
    let chat = chat.to_string();
    let parts = ["idempotency-key", bearer.unwrap_or(""), &chat, idem_key];
    format!("{ID_PREFIX}{}", digest(&parts))
}

/// What a retry must repeat: the model and the last user message.
pub(super) fn fingerprint(model: &str, text: &str) -> String {
    digest(&["request", model, text])
}

/// Whether `id` is a keyed request's message.
pub(super) fn is_keyed(id: &str) -> bool {
    id.starts_with(ID_PREFIX)
}

/// 128 bits of SHA-256 over `parts` (each after its length, so none runs into the next),
/// in hex.
fn digest(parts: &[&str]) -> String {
    let mut h = Sha256::new();
    for p in parts {
        h.update((p.len() as u64).to_be_bytes());
        h.update(p.as_bytes());
    }
    h.finalize()[..16]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Answer the keyed request `msg` (fingerprint `fp`): its answer if kept, or once its turn
/// (run now, or running already) gives one.
pub(super) async fn respond(
    shared: Arc<Shared>,
    msg: InboundMessage,
    fp: String,
    mut reply: StreamedReply,
    stream: bool,
) -> Response {
    let Some(store) = shared.api.answers().cloned() else {
        return error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "this gateway keeps no answers",
            "server_error",
        );
    };
    let (delta_tx, delta_rx) = mpsc::unbounded_channel();
    // First: from now on the answer reaches this request, whatever the store says below.
    let (place, mut reply_rx) = shared
        .api
        .join(&reply.id, &reply.key, stream.then_some(delta_tx));
    reply.place = Some(place);
    let guard = WaiterGuard {
        api: &shared.api,
        bus: &shared.bus,
        key: reply.key.clone(),
        id: reply.id.clone(),
        armed: true,
        gone: None,
        place: Some(place),
    };
    let unavailable = |e: &dyn std::fmt::Display| {
        tracing::error!(id = %reply.id, "a keyed request's record: {e}");
        error(
            StatusCode::SERVICE_UNAVAILABLE,
            "the request could not be taken: the store failed",
            "server_error",
        )
    };
    let claimed = record::claim(store.as_ref(), &reply.id, &fp).await;
    let before = match claimed {
        Ok(before) => before,
        Err(e) => return unavailable(&e),
    };
    if let Some(before) = &before {
        if before.fp != fp {
            return error(
                StatusCode::CONFLICT,
                &format!(
                    "this `{HEADER}` was used for another request (another model or last user \
                     message): send a new key for a new request"
                ),
                "invalid_request_error",
            );
        }
        reply.created = i64::try_from(before.at).unwrap_or(reply.created);
        if let Some(answer) = &before.answer {
            return answered(shared.clone(), reply, stream, answer);
        }
    }
    match shared.bus.publish(msg).await {
        Ok(Published::Accepted) => {}
        // Taken before (by a request that is waiting, went away, or died with the last
        // run): its answer is on its way, or kept.
        Ok(Published::Duplicate) => {
            let mut settled = settled(&shared, &store, &reply).await;
            if matches!(settled, Ok(record::Settled::Unknown)) {
                // Between two of the store's writes, maybe: the answer may come yet.
                if let Ok(Ok(answer)) = tokio::time::timeout(SETTLE_GRACE, &mut reply_rx).await {
                    let (tx, rx) = oneshot::channel();
                    let _ = tx.send(answer);
                    reply_rx = rx;
                    settled = Ok(record::Settled::InFlight);
                } else {
                    settled = self::settled(&shared, &store, &reply).await;
                }
            }
            match settled {
                Ok(record::Settled::InFlight) => {}
                Ok(record::Settled::Answered(answer)) => {
                    return answered(shared.clone(), reply, stream, &answer);
                }
                Ok(record::Settled::Unknown) => {
                    return error(
                        StatusCode::CONFLICT,
                        &format!(
                            "the request with this `{HEADER}` was taken before, but its answer \
                             is not kept (its turn was cut short): send a new key to ask again"
                        ),
                        "invalid_request_error",
                    );
                }
                Err(e) => return unavailable(&e),
            }
        }
        Ok(other) => {
            return error(
                StatusCode::CONFLICT,
                &format!("message not accepted: {other:?}"),
                "invalid_request_error",
            );
        }
        Err(crate::bus::BusError::ShuttingDown) => return restarting(),
        Err(e) => {
            return error(
                StatusCode::SERVICE_UNAVAILABLE,
                &e.to_string(),
                "server_error",
            );
        }
    }
    if stream {
        // The stream's task has its own.
        guard.disarm();
        return stream_reply(shared.clone(), reply, reply_rx, delta_rx).into_response();
    }
    match tokio::time::timeout(REPLY_TIMEOUT, reply_rx).await {
        // Not an answer: the answer comes after the restart, to a retry with this key.
        Ok(Ok(answer)) if is_restart_notice(&answer) => restarting(),
        Ok(Ok(answer)) => completion(&reply, &answer.text, answer.usage),
        _ => error(
            StatusCode::GATEWAY_TIMEOUT,
            "no reply in time",
            "server_error",
        ),
    }
}

/// The error of a keyed request the gateway's restart cut off (its turn goes on after it):
/// the body of a 503, and the event ending such a request's stream (without `[DONE]`).
pub(super) fn restarting_error() -> serde_json::Value {
    serde_json::json!({"error": {
        "message": format!(
            "the gateway is restarting: the request is kept and answered once it is back; send \
             the same request with the same `{HEADER}` in a few seconds to get its answer"
        ),
        "type": "server_error",
        "code": "gateway_restarting",
    }})
}

/// A 503 with `Retry-After` and [`restarting_error`].
fn restarting() -> Response {
    let retry_after = [(
        axum::http::header::RETRY_AFTER,
        RETRY_AFTER_SECS.to_string(),
    )];
    let body = axum::Json(restarting_error());
    (StatusCode::SERVICE_UNAVAILABLE, retry_after, body).into_response()
}

/// Where the request of `reply` stands: waiting or running by the bus's table, else from
/// the store (off the runtime's threads: it may walk the inbox and the outbox).
async fn settled(
    shared: &Shared,
    store: &Arc<dyn Store>,
    reply: &StreamedReply,
) -> Result<record::Settled, String> {
    if shared.bus.holds(&reply.key, &reply.id) {
        return Ok(record::Settled::InFlight);
    }
    let (store, id) = (store.clone(), reply.id.clone());
    match tokio::task::spawn_blocking(move || record::settled(store.as_ref(), &id)).await {
        Ok(settled) => settled.map_err(|e| e.to_string()),
        Err(e) => Err(e.to_string()),
    }
}

/// The kept `answer`, as the request asked for it (streamed or not).
fn answered(shared: Arc<Shared>, reply: StreamedReply, stream: bool, answer: &Answer) -> Response {
    if !stream {
        return completion(&reply, &answer.text, answer.usage);
    }
    let mut msg = OutboundMessage::new(reply.key.clone(), answer.text.clone());
    msg.kind = answer.kind;
    msg.usage = answer.usage;
    msg.in_reply_to_inbound = Some(reply.id.clone());
    let (tx, rx) = oneshot::channel();
    let _ = tx.send(msg);
    // No pieces: the whole text comes as one.
    let (_, deltas) = mpsc::unbounded_channel();
    stream_reply(shared, reply, rx, deltas).into_response()
}

#[cfg(test)]
mod tests {
    use axum::http::{HeaderMap, HeaderValue};

    use super::{fingerprint, key, message_id};

    fn headers(values: &[&[u8]]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for v in values {
            h.append("idempotency-key", HeaderValue::from_bytes(v).unwrap());
        }
        h
    }

    #[test]
    fn keys_are_checked() {
        assert_eq!(key(&headers(&[])), Ok(None));
        assert_eq!(key(&headers(&[b"abc-123"])), Ok(Some("abc-123".into())));
        let longest = "k".repeat(255);
        assert_eq!(
            key(&headers(&[longest.as_bytes()])),
            Ok(Some(longest.clone()))
        );
        let too_long = "k".repeat(256);
        let bad: [&[u8]; 5] = [b"", too_long.as_bytes(), b"a\tb", b"a b", "café".as_bytes()];
        for v in bad {
            let e = key(&headers(&[v])).unwrap_err();
            assert!(e.contains("`Idempotency-Key`"), "{e}");
        }
        assert!(key(&headers(&[b"a", b"b"])).is_err());
    }

    #[test]
    fn ids_depend_on_key_chat_and_bearer_only() {
        let alice = "api:alice".parse().unwrap();
        let bob = "api:bob".parse().unwrap();
        let id = message_id("k1", &alice, None);
        assert!(
            id.starts_with("api:idem:") && id.len() == "api:idem:".len() + 32,
            "{id}"
        );
        assert_eq!(id, message_id("k1", &alice, None));
        for other in [
            message_id("k2", &alice, None),
            message_id("k1", &bob, None),
            message_id("k1", &alice, Some("token")),
        ] {
            assert_ne!(id, other);
        }
        // Fields cannot run into each other.
        assert_ne!(fingerprint("ab", "c"), fingerprint("a", "bc"));
    }
}
