//! The threads the bot takes part in: those it posted in. A message there is addressed to it,
//! as a reply to it would be, so a follow-up needs no mention (Slack's threads work the
//! same way). Bounded: the [`MAX_THREADS`] where it posted last, each forgotten
//! [`MAX_AGE`] after its last post there. Kept in the state file with the channels `backfill`
//! catches up on, so a restart forgets none of them.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serenity::model::id::ChannelId;

/// Threads remembered (the most recently posted in).
pub(crate) const MAX_THREADS: usize = 1000;
/// A thread the bot has not posted in for this long needs a mention again.
pub(crate) const MAX_AGE: Duration = Duration::from_secs(30 * 24 * 3600);

/// Threads the bot posted in, with when it last did (ms since the Unix epoch).
#[derive(Default)]
pub(crate) struct Followed(Mutex<Inner>);

#[derive(Default)]
struct Inner {
    threads: HashMap<ChannelId, u64>,
    /// Changed since the state file was written.
    dirty: bool,
}

/// A followed thread in the state file.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct SavedThread {
    pub(crate) thread: ChannelId,
    /// When the bot last posted there, in ms since the Unix epoch.
    pub(crate) at_ms: u64,
}

fn fresh(at_ms: u64, now_ms: u64) -> bool {
    Duration::from_millis(now_ms.saturating_sub(at_ms)) <= MAX_AGE
}

impl Followed {
    fn inner(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The bot posts in `thread` at `now_ms`. Returns whether it was not followed before.
    pub(crate) fn posted(&self, thread: ChannelId, now_ms: u64) -> bool {
        let mut inner = self.inner();
        let before = inner.threads.insert(thread, now_ms);
        let newly = !before.is_some_and(|at| fresh(at, now_ms));
        inner.dirty = true;
        if inner.threads.len() > MAX_THREADS {
            let oldest = inner
                .threads
                .iter()
                .min_by_key(|(_, at)| **at)
                .map(|(t, _)| *t);
            if let Some(t) = oldest {
                inner.threads.remove(&t);
            }
        }
        newly
    }

    /// Whether the bot takes part in `thread` (posted there within [`MAX_AGE`] of `now_ms`).
    pub(crate) fn follows(&self, thread: ChannelId, now_ms: u64) -> bool {
        self.inner()
            .threads
            .get(&thread)
            .is_some_and(|at| fresh(*at, now_ms))
    }

    /// `channel` turned out not to be a thread.
    pub(crate) fn forget(&self, channel: ChannelId) {
        let mut inner = self.inner();
        if inner.threads.remove(&channel).is_some() {
            inner.dirty = true;
        }
    }

    /// Whether anything changed since [`Followed::take_saved`].
    pub(crate) fn changed(&self) -> bool {
        self.inner().dirty
    }

    /// What to write to the state file (the ones still fresh at `now_ms`); marks it written.
    pub(crate) fn take_saved(&self, now_ms: u64) -> Vec<SavedThread> {
        let mut inner = self.inner();
        inner.dirty = false;
        inner.threads.retain(|_, at| fresh(*at, now_ms));
        inner
            .threads
            .iter()
            .map(|(t, at)| SavedThread {
                thread: *t,
                at_ms: *at,
            })
            .collect()
    }

    /// The state file could not be written: try again next time.
    pub(crate) fn unsaved(&self) {
        self.inner().dirty = true;
    }

    /// Take up what the state file held (a thread posted in later meanwhile keeps that).
    pub(crate) fn restore(&self, saved: Vec<SavedThread>, now_ms: u64) {
        let mut fresh_ones: Vec<SavedThread> = saved
            .into_iter()
            .filter(|s| fresh(s.at_ms, now_ms))
            .collect();
        fresh_ones.sort_by_key(|s| std::cmp::Reverse(s.at_ms));
        fresh_ones.truncate(MAX_THREADS);
        let mut inner = self.inner();
        for s in fresh_ones {
            let at = inner.threads.entry(s.thread).or_insert(s.at_ms);
            *at = (*at).max(s.at_ms);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAY_MS: u64 = 24 * 3600 * 1000;

    #[test]
    fn followed_threads_are_bounded_and_age() {
        let f = Followed::default();
        let t0 = 10 * DAY_MS;
        f.posted(ChannelId::new(1), t0);
        for c in 2..=(MAX_THREADS as u64 + 1) {
            f.posted(ChannelId::new(c), t0 + c);
        }
        assert!(!f.follows(ChannelId::new(1), t0), "the oldest went first");
        assert!(f.follows(ChannelId::new(2), t0 + 2));
        let late = t0 + 2 + MAX_AGE.as_millis() as u64 + 1;
        assert!(!f.follows(ChannelId::new(2), late), "too long quiet");
        f.forget(ChannelId::new(3));
        assert!(!f.follows(ChannelId::new(3), t0));
    }

    #[test]
    fn what_is_saved_is_restored_and_stale_ones_are_dropped() {
        let f = Followed::default();
        f.posted(ChannelId::new(7), DAY_MS);
        f.posted(ChannelId::new(8), 40 * DAY_MS);
        assert!(f.changed());
        let saved = f.take_saved(40 * DAY_MS);
        assert!(!f.changed());
        assert_eq!(saved.len(), 1, "{saved:?}");
        let back = Followed::default();
        back.restore(saved, 41 * DAY_MS);
        assert!(back.follows(ChannelId::new(8), 41 * DAY_MS));
        assert!(!back.follows(ChannelId::new(7), 41 * DAY_MS));
    }
}
