//! A fake Telegram Bot API server for tests and the benchmark.
//!
//! [`FakeTelegram`] serves `/{bot<token>}/{method}` (method names case-insensitive, since
//! teloxide sends them in PascalCase) with JSON, form or query parameters, long-polls
//! `getUpdates` honouring `offset` and `timeout` (updates stay queued until a higher offset
//! confirms them, so unconfirmed ones are redelivered), records every request and every sent
//! message, serves files under `/file/{bot<token>}/{path}`, and injects faults on demand.
//! Builders for common updates live in [`updates`].

mod server;
pub mod updates;

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::routing::{any, get};
use serde_json::{Value, json};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

pub use updates::TgUser;

/// The token [`FakeTelegram::start`] accepts.
pub const DEFAULT_TOKEN: &str = "123456:TEST-token";

/// One `sendMessage` the fake accepted.
#[derive(Debug, Clone, PartialEq)]
pub struct SentMessage {
    /// Id the fake assigned.
    pub message_id: i64,
    pub chat_id: i64,
    pub text: String,
    /// `parse_mode` as sent (`"HTML"`), if any.
    pub parse_mode: Option<String>,
    /// Message replied to (`reply_parameters.message_id` or `reply_to_message_id`).
    pub reply_to: Option<i64>,
    /// `allow_sending_without_reply` from `reply_parameters`.
    pub allow_without_reply: bool,
    /// Forum topic (`message_thread_id`).
    pub thread_id: Option<i64>,
    /// When the fake received it.
    pub at: Instant,
}

/// A fault the next `sendMessage` answers with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SendFault {
    RetryAfter(u64),
    ServerError,
    /// No fault: answer normally (lets earlier sends through before a queued fault).
    Pass,
}

/// A fault the next `getUpdates` answers with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PollFault {
    Conflict,
    Stall,
}

/// A file the fake serves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FakeFile {
    pub file_id: String,
    pub file_unique_id: String,
    pub file_path: String,
    pub size: u64,
}

#[derive(Default)]
struct State_ {
    next_update_id: i64,
    next_message_id: i64,
    /// Updates not yet confirmed, in id order.
    queue: VecDeque<(i64, Value)>,
    /// Highest update id confirmed by an `offset`.
    confirmed: Option<i64>,
    sent: Vec<SentMessage>,
    /// Current text of every message the bot sent, for `editMessageText`.
    texts: HashMap<i64, String>,
    requests: Vec<(String, Value)>,
    files: HashMap<String, (FakeFile, Bytes)>,
    send_faults: VecDeque<SendFault>,
    poll_faults: VecDeque<PollFault>,
    reject_html: bool,
    /// Download speed of files, in bytes per second (`None`: at once).
    file_rate: Option<u64>,
    /// Groups upgraded to supergroups: old id → new id.
    migrated: HashMap<i64, i64>,
    /// Chats whose user blocked the bot: sends there get 403.
    blocked: std::collections::HashSet<i64>,
}

