//! Replies kept after failed sends are delivered by the sweep while the gateway runs, in
//! their chat's order, without holding up other chats. The timed sweep runs under tokio's
//! paused clock.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use switchboard_channel::{
    Capabilities, Channel, ChannelError, ChatKey, Dialect, InboundSender, OutboundMessage,
    SendError, SendReceipt,
};
use tokio::sync::{Notify, Semaphore};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::{ChannelRegistry, MAX_ATTEMPTS, Outbox, SWEEP_EVERY};
use crate::metrics::Metrics;
use crate::store::{Batch, SledStore, Store, Tree};

/// Bounded waits on the real clock.
const WAIT: Duration = Duration::from_secs(20);
/// Bounded waits on the paused clock: past a few timed sweeps.
const PAUSED_WAIT: Duration = Duration::from_secs(4 * 30);

/// A channel that refuses sends (asking to retry) while it is down, or while their text is
/// down; a text with a gate waits at it until the gate opens.
#[derive(Default)]
struct Flaky {
    down: AtomicBool,
    attempts: AtomicUsize,
    sent: Mutex<Vec<String>>,
    down_texts: Mutex<HashSet<String>>,
    gates: Mutex<HashMap<String, Arc<Semaphore>>>,
    tries: Mutex<HashMap<String, usize>>,
    /// The outbox's number on each attempt, by text.
    numbers: Mutex<HashMap<String, HashSet<Option<u64>>>>,
    /// Notified at every attempt and every send.
    changed: Notify,
}

impl Flaky {
    fn sent(&self) -> Vec<String> {
        self.sent.lock().unwrap().clone()
    }

    fn tries(&self, text: &str) -> usize {
        self.tries.lock().unwrap().get(text).copied().unwrap_or(0)
    }

    fn set_down(&self, text: &str, down: bool) {
        let mut texts = self.down_texts.lock().unwrap();
        if down {
            texts.insert(text.into());
        } else {
            texts.remove(text);
        }
    }

    fn close_gate(&self, text: &str) {
        self.gates
            .lock()
            .unwrap()
            .insert(text.into(), Arc::new(Semaphore::new(0)));
    }

    fn open_gate(&self, text: &str) {
        if let Some(gate) = self.gates.lock().unwrap().remove(text) {
            gate.close();
        }
    }

    /// Wait until `done` holds, at most `timeout`.
    async fn wait_until(&self, what: &str, timeout: Duration, done: impl Fn(&Self) -> bool) {
        let deadline = Instant::now() + timeout;
        loop {
            let changed = self.changed.notified();
            if done(self) {
                return;
            }
            if tokio::time::timeout_at(deadline, changed).await.is_err() {
                panic!("timed out waiting for {what}; sent: {:?}", self.sent());
            }
        }
    }

    async fn wait_for(&self, n: usize, timeout: Duration) -> Vec<String> {
        self.wait_until(&format!("{n} replies sent"), timeout, |f| {
            f.sent().len() >= n
        })
        .await;
        self.sent()
    }
}

#[async_trait]
impl Channel for Flaky {
    fn name(&self) -> &str {
        "test"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            edits: false,
            typing: false,
            threads: false,
            max_message_len: 4096,
            dialect: Dialect::Markdown,
        }
    }

    async fn run(&self, _: InboundSender, shutdown: CancellationToken) -> Result<(), ChannelError> {
        shutdown.cancelled().await;
        Ok(())
    }

    async fn send(&self, msg: &OutboundMessage) -> Result<SendReceipt, SendError> {
        self.attempts.fetch_add(1, Ordering::SeqCst);
        *self
            .tries
            .lock()
            .unwrap()
            .entry(msg.text.clone())
            .or_default() += 1;
        self.numbers
            .lock()
            .unwrap()
            .entry(msg.text.clone())
            .or_default()
            .insert(msg.delivery);
        self.changed.notify_waiters();
        let gate = self.gates.lock().unwrap().get(&msg.text).cloned();
        if let Some(gate) = gate {
            // Closed when the gate opens.
            let _ = gate.acquire().await;
        }
        if self.down.load(Ordering::SeqCst) || self.down_texts.lock().unwrap().contains(&msg.text) {
            // Retried at once: the retries' waits are not what these tests are about.
            return Err(SendError::RetryAfter(Duration::from_millis(1)));
        }
        self.sent.lock().unwrap().push(msg.text.clone());
        self.changed.notify_waiters();
        Ok(SendReceipt::default())
    }

    async fn typing(&self, _: &ChatKey) -> Result<(), SendError> {
        Ok(())
    }
}

