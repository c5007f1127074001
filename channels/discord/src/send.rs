//! Delivering a reply: render and chunk, post the chunks in order (the first one replying
//! to the triggering message), wait out 429s and back off on 5xx, and remember delivered
//! chunks so that a retried reply never posts a chunk twice.
//!
//! A key is a channel id, but a user id works too (what people copy for `allow_from`): its
//! post is `404 Unknown Channel`, so the DM channel with that user is opened and used (and
//! remembered). A refusal for a missing permission is explained in the log (`refused`).
//! Posting in a thread makes the bot take part in it (`follow`).

use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Mutex;
use std::time::Duration;

use serde_json::{Value, json};
use switchboard_channel::{
    Bounded, Capabilities, ChatKey, OutboundMessage, SendError, SendReceipt,
};

use crate::DiscordConfig;
use crate::memory::Memory;
use crate::rest::{MISSING_ACCESS, MISSING_PERMISSIONS, Rest, RestError, UNKNOWN_CHANNEL};

/// Attempts per chunk for 5xx / network failures.
const TRANSIENT_ATTEMPTS: u32 = 4;
/// 429s waited out per chunk before giving the reply back to the outbox.
const RATE_LIMIT_ATTEMPTS: u32 = 5;
/// Replies whose partial delivery is remembered.
const REMEMBERED_REPLIES: usize = 256;

/// The Discord channel id of a `discord:<channel_id>` key.
pub(crate) fn channel_id(key: &ChatKey) -> Result<u64, SendError> {
    key.chat_id
        .parse()
        .map_err(|_| SendError::Permanent(format!("{key} is not a Discord channel key")))
}

/// Map a REST failure to what the outbox should do.
pub(crate) fn to_send_error(e: RestError) -> SendError {
    match e {
        RestError::RateLimited(d) => SendError::RetryAfter(d),
        e if e.is_transient() => SendError::Transient(e.to_string()),
        e => SendError::Permanent(e.to_string()),
    }
}

/// Ids of chunks already posted for replies that failed part-way, by [`OutboundMessage::progress_key`].
/// Bounded to [`REMEMBERED_REPLIES`] replies.
pub(crate) struct DeliveredChunks {
    inner: Mutex<Bounded<u64, Vec<String>>>,
}

impl Default for DeliveredChunks {
    fn default() -> Self {
        Self {
            inner: Mutex::new(Bounded::with_cap(REMEMBERED_REPLIES)),
        }
    }
}

impl DeliveredChunks {
    fn get(&self, fp: u64) -> Vec<String> {
        let g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        g.get(&fp).cloned().unwrap_or_default()
    }

    fn remember(&self, fp: u64, ids: &[String]) {
        let mut g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        g.insert(fp, ids.to_vec());
    }

    fn forget(&self, fp: u64) {
        let mut g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        g.remove(&fp);
    }
}

/// The JSON body of one chunk. Mentions: users only (never @everyone, @here or roles).
/// `nonce` (≤ 25 characters) names the chunk: Discord answers a repeat of it (a retry after
/// an answer lost on the way back, or the outbox's after a restart) with the message it
/// created then, instead of posting it twice.
pub(crate) fn chunk_body(content: &str, reply_to: Option<&str>, nonce: Option<&str>) -> Value {
    let mut body = json!({
        "content": content,
        "allowed_mentions": {"parse": ["users"], "replied_user": true},
    });
    if let Some(n) = nonce {
        body["nonce"] = json!(n);
        body["enforce_nonce"] = json!(true);
    }
    if let Some(id) = reply_to {
        body["message_reference"] = json!({"message_id": id, "fail_if_not_exists": false});
    }
    body
}

/// What names a reply to Discord on every attempt to post it. The outbox's number for it
/// (mixed with its fingerprint, so that a wiped store counting from 0 again within Discord's
/// few minutes does not have a new reply swallowed as a repeat of an old one). A reply
/// recorded before outboxes numbered them is named by its fingerprint only when it answers
/// a message (which sets it apart): the same reminder text sent again minutes later is a
/// new post, not a repeat.
fn nonce(msg: &OutboundMessage, fp: u64) -> Option<u64> {
    match (msg.delivery, &msg.in_reply_to_inbound) {
        (Some(d), _) => {
            let mut h = DefaultHasher::new();
            (fp, d).hash(&mut h);
            Some(h.finish())
        }
        (None, Some(_)) => Some(fp),
        (None, None) => None,
    }
}

/// Post one chunk: wait out short 429s, back off on transient failures.
async fn post_chunk(
    rest: &Rest,
    cfg: &DiscordConfig,
    channel_id: u64,
    body: &Value,
) -> Result<String, RestError> {
    let mut transient = 0;
    let mut limited = 0;
    loop {
        match rest.create_message(channel_id, body).await {
            Ok(id) => return Ok(id),
            Err(RestError::RateLimited(wait))
                if wait <= cfg.max_inline_wait && limited < RATE_LIMIT_ATTEMPTS =>
            {
                limited += 1;
                tracing::debug!(channel_id, ?wait, "discord: rate limited, waiting");
                tokio::time::sleep(wait).await;
            }
            Err(e) if e.is_transient() && transient + 1 < TRANSIENT_ATTEMPTS => {
                let wait = Duration::from_millis(500 << transient);
                transient += 1;
                tracing::warn!(channel_id, error = %e, ?wait, "discord: send failed, retrying");
                tokio::time::sleep(wait).await;
            }
            Err(e) => return Err(e),
        }
    }
}

