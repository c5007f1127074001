//! The embedded store on sled 0.34, with group commit: durable writes go to one writer
//! thread that applies everything queued, then makes it durable with one fsync.
//!
//! Why a thread of its own: once sled has seen a batch it guards every operation with one
//! process-wide read/write lock, and a flush holds the read side for as long as the disk
//! takes. A batch applied on a runtime thread while a flush runs would block that thread
//! (and every reader queued behind it) for the whole fsync. The writer applies and flushes
//! in turn, so runtime threads only ever take the read side for short reads and
//! single-key writes.

use std::path::Path;
use std::sync::Arc;
use std::sync::mpsc;

use async_trait::async_trait;
use sled::transaction::{ConflictableTransactionError, TransactionError, Transactional};
use tokio::sync::oneshot;

use super::{Applied, Batch, Entries, Op, Store, StoreError, Tree};

/// Most writes the writer applies before it flushes.
const MAX_GROUP: usize = 1024;

/// sled-backed [`Store`].
pub struct SledStore {
    db: sled::Db,
    trees: Arc<[sled::Tree]>,
    /// Work for the writer thread; `None` once the store is dropped.
    writer: Option<mpsc::Sender<Work>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

enum Work {
    Commit(Batch, oneshot::Sender<Result<Applied, StoreError>>),
    Flush(oneshot::Sender<Result<(), StoreError>>),
}

impl SledStore {
    /// Open (or create) the store in `dir`. Fails with [`StoreError::Locked`] when another
    /// process has it open.
    pub fn open(dir: &Path) -> Result<Self, StoreError> {
        std::fs::create_dir_all(dir).map_err(|e| StoreError::Backend(e.to_string()))?;
        let db = sled::Config::new()
            .path(dir.join("store"))
            .flush_every_ms(Some(1000))
            // sled caches up to 1 GB by default; the gateway's hot data is small.
            .cache_capacity(8 * 1024 * 1024)
            .open()
            .map_err(|e| match e {
                sled::Error::Io(io) if io.kind() == std::io::ErrorKind::WouldBlock => {
                    StoreError::Locked(io.to_string())
                }
                sled::Error::Io(io) if io.to_string().contains("lock") => {
                    StoreError::Locked(io.to_string())
                }
                other => StoreError::Backend(other.to_string()),
            })?;
        let trees: Arc<[sled::Tree]> = Tree::ALL
            .iter()
            .map(|t| db.open_tree(t.name()))
            .collect::<Result<Vec<_>, _>>()
            .map_err(backend)?
            .into();
        let (tx, rx) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("store-writer".into())
            .spawn({
                let (db, trees) = (db.clone(), trees.clone());
                move || writer(db, trees, rx)
            })
            .map_err(backend)?;
        Ok(Self {
            db,
            trees,
            writer: Some(tx),
            thread: Some(thread),
        })
    }

    fn tree(&self, t: Tree) -> &sled::Tree {
        tree_of(&self.trees, t)
    }

