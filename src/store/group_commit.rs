//! Group commit: the writer thread takes the queued commits, checks their preconditions,
//! appends them (and the pending direct writes) to the journal with one `fdatasync`,
//! applies them to sled and answers them; now and then it starts a new journal file and
//! hands the old one to the checkpoint thread, which flushes sled and deletes it. It does
//! that also once the store has been quiet for [`ROTATE_EVERY`], and when asked
//! ([`Work::Checkpoint`], at shutdown), so a gateway that stops or restarts after a burst
//! has no journal left to apply again.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use super::journal::{self, Active};
use super::sled_store::{Shared, backend, lock};
use super::slot::{Db, reopen};
use super::{Applied, Batch, Op, StoreError, Tree};

/// Most writes the writer takes into one group.
const MAX_GROUP: usize = 1024;
/// A new journal file (and a sled flush) after this many bytes...
const ROTATE_BYTES: u64 = 16 * 1024 * 1024;
/// ...or after this long with anything written.
pub(super) const ROTATE_EVERY: Duration = Duration::from_secs(2);
/// Direct writes (a reply's delivered mark, say) go to the journal with the next group;
/// with no group coming, within this: a crash a moment after a reply went out must not
/// send it again at the next start.
pub(super) const DIRECT_WITHIN: Duration = Duration::from_millis(200);

/// The writer's idle timing ([`ROTATE_EVERY`], [`DIRECT_WITHIN`]; tests shorten them).
#[derive(Clone, Copy)]
pub(super) struct Timing {
    pub(super) rotate_every: Duration,
    pub(super) direct_within: Duration,
    /// After sled failed a write, how often the writer opens it again.
    pub(super) reopen_every: Duration,
}

impl Default for Timing {
    fn default() -> Self {
        Self {
            rotate_every: ROTATE_EVERY,
            direct_within: DIRECT_WITHIN,
            reopen_every: REOPEN_EVERY,
        }
    }
}

/// After sled failed a write (a full disk), how often the writer tries to open it again:
/// once the disk takes writes, the store does too, without a restart.
const REOPEN_EVERY: Duration = Duration::from_secs(5);
/// How often a reopen that keeps failing the same way is logged again at warning level
/// (a full disk would otherwise fill the log with the same line every few seconds).
const REPEAT_WARNING: Duration = Duration::from_secs(300);

/// The last failure logged at warning level, and when.
#[derive(Default)]
struct Warned(Option<(Instant, String)>);

impl Warned {
    /// Whether `error` at `now` is worth a warning: the first, a different one, or the
    /// same after [`REPEAT_WARNING`]. Noted when it is.
    fn again(&mut self, error: &str, now: Instant) -> bool {
        let fresh = self
            .0
            .as_ref()
            .is_none_or(|(at, last)| last != error || now.duration_since(*at) >= REPEAT_WARNING);
        if fresh {
            self.0 = Some((now, error.to_string()));
        }
        fresh
    }
}

/// Where a commit's outcome goes.
type Reply = oneshot::Sender<Result<Applied, StoreError>>;

/// Why commits are refused once sled has failed a write (a full disk, say).
pub(super) const READ_ONLY: &str = "the store failed a write (is the disk full?) and takes no more until it could be opened again (tried every few seconds); what it accepted is kept in its journal";

/// Where the outcome of a flush or checkpoint goes.
type Done = oneshot::Sender<Result<(), StoreError>>;

pub(super) enum Work {
    Commit(Batch, Reply),
    Flush(Done),
    /// Make everything durable in sled itself and delete the journal written so far; the
    /// writer sends itself one, answered to nobody, once the store has been quiet.
    Checkpoint(Option<Done>),
    /// A direct write is waiting (the first since the last group): an idle writer makes it
    /// durable within [`Timing::direct_within`]. No work of its own.
    Wake,
    /// Tests: close sled and open it again (`slot.rs`) now, as after a failed write.
    #[cfg(test)]
    Reopen(Done),
}

/// For the checkpoint thread: the journal files up to this one are to go, and who waits
/// for that.
pub(super) type Checkpoint = (u64, Option<Done>);

/// The commits of one group, checked and encoded, waiting for the `fdatasync`.
#[derive(Default)]
struct Group {
    /// Keys this group writes: whether each is present after it.
    overlay: HashMap<(Tree, Vec<u8>), bool>,
    accepted: Vec<(Batch, Reply)>,
    refused: Vec<(Result<Applied, StoreError>, Reply)>,
}

