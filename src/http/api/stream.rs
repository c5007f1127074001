//! A streamed answer (`stream: true`): server-sent events in OpenAI's chunk format.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::response::sse::{Event, Sse};
use futures_util::StreamExt as _;
use serde_json::{Value, json};
use switchboard_channel::{ChatKey, OutboundMessage, StreamRedactor, redact};
use tokio::sync::{mpsc, oneshot};

use super::channel::is_restart_notice;
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
    /// A keyed request's place among those waiting for the reply (see `ApiChannel::join`).
    pub(super) place: Option<u64>,
}

impl StreamedReply {
    fn chunk(&self, delta: Value, finish: Option<&str>) -> String {
        self.event(
            json!([{"index": 0, "delta": delta, "finish_reason": finish}]),
            None,
        )
    }

    /// An event's data.
    fn event(&self, choices: Value, usage: Option<Value>) -> String {
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
        body.to_string()
    }
}

pub(super) fn stream_reply(
    shared: Arc<Shared>,
    reply: StreamedReply,
    reply_rx: oneshot::Receiver<OutboundMessage>,
    deltas: mpsc::UnboundedReceiver<String>,
) -> Sse<impl futures_util::Stream<Item = Result<Event, Infallible>>> {
    let (tx, rx) = mpsc::channel::<String>(64);
    tokio::spawn(async move {
        let _guard = WaiterGuard {
            api: &shared.api,
            bus: &shared.bus,
            key: reply.key.clone(),
            id: reply.id.clone(),
            armed: true,
            gone: None,
            place: reply.place,
        };
        relay(&reply, reply_rx, deltas, &tx, REPLY_TIMEOUT).await;
    });
    // Comments while the model thinks (retries may take minutes), so idle proxies keep the
    // connection.
    let events = tokio_stream::wrappers::ReceiverStream::new(rx)
        .map(|data| Ok::<_, Infallible>(Event::default().data(data)));
    Sse::new(events).keep_alive(axum::response::sse::KeepAlive::default())
}

/// Send the answer's events to `tx` as its pieces come, then the rest of the final reply;
/// given up after `idle` without a piece or the reply. Returns when the client is gone.
async fn relay(
    reply: &StreamedReply,
    mut reply_rx: oneshot::Receiver<OutboundMessage>,
    mut deltas: mpsc::UnboundedReceiver<String>,
    tx: &mpsc::Sender<String>,
    idle: Duration,
) {
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
    // Reset by every piece: a long answer still coming is not cut off.
    let deadline = tokio::time::sleep(idle);
    tokio::pin!(deadline);
    let final_msg = loop {
        tokio::select! {
            // The client went away (while the model thinks, nothing is sent to notice).
            _ = tx.closed() => return,
            Some(d) = deltas.recv() => {
                deadline.as_mut().reset(tokio::time::Instant::now() + idle);
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
    // A keyed request the restart cut off: an error, no `[DONE]`, so that the client
    // retries with its key (which gets the answer, after the restart).
    if reply.place.is_some() && final_msg.as_ref().is_some_and(is_restart_notice) {
        let _ = send(super::idem::restarting_error().to_string()).await;
        return;
    }
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
        Some(m) if m.text.starts_with(streamed.as_str()) => m.text[streamed.len()..].to_string(),
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
    let _ = send("[DONE]".into()).await;
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use switchboard_channel::{ChatKey, OutboundMessage};
    use tokio::sync::{mpsc, oneshot};

    use super::{StreamedReply, relay};

    #[tokio::test(start_paused = true)]
    async fn a_stream_still_coming_is_not_cut_off() {
        let idle = Duration::from_secs(600);
        let key: ChatKey = "api:u".parse().unwrap();
        let reply = StreamedReply {
            key: key.clone(),
            id: "r".into(),
            completion_id: "c".into(),
            model: "m".into(),
            created: 0,
            include_usage: false,
            place: None,
        };
        let (delta_tx, deltas) = mpsc::unbounded_channel();
        let (reply_tx, reply_rx) = oneshot::channel();
        let (tx, mut rx) = mpsc::channel(64);
        let relaying =
            tokio::spawn(async move { relay(&reply, reply_rx, deltas, &tx, idle).await });
        // A piece every 5 minutes for 40 minutes: four times the idle limit in all.
        let mut text = String::new();
        for i in 0..8 {
            tokio::time::sleep(idle / 2).await;
            let piece = format!("part {i}. ");
            delta_tx.send(piece.clone()).unwrap();
            text.push_str(&piece);
        }
        reply_tx
            .send(OutboundMessage::new(key, text.clone()))
            .unwrap();
        relaying.await.unwrap();
        let mut streamed = String::new();
        while let Ok(data) = rx.try_recv() {
            if let Ok(v) = serde_json::from_str::<serde_json::Value>(&data) {
                streamed.push_str(v["choices"][0]["delta"]["content"].as_str().unwrap_or(""));
            }
        }
        assert_eq!(streamed, text);

        // Nothing for that long: given up, and said so.
        let (_delta_tx, deltas) = mpsc::unbounded_channel();
        let (_reply_tx, reply_rx) = oneshot::channel();
        let (tx, mut rx) = mpsc::channel(64);
        let reply = StreamedReply {
            key: "api:u".parse().unwrap(),
            id: "r2".into(),
            completion_id: "c".into(),
            model: "m".into(),
            created: 0,
            include_usage: false,
            place: None,
        };
        let started = tokio::time::Instant::now();
        relay(&reply, reply_rx, deltas, &tx, idle).await;
        assert_eq!(started.elapsed(), idle);
        let mut all = String::new();
        while let Ok(data) = rx.try_recv() {
            all.push_str(&data);
        }
        assert!(all.contains("No reply in time"), "{all}");
    }
}
