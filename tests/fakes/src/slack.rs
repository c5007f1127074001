//! A fake Slack for tests and the benchmark: Web API, Socket Mode websocket, Events API client.
//!
//! [`FakeSlack`] serves the Web API under `/api/<method>` (JSON, form or query parameters;
//! `Authorization: Bearer` checked — the bot token for Web API methods, the app token for
//! `apps.connections.open`), the Socket Mode websocket at `/socket`, and shared files at
//! `/files/<path>` (`url_private`, bot token required). It records every
//! call, every posted/updated message, every reaction and every Socket Mode ack, injects
//! faults (429 with `Retry-After`, API errors, HTTP statuses, delays) per method, and offers
//! bounded waits. It keeps a message history (`conversations.history` /
//! `conversations.replies`, see `history`): the bot's posts, the messages pushed over a
//! socket, and those added without delivery ([`FakeSlack::add_unseen`]: sent while the
//! gateway was away). Sockets can be refused ([`FakeSlack::refuse_sockets`]) or dropped.
//! [`events`] builds event payloads and signs Events API requests.

pub mod events;
mod files;
mod history;
mod socket;
mod web;

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use axum::Router;
use axum::routing::{any, get};
use serde_json::{Map, Value, json};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

pub use events::{APP_ID, TEAM_ID, event_callback, event_callback_body, sign, signed_headers};
pub use files::FileGet;

/// Bot token the fake accepts for Web API methods.
pub const BOT_TOKEN: &str = "xoxb-fake-bot-token";
/// App-level token the fake accepts for `apps.connections.open`.
pub const APP_TOKEN: &str = "xapp-fake-app-token";
/// The bot's user id (`auth.test` `user_id`).
pub const BOT_USER_ID: &str = "UBOT";
/// The bot's bot id (`auth.test` `bot_id`).
pub const BOT_ID: &str = "BBOT";

/// How long the `wait_for_*` helpers wait before panicking.
pub const WAIT: Duration = Duration::from_secs(10);

/// One `chat.postMessage` as it crossed the wire.
#[derive(Debug, Clone, PartialEq)]
pub struct Post {
    pub channel: String,
    pub text: String,
    pub thread_ts: Option<String>,
    /// `mrkdwn` as sent (`None` when the client left it out).
    pub mrkdwn: Option<bool>,
    /// The ts the fake assigned.
    pub ts: String,
}

/// One `chat.update`.
#[derive(Debug, Clone, PartialEq)]
pub struct Update {
    pub channel: String,
    pub ts: String,
    pub text: String,
}

/// One `reactions.add`.
#[derive(Debug, Clone, PartialEq)]
pub struct Reaction {
    pub channel: String,
    pub timestamp: String,
    pub name: String,
}

/// A Web API call: method and its parameters (JSON, form and query merged).
#[derive(Debug, Clone)]
pub struct Call {
    pub method: String,
    pub params: Map<String, Value>,
}

/// A fault to inject on the next call(s) of a method.
#[derive(Debug, Clone)]
pub enum Fault {
    /// HTTP 429 with `Retry-After: secs` and `{"ok":false,"error":"ratelimited"}`.
    RateLimited { retry_after_secs: u64 },
    /// HTTP 200 with `{"ok":false,"error":<code>}`.
    Error(String),
    /// A bare HTTP status with a JSON error body.
    Status(u16),
    /// Answer normally (to fail a later call: `inject(m, Pass)` then `inject(m, Error(..))`).
    Pass,
    /// Answer normally, after this long (a slow Slack).
    Delay(Duration),
}

/// What [`FakeSlack::push_event`] sent.
#[derive(Debug, Clone)]
pub struct Pushed {
    pub envelope_id: String,
    pub event_id: String,
}

#[derive(Default)]
struct Inner {
    calls: Vec<Call>,
    posts: Vec<Post>,
    updates: Vec<Update>,
    reactions: Vec<Reaction>,
    acks: Vec<String>,
    faults: HashMap<String, VecDeque<Fault>>,
    users: HashMap<String, String>,
    files: HashMap<String, files::HostedFile>,
    /// Messages other than the bot's posts: `(channel, ts)` → message as the history
    /// lists it.
    history: HashMap<(String, String), Value>,
    file_gets: Vec<FileGet>,
    sockets: Vec<socket::SocketHandle>,
    connections: usize,
    /// New sockets are refused (HTTP 503 on the upgrade), like a network that is down.
    refuse_sockets: bool,
    refused_sockets: usize,
    /// Envelopes sent and not yet acknowledged, for [`FakeSlack::redeliver_unacked`].
    unacked: Vec<(String, Value)>,
    next: u64,
}

