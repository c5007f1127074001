//! The durable store: named trees of bytes behind a small trait, so a networked store can
//! replace the embedded one. It knows bytes and keys, not what they mean.

mod group_commit;
pub mod holder;
mod journal;
mod sled_store;
mod slot;

use async_trait::async_trait;

pub use sled_store::SledStore;

/// The logical trees of the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Tree {
    /// Accepted inbound messages not yet handled, by sequence number.
    Inbox,
    /// Replies recorded but not yet delivered, by sequence number.
    Outbox,
    /// Inbound message ids already accepted (dedup), with the time they were first seen.
    Seen,
    /// Conversation history per chat key.
    Sessions,
    /// Scheduled jobs.
    Cron,
    /// Indexes of the scheduled jobs (by due time, by chat).
    CronIndex,
    /// Pairing codes and approved senders.
    Pairing,
    /// Everything else: small gateway facts (last active chat, …).
    Meta,
}

impl Tree {
    pub const ALL: [Tree; 8] = [
        Tree::Inbox,
        Tree::Outbox,
        Tree::Seen,
        Tree::Sessions,
        Tree::Cron,
        Tree::CronIndex,
        Tree::Pairing,
        Tree::Meta,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Tree::Inbox => "inbox",
            Tree::Outbox => "outbox",
            Tree::Seen => "seen",
            Tree::Sessions => "sessions",
            Tree::Cron => "cron",
            Tree::CronIndex => "cron_index",
            Tree::Pairing => "pairing",
            Tree::Meta => "meta",
        }
    }
}

/// One write in a [`Batch`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    Put(Tree, Vec<u8>, Vec<u8>),
    Delete(Tree, Vec<u8>),
}

/// Writes applied together: all or none once committed (see [`Store::commit`]).
#[derive(Debug, Clone, Default)]
pub struct Batch {
    pub ops: Vec<Op>,
    /// Keys that must be absent for the batch to apply (insert-if-absent, for dedup).
    pub absent: Vec<(Tree, Vec<u8>)>,
}

impl Batch {
    pub fn put(&mut self, tree: Tree, key: impl Into<Vec<u8>>, value: impl Into<Vec<u8>>) {
        self.ops.push(Op::Put(tree, key.into(), value.into()));
    }

    pub fn delete(&mut self, tree: Tree, key: impl Into<Vec<u8>>) {
        self.ops.push(Op::Delete(tree, key.into()));
    }

    /// Apply only if `key` is absent from `tree`.
    pub fn require_absent(&mut self, tree: Tree, key: impl Into<Vec<u8>>) {
        self.absent.push((tree, key.into()));
    }

    pub fn extend(&mut self, other: Batch) {
        self.ops.extend(other.ops);
        self.absent.extend(other.absent);
    }

    pub fn is_empty(&self) -> bool {
        self.ops.is_empty() && self.absent.is_empty()
    }
}

/// Key-value pairs from a scan, in key order.
pub type Entries = Vec<(Vec<u8>, Vec<u8>)>;

/// What went wrong in the store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// Another process holds the store: the sentence names it when it can be known.
    #[error("{0}")]
    Locked(String),
    #[error("store error: {0}")]
    Backend(String),
}

/// Applying a batch: whether it went in, or a required-absent key was present.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Applied {
    Done,
    Conflict,
}

/// Durable trees of bytes.
#[async_trait]
pub trait Store: Send + Sync + 'static {
    fn get(&self, tree: Tree, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError>;
    /// All entries of a tree whose key starts with `prefix`, in key order.
    fn scan(&self, tree: Tree, prefix: &[u8]) -> Result<Entries, StoreError>;
    /// Visit the entries of a tree whose key starts with `prefix`, in key order, without
    /// holding them all in memory; `visit` returns `false` to stop.
    fn for_each(
        &self,
        tree: Tree,
        prefix: &[u8],
        visit: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<(), StoreError>;
    /// Apply a batch now, so readers see it when this returns; durable only after the
    /// next [`Store::flush`], and a crash before that may keep any part of it. For writes
    /// no concurrent commit touches (delivered marks, dedup marks, pruning).
    fn apply(&self, batch: Batch) -> Result<Applied, StoreError>;
    /// A number larger than any this store handed out before, across restarts.
    fn next_id(&self) -> Result<u64, StoreError>;
    /// Make every write applied so far durable. Concurrent callers share one fsync
    /// (group commit).
    async fn flush(&self) -> Result<(), StoreError>;
    /// [`Store::flush`], and leave the store so that opening it again has nothing to
    /// recover (for a store with a log: fold it into the data). Called at shutdown.
    async fn checkpoint(&self) -> Result<(), StoreError> {
        self.flush().await
    }
    /// Apply a batch and make it durable before returning: after a crash all of it is
    /// there or none (a conflict writes nothing). Concurrent commits share one fsync.
    async fn commit(&self, batch: Batch) -> Result<Applied, StoreError> {
        let applied = self.apply(batch)?;
        self.flush().await?;
        Ok(applied)
    }
    /// Number of entries in a tree.
    fn len(&self, tree: Tree) -> usize;
    /// Why the store takes no more writes, if it does not (`/readyz` names it).
    fn unwritable(&self) -> Option<String> {
        None
    }
}

/// Helpers over any store.
impl dyn Store {
    pub fn put(&self, tree: Tree, key: &[u8], value: &[u8]) -> Result<(), StoreError> {
        let mut b = Batch::default();
        b.put(tree, key, value);
        self.apply(b).map(|_| ())
    }

    pub fn delete(&self, tree: Tree, key: &[u8]) -> Result<(), StoreError> {
        let mut b = Batch::default();
        b.delete(tree, key);
        self.apply(b).map(|_| ())
    }

    pub fn get_json<T: serde::de::DeserializeOwned>(
        &self,
        tree: Tree,
        key: &[u8],
    ) -> Result<Option<T>, StoreError> {
        match self.get(tree, key)? {
            None => Ok(None),
            Some(v) => serde_json::from_slice(&v)
                .map(Some)
                .map_err(|e| StoreError::Backend(format!("corrupt {} entry: {e}", tree.name()))),
        }
    }
}
