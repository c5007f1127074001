//! The Slack adapter of switchboard, on slack-morphism.
//!
//! Intake comes over Socket Mode (`socket`, when an app token is set) or the Events API
//! ([`SlackChannel::handle_events_request`], mounted by the gateway at `POST /slack/events`,
//! when a signing secret is set). Both hand the `event_callback` JSON to `inbound`, which
//! decides what counts and builds the [`switchboard_channel::InboundMessage`]; it is published through the
//! gateway's [`InboundSender`] *before* Slack is acknowledged. Replies go out through
//! `send` (render to mrkdwn, split, `chat.postMessage` in thread, 429s honoured) over the
//! Web API client in `web`. `memory` keeps the few bounded facts intake and replies share.
//!
//! - `config`: [`SlackConfig`].
//! - `web`: Web API calls and their errors.
//! - `inbound`: event rules and keys.
//! - `files`: shared files downloaded into the workspace inbox when the gateway asks
//!   ([`Channel::fetch_files`]), before the message's turn.
//! - `events_api`: signed HTTP intake.
//! - `socket`: Socket Mode supervisor (reconnects, watchdog, shutdown).
//! - `frames`: what the sockets bring (envelopes → intake → acks), and which are open
//!   (readiness, and the catch-up when the first opens after none was).
//! - `catch_up`: after a gap in the connection or a restart, the messages sent meanwhile are
//!   fetched (`conversations.history` / `.replies`) and fed through intake in order.
//! - `recent`: the last message handled per conversation (the state file), where a catch-up
//!   starts, and where one that failed starts again; `queue`: the conversations waiting for
//!   their catch-up; `hold`: a conversation's live events are refused (unacknowledged) for a
//!   while during its catch-up.
//! - `names`: senders' names (`users.info`, cached).
//! - `revoked`: the app uninstalled, or its bot token revoked, while running.
//! - `send`: replies and the 👀 reaction.
//! - `threads`: whether the bot takes part in a thread, and what was said in it before a
//!   message (`conversations.replies`).
//! - `memory`: bounded shared memories.

mod catch_up;
mod config;
mod events_api;
mod files;
mod frames;
mod hold;
mod inbound;
mod memory;
mod names;
mod queue;
mod recent;
mod revoked;
mod send;
mod socket;
mod threads;
mod web;

use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::Duration;

use async_trait::async_trait;
use serde_json::Value;
use switchboard_channel::{
    Capabilities, Channel, ChannelError, ChatKey, Dialect, InboundMessage, InboundSender,
    OutboundMessage, PublishError, Published, SendError, SendReceipt,
};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

pub use config::{SLACK_MAX_MESSAGE_LEN, SlackConfig};
pub use send::{is_conversation_key, is_group_key};

use inbound::Intake;
use memory::Memory;
use web::{BotIdentity, WebApi};

/// The channel name, first part of every key this adapter makes.
pub const NAME: &str = "slack";

/// Longest wait, all together, for the lookups an event may need before it is published
/// (`users.info` for a user seen for the first time, `conversations.replies` for a thread
/// whose root is unknown or whose context the model has not had): Slack wants its ack
/// within 3 s.
const USER_LOOKUP_WAIT: Duration = Duration::from_secs(2);

