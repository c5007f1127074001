//! Fake Discord: the REST API under `/api/v10` and a JSON websocket gateway, on 127.0.0.1.
//!
//! Real serenity talks to it unchanged. REST ([`rest`]) records every message post, edit and
//! typing call and can inject 429 / 500 faults; [`channels`] adds threads, forums and their
//! posts, DMs opened by user id, and refused posts (404 Unknown Channel, 403 Missing
//! Permissions / Access); the gateway ([`gateway`]) speaks HELLO →
//! IDENTIFY → READY → heartbeats → dispatches, accepts RESUME (replaying missed events), and
//! can abort, half-close or freeze a connection. Tests drive it with `push_*` helpers and
//! wait on what crossed the wire with bounded `wait_for_*` calls.

mod cdn;
pub use cdn::FileGet;
mod channels;
pub use channels::{ChannelKind, Denial, FakeChannel, Refusal};
mod gateway;
mod messages;
pub use messages::{Author, IncomingMessage, attachment, message_json};
mod rest;

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

/// The bot's user id (the user the token belongs to).
pub const BOT_USER_ID: u64 = 900_000_000_000_000_001;
/// The bot's username.
pub const BOT_USERNAME: &str = "switchboard";
/// The application id in READY.
pub const APPLICATION_ID: u64 = 900_000_000_000_000_002;
/// The guild used by the message helpers.
pub const GUILD_ID: u64 = 900_000_000_000_000_003;
/// The bot's managed role in [`GUILD_ID`] (sent by [`FakeDiscord::push_guild_create`]).
pub const BOT_ROLE_ID: u64 = 900_000_000_000_000_004;
/// A role of people, "helpers", in [`GUILD_ID`] (sent by [`FakeDiscord::push_guild_create`]).
pub const HELPER_ROLE_ID: u64 = 900_000_000_000_000_005;

/// A fault the next message post (or edit) answers with instead of success.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Fault {
    /// HTTP 429 with `retry_after` (seconds) in the JSON body and the `Retry-After` header.
    RateLimited { retry_after: f64 },
    /// HTTP 500.
    ServerError,
    /// The message is created, but the answer is lost on the way back: HTTP 502 from the
    /// edge (a retry without a nonce would post it twice).
    LostAnswer,
}

/// One recorded REST call that changed something.
#[derive(Debug, Clone, PartialEq)]
pub struct Recorded {
    /// Channel the call was made on.
    pub channel_id: u64,
    /// Id of the message created or edited.
    pub message_id: u64,
    /// The JSON body as sent (content, message_reference, allowed_mentions…).
    pub body: Value,
}

impl Recorded {
    /// The `content` field of the body, or "".
    pub fn content(&self) -> &str {
        self.body["content"].as_str().unwrap_or("")
    }
}

/// Command for the live gateway connection.
#[derive(Debug)]
pub(crate) enum ConnCmd {
    /// Send this frame.
    Frame(String),
    /// Abort the TCP socket (RST): the client sees an I/O error and resumes.
    Abort,
    /// Close the TCP socket without a websocket close frame (FIN): the client sees EOF.
    HalfClose,
}

