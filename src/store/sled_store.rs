//! The embedded store on sled 0.34, with a write-ahead journal for durability.
//!
//! A commit is first appended to the journal (`journal.rs`): one writer thread appends
//! everything queued and calls `fdatasync` once for all of it (group commit). Only then
//! are its writes applied to sled, key by key. sled itself is flushed every few seconds
//! by a checkpoint thread, after which the older journal files are deleted. On start-up
//! the journal is applied again, in order, over what sled kept: every write in it is a
//! plain put or delete, so applying it twice changes nothing, and no batch that was
//! committed can be left half done.
//!
//! Why not sled's own atomic batches and flushes: every sled batch or transaction writes
//! out the current log buffer twice, and every flush hands a buffer to sled's I/O thread
//! pool and waits for it. Measured under load, that machinery took about 40% of the
//! gateway's CPU. Single-key writes and reads are cheap in sled, so that is all this uses.
//!
//! [`Store::apply`] (not durable until the next flush) writes to sled at once and queues
//! its journal record; it is meant for writes no concurrent commit touches (delivered
//! marks, dedup marks, pruning), and a crash may keep any part of it that was not flushed.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::oneshot;

use super::group_commit::{Timing, Work, checkpointer, writer};
use super::journal::{self, Active};
use super::slot::{Db, Slot};
use super::{Applied, Batch, Entries, Op, Store, StoreError, Tree};
use crate::metrics::Histogram;

/// sled-backed [`Store`].
pub struct SledStore {
    pub(super) shared: Arc<Shared>,
    /// Work for the writer thread; `None` once the store is dropped.
    writer: Option<mpsc::Sender<Work>>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

/// sled's page cache. sled's default is 1 GB; the gateway's hot data (the sessions of the
/// chats talking now, the inbox) is small, and a chat whose session was evicted costs one
/// read from the OS page cache. Measured: 2 MB instead of 8 MB keeps ~1 MB less after
/// 10 000 chats with no change in throughput (6 160–6 450 msg/s either way).
const CACHE_BYTES: u64 = 2 * 1024 * 1024;

/// How long an open waits for a store lock held by this process's last, closing handle;
/// another process's lock is reported as [`StoreError::Locked`] after it.
pub(super) const LOCK_WAIT: Duration = Duration::from_secs(2);

/// What the runtime threads and the writer share.
pub(super) struct Shared {
    /// The open database, reopened by the writer (`slot.rs`).
    pub(super) slot: Slot,
    /// The data folder.
    pub(super) dir: PathBuf,
    /// Journal records of direct writes, already in sled, waiting for the writer. Held
    /// while such a write is applied, so the journal's order is sled's order.
    pub(super) pending: Mutex<Vec<u8>>,
    /// How long each durable journal write took.
    pub(super) syncs: Arc<Histogram>,
    pub(super) timing: Timing,
    /// A journalled batch could not be applied to sled (which may hold part of it): until
    /// sled is opened again (the writer tries every [`Timing::reopen_every`]), no journal
    /// file is deleted and commits are refused.
    pub(super) sled_failed: AtomicBool,
    /// The last journal append failed (a full disk): why, until one succeeds.
    pub(super) append_failed: Mutex<Option<String>>,
    /// The largest id handed out: ids after a reopen start above it.
    pub(super) last_id: AtomicU64,
    /// Tests: sled refuses every write the writer applies, as a full disk would.
    #[cfg(test)]
    pub(super) refuse_writes: AtomicBool,
    /// Tests: every journal append fails, as on a full disk.
    #[cfg(test)]
    pub(super) refuse_appends: AtomicBool,
}

impl SledStore {
    /// Open (or create) the store in `dir`, replaying the journal. Fails with
    /// [`StoreError::Locked`] when another process has it open.
    pub fn open(dir: &Path) -> Result<Self, StoreError> {
        Self::open_with(dir, Arc::default())
    }

    /// [`SledStore::open`], timing every durable journal write into `syncs` (the gateway's
    /// `switchboard_store_sync_seconds`).
    pub fn open_with(dir: &Path, syncs: Arc<Histogram>) -> Result<Self, StoreError> {
        Self::open_timed(dir, syncs, Timing::default())
    }

