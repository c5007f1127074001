//! The durable outbox: replies are recorded (with the turn's other writes) before they are
//! sent, sent with retries honouring the platform's `retry_after`, then removed. Replies
//! still failing after their retries, or owed to a channel not running, stay recorded and
//! their chat is *stalled*: its later replies queue behind them, and a sweep ([`sweep`])
//! tries them again, in order, while the gateway runs.

mod sweep;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use switchboard_channel::{Channel, ChatKey, OutboundMessage, SendError};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::metrics::Metrics;
use crate::store::{Batch, Store, StoreError, Tree};

pub use sweep::SWEEP_EVERY;

/// Live channels by name (`telegram`, `api`, …), filled as adapters start.
pub type ChannelRegistry = Arc<RwLock<HashMap<String, Arc<dyn Channel>>>>;

/// Attempts for one reply before it is left for the next sweep.
const MAX_ATTEMPTS: u32 = 8;
/// Longest wait honoured from a platform's `retry_after`.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(300);

/// Records and delivers replies.
#[derive(Clone)]
pub struct Outbox {
    store: Arc<dyn Store>,
    channels: ChannelRegistry,
    metrics: Arc<Metrics>,
    shutdown: CancellationToken,
    pending: Arc<Mutex<Pending>>,
    /// Wakes the sweeper: a reply joined a stalled chat's, or a sweep left some behind.
    kick: Arc<Notify>,
    /// How often stalled chats are tried again ([`SWEEP_EVERY`]).
    sweep_every: Duration,
}

/// Who delivers what, so that no reply is sent twice and a chat's replies keep their order.
#[derive(Default)]
struct Pending {
    /// Outbox entries a task owns now (recorded and about to be sent, or being sent).
    claimed: HashSet<u64>,
    /// Chats with replies kept after failed sends.
    stalled: HashMap<ChatKey, Stall>,
}

#[derive(Default)]
struct Stall {
    /// A sweep delivers this chat's kept replies now.
    sweeping: bool,
    /// Replies joined the kept ones since that sweep read the outbox.
    more: bool,
}

/// Add `replies` to `writes` as outbox entries; the entries with their sequence numbers.
fn stage(
    store: &dyn Store,
    replies: Vec<OutboundMessage>,
    writes: &mut Batch,
) -> Result<Vec<(u64, OutboundMessage)>, StoreError> {
    let mut entries = Vec::with_capacity(replies.len());
    for mut reply in replies {
        let seq = store.next_id()?;
        reply.delivery = Some(seq);
        // The last gate before a platform: no secret of the gateway's goes out in a reply,
        // whatever the model was led to write.
        reply.text = switchboard_channel::redact_owned(reply.text);
        let body = serde_json::to_vec(&reply).map_err(|e| StoreError::Backend(e.to_string()))?;
        writes.put(Tree::Outbox, seq.to_be_bytes().to_vec(), body);
        entries.push((seq, reply));
    }
    Ok(entries)
}

/// Durably record replies together with `writes`, in one atomic batch, while no gateway
/// runs (the CLI on the store), for the next gateway's start-up to deliver.
pub async fn record(
    store: &dyn Store,
    replies: Vec<OutboundMessage>,
    mut writes: Batch,
) -> Result<Vec<(u64, OutboundMessage)>, StoreError> {
    let entries = stage(store, replies, &mut writes)?;
    store.commit(writes).await?;
    Ok(entries)
}

impl Outbox {
    pub(super) fn new(
        store: Arc<dyn Store>,
        channels: ChannelRegistry,
        metrics: Arc<Metrics>,
        shutdown: CancellationToken,
    ) -> Self {
        Self {
            store,
            channels,
            metrics,
            shutdown,
            pending: Arc::default(),
            kick: Arc::default(),
            sweep_every: SWEEP_EVERY,
        }
    }

    pub fn channels(&self) -> &ChannelRegistry {
        &self.channels
    }

    /// Whether a channel of that name is registered (it may not have connected yet).
    pub fn has_channel(&self, name: &str) -> bool {
        self.channel(name).is_some()
    }

    fn channel(&self, name: &str) -> Option<Arc<dyn Channel>> {
        self.channels
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(name)
            .cloned()
    }

    fn pending(&self) -> std::sync::MutexGuard<'_, Pending> {
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Durably record replies together with `writes`, in one atomic batch. The entries
    /// returned belong to the caller, who must hand them to [`Outbox::deliver`].
    pub async fn record(
        &self,
        replies: Vec<OutboundMessage>,
        mut writes: Batch,
    ) -> Result<Vec<(u64, OutboundMessage)>, StoreError> {
        let entries = stage(self.store.as_ref(), replies, &mut writes)?;
        // Claimed before they exist: a sweep reading the outbox meanwhile leaves them alone.
        // Should the caller give up during the write, `owned` leaves them to the sweep.
        let mut owned = Owned::claim(self, &entries);
        match self.store.commit(writes).await {
            Ok(_) => {
                owned.hand_over();
                Ok(entries)
            }
            Err(e) => {
                owned.forget();
                Err(e)
            }
        }
    }

