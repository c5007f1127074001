//! Seen message ids, for dedup, filed by the UTC day they were first seen.
//!
//! A key is the day (days since 1970, 4 bytes big-endian) followed by the id, so the ids of
//! one day sit together and in day order. Checking an id looks it up under today and the
//! two days before, so it is remembered for at least [`SEEN_RETENTION`], and under
//! tomorrow, for a clock set back. Pruning deletes the days before those, walking only
//! their keys: the ids still kept are never read, so they are not pulled into sled's
//! memory (a walk over every id did that, and the gateway prunes at start-up and every
//! hour).
//!
//! Stores from before this layout filed ids under the bare id; the first prune (the gateway
//! runs it before any intake) files them under the day of their timestamp, or drops them
//! if that day has passed, and records in the meta tree that it did.

use std::time::Duration;

use crate::store::{Batch, Store, StoreError, Tree};

/// Seen ids are kept at least this long (DESIGN §4 asks for at least 24 h).
pub const SEEN_RETENTION: Duration = Duration::from_secs(48 * 3600);

const DAY_SECS: u64 = 86_400;
/// Today and the days before it under which an id is looked up: an id first seen at the
/// last second of a day is still found two full days later.
const DAYS_CHECKED: u32 = (SEEN_RETENTION.as_secs() / DAY_SECS) as u32 + 1;
/// In the meta tree once ids filed under the bare id have been filed by day.
const FILED_BY_DAY: &[u8] = b"seen_by_day_v1";

fn day(now_secs: u64) -> u32 {
    u32::try_from(now_secs / DAY_SECS).unwrap_or(u32::MAX)
}

fn key(day: u32, id: &[u8]) -> Vec<u8> {
    let mut key = Vec::with_capacity(4 + id.len());
    key.extend_from_slice(&day.to_be_bytes());
    key.extend_from_slice(id);
    key
}

/// The keys `id` may be filed under at `now`: today, the days before it, and tomorrow, as
/// a clock set back (a board without a battery-backed clock, then NTP) must not let
/// through an id filed under what is now the future.
fn keys(now_secs: u64, id: &str) -> impl Iterator<Item = Vec<u8>> + '_ {
    let today = day(now_secs);
    (0..DAYS_CHECKED)
        .map(move |back| today.saturating_sub(back))
        .chain(std::iter::once(today.saturating_add(1)))
        .map(move |d| key(d, id.as_bytes()))
}

/// Add to `batch`: `id` must not have been seen within the retention, and is seen now.
///
/// The check is the batch's precondition, so it runs where the batch is applied: for a
/// commit, on the store's writer thread, which checks it anyway. The gateway does not also
/// look ids up beforehand on the runtime's threads: that was four more sled lookups per
/// message, and sled consolidates and splits the nodes a lookup walks, so after 20 000
/// chats 1.25 MB of sled's nodes had been built there, scattered among freed memory.
pub(super) fn mark(batch: &mut Batch, now_secs: u64, id: &str) {
    require_unseen(batch, now_secs, id);
    batch.put(
        Tree::Seen,
        key(day(now_secs), id.as_bytes()),
        now_secs.to_be_bytes().to_vec(),
    );
}

/// Add to `batch`: `id` must not have been seen within the retention.
fn require_unseen(batch: &mut Batch, now_secs: u64, id: &str) {
    for k in keys(now_secs, id) {
        batch.require_absent(Tree::Seen, k);
    }
}

/// Most deletions applied by one write of [`prune`]: a busy day's ids are forgotten in
/// several small writes, not one that holds them all in memory at once.
const PRUNE_CHUNK: usize = 1_024;