    /// [`SledStore::open`] for another process than the one that may hold the store (the
    /// CLI): [`StoreError::Locked`] at once, without waiting for this process's own store
    /// closing a moment ago to let go.
    pub fn open_unless_locked(dir: &Path) -> Result<Self, StoreError> {
        Self::open_in(dir, Arc::default(), Timing::default(), Duration::ZERO)
            .map_err(|e| in_dir(dir, e))
    }

    pub(super) fn open_timed(
        dir: &Path,
        syncs: Arc<Histogram>,
        timing: Timing,
    ) -> Result<Self, StoreError> {
        Self::open_in(dir, syncs, timing, LOCK_WAIT).map_err(|e| in_dir(dir, e))
    }

    fn open_in(
        dir: &Path,
        syncs: Arc<Histogram>,
        timing: Timing,
        lock_wait: Duration,
    ) -> Result<Self, StoreError> {
        std::fs::create_dir_all(dir).map_err(backend)?;
        private(dir);
        let (db, active) = open_db(dir, lock_wait, 0)?;
        super::holder::write(dir);
        let shared = Arc::new(Shared {
            slot: Slot::new(db),
            dir: dir.to_path_buf(),
            pending: Mutex::new(Vec::new()),
            syncs,
            timing,
            sled_failed: AtomicBool::new(false),
            append_failed: Mutex::new(None),
            last_id: AtomicU64::new(0),
            #[cfg(test)]
            refuse_writes: AtomicBool::new(false),
            #[cfg(test)]
            refuse_appends: AtomicBool::new(false),
        });
        let (tx, rx) = mpsc::channel();
        let (ctx, crx) = mpsc::channel();
        let writer = std::thread::Builder::new()
            .name("store-writer".into())
            .spawn({
                let shared = shared.clone();
                move || writer(&shared, active, &rx, &ctx)
            })
            .map_err(backend)?;
        let checkpointer = std::thread::Builder::new()
            .name("store-checkpoint".into())
            .spawn({
                let shared = shared.clone();
                move || checkpointer(&shared, &crx)
            })
            .map_err(backend)?;
        Ok(Self {
            shared,
            writer: Some(tx),
            threads: vec![writer, checkpointer],
        })
    }

    fn db(&self) -> Result<Arc<Db>, StoreError> {
        self.shared.slot.get()
    }

    /// Tests: close sled and open it again now, whatever was written.
    #[cfg(test)]
    pub(super) async fn reopen_now(&self) -> Result<(), StoreError> {
        let (tx, rx) = oneshot::channel();
        self.send(Work::Reopen(tx))?;
        rx.await
            .map_err(|_| StoreError::Backend("the store writer stopped".into()))?
    }