impl Group {
    /// Check `batch`'s preconditions against sled and the commits before it in the group;
    /// if they hold, encode it into `bytes`.
    fn add(&mut self, db: Option<&Db>, batch: Batch, reply: Reply, bytes: &mut Vec<u8>) {
        // After sled failed a write, its dedup marks lag the journal: a retried message
        // would be journalled (and run) once per retry. Refused before the journal.
        let Some(db) = db else {
            self.refused
                .push((Err(StoreError::Backend(READ_ONLY.into())), reply));
            return;
        };
        match Shared::all_absent(db, &batch.absent, &self.overlay) {
            Ok(true) if !batch.ops.is_empty() => {
                for op in &batch.ops {
                    let (t, k, present) = match op {
                        Op::Put(t, k, _) => (t, k, true),
                        Op::Delete(t, k) => (t, k, false),
                    };
                    self.overlay.insert((*t, k.clone()), present);
                }
                journal::encode(bytes, &batch.ops);
                self.accepted.push((batch, reply));
            }
            Ok(true) => self.refused.push((Ok(Applied::Done), reply)),
            Ok(false) => self.refused.push((Ok(Applied::Conflict), reply)),
            Err(e) => self.refused.push((Err(e), reply)),
        }
    }
}

/// Whether the last journal append failed.
fn append_failed(shared: &Shared) -> bool {
    shared
        .append_failed
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .is_some()
}

/// Append `bytes` to the journal and wait until they are on disk.
pub(super) fn append(shared: &Shared, active: &mut Active, bytes: &[u8]) -> Result<(), String> {
    #[cfg(test)]
    if shared.refuse_appends.load(Ordering::Relaxed) {
        return Err("No space left on device (os error 28)".into());
    }
    let _ = shared;
    active.append(bytes).map_err(|e| match e {
        // Named once in the error it ends up in ("store error: journal write failed: …").
        StoreError::Backend(why) => why,
        other => other.to_string(),
    })
}

