//! Keyed requests' records in the meta tree: the request's fingerprint from when it was
//! first taken, and its answer once delivered. Filed by UTC day as the seen ids are (see
//! `bus::seen`), under `idem/` + day + message id, and kept a day longer than those, so a
//! retry the bus drops as a duplicate always finds its request's record.

use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use switchboard_channel::{InboundMessage, OutboundKind, OutboundMessage, TokenUsage};

use crate::bus::SEEN_RETENTION;
use crate::store::{Applied, Batch, Store, StoreError, Tree};

const PREFIX: &[u8] = b"idem/";
const DAY_SECS: u64 = 86_400;
/// Days before today a record is looked up under, and kept: one more than the seen ids,
/// so that a record written just before midnight outlives its message's id marked after.
const DAYS_BACK: u32 = (SEEN_RETENTION.as_secs() / DAY_SECS) as u32 + 1;
/// Most deletions applied by one write of [`prune`].

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(super) struct Record {
    /// The request's fingerprint: a retry must have the same.
    pub(super) fp: String,
    /// When it was first taken (seconds since the epoch): the completion's `created`.
    pub(super) at: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) answer: Option<Answer>,
}

/// A keyed request's answer, as delivered to it (redacted as every reply is).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(in crate::http::api) struct Answer {
    pub(in crate::http::api) text: String,
    #[serde(default)]
    pub(in crate::http::api) kind: OutboundKind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(in crate::http::api) usage: Option<TokenUsage>,
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

fn day(now_secs: u64) -> u32 {
    u32::try_from(now_secs / DAY_SECS).unwrap_or(u32::MAX)
}

fn key(day: u32, id: &str) -> Vec<u8> {
    let mut key = Vec::with_capacity(PREFIX.len() + 4 + id.len());
    key.extend_from_slice(PREFIX);
    key.extend_from_slice(&day.to_be_bytes());
    key.extend_from_slice(id.as_bytes());
    key
}

/// The keys `id`'s record may be under at `now`: today, the days before, and tomorrow (a
/// clock set back).
fn keys(now_secs: u64, id: &str) -> impl Iterator<Item = Vec<u8>> + '_ {
    let today = day(now_secs);
    (0..=DAYS_BACK)
        .map(move |back| today.saturating_sub(back))
        .chain(std::iter::once(today.saturating_add(1)))
        .map(move |d| key(d, id))
}

fn encode(record: &Record) -> Result<Vec<u8>, StoreError> {
    serde_json::to_vec(record).map_err(|e| StoreError::Backend(e.to_string()))
}

/// `id`'s record and its key.
fn find(store: &dyn Store, now: u64, id: &str) -> Result<Option<(Vec<u8>, Record)>, StoreError> {
    for k in keys(now, id) {
        if let Some(v) = store.get(Tree::Meta, &k)? {
            let record = serde_json::from_slice(&v)
                .map_err(|e| StoreError::Backend(format!("corrupt idempotency record: {e}")))?;
            return Ok(Some((k, record)));
        }
    }
    Ok(None)
}

/// Take `id` for a request with fingerprint `fp`, durably, before its message is published:
/// `None` when taken now, else the record of the request that took it first.
pub(super) async fn claim(
    store: &dyn Store,
    id: &str,
    fp: &str,
) -> Result<Option<Record>, StoreError> {
    let now = now_secs();
    let record = Record {
        fp: fp.to_string(),
        at: now,
        answer: None,
    };
    let mut batch = Batch::default();
    for k in keys(now, id) {
        batch.require_absent(Tree::Meta, k);
    }
    batch.put(Tree::Meta, key(day(now), id), encode(&record)?);
    match store.commit(batch).await? {
        Applied::Done => Ok(None),
        Applied::Conflict => Ok(find(store, now, id)?.map(|(_, r)| r)),
    }
}

/// The write keeping `answer` in `id`'s record; `None` when there is nothing to write: it
/// has one (the first answer stays, a redelivery after a crash changes nothing), or it has
/// no record (pruned).
fn answering(store: &dyn Store, id: &str, answer: Answer) -> Result<Option<Batch>, StoreError> {
    let Some((k, mut record)) = find(store, now_secs(), id)? else {
        tracing::warn!(id, "a keyed request's answer has no record to be kept in");
        return Ok(None);
    };
    if record.answer.is_some() {
        return Ok(None);
    }
    record.answer = Some(answer);
    let mut batch = Batch::default();
    batch.put(Tree::Meta, k, encode(&record)?);
    Ok(Some(batch))
}

/// Keep `reply` as the answer of the keyed request `id`, durably.
pub(in crate::http::api) async fn keep_answer(
    store: &dyn Store,
    id: &str,
    reply: &OutboundMessage,
) -> Result<(), StoreError> {
    let answer = Answer {
        text: reply.text.clone(),
        kind: reply.kind,
        usage: reply.usage,
    };
    if let Some(batch) = answering(store, id, answer)? {
        store.commit(batch).await?;
    }
    Ok(())
}

/// Keep `answer` as the answer of the keyed request `id`, durable with the store's next
/// flush (the turn's own write, which follows).
pub(in crate::http::api) fn keep_answer_now(
    store: &dyn Store,
    id: &str,
    answer: Answer,
) -> Result<(), StoreError> {
    if let Some(batch) = answering(store, id, answer)? {
        store.apply(batch)?;
    }
    Ok(())
}

/// Where a request taken before stands.
pub(super) enum Settled {
    /// Its message waits or runs (in the inbox), or its answer is being delivered (in the
    /// outbox): the answer comes.
    InFlight,
    Answered(Answer),
    /// Neither: done with, its answer not kept.
    Unknown,
}