    fn send(&self, work: Work) -> Result<(), StoreError> {
        self.writer
            .as_ref()
            .and_then(|w| w.send(work).ok())
            .ok_or_else(|| StoreError::Backend("the store writer stopped".into()))
    }
}

/// Open sled in `dir` and apply the journal over it (at start-up and at a reopen), with
/// ids from `id_floor` up. Returns the journal file to append to.
pub(super) fn open_db(
    dir: &Path,
    lock_wait: Duration,
    id_floor: u64,
) -> Result<(Db, Active), StoreError> {
    let config = sled::Config::new()
        .path(dir.join("store"))
        // Durability comes from the journal; sled is flushed at checkpoints.
        .flush_every_ms(None)
        .cache_capacity(CACHE_BYTES);
    let locked = |e: &sled::Error| matches!(e, sled::Error::Io(io) if held(io));
    // Whether sled's files were there before: if so, the store was made before.
    let existed = std::fs::metadata(dir.join("store").join("db")).is_ok_and(|m| m.len() > 0);
    let waited = std::time::Instant::now();
    let db = loop {
        match config.open() {
            // A store this process closed a moment ago lets go of its file lock once
            // sled's deferred frees have run (seen in tests reopening a store at once).
            Err(e) if locked(&e) && waited.elapsed() < lock_wait => {
                sled::pin().flush();
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            other => break other,
        }
    }
    .map_err(|e| match e {
        // A lock not taken, held or not (a lock file it may not write): said as such.
        sled::Error::Io(io) if held(&io) || io.to_string().contains("lock") => lock_error(dir, &io),
        other => StoreError::Backend(other.to_string()),
    })?;
    // sled restores its id counter (plus a margin) only from a store it flushed once:
    // a new store that crashed before its first checkpoint would hand out the ids of
    // what the journal restored again (a cron job's id, overwriting that job). The same
    // flush makes the store's mark durable (see `mark_or_check`).
    if !db.was_recovered() && !existed {
        db.insert(MADE, b"1".as_slice()).map_err(backend)?;
        db.flush().map_err(backend)?;
    }
    let trees = Tree::ALL
        .iter()
        .map(|t| db.open_tree(t.name()))
        .collect::<Result<Vec<_>, _>>()
        .map_err(backend)?;
    let mut db = Db {
        db,
        trees,
        id_offset: 0,
    };
    let journal_dir = dir.join("journal");
    std::fs::create_dir_all(&journal_dir).map_err(backend)?;
    // Checked before the journal is applied: what it restores is not what sled kept.
    mark_or_check(&db, existed)?;
    let active = recover(&db, &journal_dir)?;
    let mut id_floor = id_floor;
    for t in [Tree::Inbox, Tree::Outbox] {
        if let Some((k, _)) = db.tree(t).last().map_err(backend)? {
            let seq = <[u8; 8]>::try_from(k.as_ref()).map_or(0, u64::from_be_bytes);
            id_floor = id_floor.max(seq.saturating_add(1));
        }
    }
    db.id_offset = id_floor.saturating_sub(db.db.generate_id().map_err(backend)?);
    Ok((db, active))
}

/// Whether sled's I/O error is its file lock held by another process (sled wraps the OS
/// error, whose kind then shows only in its text).
fn held(io: &std::io::Error) -> bool {
    io.kind() == std::io::ErrorKind::WouldBlock || io.to_string().contains("WouldBlock")
}

/// sled's lock failure as a sentence: held by another process (named when it said who it
/// is, see `holder.rs`), or why the lock could not be taken. sled puts the OS error's Rust
/// debug form in its message (`Os { code: 11, kind: WouldBlock, … }`): only its text is kept.
fn lock_error(dir: &Path, io: &std::io::Error) -> StoreError {
    if held(io) {
        return StoreError::Locked(super::holder::locked_message(dir));
    }
    let text = io.to_string();
    let why = text
        .split_once("message: \"")
        .and_then(|(_, rest)| rest.split_once('"'))
        .map_or(text.as_str(), |(m, _)| m);
    StoreError::Backend(format!(
        "could not lock {}: {why}",
        dir.join("store").join("db").display()
    ))
}

/// Which folder, when the store fails to open (a read-only or someone else's data dir).
fn in_dir(dir: &Path, e: StoreError) -> StoreError {
    match e {
        StoreError::Backend(m) => StoreError::Backend(format!("{}: {m}", dir.display())),
        other => other,
    }
}

/// The data folder holds every conversation, the inbox and the admin token: no access for
/// other users (an older version left it 0755). Group access stays, a shared-group setup
/// being the owner's choice; a folder this user may use but not change is left as it is.
fn private(dir: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let Ok(meta) = std::fs::metadata(dir) else {
        return;
    };
    let mode = meta.permissions().mode();
    if mode & 0o007 == 0 {
        return;
    }
    match std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode & !0o007)) {
        Ok(()) => tracing::info!(dir = %dir.display(), "data folder closed to other users"),
        Err(e) => tracing::warn!(dir = %dir.display(),
            "data folder is open to other users and could not be closed: {e}"),
    }
}

pub(super) fn backend(e: impl std::fmt::Display) -> StoreError {
    StoreError::Backend(e.to_string())
}

pub(super) fn lock(m: &Mutex<Vec<u8>>) -> MutexGuard<'_, Vec<u8>> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Meta key every store gets when it is made: one with sled's files but without it lost
/// what it had (sled opens a damaged store whose snapshot is gone as an empty one).
const MADE: &[u8] = b"store_made";