struct Shared {
    token: String,
    bot_id: i64,
    bot_username: String,
    state: Mutex<State_>,
    /// Woken on every change (update pushed, offset confirmed, message sent, request seen).
    changed: Notify,
    /// Releases stalled `getUpdates` calls.
    unstall: Notify,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State_> {
        // A panicking test thread must not poison the fake for the others.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Options for [`FakeTelegram`].
#[derive(Debug, Clone)]
pub struct FakeTelegramBuilder {
    token: String,
    bot_id: i64,
    bot_username: String,
}

impl FakeTelegramBuilder {
    /// The token the fake accepts (others get 401).
    pub fn token(mut self, token: impl Into<String>) -> Self {
        self.token = token.into();
        self
    }

    /// The bot's user id, returned by `getMe`.
    pub fn bot_id(mut self, id: i64) -> Self {
        self.bot_id = id;
        self
    }

    /// The bot's username (without `@`), returned by `getMe`.
    pub fn bot_username(mut self, name: impl Into<String>) -> Self {
        self.bot_username = name.into();
        self
    }

    /// Bind 127.0.0.1:0 and serve until the [`FakeTelegram`] is dropped.
    pub async fn start(self) -> FakeTelegram {
        let shared = Arc::new(Shared {
            token: self.token,
            bot_id: self.bot_id,
            bot_username: self.bot_username,
            state: Mutex::new(State_ {
                next_update_id: 1000,
                next_message_id: 1,
                ..State_::default()
            }),
            changed: Notify::new(),
            unstall: Notify::new(),
        });
        let app = Router::new()
            .route("/file/{bot}/{*path}", get(server::file))
            .route("/{bot}/{method}", any(server::method))
            .with_state(shared.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind 127.0.0.1:0");
        let addr = listener.local_addr().expect("local addr");
        let shutdown = CancellationToken::new();
        let stop = shutdown.clone();
        tokio::spawn(async move {
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(stop.cancelled_owned())
                .await;
        });
        FakeTelegram {
            shared,
            addr,
            shutdown,
        }
    }
}

/// The fake Bot API server. Dropping it stops the server.
pub struct FakeTelegram {
    shared: Arc<Shared>,
    addr: SocketAddr,
    shutdown: CancellationToken,
}

impl Drop for FakeTelegram {
    fn drop(&mut self) {
        self.shutdown.cancel();
        self.shared.unstall.notify_waiters();
    }
}

impl FakeTelegram {
    /// Options: token, bot id, bot username.
    pub fn builder() -> FakeTelegramBuilder {
        FakeTelegramBuilder {
            token: DEFAULT_TOKEN.to_string(),
            bot_id: 777_000_111,
            bot_username: "switchboard_test_bot".to_string(),
        }
    }

    /// Start with [`DEFAULT_TOKEN`], bot id 777000111, username `switchboard_test_bot`.
    pub async fn start() -> Self {
        Self::builder().start().await
    }

    /// The `api_url` to give the adapter (`http://127.0.0.1:PORT`).
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The token the fake accepts.
    pub fn token(&self) -> &str {
        &self.shared.token
    }

    /// The bot's user id.
    pub fn bot_id(&self) -> i64 {
        self.shared.bot_id
    }

    /// The bot's username, without `@`.
    pub fn bot_username(&self) -> &str {
        &self.shared.bot_username
    }

    /// Queue an update. `update_id` is assigned when missing, and so are `message_id` and
    /// `date` of its message (`message`, `edited_message`, `channel_post`…). Returns the id.
    pub fn push_update(&self, mut update: Value) -> i64 {
        let mut st = self.shared.lock();
        let id = match update.get("update_id").and_then(Value::as_i64) {
            Some(id) => {
                st.next_update_id = st.next_update_id.max(id + 1);
                id
            }
            None => {
                let id = st.next_update_id;
                st.next_update_id += 1;
                id
            }
        };
        if let Some(obj) = update.as_object_mut() {
            obj.insert("update_id".into(), json!(id));
            for (_, v) in obj.iter_mut() {
                if let Some(m) = v.as_object_mut().filter(|m| m.contains_key("chat")) {
                    if !m.contains_key("message_id") {
                        m.insert("message_id".into(), json!(st.next_message_id));
                        st.next_message_id += 1;
                    }
                    m.entry("date").or_insert(json!(unix_now()));
                }
            }
        }
        let pos = st.queue.partition_point(|(u, _)| *u < id);
        st.queue.insert(pos, (id, update));
        drop(st);
        self.shared.changed.notify_waiters();
        id
    }

    /// Serve `bytes` as a file; use the returned [`FakeFile`] in a photo/document builder.
    pub fn add_file(&self, name: &str, bytes: impl Into<Bytes>) -> FakeFile {
        let bytes = bytes.into();
        let mut st = self.shared.lock();
        let n = st.files.len() + 1;
        let file = FakeFile {
            file_id: format!("FILE{n}"),
            file_unique_id: format!("U{n}"),
            file_path: format!("files/{n}/{name}"),
            size: bytes.len() as u64,
        };
        st.files.insert(file.file_id.clone(), (file.clone(), bytes));
        file
    }

    /// Upgrade group `old` to supergroup `new`: sends to `old` are refused with
    /// `migrate_to_chat_id`, as Telegram does.
    pub fn migrate(&self, old: i64, new: i64) {
        self.shared.lock().migrated.insert(old, new);
    }

    /// The user of private chat `chat` blocked the bot: sends there get Telegram's 403
    /// "Forbidden: bot was blocked by the user".
    pub fn block(&self, chat: i64) {
        self.shared.lock().blocked.insert(chat);
    }

    /// Serve file downloads at `bytes_per_sec` (a slow link), in 10 timed pieces.
    pub fn set_file_rate(&self, bytes_per_sec: u64) {
        self.shared.lock().file_rate = Some(bytes_per_sec.max(1));
    }

    /// Serve file downloads at full speed again.
    pub fn clear_file_rate(&self) {
        self.shared.lock().file_rate = None;
    }

    /// Every `sendMessage` accepted so far, in order.
    pub fn sent(&self) -> Vec<SentMessage> {
        self.shared.lock().sent.clone()
    }

    /// Parameters of every request to `method` (case-insensitive), in order. Requests with
    /// a wrong token are not recorded.
    pub fn requests(&self, method: &str) -> Vec<Value> {
        let m = method.to_ascii_lowercase();
        let st = self.shared.lock();
        st.requests
            .iter()
            .filter(|(name, _)| *name == m)
            .map(|(_, v)| v.clone())
            .collect()
    }

    /// The highest update id confirmed by a `getUpdates` offset.
    pub fn confirmed(&self) -> Option<i64> {
        self.shared.lock().confirmed
    }

    /// Update ids still queued (not confirmed).
    pub fn pending_updates(&self) -> Vec<i64> {
        self.shared.lock().queue.iter().map(|(id, _)| *id).collect()
    }

    /// Wait until at least `n` messages were sent; returns them all, or `None` on timeout.
    pub async fn wait_for_sent(&self, n: usize, timeout: Duration) -> Option<Vec<SentMessage>> {
        self.wait_until(timeout, |st| (st.sent.len() >= n).then(|| st.sent.clone()))
            .await
    }

    /// Wait until `update_id` was confirmed by a `getUpdates` offset above it.
    pub async fn wait_for_offset_confirmed(&self, update_id: i64, timeout: Duration) -> bool {
        self.wait_until(timeout, |st| st.confirmed.filter(|c| *c >= update_id))
            .await
            .is_some()
    }

    /// Wait until at least `n` requests to `method` arrived; returns their parameters.
    pub async fn wait_for_requests(
        &self,
        method: &str,
        n: usize,
        timeout: Duration,
    ) -> Option<Vec<Value>> {
        let m = method.to_ascii_lowercase();
        self.wait_until(timeout, |st| {
            let got: Vec<Value> = st
                .requests
                .iter()
                .filter(|(name, _)| *name == m)
                .map(|(_, v)| v.clone())
                .collect();
            (got.len() >= n).then_some(got)
        })
        .await
    }

    /// The next `n` `sendMessage` calls answer 429 with `retry_after` seconds.
    pub fn fail_sends_with_retry_after(&self, n: usize, retry_after: u64) {
        let mut st = self.shared.lock();
        st.send_faults
            .extend(std::iter::repeat_n(SendFault::RetryAfter(retry_after), n));
    }

    /// The next `n` `sendMessage` calls answer 500.
    pub fn fail_sends_with_server_error(&self, n: usize) {
        let mut st = self.shared.lock();
        st.send_faults
            .extend(std::iter::repeat_n(SendFault::ServerError, n));
    }

    /// The next `n` `sendMessage` calls answer normally; queue this before a fault to make
    /// a later call fail (the second chunk of a reply, say).
    pub fn pass_sends(&self, n: usize) {
        let mut st = self.shared.lock();
        st.send_faults
            .extend(std::iter::repeat_n(SendFault::Pass, n));
    }

    /// While on, `sendMessage` with `parse_mode` HTML answers "can't parse entities".
    pub fn reject_html(&self, on: bool) {
        self.shared.lock().reject_html = on;
    }

    /// The next `n` `getUpdates` calls answer 409 Conflict (another poller).
    pub fn conflict_polls(&self, n: usize) {
        let mut st = self.shared.lock();
        st.poll_faults
            .extend(std::iter::repeat_n(PollFault::Conflict, n));
    }

    /// The next `n` `getUpdates` calls hang (until [`Self::release_stalls`], 10 minutes, or
    /// the fake stops) without answering.
    pub fn stall_polls(&self, n: usize) {
        let mut st = self.shared.lock();
        st.poll_faults
            .extend(std::iter::repeat_n(PollFault::Stall, n));
    }

    /// Let every stalled `getUpdates` call return (empty).
    pub fn release_stalls(&self) {
        self.shared.unstall.notify_waiters();
    }

    async fn wait_until<T>(
        &self,
        timeout: Duration,
        mut check: impl FnMut(&State_) -> Option<T>,
    ) -> Option<T> {
        wait_until(&self.shared, tokio::time::Instant::now() + timeout, |st| {
            check(st)
        })
        .await
    }
}

/// Wait on `changed` until `check` yields, or the deadline passes (then check once more).
async fn wait_until<T>(
    shared: &Shared,
    deadline: tokio::time::Instant,
    mut check: impl FnMut(&State_) -> Option<T>,
) -> Option<T> {
    loop {
        let notified = shared.changed.notified();
        tokio::pin!(notified);
        // Register before checking, so a change between the check and the await is not lost.
        notified.as_mut().enable();
        if let Some(v) = check(&shared.lock()) {
            return Some(v);
        }
        if tokio::time::timeout_at(deadline, notified).await.is_err() {
            return check(&shared.lock());
        }
    }
}

fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}