    /// Record replies, then deliver them: what became of each, in order.
    pub async fn record_and_deliver(
        &self,
        replies: Vec<OutboundMessage>,
        writes: Batch,
    ) -> Result<Vec<Delivery>, StoreError> {
        let entries = self.record(replies, writes).await?;
        Ok(self.deliver(entries).await)
    }

    /// Send recorded entries in order. Delivered (or refused for good) entries leave the
    /// outbox. An entry still failing after its retries stalls its chat: it and the chat's
    /// later replies stay for the sweep, which keeps their order. What became of each, in
    /// order (for a caller that tells someone, as the `message` tool does).
    pub async fn deliver(&self, entries: Vec<(u64, OutboundMessage)>) -> Vec<Delivery> {
        let mut owned = Owned::new(self, &entries);
        let mut outcomes = Vec::with_capacity(entries.len());
        // Chats this call stalled: their later entries are kept behind the failed one.
        let mut failed: HashSet<&ChatKey> = HashSet::new();
        for (seq, msg) in &entries {
            let behind = || Delivery::Later("behind an earlier message to that chat".into());
            if failed.contains(&msg.key) {
                owned.keep(*seq, false);
                outcomes.push(behind());
                continue;
            }
            if self.pending().stalled.contains_key(&msg.key) {
                // Behind the chat's kept replies: released by `owned` to the sweep, which
                // is told there is more.
                outcomes.push(behind());
                continue;
            }
            let (sent, outcome) = self.send_entry(*seq, msg).await;
            match sent {
                Sent::Gone => owned.done(*seq),
                Sent::Unmarked => owned.unmarked(*seq),
                Sent::Kept => {
                    owned.keep(*seq, false);
                    failed.insert(&msg.key);
                }
            }
            outcomes.push(outcome);
        }
        outcomes
    }

    fn count_stalled(&self, pending: &Pending) {
        self.metrics
            .stalled_chats
            .store(pending.stalled.len() as u64, Ordering::Relaxed);
    }

    /// Send one entry.
    async fn send_entry(&self, seq: u64, msg: &OutboundMessage) -> (Sent, Delivery) {
        let channel_name = msg.key.channel.as_str();
        let outcome = match self.channel(channel_name) {
            None => {
                tracing::warn!(key = %msg.key,
                    "no such channel is running; reply kept until it runs");
                Delivery::Later(format!("the {channel_name} channel is not running"))
            }
            Some(ch) => match self.send_with_retries(ch.as_ref(), msg).await {
                Ok(()) => {
                    self.metrics.outbound(channel_name);
                    Delivery::Delivered
                }
                Err(SendError::Permanent(e)) => {
                    self.metrics.outbound_failed(channel_name);
                    tracing::error!(key = %msg.key, "reply refused by the platform: {e}");
                    Delivery::Refused(e)
                }
                Err(e) => {
                    self.metrics.outbound_failed(channel_name);
                    tracing::error!(key = %msg.key,
                        "reply not delivered yet, kept to be tried again: {e}");
                    Delivery::Later(e.to_string())
                }
            },
        };
        if let Delivery::Later(_) = outcome {
            return (Sent::Kept, outcome);
        }
        let sent = match self.store.delete(Tree::Outbox, &seq.to_be_bytes()) {
            Ok(()) => Sent::Gone,
            Err(e) => {
                tracing::error!("could not mark a reply delivered: {e}");
                Sent::Unmarked
            }
        };
        (sent, outcome)
    }

    async fn send_with_retries(
        &self,
        ch: &dyn Channel,
        msg: &OutboundMessage,
    ) -> Result<(), SendError> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            let wait = match ch.send(msg).await {
                Ok(_) => return Ok(()),
                Err(SendError::Permanent(e)) => return Err(SendError::Permanent(e)),
                Err(e) if attempt >= MAX_ATTEMPTS => return Err(e),
                Err(SendError::RetryAfter(d)) => d.min(MAX_RETRY_AFTER),
                Err(SendError::Transient(e)) => {
                    let d = crate::backoff::delay(
                        attempt,
                        Duration::from_millis(500),
                        Duration::from_secs(60),
                    );
                    tracing::warn!(key = %msg.key, "send failed (attempt {attempt}), retrying in {d:?}: {e}");
                    d
                }
            };
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = self.shutdown.cancelled() => return Err(SendError::Transient("shutting down".into())),
            }
        }
    }

    /// Typing indicator for a running turn; failures only matter to the logs.
    pub async fn typing(&self, key: &ChatKey) {
        if let Some(ch) = self.channel(&key.channel) {
            if ch.capabilities().typing {
                if let Err(e) = ch.typing(key).await {
                    tracing::debug!(%key, "typing indicator failed: {e}");
                }
            }
        }
    }
}

