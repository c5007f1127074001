//! Shared rig for the scheduler tests: the real sled store in a tempdir, a real bus with a
//! recording test channel, a stub turn handler that echoes, and a clock on tokio's time.
#![allow(dead_code)]

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use switchboard::bus::{Bus, ChannelRegistry, Interrupted, TurnHandler, TurnInput, TurnOutput};
use switchboard::config::Config;
use switchboard::metrics::Metrics;
use switchboard::scheduler::{Clock, Scheduler, TokioClock};
use switchboard::store::{Applied, Batch, SledStore, Store, StoreError, Tree};
use switchboard_channel::{Channel, ChatKey, InboundMessage, OutboundMessage};
use tokio::sync::{Notify, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// The real sled store, with a blocking task alive during each `flush`: tokio does not
/// auto-advance its paused clock while a blocking task runs, so virtual time cannot jump
/// ahead while the disk works.
pub struct PausedSafeStore(pub Arc<SledStore>);

#[async_trait]
impl Store for PausedSafeStore {
    fn get(&self, tree: Tree, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        self.0.get(tree, key)
    }
    fn scan(&self, tree: Tree, prefix: &[u8]) -> Result<Vec<(Vec<u8>, Vec<u8>)>, StoreError> {
        self.0.scan(tree, prefix)
    }
    fn for_each(
        &self,
        tree: Tree,
        prefix: &[u8],
        visit: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<(), StoreError> {
        self.0.for_each(tree, prefix, visit)
    }
    fn apply(&self, batch: Batch) -> Result<Applied, StoreError> {
        self.0.apply(batch)
    }
    fn next_id(&self) -> Result<u64, StoreError> {
        self.0.next_id()
    }
    async fn flush(&self) -> Result<(), StoreError> {
        // A blocking task that lives until the flush ends (or is abandoned: `tx` dropped).
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let inhibit = tokio::task::spawn_blocking(move || {
            let _ = rx.recv();
        });
        let result = self.0.flush().await;
        drop(tx);
        let _ = inhibit.await;
        result
    }
    fn len(&self, tree: Tree) -> usize {
        self.0.len(tree)
    }
}

#[path = "../common/channel.rs"]
mod channel;
pub use channel::TestChannel;

/// A monotonically growing count one can wait on.
pub struct Counter(watch::Sender<usize>);

impl Default for Counter {
    fn default() -> Self {
        Self(watch::channel(0).0)
    }
}

impl Counter {
    pub fn bump(&self) {
        self.0.send_modify(|c| *c += 1);
    }
    pub async fn wait_for(&self, n: usize, within: Duration) -> bool {
        let mut rx = self.0.subscribe();
        tokio::time::timeout(within, rx.wait_for(|c| *c >= n))
            .await
            .is_ok()
    }
}

/// A turn handler standing in for the agent: records each inbound message (with the clock
/// reading when it arrived) and answers `echo: <text>`. With a gate it waits until opened.
pub struct EchoHandler {
    pub received: Mutex<Vec<(InboundMessage, DateTime<Utc>)>>,
    count: Counter,
    clock: Arc<dyn Clock>,
    pub gate: Option<Arc<Notify>>,
}

impl EchoHandler {
    pub fn new(clock: Arc<dyn Clock>) -> Self {
        Self {
            received: Mutex::new(Vec::new()),
            count: Counter::default(),
            clock,
            gate: None,
        }
    }
    pub fn received(&self) -> Vec<(InboundMessage, DateTime<Utc>)> {
        self.received.lock().unwrap().clone()
    }
    pub fn count(&self) -> usize {
        self.received.lock().unwrap().len()
    }
    pub async fn wait_for(&self, n: usize, within: Duration) -> bool {
        self.count.wait_for(n, within).await
    }
}

#[async_trait]
impl TurnHandler for EchoHandler {
    async fn handle(&self, turn: TurnInput) -> Result<TurnOutput, Interrupted> {
        let now = self.clock.now();
        for m in &turn.messages {
            self.received.lock().unwrap().push((m.clone(), now));
            self.count.bump();
        }
        if let Some(gate) = &self.gate {
            gate.notified().await;
        }
        let replies = turn
            .messages
            .iter()
            .map(|m| OutboundMessage::new(turn.key.clone(), format!("echo: {}", m.text)))
            .collect();
        Ok(TurnOutput {
            replies,
            writes: Batch::default(),
        })
    }
}

/// A running gateway slice: store, bus, channel, handler, scheduler.
pub struct Rig {
    pub store: Arc<dyn Store>,
    pub bus: Arc<Bus>,
    pub channel: Arc<TestChannel>,
    pub handler: Arc<EchoHandler>,
    pub scheduler: Arc<Scheduler>,
    pub metrics: Arc<Metrics>,
    pub config: Arc<Config>,
    pub clock: Arc<dyn Clock>,
    /// The bus's channels by name (`test` at start): a test may register more.
    pub registry: ChannelRegistry,
    pub shutdown: CancellationToken,
    pub tracker: TaskTracker,
}

pub fn key() -> ChatKey {
    "test:chat1".parse().unwrap()
}

pub fn at(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
}

impl Rig {
    /// Open the store in `dir` and start everything with the wall clock reading `now`.
    pub async fn start(dir: &Path, now: DateTime<Utc>, config: Config) -> Rig {
        Self::start_with(dir, Arc::new(TokioClock::starting_at(now)), config, None).await
    }

    pub async fn start_with(
        dir: &Path,
        clock: Arc<dyn Clock>,
        config: Config,
        gate: Option<Arc<Notify>>,
    ) -> Rig {
        // A restarted rig may find the previous one's last tasks still letting go of the
        // store for a moment: wait for the lock (bounded) rather than fail.
        let mut attempts = 0;
        let sled = loop {
            match SledStore::open(dir) {
                Ok(s) => break s,
                Err(switchboard::store::StoreError::Locked(_)) if attempts < 200 => {
                    attempts += 1;
                    std::thread::sleep(Duration::from_millis(10));
                }
                Err(e) => panic!("cannot open the store: {e}"),
            }
        };
        let store: Arc<dyn Store> = Arc::new(PausedSafeStore(Arc::new(sled)));
        let channel = Arc::new(TestChannel::default());
        let registry: ChannelRegistry = Arc::new(RwLock::new(HashMap::from([(
            "test".to_string(),
            channel.clone() as Arc<dyn Channel>,
        )])));
        let metrics = Arc::new(Metrics::default());
        let shutdown = CancellationToken::new();
        let tracker = TaskTracker::new();
        let bus = Bus::new(
            store.clone(),
            registry.clone(),
            64,
            metrics.clone(),
            shutdown.clone(),
            tracker.clone(),
        );
        let mut handler = EchoHandler::new(clock.clone());
        handler.gate = gate;
        let handler = Arc::new(handler);
        bus.set_handler(handler.clone());
        bus.replay().await.unwrap();
        let config = Arc::new(config);
        let scheduler = Scheduler::new(
            store.clone(),
            Some(bus.clone()),
            config.clone(),
            metrics.clone(),
            clock.clone(),
        );
        scheduler.start(shutdown.clone(), &tracker);
        Rig {
            store,
            bus,
            channel,
            handler,
            scheduler,
            metrics,
            config,
            clock,
            registry,
            shutdown,
            tracker,
        }
    }

    /// Add `new` through the scheduler; it must be accepted.
    pub async fn add(&self, new: switchboard::scheduler::NewJob) -> switchboard::scheduler::Job {
        self.scheduler.add(new).await.expect("the job is accepted")
    }

    /// Shut down and release the store (so it can be reopened: a restart).
    pub async fn stop(self) {
        self.shutdown.cancel();
        self.tracker.close();
        tokio::time::timeout(Duration::from_secs(30), self.tracker.wait())
            .await
            .expect("tasks stop");
    }
}

/// A tool call's context in chat `key`, from its owner or not.
pub fn ctx(key: ChatKey, owner: bool) -> switchboard::agent::tool::ToolContext {
    switchboard::agent::tool::ToolContext {
        sender_is_owner: owner,
        ..switchboard::agent::tool::ToolContext::new(key, ".")
    }
}

/// A chat other than [`key`].
pub fn other() -> ChatKey {
    "test:other".parse().unwrap()
}

/// A scheduler at noon on 2026-03-01 (UTC, default config) and its `cron` tool.
pub async fn tool_rig(dir: &std::path::Path) -> (Rig, switchboard::scheduler::CronTool) {
    let rig = Rig::start(dir, at("2026-03-01T12:00:00Z"), Config::default()).await;
    let tool = switchboard::scheduler::CronTool::new(rig.scheduler.clone());
    (rig, tool)
}
