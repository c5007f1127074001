//! The open sled database, which the store closes and opens again in process.
//!
//! sled takes no write after one failed (a full disk: it keeps the error for good), so the
//! store could only read until the gateway restarted. Now the writer opens sled again,
//! every few seconds, once the disk takes a journal write again.
//!
//! A reopen is what a crash and a restart do, without the loss: the direct writes still
//! waiting are appended to the journal first, so the journal holds everything sled may
//! not have on disk, and the new sled is built from sled's files plus the journal, as at
//! start-up. Only the writer thread reopens, between groups, so no commit is in flight.
//! Readers wait it out (a few milliseconds); one that holds the database longer (a long
//! scan) makes the reopen give up and try again later rather than wait.
//!
//! Not a way to give memory back: measured after 20 000 chats' writes, a reopen and a
//! heap trim left 26.1 MB against 27.3 MB trimmed without it, and a second one 28.8 MB
//! (sled's recovery allocates anew among the freed pieces of the old one).

use std::sync::atomic::Ordering;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::journal::{self, Active};
use super::sled_store::{LOCK_WAIT, Shared, backend, lock, open_db};
use super::{StoreError, Tree};

/// One opening of sled: the database, its trees, and what its ids are raised by.
pub(super) struct Db {
    pub(super) db: sled::Db,
    pub(super) trees: Vec<sled::Tree>,
    /// Added to sled's ids so that they start above every inbox and outbox sequence found
    /// at open and every id handed out before a reopen (0 almost always). A store is
    /// flushed when it is created, so sled restores its counter past them; this is the
    /// backstop for one that an older version left unflushed after a crash, and for the
    /// ids sled could not persist before a failed write.
    pub(super) id_offset: u64,
}

impl Db {
    pub(super) fn tree(&self, t: Tree) -> &sled::Tree {
        &self.trees[Tree::ALL.iter().position(|x| *x == t).unwrap_or(0)]
    }
}

enum State {
    Open(Arc<Db>),
    /// The writer is reopening: readers wait.
    Reopening,
    /// The last reopen failed (why); the writer tries again every
    /// [`super::group_commit::Timing::reopen_every`].
    Failed(String),
}

/// Where the open database is kept.
pub(super) struct Slot {
    state: Mutex<State>,
    changed: Condvar,
}

/// How long a reader waits for a reopen before it fails.
const READ_WAIT: Duration = Duration::from_secs(10);
/// How long a reopen waits for readers to let go of the database before it gives up.
const TAKE_WAIT: Duration = Duration::from_secs(2);

