//! The sweep: replies kept after failed sends, or recorded before the last stop, are tried
//! again while the gateway runs: at start-up, as soon as more replies join a stalled chat's,
//! and every [`SWEEP_EVERY`] while a chat is stalled. One task per chat, in order.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use switchboard_channel::{ChatKey, OutboundMessage};
use tokio::time::Instant;
use tokio_util::task::TaskTracker;

use super::{Outbox, Owned, Pending, Sent};
use crate::store::Tree;

/// How often the replies of stalled chats are tried again.
pub const SWEEP_EVERY: Duration = Duration::from_secs(30);
/// Shortest time between two sweeps woken by replies joining stalled chats' (see
/// [`Outbox::start_sweeper`]).
const MORE_APART: Duration = Duration::from_secs(1);

#[derive(Clone, Copy, PartialEq, Eq)]
enum Sweep {
    /// Start-up: every chat with replies in the outbox.
    Start,
    /// Stalled chats that more replies joined since their last sweep.
    More,
    /// Every stalled chat.
    Due,
}

impl Outbox {
    /// Deliver the replies the outbox holds from before this start (in the background), then
    /// keep sweeping until shutdown. The number of replies taken up now.
    pub fn start_sweeper(&self, tracker: &TaskTracker) -> usize {
        let n = self.sweep(tracker, Sweep::Start);
        let me = self.clone();
        let t = tracker.clone();
        tracker.spawn(async move { me.sweep_until_shutdown(t).await });
        n
    }

    async fn sweep_until_shutdown(self, tracker: TaskTracker) {
        let mut due: Option<Instant> = None;
        // Kicks come with every reply that joins a stalled chat's: during an outage, many.
        // Each sweep reads the whole outbox, so those sweeps are at least this far apart.
        let mut next_more = Instant::now();
        loop {
            if self.pending().stalled.is_empty() {
                due = None;
            } else if due.is_none() {
                due = Some(Instant::now() + self.sweep_every);
            }
            let kind = tokio::select! {
                biased;
                _ = self.shutdown.cancelled() => return,
                _ = tokio::time::sleep_until(due.unwrap_or_else(Instant::now)), if due.is_some() => {
                    due = None;
                    Sweep::Due
                }
                _ = self.kick.notified() => {
                    tokio::select! {
                        biased;
                        _ = self.shutdown.cancelled() => return,
                        _ = tokio::time::sleep_until(next_more) => {}
                    }
                    next_more = Instant::now() + MORE_APART;
                    Sweep::More
                }
            };
            self.sweep(&tracker, kind);
        }
    }

    /// Start a delivery task for each chat `kind` selects whose channel runs and that no
    /// sweep serves now, with the entries nobody else owns; how many entries were taken.
    fn sweep(&self, tracker: &TaskTracker, kind: Sweep) -> usize {
        if self.shutdown.is_cancelled() {
            return 0;
        }
        // The stalled chats to serve are chosen, their `more` taken, before the outbox is
        // read: a reply released while it is read sets `more` again, so that chat's sweep
        // looks once more when it ends (were `more` taken after the read, that reply would
        // be left behind, its chat no longer stalled, and never sent).
        let chosen: Option<HashSet<ChatKey>> = match kind {
            Sweep::Start => None,
            Sweep::More | Sweep::Due => {
                let mut pending = self.pending();
                let keys: HashSet<ChatKey> = pending
                    .stalled
                    .iter_mut()
                    .filter(|(_, s)| !s.sweeping && (kind == Sweep::Due || s.more))
                    .map(|(key, stall)| {
                        stall.sweeping = true;
                        stall.more = false;
                        key.clone()
                    })
                    .collect();
                if keys.is_empty() {
                    return 0;
                }
                Some(keys)
            }
        };
        let entries = match self.store.scan(Tree::Outbox, &[]) {
            Ok(e) => e,
            Err(e) => {
                tracing::error!("cannot read the outbox: {e}");
                Vec::new()
            }
        };
        // In sequence order, as the store keeps the keys.
        let mut by_key: HashMap<ChatKey, Vec<(u64, OutboundMessage)>> = HashMap::new();
        for (k, v) in entries {
            let (Ok(seq), Ok(msg)) = (
                <[u8; 8]>::try_from(k.as_slice()).map(u64::from_be_bytes),
                serde_json::from_slice::<OutboundMessage>(&v),
            ) else {
                continue;
            };
            if chosen.as_ref().is_none_or(|keys| keys.contains(&msg.key)) {
                by_key.entry(msg.key.clone()).or_default().push((seq, msg));
            }
        }
        let mut tasks = Vec::new();
        let mut pending = self.pending();
        let Pending { claimed, stalled } = &mut *pending;
        for (key, mut entries) in by_key {
            let runs = self.channel(&key.channel).is_some();
            if chosen.is_none() {
                // Start-up: every chat with replies is stalled until they are out.
                let stall = stalled.entry(key.clone()).or_default();
                if stall.sweeping {
                    continue;
                }
            }
            if !runs {
                continue;
            }
            entries.retain(|(seq, _)| claimed.insert(*seq));
            if entries.is_empty() {
                continue;
            }
            if chosen.is_none() {
                let stall = stalled.entry(key.clone()).or_default();
                stall.sweeping = true;
                stall.more = false;
            }
            tasks.push((key, entries));
        }
        // Chosen chats with nothing to send now (their channel not running, their replies
        // owned elsewhere) are free again; one whose `more` was set meanwhile is due again.
        for key in chosen.iter().flatten() {
            if tasks.iter().all(|(k, _)| k != key) {
                if let Some(stall) = stalled.get_mut(key) {
                    stall.sweeping = false;
                    if stall.more {
                        self.kick.notify_one();
                    }
                }
            }
        }
        self.count_stalled(&pending);
        drop(pending);
        let taken = tasks.iter().map(|(_, e)| e.len()).sum();
        for (key, entries) in tasks {
            let me = self.clone();
            tracker.spawn(async move { me.sweep_chat(key, entries).await });
        }
        taken
    }

    /// Deliver one stalled chat's entries in order, up to the first that fails again.
    async fn sweep_chat(self, key: ChatKey, entries: Vec<(u64, OutboundMessage)>) {
        let mut owned = Owned::new(&self, &entries);
        let mut all = true;
        for (seq, msg) in &entries {
            if !all {
                owned.keep(*seq, true);
                continue;
            }
            // Its first owner may have finished with it between the read and the claim.
            match self.store.get(Tree::Outbox, &seq.to_be_bytes()) {
                Ok(Some(_)) => {}
                Ok(None) => {
                    owned.done(*seq);
                    continue;
                }
                Err(e) => {
                    tracing::error!("cannot read the outbox: {e}");
                    all = false;
                    owned.keep(*seq, true);
                    continue;
                }
            }
            match self.send_entry(*seq, msg).await.0 {
                Sent::Gone => owned.done(*seq),
                Sent::Unmarked => owned.unmarked(*seq),
                Sent::Kept => {
                    all = false;
                    owned.keep(*seq, true);
                }
            }
        }
        drop(owned);
        let mut pending = self.pending();
        let Some(stall) = pending.stalled.get_mut(&key) else {
            return;
        };
        stall.sweeping = false;
        if !all {
            // Tried again by the timed sweep (or at once if a reply joins).
            return;
        }
        if stall.more {
            // Replies that joined meanwhile go out now, behind these.
            self.kick.notify_one();
        } else {
            pending.stalled.remove(&key);
            self.count_stalled(&pending);
        }
    }
}
