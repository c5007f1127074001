//! Replies kept after failed sends are delivered by the sweep while the gateway runs, in
//! their chat's order, without holding up other chats. The timed sweep runs under tokio's
//! paused clock.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use switchboard_channel::{
    Capabilities, Channel, ChannelError, ChatKey, Dialect, InboundSender, OutboundMessage,
    SendError, SendReceipt,
};
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::{ChannelRegistry, MAX_ATTEMPTS, Outbox, SWEEP_EVERY};
use crate::metrics::Metrics;
use crate::store::{Batch, SledStore, Store, Tree};

/// A channel that refuses every send (asking to retry) while it is down.
#[derive(Default)]
struct Flaky {
    down: AtomicBool,
    attempts: AtomicUsize,
    sent: Mutex<Vec<String>>,
    notify: Notify,
}

impl Flaky {
    fn sent(&self) -> Vec<String> {
        self.sent.lock().unwrap().clone()
    }

    async fn wait_for(&self, n: usize) -> Vec<String> {
        let deadline = Instant::now() + SWEEP_EVERY * 10;
        loop {
            let notified = self.notify.notified();
            let sent = self.sent();
            if sent.len() >= n {
                return sent;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                panic!("only {sent:?} of {n} replies sent");
            }
        }
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
        if self.down.load(Ordering::SeqCst) {
            // Retried at once: the retries' waits are not what these tests are about.
            return Err(SendError::RetryAfter(Duration::from_millis(1)));
        }
        self.sent.lock().unwrap().push(msg.text.clone());
        self.notify.notify_waiters();
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
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn Store> = Arc::new(SledStore::open(dir.path()).unwrap());
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
    assert_eq!(rig.flaky.wait_for(3).await, ["b1", "a1", "a2"]);
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
    // While the platform stays down, the sweep tries again (and keeps it).
    while rig.flaky.attempts.load(Ordering::SeqCst) == tries {
        tokio::time::sleep(SWEEP_EVERY / 10).await;
    }
    assert!(failed.elapsed() >= SWEEP_EVERY, "tried again too soon");
    rig.flaky.down.store(false, Ordering::SeqCst);
    assert_eq!(rig.flaky.wait_for(1).await, ["still there?"]);
    rig.stop().await;
    assert_eq!(rig.flaky.sent().len(), 1);
    assert_eq!(rig.kept(), 0);
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
    assert_eq!(rig.flaky.wait_for(1).await, ["hello"]);
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
    let sent = flaky.wait_for(4).await;
    let a: Vec<&String> = sent.iter().filter(|t| t.starts_with('a')).collect();
    assert_eq!(a, ["a1", "a2", "a3"]);
    shutdown.cancel();
    tracker.close();
    tracker.wait().await;
    assert_eq!(flaky.sent().len(), 4);
    assert!(store.scan(Tree::Outbox, &[]).unwrap().is_empty());
}