/// Everything the fake has seen and the gateway's session state.
#[derive(Default)]
pub(crate) struct State {
    pub(crate) token: String,
    pub(crate) heartbeat_interval_ms: u64,
    pub(crate) gateway_url: String,
    pub(crate) next_id: u64,
    pub(crate) posts: Vec<Recorded>,
    pub(crate) edits: Vec<Recorded>,
    pub(crate) typing: Vec<u64>,
    pub(crate) faults: VecDeque<Fault>,
    /// Messages created with `enforce_nonce`, by channel and nonce.
    pub(crate) nonces: HashMap<(u64, String), Value>,
    /// Message posts answered with a fault.
    pub(crate) faulted_posts: usize,
    pub(crate) identifies: Vec<Value>,
    pub(crate) resumes: Vec<Value>,
    pub(crate) heartbeats: usize,
    /// READY + RESUMED sent.
    pub(crate) sessions_started: usize,
    pub(crate) connections: usize,
    pub(crate) session_id: Option<String>,
    pub(crate) seq: u64,
    /// Dispatches of the current session: (s, frame), replayed on RESUME.
    pub(crate) log: Vec<(u64, String)>,
    /// The connection dispatches go to: (connection number, sender).
    pub(crate) live: Option<(usize, mpsc::UnboundedSender<ConnCmd>)>,
    /// Connection number that stopped answering heartbeats and sending (socket stays open).
    pub(crate) frozen: Option<usize>,
    /// New connections stay silent (see [`FakeDiscord::mute_new_connections`]).
    pub(crate) mute_new: bool,
    /// IDENTIFY is answered with close code 4014 (see [`FakeDiscord::disallow_intents`]).
    pub(crate) intents_disallowed: bool,
    /// `GET /users/@me` answers after this long (a slow API).
    pub(crate) me_delay: Option<Duration>,
    /// `GET /users/@me` requests received.
    pub(crate) me_calls: usize,
    /// Every message of each channel, oldest first, as REST returns it (no `guild_id` or
    /// `member`): what `GET /channels/{id}/messages` answers from.
    pub(crate) history: HashMap<u64, Vec<Value>>,
    /// `GET /channels/{id}/messages` requests: (channel, query string).
    pub(crate) history_reads: Vec<(u64, String)>,
    /// New gateway connections are reset before the websocket handshake.
    pub(crate) refuse_new: bool,
    /// Connections reset that way.
    pub(crate) refused: usize,
    pub(crate) cdn: cdn::Cdn,
    pub(crate) channels: channels::Channels,
}

impl State {
    /// Keep `msg` (a message object) in its channel's history, as REST shows it.
    pub(crate) fn remember(&mut self, channel_id: u64, msg: &Value) {
        let mut rest = msg.clone();
        if let Some(m) = rest.as_object_mut() {
            m.remove("guild_id");
            m.remove("member");
        }
        self.history.entry(channel_id).or_default().push(rest);
    }

    pub(crate) fn new_id(&mut self) -> u64 {
        self.next_id += 1;
        1_000_000_000_000_000_000 + self.next_id
    }

    /// Append a dispatch to the session log and send it to the live connection.
    pub(crate) fn dispatch(&mut self, t: &str, d: Value) -> u64 {
        self.seq += 1;
        let frame = json!({"op": 0, "t": t, "s": self.seq, "d": d}).to_string();
        self.log.push((self.seq, frame.clone()));
        if let Some((conn, tx)) = &self.live {
            if self.frozen != Some(*conn) {
                let _ = tx.send(ConnCmd::Frame(frame));
            }
        }
        self.seq
    }
}

/// Shared between the fake's handle and its server tasks.
pub(crate) struct Shared {
    state: Mutex<State>,
    changed: watch::Sender<u64>,
}

impl Shared {
    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Wake every waiter (call after changing the state).
    pub(crate) fn bump(&self) {
        self.changed.send_modify(|v| *v += 1);
    }
}

/// Options for [`FakeDiscord::start_with`].
#[derive(Debug, Clone)]
pub struct FakeDiscordOptions {
    /// The only token accepted (`Authorization: Bot <token>`, IDENTIFY, RESUME).
    pub token: String,
    /// `heartbeat_interval` in HELLO.
    pub heartbeat_interval: Duration,
}

impl Default for FakeDiscordOptions {
    fn default() -> Self {
        Self {
            token: "fake-discord-token".into(),
            heartbeat_interval: Duration::from_millis(41_250),
        }
    }
}

/// A running fake Discord. Dropping it stops the servers.
pub struct FakeDiscord {
    /// Base URL for `api_url` (`http://127.0.0.1:PORT`).
    pub base_url: String,
    /// Gateway URL returned by `GET /api/v10/gateway` (`ws://127.0.0.1:PORT/gateway`).
    pub gateway_url: String,
    shared: Arc<Shared>,
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for FakeDiscord {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
        let mut st = self.shared.lock();
        if let Some((_, tx)) = st.live.take() {
            let _ = tx.send(ConnCmd::Abort);
        }
    }
}