    fn send(&self, work: Work) -> Result<(), StoreError> {
        self.writer
            .as_ref()
            .and_then(|w| w.send(work).ok())
            .ok_or_else(|| StoreError::Backend("the store writer stopped".into()))
    }
}

fn tree_of(trees: &[sled::Tree], t: Tree) -> &sled::Tree {
    &trees[Tree::ALL.iter().position(|x| *x == t).unwrap_or(0)]
}

fn backend(e: impl std::fmt::Display) -> StoreError {
    StoreError::Backend(e.to_string())
}

/// The writer thread: apply what is queued (up to [`MAX_GROUP`]), flush once, answer all.
fn writer(db: sled::Db, trees: Arc<[sled::Tree]>, rx: mpsc::Receiver<Work>) {
    while let Ok(first) = rx.recv() {
        let mut commits = Vec::new();
        let mut flushes = Vec::new();
        let mut next = Some(first);
        while let Some(work) = next {
            match work {
                Work::Commit(batch, reply) => commits.push((apply(&trees, batch), reply)),
                Work::Flush(reply) => flushes.push(reply),
            }
            next = if commits.len() + flushes.len() < MAX_GROUP {
                rx.try_recv().ok()
            } else {
                None
            };
        }
        let flushed = db.flush().map(|_| ()).map_err(|e| e.to_string());
        let fail = |e: &String| StoreError::Backend(format!("flush failed: {e}"));
        for (applied, reply) in commits {
            let _ = reply.send(match (&flushed, applied) {
                (Ok(()), r) => r,
                (Err(e), Ok(_)) => Err(fail(e)),
                (Err(_), Err(e)) => Err(e),
            });
        }
        for reply in flushes {
            let _ = reply.send(flushed.as_ref().map(|_| ()).map_err(fail));
        }
    }
}

/// Apply a batch atomically: one key without preconditions is a plain write, one tree a
/// sled batch, several trees or preconditions a transaction.
fn apply(trees: &[sled::Tree], batch: Batch) -> Result<Applied, StoreError> {
    let mut used: Vec<Tree> = Vec::new();
    for t in batch
        .ops
        .iter()
        .map(|op| match op {
            Op::Put(t, ..) | Op::Delete(t, _) => *t,
        })
        .chain(batch.absent.iter().map(|(t, _)| *t))
    {
        if !used.contains(&t) {
            used.push(t);
        }
    }
    if used.is_empty() {
        return Ok(Applied::Done);
    }
    if batch.absent.is_empty() && batch.ops.len() == 1 {
        match batch.ops.into_iter().next() {
            Some(Op::Put(t, k, v)) => {
                tree_of(trees, t).insert(k, v).map_err(backend)?;
            }
            Some(Op::Delete(t, k)) => {
                tree_of(trees, t).remove(k).map_err(backend)?;
            }
            None => {}
        }
        return Ok(Applied::Done);
    }
    if used.len() == 1 && batch.absent.is_empty() {
        let mut b = sled::Batch::default();
        for op in batch.ops {
            match op {
                Op::Put(_, k, v) => b.insert(k, v),
                Op::Delete(_, k) => b.remove(k),
            }
        }
        tree_of(trees, used[0]).apply_batch(b).map_err(backend)?;
        return Ok(Applied::Done);
    }
    let involved: Vec<sled::Tree> = used.iter().map(|t| tree_of(trees, *t).clone()).collect();
    let idx = |t: Tree| used.iter().position(|x| *x == t).unwrap_or(0);
    let result = involved.as_slice().transaction(|tx| {
        for (t, k) in &batch.absent {
            if tx[idx(*t)].get(k)?.is_some() {
                return Err(ConflictableTransactionError::Abort(()));
            }
        }
        for op in &batch.ops {
            match op {
                Op::Put(t, k, v) => {
                    tx[idx(*t)].insert(k.as_slice(), v.as_slice())?;
                }
                Op::Delete(t, k) => {
                    tx[idx(*t)].remove(k.as_slice())?;
                }
            }
        }
        Ok(())
    });
    match result {
        Ok(()) => Ok(Applied::Done),
        Err(TransactionError::Abort(())) => Ok(Applied::Conflict),
        Err(TransactionError::Storage(e)) => Err(backend(e)),
    }
}

#[async_trait]
impl Store for SledStore {
    fn get(&self, tree: Tree, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(self
            .tree(tree)
            .get(key)
            .map_err(backend)?
            .map(|v| v.to_vec()))
    }

    fn scan(&self, tree: Tree, prefix: &[u8]) -> Result<Entries, StoreError> {
        self.tree(tree)
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
        for entry in self.tree(tree).scan_prefix(prefix) {
            let (k, v) = entry.map_err(backend)?;
            if !visit(&k, &v) {
                break;
            }
        }
        Ok(())
    }

    fn apply(&self, batch: Batch) -> Result<Applied, StoreError> {
        apply(&self.trees, batch)
    }

    fn next_id(&self) -> Result<u64, StoreError> {
        self.db.generate_id().map_err(backend)
    }