/// What became of a message handed to [`Outbox::deliver`], as its sender is told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Delivery {
    Delivered,
    /// The platform refused it for good (the bot is not in that channel, the chat is
    /// gone…); it will not be tried again.
    Refused(String),
    /// Not delivered yet; kept and tried again.
    Later(String),
}

/// What became of an entry [`Outbox::send_entry`] tried.
enum Sent {
    /// Delivered, or refused for good, and removed from the outbox.
    Gone,
    /// Delivered, but still recorded (the store refused the delete): never sent again in
    /// this run.
    Unmarked,
    /// Not delivered: kept for a later attempt.
    Kept,
}

/// The outbox entries a task owns (claimed). Whatever it has not finished with when it
/// ends (left behind a stalled chat's replies, or the task cancelled) is released to the
/// sweep, its chat stalled and the sweeper told there is more.
struct Owned<'a> {
    outbox: &'a Outbox,
    left: Vec<(u64, ChatKey)>,
}

impl<'a> Owned<'a> {
    /// Entries already claimed (handed over by [`Outbox::record`] or claimed by a sweep).
    fn new(outbox: &'a Outbox, entries: &[(u64, OutboundMessage)]) -> Self {
        Self {
            outbox,
            left: entries
                .iter()
                .map(|(seq, m)| (*seq, m.key.clone()))
                .collect(),
        }
    }

    /// Claim entries about to be written.
    fn claim(outbox: &'a Outbox, entries: &[(u64, OutboundMessage)]) -> Self {
        outbox
            .pending()
            .claimed
            .extend(entries.iter().map(|(seq, _)| *seq));
        Self::new(outbox, entries)
    }

    /// The entries are written: they go on to the caller, still claimed.
    fn hand_over(&mut self) {
        self.left.clear();
    }

    /// The entries were not written: nothing to deliver.
    fn forget(&mut self) {
        let mut pending = self.outbox.pending();
        for (seq, _) in self.left.drain(..) {
            pending.claimed.remove(&seq);
        }
    }

    fn take(&mut self, seq: u64) -> Option<ChatKey> {
        let i = self.left.iter().position(|(s, _)| *s == seq)?;
        Some(self.left.swap_remove(i).1)
    }

    /// `seq` is delivered (or refused for good) and gone from the outbox.
    fn done(&mut self, seq: u64) {
        self.take(seq);
        self.outbox.pending().claimed.remove(&seq);
    }

    /// `seq` is delivered but still in the outbox: it stays claimed, so that no sweep
    /// sends it again.
    fn unmarked(&mut self, seq: u64) {
        self.take(seq);
    }

    /// `seq` failed (or is behind one of its chat that did): released, its chat stalled.
    /// Unless this is the chat's own sweep, a sweep serving the chat now is told to look
    /// again when it ends (it read the outbox while `seq` was owned here).
    fn keep(&mut self, seq: u64, by_sweep: bool) {
        if let Some(key) = self.take(seq) {
            let more = if by_sweep { More::No } else { More::IfSweeping };
            self.outbox.release(seq, key, more);
        }
    }
}

impl Drop for Owned<'_> {
    fn drop(&mut self) {
        for (seq, key) in std::mem::take(&mut self.left) {
            self.outbox.release(seq, key, More::Yes);
        }
    }
}

/// Whether a released entry makes a sweep of its chat due at once.
enum More {
    /// An entry never tried (behind the chat's kept replies, or its task cancelled).
    Yes,
    /// An entry that failed: only a sweep running for the chat now must look again.
    IfSweeping,
    /// An entry its chat's own sweep failed on: the timed sweep tries again.
    No,
}

impl Outbox {
    /// Give up the claim on `seq`, stalling `key`.
    fn release(&self, seq: u64, key: ChatKey, more: More) {
        let mut pending = self.pending();
        pending.claimed.remove(&seq);
        let stall = pending.stalled.entry(key).or_default();
        match more {
            More::Yes => stall.more = true,
            More::IfSweeping => stall.more |= stall.sweeping,
            More::No => {}
        }
        self.count_stalled(&pending);
        drop(pending);
        // Also when nothing more is due: the sweeper times the next sweep of a new stall.
        self.kick.notify_one();
    }
}

#[cfg(test)]
mod tests;