impl FakeDiscord {
    /// Start with `token` and Discord's usual heartbeat interval.
    pub async fn start(token: &str) -> Self {
        Self::start_with(FakeDiscordOptions {
            token: token.into(),
            ..Default::default()
        })
        .await
    }

    /// Start with options.
    pub async fn start_with(opts: FakeDiscordOptions) -> Self {
        let rest_listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind rest");
        let ws_listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind gateway");
        let base_url = format!("http://{}", rest_listener.local_addr().expect("addr"));
        let gateway_url = format!("ws://{}/gateway", ws_listener.local_addr().expect("addr"));
        let state = State {
            token: opts.token,
            heartbeat_interval_ms: opts.heartbeat_interval.as_millis() as u64,
            gateway_url: gateway_url.clone(),
            ..Default::default()
        };
        let shared = Arc::new(Shared {
            state: Mutex::new(state),
            changed: watch::channel(0).0,
        });
        let app = rest::router(shared.clone());
        let rest_task = tokio::spawn(async move {
            let _ = axum::serve(rest_listener, app).await;
        });
        let gw_task = tokio::spawn(gateway::serve(ws_listener, shared.clone()));
        Self {
            base_url,
            gateway_url,
            shared,
            tasks: vec![rest_task, gw_task],
        }
    }

    /// Wait until `cond` holds on the state, at most `timeout`. Returns whether it held.
    async fn wait(&self, timeout: Duration, cond: impl Fn(&State) -> bool) -> bool {
        let mut rx = self.shared.changed.subscribe();
        let fut = async {
            loop {
                if cond(&self.shared.lock()) {
                    return;
                }
                if rx.changed().await.is_err() {
                    return;
                }
            }
        };
        tokio::time::timeout(timeout, fut).await.is_ok() && cond(&self.shared.lock())
    }

    // ---- dispatching -------------------------------------------------------------------

    /// Dispatch a raw event `t` with data `d` on the gateway; returns its sequence number.
    pub fn push_dispatch(&self, t: &str, d: Value) -> u64 {
        let s = self.shared.lock().dispatch(t, d);
        self.shared.bump();
        s
    }

    /// Dispatch MESSAGE_CREATE for `msg`; returns the new message id.
    pub fn push_message_create(&self, msg: IncomingMessage) -> u64 {
        let id = self.shared.lock().new_id();
        self.push_message_create_with_id(id, msg);
        id
    }

    /// Dispatch MESSAGE_CREATE for `msg` with message id `id`.
    fn push_message_create_with_id(&self, id: u64, msg: IncomingMessage) {
        let mut st = self.shared.lock();
        let d = incoming_json(id, &msg);
        st.remember(msg.channel_id, &d);
        st.dispatch("MESSAGE_CREATE", d);
        drop(st);
        self.shared.bump();
    }

    /// `msg` is sent to Discord but its MESSAGE_CREATE never reaches the bot (sent while no
    /// session was up): only `GET /channels/{id}/messages` shows it. Returns its id.
    pub fn push_unseen_message(&self, msg: IncomingMessage) -> u64 {
        let mut st = self.shared.lock();
        let id = st.new_id();
        let d = incoming_json(id, &msg);
        st.remember(msg.channel_id, &d);
        drop(st);
        self.shared.bump();
        id
    }

    /// Dispatch GUILD_CREATE for [`GUILD_ID`] with one text channel `channel_id` ("general")
    /// and the channels registered with [`FakeDiscord::add_channel`] (threads among the
    /// active ones), the @everyone role, the bot's managed role [`BOT_ROLE_ID`] and
    /// [`HELPER_ROLE_ID`] (every field serenity needs).
    pub fn push_guild_create(&self, channel_id: u64) -> u64 {
        let d = gateway::guild_create(channel_id, &self.shared.lock().channels);
        self.push_dispatch("GUILD_CREATE", d)
    }

