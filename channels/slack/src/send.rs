//! Replies: markdown → mrkdwn chunks → `chat.postMessage` in order; and the 👀 reaction.
//!
//! A key `slack:<channel>:<thread_ts>` replies in that thread; a key `slack:<channel>` posts
//! top-level, and each such post in a channel becomes a thread of the bot's. A 429 is
//! waited out inside `send` (bounded); a wait longer than `max_inline_retry_after` goes
//! back to the caller as [`SendError::RetryAfter`]. When a reply fails part-way, the chunks
//! already delivered are remembered by the reply's `progress_key`, so the outbox's retry of
//! the same reply sends only the rest.

use std::time::Duration;

use switchboard_channel::format::render_chunks;
use switchboard_channel::{Capabilities, ChatKey, OutboundMessage, SendError, SendReceipt};
use tracing::{debug, warn};

use crate::Shared;
use crate::web::WebError;

/// Attempts per chunk when Slack answers 429.
const RATE_LIMIT_ATTEMPTS: usize = 5;

/// Whether `key` names a conversation: `slack:<id or name>` (chat.postMessage takes
/// `C0123ABCD`, `general` or `#general`), with `:<thread ts>` (`1700000000.000100`) for a
/// thread.
pub fn is_conversation_key(key: &ChatKey) -> bool {
    let Ok((conversation, ts)) = target(key) else {
        return false;
    };
    let name = conversation.strip_prefix('#').unwrap_or(conversation);
    let named = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | '.'));
    let digits = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_digit());
    let is_ts = |t: &str| {
        t.split_once('.')
            .is_some_and(|(a, b)| digits(a) && digits(b))
    };
    named && ts.is_none_or(is_ts)
}

/// `(channel, thread_ts)` from a key's chat id.
/// Whether `key` is a channel (or a thread in one) rather than a direct message, where its
/// id tells: `D…` is a DM, `C…`/`G…` a channel, a `#name` a channel; `None` otherwise.
pub fn is_group_key(key: &ChatKey) -> Option<bool> {
    let (conversation, _) = target(key).ok()?;
    if crate::inbound::is_dm(conversation) {
        Some(false)
    } else {
        conversation.starts_with(['C', 'G', '#']).then_some(true)
    }
}

fn target(key: &ChatKey) -> Result<(&str, Option<&str>), SendError> {
    if key.channel != crate::NAME {
        return Err(SendError::Permanent(format!("not a slack key: {key}")));
    }
    match key.chat_id.split_once(':') {
        Some((c, t)) if !c.is_empty() && !t.is_empty() => Ok((c, Some(t))),
        Some(_) => Err(SendError::Permanent(format!("bad slack key: {key}"))),
        None => Ok((key.chat_id.as_str(), None)),
    }
}

async fn post_chunk(
    sh: &Shared,
    channel: &str,
    thread: Option<&str>,
    chunk: &str,
) -> Result<String, SendError> {
    let mut attempt = 0;
    loop {
        attempt += 1;
        match sh.web.post_message(channel, thread, chunk).await {
            Ok(ts) => return Ok(ts),
            Err(WebError::RateLimited(wait)) => {
                let wait = wait.unwrap_or(Duration::from_secs(1));
                if attempt >= RATE_LIMIT_ATTEMPTS || wait > sh.cfg.max_inline_retry_after {
                    return Err(SendError::RetryAfter(wait));
                }
                debug!(
                    ?wait,
                    attempt, "slack chat.postMessage rate limited; waiting"
                );
                tokio::time::sleep(wait).await;
            }
            Err(e) => return Err(e.to_send_error()),
        }
    }
}

/// Deliver one reply.
pub(crate) async fn send(
    sh: &Shared,
    caps: Capabilities,
    msg: &OutboundMessage,
) -> Result<SendReceipt, SendError> {
    let (channel, thread) = target(&msg.key)?;
    let chunks = render_chunks(&msg.text, caps);
    let fp = msg.progress_key();
    let start = sh.memory().delivered_chunks.get(&fp).copied().unwrap_or(0);
    let mut receipt = SendReceipt::default();
    for (i, chunk) in chunks.iter().enumerate().skip(start) {
        match post_chunk(sh, channel, thread, chunk).await {
            Ok(ts) => {
                let mut mem = sh.memory();
                mem.delivered_chunks.insert(fp, i + 1);
                // A top-level post in a channel roots a thread of the bot's: replies there
                // are addressed to it, also when an event carries no `parent_user_id`.
                if thread.is_none() && !crate::inbound::is_dm(channel) {
                    mem.threads.insert((channel.to_string(), ts.clone()), true);
                }
                receipt.message_ids.push(ts);
            }
            Err(e) => {
                if i > start || start > 0 {
                    warn!(key = %msg.key, delivered = i, total = chunks.len(), error = %e,
                          "slack reply failed part-way; a retry sends the rest");
                }
                return Err(e);
            }
        }
    }
    let mut mem = sh.memory();
    mem.delivered_chunks.remove(&fp);
    if let Some(t) = thread {
        mem.threads
            .insert((channel.to_string(), t.to_string()), true);
    }
    Ok(receipt)
}

/// Put 👀 on the last message published for `key`, once per message.
pub(crate) async fn react_eyes(sh: &Shared, key: &ChatKey) -> Result<(), SendError> {
    let Some((channel, ts)) = sh.memory().last_message.get(&key.to_string()).cloned() else {
        return Ok(());
    };
    let id = format!("{channel}:{ts}");
    if sh.memory().reacted.contains(&id) {
        return Ok(());
    }
    sh.web
        .add_reaction(&channel, &ts, "eyes")
        .await
        .map_err(|e| e.to_send_error())?;
    sh.memory().reacted.insert(id, ());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_map_to_channel_and_thread() {
        let k: ChatKey = "slack:C1:170.5".parse().unwrap();
        assert_eq!(target(&k).unwrap(), ("C1", Some("170.5")));
        let d: ChatKey = "slack:D1".parse().unwrap();
        assert_eq!(target(&d).unwrap(), ("D1", None));
        let t: ChatKey = "telegram:1".parse().unwrap();
        assert!(matches!(target(&t), Err(SendError::Permanent(_))));
    }

    #[test]
    fn chunks_respect_the_limit_and_keep_order() {
        let caps = Capabilities {
            edits: true,
            typing: false,
            threads: true,
            max_message_len: 100,
            dialect: switchboard_channel::Dialect::SlackMrkdwn,
        };
        let text: String = (0..50).map(|i| format!("line {i:02} & more\n")).collect();
        let chunks = render_chunks(&text, caps);
        assert!(chunks.len() > 1);
        assert!(
            chunks.iter().all(|c| c.chars().count() <= 100),
            "{chunks:?}"
        );
        let joined = chunks.concat();
        assert!(joined.find("line 00").unwrap() < joined.find("line 49").unwrap());
        assert!(joined.contains("&amp;"), "mrkdwn escapes &");
    }
}