/// Check that a store made before (`existed`) still holds what it had, and mark one made
/// before the mark existed.
fn mark_or_check(Db { db, trees, .. }: &Db, existed: bool) -> Result<(), StoreError> {
    // In sled's default tree, which holds nothing else.
    if db.contains_key(MADE).map_err(backend)? {
        return Ok(());
    }
    // A store made before the mark has something (at least the clean-stop mark of its last
    // run); one whose files were there but hold nothing at all, not even the mark, was lost.
    if existed && trees.iter().all(sled::Tree::is_empty) {
        return Err(StoreError::Backend(
            "the store's files are there but it opened empty: they are damaged (or part of \
             them was removed). It is left as it is; move the `store` folder aside to start \
             with an empty store, or put back a backup"
                .into(),
        ));
    }
    db.insert(MADE, b"1".as_slice()).map_err(backend)?;
    db.flush().map_err(backend)?;
    Ok(())
}

/// Apply the journal over what sled kept, flush sled, delete the files. Returns the file
/// to append to.
fn recover(db: &Db, dir: &Path) -> Result<Active, StoreError> {
    let files = journal::files(dir)?;
    let mut replayed = 0usize;
    for (i, (_, path)) in files.iter().enumerate() {
        let bytes = match std::fs::read(path) {
            Ok(bytes) => bytes,
            // Deleted since it was listed, by the checkpointer, once sled had all of it (a
            // reopen in process).
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(backend(e)),
        };
        let decoded = journal::decode(&bytes);
        let last = i + 1 == files.len();
        if decoded.damaged > 0 || (decoded.torn && !last) {
            // Not what a crash leaves: the disk (or a hand) changed it. Kept for a look; the
            // batches that did check out are applied.
            let kept = path.with_extension("log.damaged");
            let copied = std::fs::copy(path, &kept).map_err(backend);
            tracing::error!(file = %path.display(), damaged_records = decoded.damaged,
                cut_short_before_a_later_file = decoded.torn && !last,
                kept = %kept.display(), copied = copied.is_ok(),
                "store: the journal has damaged records (disk or file corruption): the batches in them are lost, the others were applied; a copy of the file is kept");
        } else if decoded.torn {
            tracing::warn!(file = %path.display(),
                "store: the journal ends in a record cut short (a write the crash interrupted, never reported durable); it is skipped");
        }
        for ops in &decoded.records {
            write(db, ops)?;
        }
        replayed += decoded.records.len();
    }
    if replayed > 0 {
        tracing::info!(batches = replayed, "store: applied the journal again");
        db.db.flush().map_err(backend)?;
    }
    let seq = match files.last() {
        Some((seq, _)) => {
            journal::remove_through(dir, *seq)?;
            seq + 1
        }
        None => 1,
    };
    Active::create(dir, seq)
}

/// Apply `ops` to sled, one key at a time.
pub(super) fn write(db: &Db, ops: &[Op]) -> Result<(), StoreError> {
    for op in ops {
        match op {
            Op::Put(t, k, v) => db.tree(*t).insert(k.as_slice(), v.as_slice()),
            Op::Delete(t, k) => db.tree(*t).remove(k.as_slice()),
        }
        .map_err(backend)?;
    }
    Ok(())
}

impl Shared {
    /// Apply a journalled batch to sled (the writer thread).
    pub(super) fn write_journalled(&self, db: &Db, ops: &[Op]) -> Result<(), StoreError> {
        #[cfg(test)]
        if self.refuse_writes.load(Ordering::Relaxed) {
            return Err(backend("No space left on device (os error 28)"));
        }
        write(db, ops)
    }

