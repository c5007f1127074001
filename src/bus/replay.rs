//! Start-up: replies recorded before the last stop are delivered and unfinished messages
//! queued again, in their original order. After a crash, the message each chat was on (its
//! oldest) counts a start when its turn begins again, so that one the gateway keeps dying on
//! is given up after [`MAX_RESUMES`] starts. The chat's messages behind it join that turn
//! as before the crash (so it goes on from its saved steps) but are not counted: should one
//! of them be what kills the gateway, the first is given up in its place, and the rest run
//! without it. A message that only waited (behind the concurrency cap, or while the gateway
//! kept dying on another chat's) is never counted.
//!
//! Turns run side by side, so a crash counts against every resumed message running at the
//! time, innocent ones too. Once a message has been counted (a second crash found it
//! running), its turns go on probation: they run one at a time ([`Bus::on_probation`]),
//! and each crash from then on counts only against the one running. Other chats' turns
//! still run beside it.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use switchboard_channel::{InboundMessage, OutboundMessage};

use super::{Bus, BusError, CLEAN_STOP, MAX_RESUMES, Queued};
use crate::store::{Batch, Tree};

impl Bus {
    /// Start-up: deliver replies recorded before a crash, then requeue unfinished inbox
    /// entries in their original order.
    pub async fn replay(self: &Arc<Self>) -> Result<usize, BusError> {
        self.outbox.start_sweeper(&self.tracker);
        let entries = self.store.scan(Tree::Inbox, &[])?;
        self.replayed.store(true, Ordering::Relaxed);
        let crashed = self.store.get(Tree::Meta, CLEAN_STOP)?.is_none();
        if !crashed {
            // Durably gone before any turn runs: a crash in this run must count.
            let mut unmark = Batch::default();
            unmark.delete(Tree::Meta, CLEAN_STOP.to_vec());
            self.store.commit(unmark).await?;
        }
        let mut heads = std::collections::HashSet::new();
        let mut resumed = Vec::new();
        for (k, v) in entries {
            let Ok(seq_bytes) = <[u8; 8]>::try_from(k.as_slice()) else {
                continue;
            };
            let msg: InboundMessage = match serde_json::from_slice(&v) {
                Ok(m) => m,
                Err(e) => {
                    tracing::error!("dropping unreadable inbox entry: {e}");
                    self.store.delete(Tree::Inbox, &k)?;
                    continue;
                }
            };
            let counted = crashed && heads.insert(msg.key.clone());
            resumed.push((u64::from_be_bytes(seq_bytes), msg, counted));
        }
        let n = resumed.len();
        for (seq, msg, counted) in resumed {
            let permit = self
                .queued
                .clone()
                .acquire_owned()
                .await
                .map_err(|_| BusError::ShuttingDown)?;
            self.enqueue(Queued {
                seq,
                msg,
                counted,
                _permit: permit,
            });
        }
        self.intake.send_replace(true);
        Ok(n)
    }

    /// Wait until `batch` may start, when its first message is on probation (resumed, and
    /// counted before): the guard keeps other such turns waiting until dropped, after the
    /// turn. `None` for every other batch, at once.
    pub(super) async fn on_probation(
        &self,
        batch: &[Queued],
    ) -> Option<tokio::sync::OwnedMutexGuard<()>> {
        let head = batch.first().filter(|q| q.counted)?;
        let counted_before = head
            .msg
            .metadata
            .get("resumes")
            .and_then(serde_json::Value::as_u64)
            .unwrap_or(0);
        if counted_before == 0 {
            return None;
        }
        Some(self.probation.clone().lock_owned().await)
    }

    /// As a turn begins: count the start of a message resumed after a crash (the first of
    /// its batch), durably, before the turn runs. Past [`MAX_RESUMES`] it leaves the batch
    /// and the inbox, and a person who sent it is told; the rest of the batch runs. Should
    /// the count not be stored, the turn runs uncounted.
    pub(super) async fn count_starts(&self, batch: &mut Vec<Queued>) {
        let Some(q) = batch.first_mut().filter(|q| q.counted) else {
            return;
        };
        q.counted = false;
        let (mut writes, mut told) = (Batch::default(), Vec::new());
        let mut msg = q.msg.clone();
        let run = match count_resume(&q.seq.to_be_bytes(), &mut msg, &mut writes, &mut told) {
            Ok(run) => run,
            Err(e) => {
                tracing::error!(id = %q.msg.id, "cannot count a resumed turn's start: {e}");
                return;
            }
        };
        if let Err(e) = self.record_then_deliver(told, writes).await {
            tracing::error!("could not store a resumed turn's start; it runs uncounted: {e}");
            return;
        }
        if run {
            batch[0].msg = msg;
        } else {
            batch.remove(0);
        }
    }

    /// Take back the start [`Bus::count_starts`] counted for `q` before its download, now
    /// that the download is done: the inbox entry is `before` again (the message as it came,
    /// so its files are fetched again should the gateway stop while it waits), and the
    /// turn's own start counts instead. Waiting for a turn slot is never counted.
    pub(super) async fn uncount(&self, q: &mut Queued, before: InboundMessage) {
        let Ok(body) = serde_json::to_vec(&before) else {
            return;
        };
        let mut writes = Batch::default();
        writes.put(Tree::Inbox, q.seq.to_be_bytes().to_vec(), body);
        if let Err(e) = self.store.commit(writes).await {
            tracing::warn!(id = %q.msg.id, "could not take back a start counted before a download: {e}");
            return;
        }
        match before.metadata.get("resumes") {
            Some(n) => q.msg.metadata.insert("resumes".into(), n.clone()),
            None => q.msg.metadata.remove("resumes"),
        };
        q.counted = true;
    }
}

/// Count one more start at which `msg` (inbox entry `key`) is resumed, into `writes`; `true`
/// when its turn should run again. Past [`MAX_RESUMES`] the entry is deleted instead, and a
/// person who sent it is told (a reply pushed onto `told`).
fn count_resume(
    key: &[u8],
    msg: &mut InboundMessage,
    writes: &mut Batch,
    told: &mut Vec<OutboundMessage>,
) -> Result<bool, BusError> {
    let resumes = msg
        .metadata
        .get("resumes")
        .and_then(serde_json::Value::as_u64)
        .unwrap_or(0)
        + 1;
    if resumes > MAX_RESUMES {
        tracing::error!(id = %msg.id, key = %msg.key,
            "giving up on a message: the gateway stopped {MAX_RESUMES} times while handling it");
        writes.delete(Tree::Inbox, key.to_vec());
        if msg.origin == switchboard_channel::Origin::User {
            let mut reply = OutboundMessage::answering(
                msg,
                "⚠️ Sorry, I could not handle your last message (it kept stopping me). \
                 Please try again, perhaps worded differently.",
            );
            reply.kind = switchboard_channel::OutboundKind::Error;
            told.push(reply);
        }
        return Ok(false);
    }
    msg.metadata
        .insert("resumes".into(), serde_json::Value::from(resumes));
    let body = serde_json::to_vec(&*msg).map_err(|e| BusError::Encode(e.to_string()))?;
    writes.put(Tree::Inbox, key.to_vec(), body);
    Ok(true)
}
