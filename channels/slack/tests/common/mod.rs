//! Shared test harness: a recording InboundSink and helpers to start the real adapter
//! against the fake Slack.

#![allow(dead_code)]

pub mod catch_up;

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use switchboard_channel::{
    Channel, ChannelError, InboundMessage, InboundSender, InboundSink, PublishError, Published,
};
use switchboard_fakes::slack::{APP_TOKEN, BOT_TOKEN, FakeSlack};
use switchboard_slack::{SlackChannel, SlackConfig};
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub const WAIT: Duration = Duration::from_secs(10);

/// Records what the adapter publishes; dedupes by id like the gateway; can fail, hold, or
/// ignore senders not on an allowlist.
pub struct Sink {
    pub published: Mutex<Vec<InboundMessage>>,
    /// Messages turned away by `allow_from`.
    pub ignored: Mutex<Vec<InboundMessage>>,
    /// When set, like the gateway's `allow_from` under the allowlist policy: a sender named
    /// by id or username (with or without `@`) gets in, the others are `Ignored`.
    pub allow_from: Mutex<Option<Vec<String>>>,
    seen: Mutex<HashSet<String>>,
    pub attempts: AtomicUsize,
    /// Fail this many of the next publishes.
    pub fail_next: AtomicUsize,
    /// When set, publish waits for a permit (to observe the adapter mid-publish).
    pub gate: Mutex<Option<Arc<Semaphore>>>,
    pub connected: Mutex<Vec<(bool, String)>>,
    changed: watch::Sender<u64>,
}

impl Sink {
    pub fn new() -> Arc<Self> {
        Arc::new(Self {
            published: Mutex::new(Vec::new()),
            ignored: Mutex::new(Vec::new()),
            allow_from: Mutex::new(None),
            seen: Mutex::new(HashSet::new()),
            attempts: AtomicUsize::new(0),
            fail_next: AtomicUsize::new(0),
            gate: Mutex::new(None),
            connected: Mutex::new(Vec::new()),
            changed: watch::channel(0).0,
        })
    }

    pub fn published(&self) -> Vec<InboundMessage> {
        self.published.lock().unwrap().clone()
    }

    pub fn ignored(&self) -> Vec<InboundMessage> {
        self.ignored.lock().unwrap().clone()
    }

    /// Only let senders named in `allow` in.
    pub fn allow_only(&self, allow: &[&str]) {
        *self.allow_from.lock().unwrap() = Some(allow.iter().map(|a| a.to_string()).collect());
    }

    /// The `connected` flags reported so far, in order.
    pub fn connected_log(&self) -> Vec<bool> {
        self.connected.lock().unwrap().iter().map(|c| c.0).collect()
    }

    fn allowed(&self, msg: &InboundMessage) -> bool {
        let allow = self.allow_from.lock().unwrap();
        let Some(allow) = allow.as_ref() else {
            return true;
        };
        let username = msg.sender.username.as_deref();
        allow.iter().any(|a| {
            a == &msg.sender.id
                || username.is_some_and(|u| u.eq_ignore_ascii_case(a.trim_start_matches('@')))
        })
    }

    /// Wait (bounded) until `cond` holds.
    pub async fn wait(&self, what: &str, cond: impl Fn(&Sink) -> bool) {
        let mut rx = self.changed.subscribe();
        let r = tokio::time::timeout(WAIT, async {
            while !cond(self) {
                if rx.changed().await.is_err() {
                    return;
                }
            }
        })
        .await;
        assert!(r.is_ok(), "sink: timed out waiting for {what}");
    }

    /// Wait until `n` messages were accepted.
    pub async fn wait_for_published(&self, n: usize) -> Vec<InboundMessage> {
        self.wait(&format!("{n} published"), |s| {
            s.published.lock().unwrap().len() >= n
        })
        .await;
        self.published()
    }

    /// Wait until `n` publish attempts were made (accepted or failed).
    pub async fn wait_for_attempts(&self, n: usize) {
        self.wait(&format!("{n} publish attempts"), |s| {
            s.attempts.load(Ordering::SeqCst) >= n
        })
        .await;
    }

    pub async fn wait_for_connected(&self, connected: bool) {
        self.wait("set_connected", |s| {
            s.connected.lock().unwrap().last().map(|c| c.0) == Some(connected)
        })
        .await;
    }
}

#[async_trait]
impl InboundSink for Sink {
    async fn publish(&self, msg: InboundMessage) -> Result<Published, PublishError> {
        self.attempts.fetch_add(1, Ordering::SeqCst);
        self.changed.send_modify(|v| *v += 1);
        let gate = self.gate.lock().unwrap().clone();
        if let Some(g) = gate {
            let _permit = g.acquire().await.expect("gate open");
        }
        let fail = self
            .fail_next
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        let result = if fail {
            Err(PublishError("store unavailable (test)".into()))
        } else if !self.allowed(&msg) {
            self.ignored.lock().unwrap().push(msg);
            Ok(Published::Ignored)
        } else if !self.seen.lock().unwrap().insert(msg.id.clone()) {
            Ok(Published::Duplicate)
        } else {
            self.published.lock().unwrap().push(msg);
            Ok(Published::Accepted)
        };
        self.changed.send_modify(|v| *v += 1);
        result
    }

    fn set_connected(&self, _channel: &str, connected: bool, detail: &str) {
        self.connected
            .lock()
            .unwrap()
            .push((connected, detail.to_string()));
        self.changed.send_modify(|v| *v += 1);
    }
}

/// A config pointed at the fake, Socket Mode with one socket.
pub fn socket_config(fake: &FakeSlack) -> SlackConfig {
    let mut c = SlackConfig::new(BOT_TOKEN)
        .with_app_token(APP_TOKEN)
        .with_api_url(fake.api_url());
    c.socket_connections = 1;
    c.socket_reconnect_delay = Duration::from_secs(1);
    c
}

/// A config pointed at the fake, Events API only.
pub fn events_config(fake: &FakeSlack, secret: &str) -> SlackConfig {
    SlackConfig::new(BOT_TOKEN)
        .with_signing_secret(secret)
        .with_api_url(fake.api_url())
}

/// The adapter running against the fake.
pub struct Running {
    pub channel: SlackChannel,
    pub sink: Arc<Sink>,
    pub shutdown: CancellationToken,
    pub task: JoinHandle<Result<(), ChannelError>>,
}

impl Running {
    pub async fn stop(self) -> Result<(), ChannelError> {
        self.shutdown.cancel();
        tokio::time::timeout(WAIT, self.task)
            .await
            .expect("run returns promptly on shutdown")
            .expect("run task not panicked")
    }
}

/// Start `SlackChannel::run` with a recording sink.
pub fn start(cfg: SlackConfig) -> Running {
    let channel = SlackChannel::new(cfg).expect("channel builds");
    let sink = Sink::new();
    let shutdown = CancellationToken::new();
    let (c, s, t) = (channel.clone(), sink.clone(), shutdown.clone());
    let task = tokio::spawn(async move { c.run(InboundSender::new(s), t).await });
    Running {
        channel,
        sink,
        shutdown,
        task,
    }
}
