//! The job indexes, kept in the store (`Tree::CronIndex`) and written in the same atomic
//! batch as the job they describe:
//!
//! - `d` + due time (8 bytes, order-preserving) + id: enabled jobs by due time. The loop
//!   reads the first key (O(log n)) and sleeps until then; a round reads keys up to now.
//! - `k` + chat key + `0x00` + id: jobs by chat, for `/reminders` and the `cron` tool.
//!
//! Nothing is held in memory, so 100 000 jobs cost the gateway no RAM, and start-up reads
//! no job at all.

use switchboard_channel::ChatKey;

use super::engine::armed;
use super::job::Job;
use crate::store::{Batch, Store, StoreError, Tree};

const DUE: u8 = b'd';
const BY_KEY: u8 = b'k';

fn due_key(due_ms: i64, id: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(9 + id.len());
    k.push(DUE);
    // Flipping the sign bit makes the big-endian bytes sort like the signed numbers.
    k.extend_from_slice(&((due_ms as u64) ^ (1 << 63)).to_be_bytes());
    k.extend_from_slice(id.as_bytes());
    k
}

fn parse_due_key(k: &[u8]) -> Option<(i64, String)> {
    let rest = k.strip_prefix(&[DUE])?;
    let (due, id) = rest.split_at_checked(8)?;
    let due = u64::from_be_bytes(due.try_into().ok()?) ^ (1 << 63);
    Some((due as i64, String::from_utf8(id.to_vec()).ok()?))
}

fn chat_prefix(key: &ChatKey) -> Vec<u8> {
    let mut k = vec![BY_KEY];
    k.extend_from_slice(key.to_string().as_bytes());
    k.push(0);
    k
}

fn chat_key(key: &ChatKey, id: &str) -> Vec<u8> {
    let mut k = chat_prefix(key);
    k.extend_from_slice(id.as_bytes());
    k
}

/// Add to `batch` the writes that store `new` in place of `old` (either may be absent:
/// an added or a removed job), index entries included. A job never changes its id or chat,
/// so an update only moves its due entry.
pub(crate) fn write(
    batch: &mut Batch,
    old: Option<&Job>,
    new: Option<&Job>,
) -> Result<(), StoreError> {
    let (old_due, new_due) = (old.and_then(armed), new.and_then(armed));
    if let (Some(old), Some(due)) = (old, old_due) {
        if new_due != Some(due) {
            batch.delete(Tree::CronIndex, due_key(due, &old.id));
        }
    }
    match (old, new) {
        (Some(old), None) => {
            batch.delete(Tree::Cron, Job::store_key(&old.id));
            batch.delete(Tree::CronIndex, chat_key(&old.key, &old.id));
        }
        (None, Some(new)) => batch.put(Tree::CronIndex, chat_key(&new.key, &new.id), Vec::new()),
        _ => {}
    }
    if let Some(new) = new {
        batch.put(Tree::Cron, Job::store_key(&new.id), new.to_bytes()?);
        if let Some(due) = new_due.filter(|d| old_due != Some(*d)) {
            batch.put(Tree::CronIndex, due_key(due, &new.id), Vec::new());
        }
    }
    Ok(())
}

/// Drop one due entry (it no longer matches its job).
pub(crate) fn forget_due(batch: &mut Batch, due_ms: i64, id: &str) {
    batch.delete(Tree::CronIndex, due_key(due_ms, id));
}

/// The earliest due time.
pub(crate) fn first(store: &dyn Store) -> Result<Option<i64>, StoreError> {
    let mut first = None;
    store.for_each(Tree::CronIndex, &[DUE], &mut |k, _| {
        first = parse_due_key(k).map(|(due, _)| due);
        false
    })?;
    Ok(first)
}

/// Up to `max` jobs due at or before `now_ms`, earliest first.
pub(crate) fn due(
    store: &dyn Store,
    now_ms: i64,
    max: usize,
) -> Result<Vec<(i64, String)>, StoreError> {
    let mut out = Vec::new();
    store.for_each(
        Tree::CronIndex,
        &[DUE],
        &mut |k, _| match parse_due_key(k) {
            Some((due, id)) if due <= now_ms => {
                out.push((due, id));
                out.len() < max
            }
            Some(_) => false,
            None => true,
        },
    )?;
    Ok(out)
}

/// Ids of the jobs of one chat.
pub(crate) fn of_chat(store: &dyn Store, key: &ChatKey) -> Result<Vec<String>, StoreError> {
    let prefix = chat_prefix(key);
    let mut ids = Vec::new();
    store.for_each(Tree::CronIndex, &prefix, &mut |k, _| {
        ids.push(String::from_utf8_lossy(&k[prefix.len()..]).into_owned());
        true
    })?;
    Ok(ids)
}