    async fn flush(&self) -> Result<(), StoreError> {
        let (tx, rx) = oneshot::channel();
        self.send(Work::Flush(tx))?;
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
        self.tree(tree).len()
    }
}

impl Drop for SledStore {
    fn drop(&mut self) {
        // The writer finishes what is queued, flushes, and lets go of the database, so a
        // caller that drops the store finds its lock released.
        self.writer.take();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        let _ = self.db.flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn batches_are_atomic_and_require_absent_detects_duplicates() {
        let dir = tempfile::tempdir().unwrap();
        let s: Arc<dyn Store> = Arc::new(SledStore::open(dir.path()).unwrap());
        let mut b = Batch::default();
        b.require_absent(Tree::Seen, "m1");
        b.put(Tree::Seen, "m1", "t");
        b.put(Tree::Inbox, 1u64.to_be_bytes(), "msg");
        assert_eq!(s.apply(b.clone()).unwrap(), Applied::Done);
        assert_eq!(s.apply(b).unwrap(), Applied::Conflict);
        assert_eq!(s.len(Tree::Inbox), 1);
        s.flush().await.unwrap();
        assert_eq!(
            s.get(Tree::Inbox, &1u64.to_be_bytes()).unwrap().unwrap(),
            b"msg"
        );
    }

    #[tokio::test]
    async fn concurrent_flushes_share_fsyncs_and_data_survives_reopen() {
        let dir = tempfile::tempdir().unwrap();
        {
            let s: Arc<dyn Store> = Arc::new(SledStore::open(dir.path()).unwrap());
            let mut tasks = Vec::new();
            for i in 0..200u64 {
                let s = s.clone();
                tasks.push(tokio::spawn(async move {
                    s.put(Tree::Meta, &i.to_be_bytes(), b"v").unwrap();
                    s.flush().await.unwrap();
                }));
            }
            for t in tasks {
                t.await.unwrap();
            }
            assert!(s.next_id().unwrap() < s.next_id().unwrap());
        }
        let s = SledStore::open(dir.path()).unwrap();
        assert_eq!(s.len(Tree::Meta), 200);
    }

    #[tokio::test]
    async fn commits_are_durable_at_once_and_a_conflict_writes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        {
            let s: Arc<dyn Store> = Arc::new(SledStore::open(dir.path()).unwrap());
            let mut tasks = Vec::new();
            for i in 0..100u64 {
                let s = s.clone();
                tasks.push(tokio::spawn(async move {
                    let mut b = Batch::default();
                    b.require_absent(Tree::Seen, i.to_be_bytes());
                    b.put(Tree::Seen, i.to_be_bytes(), "t");
                    b.put(Tree::Inbox, i.to_be_bytes(), "msg");
                    s.commit(b).await.unwrap()
                }));
            }
            for t in tasks {
                assert_eq!(t.await.unwrap(), Applied::Done);
            }
            let mut again = Batch::default();
            again.require_absent(Tree::Seen, 7u64.to_be_bytes());
            again.put(Tree::Inbox, 1000u64.to_be_bytes(), "not written");
            assert_eq!(s.commit(again).await.unwrap(), Applied::Conflict);
            // The process "dies" here: no flush on the way out beyond what commit did.
            std::mem::forget(s);
        }
        // sled's own lock is held by the forgotten handle; read the files through a copy.
        let copy = tempfile::tempdir().unwrap();
        copy_dir(&dir.path().join("store"), &copy.path().join("store"));
        let s = SledStore::open(copy.path()).unwrap();
        assert_eq!(s.len(Tree::Inbox), 100);
        assert_eq!(s.get(Tree::Inbox, &1000u64.to_be_bytes()).unwrap(), None);
    }

    fn copy_dir(from: &Path, to: &Path) {
        std::fs::create_dir_all(to).unwrap();
        for entry in std::fs::read_dir(from).unwrap() {
            let entry = entry.unwrap();
            let target = to.join(entry.file_name());
            if entry.file_type().unwrap().is_dir() {
                copy_dir(&entry.path(), &target);
            } else {
                std::fs::copy(entry.path(), target).unwrap();
            }
        }
    }

    #[tokio::test]
    async fn a_second_open_reports_locked() {
        let dir = tempfile::tempdir().unwrap();
        let _a = SledStore::open(dir.path()).unwrap();
        match SledStore::open(dir.path()) {
            Err(StoreError::Locked(_)) => {}
            Err(e) => panic!("expected Locked, got {e}"),
            Ok(_) => panic!("expected Locked, got a second handle"),
        }
    }
}