struct Rig {
    _dir: tempfile::TempDir,
    metrics: Arc<Metrics>,
    store: Arc<dyn Store>,
    channels: ChannelRegistry,
    outbox: Outbox,
    flaky: Arc<Flaky>,
    shutdown: CancellationToken,
    tracker: TaskTracker,
}

impl Rig {
    /// An outbox whose `test` channel is `flaky` (registered when `registered`), its
    /// sweeper started, sweeping every `period`.
    fn start(registered: bool, period: Duration) -> Self {
        Self::start_on(registered, period, |store| store)
    }

    /// [`Rig::start`] on the store `wrap` makes of a new one.
    fn start_on(
        registered: bool,
        period: Duration,
        wrap: impl FnOnce(Arc<dyn Store>) -> Arc<dyn Store>,
    ) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let store = wrap(Arc::new(SledStore::open(dir.path()).unwrap()));
        let channels = ChannelRegistry::default();
        let flaky = Arc::new(Flaky::default());
        if registered {
            channels
                .write()
                .unwrap()
                .insert("test".into(), flaky.clone());
        }
        let shutdown = CancellationToken::new();
        let tracker = TaskTracker::new();
        let metrics = Arc::new(Metrics::default());
        let mut outbox = Outbox::new(
            store.clone(),
            channels.clone(),
            metrics.clone(),
            shutdown.clone(),
        );
        outbox.sweep_every = period;
        outbox.start_sweeper(&tracker);
        Self {
            _dir: dir,
            metrics,
            store,
            channels,
            outbox,
            flaky,
            shutdown,
            tracker,
        }
    }

    async fn send(&self, key: &ChatKey, text: &str) {
        let reply = OutboundMessage::new(key.clone(), text);
        self.outbox
            .record_and_deliver(vec![reply], Batch::default())
            .await
            .unwrap();
    }

    /// Whether a sweep serves `key`'s kept replies now.
    fn sweeping(&self, key: &ChatKey) -> bool {
        self.outbox
            .pending()
            .stalled
            .get(key)
            .is_some_and(|s| s.sweeping)
    }

    fn stalled(&self) -> u64 {
        self.metrics.stalled_chats.load(Ordering::SeqCst)
    }

    fn kept(&self) -> usize {
        self.store.scan(Tree::Outbox, &[]).unwrap().len()
    }

    async fn stop(&self) {
        self.shutdown.cancel();
        self.tracker.close();
        self.tracker.wait().await;
    }
}

