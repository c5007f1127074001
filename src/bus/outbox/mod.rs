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
    for reply in replies {
        let seq = store.next_id()?;
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
        self.pending()
            .claimed
            .extend(entries.iter().map(|(seq, _)| *seq));
        if let Err(e) = self.store.commit(writes).await {
            let mut pending = self.pending();
            for (seq, _) in &entries {
                pending.claimed.remove(seq);
            }
            return Err(e);
        }
        Ok(entries)
    }

    pub async fn record_and_deliver(
        &self,
        replies: Vec<OutboundMessage>,
        writes: Batch,
    ) -> Result<(), StoreError> {
        let entries = self.record(replies, writes).await?;
        self.deliver(entries).await;
        Ok(())
    }

    /// Send recorded entries in order. Delivered (or refused for good) entries leave the
    /// outbox. An entry still failing after its retries stalls its chat: it and the chat's
    /// later replies stay for the sweep, which keeps their order.
    pub async fn deliver(&self, entries: Vec<(u64, OutboundMessage)>) {
        let mut owned = Owned::new(self, &entries);
        // Chats this call stalled: their later entries stay behind without a sweep now.
        let mut failed: HashSet<&ChatKey> = HashSet::new();
        for (seq, msg) in &entries {
            if failed.contains(&msg.key) {
                continue;
            }
            let behind = {
                let mut pending = self.pending();
                match pending.stalled.get_mut(&msg.key) {
                    Some(stall) => {
                        stall.more = true;
                        true
                    }
                    None => false,
                }
            };
            if behind {
                // Released by `owned` for the sweep, which is told there is more.
                self.kick.notify_one();
                continue;
            }
            if self.send_entry(*seq, msg).await {
                owned.done(*seq);
            } else {
                self.stall(&msg.key);
                failed.insert(&msg.key);
            }
        }
    }

    /// Mark `key` stalled: its kept replies wait for a sweep (the sweeper is woken to time
    /// the next one).
    fn stall(&self, key: &ChatKey) {
        let mut pending = self.pending();
        pending.stalled.entry(key.clone()).or_default();
        self.count_stalled(&pending);
        drop(pending);
        self.kick.notify_one();
    }

    fn count_stalled(&self, pending: &Pending) {
        self.metrics
            .stalled_chats
            .store(pending.stalled.len() as u64, Ordering::Relaxed);
    }

    /// Send one entry; `true` once it is delivered or refused for good (and removed from
    /// the outbox), `false` if it stays for a later attempt.
    async fn send_entry(&self, seq: u64, msg: &OutboundMessage) -> bool {
        let channel_name = msg.key.channel.as_str();
        let done = match self.channel(channel_name) {
            None => {
                tracing::warn!(key = %msg.key,
                    "no such channel is running; reply kept until it runs");
                false
            }
            Some(ch) => match self.send_with_retries(ch.as_ref(), msg).await {
                Ok(()) => {
                    self.metrics.outbound(channel_name);
                    true
                }
                Err(SendError::Permanent(e)) => {
                    self.metrics.outbound_failed(channel_name);
                    tracing::error!(key = %msg.key, "reply refused by the platform: {e}");
                    true
                }
                Err(e) => {
                    self.metrics.outbound_failed(channel_name);
                    tracing::error!(key = %msg.key,
                        "reply not delivered yet, kept to be tried again: {e}");
                    false
                }
            },
        };
        if done {
            if let Err(e) = self.store.delete(Tree::Outbox, &seq.to_be_bytes()) {
                tracing::error!("could not mark a reply delivered: {e}");
            }
        }
        done
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

/// The outbox entries a delivering task owns: whatever it has not finished with when it
/// ends (kept, left behind a stall, or the task cancelled) is released for the sweep, its
/// chat stalled.
struct Owned<'a> {
    outbox: &'a Outbox,
    left: Vec<(u64, ChatKey)>,
}

impl<'a> Owned<'a> {
    fn new(outbox: &'a Outbox, entries: &[(u64, OutboundMessage)]) -> Self {
        Self {
            outbox,
            left: entries
                .iter()
                .map(|(seq, m)| (*seq, m.key.clone()))
                .collect(),
        }
    }

    /// `seq` is delivered (or refused for good) and gone from the outbox.
    fn done(&mut self, seq: u64) {
        self.outbox.pending().claimed.remove(&seq);
        self.left.retain(|(s, _)| *s != seq);
    }
}

impl Drop for Owned<'_> {
    fn drop(&mut self) {
        let mut pending = self.outbox.pending();
        for (seq, key) in self.left.drain(..) {
            pending.claimed.remove(&seq);
            pending.stalled.entry(key).or_default();
        }
        self.outbox.count_stalled(&pending);
    }
}

#[cfg(test)]
mod tests;
