//! Commands the bus answers itself, at once: never queued behind the chat's running turn;
//! and a message withdrawn by the request that waited for it.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use switchboard_channel::{ChatKey, InboundMessage, OutboundMessage, Published};

use super::{Bus, BusError, now_secs, seen};
use crate::store::{Applied, Batch, Tree};

impl Bus {
    /// Tell the bus whether the config names owners (see [`Bus::stop`] in groups).
    pub fn set_owners_named(&self, named: bool) {
        self.owners_named.store(named, Ordering::Relaxed);
    }

    /// `/stop`: cancel the key's running turn; it never queues behind that turn. `earlier`
    /// (its sender's messages in the chat that came with it, before it) are dropped, marked
    /// seen so a redelivery does not run them either; `results` gets their outcome. In a
    /// group where owners are named, only an owner stops someone else's answer (or the
    /// chat's background tasks): one member cannot cut short what another asked.
    pub(super) async fn stop(
        self: &Arc<Self>,
        msg: InboundMessage,
        earlier: Vec<(usize, InboundMessage)>,
        results: &mut [Published],
    ) -> Result<Published, BusError> {
        let now = now_secs();
        let mut batch = Batch::default();
        seen::mark(&mut batch, now, &msg.id);
        if self.store.apply(batch)? == Applied::Conflict {
            return Ok(Published::Duplicate);
        }
        let mut dropped = false;
        for (i, m) in earlier {
            let mut batch = Batch::default();
            seen::mark(&mut batch, now, &m.id);
            if self.store.apply(batch)? == Applied::Done {
                tracing::info!(key = %m.key, id = %m.id, "dropped: a /stop came right after it");
                results[i] = Published::Accepted;
                dropped = true;
            }
        }
        let anyones =
            !msg.is_group || msg.sender.is_owner || !self.owners_named.load(Ordering::Relaxed);
        let (cancelled, refused) = {
            let slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
            match slots.get(&msg.key).filter(|s| s.running.is_some()) {
                // A turn the gateway started (a reminder) is no one's in particular.
                Some(s)
                    if anyones
                        || s.running_for.is_empty()
                        || s.running_for.contains(&msg.sender.id) =>
                {
                    s.running.as_ref().inspect(|t| t.cancel());
                    (true, false)
                }
                Some(_) => (false, true),
                None => (false, false),
            }
        };
        let background = anyones && self.handler().is_some_and(|h| h.stop_background(&msg.key));
        let text = if cancelled || dropped || background {
            "Stopped."
        } else if refused {
            "I'm answering someone else here: only they or an owner can stop that."
        } else {
            "Nothing is running."
        };
        self.reply_at_once(&msg, text.into()).await
    }

    /// The message `id` of `key` is no longer wanted (the HTTP request waiting for its
    /// answer went away): its turn is stopped as by `/stop` if it runs, or it leaves the
    /// queue and the inbox if it waits. Whether it was found. Nothing at shutdown.
    pub fn withdraw(&self, key: &ChatKey, id: &str) -> bool {
        // Requests end at shutdown too: their messages stay for the next start.
        if self.shutdown.is_cancelled() {
            return false;
        }
        let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        let Some(slot) = slots.get_mut(key) else {
            return false;
        };
        if slot.running_ids.iter().any(|r| r == id) {
            if let Some(token) = &slot.running {
                token.cancel();
            }
            // Not the chat's sub-agents, as `/stop` does: others' requests may share the chat
            // (`api:default`) and wait for theirs.
            return true;
        }
        let Some(at) = slot.pending.iter().position(|q| q.msg.id == id) else {
            return false;
        };
        let q = slot.pending.remove(at).expect("found above");
        drop(slots);
        self.metrics.queue_depth.fetch_sub(1, Ordering::Relaxed);
        if let Err(e) = self.store.delete(Tree::Inbox, &q.seq.to_be_bytes()) {
            tracing::warn!(%key, id, "a withdrawn message stays in the inbox: {e}");
        }
        true
    }

    /// A command answered by the bus itself (`/status`), not behind the chat's running
    /// turn: marked seen like any message, then answered.
    pub(super) async fn answer_at_once(
        self: &Arc<Self>,
        msg: InboundMessage,
        text: String,
    ) -> Result<Published, BusError> {
        let mut batch = Batch::default();
        seen::mark(&mut batch, now_secs(), &msg.id);
        if self.store.apply(batch)? == Applied::Conflict {
            return Ok(Published::Duplicate);
        }
        self.reply_at_once(&msg, text).await
    }

    /// Answer `msg` with `text`, through the outbox.
    async fn reply_at_once(
        &self,
        msg: &InboundMessage,
        text: String,
    ) -> Result<Published, BusError> {
        let reply = OutboundMessage::answering(msg, text);
        // Delivered in the background: the adapter's intake (every other chat's messages)
        // must not wait for this send and its retries.
        self.record_then_deliver(vec![reply], Batch::default())
            .await?;
        Ok(Published::Accepted)
    }
}
