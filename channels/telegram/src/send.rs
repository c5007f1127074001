//! Delivering replies: chat key → chat and topic, markdown → HTML chunks, `sendMessage`
//! with retries, plain-text fallback when Telegram rejects the markup, typing indicator.

use std::time::Duration;

use switchboard_channel::format::{chunk_markdown, render, render_chunks};
use switchboard_channel::{
    Capabilities, ChatKey, Dialect, OutboundMessage, SendError, SendReceipt,
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

/// One message of a reply: its HTML, and the plain text sent if Telegram refuses the HTML.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Chunk {
    pub html: String,
    pub plain: String,
}

/// Split and render a reply with the shared formatter. Each markdown piece normally renders
/// to one message, whose fallback is that piece rendered plain; in the rare case where the
/// HTML of a piece had to be split again, the fallback is the visible text of each part.
pub(crate) fn chunks(text: &str, caps: Capabilities) -> Vec<Chunk> {
    chunk_markdown(text, caps.max_message_len.max(1))
        .into_iter()
        .flat_map(|md| {
            let parts = render_chunks(&md, caps);
            if parts.len() == 1 {
                let plain = render(&md, Dialect::Plain);
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
                        plain: html_to_text(&html),
                        html,
                    })
                    .collect()
            }
        })
        .collect()
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

/// What `send` needs from the adapter.
pub(crate) struct Sender<'a> {
    pub bot: &'a Bot,
    pub token: &'a str,
    pub pacer: &'a Pacer,
    pub caps: Capabilities,
    pub attempts: u32,
    pub retry_initial: Duration,
    pub retry_max: Duration,
    pub max_inline_retry_after: Duration,
}

impl Sender<'_> {
    /// Send a reply in order, chunk by chunk; never resends a delivered chunk.
    pub(crate) async fn send(&self, msg: &OutboundMessage) -> Result<SendReceipt, SendError> {
        let target = Target::parse(&msg.key)?;
        let reply_to = msg
            .reply_to
            .as_deref()
            .and_then(|r| r.trim().parse::<i32>().ok())
            .filter(|_| target.is_group());
        let mut receipt = SendReceipt::default();
        for (i, chunk) in chunks(&msg.text, self.caps).iter().enumerate() {
            let reply = if i == 0 { reply_to } else { None };
            match self.send_chunk(target, chunk, reply, i == 0).await {
                Ok(id) => receipt.message_ids.push(id.to_string()),
                Err(e) if receipt.message_ids.is_empty() => return Err(e),
                Err(e) => {
                    // Part of the reply is out: failing now would make the caller resend
                    // it, so report what was delivered.
                    tracing::error!(key = %msg.key, chunk = i, error = %e,
                        "telegram: giving up on the rest of a reply after it was partly sent");
                    break;
                }
            }
        }
        Ok(receipt)
    }

    async fn send_chunk(
        &self,
        target: Target,
        chunk: &Chunk,
        reply_to: Option<i32>,
        first: bool,
    ) -> Result<i32, SendError> {
        let mut plain = false;
        let mut backoff = Backoff::new(self.retry_initial, self.retry_max);
        let mut attempt = 0;
        loop {
            attempt += 1;
            self.pacer.acquire(target.chat).await;
            let text = if plain {
                chunk.plain.clone()
            } else {
                chunk.html.clone()
            };
            let mut req = self.bot.send_message(ChatId(target.chat), text);
            if !plain {
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
            if !plain && matches!(err, RequestError::Api(ApiError::CantParseEntities(_))) {
                tracing::warn!(
                    chat = target.chat,
                    "telegram refused the HTML; resending as plain text"
                );
                plain = true;
                attempt -= 1;
                continue;
            }
            let failure = classify(&err, self.token);
            let wait = match &failure {
                Failure::RetryAfter(d) if first && *d > self.max_inline_retry_after => {
                    return Err(failure.into_send_error());
                }
                Failure::RetryAfter(d) => *d,
                Failure::Transient(_) | Failure::Conflict(_) | Failure::WebhookActive => {
                    backoff.next_delay()
                }
                Failure::Unauthorized | Failure::Permanent(_) => {
                    return Err(failure.into_send_error());
                }
            };
            if attempt >= self.attempts {
                return Err(failure.into_send_error());
            }
            tracing::warn!(chat = target.chat, attempt, wait = ?wait, error = ?failure,
                "telegram: sendMessage failed, retrying");
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
            .map_err(|e| classify(&e, self.token).into_send_error())
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

    #[test]
    fn html_to_text_drops_tags_and_unescapes() {
        assert_eq!(
            html_to_text("<b>a &amp; b</b> &lt;x&gt; <a href=\"u\">l</a>"),
            "a & b <x> l"
        );
    }
}