    /// Whether every key of `absent` is absent: as `written` (a group's writes so far)
    /// leaves it, else as sled has it.
    pub(super) fn all_absent(
        db: &Db,
        absent: &[(Tree, Vec<u8>)],
        written: &HashMap<(Tree, Vec<u8>), bool>,
    ) -> Result<bool, StoreError> {
        for (t, k) in absent {
            let present = match written.get(&(*t, k.clone())) {
                Some(p) => *p,
                None => db.tree(*t).contains_key(k).map_err(backend)?,
            };
            if present {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// A direct (not yet durable) write: into sled now, into the journal with the next
    /// group (or within [`Timing::direct_within`]). Also says whether it is the first
    /// direct write waiting, for which the writer must be woken.
    fn apply(&self, batch: &Batch) -> Result<(Applied, bool), StoreError> {
        // The pending lock first, then the database: a reopen takes them in that order.
        let mut pending = lock(&self.pending);
        let db = self.slot.get()?;
        if !Self::all_absent(&db, &batch.absent, &HashMap::new())? {
            return Ok((Applied::Conflict, false));
        }
        if batch.ops.is_empty() {
            return Ok((Applied::Done, false));
        }
        write(&db, &batch.ops)?;
        let first = pending.is_empty();
        journal::encode(&mut pending, &batch.ops);
        Ok((Applied::Done, first))
    }
}

#[async_trait]
impl Store for SledStore {
    fn unwritable(&self) -> Option<String> {
        if self.shared.sled_failed.load(Ordering::Relaxed) {
            return Some(super::group_commit::READ_ONLY.to_string());
        }
        let failed = self
            .shared
            .append_failed
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        failed
            .as_ref()
            .map(|e| format!("the last journal write failed ({e}); writes fail until one succeeds"))
    }

    fn get(&self, tree: Tree, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(self
            .db()?
            .tree(tree)
            .get(key)
            .map_err(backend)?
            .map(|v| v.to_vec()))
    }

    fn scan(&self, tree: Tree, prefix: &[u8]) -> Result<Entries, StoreError> {
        self.db()?
            .tree(tree)
            .scan_prefix(prefix)
            .map(|r| r.map(|(k, v)| (k.to_vec(), v.to_vec())).map_err(backend))
            .collect()
    }

    fn for_each(
        &self,
        tree: Tree,
        prefix: &[u8],
        visit: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<(), StoreError> {
        let db = self.db()?;
        for entry in db.tree(tree).scan_prefix(prefix) {
            let (k, v) = entry.map_err(backend)?;
            if !visit(&k, &v) {
                break;
            }
        }
        Ok(())
    }

    fn apply(&self, batch: Batch) -> Result<Applied, StoreError> {
        let (applied, first) = self.shared.apply(&batch)?;
        if first {
            // An idle writer may be in a long wait (the quiet fold's): it starts the short
            // one for direct writes. Failing only when the store is closing.
            let _ = self.send(Work::Wake);
        }
        Ok(applied)
    }

    fn next_id(&self) -> Result<u64, StoreError> {
        // Not the larger of sled's id and a second counter: two callers at once could each
        // take the other's (found on a new store, where both start at 0).
        let db = self.db()?;
        let id = db
            .db
            .generate_id()
            .map_err(backend)?
            .saturating_add(db.id_offset);
        self.shared.last_id.fetch_max(id, Ordering::Relaxed);
        Ok(id)
    }

    async fn flush(&self) -> Result<(), StoreError> {
        let (tx, rx) = oneshot::channel();
        self.send(Work::Flush(tx))?;
        rx.await
            .map_err(|_| StoreError::Backend("the store writer stopped".into()))?
    }

    async fn checkpoint(&self) -> Result<(), StoreError> {
        let (tx, rx) = oneshot::channel();
        self.send(Work::Checkpoint(Some(tx)))?;
        rx.await
            .map_err(|_| StoreError::Backend("the store writer stopped".into()))?
    }

    async fn commit(&self, batch: Batch) -> Result<Applied, StoreError> {
        let (tx, rx) = oneshot::channel();
        self.send(Work::Commit(batch, tx))?;
        rx.await
            .map_err(|_| StoreError::Backend("the store writer stopped".into()))?
    }

    fn len(&self, tree: Tree) -> usize {
        self.db().map_or(0, |db| db.tree(tree).len())
    }
}

impl Drop for SledStore {
    fn drop(&mut self) {
        // Before the lock goes: a process taking it next writes its own record.
        super::holder::remove(&self.shared.dir);
        // The writer finishes what is queued and appends it; the checkpointer ends with
        // it. Then sled gets everything, and the journal is no longer needed. The threads
        // let go of the database, so a caller that drops the store finds its lock released.
        self.writer.take();
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
        let flushed = self
            .shared
            .slot
            .open()
            .is_some_and(|db| db.db.flush().is_ok());
        if flushed && !self.shared.sled_failed.load(Ordering::Relaxed) {
            let _ = journal::remove_through(&self.shared.dir.join("journal"), u64::MAX);
        }
    }
}

#[cfg(test)]
#[path = "sled_store_tests.rs"]
pub(super) mod tests;