impl Slot {
    pub(super) fn new(db: Db) -> Self {
        Self {
            state: Mutex::new(State::Open(Arc::new(db))),
            changed: Condvar::new(),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn set(&self, state: State) {
        *self.state() = state;
        self.changed.notify_all();
    }

    /// The open database, once a reopen under way is done.
    pub(super) fn get(&self) -> Result<Arc<Db>, StoreError> {
        let deadline = Instant::now() + READ_WAIT;
        let mut state = self.state();
        loop {
            match &*state {
                State::Open(db) => return Ok(db.clone()),
                State::Failed(why) => {
                    return Err(StoreError::Backend(format!(
                        "the store is closed: opening it again failed ({why}); it is tried again every few seconds"
                    )));
                }
                State::Reopening => {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Err(StoreError::Backend(
                            "the store is being opened again and did not finish in time".into(),
                        ));
                    }
                    state = self
                        .changed
                        .wait_timeout(state, left)
                        .unwrap_or_else(|p| p.into_inner())
                        .0;
                }
            }
        }
    }

    /// The open database, if it is open, without waiting.
    pub(super) fn open(&self) -> Option<Arc<Db>> {
        match &*self.state() {
            State::Open(db) => Some(db.clone()),
            _ => None,
        }
    }

    /// Take the database out; from now on readers wait. `None` when it is not open.
    fn take(&self) -> Option<Arc<Db>> {
        let mut state = self.state();
        match std::mem::replace(&mut *state, State::Reopening) {
            State::Open(db) => Some(db),
            other => {
                *state = other;
                None
            }
        }
    }
}

/// Close sled and open it again from its files and the journal (the writer thread, between
/// groups). On success the store takes writes again, whatever failed before.
pub(super) fn reopen(shared: &Shared, active: &mut Active) -> Result<(), StoreError> {
    let mut pending = lock(&shared.pending);
    // The direct writes waiting are in sled only: into the journal with them, as the new
    // sled is built from the old one's last flush plus the journal. Appended even when
    // there are none (an empty record): a reopen is pointless on a disk that takes nothing.
    let mut bytes = std::mem::take(&mut *pending);
    let direct = bytes.len();
    journal::encode(&mut bytes, &[]);
    if let Err(e) = super::group_commit::append(shared, active, &bytes) {
        bytes.truncate(direct);
        *pending = bytes;
        return Err(StoreError::Backend(format!("journal write failed: {e}")));
    }
    *shared
        .append_failed
        .lock()
        .unwrap_or_else(|p| p.into_inner()) = None;
    // A disk that took those few bytes may still be too full for sled to open (its
    // recovery writes), and a failed open leaves the store unable even to read until
    // the next try: only with room to spare.
    room_to_open(&shared.dir)?;
    let Some(old) = shared.slot.take() else {
        // Failed last time: nothing to close.
        drop(pending);
        return open_again(shared, active);
    };
    // Direct writes wait in `get` from here on (they take the pending lock first).
    drop(pending);
    let waited = Instant::now();
    while Arc::strong_count(&old) > 1 {
        if waited.elapsed() >= TAKE_WAIT {
            shared.slot.set(State::Open(old));
            return Err(StoreError::Backend(
                "a reader held the store too long; reopening later".into(),
            ));
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    drop(old);
    open_again(shared, active)
}

/// Free space a reopen wants beyond the journal it applies again.
const ROOM_TO_OPEN: u64 = 32 << 20;
/// Opens tried, a moment apart, before the store is left closed until the next round.
const OPEN_TRIES: u32 = 3;

/// Whether the data folder's disk has [`ROOM_TO_OPEN`] free beyond the journal's size.
fn room_to_open(dir: &std::path::Path) -> Result<(), StoreError> {
    let journal: u64 = journal::files(&dir.join("journal"))?
        .iter()
        .map(|(_, p)| std::fs::metadata(p).map_or(0, |m| m.len()))
        .sum();
    let fs = rustix::fs::statvfs(dir).map_err(backend)?;
    let free = fs.f_bavail.saturating_mul(fs.f_frsize);
    let wanted = ROOM_TO_OPEN.saturating_add(journal);
    if free < wanted {
        return Err(StoreError::Backend(format!(
            "{} MB free on the data folder's disk; opening the store again wants {} MB",
            free >> 20,
            wanted >> 20
        )));
    }
    Ok(())
}

fn open_again(shared: &Shared, active: &mut Active) -> Result<(), StoreError> {
    let floor = shared.last_id.load(Ordering::Relaxed).saturating_add(1);
    // sled restores its id counter from what it last flushed (plus a margin), and the ids
    // taken since are only raised by `floor` in this process: the flush makes the counter
    // of this opening durable, so that the next start after a crash begins above it.
    let open = || {
        open_db(&shared.dir, LOCK_WAIT, floor)
            .and_then(|(db, fresh)| db.db.flush().map(|_| (db, fresh)).map_err(backend))
    };
    let mut opened = open();
    for _ in 1..OPEN_TRIES {
        if opened.is_ok() {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
        opened = open();
    }
    match opened {
        Ok((db, fresh)) => {
            *active = fresh;
            shared.sled_failed.store(false, Ordering::Relaxed);
            shared.slot.set(State::Open(Arc::new(db)));
            Ok(())
        }
        Err(e) => {
            shared.sled_failed.store(true, Ordering::Relaxed);
            shared.slot.set(State::Failed(e.to_string()));
            Err(e)
        }
    }
}

#[cfg(test)]
#[path = "slot_tests.rs"]
mod tests;
