//! Test harness: a recording `InboundSink`, and the real adapter started against the fake.

#![allow(dead_code)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use switchboard_channel::{
    Channel, ChannelError, InboundMessage, InboundSender, InboundSink, PublishError, Published,
};
use switchboard_discord::{DiscordChannel, DiscordConfig};
use switchboard_fakes::discord::{FakeDiscord, FakeDiscordOptions};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub const TOKEN: &str = "test-bot-token-0123456789";
pub const WAIT: Duration = Duration::from_secs(10);

/// Records what the adapter published and its connection reports.
pub struct Recorder {
    pub msgs: Mutex<Vec<InboundMessage>>,
    pub connected: Mutex<Vec<(bool, String)>>,
    /// Texts whose next publish attempts fail, with how many failures are left.
    failing: Mutex<Vec<(String, usize)>>,
    changed: watch::Sender<u64>,
}

impl Recorder {
    pub fn new() -> Arc<Self> {
        Arc::new(Self {
            msgs: Mutex::new(Vec::new()),
            connected: Mutex::new(Vec::new()),
            failing: Mutex::new(Vec::new()),
            changed: watch::channel(0).0,
        })
    }

    pub fn msgs(&self) -> Vec<InboundMessage> {
        self.msgs.lock().unwrap().clone()
    }

    /// Refuse the next `times` publishes of the message whose text is `text`.
    pub fn fail_publishes_of(&self, text: &str, times: usize) {
        self.failing.lock().unwrap().push((text.to_string(), times));
    }

    pub fn connected_reports(&self) -> Vec<(bool, String)> {
        self.connected.lock().unwrap().clone()
    }

    /// Wait until the adapter reported itself connected with `detail` ("ready", "resumed").
    pub async fn wait_for_connected(&self, detail: &str) {
        let seen = |r: &Self| {
            r.connected_reports()
                .iter()
                .any(|(up, d)| *up && d == detail)
        };
        self.wait_until(seen).await;
        assert!(
            seen(self),
            "no set_connected(true, {detail:?}): {:?}",
            self.connected_reports()
        );
    }

    /// Wait until `cond` holds, at most [`WAIT`].
    async fn wait_until(&self, cond: impl Fn(&Self) -> bool) {
        let mut rx = self.changed.subscribe();
        let _ = tokio::time::timeout(WAIT, async {
            while !cond(self) {
                if rx.changed().await.is_err() {
                    return;
                }
            }
        })
        .await;
    }

    /// Wait until `n` messages were published.
    pub async fn wait_for_msgs(&self, n: usize) -> Vec<InboundMessage> {
        self.wait_until(|r| r.msgs.lock().unwrap().len() >= n).await;
        let msgs = self.msgs();
        assert!(
            msgs.len() >= n,
            "expected {n} published messages, got {msgs:?}"
        );
        msgs
    }
}

#[async_trait::async_trait]
impl InboundSink for Recorder {
    async fn publish(&self, msg: InboundMessage) -> Result<Published, PublishError> {
        if let Some((_, left)) = self
            .failing
            .lock()
            .unwrap()
            .iter_mut()
            .find(|(text, left)| *text == msg.text && *left > 0)
        {
            *left -= 1;
            return Err(PublishError("refused by the test".into()));
        }
        self.msgs.lock().unwrap().push(msg);
        self.changed.send_modify(|v| *v += 1);
        Ok(Published::Accepted)
    }

    fn set_connected(&self, channel: &str, connected: bool, detail: &str) {
        assert_eq!(channel, "discord");
        self.connected
            .lock()
            .unwrap()
            .push((connected, detail.to_string()));
        self.changed.send_modify(|v| *v += 1);
    }
}

/// The fake, the adapter running against it, and the recorder.
pub struct Harness {
    pub fake: FakeDiscord,
    pub channel: Arc<DiscordChannel>,
    pub rec: Arc<Recorder>,
    pub shutdown: CancellationToken,
    pub run: JoinHandle<Result<(), ChannelError>>,
}

/// Config for the fake: short watchdog so stalls are noticed within a test.
pub fn config(fake: &FakeDiscord, token: &str) -> DiscordConfig {
    let mut cfg = DiscordConfig::new(token, fake.base_url.clone());
    cfg.stall_timeout = Duration::from_secs(3);
    cfg.max_inline_wait = Duration::from_secs(2);
    cfg
}

pub async fn fake() -> FakeDiscord {
    fake_beating(Duration::from_millis(1000)).await
}

/// The fake with `heartbeat_interval` in its HELLO.
pub async fn fake_beating(heartbeat_interval: Duration) -> FakeDiscord {
    FakeDiscord::start_with(FakeDiscordOptions {
        token: TOKEN.into(),
        heartbeat_interval,
    })
    .await
}

/// Start the fake and the adapter; returns once READY was sent.
pub async fn start() -> Harness {
    start_with(|_| {}).await
}

/// [`start`] with a tweak to the adapter's config.
pub async fn start_with(tweak: impl FnOnce(&mut DiscordConfig)) -> Harness {
    start_on(fake().await, tweak).await
}

/// [`start_with`] against a fake started by the caller.
pub async fn start_on(fake: FakeDiscord, tweak: impl FnOnce(&mut DiscordConfig)) -> Harness {
    let mut cfg = config(&fake, TOKEN);
    tweak(&mut cfg);
    let channel = Arc::new(DiscordChannel::new(cfg).expect("channel"));
    let rec = Recorder::new();
    let shutdown = CancellationToken::new();
    let run = {
        let (c, s, r) = (channel.clone(), shutdown.clone(), rec.clone());
        tokio::spawn(async move { c.run(InboundSender::new(r), s).await })
    };
    assert!(
        fake.wait_for_sessions(1, WAIT).await,
        "no READY within {WAIT:?}"
    );
    Harness {
        fake,
        channel,
        rec,
        shutdown,
        run,
    }
}

impl Harness {
    /// Cancel and check that `run` returns promptly with Ok.
    pub async fn stop(self) {
        self.shutdown.cancel();
        let res = tokio::time::timeout(Duration::from_secs(8), self.run).await;
        assert!(
            matches!(res, Ok(Ok(Ok(())))),
            "run did not stop cleanly: {res:?}"
        );
    }
}
