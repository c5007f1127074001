//! Delivering replies: chat key → chat and topic, markdown → HTML chunks, `sendMessage`
//! with retries, plain-text fallback when Telegram rejects the markup, typing indicator.

use std::sync::Mutex;
use std::time::Duration;

use switchboard_channel::format::{chunk_markdown_utf16, render, render_chunks};
use switchboard_channel::{
    Bounded, Capabilities, ChatKey, Dialect, OutboundMessage, SendError, SendReceipt,
};
use teloxide::Bot;
use teloxide::payloads::{SendChatActionSetters, SendMessageSetters};
use teloxide::prelude::Requester;
use teloxide::types::{ChatAction, ChatId, MessageId, ParseMode, ReplyParameters, ThreadId};
use teloxide::{ApiError, RequestError};

use crate::errors::{Backoff, Failure, classify};
use crate::pacing::Pacer;

/// Where a key points: a chat, and a forum topic in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Target {
    pub chat: i64,
    pub thread: Option<i32>,
}

impl Target {
    /// `telegram:<chat>` or `telegram:<chat>:topic:<thread>`.
    pub(crate) fn parse(key: &ChatKey) -> Result<Self, SendError> {
        let bad = || SendError::Permanent(format!("not a Telegram chat key: {key}"));
        if key.channel != "telegram" {
            return Err(bad());
        }
        let (chat, thread) = match key.chat_id.split_once(":topic:") {
            Some((c, t)) => (c, Some(t.parse::<i32>().map_err(|_| bad())?)),
            None => (key.chat_id.as_str(), None),
        };
        Ok(Self {
            chat: chat.parse().map_err(|_| bad())?,
            thread,
        })
    }

    /// Groups and supergroups have negative ids.
    pub(crate) fn is_group(&self) -> bool {
        self.chat < 0
    }
}

/// One message of a reply: its HTML, and the plain text sent instead if Telegram refuses
/// the HTML (in as many messages as it takes to stay within the limit).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Chunk {
    pub html: String,
    pub plain: Vec<String>,
}

/// Split and render a reply with the shared formatter. Each markdown piece normally renders
/// to one message, whose fallback is that piece rendered plain; in the rare case where the
/// HTML of a piece had to be split again, the fallback is the visible text of each part.
/// Plain text can be longer than its HTML (links become "label (url)"), so the fallback is
/// split again at the limit.
pub(crate) fn chunks(text: &str, caps: Capabilities) -> Vec<Chunk> {
    let max = caps.max_message_len.max(1);
    chunk_markdown_utf16(text, max)
        .into_iter()
        .flat_map(|md| {
            let parts = render_chunks(&md, caps);
            if parts.len() == 1 {
                let plain = split_plain(&render(&md, Dialect::Plain), max);
                parts
                    .into_iter()
                    .map(|html| Chunk {
                        html,
                        plain: plain.clone(),
                    })
                    .collect::<Vec<_>>()
            } else {
                parts
                    .into_iter()
                    .map(|html| Chunk {
                        plain: split_plain(&html_to_text(&html), max),
                        html,
                    })
                    .collect()
            }
        })
        .collect()
}

/// Split plain text into messages of at most `max` UTF-16 code units (Telegram's count),
/// cutting at the last line break that fits, else the last whitespace, else between two
/// characters. The whitespace at a cut is dropped and no part is blank; a text within the
/// limit comes back unchanged.
fn split_plain(text: &str, max: usize) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = text;
    while !rest.trim().is_empty() {
        // Byte length of the longest prefix within `max` units (at least one character).
        let mut units = 0;
        let fits = rest
            .char_indices()
            .find_map(|(i, c)| {
                units += c.len_utf16();
                (units > max).then_some(i)
            })
            .unwrap_or(rest.len());
        if fits == rest.len() {
            out.push(rest.to_string());
            break;
        }
        let fits = fits.max(rest.chars().next().map_or(1, char::len_utf8));
        let head = &rest[..fits];
        let cut = head
            .rfind('\n')
            .filter(|&i| i > 0)
            .or_else(|| head.rfind(char::is_whitespace).filter(|&i| i > 0))
            .unwrap_or(fits);
        let part = rest[..cut].trim_end();
        if !part.is_empty() {
            out.push(part.to_string());
        }
        rest = rest[cut..].trim_start();
    }
    out
}