/// How events come in, once the tokens are checked.
enum Mode {
    /// Socket Mode with this app token.
    Socket(String),
    /// The Events API only; the readiness detail.
    EventsApi(&'static str),
}

const EVENTS_API_WAITING: &str = "events api: waiting for POST /slack/events";
const EVENTS_API_ONLY: &str =
    "events api only (POST /slack/events): the app token was refused, socket mode is off";

/// Files downloaded at once, across chats.
const PARALLEL_DOWNLOADS: usize = 8;

/// Why an event could not be taken in; Slack must not be acknowledged.
#[derive(Debug, thiserror::Error)]
pub(crate) enum IntakeError {
    /// Why, in words (what `run` is doing, or why it ended).
    #[error("the slack channel is not running: {0}")]
    NotRunning(String),
    #[error("the conversation's catch-up is still running")]
    CatchingUp,
    #[error("the sender's name is not known yet, and names decide who may write")]
    NameUnknown,
    #[error(transparent)]
    Publish(#[from] PublishError),
}

/// State shared by the channel, its Socket Mode callbacks and its HTTP handler.
pub(crate) struct Shared {
    pub cfg: SlackConfig,
    pub web: WebApi,
    /// For file downloads (plain HTTP GETs, not Web API calls).
    http: reqwest::Client,
    /// Downloads under way ([`PARALLEL_DOWNLOADS`]).
    downloads: tokio::sync::Semaphore,
    identity: RwLock<Option<BotIdentity>>,
    inbound: RwLock<Option<InboundSender>>,
    memory: Mutex<Memory>,
    /// When Socket Mode last received something (`hello` or an event).
    last_activity: Mutex<tokio::time::Instant>,
    /// What `run` is doing, or why it ended: said when an event cannot be taken in.
    state: Mutex<String>,
    /// Slack said the app's access is gone (`revoked`): why, and what to do. The channel
    /// stays reported not ready until a restart.
    revoked: Mutex<Option<String>>,
    /// Where catch-ups start, and the live events waiting for one.
    catch_up: catch_up::State,
}

impl Shared {
    pub fn memory(&self) -> MutexGuard<'_, Memory> {
        self.memory.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn inbound(&self) -> Option<InboundSender> {
        self.inbound
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn set_inbound(&self, s: Option<InboundSender>) {
        *self.inbound.write().unwrap_or_else(|e| e.into_inner()) = s;
    }

    fn identity(&self) -> Option<BotIdentity> {
        self.identity
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn set_state(&self, state: impl Into<String>) {
        *self.state.lock().unwrap_or_else(|e| e.into_inner()) = state.into();
    }

    fn not_running(&self) -> IntakeError {
        IntakeError::NotRunning(self.state.lock().unwrap_or_else(|e| e.into_inner()).clone())
    }

    pub fn touch(&self) {
        *self.last_activity.lock().unwrap_or_else(|e| e.into_inner()) = tokio::time::Instant::now();
    }

    pub fn idle_for(&self) -> Duration {
        self.last_activity
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .elapsed()
    }

    pub fn set_connected(&self, connected: bool, detail: &str) {
        let Some(i) = self.inbound() else { return };
        let revoked = self
            .revoked
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        match revoked {
            // A socket that opens again does not make up for tokens that no longer work.
            Some(why) if connected => i.set_connected(NAME, false, &why),
            _ => i.set_connected(NAME, connected, detail),
        }
    }

    /// Take in one live `event_callback` (see [`Shared::take_in`]), unless its conversation's
    /// catch-up is under way: fetched messages go first, so the event is refused at once
    /// (Slack sends it again later) and that catch-up moves to the front. Never waits for
    /// it: on Socket Mode this runs in the socket's read loop, where pongs are read too.
    pub async fn intake(self: &Arc<Self>, callback: &Value) -> Result<(), IntakeError> {
        if let Some(lost) = self.identity().and_then(|me| revoked::lost(callback, &me)) {
            self.lose_access(lost);
            return Ok(());
        }
        if let Some((channel, ..)) = inbound::position(callback) {
            let now = std::time::Instant::now();
            match self.catch_up.holds.check(channel, now, catch_up::LIVE_HOLD) {
                hold::Check::Go => {}
                hold::Check::Held { first } => {
                    if first {
                        self.catch_up.queue.prioritize(channel);
                    }
                    return Err(IntakeError::CatchingUp);
                }
                hold::Check::Opened => warn!(%channel, "slack: a catch-up is slow; live \
                    messages go through now, the fetched ones follow them"),
            }
        }
        self.take_in(callback).await
    }

    /// Decide about one `event_callback` (live, or a fetched message dressed as one) and
    /// publish it when it counts. `Ok` means Slack may be acknowledged (published, duplicate,
    /// or ignored on purpose); the message is then noted handled for the next catch-up.
    pub(crate) async fn take_in(self: &Arc<Self>, callback: &Value) -> Result<(), IntakeError> {
        // Everything before the publish shares Slack's 3 s ack window.
        let started = tokio::time::Instant::now();
        let (Some(inbound), Some(me)) = (self.inbound(), self.identity()) else {
            return Err(self.not_running());
        };
        let lookups_until = started + USER_LOOKUP_WAIT;
        // Without threads, talk in one never counts as addressed (see `inbound::convert`).
        let thread = inbound::thread_to_look_up(callback, &me).filter(|_| self.cfg.reply_in_thread);
        let mut read = None;
        if let Some(thread) = thread {
            read = self.learn_thread(&me, thread, lookups_until).await;
        }
        let decision = {
            let mem = self.memory();
            inbound::convert(callback, &me, self.cfg.reply_in_thread, |c, t| {
                mem.threads.get(&(c.to_string(), t.to_string())) == Some(&true)
            })
        };
        let mut c = match decision {
            Intake::Ignore(why) => {
                debug!(reason = why, "slack event ignored");
                self.note_handled(callback, false);
                return Ok(());
            }
            Intake::Publish(c) => c,
        };
        // A message in a thread: what was said there before it, read already or (for one
        // the bot is to answer) asked for alongside the sender's name.
        let thread = c.msg.reply_to.clone().map(|root| (c.channel.clone(), root));
        let addressed = c.msg.mentions_bot || !c.msg.is_group;
        let ts = c.ts.clone();
        let (_, context) = tokio::join!(
            self.name_sender(&mut c.msg.sender, lookups_until),
            self.thread_context(&me, thread, &ts, read, addressed, lookups_until),
        );
        if let Some(text) = context.as_ref().and_then(|x| x.text.clone()) {
            c.msg.metadata.insert("reply_to_text".into(), text.into());
        }
        if self.cfg.names_decide_access
            && c.msg.sender.username.is_none()
            && !self.cfg.ids_let_in.contains(&c.msg.sender.id)
            && !self.memory().users.contains(&c.msg.sender.id)
        {
            // Its lookup goes on, and fills the cache for the redelivery.
            return Err(IntakeError::NameUnknown);
        }
        if !c.files.is_empty() {
            let pending = files::Pending {
                tag: c.msg.id.rsplit(':').next().unwrap_or_default().to_string(),
                files: std::mem::take(&mut c.files),
            };
            switchboard_channel::files::leave_pending(&mut c.msg, &pending);
        }
        let key = c.msg.key.to_string();
        // A thread the bot answers in (a reply addressed to it, or a mention it answers in
        // a new thread): its replies are caught up on after a gap.
        let in_thread =
            c.msg.reply_to.is_some() || (c.joined_thread.is_some() && self.cfg.reply_in_thread);
        let answers_in_thread = (c.msg.mentions_bot || !c.msg.is_group) && in_thread;
        let published = inbound.publish(c.msg).await?;
        debug!(%key, ?published, "slack message published");
        // Only a message that got in may mark a thread as the bot's or take the 👀: one the
        // gateway ignored (a stranger's mention) leaves no trace here.
        let accepted = published == Published::Accepted;
        if accepted {
            let mut mem = self.memory();
            if let Some(t) = c.joined_thread {
                // A thread this message starts: its conversation will hold all of it, so
                // its replies need no context read from Slack.
                if self.cfg.reply_in_thread && t.1 == c.ts {
                    mem.context_given.insert(t.clone(), ());
                }
                mem.threads.insert(t, true);
            }
            mem.last_message.insert(key, (c.channel, c.ts));
            if let Some(x) = context {
                mem.context_given.insert(x.thread, ());
            }
        }
        self.note_handled(callback, accepted && answers_in_thread);
        Ok(())
    }

    /// Note the message of `callback` handled, for the next catch-up; `bot_thread`: the bot
    /// answers in its thread (a top-level message's: the one its answer starts).
    fn note_handled(&self, callback: &Value, bot_thread: bool) {
        let Some((channel, ts, thread_ts, kind)) = inbound::position(callback) else {
            return;
        };
        let thread = thread_ts.or(bot_thread.then_some(ts));
        self.catch_up.recent.handled(
            recent::Handled {
                channel,
                kind,
                ts: recent::Ts::new(ts),
                thread: thread.map(recent::Ts::new),
                bot_thread,
            },
            std::time::Instant::now(),
        );
    }
}

/// The Slack channel: Socket Mode and/or Events API intake, Web API replies.
#[derive(Clone)]
pub struct SlackChannel {
    shared: Arc<Shared>,
}

impl SlackChannel {
    /// Build the adapter (no network yet; `run` checks the tokens).
    pub fn new(cfg: SlackConfig) -> Result<Self, ChannelError> {
        if cfg.bot_token.trim().is_empty() {
            return Err(ChannelError::Unauthorized("slack: empty bot token".into()));
        }
        // Every error text is scrubbed of them from now on (see `web::short`).
        switchboard_channel::redact::register(&cfg.bot_token);
        for s in [&cfg.app_token, &cfg.signing_secret].into_iter().flatten() {
            switchboard_channel::redact::register(s);
        }
        let web = WebApi::new(&cfg.api_url, &cfg.bot_token)?;
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::limited(5))
            .build()
            .map_err(|e| ChannelError::Other(format!("slack: http client: {e}")))?;
        Ok(Self {
            shared: Arc::new(Shared {
                cfg,
                web,
                http,
                downloads: tokio::sync::Semaphore::new(PARALLEL_DOWNLOADS),
                identity: RwLock::new(None),
                inbound: RwLock::new(None),
                memory: Mutex::new(Memory::default()),
                last_activity: Mutex::new(tokio::time::Instant::now()),
                state: Mutex::new("not started".into()),
                revoked: Mutex::new(None),
                catch_up: catch_up::State::default(),
            }),
        })
    }

    /// Socket Mode when an app token is set and Slack takes it; else the Events API. A
    /// refused app token ends the channel — unless a signing secret is set too (both, while
    /// switching over): then events keep coming in over the Events API, and the log says
    /// which variable to fix. `None` on shutdown.
    async fn choose_mode(
        &self,
        inbound: &InboundSender,
        shutdown: &CancellationToken,
    ) -> Result<Option<Mode>, ChannelError> {
        let cfg = &self.shared.cfg;
        let Some(app_token) = &cfg.app_token else {
            return match cfg.signing_secret {
                Some(_) => Ok(Some(Mode::EventsApi(EVENTS_API_WAITING))),
                None => Err(ChannelError::Other(
                    "slack: set an app token (Socket Mode) or a signing secret (Events API)".into(),
                )),
            };
        };
        self.shared
            .set_state("starting: checking the app token (apps.connections.open)");
        let checked = tokio::select! {
            _ = shutdown.cancelled() => return Ok(None),
            r = socket::check_app_token(&self.shared, app_token) => r,
        };
        let Err(e) = checked else {
            return Ok(Some(Mode::Socket(app_token.clone())));
        };
        let var = &cfg.app_token_env;
        if cfg.signing_secret.is_some() {
            warn!(error = %e, "slack app token (${var}) refused by apps.connections.open: \
                Socket Mode is off, and events come in only over the Events API (POST \
                /slack/events). If the Slack app uses Socket Mode, put a valid app-level \
                token (xapp-…, scope connections:write) in ${var} and restart; if it uses \
                the Events API, unset ${var}");
            return Ok(Some(Mode::EventsApi(EVENTS_API_ONLY)));
        }
        inbound.set_connected(NAME, false, "app token refused");
        Err(ChannelError::Unauthorized(format!(
            "slack app token (${var}) refused by apps.connections.open: {e}"
        )))
    }

    /// `auth.test` until it answers; refused credentials end the channel.
    async fn identify(
        &self,
        shutdown: &CancellationToken,
    ) -> Result<Option<BotIdentity>, ChannelError> {
        let mut backoff = Duration::from_secs(1);
        loop {
            let r = tokio::select! {
                _ = shutdown.cancelled() => return Ok(None),
                r = self.shared.web.auth_test() => r,
            };
            match r {
                Ok(me) => return Ok(Some(me)),
                Err(e) if e.is_auth() => {
                    return Err(ChannelError::Unauthorized(format!(
                        "slack bot token refused by auth.test: {e}"
                    )));
                }
                Err(e) => {
                    warn!(error = %e, retry_in = ?backoff, "slack auth.test failed");
                    tokio::select! {
                        _ = shutdown.cancelled() => return Ok(None),
                        _ = tokio::time::sleep(backoff) => {}
                    }
                    backoff = (backoff * 2).min(Duration::from_secs(60));
                }
            }
        }
    }
}

#[async_trait]
impl Channel for SlackChannel {
    fn name(&self) -> &str {
        NAME
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            edits: true,
            // Slack bots have no typing indicator: `typing` adds a 👀 reaction to the
            // triggering message instead (once per message).
            typing: true,
            threads: true,
            max_message_len: self.shared.cfg.effective_max_len(),
            dialect: Dialect::SlackMrkdwn,
        }
    }

