//! The embedded store on sled 0.34, with group commit: concurrent `flush` calls share one
//! fsync, so durability does not cost one fsync per message under load.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use sled::transaction::{ConflictableTransactionError, TransactionError, Transactional};
use tokio::sync::{Notify, watch};

use super::{Applied, Batch, Entries, Op, Store, StoreError, Tree};

/// sled-backed [`Store`].
pub struct SledStore {
    db: sled::Db,
    trees: Vec<sled::Tree>,
    commit: Arc<GroupCommit>,
}

struct GroupCommit {
    /// Number of flushes requested so far.
    requested: AtomicU64,
    /// Number of requests covered by a completed fsync (or an error for all of them).
    done: watch::Sender<(u64, Option<String>)>,
    wake: Notify,
    /// The database while the store is open; taken on drop so the flusher lets go of it.
    db: std::sync::Mutex<Option<sled::Db>>,
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
        let trees = Tree::ALL
            .iter()
            .map(|t| db.open_tree(t.name()))
            .collect::<Result<Vec<_>, _>>()
            .map_err(backend)?;
        let (done, _) = watch::channel((0, None));
        let commit = Arc::new(GroupCommit {
            requested: AtomicU64::new(0),
            done,
            wake: Notify::new(),
            db: std::sync::Mutex::new(Some(db.clone())),
        });
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            handle.spawn(flusher(commit.clone()));
        }
        Ok(Self { db, trees, commit })
    }

    fn tree(&self, t: Tree) -> &sled::Tree {
        &self.trees[Tree::ALL.iter().position(|x| *x == t).unwrap_or(0)]
    }
}

fn backend(e: impl std::fmt::Display) -> StoreError {
    StoreError::Backend(e.to_string())
}

/// One task does the fsyncs; each covers every request made before it started.
async fn flusher(commit: Arc<GroupCommit>) {
    loop {
        commit.wake.notified().await;
        let Some(db) = commit.db.lock().unwrap_or_else(|p| p.into_inner()).clone() else {
            return;
        };
        let target = commit.requested.load(Ordering::SeqCst);
        if commit.done.borrow().0 >= target {
            continue;
        }
        let err = db.flush_async().await.err().map(|e| e.to_string());
        // Let go of the database before anyone hears the flush is done: a caller that then
        // drops the store must find the lock released.
        drop(db);
        commit.done.send_replace((target, err));
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
        // Single-tree batches without preconditions skip the transaction machinery.
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
        if used.len() == 1 && batch.absent.is_empty() {
            let mut b = sled::Batch::default();
            for op in batch.ops {
                match op {
                    Op::Put(_, k, v) => b.insert(k, v),
                    Op::Delete(_, k) => b.remove(k),
                }
            }
            self.tree(used[0]).apply_batch(b).map_err(backend)?;
            return Ok(Applied::Done);
        }
        let trees: Vec<sled::Tree> = used.iter().map(|t| self.tree(*t).clone()).collect();
        let idx = |t: Tree| used.iter().position(|x| *x == t).unwrap_or(0);
        let result = trees.as_slice().transaction(|tx| {
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

    fn next_id(&self) -> Result<u64, StoreError> {
        self.db.generate_id().map_err(backend)
    }

    async fn flush(&self) -> Result<(), StoreError> {
        let mine = self.commit.requested.fetch_add(1, Ordering::SeqCst) + 1;
        let mut rx = self.commit.done.subscribe();
        self.commit.wake.notify_one();
        let done = rx
            .wait_for(|(covered, _)| *covered >= mine)
            .await
            .map_err(|_| StoreError::Backend("flusher stopped".into()))?;
        match &done.1 {
            None => Ok(()),
            Some(e) => Err(StoreError::Backend(format!("flush failed: {e}"))),
        }
    }

    fn len(&self, tree: Tree) -> usize {
        self.tree(tree).len()
    }
}

impl Drop for SledStore {
    fn drop(&mut self) {
        self.commit
            .db
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        self.commit.wake.notify_one();
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