// On the real clock: the paused one would bring the timed sweep forward whenever the test
// waits for the disk.
#[tokio::test]
async fn a_stalled_chats_replies_go_out_in_order_once_the_platform_is_back() {
    // No timed sweep in this test: what goes out, goes out because a reply joined.
    let rig = Rig::start(true, Duration::from_secs(24 * 3600));
    let (a, b) = (ChatKey::new("test", "a"), ChatKey::new("test", "b"));
    rig.flaky.down.store(true, Ordering::SeqCst);
    rig.send(&a, "a1").await;
    assert_eq!(
        rig.flaky.attempts.load(Ordering::SeqCst),
        MAX_ATTEMPTS as usize
    );
    assert_eq!(rig.kept(), 1, "kept after its retries");
    assert_eq!(rig.stalled(), 1);

    rig.flaky.down.store(false, Ordering::SeqCst);
    // Another chat is not held up by the stalled one.
    rig.send(&b, "b1").await;
    assert_eq!(rig.flaky.sent(), ["b1"]);
    // The stalled chat's next reply goes out behind the kept one, at once, without a restart.
    rig.send(&a, "a2").await;
    assert_eq!(rig.flaky.wait_for(3, WAIT).await, ["b1", "a1", "a2"]);
    rig.stop().await;
    assert_eq!(rig.flaky.sent().len(), 3, "each sent once");
    assert_eq!(rig.kept(), 0);
    assert_eq!(rig.stalled(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_kept_reply_is_tried_again_by_the_timed_sweep() {
    let rig = Rig::start(true, SWEEP_EVERY);
    let a = ChatKey::new("test", "a");
    rig.flaky.down.store(true, Ordering::SeqCst);
    rig.send(&a, "still there?").await;
    let failed = Instant::now();
    let tries = rig.flaky.attempts.load(Ordering::SeqCst);
    // While the platform stays down, the sweep tries again, and keeps it again.
    rig.flaky
        .wait_until("the timed sweep's first attempt", PAUSED_WAIT, |f| {
            f.attempts.load(Ordering::SeqCst) == tries + 1
        })
        .await;
    let round = Instant::now();
    assert!(round - failed >= SWEEP_EVERY, "tried again too soon");
    rig.flaky
        .wait_until("the timed sweep's attempts", PAUSED_WAIT, |f| {
            f.attempts.load(Ordering::SeqCst) == 2 * tries
        })
        .await;
    for _ in 0..1_000 {
        if !rig.sweeping(&a) {
            break;
        }
        tokio::task::yield_now().await;
    }
    assert!(!rig.sweeping(&a), "the sweep did not end");
    assert_eq!(rig.stalled(), 1);
    assert_eq!(rig.kept(), 1);
    rig.flaky.down.store(false, Ordering::SeqCst);
    assert_eq!(rig.flaky.wait_for(1, PAUSED_WAIT).await, ["still there?"]);
    assert!(round.elapsed() >= SWEEP_EVERY, "tried again too soon");
    rig.stop().await;
    assert_eq!(rig.flaky.sent().len(), 1);
    assert_eq!(rig.kept(), 0);
    // Every attempt, the sweep's (read back from the store) too, carried one number.
    let numbers = rig.flaky.numbers.lock().unwrap()["still there?"].clone();
    assert_eq!(numbers.len(), 1, "{numbers:?}");
    assert!(numbers.iter().all(Option::is_some), "{numbers:?}");
}

#[tokio::test(start_paused = true)]
async fn a_reply_for_a_channel_that_starts_later_is_delivered_when_it_runs() {
    let rig = Rig::start(false, SWEEP_EVERY);
    let a = ChatKey::new("test", "a");
    rig.send(&a, "hello").await;
    assert_eq!(rig.kept(), 1);
    assert_eq!(rig.flaky.attempts.load(Ordering::SeqCst), 0);
    rig.channels
        .write()
        .unwrap()
        .insert("test".into(), rig.flaky.clone());
    assert_eq!(rig.flaky.wait_for(1, PAUSED_WAIT).await, ["hello"]);
    rig.stop().await;
    assert_eq!(rig.kept(), 0);
}

#[tokio::test(start_paused = true)]
async fn replies_recorded_before_the_start_are_delivered_per_chat_in_order() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = SledStore::open(dir.path()).unwrap();
        let replies = ["a1", "b1", "a2", "a3"]
            .map(|t| OutboundMessage::new(ChatKey::new("test", &t[..1]), t));
        super::record(&store, replies.to_vec(), Batch::default())
            .await
            .unwrap();
        store.checkpoint().await.unwrap();
    }
    let store: Arc<dyn Store> = Arc::new(SledStore::open(dir.path()).unwrap());
    let channels = ChannelRegistry::default();
    let flaky = Arc::new(Flaky::default());
    channels
        .write()
        .unwrap()
        .insert("test".into(), flaky.clone());
    let (shutdown, tracker) = (CancellationToken::new(), TaskTracker::new());
    let outbox = Outbox::new(
        store.clone(),
        channels,
        Arc::new(Metrics::default()),
        shutdown.clone(),
    );
    assert_eq!(outbox.start_sweeper(&tracker), 4);
    let sent = flaky.wait_for(4, PAUSED_WAIT).await;
    let a: Vec<&String> = sent.iter().filter(|t| t.starts_with('a')).collect();
    assert_eq!(a, ["a1", "a2", "a3"]);
    shutdown.cancel();
    tracker.close();
    tracker.wait().await;
    assert_eq!(flaky.sent().len(), 4);
    assert!(store.scan(Tree::Outbox, &[]).unwrap().is_empty());
}

// On the real clock, two threads: the sweep and the other sender really run side by side.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_another_task_fails_on_while_its_chat_is_swept_is_not_left_behind() {
    let rig = Arc::new(Rig::start(true, Duration::from_secs(24 * 3600)));
    let a = ChatKey::new("test", "a");
    // A first sender is still trying "x1" (at the gate, then refused) ...
    rig.flaky.close_gate("x1");
    rig.flaky.set_down("x1", true);
    let first = {
        let (rig, a) = (rig.clone(), a.clone());
        tokio::spawn(async move { rig.send(&a, "x1").await })
    };
    rig.flaky
        .wait_until("x1 at the gate", WAIT, |f| f.tries("x1") == 1)
        .await;
    // ... when a second one fails on "z" and stalls the chat ...
    rig.flaky.down.store(true, Ordering::SeqCst);
    rig.send(&a, "z").await;
    rig.flaky.down.store(false, Ordering::SeqCst);
    // ... and "w" joins it, so a sweep takes "z" and "w" ("x1" is not its to take).
    rig.flaky.close_gate("z");
    rig.send(&a, "w").await;
    rig.flaky
        .wait_until("the sweep's z at the gate", WAIT, |f| {
            f.tries("z") == MAX_ATTEMPTS as usize + 1
        })
        .await;
    assert!(rig.sweeping(&a));
    // "x1" fails for good while the sweep runs; then the sweep delivers its two.
    rig.flaky.open_gate("x1");
    first.await.unwrap();
    rig.flaky.set_down("x1", false);
    rig.flaky.open_gate("z");
    // The sweep looks again when it ends: "x1" goes out, once.
    assert_eq!(rig.flaky.wait_for(3, WAIT).await, ["z", "w", "x1"]);
    rig.stop().await;
    assert_eq!(rig.flaky.sent().len(), 3);
    assert_eq!(rig.kept(), 0);
    assert_eq!(rig.stalled(), 0);
}

