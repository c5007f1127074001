//! One chat's worker: runs its turns one at a time, then goes away when the queue is empty.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use switchboard_channel::{ChatKey, Origin, SystemOrigin, files};

use super::{Bus, Queued, TurnInput};
use crate::store::{Batch, Tree};

/// How often the typing indicator is refreshed while a turn runs (Telegram's lasts 5 s).
const TYPING_EVERY: Duration = Duration::from_secs(4);
/// Messages of one chat whose files are fetched at once (an album), so that one chat's
/// files do not take every download an adapter allows at a time (each message fetches at
/// most 2 of its files at once).
const FETCHES_PER_CHAT: usize = 2;
/// Longest wait between two tries to record a turn's replies.
const RECORD_RETRY_MAX: Duration = Duration::from_secs(30);

impl Bus {
    pub(super) async fn run_worker(self: Arc<Self>, key: ChatKey) {
        loop {
            let cancel = self.interrupt.child_token();
            let Some(mut batch) = self.next_batch(&key, &cancel) else {
                break;
            };
            // Held through the turn: not counted while it waits.
            let probation = tokio::select! {
                biased;
                // The messages stay in the inbox for the next start.
                _ = self.shutdown.cancelled() => break,
                guard = self.on_probation(&batch) => guard,
            };
            if batch.iter().any(|q| files::has_pending(&q.msg)) {
                // Counted before its download, which can be what stops the gateway; what
                // the count stores is the message as it came, its files still to fetch.
                let uncounted = batch
                    .first()
                    .filter(|q| q.counted)
                    .map(|q| (q.seq, q.msg.clone()));
                self.count_starts(&mut batch).await;
                if batch.is_empty() {
                    self.turn_finished(&key);
                    continue;
                }
                // Before a turn slot is taken: a download is not a turn.
                tokio::select! {
                    biased;
                    // The messages stay in the inbox; their files are fetched at the next start.
                    _ = self.shutdown.cancelled() => break,
                    _ = cancel.cancelled() => {
                        if self.interrupt.is_cancelled() {
                            break;
                        }
                        self.drop_stopped(&key, &batch).await;
                        continue;
                    }
                    _ = self.fetch_files(&key, &mut batch) => {}
                }
                // Downloaded: what follows is a wait for a turn slot, which must not count
                // (the turn's own start does). Not when the count gave that message up: the
                // first one now is another.
                if let Some((seq, msg)) = uncounted
                    && batch[0].seq == seq
                {
                    self.uncount(&mut batch[0], msg).await;
                }
            }
            // What `/stop` (or its request gone) drops before the turn begins: the user's
            // messages. A command (`/new`), a reminder or a sub-agent's result still runs,
            // its turn stopped, as before (a command still takes effect, the rest is kept).
            let droppable = batch.iter().all(|q| {
                q.msg.origin == switchboard_channel::Origin::User && q.msg.command().is_none()
            });
            let permit = tokio::select! {
                // The batch stays in the durable inbox and is replayed on the next start:
                // also when a permit is free at the same moment (a turn stopping for it).
                biased;
                _ = self.shutdown.cancelled() => break,
                _ = cancel.cancelled(), if droppable => {
                    if self.interrupt.is_cancelled() {
                        break;
                    }
                    self.drop_stopped(&key, &batch).await;
                    continue;
                }
                p = self.turns.clone().acquire_owned() => p,
            };
            let Ok(permit) = permit else { break };
            if self.shutdown.is_cancelled() {
                break;
            }
            // (Done already for a batch that had files: it counts once.)
            self.count_starts(&mut batch).await;
            if batch.is_empty() {
                // Given up: the sender was told.
                self.turn_finished(&key);
                continue;
            }
            let Some(handler) = self.handler() else {
                tracing::error!("no turn handler installed; leaving messages in the inbox");
                break;
            };
            self.metrics.running_turns.fetch_add(1, Ordering::Relaxed);
            let started = Instant::now();
            let done = inbox_deletes(&batch);
            let input = TurnInput {
                key: key.clone(),
                messages: batch.iter().map(|q| q.msg.clone()).collect(),
                cancel: cancel.clone(),
            };
            let typing = async {
                loop {
                    self.outbox.typing(&key).await;
                    tokio::time::sleep(TYPING_EVERY).await;
                }
            };
            let result = tokio::select! {
                r = handler.handle(input) => r,
                _ = typing => unreachable!("the typing loop never ends"),
            };
            self.metrics.running_turns.fetch_sub(1, Ordering::Relaxed);
            self.turn_finished(&key);
            let output = match result {
                Ok(output) => output,
                Err(_) if self.interrupt.is_cancelled() => {
                    tracing::info!(%key, "turn interrupted by shutdown; it goes on at the next start");
                    break;
                }
                // Interrupted by `/stop`: the messages are done with.
                Err(_) => Default::default(),
            };
            let mut writes = done;
            writes.extend(output.writes);
            let recorded = self
                .outbox
                .record(output.replies.clone(), writes.clone())
                .await;
            self.metrics.turn_latency.observe(started.elapsed());
            self.metrics.turns.fetch_add(1, Ordering::Relaxed);
            drop(permit);
            let jobs: Vec<String> = batch
                .iter()
                .filter_map(|q| match &q.msg.origin {
                    Origin::System(SystemOrigin::Cron { job_id }) => Some(job_id.clone()),
                    _ => None,
                })
                .collect();
            drop(batch);
            // The start is counted; recording and delivery need not hold others back.
            drop(probation);
            let recorded = match recorded {
                Ok(entries) => Some(entries),
                Err(e) => self.record_again(&key, e, output.replies, writes).await,
            };
            if let Some(entries) = recorded {
                let outcomes = self.outbox.deliver(entries).await;
                let refused = outcomes.into_iter().find_map(|o| match o {
                    super::Delivery::Refused(why) => Some(why),
                    _ => None,
                });
                if let (Some(why), false, Some(h)) = (refused, jobs.is_empty(), self.handler()) {
                    h.job_replies_refused(jobs, why);
                }
            }
        }
        self.metrics.active_workers.fetch_sub(1, Ordering::Relaxed);
    }

