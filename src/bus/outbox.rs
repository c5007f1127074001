//! The durable outbox: replies are recorded (with the turn's other writes) before they are
//! sent, sent with retries honouring the platform's `retry_after`, then removed.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use switchboard_channel::{Channel, ChatKey, OutboundMessage, SendError};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::metrics::Metrics;
use crate::store::{Batch, Store, StoreError, Tree};

/// Live channels by name (`telegram`, `api`, …), filled as adapters start.
pub type ChannelRegistry = Arc<RwLock<HashMap<String, Arc<dyn Channel>>>>;

/// Attempts for one reply before it is left for the next start.
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
}

/// Durably record replies together with `writes`, in one atomic batch: also while no
/// gateway runs (the CLI on the store), for the next gateway's start-up to deliver.
pub async fn record(
    store: &dyn Store,
    replies: Vec<OutboundMessage>,
    mut writes: Batch,
) -> Result<Vec<(u64, OutboundMessage)>, StoreError> {
    let mut entries = Vec::with_capacity(replies.len());
    for reply in replies {
        let seq = store.next_id()?;
        let body = serde_json::to_vec(&reply).map_err(|e| StoreError::Backend(e.to_string()))?;
        writes.put(Tree::Outbox, seq.to_be_bytes().to_vec(), body);
        entries.push((seq, reply));
    }
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

    /// Durably record replies together with `writes`, in one atomic batch.
    pub async fn record(
        &self,
        replies: Vec<OutboundMessage>,
        writes: Batch,
    ) -> Result<Vec<(u64, OutboundMessage)>, StoreError> {
        record(self.store.as_ref(), replies, writes).await
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

    /// Send entries in order. Delivered (or refused for good) entries leave the outbox;
    /// entries still failing after retries stay for the next start.
    pub async fn deliver(&self, entries: Vec<(u64, OutboundMessage)>) {
        for (seq, msg) in entries {
            let channel_name = msg.key.channel.clone();
            let done = match self.channel(&channel_name) {
                None => {
                    tracing::warn!(key = %msg.key,
                        "no such channel is running; reply kept for a start where it runs");
                    false
                }
                Some(ch) => match self.send_with_retries(ch.as_ref(), &msg).await {
                    Ok(()) => {
                        self.metrics.outbound(&channel_name);
                        true
                    }
                    Err(SendError::Permanent(e)) => {
                        self.metrics.outbound_failed(&channel_name);
                        tracing::error!(key = %msg.key, "reply refused by the platform: {e}");
                        true
                    }
                    Err(e) => {
                        self.metrics.outbound_failed(&channel_name);
                        tracing::error!(key = %msg.key, "reply not delivered yet, kept for retry at next start: {e}");
                        false
                    }
                },
            };
            if done {
                if let Err(e) = self.store.delete(Tree::Outbox, &seq.to_be_bytes()) {
                    tracing::error!("could not mark a reply delivered: {e}");
                }
            }
        }
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

    /// Deliver replies recorded before the last stop, one task per chat to keep their order.
    pub fn replay_pending(&self, tracker: &TaskTracker) -> usize {
        let entries = match self.store.scan(Tree::Outbox, &[]) {
            Ok(e) => e,
            Err(e) => {
                tracing::error!("cannot read the outbox: {e}");
                return 0;
            }
        };
        let mut by_key: HashMap<ChatKey, Vec<(u64, OutboundMessage)>> = HashMap::new();
        let mut n = 0;
        for (k, v) in entries {
            let (Ok(seq), Ok(msg)) = (
                <[u8; 8]>::try_from(k.as_slice()).map(u64::from_be_bytes),
                serde_json::from_slice::<OutboundMessage>(&v),
            ) else {
                continue;
            };
            by_key.entry(msg.key.clone()).or_default().push((seq, msg));
            n += 1;
        }
        for (_, entries) in by_key {
            let me = self.clone();
            tracker.spawn(async move { me.deliver(entries).await });
        }
        n
    }
}
