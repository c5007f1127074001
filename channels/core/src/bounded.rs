//! [`Bounded`], a map that forgets its oldest insertions beyond a cap.

use std::collections::{HashMap, VecDeque};
use std::hash::Hash;

/// A map that forgets its oldest insertions beyond a cap (first in, first out).
///
/// Order is by first insertion: inserting a key that is already there replaces its value
/// and keeps its place. Adapters use it for what they remember between intake and replies
/// (threads, reactions, partly delivered replies), which must never grow without bound.
#[derive(Debug)]
pub struct Bounded<K, V> {
    map: HashMap<K, V>,
    /// Keys of `map`, oldest insertion first.
    order: VecDeque<K>,
    cap: usize,
}

impl<K, V> Bounded<K, V> {
    /// Entries kept by [`Bounded::default`].
    pub const DEFAULT_CAP: usize = 10_000;
}

impl<K: Hash + Eq + Clone, V> Default for Bounded<K, V> {
    /// An empty map capped at [`Bounded::DEFAULT_CAP`] entries.
    fn default() -> Self {
        Self::with_cap(Self::DEFAULT_CAP)
    }
}

impl<K: Hash + Eq + Clone, V> Bounded<K, V> {
    /// An empty map that keeps at most `cap` entries (at least one).
    pub fn with_cap(cap: usize) -> Self {
        Self {
            map: HashMap::new(),
            order: VecDeque::new(),
            cap: cap.max(1),
        }
    }

    /// Insert or replace `k`'s value, then forget the oldest entries beyond the cap.
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

    /// The value kept for `k`.
    pub fn get(&self, k: &K) -> Option<&V> {
        self.map.get(k)
    }

    /// Whether `k` is kept.
    pub fn contains(&self, k: &K) -> bool {
        self.map.contains_key(k)
    }

    /// Forget `k`.
    pub fn remove(&mut self, k: &K) {
        if self.map.remove(k).is_some() {
            self.order.retain(|o| o != k);
        }
    }

    /// How many entries are kept.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether nothing is kept.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
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
        assert_eq!(b.len(), 2);
        b.remove(&2);
        assert!(!b.contains(&2));
        assert_eq!(b.len(), 1);
    }
}