/// The visible text of Telegram HTML: tags dropped, the four escapes undone.
fn html_to_text(html: &str) -> String {
    let mut out = String::with_capacity(html.len());
    let mut in_tag = false;
    for c in html.chars() {
        match c {
            '<' => in_tag = true,
            '>' if in_tag => in_tag = false,
            _ if !in_tag => out.push(c),
            _ => {}
        }
    }
    out.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&amp;", "&")
}

/// Replies whose partial delivery is remembered.
const REMEMBERED_REPLIES: usize = 256;

/// How far a reply got: the chunks fully delivered, the plain-text parts of the next chunk
/// delivered (when its HTML was refused), and the ids of every message posted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Progress {
    chunks: usize,
    parts: usize,
    ids: Vec<String>,
}

/// What was already posted of replies that failed part-way, by
/// [`OutboundMessage::progress_key`], so that the outbox's retry of the same reply never
/// posts a chunk twice. Bounded to [`REMEMBERED_REPLIES`] replies.
pub(crate) struct DeliveredChunks {
    inner: Mutex<Bounded<u64, Progress>>,
}

impl Default for DeliveredChunks {
    fn default() -> Self {
        Self {
            inner: Mutex::new(Bounded::with_cap(REMEMBERED_REPLIES)),
        }
    }
}

impl DeliveredChunks {
    fn get(&self, fp: u64) -> Progress {
        let g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        g.get(&fp).cloned().unwrap_or_default()
    }

    fn remember(&self, fp: u64, progress: &Progress) {
        let mut g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        g.insert(fp, progress.clone());
    }

    fn forget(&self, fp: u64) {
        let mut g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        g.remove(&fp);
    }
}

/// Why one message was not posted.
enum PostError {
    /// Telegram could not parse the HTML ("can't parse entities").
    Markup,
    /// Refused for good, or still failing after the inline retries.
    Failed(SendError),
}

impl PostError {
    fn into_send_error(self) -> SendError {
        match self {
            PostError::Markup => {
                SendError::Permanent("Telegram could not parse the message's entities".into())
            }
            PostError::Failed(e) => e,
        }
    }
}

/// What `send` needs from the adapter.
pub(crate) struct Sender<'a> {
    pub bot: &'a Bot,
    pub pacer: &'a Pacer,
    pub delivered: &'a DeliveredChunks,
    pub caps: Capabilities,
    pub attempts: u32,
    pub retry_initial: Duration,
    pub retry_max: Duration,
    pub max_inline_retry_after: Duration,
}