/// A store that runs a hook once, right after a read of the outbox (between a sweep's read
/// and its bookkeeping).
struct AfterScan {
    inner: Arc<dyn Store>,
    hook: Mutex<Option<Box<dyn FnOnce() + Send>>>,
}

#[async_trait]
impl Store for AfterScan {
    fn get(&self, tree: Tree, key: &[u8]) -> Result<Option<Vec<u8>>, crate::store::StoreError> {
        self.inner.get(tree, key)
    }
    fn scan(
        &self,
        tree: Tree,
        prefix: &[u8],
    ) -> Result<crate::store::Entries, crate::store::StoreError> {
        let entries = self.inner.scan(tree, prefix);
        if tree == Tree::Outbox {
            let hook = self.hook.lock().unwrap().take();
            if let Some(hook) = hook {
                hook();
            }
        }
        entries
    }
    fn for_each(
        &self,
        tree: Tree,
        prefix: &[u8],
        visit: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<(), crate::store::StoreError> {
        self.inner.for_each(tree, prefix, visit)
    }
    fn apply(&self, batch: Batch) -> Result<crate::store::Applied, crate::store::StoreError> {
        self.inner.apply(batch)
    }
    fn next_id(&self) -> Result<u64, crate::store::StoreError> {
        self.inner.next_id()
    }
    async fn flush(&self) -> Result<(), crate::store::StoreError> {
        self.inner.flush().await
    }
    fn len(&self, tree: Tree) -> usize {
        self.inner.len(tree)
    }
}

// On the real clock, sweeping every 100 ms.
#[tokio::test]
async fn a_reply_joining_while_a_sweep_reads_the_outbox_is_not_left_behind() {
    let store: Arc<Mutex<Option<Arc<AfterScan>>>> = Arc::default();
    let rig = Rig::start_on(true, Duration::from_millis(100), |inner| {
        let s = Arc::new(AfterScan {
            inner,
            hook: Mutex::new(None),
        });
        *store.lock().unwrap() = Some(s.clone());
        s
    });
    let store = store.lock().unwrap().clone().unwrap();
    let a = ChatKey::new("test", "a");
    rig.flaky.down.store(true, Ordering::SeqCst);
    rig.send(&a, "z").await;
    rig.flaky.down.store(false, Ordering::SeqCst);
    // The next sweep reads only "z"; "w" joins the stalled chat right after that read.
    let (outbox, inner, key) = (rig.outbox.clone(), store.inner.clone(), a.clone());
    *store.hook.lock().unwrap() = Some(Box::new(move || {
        let mut writes = Batch::default();
        let w = super::stage(
            &*inner,
            vec![OutboundMessage::new(key.clone(), "w")],
            &mut writes,
        )
        .unwrap();
        inner.apply(writes).unwrap();
        outbox.release(w[0].0, key, super::More::Yes);
    }));
    assert_eq!(rig.flaky.wait_for(2, WAIT).await, ["z", "w"]);
    rig.stop().await;
    assert_eq!(rig.kept(), 0);
    assert_eq!(rig.stalled(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_reply_carries_a_secret_of_the_gateways() {
    switchboard_channel::redact::register("outbox-secret-0123456789");
    let rig = Rig::start(true, SWEEP_EVERY);
    let a = ChatKey::new("test", "a");
    rig.send(&a, "your token is outbox-secret-0123456789, keep it")
        .await;
    assert_eq!(
        rig.flaky.wait_for(1, WAIT).await,
        ["your token is [redacted], keep it"]
    );
    rig.stop().await;
}