/// Most inbox and outbox entries [`settled`] reads, each: past them, a request not found is
/// taken to be in flight (its retry waits for the answer, up to the reply timeout).
pub(super) const SCAN_MAX: usize = 10_000;

/// Where the request of message `id` stands, from the store (the bus's table, read first
/// by the caller, finds a message waiting or running without this). There is no index of
/// the inbox or the outbox by message id (both are by sequence number, and the seen ids
/// hold a time only), so this walks them, at most [`SCAN_MAX`] entries each. Read in the
/// order the message moves on: the inbox entry leaves in the write recording its reply in
/// the outbox, which lets the reply go only after it is kept.
pub(super) fn settled(store: &dyn Store, id: &str) -> Result<Settled, StoreError> {
    settled_within(store, id, SCAN_MAX)
}

fn settled_within(store: &dyn Store, id: &str, most: usize) -> Result<Settled, StoreError> {
    let needle = id.as_bytes();
    let holds = |v: &[u8]| v.windows(needle.len()).any(|w| w == needle);
    let (mut found, mut read) = (false, 0);
    store.for_each(Tree::Inbox, &[], &mut |_, v| {
        read += 1;
        found = holds(v) && serde_json::from_slice::<InboundMessage>(v).is_ok_and(|m| m.id == id);
        !found && read < most
    })?;
    let mut cut = read >= most;
    if !found {
        read = 0;
        store.for_each(Tree::Outbox, &[], &mut |_, v| {
            read += 1;
            found = holds(v)
                && serde_json::from_slice::<OutboundMessage>(v)
                    .is_ok_and(|m| m.in_reply_to_inbound.as_deref() == Some(id));
            !found && read < most
        })?;
        cut |= read >= most;
    }
    if found {
        return Ok(Settled::InFlight);
    }
    Ok(match find(store, now_secs(), id)? {
        Some((
            _,
            Record {
                answer: Some(a), ..
            },
        )) => Settled::Answered(a),
        // Not all read: it may be further on.
        _ if cut => {
            tracing::warn!(
                id,
                "a keyed request's message was not found in the first {most} inbox or outbox entries: taken to be in flight"
            );
            Settled::InFlight
        }
        _ => Settled::Unknown,
    })
}

/// Forget the records of the days past their retention; returns how many were removed.
/// Blocks on the store: run it off the async runtime's threads, as the seen ids' prune.
/// Ends early, between writes, once `stop` says so.
pub fn prune(store: &dyn Store, stop: &dyn Fn() -> bool) -> Result<usize, StoreError> {
    prune_at(store, now_secs(), stop)
}

fn prune_at(store: &dyn Store, now: u64, stop: &dyn Fn() -> bool) -> Result<usize, StoreError> {
    let first_kept = day(now).saturating_sub(DAYS_BACK);
    crate::bus::prune_days(store, Tree::Meta, PREFIX, PREFIX.len(), first_kept, stop)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::store::SledStore;

    fn store() -> (tempfile::TempDir, Arc<dyn Store>) {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn Store> = Arc::new(SledStore::open(dir.path()).unwrap());
        (dir, store)
    }

    #[tokio::test]
    async fn a_record_outlives_the_seen_id_and_is_pruned_after() {
        let (_dir, store) = store();
        let s = &*store;
        assert_eq!(claim(s, "api:idem:1", "fp").await.unwrap(), None);
        let first = claim(s, "api:idem:1", "other").await.unwrap().unwrap();
        assert_eq!(first.fp, "fp");
        let reply = OutboundMessage::new("api:a".parse().unwrap(), "hi");
        keep_answer(s, "api:idem:1", &reply).await.unwrap();
        // The first answer stays.
        let later = OutboundMessage::new("api:a".parse().unwrap(), "again");
        keep_answer(s, "api:idem:1", &later).await.unwrap();
        let now = now_secs();
        let (_, kept) = find(s, now, "api:idem:1").unwrap().unwrap();
        assert_eq!(kept.answer.unwrap().text, "hi");
        // Kept past the seen ids' retention (found, not pruned), forgotten a day after.
        let retained = now + SEEN_RETENTION.as_secs() + DAY_SECS - 1;
        assert_eq!(prune_at(s, retained, &|| false).unwrap(), 0);
        assert!(find(s, retained, "api:idem:1").unwrap().is_some());
        let past = now + SEEN_RETENTION.as_secs() + 2 * DAY_SECS;
        assert_eq!(prune_at(s, past, &|| false).unwrap(), 1);
        assert!(find(s, now, "api:idem:1").unwrap().is_none());
    }

    #[test]
    fn the_store_walk_for_a_request_is_bounded() {
        let (_dir, store) = store();
        let s = &*store;
        let key: switchboard_channel::ChatKey = "api:a".parse().unwrap();
        let sender = switchboard_channel::Sender {
            id: "a".into(),
            username: None,
            display_name: "a".into(),
            is_owner: false,
        };
        // 20 other requests' messages, then the one looked for.
        for seq in 0..21u64 {
            let id = if seq == 20 {
                "api:idem:t".to_string()
            } else {
                format!("api:idem:{seq}")
            };
            let msg = InboundMessage::text(id, key.clone(), sender.clone(), "hi");
            let body = serde_json::to_vec(&msg).unwrap();
            s.put(Tree::Inbox, &seq.to_be_bytes(), &body).unwrap();
        }
        let in_flight =
            |id, most| matches!(settled_within(s, id, most).unwrap(), Settled::InFlight);
        assert!(in_flight("api:idem:t", 100));
        assert!(
            !in_flight("api:idem:gone", 100),
            "read to the end: not there"
        );
        // Stopped after 10 entries: not found, so maybe further on.
        assert!(in_flight("api:idem:gone", 10));
    }
}