/// The channel to post in for `msg`'s key: its DM channel when the key is a user id whose
/// DM was opened before.
pub(crate) fn target(memory: &Memory, key: &ChatKey) -> Result<u64, SendError> {
    let id = channel_id(key)?;
    Ok(memory.dm_of(id).unwrap_or(id))
}

/// `id` was no channel (`refused`, a 404 Unknown Channel): open the DM channel with `id` as
/// a user id. `Err`: the permanent refusal, saying it is neither.
async fn open_dm(
    rest: &Rest,
    memory: &Memory,
    id: u64,
    refused: RestError,
) -> Result<u64, SendError> {
    match rest.open_dm(id).await {
        Ok(dm) => {
            tracing::info!(
                user = id,
                dm_channel = dm,
                "discord: discord:{id} is a user id, not a channel: posting in the DM channel with them"
            );
            memory.remember_dm(id, dm);
            Ok(dm)
        }
        Err(e) if e.is_transient() || matches!(e, RestError::RateLimited(_)) => {
            Err(to_send_error(e))
        }
        Err(e) => Err(SendError::Permanent(format!(
            "{refused}: discord:{id} is no channel the bot can reach, and no user it can open a \
             DM with ({e})"
        ))),
    }
}

/// Deliver `msg`: chunks in order; on failure, the chunks already posted are remembered and
/// skipped when the outbox retries the same reply.
pub(crate) async fn send(
    rest: &Rest,
    caps: Capabilities,
    cfg: &DiscordConfig,
    delivered: &DeliveredChunks,
    memory: &Memory,
    msg: &OutboundMessage,
) -> Result<SendReceipt, SendError> {
    let asked = channel_id(&msg.key)?;
    let mut channel_id = target(memory, &msg.key)?;
    let chunks: Vec<String> = switchboard_channel::format::render_chunks(&msg.text, caps)
        .into_iter()
        .filter(|c| !c.trim().is_empty())
        .collect();
    let fp = msg.fingerprint();
    let progress = msg.progress_key();
    let mut ids = delivered.get(progress);
    // Followed before the post lands: a follow-up written the moment it shows counts.
    let mut newly = memory.posting(channel_id, msg.reply_to.as_deref());
    for (i, chunk) in chunks.iter().enumerate().skip(ids.len()) {
        let reply_to = if i == 0 {
            msg.reply_to.as_deref()
        } else {
            None
        };
        let nonce = nonce(msg, fp).map(|n| format!("{n:016x}-{i}"));
        let body = chunk_body(chunk, reply_to, nonce.as_deref());
        let posted = match post_chunk(rest, cfg, channel_id, &body).await {
            Err(e) if e.code() == Some(UNKNOWN_CHANNEL) && channel_id == asked => {
                match open_dm(rest, memory, asked, e).await {
                    Ok(dm) => {
                        memory.not_posted(asked, newly);
                        channel_id = dm;
                        newly = memory.posting(channel_id, msg.reply_to.as_deref());
                        post_chunk(rest, cfg, channel_id, &body).await
                    }
                    Err(refusal) => {
                        if ids.is_empty() {
                            memory.not_posted(asked, newly);
                        } else {
                            delivered.remember(progress, &ids);
                        }
                        tracing::warn!(channel_id, error = %refusal, "discord: reply not delivered");
                        return Err(refusal);
                    }
                }
            }
            r => r,
        };
        match posted {
            Ok(id) => {
                ids.push(id);
                memory.posted(channel_id);
            }
            Err(e) => {
                // Refused for want of a permission: the bot is not welcome there any more.
                let unwelcome = matches!(e.code(), Some(MISSING_ACCESS | MISSING_PERMISSIONS));
                if ids.is_empty() || unwelcome {
                    memory.not_posted(channel_id, newly || unwelcome);
                }
                if !ids.is_empty() {
                    delivered.remember(progress, &ids);
                }
                tracing::warn!(channel_id, chunk = i + 1, of = chunks.len(), error = %e,
                    "discord: reply not (fully) delivered");
                let replying = body.get("message_reference").is_some();
                memory
                    .explained
                    .explain(rest, &memory.places, channel_id, &e, replying)
                    .await;
                return Err(to_send_error(e));
            }
        }
    }
    delivered.forget(progress);
    Ok(SendReceipt { message_ids: ids })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn body_never_pings_everyone_or_roles() {
        let b = chunk_body("@everyone hi", Some("42"), Some("n"));
        assert_eq!(b["allowed_mentions"]["parse"], json!(["users"]));
        assert_eq!(b["message_reference"]["message_id"], "42");
        assert_eq!(b["message_reference"]["fail_if_not_exists"], false);
        assert!(
            chunk_body("x", None, None)
                .get("message_reference")
                .is_none()
        );
    }

    #[test]
    fn channel_ids_must_be_numeric() {
        assert_eq!(channel_id(&ChatKey::new("discord", "123")), Ok(123));
        assert!(matches!(
            channel_id(&ChatKey::new("discord", "abc")),
            Err(SendError::Permanent(_))
        ));
    }

    #[test]
    fn delivered_chunks_are_bounded() {
        let d = DeliveredChunks::default();
        for fp in 0..(REMEMBERED_REPLIES as u64 + 10) {
            d.remember(fp, &["1".into()]);
        }
        assert!(d.get(0).is_empty());
        assert_eq!(d.get(REMEMBERED_REPLIES as u64 + 9), vec!["1".to_string()]);
    }
}