struct Shared {
    inner: Mutex<Inner>,
    changed: watch::Sender<u64>,
    addr: SocketAddr,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn bump(&self) {
        self.changed.send_modify(|v| *v += 1);
    }

    fn next_id(&self) -> u64 {
        let mut g = self.lock();
        g.next += 1;
        g.next
    }
}

/// The fake Slack server. Dropping it stops the server.
pub struct FakeSlack {
    shared: Arc<Shared>,
    stop: CancellationToken,
}

impl Drop for FakeSlack {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

impl FakeSlack {
    /// Bind 127.0.0.1:0 and serve.
    pub async fn start() -> FakeSlack {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind 127.0.0.1:0");
        let addr = listener.local_addr().expect("local addr");
        let (changed, _) = watch::channel(0);
        let shared = Arc::new(Shared {
            inner: Mutex::new(Inner::default()),
            changed,
            addr,
        });
        let app = Router::new()
            .route("/api/{method}", any(web::api))
            .route("/socket", get(socket::upgrade))
            .route("/files/{*path}", get(files::get))
            .route("/signin", get(files::signin))
            .with_state(shared.clone());
        let stop = CancellationToken::new();
        let s = stop.clone();
        tokio::spawn(async move {
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(async move { s.cancelled().await })
                .await;
        });
        FakeSlack { shared, stop }
    }

    /// `http://127.0.0.1:PORT/api`, the value for the adapter's `api_url`.
    pub fn api_url(&self) -> String {
        format!("http://{}/api", self.shared.addr)
    }

    /// The address the fake listens on.
    pub fn addr(&self) -> SocketAddr {
        self.shared.addr
    }

    /// Make `users.info` know a user.
    pub fn add_user(&self, id: &str, name: &str) {
        self.shared.lock().users.insert(id.into(), name.into());
    }

    /// Make the history know a message posted earlier (before a restart, say): by `user`,
    /// or by the bot with its `bot_id` when `user` is [`BOT_USER_ID`].
    pub fn add_message(&self, channel: &str, ts: &str, user: &str, text: &str) {
        let mut m = json!({"type": "message", "user": user, "text": text, "ts": ts});
        if user == BOT_USER_ID {
            m["bot_id"] = json!(BOT_ID);
        }
        let key = (channel.to_string(), ts.to_string());
        self.shared.lock().history.insert(key, m);
    }

    /// [`Self::add_message`] as a reply in the thread of `root`.
    pub fn add_reply(&self, channel: &str, root: &str, ts: &str, user: &str, text: &str) {
        self.add_message(channel, ts, user, text);
        let key = (channel.to_string(), ts.to_string());
        if let Some(m) = self.shared.lock().history.get_mut(&key) {
            m["thread_ts"] = json!(root);
        }
    }

    /// A message posted while the gateway was away: `event` (from [`events`]) is kept in the
    /// history, and never delivered over a socket.
    pub fn add_unseen(&self, event: Value) {
        let (channel, ts, m) = history::stored(&event).expect("a message event");
        self.shared.lock().history.insert((channel, ts), m);
        self.shared.bump();
    }

    /// Serve `body` at `/files/<path>` to the bot token; returns its `url_private`.
    pub fn add_file(&self, path: &str, mime: &str, body: &[u8]) -> String {
        self.host_file(path, mime, body, |_| {})
    }

    /// [`Self::add_file`] served to anyone (a pre-signed URL on another host).
    pub fn add_public_file(&self, path: &str, mime: &str, body: &[u8]) -> String {
        self.host_file(path, mime, body, |f| f.public = true)
    }

    /// [`Self::add_file`] that answers after `delay`.
    pub fn add_slow_file(&self, path: &str, mime: &str, body: &[u8], delay: Duration) -> String {
        self.host_file(path, mime, body, |f| f.delay = Some(delay))
    }

    /// `/files/<path>` answers the bot token with `302 Location: <to>`; returns its URL.
    pub fn add_file_redirect(&self, path: &str, to: &str) -> String {
        self.host_file(path, "", b"", |f| f.redirect_to = Some(to.to_string()))
    }

    fn host_file(
        &self,
        path: &str,
        mime: &str,
        body: &[u8],
        tweak: impl FnOnce(&mut files::HostedFile),
    ) -> String {
        let mut f = files::HostedFile {
            body: body.to_vec(),
            mime: mime.to_string(),
            ..Default::default()
        };
        tweak(&mut f);
        self.shared.lock().files.insert(path.to_string(), f);
        format!("http://{}/files/{path}", self.shared.addr)
    }