    // ---- faults --------------------------------------------------------------------------

    /// The next message posts / edits (and channel message reads) answer with these faults,
    /// in order.
    pub fn inject_faults(&self, faults: impl IntoIterator<Item = Fault>) {
        self.shared.lock().faults.extend(faults);
    }

    /// Abort the live websocket's TCP socket (RST). serenity resumes.
    pub fn drop_connection(&self) {
        self.send_live(ConnCmd::Abort);
    }

    /// Close the live websocket's TCP socket without a close frame (EOF).
    pub fn half_close_connection(&self) {
        self.send_live(ConnCmd::HalfClose);
    }

    /// While set, new gateway connections are accepted but stay silent: no HELLO, and every
    /// frame the client sends is ignored (a gateway that hangs after the TCP handshake).
    pub fn mute_new_connections(&self, mute: bool) {
        self.shared.lock().mute_new = mute;
        self.shared.bump();
    }

    /// While set, new gateway connections are reset (RST) before the websocket handshake:
    /// a network that is still down when the client reconnects.
    pub fn refuse_new_connections(&self, refuse: bool) {
        self.shared.lock().refuse_new = refuse;
        self.shared.bump();
    }

    /// Wait until at least `n` connections were refused.
    pub async fn wait_for_refused(&self, n: usize, timeout: Duration) -> bool {
        self.wait(timeout, |s| s.refused >= n).await
    }

    /// `GET /channels/{id}/messages` calls so far: (channel, query string).
    pub fn history_reads(&self) -> Vec<(u64, String)> {
        self.shared.lock().history_reads.clone()
    }

    /// Forget the current session, as Discord does after a while: a RESUME of it is answered
    /// with op 9 (Invalid Session, not resumable) and the client must IDENTIFY again.
    pub fn end_session(&self) {
        self.shared.lock().session_id = None;
    }

    /// Gateway connections accepted so far.
    pub fn connections(&self) -> usize {
        self.shared.lock().connections
    }

    /// Answer `GET /users/@me` (the adapter's token check) only after `delay`.
    pub fn slow_token_check(&self, delay: Duration) {
        self.shared.lock().me_delay = Some(delay);
    }

    /// Answer IDENTIFY with close code 4014, "Disallowed intent(s).": the bot asks for a
    /// privileged intent (Message Content) not enabled in the Developer Portal.
    pub fn disallow_intents(&self) {
        self.shared.lock().intents_disallowed = true;
    }

    /// The live connection stops answering heartbeats and gets no dispatches while its
    /// socket stays open (a stalled gateway). New connections work normally.
    pub fn freeze(&self) {
        let mut st = self.shared.lock();
        st.frozen = st.live.as_ref().map(|(conn, _)| *conn);
    }

    fn send_live(&self, cmd: ConnCmd) {
        let mut st = self.shared.lock();
        if let Some((_, tx)) = st.live.take() {
            let _ = tx.send(cmd);
        }
    }

    // ---- what crossed the wire -----------------------------------------------------------

    /// Message posts that succeeded, in order.
    pub fn posts(&self) -> Vec<Recorded> {
        self.shared.lock().posts.clone()
    }

    /// Message edits that succeeded, in order.
    pub fn edits(&self) -> Vec<Recorded> {
        self.shared.lock().edits.clone()
    }

    /// Channel ids of typing calls, in order.
    pub fn typing_calls(&self) -> Vec<u64> {
        self.shared.lock().typing.clone()
    }

    /// Number of message posts answered with an injected fault.
    pub fn faulted_posts(&self) -> usize {
        self.shared.lock().faulted_posts
    }

    /// IDENTIFY payloads (`d`) received, in order.
    pub fn identifies(&self) -> Vec<Value> {
        self.shared.lock().identifies.clone()
    }

    /// RESUME payloads (`d`) received, in order.
    pub fn resumes(&self) -> Vec<Value> {
        self.shared.lock().resumes.clone()
    }

