//! A streamed answer (`stream: true`): server-sent events in OpenAI's chunk format.

use std::convert::Infallible;
use std::sync::Arc;

use axum::response::sse::{Event, Sse};
use futures_util::StreamExt as _;
use serde_json::{Value, json};
use switchboard_channel::{ChatKey, OutboundMessage, StreamRedactor, redact};
use tokio::sync::{mpsc, oneshot};

use super::{REPLY_TIMEOUT, WaiterGuard, usage_json};
use crate::gateway::Shared;

/// A streamed answer's identity, repeated in each of its chunks.
pub(super) struct StreamedReply {
    /// The waiting request's chat and inbound id.
    pub(super) key: ChatKey,
    pub(super) id: String,
    pub(super) completion_id: String,
    pub(super) model: String,
    pub(super) created: i64,
    /// Whether the client asked for a last chunk with the tokens used.
    pub(super) include_usage: bool,
}

impl StreamedReply {
    fn chunk(&self, delta: Value, finish: Option<&str>) -> Event {
        self.event(
            json!([{"index": 0, "delta": delta, "finish_reason": finish}]),
            None,
        )
    }

    fn event(&self, choices: Value, usage: Option<Value>) -> Event {
        let mut body = json!({
            "id": self.completion_id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": choices,
        });
        if self.include_usage {
            // Null on every chunk but the last, as OpenAI sends it.
            body["usage"] = usage.unwrap_or(Value::Null);
        }
        Event::default().data(body.to_string())
    }
}

pub(super) fn stream_reply(
    shared: Arc<Shared>,
    reply: StreamedReply,
    mut reply_rx: oneshot::Receiver<OutboundMessage>,
    mut deltas: mpsc::UnboundedReceiver<String>,
) -> Sse<impl futures_util::Stream<Item = Result<Event, Infallible>>> {
    let (tx, rx) = mpsc::channel::<Event>(64);
    tokio::spawn(async move {
        let _guard = WaiterGuard {
            api: &shared.api,
            bus: &shared.bus,
            key: reply.key.clone(),
            id: reply.id.clone(),
            armed: true,
            gone: None,
        };
        let send = |e| tx.send(e);
        if send(reply.chunk(json!({"role": "assistant", "content": ""}), None))
            .await
            .is_err()
        {
            return;
        }
        // What went out, redacted: the model may write a secret it was led to, and these
        // pieces do not pass the outbox (the final reply does).
        let mut streamed = String::new();
        let mut redactor = StreamRedactor::default();
        let deadline = tokio::time::sleep(REPLY_TIMEOUT);
        tokio::pin!(deadline);
        let final_msg = loop {
            tokio::select! {
                // The client went away (while the model thinks, nothing is sent to notice).
                _ = tx.closed() => return,
                Some(d) = deltas.recv() => {
                    let d = redactor.push(&d);
                    if d.is_empty() {
                        continue;
                    }
                    streamed.push_str(&d);
                    if send(reply.chunk(json!({"content": d}), None)).await.is_err() {
                        return;
                    }
                }
                r = &mut reply_rx => break r.ok(),
                _ = &mut deadline => break None,
            }
        };
        // Deltas still queued, then whatever of the final text was not streamed.
        while let Ok(d) = deltas.try_recv() {
            let d = redactor.push(&d);
            if !d.is_empty() {
                streamed.push_str(&d);
                let _ = send(reply.chunk(json!({"content": d}), None)).await;
            }
        }
        let usage = final_msg.as_ref().and_then(|m| m.usage).unwrap_or_default();
        // The final text (redacted by the outbox) is compared with the redacted stream.
        let held = redact(redactor.held());
        let rest = match final_msg {
            // A continuation of what was streamed (or all of it, the part held back
            // included): the part not sent yet.
            Some(m) if m.text.starts_with(streamed.as_str()) => {
                m.text[streamed.len()..].to_string()
            }
            // The last round's answer after earlier rounds' text: streamed already, but for
            // what was held back.
            Some(m) if format!("{streamed}{held}").ends_with(m.text.as_str()) => held.into_owned(),
            // Said after what was streamed: an error (the model failed mid-answer),
            // "Stopped.", the note that the step limit was reached. Text held back, maybe
            // part of a secret cut off, is left out.
            Some(m) => format!("\n\n{}", m.text),
            None if streamed.is_empty() => "⚠️ No reply in time.".into(),
            None => "\n\n⚠️ No reply in time.".into(),
        };
        if !rest.is_empty() {
            let _ = send(reply.chunk(json!({"content": rest}), None)).await;
        }
        let _ = send(reply.chunk(json!({}), Some("stop"))).await;
        if reply.include_usage {
            let _ = send(reply.event(json!([]), Some(usage_json(usage)))).await;
        }
        let _ = send(Event::default().data("[DONE]")).await;
    });
    // Comments while the model thinks (retries may take minutes), so idle proxies keep the
    // connection.
    Sse::new(tokio_stream::wrappers::ReceiverStream::new(rx).map(Ok::<_, Infallible>))
        .keep_alive(axum::response::sse::KeepAlive::default())
}
