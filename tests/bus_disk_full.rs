//! A turn whose replies the store refuses to record (a full disk): the chat waits and the
//! write is tried again, so the answer is neither dropped nor overtaken by the chat's next
//! message.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

mod common;

use async_trait::async_trait;
use common::message_alone;
use switchboard::bus::{Bus, Interrupted, TurnHandler, TurnInput, TurnOutput};
use switchboard::store::{Applied, Batch, Entries, SledStore, Store, StoreError, Tree};
use switchboard_channel::{ChatKey, OutboundMessage, Published};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

const WAIT: Duration = Duration::from_secs(20);

/// A sled store whose next `commits` fail as a full disk does.
struct FullDisk {
    inner: SledStore,
    failing: AtomicUsize,
}

#[async_trait]
impl Store for FullDisk {
    fn get(&self, tree: Tree, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        self.inner.get(tree, key)
    }
    fn scan(&self, tree: Tree, prefix: &[u8]) -> Result<Entries, StoreError> {
        self.inner.scan(tree, prefix)
    }
    fn for_each(
        &self,
        tree: Tree,
        prefix: &[u8],
        visit: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<(), StoreError> {
        self.inner.for_each(tree, prefix, visit)
    }
    fn apply(&self, batch: Batch) -> Result<Applied, StoreError> {
        self.inner.apply(batch)
    }
    fn next_id(&self) -> Result<u64, StoreError> {
        self.inner.next_id()
    }
    async fn flush(&self) -> Result<(), StoreError> {
        self.inner.flush().await
    }
    async fn commit(&self, batch: Batch) -> Result<Applied, StoreError> {
        let full = self
            .failing
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        if full {
            return Err(StoreError::Backend(
                "journal write failed: No space left on device (os error 28)".into(),
            ));
        }
        self.inner.commit(batch).await
    }
    fn len(&self, tree: Tree) -> usize {
        self.inner.len(tree)
    }
}

/// Answers each message; the disk fills up during the first turn. Records, for each
/// turn, its text and how many replies the outbox held when it began.
struct Answers {
    store: Arc<FullDisk>,
    seen: Mutex<Vec<(String, usize)>>,
    turned: tokio::sync::Notify,
}

#[async_trait]
impl TurnHandler for Answers {
    async fn handle(&self, turn: TurnInput) -> Result<TurnOutput, Interrupted> {
        let text = turn.messages[0].text.clone();
        let recorded = self.store.len(Tree::Outbox);
        if text == "first" {
            // Recording this turn's answer fails twice.
            self.store.failing.store(2, Ordering::SeqCst);
        }
        self.seen.lock().unwrap().push((text.clone(), recorded));
        self.turned.notify_waiters();
        Ok(TurnOutput {
            replies: vec![OutboundMessage::new(
                turn.key.clone(),
                format!("answer to {text}"),
            )],
            writes: Batch::default(),
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_the_disk_refused_is_recorded_once_it_takes_writes_again() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(FullDisk {
        inner: SledStore::open(dir.path()).unwrap(),
        failing: AtomicUsize::new(0),
    });
    let handler = Arc::new(Answers {
        store: store.clone(),
        seen: Mutex::default(),
        turned: tokio::sync::Notify::new(),
    });
    let (shutdown, tracker) = (CancellationToken::new(), TaskTracker::new());
    let dyn_store: Arc<dyn Store> = store.clone();
    let bus = Bus::new(
        dyn_store,
        Default::default(),
        4,
        Default::default(),
        shutdown.clone(),
        tracker.clone(),
    );
    bus.set_handler(handler.clone());
    let key = ChatKey::new("test", "pantry");
    // In one write: the disk fills up only once the first turn runs.
    let published = bus
        .publish_many(vec![
            message_alone("m1", &key, "first"),
            message_alone("m2", &key, "second"),
        ])
        .await
        .unwrap();
    assert_eq!(published, [Published::Accepted, Published::Accepted]);
    let seen = tokio::time::timeout(WAIT, async {
        loop {
            let turned = handler.turned.notified();
            let seen = handler.seen.lock().unwrap().clone();
            if seen.len() >= 2 {
                return seen;
            }
            turned.await;
        }
    })
    .await
    .expect("both turns ran");
    // The second turn began only once the first one's answer was recorded.
    assert_eq!(seen, [("first".to_string(), 0), ("second".to_string(), 1)]);
    // Both answers are kept (no channel runs to take them), in order; the inbox is done.
    let kept: Vec<String> = tokio::time::timeout(WAIT, async {
        loop {
            let outbox = store.scan(Tree::Outbox, &[]).unwrap();
            if outbox.len() == 2 && store.len(Tree::Inbox) == 0 {
                return outbox;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("both answers recorded")
    .into_iter()
    .map(|(_, v)| serde_json::from_slice::<OutboundMessage>(&v).unwrap().text)
    .collect();
    assert_eq!(kept, ["answer to first", "answer to second"]);
    shutdown.cancel();
    tracker.close();
    tracker.wait().await;
}