/// The writer thread: take the queued commits (up to [`MAX_GROUP`]), append them and the
/// pending direct writes to the journal with one `fdatasync`, apply the commits to sled,
/// answer all; now and then start a new journal file and hand the old one to the
/// checkpointer.
pub(super) fn writer(
    shared: &Shared,
    mut active: Active,
    rx: &mpsc::Receiver<Work>,
    checkpoints: &mpsc::Sender<Checkpoint>,
) {
    let (mut bytes, mut commits) = (Vec::new(), Vec::new());
    let mut rotated = Instant::now();
    let mut reopened = Instant::now();
    let mut warned = Warned::default();
    loop {
        if shared.sled_failed.load(Ordering::Relaxed)
            && reopened.elapsed() >= shared.timing.reopen_every
        {
            reopened = Instant::now();
            match reopen(shared, &mut active) {
                Ok(()) => {
                    warned = Warned::default();
                    tracing::info!(
                        "store: opened again after a failed write; it takes writes again"
                    )
                }
                Err(e) if warned.again(&e.to_string(), Instant::now()) => {
                    tracing::warn!(error = %e, "store: still failing; trying again every few seconds (this is logged again in 5 minutes, or when the error changes)")
                }
                Err(e) => tracing::debug!(error = %e, "store: still failing"),
            }
        }
        let first = match rx.try_recv() {
            // Only a wake: wait (again) with the direct writes in view.
            Ok(Work::Wake) => continue,
            Ok(work) => work,
            Err(mpsc::TryRecvError::Empty) => {
                // Going idle: free what this thread's writes retired before waiting.
                release_retired();
                let failed = shared.sled_failed.load(Ordering::Relaxed);
                let direct = !failed && !lock(&shared.pending).is_empty();
                let wait = if direct {
                    shared.timing.direct_within
                } else {
                    shared.timing.rotate_every
                };
                match rx.recv_timeout(wait) {
                    Ok(Work::Wake) => continue,
                    Ok(work) => work,
                    Err(mpsc::RecvTimeoutError::Timeout) => {
                        if failed || shared.sled_failed.load(Ordering::Relaxed) {
                            continue;
                        }
                        if !lock(&shared.pending).is_empty() || append_failed(shared) {
                            // Direct writes and no group to take them: durable now,
                            // answered to nobody. Or the last append failed: try one (an
                            // empty record, if nothing else), so that `/readyz` sees the
                            // disk take writes again without waiting for traffic.
                            Work::Flush(oneshot::channel().0)
                        } else if active.written == 0 {
                            continue;
                        } else {
                            // Quiet for a while: fold the journal into sled, as at shutdown.
                            Work::Checkpoint(None)
                        }
                    }
                    Err(mpsc::RecvTimeoutError::Disconnected) => break,
                }
            }
            Err(mpsc::TryRecvError::Disconnected) => break,
        };
        let mut group = Group::default();
        let mut flushes = Vec::new();
        let mut checkpoint = Vec::new();
        // Only tests ask for a reopen; a failed sled is reopened at the top of the loop.
        #[cfg_attr(not(test), allow(unused_mut))]
        let mut reopens: Vec<Done> = Vec::new();
        let mut next = Some(first);
        let mut taken = 0;
        // The writer is the only one to reopen sled: it is open, or failed to open.
        let db = shared
            .slot
            .open()
            .filter(|_| !shared.sled_failed.load(Ordering::Relaxed));
        while let Some(work) = next {
            match work {
                Work::Commit(batch, reply) => {
                    group.add(db.as_deref(), batch, reply, &mut commits);
                }
                Work::Flush(reply) => flushes.push(reply),
                Work::Checkpoint(reply) => checkpoint.push(reply),
                #[cfg(test)]
                Work::Reopen(reply) => reopens.push(reply),
                // The group takes the direct writes anyway.
                Work::Wake => {}
            }
            taken += 1;
            next = if taken < MAX_GROUP {
                rx.try_recv().ok()
            } else {
                None
            };
        }
        // The direct writes made before this point (so before every flush request just
        // taken) go first: they are in sled already, and the group's commits are not.
        std::mem::swap(&mut *lock(&shared.pending), &mut bytes);
        let direct = bytes.len();
        bytes.extend_from_slice(&commits);
        commits.clear();
        if bytes.is_empty() && append_failed(shared) {
            journal::encode(&mut bytes, &[]);
        }
        let durable = if bytes.is_empty() {
            Ok(())
        } else {
            let started = Instant::now();
            let appended = append(shared, &mut active, &bytes);
            shared.syncs.observe(started.elapsed());
            appended
        };
        *shared
            .append_failed
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = durable.as_ref().err().cloned();
        if durable.is_err() && direct > 0 {
            // The direct writes are in sled already, and only the journal makes them
            // durable: they go with the next append, ahead of any made since.
            let mut pending = lock(&shared.pending);
            let since = std::mem::take(&mut *pending);
            pending.extend_from_slice(&bytes[..direct]);
            pending.extend_from_slice(&since);
        }
        bytes.clear();
        if bytes.capacity() > 1024 * 1024 {
            bytes = Vec::new();
            commits = Vec::new();
        }
        if let Err(e) = &durable {
            // Also for the direct writes a timed flush took, which nobody waits for.
            tracing::error!(error = %e, "store: a journal write failed");
        }
        let fail = |e: &String| StoreError::Backend(format!("journal write failed: {e}"));
        for (batch, reply) in group.accepted {
            let result = match (&durable, &db) {
                (Ok(()), Some(db)) => shared
                    .write_journalled(db, &batch.ops)
                    .map(|()| Applied::Done),
                (Err(e), _) => Err(fail(e)),
                // Not accepted without a database.
                (Ok(()), None) => Err(StoreError::Backend(READ_ONLY.into())),
            };
            if let (Ok(()), Err(e)) = (&durable, &result)
                && !shared.sled_failed.swap(true, Ordering::Relaxed)
            {
                // sled may hold part of this batch; only the journal has all of it.
                tracing::error!(error = %e, "store: a journalled write failed in sled; the journal is kept, and sled is opened again (applying it) once the disk takes writes");
            }
            let _ = reply.send(result);
        }
        for (result, reply) in group.refused {
            let _ = reply.send(result);
        }
        for reply in flushes {
            let _ = reply.send(durable.as_ref().map(|_| ()).map_err(fail));
        }
        if !checkpoint.is_empty() {
            // Everything up to the active file (made empty by rotating) goes; the
            // checkpointer answers once sled has it all. After a failed write (logged
            // above or in `rotate`) the journal stays for the next start.
            let through = match (&durable, shared.sled_failed.load(Ordering::Relaxed)) {
                (Ok(()), false) if active.written > 0 => rotate(&mut active, &mut rotated),
                (Ok(()), false) => Some(active.seq - 1),
                _ => None,
            };
            for reply in checkpoint {
                match (through, reply) {
                    (Some(seq), reply) => {
                        let _ = checkpoints.send((seq, reply));
                    }
                    (None, Some(reply)) => {
                        let _ = reply.send(Err(StoreError::Backend(
                            "a write failed; the journal is kept for the next start".into(),
                        )));
                    }
                    (None, None) => {}
                }
            }
        } else if !shared.sled_failed.load(Ordering::Relaxed)
            && (active.written >= ROTATE_BYTES
                || (active.written > 0 && rotated.elapsed() >= shared.timing.rotate_every))
            && let Some(closed) = rotate(&mut active, &mut rotated)
        {
            let _ = checkpoints.send((closed, None));
        }
        if !reopens.is_empty() {
            // Only this thread's handle may be left for sled to close.
            drop(db);
            reopened = Instant::now();
            let done = reopen(shared, &mut active);
            match &done {
                Ok(()) => tracing::debug!("store: opened again"),
                Err(e) => tracing::warn!(error = %e, "store: could not be opened again"),
            }
            for reply in reopens {
                let _ = reply.send(match &done {
                    Ok(()) => Ok(()),
                    Err(e) => Err(StoreError::Backend(e.to_string())),
                });
            }
        }
    }
}

