//! A fake Telegram Bot API server for tests and the benchmark.
//!
//! [`FakeTelegram`] serves `/{bot<token>}/{method}` (method names case-insensitive, since
//! teloxide sends them in PascalCase) with JSON, form or query parameters, long-polls
//! `getUpdates` honouring `offset` and `timeout` (updates stay queued until a higher offset
//! confirms them, so unconfirmed ones are redelivered), records every request and every sent
//! message, serves files under `/file/{bot<token>}/{path}`, and injects faults on demand.
//! Builders for common updates live in [`updates`].

pub mod updates;

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get};
use serde_json::{Map, Value, json};
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
            .route("/file/{bot}/{*path}", get(file))
            .route("/{bot}/{method}", any(method))
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

fn reply(status: StatusCode, body: Value) -> Response {
    (status, axum::Json(body)).into_response()
}

fn ok(result: Value) -> Response {
    reply(StatusCode::OK, json!({"ok": true, "result": result}))
}

fn error(code: u16, description: &str) -> Response {
    let status = StatusCode::from_u16(code).unwrap_or(StatusCode::BAD_REQUEST);
    reply(
        status,
        json!({"ok": false, "error_code": code, "description": description}),
    )
}

/// Parameters from the query string and a JSON or form body, merged into one object.
fn params(query: Option<&str>, headers: &HeaderMap, body: &[u8]) -> Map<String, Value> {
    let mut out = Map::new();
    let form = |s: &[u8], out: &mut Map<String, Value>| {
        let pairs: Vec<(String, String)> = serde_urlencoded::from_bytes(s).unwrap_or_default();
        for (k, v) in pairs {
            // Form values are strings; nested objects (reply_parameters) arrive as JSON text.
            let value = match serde_json::from_str::<Value>(&v) {
                Ok(j @ (Value::Object(_) | Value::Array(_))) => j,
                _ => Value::String(v),
            };
            out.insert(k, value);
        }
    };
    if let Some(q) = query {
        form(q.as_bytes(), &mut out);
    }
    let is_form = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/x-www-form-urlencoded"));
    if is_form {
        form(body, &mut out);
    } else if let Ok(Value::Object(m)) = serde_json::from_slice::<Value>(body) {
        out.extend(m);
    }
    out
}