    /// Have the chat's channel fetch the files its adapter left on the batch's messages,
    /// several messages at once (an album), the typing indicator showing meanwhile.
    async fn fetch_files(&self, key: &ChatKey, batch: &mut [Queued]) {
        let channel = self
            .outbox
            .channels()
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(&key.channel)
            .cloned();
        let mut fetching = Vec::new();
        for q in batch.iter_mut().filter(|q| files::has_pending(&q.msg)) {
            fetching.push(fetch_one(channel.clone(), &key.channel, &mut q.msg));
        }
        let fetching = futures_util::stream::iter(fetching)
            .buffer_unordered(FETCHES_PER_CHAT)
            .collect::<Vec<()>>();
        let typing = async {
            loop {
                self.outbox.typing(key).await;
                tokio::time::sleep(TYPING_EVERY).await;
            }
        };
        tokio::select! {
            _ = fetching => {}
            _ = typing => unreachable!("the typing loop never ends"),
        }
    }

    /// `/stop` (or its request gone) before the batch's turn began, during its download or
    /// its wait for a turn slot: its messages are done with, without a turn, so they are
    /// neither kept in the chat's history nor run at the next start. The `/stop` itself was
    /// answered.
    async fn drop_stopped(&self, key: &ChatKey, batch: &[Queued]) {
        if let Err(e) = self.store.commit(inbox_deletes(batch)).await {
            tracing::error!(%key, "could not drop the stopped messages; they run at the next start: {e}");
        }
        if let Some(handler) = self.handler() {
            let messages: Vec<_> = batch.iter().map(|q| q.msg.clone()).collect();
            handler.stopped_before_start(&messages);
        }
        self.turn_finished(key);
    }

    /// A turn's replies and writes the store refused (`first`, a full disk say): tried
    /// again, 1 s and then up to [`RECORD_RETRY_MAX`] apart, while the chat waits, so its
    /// answer is not dropped and its next message does not overtake it. `None` only at
    /// shutdown: the message stays in the inbox and runs again at the next start.
    async fn record_again(
        &self,
        key: &ChatKey,
        first: crate::store::StoreError,
        replies: Vec<switchboard_channel::OutboundMessage>,
        writes: Batch,
    ) -> Option<Vec<(u64, switchboard_channel::OutboundMessage)>> {
        let mut wait = Duration::from_secs(1);
        let mut error = first;
        loop {
            tracing::error!(%key, retry_in = ?wait, "could not record the turn's replies: {error}");
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = self.shutdown.cancelled() => return None,
            }
            match self.outbox.record(replies.clone(), writes.clone()).await {
                Ok(entries) => {
                    tracing::info!(%key, "the turn's replies are recorded now");
                    return Some(entries);
                }
                Err(e) => error = e,
            }
            wait = (wait * 2).min(RECORD_RETRY_MAX);
        }
    }
}

/// The writes that take `batch`'s messages out of the inbox (they are done with).
fn inbox_deletes(batch: &[Queued]) -> Batch {
    let mut writes = Batch::default();
    for q in batch {
        writes.delete(Tree::Inbox, q.seq.to_be_bytes().to_vec());
    }
    writes
}

/// Have `channel` fetch the files left on `msg`; without the channel, say so in the text.
async fn fetch_one(
    channel: Option<Arc<dyn switchboard_channel::Channel>>,
    name: &str,
    msg: &mut switchboard_channel::InboundMessage,
) {
    match channel {
        Some(ch) => ch.fetch_files(msg).await,
        None => {
            msg.metadata.remove(files::PENDING);
            let note = format!(
                "[files came with this message, but the {name} channel is not running to fetch them]"
            );
            files::add_note(msg, &note);
        }
    }
}
