//! Test harness: the real adapter against the fake Bot API, with a recording inbound sink.

#![allow(dead_code)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use switchboard_channel::{
    Channel, ChannelError, ChatKey, InboundMessage, InboundSender, InboundSink, PublishError,
    Published,
};
use switchboard_fakes::telegram::FakeTelegram;
use switchboard_telegram::{TelegramChannel, TelegramConfig};
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub const WAIT: Duration = Duration::from_secs(10);

/// Records what the adapter publishes; can be told to fail the next publishes.
#[derive(Default)]
pub struct Recorder {
    published: Mutex<Vec<InboundMessage>>,
    attempts: Mutex<Vec<String>>,
    connected: Mutex<Vec<(bool, String)>>,
    moved: Mutex<Vec<(String, String)>>,
    fail_next: AtomicUsize,
    changed: Notify,
}

#[async_trait]
impl InboundSink for Recorder {
    async fn publish(&self, msg: InboundMessage) -> Result<Published, PublishError> {
        self.attempts.lock().unwrap().push(msg.id.clone());
        let failed = self
            .fail_next
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        let result = if failed {
            Err(PublishError("store unavailable (test)".into()))
        } else {
            self.published.lock().unwrap().push(msg);
            Ok(Published::Accepted)
        };
        self.changed.notify_waiters();
        result
    }

    async fn moved(&self, from: &ChatKey, to: &ChatKey) -> Result<(), PublishError> {
        self.moved
            .lock()
            .unwrap()
            .push((from.to_string(), to.to_string()));
        Ok(())
    }

    fn set_connected(&self, channel: &str, connected: bool, detail: &str) {
        assert_eq!(channel, "telegram");
        self.connected
            .lock()
            .unwrap()
            .push((connected, detail.to_string()));
        self.changed.notify_waiters();
    }
}

impl Recorder {
    pub fn fail_next(&self, n: usize) {
        self.fail_next.store(n, Ordering::SeqCst);
    }

    pub fn published(&self) -> Vec<InboundMessage> {
        self.published.lock().unwrap().clone()
    }

    /// Ids of every publish call, failed ones included.
    pub fn attempts(&self) -> Vec<String> {
        self.attempts.lock().unwrap().clone()
    }

    /// The chat moves reported, as `(from, to)` keys.
    pub fn moves(&self) -> Vec<(String, String)> {
        self.moved.lock().unwrap().clone()
    }

    pub fn connected_events(&self) -> Vec<(bool, String)> {
        self.connected.lock().unwrap().clone()
    }

    /// Wait until `n` messages were published; panics on timeout.
    pub async fn wait_published(&self, n: usize) -> Vec<InboundMessage> {
        self.wait(|r| {
            let p = r.published();
            (p.len() >= n).then_some(p)
        })
        .await
        .unwrap_or_else(|| {
            panic!(
                "expected {n} published messages, got {:?}",
                self.published()
            )
        })
    }

    /// Wait until `check` yields, up to [`WAIT`].
    pub async fn wait<T>(&self, check: impl Fn(&Self) -> Option<T>) -> Option<T> {
        self.wait_up_to(WAIT, check).await
    }

    /// Wait until `check` yields, up to `limit`.
    pub async fn wait_up_to<T>(
        &self,
        limit: Duration,
        check: impl Fn(&Self) -> Option<T>,
    ) -> Option<T> {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if let Some(v) = check(self) {
                return Some(v);
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return check(self);
            }
        }
    }
}

/// Config pointing at the fake, with short timings for tests and pacing off.
pub fn config(fake: &FakeTelegram, inbox: &std::path::Path) -> TelegramConfig {
    let mut cfg = TelegramConfig::new(fake.token(), fake.url(), inbox);
    cfg.pacing = false;
    cfg.poll_timeout = Duration::from_secs(1);
    cfg.watchdog_margin = Duration::from_millis(500);
    cfg.retry_initial = Duration::from_millis(20);
    cfg.retry_max = Duration::from_millis(200);
    cfg
}

/// The adapter running against a fake.
pub struct Harness {
    pub fake: FakeTelegram,
    pub channel: Arc<TelegramChannel>,
    pub sink: Arc<Recorder>,
    pub inbox: tempfile::TempDir,
    pub shutdown: CancellationToken,
    pub task: Option<JoinHandle<Result<(), ChannelError>>>,
}

impl Harness {
    /// Start the fake and the adapter (polling) with the test config.
    pub async fn start() -> Self {
        Self::start_with(|_| {}, |_| {}).await
    }

    /// Start with a tweak to the fake before polling begins and to the config.
    pub async fn start_with(
        before: impl FnOnce(&FakeTelegram),
        tweak: impl FnOnce(&mut TelegramConfig),
    ) -> Self {
        let fake = FakeTelegram::start().await;
        before(&fake);
        let inbox = tempfile::tempdir().expect("tempdir");
        let mut cfg = config(&fake, &inbox.path().join("inbox"));
        tweak(&mut cfg);
        let channel = Arc::new(TelegramChannel::new(cfg).expect("channel"));
        let sink = Arc::new(Recorder::default());
        let shutdown = CancellationToken::new();
        let task = {
            let channel = channel.clone();
            let inbound = InboundSender::new(sink.clone());
            let shutdown = shutdown.clone();
            tokio::spawn(async move { channel.run(inbound, shutdown).await })
        };
        Self {
            fake,
            channel,
            sink,
            inbox,
            shutdown,
            task: Some(task),
        }
    }

    /// Cancel and wait for `run` to return.
    pub async fn stop(&mut self) -> Result<(), ChannelError> {
        self.shutdown.cancel();
        let task = self.task.take().expect("running");
        tokio::time::timeout(WAIT, task)
            .await
            .expect("run returns after shutdown")
            .expect("run did not panic")
    }
}

impl Harness {
    /// `msgs` with their files fetched, as the gateway has them fetched before their turn
    /// (all at once, as for the messages of one turn).
    pub async fn fetched(&self, mut msgs: Vec<InboundMessage>) -> Vec<InboundMessage> {
        let fetching = msgs.iter_mut().map(|m| self.channel.fetch_files(m));
        futures_util::future::join_all(fetching).await;
        msgs
    }

    /// Wait for `run` to return on its own (without cancelling).
    pub async fn stop_result(&mut self) -> Result<(), ChannelError> {
        let task = self.task.take().expect("running");
        tokio::time::timeout(WAIT, task)
            .await
            .expect("run returned")
            .expect("run did not panic")
    }
}