    /// Every GET of a hosted file so far.
    pub fn file_gets(&self) -> Vec<FileGet> {
        self.shared.lock().file_gets.clone()
    }

    /// Inject `fault` on the next call of `method` (queued: call again for more).
    pub fn inject(&self, method: &str, fault: Fault) {
        let mut g = self.shared.lock();
        g.faults.entry(method.into()).or_default().push_back(fault);
    }

    /// Answer the next `times` calls of `method` with 429 and `Retry-After`.
    pub fn rate_limit(&self, method: &str, times: usize, retry_after_secs: u64) {
        for _ in 0..times {
            self.inject(method, Fault::RateLimited { retry_after_secs });
        }
    }

    /// Every Web API call so far.
    pub fn calls(&self) -> Vec<Call> {
        self.shared.lock().calls.clone()
    }

    /// The parameters of every call of `method` so far, in order.
    pub fn calls_of(&self, method: &str) -> Vec<Map<String, Value>> {
        self.shared
            .lock()
            .calls
            .iter()
            .filter(|c| c.method == method)
            .map(|c| c.params.clone())
            .collect()
    }

    /// Wait until `method` was called at least `n` times; returns its calls' parameters.
    pub async fn wait_for_calls(&self, method: &str, n: usize) -> Vec<Map<String, Value>> {
        let what = format!("{n} {method} calls");
        self.wait(WAIT, &what, |f| f.call_count(method) >= n).await;
        self.calls_of(method)
    }

    /// How many times `method` was called.
    pub fn call_count(&self, method: &str) -> usize {
        self.shared
            .lock()
            .calls
            .iter()
            .filter(|c| c.method == method)
            .count()
    }

    pub fn posts(&self) -> Vec<Post> {
        self.shared.lock().posts.clone()
    }

    pub fn updates(&self) -> Vec<Update> {
        self.shared.lock().updates.clone()
    }

    pub fn reactions(&self) -> Vec<Reaction> {
        self.shared.lock().reactions.clone()
    }

    /// Envelope ids acknowledged so far, in order.
    pub fn acks(&self) -> Vec<String> {
        self.shared.lock().acks.clone()
    }

    /// Whether `envelope_id` has been acknowledged.
    pub fn acked(&self, envelope_id: &str) -> bool {
        self.shared.lock().acks.iter().any(|a| a == envelope_id)
    }

    /// Socket Mode connections that received `hello`, ever.
    pub fn connections(&self) -> usize {
        self.shared.lock().connections
    }

    /// Sockets open right now.
    pub fn open_sockets(&self) -> usize {
        self.shared.lock().sockets.len()
    }

    /// Refuse (`true`) or accept again new Socket Mode connections; open ones stay.
    pub fn refuse_sockets(&self, refuse: bool) {
        self.shared.lock().refuse_sockets = refuse;
    }

    /// Wait until at least `n` socket connections were refused.
    pub async fn wait_for_refused_sockets(&self, n: usize) {
        let what = format!("{n} refused socket connections");
        self.wait(WAIT, &what, |f| f.shared.lock().refused_sockets >= n)
            .await;
    }

    /// Wait (bounded by `timeout`) until `cond` holds over the recorded state.
    async fn wait(&self, timeout: Duration, what: &str, mut cond: impl FnMut(&FakeSlack) -> bool) {
        let mut rx = self.shared.changed.subscribe();
        let ok = tokio::time::timeout(timeout, async {
            loop {
                if cond(self) {
                    return;
                }
                if rx.changed().await.is_err() {
                    return;
                }
            }
        })
        .await
        .is_ok();
        assert!(ok, "fake slack: timed out waiting for {what}");
    }

    /// Wait until `envelope_id` is acknowledged; false after `timeout`.
    pub async fn wait_for_ack_within(&self, envelope_id: &str, timeout: Duration) -> bool {
        let mut rx = self.shared.changed.subscribe();
        tokio::time::timeout(timeout, async {
            while !self.acked(envelope_id) {
                if rx.changed().await.is_err() {
                    return;
                }
            }
        })
        .await
        .is_ok()
            && self.acked(envelope_id)
    }

    /// Wait until `envelope_id` is acknowledged (panics after [`WAIT`]).
    pub async fn wait_for_ack(&self, envelope_id: &str) {
        let what = format!("ack of {envelope_id}");
        self.wait(WAIT, &what, |f| f.acked(envelope_id)).await;
    }