/// An integer parameter, sent as a number or as a numeric string.
fn int(p: &Map<String, Value>, key: &str) -> Option<i64> {
    match p.get(key)? {
        Value::Number(n) => n.as_i64(),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

fn text_param(p: &Map<String, Value>, key: &str) -> Option<String> {
    match p.get(key)? {
        Value::String(s) => Some(s.clone()),
        other => Some(other.to_string()),
    }
}

fn token_ok(shared: &Shared, seg: &str) -> bool {
    seg.strip_prefix("bot") == Some(shared.token.as_str())
}

async fn file(
    State(shared): State<Arc<Shared>>,
    Path((bot, path)): Path<(String, String)>,
) -> Response {
    if !token_ok(&shared, &bot) {
        return error(401, "Unauthorized");
    }
    let st = shared.lock();
    match st.files.values().find(|(f, _)| f.file_path == path) {
        Some((_, bytes)) => (StatusCode::OK, bytes.clone()).into_response(),
        None => error(404, "Not Found"),
    }
}

async fn method(
    State(shared): State<Arc<Shared>>,
    Path((bot, method)): Path<(String, String)>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if !token_ok(&shared, &bot) {
        return error(401, "Unauthorized");
    }
    let name = method.to_ascii_lowercase();
    let p = params(query.as_deref(), &headers, &body);
    shared
        .lock()
        .requests
        .push((name.clone(), Value::Object(p.clone())));
    shared.changed.notify_waiters();
    match name.as_str() {
        "getme" => ok(bot_user(&shared, true)),
        "deletewebhook" | "setmycommands" | "sendchataction" | "setwebhook" => ok(json!(true)),
        "getupdates" => get_updates(&shared, &p).await,
        "sendmessage" => send_message(&shared, &p),
        "editmessagetext" => edit_message_text(&shared, &p),
        "getfile" => get_file(&shared, &p),
        _ => error(404, "Not Found: method not found"),
    }
}

fn bot_user(shared: &Shared, me: bool) -> Value {
    let mut u = json!({
        "id": shared.bot_id,
        "is_bot": true,
        "first_name": "Switchboard",
        "username": shared.bot_username,
    });
    if me {
        let extra = json!({
            "can_join_groups": true,
            "can_read_all_group_messages": false,
            "supports_inline_queries": false,
            "can_connect_to_business": false,
            "has_main_web_app": false,
        });
        if let (Some(u), Value::Object(extra)) = (u.as_object_mut(), extra) {
            u.extend(extra);
        }
    }
    u
}

async fn get_updates(shared: &Shared, p: &Map<String, Value>) -> Response {
    let offset = int(p, "offset").unwrap_or(0);
    let timeout = int(p, "timeout").unwrap_or(0).clamp(0, 600) as u64;
    let limit = int(p, "limit").unwrap_or(100).clamp(1, 100) as usize;
    let fault = {
        let mut st = shared.lock();
        let fault = st.poll_faults.pop_front();
        if fault != Some(PollFault::Conflict) && offset > 0 {
            // An offset confirms every update below it: they are gone for good.
            while st.queue.front().is_some_and(|(id, _)| *id < offset) {
                st.queue.pop_front();
            }
            if st.confirmed.is_none_or(|c| c < offset - 1) {
                st.confirmed = Some(offset - 1);
            }
        }
        fault
    };
    shared.changed.notify_waiters();
    match fault {
        Some(PollFault::Conflict) => {
            return error(
                409,
                "Conflict: terminated by other getUpdates request; make sure that only one bot instance is running",
            );
        }
        Some(PollFault::Stall) => {
            let _ = tokio::time::timeout(Duration::from_secs(600), shared.unstall.notified()).await;
            return ok(json!([]));
        }
        None => {}
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(timeout);
    let batch = wait_until(shared, deadline, |st| {
        let batch: Vec<Value> = st
            .queue
            .iter()
            .filter(|(id, _)| *id >= offset)
            .take(limit)
            .map(|(_, u)| u.clone())
            .collect();
        (!batch.is_empty()).then_some(batch)
    })
    .await
    .unwrap_or_default();
    ok(Value::Array(batch))
}

fn send_message(shared: &Shared, p: &Map<String, Value>) -> Response {
    let Some(chat_id) = int(p, "chat_id") else {
        return error(400, "Bad Request: chat_id is empty");
    };
    let Some(text) = text_param(p, "text").filter(|t| !t.is_empty()) else {
        return error(400, "Bad Request: message text is empty");
    };
    let parse_mode = text_param(p, "parse_mode");
    let reply_params = p.get("reply_parameters");
    let reply_to = reply_params
        .and_then(|r| r.get("message_id"))
        .and_then(Value::as_i64)
        .or_else(|| int(p, "reply_to_message_id"));
    let allow_without_reply = reply_params
        .and_then(|r| r.get("allow_sending_without_reply"))
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let thread_id = int(p, "message_thread_id");
    let mut st = shared.lock();
    match st.send_faults.pop_front() {
        Some(SendFault::RetryAfter(secs)) => {
            return reply(
                StatusCode::TOO_MANY_REQUESTS,
                json!({"ok": false, "error_code": 429,
                       "description": format!("Too Many Requests: retry after {secs}"),
                       "parameters": {"retry_after": secs}}),
            );
        }
        Some(SendFault::ServerError) => return error(500, "Internal Server Error"),
        None => {}
    }
    if st.reject_html
        && parse_mode
            .as_deref()
            .is_some_and(|m| m.eq_ignore_ascii_case("html"))
    {
        return error(
            400,
            "Bad Request: can't parse entities: Unsupported start tag \"x\" at byte offset 0",
        );
    }
    let message_id = st.next_message_id;
    st.next_message_id += 1;
    st.texts.insert(message_id, text.clone());
    st.sent.push(SentMessage {
        message_id,
        chat_id,
        text: text.clone(),
        parse_mode,
        reply_to,
        allow_without_reply,
        thread_id,
        at: Instant::now(),
    });
    drop(st);
    shared.changed.notify_waiters();
    ok(bot_message(shared, message_id, chat_id, &text, thread_id))
}

/// A `Message` sent by the bot, as `sendMessage` / `editMessageText` return it.
fn bot_message(
    shared: &Shared,
    message_id: i64,
    chat_id: i64,
    text: &str,
    thread: Option<i64>,
) -> Value {
    let chat = if chat_id < 0 {
        json!({"id": chat_id, "type": "supergroup", "title": "Test group"})
    } else {
        json!({"id": chat_id, "type": "private", "first_name": "User"})
    };
    let mut m = json!({
        "message_id": message_id,
        "date": unix_now(),
        "chat": chat,
        "from": bot_user(shared, false),
        "text": text,
    });
    if let (Some(t), Some(obj)) = (thread, m.as_object_mut()) {
        obj.insert("message_thread_id".into(), json!(t));
        obj.insert("is_topic_message".into(), json!(true));
    }
    m
}

fn edit_message_text(shared: &Shared, p: &Map<String, Value>) -> Response {
    let (Some(chat_id), Some(message_id), Some(text)) = (
        int(p, "chat_id"),
        int(p, "message_id"),
        text_param(p, "text"),
    ) else {
        return error(400, "Bad Request: message to edit not found");
    };
    let mut st = shared.lock();
    match st.texts.get(&message_id) {
        None => return error(400, "Bad Request: message to edit not found"),
        Some(old) if *old == text => {
            return error(
                400,
                "Bad Request: message is not modified: specified new message content and reply markup are exactly the same as a current content and reply markup of the message",
            );
        }
        Some(_) => {}
    }
    st.texts.insert(message_id, text.clone());
    drop(st);
    ok(bot_message(shared, message_id, chat_id, &text, None))
}

fn get_file(shared: &Shared, p: &Map<String, Value>) -> Response {
    let id = text_param(p, "file_id").unwrap_or_default();
    let st = shared.lock();
    match st.files.get(&id) {
        Some((f, _)) => ok(json!({
            "file_id": f.file_id,
            "file_unique_id": f.file_unique_id,
            "file_size": f.size,
            "file_path": f.file_path,
        })),
        None => error(400, "Bad Request: invalid file_id"),
    }
}