/// Forget the ids of the days past the retention; returns how many were removed. Blocks
/// on the store: run it off the async runtime's threads. Ends early, between writes, once
/// `stop` says so (the gateway stops; the rest is forgotten at the next prune).
pub(super) fn prune(
    store: &dyn Store,
    now_secs: u64,
    stop: &dyn Fn() -> bool,
) -> Result<usize, StoreError> {
    let first_kept = day(now_secs).saturating_sub(DAYS_CHECKED - 1);
    let mut batch = Batch::default();
    let mut removed = 0;
    if store.get(Tree::Meta, FILED_BY_DAY)?.is_none() {
        removed += refile_bare_ids(store, first_kept, &mut batch)?;
        batch.put(Tree::Meta, FILED_BY_DAY, b"1".to_vec());
    }
    if !batch.is_empty() {
        store.apply(std::mem::take(&mut batch))?;
    }
    // Keys filed by day start with a zero byte (day numbers are below 2^24 until the year
    // 47 000), bare ids with a printable one.
    removed += prune_days(store, Tree::Seen, &[0], 0, first_kept, stop)?;
    Ok(removed)
}

/// Delete the keys of `tree` under `prefix` filed by a day before `first_kept` (4 bytes,
/// big-endian, at `day_at` in the key), [`PRUNE_CHUNK`] per write; in day order, so the
/// walk stops at the first day kept. Returns how many went; ends early, between writes,
/// once `stop` says so.
pub(crate) fn prune_days(
    store: &dyn Store,
    tree: Tree,
    prefix: &[u8],
    day_at: usize,
    first_kept: u32,
    stop: &dyn Fn() -> bool,
) -> Result<usize, StoreError> {
    let mut removed = 0;
    loop {
        let (mut batch, mut more) = (Batch::default(), false);
        store.for_each(tree, prefix, &mut |k, _| {
            let Some(d) = k
                .get(day_at..day_at + 4)
                .and_then(|d| <[u8; 4]>::try_from(d).ok())
            else {
                return true;
            };
            if u32::from_be_bytes(d) >= first_kept {
                return false;
            }
            if batch.ops.len() == PRUNE_CHUNK {
                more = true;
                return false;
            }
            batch.delete(tree, k.to_vec());
            true
        })?;
        removed += batch.ops.len();
        if !batch.is_empty() {
            store.apply(batch)?;
        }
        if !more || stop() {
            return Ok(removed);
        }
    }
}