/// Start a new journal file; returns the sequence number of the one closed.
fn rotate(active: &mut Active, rotated: &mut Instant) -> Option<u64> {
    match active.rotate() {
        Ok(closed) => {
            *rotated = Instant::now();
            Some(closed)
        }
        Err(e) => {
            tracing::warn!(error = %e, "store: cannot start a new journal file");
            None
        }
    }
}

/// The checkpoint thread: flush sled, then delete the journal files it made redundant.
pub(super) fn checkpointer(shared: &Shared, rx: &mpsc::Receiver<Checkpoint>) {
    let dir = shared.dir.join("journal");
    while let Ok((mut closed, waiting)) = rx.recv() {
        let mut waiting: Vec<Done> = waiting.into_iter().collect();
        while let Ok((later, more)) = rx.try_recv() {
            closed = closed.max(later);
            waiting.extend(more);
        }
        // Held only for the flush: a reopen waits for it. A database opened since has
        // applied these files itself.
        let done = shared
            .slot
            .get()
            .and_then(|db| db.db.flush().map_err(backend))
            .and_then(|_| journal::remove_through(&dir, closed));
        if let Err(e) = &done {
            tracing::warn!(error = %e, "store: checkpoint failed; the journal is kept");
        }
        for reply in waiting {
            let _ = reply.send(match &done {
                Ok(()) => Ok(()),
                Err(e) => Err(StoreError::Backend(e.to_string())),
            });
        }
        // The flush sealed sled's current 512 KB log buffer; let it go.
        release_retired();
    }
}

/// Hand what this thread's sled calls retired to the global epoch queue, where the next
/// epoch frees it. sled retires replaced pages and sealed 512 KB log buffers through
/// crossbeam-epoch, which keeps them in the retiring thread's own bag until 64 pile up: a
/// thread that writes now and then (the checkpointer, the writer of a quiet gateway)
/// would hold up to 64 old log buffers, 32 MB, for minutes. Measured before: 4 buffers
/// alive after 10 000 chats, 15 after 50 000, and RSS growing with them.
fn release_retired() {
    crossbeam_epoch::pin().flush();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_repeating_itself_is_warned_of_once_in_five_minutes() {
        let mut warned = Warned::default();
        let t0 = Instant::now();
        let full = "3 MB free on the data folder's disk; opening the store again wants 34 MB";
        assert!(warned.again(full, t0), "the first");
        for s in [5, 10, 295] {
            assert!(!warned.again(full, t0 + Duration::from_secs(s)), "at {s} s");
        }
        assert!(
            warned.again("27 MB free; wants 34 MB", t0 + Duration::from_secs(296)),
            "another"
        );
        assert!(!warned.again("27 MB free; wants 34 MB", t0 + Duration::from_secs(300)));
        assert!(
            warned.again("27 MB free; wants 34 MB", t0 + Duration::from_secs(596)),
            "5 min on"
        );
    }
}