    /// Wait until at least `n` messages were posted; returns all posts.
    pub async fn wait_for_posts(&self, n: usize) -> Vec<Post> {
        let what = format!("{n} chat.postMessage calls");
        self.wait(WAIT, &what, |f| f.shared.lock().posts.len() >= n)
            .await;
        self.posts()
    }

    /// Wait until at least `n` reactions were added; returns all reactions.
    pub async fn wait_for_reactions(&self, n: usize) -> Vec<Reaction> {
        let what = format!("{n} reactions.add calls");
        self.wait(WAIT, &what, |f| f.shared.lock().reactions.len() >= n)
            .await;
        self.reactions()
    }

    /// Wait until at least `n` Socket Mode connections got their `hello`, ever.
    pub async fn wait_for_connections(&self, n: usize) {
        let what = format!("{n} socket mode connections");
        self.wait(WAIT, &what, |f| f.connections() >= n).await;
    }

    /// Wrap `event` in an `event_callback` with a fresh event id and send it as an
    /// `events_api` envelope on the newest open socket (waiting for one, bounded).
    pub async fn push_event(&self, event: Value) -> Pushed {
        let event_id = format!("Ev{:06}", self.shared.next_id());
        self.push_event_with_id(&event_id, event).await
    }

    /// [`Self::push_event`] with a chosen event id (Slack reuses it on retries).
    pub async fn push_event_with_id(&self, event_id: &str, event: Value) -> Pushed {
        self.wait(WAIT, "an open socket", |f| f.open_sockets() > 0)
            .await;
        let envelope_id = format!("env-{:06}", self.shared.next_id());
        let envelope = json!({
            "type": "events_api",
            "envelope_id": envelope_id,
            "payload": event_callback(event_id, event),
            "accepts_response_payload": false,
            "retry_attempt": 0,
            "retry_reason": "",
        });
        {
            let mut g = self.shared.lock();
            if let Some((channel, ts, m)) = history::stored(&envelope["payload"]["event"]) {
                // A mention comes as `message` and `app_mention`: one message.
                g.history.entry((channel, ts)).or_insert(m);
            }
            g.unacked.push((envelope_id.clone(), envelope.clone()));
            if let Some(s) = g.sockets.last() {
                s.send(envelope.to_string());
            }
        }
        Pushed {
            envelope_id,
            event_id: event_id.to_string(),
        }
    }

    /// Send every unacknowledged envelope again (as Slack does), with `retry_attempt` raised,
    /// on the newest open socket. Returns how many were resent.
    pub async fn redeliver_unacked(&self) -> usize {
        self.wait(WAIT, "an open socket", |f| f.open_sockets() > 0)
            .await;
        let mut g = self.shared.lock();
        let Inner {
            unacked, sockets, ..
        } = &mut *g;
        let Some(s) = sockets.last() else { return 0 };
        for (_, env) in unacked.iter_mut() {
            let n = env["retry_attempt"].as_u64().unwrap_or(0) + 1;
            env["retry_attempt"] = json!(n);
            env["retry_reason"] = json!("timeout");
            s.send(env.to_string());
        }
        unacked.len()
    }

    /// Send a raw text frame (not an envelope: garbage, say) on the newest open socket,
    /// waiting for one (bounded).
    pub async fn send_frame(&self, frame: &str) {
        self.wait(WAIT, "an open socket", |f| f.open_sockets() > 0)
            .await;
        if let Some(s) = self.shared.lock().sockets.last() {
            s.send(frame.to_string());
        }
    }

    /// Send `{"type":"disconnect","reason":"refresh_requested"}` on every open socket.
    pub fn send_disconnect(&self) {
        let msg = json!({
            "type": "disconnect",
            "reason": "refresh_requested",
            "debug_info": {"host": "fake-slack"},
        })
        .to_string();
        for s in &self.shared.lock().sockets {
            s.send(msg.clone());
        }
    }

    /// Drop every open socket without a close frame (like a lost connection).
    pub fn drop_sockets(&self) {
        for s in &self.shared.lock().sockets {
            s.kill();
        }
    }

    /// Drop the oldest open socket without a close frame; the others stay.
    pub fn drop_oldest_socket(&self) {
        if let Some(s) = self.shared.lock().sockets.first() {
            s.kill();
        }
    }

    /// Stop reading from and writing to the open sockets while keeping them open (no pongs,
    /// no events): the "open but silent" socket a watchdog must notice.
    pub fn freeze_sockets(&self) {
        for s in &self.shared.lock().sockets {
            s.freeze();
        }
    }
}