/// File the ids of the old layout (the bare id → when it was seen) under their day;
/// returns how many were past the retention and dropped instead.
fn refile_bare_ids(
    store: &dyn Store,
    first_kept: u32,
    batch: &mut Batch,
) -> Result<usize, StoreError> {
    let mut dropped = 0;
    store.for_each(Tree::Seen, &[], &mut |k, v| {
        if k.first().is_none_or(|b| *b == 0) {
            return true;
        }
        let at = <[u8; 8]>::try_from(v).map(u64::from_be_bytes).unwrap_or(0);
        if day(at) >= first_kept {
            batch.put(Tree::Seen, key(day(at), k), v.to_vec());
        } else {
            dropped += 1;
        }
        batch.delete(Tree::Seen, k.to_vec());
        true
    })?;
    Ok(dropped)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::store::{Applied, SledStore};

    const NOW: u64 = 1_795_478_400 + 3600; // 01:00 UTC on some day

    fn store() -> (tempfile::TempDir, Arc<dyn Store>) {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn Store> = Arc::new(SledStore::open(dir.path()).unwrap());
        (dir, store)
    }

    fn seen_at(store: &dyn Store, at: u64, id: &str) -> Applied {
        let mut batch = Batch::default();
        mark(&mut batch, at, id);
        store.apply(batch).unwrap()
    }

    fn all(store: &dyn Store) -> Vec<Vec<u8>> {
        let mut keys = Vec::new();
        store
            .for_each(Tree::Seen, &[], &mut |k, _| {
                keys.push(k.to_vec());
                true
            })
            .unwrap();
        keys
    }

    /// Whether `mark` at `now` finds `id` seen (without marking it).
    fn is_seen(store: &dyn Store, now_secs: u64, id: &str) -> Result<bool, StoreError> {
        let mut probe = Batch::default();
        require_unseen(&mut probe, now_secs, id);
        Ok(store.apply(probe)? == Applied::Conflict)
    }

    #[tokio::test]
    async fn an_id_is_a_duplicate_for_at_least_the_retention_and_forgotten_after_pruning() {
        let (_dir, store) = store();
        let s = &*store;
        // Seen at the last second of a day: still a duplicate 48 h later.
        let at = NOW - NOW % DAY_SECS - 1;
        assert_eq!(seen_at(s, at, "telegram:1"), Applied::Done);
        let later = at + SEEN_RETENTION.as_secs();
        assert!(is_seen(s, later, "telegram:1").unwrap());
        assert_eq!(seen_at(s, later, "telegram:1"), Applied::Conflict);
        assert!(!is_seen(s, later, "telegram:2").unwrap());
        // Pruning within the retention keeps it; past it, forgets it, and only it.
        assert_eq!(seen_at(s, later, "telegram:2"), Applied::Done);
        assert_eq!(prune(s, later, &|| false).unwrap(), 0);
        assert!(is_seen(s, later, "telegram:1").unwrap());
        let past = at + SEEN_RETENTION.as_secs() + DAY_SECS;
        assert!(!is_seen(s, past, "telegram:1").unwrap());
        assert_eq!(prune(s, past, &|| false).unwrap(), 1);
        assert_eq!(all(s), [key(day(later), b"telegram:2")]);
        assert_eq!(seen_at(s, past, "telegram:1"), Applied::Done);
    }

    #[tokio::test]
    async fn a_busy_days_ids_are_all_forgotten_across_pruning_chunks() {
        let (_dir, store) = store();
        let s = &*store;
        let old = NOW - 3 * DAY_SECS;
        let n = 2 * PRUNE_CHUNK + 7;
        let mut batch = Batch::default();
        for i in 0..n {
            mark(&mut batch, old, &format!("slack:event:{i}"));
        }
        store.apply(batch).unwrap();
        assert_eq!(seen_at(s, NOW, "slack:event:kept"), Applied::Done);
        assert_eq!(prune(s, NOW, &|| false).unwrap(), n);
        assert_eq!(all(s), [key(day(NOW), b"slack:event:kept")]);
        assert_eq!(prune(s, NOW, &|| false).unwrap(), 0);
    }

    #[tokio::test]
    async fn an_id_filed_under_tomorrow_by_a_clock_set_back_is_still_a_duplicate() {
        let (_dir, store) = store();
        let s = &*store;
        assert_eq!(seen_at(s, NOW + DAY_SECS, "discord:9"), Applied::Done);
        assert!(is_seen(s, NOW, "discord:9").unwrap());
        assert_eq!(seen_at(s, NOW, "discord:9"), Applied::Conflict);
        assert_eq!(prune(s, NOW, &|| false).unwrap(), 0);
        assert!(is_seen(s, NOW, "discord:9").unwrap());
    }

    #[tokio::test]
    async fn ids_of_the_old_layout_are_filed_by_day_once() {
        let (_dir, store) = store();
        let s = &*store;
        let old = NOW - SEEN_RETENTION.as_secs() - DAY_SECS;
        for (id, at) in [("slack:a", old), ("slack:b", NOW - 60), ("api:c", NOW)] {
            s.put(Tree::Seen, id.as_bytes(), &at.to_be_bytes()).unwrap();
        }
        assert_eq!(prune(s, NOW, &|| false).unwrap(), 1);
        assert_eq!(
            all(s),
            [key(day(NOW), b"api:c"), key(day(NOW - 60), b"slack:b")]
        );
        assert!(is_seen(s, NOW, "slack:b").unwrap());
        assert!(!is_seen(s, NOW, "slack:a").unwrap());
        assert!(s.get(Tree::Meta, FILED_BY_DAY).unwrap().is_some());
        // Done once: a bare key written now (by nobody but this test) stays as it is.
        s.put(Tree::Seen, b"slack:d", &NOW.to_be_bytes()).unwrap();
        assert_eq!(prune(s, NOW, &|| false).unwrap(), 0);
        assert!(all(s).contains(&b"slack:d".to_vec()));
    }
}