    /// READY + RESUMED dispatches sent so far.
    pub fn sessions_started(&self) -> usize {
        self.shared.lock().sessions_started
    }

    /// Heartbeats (op 1) received.
    pub fn heartbeats(&self) -> usize {
        self.shared.lock().heartbeats
    }

    /// Wait until at least `n` successful message posts were recorded.
    pub async fn wait_for_posts(&self, n: usize, timeout: Duration) -> bool {
        self.wait(timeout, |s| s.posts.len() >= n).await
    }

    /// Wait until at least `n` typing calls were recorded.
    pub async fn wait_for_typing(&self, n: usize, timeout: Duration) -> bool {
        self.wait(timeout, |s| s.typing.len() >= n).await
    }

    /// Wait until at least `n` token checks (`GET /users/@me`) arrived.
    pub async fn wait_for_token_checks(&self, n: usize, timeout: Duration) -> bool {
        self.wait(timeout, |s| s.me_calls >= n).await
    }

    /// Wait until at least `n` IDENTIFYs were received.
    pub async fn wait_for_identify(&self, n: usize, timeout: Duration) -> bool {
        self.wait(timeout, |s| s.identifies.len() >= n).await
    }

    /// Wait until a RESUME was accepted (RESUMED sent).
    pub async fn wait_for_resume(&self, timeout: Duration) -> bool {
        self.wait(timeout, |s| !s.resumes.is_empty()).await
    }

    /// Wait until at least `n` sessions were started or resumed (READY + RESUMED sent).
    pub async fn wait_for_sessions(&self, n: usize, timeout: Duration) -> bool {
        self.wait(timeout, |s| s.sessions_started >= n).await
    }

    /// Wait until at least `n` heartbeats were received.
    pub async fn wait_for_heartbeats(&self, n: usize, timeout: Duration) -> bool {
        self.wait(timeout, |s| s.heartbeats >= n).await
    }
}

/// The MESSAGE_CREATE data of `msg` with message id `id`, as the gateway sends it.
pub(crate) fn incoming_json(id: u64, msg: &IncomingMessage) -> Value {
    let reference = msg.reply_to.clone().map(|(rid, author, text)| {
        let referenced = message_json(rid, msg.channel_id, msg.guild_id, &author, &text, |_| {});
        (rid, referenced)
    });
    message_json(
        id,
        msg.channel_id,
        msg.guild_id,
        &msg.author,
        &msg.content,
        |m| {
            m.insert(
                "mentions".into(),
                Value::Array(msg.mentions.iter().map(Author::to_json).collect()),
            );
            m.insert(
                "mention_roles".into(),
                Value::Array(
                    msg.mention_roles
                        .iter()
                        .map(|r| json!(r.to_string()))
                        .collect(),
                ),
            );
            m.insert("attachments".into(), Value::Array(msg.attachments.clone()));
            if let Some((rid, referenced)) = reference {
                m.insert("type".into(), json!(19));
                m.insert(
                    "message_reference".into(),
                    json!({"message_id": rid.to_string(), "channel_id": msg.channel_id.to_string(),
                           "guild_id": msg.guild_id.map(|g| g.to_string())}),
                );
                m.insert("referenced_message".into(), referenced);
            }
            if let Some((text, files)) = &msg.forwarded {
                m.insert(
                    "message_reference".into(),
                    json!({"type": 1, "message_id": "900000000000000001",
                           "channel_id": "900000000000000002"}),
                );
                m.insert(
                    "message_snapshots".into(),
                    json!([{"message": {"content": text, "type": 0, "flags": 0,
                        "timestamp": "2024-12-31T00:00:00.000000+00:00",
                        "edited_timestamp": null, "mentions": [], "mention_roles": [],
                        "attachments": files, "embeds": [], "components": []}}]),
                );
            }
            if msg.guild_id.is_some() {
                m.insert(
                    "member".into(),
                    json!({"roles": [], "joined_at": "2024-01-01T00:00:00.000000+00:00",
                    "deaf": false, "mute": false}),
                );
            }
        },
    )
}