    async fn run(
        &self,
        inbound: InboundSender,
        shutdown: CancellationToken,
    ) -> Result<(), ChannelError> {
        let sh = &self.shared;
        sh.set_state("starting: checking the bot token (auth.test)");
        // Until auth.test answers, the gateway reports the channel as "connecting".
        let me = match self.identify(&shutdown).await {
            Ok(Some(me)) => me,
            Ok(None) => {
                sh.set_state("stopped");
                return Ok(());
            }
            Err(e) => {
                sh.set_state(format!("stopped: {e}"));
                inbound.set_connected(NAME, false, "bot token refused");
                return Err(e);
            }
        };
        info!(user_id = %me.user_id, "slack bot identified");
        *sh.identity.write().unwrap_or_else(|e| e.into_inner()) = Some(me);
        let mode = match self.choose_mode(&inbound, &shutdown).await {
            Ok(Some(mode)) => mode,
            Ok(None) => {
                sh.set_state("stopped");
                return Ok(());
            }
            Err(e) => {
                sh.set_state(format!("stopped: {e}"));
                return Err(e);
            }
        };
        let saver = sh.cfg.state_file.clone().map(|path| {
            let recent = &sh.catch_up.recent;
            recent.load(
                &path,
                std::time::Instant::now(),
                std::time::SystemTime::now(),
            );
            let stop = CancellationToken::new();
            let task = tokio::spawn(catch_up::keep_saved(sh.clone(), path, stop.clone()));
            (stop, task)
        });
        sh.set_state("running");
        let result = match mode {
            // The catch-up starts with the first socket's `hello` (see `frames`).
            Mode::Socket(app_token) => {
                sh.set_inbound(Some(inbound.clone()));
                socket::run(sh.clone(), &app_token, shutdown).await
            }
            Mode::EventsApi(detail) => {
                // Held before intake opens: a live event cannot overtake the catch-up.
                let todo = catch_up::plan(sh);
                sh.set_inbound(Some(inbound.clone()));
                catch_up::start(sh.clone(), todo, shutdown.clone());
                inbound.set_connected(NAME, true, detail);
                shutdown.cancelled().await;
                Ok(())
            }
        };
        sh.set_inbound(None);
        match &result {
            Ok(()) => sh.set_state("stopped"),
            Err(e) => sh.set_state(format!("stopped: {e}")),
        }
        if let Some((stop, task)) = saver {
            // Written once more as it stops.
            stop.cancel();
            let _ = task.await;
        }
        inbound.set_connected(NAME, false, "stopped");
        result
    }

    async fn send(&self, msg: &OutboundMessage) -> Result<SendReceipt, SendError> {
        send::send(&self.shared, self.capabilities(), msg).await
    }

    async fn typing(&self, key: &ChatKey) -> Result<(), SendError> {
        send::react_eyes(&self.shared, key).await
    }

    async fn fetch_files(&self, msg: &mut InboundMessage) {
        let sh = &self.shared;
        let downloader = files::Downloader {
            http: &sh.http,
            bot_token: &sh.cfg.bot_token,
            api_url: &sh.cfg.api_url,
            inbox: sh.cfg.inbox_dir.as_deref(),
            max_bytes: sh.cfg.max_file_bytes,
            timeout: sh.cfg.file_download_timeout,
            slots: &sh.downloads,
        };
        downloader.fetch_into(msg).await;
    }
}