/// Ids of the jobs of a chat and of its threads or topics (see [`ChatKey::room`]).
pub(crate) fn of_room(store: &dyn Store, room: &ChatKey) -> Result<Vec<String>, StoreError> {
    let mut prefix = vec![BY_KEY];
    prefix.extend_from_slice(room.to_string().as_bytes());
    let threaded = room.has_threads();
    let mut ids = Vec::new();
    store.for_each(Tree::CronIndex, &prefix, &mut |k, _| {
        let rest = &k[prefix.len()..];
        // `room\0id` or (where keys have threads) `room:thread\0id`, not another chat whose
        // id starts alike.
        if rest.first() == Some(&0) || (threaded && rest.first() == Some(&b':')) {
            if let Some(at) = rest.iter().position(|b| *b == 0) {
                ids.push(String::from_utf8_lossy(&rest[at + 1..]).into_owned());
            }
        }
        true
    })?;
    Ok(ids)
}

/// Meta key saying the indexes cover every stored job.
const BUILT: &[u8] = b"cron_index_v1";

/// Add the "indexes are complete" mark to `batch`.
pub(crate) fn mark_built(batch: &mut Batch) {
    batch.put(Tree::Meta, BUILT, b"1".to_vec());
}

/// Build the indexes from the jobs when they are missing (a store written before they
/// existed); returns whether it did.
pub(crate) async fn ensure(store: &dyn Store) -> Result<bool, StoreError> {
    if store.get(Tree::Meta, BUILT)?.is_some() {
        return Ok(false);
    }
    let mut batch = Batch::default();
    store.for_each(Tree::Cron, &[], &mut |k, v| {
        match Job::from_bytes(v) {
            Ok(job) => {
                if let Some(due) = armed(&job) {
                    batch.put(Tree::CronIndex, due_key(due, &job.id), Vec::new());
                }
                batch.put(Tree::CronIndex, chat_key(&job.key, &job.id), Vec::new());
            }
            Err(e) => tracing::error!(id = %String::from_utf8_lossy(k), "skipping job: {e}"),
        }
        true
    })?;
    mark_built(&mut batch);
    store.commit(batch).await?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn due_keys_sort_like_their_times_and_round_trip() {
        let times = [-5_000i64, -1, 0, 1, 1_700_000_000_000, i64::MAX / 2];
        let keys: Vec<Vec<u8>> = times.iter().map(|t| due_key(*t, "j1")).collect();
        let mut sorted = keys.clone();
        sorted.sort();
        assert_eq!(keys, sorted);
        for t in times {
            assert_eq!(
                parse_due_key(&due_key(t, "abc")),
                Some((t, "abc".to_string()))
            );
        }
        assert_eq!(parse_due_key(b"k-not-a-due-key"), None);
    }

    #[test]
    fn an_update_moves_only_the_due_entry_and_a_removal_clears_both() {
        use crate::scheduler::{CatchUp, Delivery, Schedule};
        use crate::store::Op;
        let due = chrono::DateTime::from_timestamp_millis(1_000).unwrap();
        let job = Job {
            id: "j1".into(),
            key: "test:chat".parse().unwrap(),
            message: "m".into(),
            schedule: Schedule::At { at: due },
            tz: "UTC".into(),
            created_by: "cli".into(),
            created_at: due,
            enabled: true,
            next_run: Some(due),
            runs: Vec::new(),
            delivery: Delivery::Agent,
            catch_up: CatchUp::Once,
            model: None,
            set_by: Vec::new(),
        };
        let index_ops = |b: &Batch| -> Vec<(bool, Vec<u8>)> {
            b.ops
                .iter()
                .filter_map(|op| match op {
                    Op::Put(Tree::CronIndex, k, _) => Some((true, k.clone())),
                    Op::Delete(Tree::CronIndex, k) => Some((false, k.clone())),
                    _ => None,
                })
                .collect()
        };
        let chat = chat_key(&job.key, "j1");
        let mut add = Batch::default();
        write(&mut add, None, Some(&job)).unwrap();
        assert_eq!(
            index_ops(&add),
            [(true, chat.clone()), (true, due_key(1_000, "j1"))]
        );

        let mut later = job.clone();
        later.next_run = Some(chrono::DateTime::from_timestamp_millis(5_000).unwrap());
        let mut update = Batch::default();
        write(&mut update, Some(&job), Some(&later)).unwrap();
        assert_eq!(
            index_ops(&update),
            [(false, due_key(1_000, "j1")), (true, due_key(5_000, "j1"))]
        );
        let mut same = Batch::default();
        write(&mut same, Some(&later), Some(&later)).unwrap();
        assert_eq!(index_ops(&same), []);

        let mut remove = Batch::default();
        write(&mut remove, Some(&later), None).unwrap();
        assert_eq!(
            index_ops(&remove),
            [(false, due_key(5_000, "j1")), (false, chat)]
        );
    }
}