impl Sender<'_> {
    /// Send a reply in order, chunk by chunk. On failure the error goes back to the outbox
    /// and what was posted is remembered, so its retry of the same reply starts where this
    /// one stopped: a delivered chunk is never sent again.
    pub(crate) async fn send(&self, msg: &OutboundMessage) -> Result<SendReceipt, SendError> {
        let target = Target::parse(&msg.key)?;
        let reply_to = msg
            .reply_to
            .as_deref()
            .and_then(|r| r.trim().parse::<i32>().ok())
            .filter(|_| target.is_group());
        let chunks = chunks(&msg.text, self.caps);
        let fp = msg.progress_key();
        let mut progress = self.delivered.get(fp);
        for (i, chunk) in chunks.iter().enumerate().skip(progress.chunks) {
            let reply = if i == 0 { reply_to } else { None };
            if let Err(e) = self.send_chunk(target, chunk, reply, &mut progress).await {
                if !progress.ids.is_empty() {
                    self.delivered.remember(fp, &progress);
                    tracing::warn!(key = %msg.key, chunk = i + 1, of = chunks.len(), error = %e,
                        "telegram: reply partly sent; the rest goes out when it is retried");
                }
                return Err(e);
            }
            progress.chunks += 1;
            progress.parts = 0;
        }
        self.delivered.forget(fp);
        Ok(SendReceipt {
            message_ids: progress.ids,
        })
    }

    /// Send one chunk as HTML, or as plain text (from the first part not yet delivered)
    /// when Telegram refuses the HTML; every posted id goes into `progress`.
    async fn send_chunk(
        &self,
        target: Target,
        chunk: &Chunk,
        reply_to: Option<i32>,
        progress: &mut Progress,
    ) -> Result<(), SendError> {
        if progress.parts == 0 {
            match self.post(target, &chunk.html, true, reply_to).await {
                Ok(id) => {
                    progress.ids.push(id.to_string());
                    return Ok(());
                }
                Err(PostError::Failed(e)) => return Err(e),
                Err(PostError::Markup) => tracing::warn!(
                    chat = target.chat,
                    "telegram refused the HTML; resending as plain text"
                ),
            }
        }
        for (j, part) in chunk.plain.iter().enumerate().skip(progress.parts) {
            let reply = if j == 0 { reply_to } else { None };
            match self.post(target, part, false, reply).await {
                Ok(id) => {
                    progress.ids.push(id.to_string());
                    progress.parts += 1;
                }
                Err(e) => return Err(e.into_send_error()),
            }
        }
        Ok(())
    }

    /// `sendMessage` with retries: 429s waited out (a long one handed back to the outbox,
    /// which waits, bounded and heeding shutdown, and retries the reply from the chunk that
    /// was refused: the ones before are remembered), other transient failures backed off,
    /// up to `attempts`.
    async fn post(
        &self,
        mut target: Target,
        text: &str,
        html: bool,
        reply_to: Option<i32>,
    ) -> Result<i32, PostError> {
        let mut backoff = Backoff::new(self.retry_initial, self.retry_max);
        let (mut attempt, mut migrated) = (0, false);
        loop {
            attempt += 1;
            self.pacer.acquire(target.chat).await;
            let mut req = self.bot.send_message(ChatId(target.chat), text);
            if html {
                req = req.parse_mode(ParseMode::Html);
            }
            if let Some(t) = target.thread {
                req = req.message_thread_id(ThreadId(MessageId(t)));
            }
            if let Some(r) = reply_to {
                req = req.reply_parameters(
                    ReplyParameters::new(MessageId(r)).allow_sending_without_reply(),
                );
            }
            let err = match req.await {
                Ok(sent) => return Ok(sent.id.0),
                Err(e) => e,
            };
            if html && matches!(err, RequestError::Api(ApiError::CantParseEntities(_))) {
                return Err(PostError::Markup);
            }
            // The group became a supergroup (new id): the reply goes there. Telegram answers
            // so for every later send to the old id too (a reminder set before), once each.
            if let RequestError::MigrateToChatId(moved) = err {
                if !std::mem::replace(&mut migrated, true) {
                    tracing::info!(
                        from = target.chat,
                        to = moved.0,
                        "telegram: the group moved to a supergroup; sending there"
                    );
                    target.chat = moved.0;
                    attempt -= 1;
                    continue;
                }
            }
            let failure = classify(&err);
            let wait = match &failure {
                Failure::RetryAfter(d) if *d > self.max_inline_retry_after => {
                    return Err(PostError::Failed(failure.into_send_error()));
                }
                Failure::RetryAfter(d) => *d,
                Failure::Transient(_) | Failure::Conflict(_) | Failure::WebhookActive => {
                    backoff.next_delay()
                }
                Failure::Unauthorized | Failure::Permanent(_) => {
                    return Err(PostError::Failed(failure.into_send_error()));
                }
            };
            if attempt >= self.attempts {
                return Err(PostError::Failed(failure.into_send_error()));
            }
            tracing::warn!(chat = target.chat, attempt, wait = ?wait,
                "telegram: sendMessage failed, retrying: {failure}");
            tokio::time::sleep(wait).await;
        }
    }

    /// `sendChatAction typing`, in the topic when the key names one.
    pub(crate) async fn typing(&self, key: &ChatKey) -> Result<(), SendError> {
        let target = Target::parse(key)?;
        let mut req = self
            .bot
            .send_chat_action(ChatId(target.chat), ChatAction::Typing);
        if let Some(t) = target.thread {
            req = req.message_thread_id(ThreadId(MessageId(t)));
        }
        req.await
            .map(|_| ())
            .map_err(|e| classify(&e).into_send_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_map_to_chats_and_topics() {
        let k: ChatKey = "telegram:-100123:topic:7".parse().unwrap();
        assert_eq!(
            Target::parse(&k).unwrap(),
            Target {
                chat: -100123,
                thread: Some(7)
            }
        );
        let k: ChatKey = "telegram:42".parse().unwrap();
        assert_eq!(
            Target::parse(&k).unwrap(),
            Target {
                chat: 42,
                thread: None
            }
        );
        assert!(Target::parse(&"telegram:abc".parse().unwrap()).is_err());
        assert!(Target::parse(&"discord:1".parse().unwrap()).is_err());
    }

    fn utf16_len(s: &str) -> usize {
        s.encode_utf16().count()
    }

    #[test]
    fn plain_text_is_split_at_the_limit_in_utf16_units() {
        assert_eq!(split_plain("short\ntext", 20), ["short\ntext"]);
        assert!(split_plain(" \n ", 20).is_empty());
        // Line breaks first, then spaces, then anywhere.
        assert_eq!(
            split_plain("one two\nthree four five", 16),
            ["one two", "three four five"]
        );
        assert_eq!(split_plain("one two three", 9), ["one two", "three"]);
        assert_eq!(split_plain("abcdefghij", 4), ["abcd", "efgh", "ij"]);
        // An emoji is two units: ten of them need two messages of at most 10 units.
        let emoji = "🙂".repeat(10);
        let parts = split_plain(&emoji, 10);
        assert_eq!(parts, ["🙂".repeat(5), "🙂".repeat(5)]);
        // A character wider than the limit still goes out, alone.
        assert_eq!(split_plain("🙂🙂", 1), ["🙂", "🙂"]);
    }

    #[test]
    fn plain_fallback_never_exceeds_the_limit() {
        // The HTML shows "docs"; the plain text adds the URL and no longer fits.
        let md = format!(
            "{} see [docs](https://example.com/some/long/path/page)",
            "🙂".repeat(40)
        );
        let caps = Capabilities {
            edits: true,
            typing: true,
            threads: true,
            max_message_len: 100,
            dialect: Dialect::TelegramHtml,
        };
        assert!(utf16_len(&render(&md, Dialect::Plain)) > 100);
        // Counted in UTF-16 units, the source does not fit either: two messages.
        let chunks = chunks(&md, caps);
        assert_eq!(chunks.len(), 2);
        let plain: Vec<&String> = chunks.iter().flat_map(|c| &c.plain).collect();
        assert!(plain.iter().all(|p| utf16_len(p) <= 100), "{plain:?}");
        let words = |t: &str| t.split_whitespace().map(str::to_string).collect::<Vec<_>>();
        let joined: Vec<String> = plain.iter().flat_map(|p| words(p)).collect();
        assert_eq!(joined, words(&render(&md, Dialect::Plain)));
    }

    #[test]
    fn delivered_chunks_are_bounded() {
        let d = DeliveredChunks::default();
        let p = Progress {
            chunks: 1,
            parts: 0,
            ids: vec!["1".into()],
        };
        for fp in 0..(REMEMBERED_REPLIES as u64 + 10) {
            d.remember(fp, &p);
        }
        assert_eq!(d.get(0), Progress::default());
        assert_eq!(d.get(REMEMBERED_REPLIES as u64 + 9), p);
        d.forget(REMEMBERED_REPLIES as u64 + 9);
        assert_eq!(d.get(REMEMBERED_REPLIES as u64 + 9), Progress::default());
        assert_eq!(d.inner.lock().unwrap().len(), REMEMBERED_REPLIES - 1);
    }

    #[test]
    fn html_to_text_drops_tags_and_unescapes() {
        assert_eq!(
            html_to_text("<b>a &amp; b</b> &lt;x&gt; <a href=\"u\">l</a>"),
            "a & b <x> l"
        );
    }
}
