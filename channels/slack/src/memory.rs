//! Small bounded memories the adapter keeps between intake and replies.
//!
//! - the threads the bot takes part in or started with a top-level post (so replies there
//!   count as addressed to it);
//! - the last published message per chat key (the one `typing` puts 👀 on);
//! - the messages already given 👀 (at most one reaction per message);
//! - how many chunks of a partly delivered reply went out (so a retry never resends them);
//! - users' names from `users.info`.
//!
//! Everything is capped; the oldest entries go first. Lost on restart, which only costs a
//! mention in an old thread or a 👀.

use std::collections::{HashMap, VecDeque};
use std::hash::Hash;

/// Entries kept per memory.
const CAP: usize = 10_000;

/// A map that forgets its oldest insertions beyond [`CAP`].
#[derive(Debug)]
pub(crate) struct Bounded<K, V> {
    map: HashMap<K, V>,
    order: VecDeque<K>,
    cap: usize,
}

impl<K: Hash + Eq + Clone, V> Default for Bounded<K, V> {
    fn default() -> Self {
        Self::with_cap(CAP)
    }
}

impl<K: Hash + Eq + Clone, V> Bounded<K, V> {
    pub fn with_cap(cap: usize) -> Self {
        Self {
            map: HashMap::new(),
            order: VecDeque::new(),
            cap: cap.max(1),
        }
    }

    pub fn insert(&mut self, k: K, v: V) {
        if self.map.insert(k.clone(), v).is_none() {
            self.order.push_back(k);
        }
        while self.map.len() > self.cap {
            match self.order.pop_front() {
                Some(old) => {
                    self.map.remove(&old);
                }
                None => break,
            }
        }
    }

    pub fn get(&self, k: &K) -> Option<&V> {
        self.map.get(k)
    }

    pub fn contains(&self, k: &K) -> bool {
        self.map.contains_key(k)
    }

    pub fn remove(&mut self, k: &K) {
        if self.map.remove(k).is_some() {
            self.order.retain(|o| o != k);
        }
    }
}

/// What the adapter remembers, behind one mutex (never held across `.await`).
#[derive(Debug, Default)]
pub(crate) struct Memory {
    /// `(channel, thread root ts)` the bot takes part in.
    pub threads: Bounded<(String, String), ()>,
    /// Chat key → `(channel, ts)` of the last published message.
    pub last_message: Bounded<String, (String, String)>,
    /// `channel:ts` of messages that got 👀.
    pub reacted: Bounded<String, ()>,
    /// Reply fingerprint → chunks already delivered.
    pub delivered_chunks: Bounded<u64, usize>,
    /// User id → names from `users.info` (`None`: looked up, unknown).
    pub users: Bounded<String, Option<crate::web::UserNames>>,
    /// User ids being looked up right now; the receiver tells waiters when it is over.
    pub users_pending: Bounded<String, tokio::sync::watch::Receiver<()>>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forgets_the_oldest_beyond_the_cap() {
        let mut b = Bounded::with_cap(2);
        b.insert(1, "a");
        b.insert(2, "b");
        b.insert(1, "a2");
        b.insert(3, "c");
        assert!(!b.contains(&1));
        assert_eq!(b.get(&2), Some(&"b"));
        assert_eq!(b.get(&3), Some(&"c"));
        b.remove(&2);
        assert!(!b.contains(&2));
    }
}
