//! The `api` channel itself: replies routed to the HTTP requests waiting for them, by
//! inbound id; a streaming request's pieces; and a keyed request's answer kept for its
//! retries (see [`super::idem`]).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use switchboard_channel::{
    Capabilities, Channel, ChannelError, ChatKey, Dialect, InboundMessage, InboundSender,
    OutboundKind, OutboundMessage, Published, SendError, SendReceipt, TokenUsage,
};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use super::idem;
use crate::agent::StreamRegistry;
use crate::bus::Bus;
use crate::llm::DeltaSink;
use crate::store::Store;

struct Waiter {
    key: ChatKey,
    /// The requests waiting, each by its place: one, or several retries of a request with
    /// an `Idempotency-Key` (see [`ApiChannel::join`]).
    replies: Vec<(u64, oneshot::Sender<OutboundMessage>)>,
    /// Unbounded: a slow reader must not lose text (an answer is at most `max_tokens`).
    deltas: Option<mpsc::UnboundedSender<String>>,
}

/// Replies for API requests, routed to the HTTP request waiting for them. The CLI's `cli`
/// channel is another instance under its own name.
pub struct ApiChannel {
    name: &'static str,
    waiters: Mutex<HashMap<String, Waiter>>,
    /// Numbers the places of requests that wait together.
    places: AtomicU64,
    /// Where keyed requests' answers are kept (the `api` channel's store; none for `cli`).
    answers: Option<Arc<dyn Store>>,
    /// Set by [`ApiChannel::close_waiters`]: a keyed request joining later is told at once.
    closed: AtomicBool,
}

/// What the requests still waiting at shutdown are told (see [`ApiChannel::close_waiters`]).
const RESTARTING: &str = "⚠️ The gateway is restarting. Your message is kept and answered once it is back, but not over this request: ask again in a moment to see the answer.";

/// Whether `reply` is the notice of [`ApiChannel::close_waiters`], not an answer: a keyed
/// request is to be retried with its key, which then gets the answer.
pub(super) fn is_restart_notice(reply: &OutboundMessage) -> bool {
    reply.kind == OutboundKind::Error && reply.delivery.is_none() && reply.text == RESTARTING
}

fn restart_notice(key: ChatKey, id: String) -> OutboundMessage {
    let mut reply = OutboundMessage::new(key, RESTARTING);
    reply.kind = OutboundKind::Error;
    reply.in_reply_to_inbound = Some(id);
    reply
}

impl Default for ApiChannel {
    fn default() -> Self {
        Self::named("api")
    }
}

/// Stops waiting for a reply when the request ends. A request that ends before its reply
/// came (its client went away: the Stop button of a chat UI, a client's timeout) withdraws
/// its message: its turn stops as by `/stop`, or it leaves the queue, so the abandoned
/// answer neither holds up the user's next request nor enters the conversation. A keyed
/// request (`place` set) only leaves its place: its retry is to find the answer.
pub(super) struct WaiterGuard<'a> {
    pub(super) api: &'a ApiChannel,
    pub(super) bus: &'a Bus,
    pub(super) key: ChatKey,
    pub(super) id: String,
    pub(super) armed: bool,
    /// Set when the request went away, for a publish still under way to withdraw the
    /// message once it is queued.
    pub(super) gone: Option<Arc<AtomicBool>>,
    /// A keyed request's place among those waiting for `id`.
    pub(super) place: Option<u64>,
}

impl WaiterGuard<'_> {
    /// Another guard takes over.
    pub(super) fn disarm(mut self) {
        self.armed = false;
    }
}

impl Drop for WaiterGuard<'_> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        if let Some(place) = self.place {
            self.api.leave(&self.id, place);
            return;
        }
        if !self.api.forget(&self.id) {
            return;
        }
        if let Some(gone) = &self.gone {
            gone.store(true, Ordering::SeqCst);
        }
        if self.bus.withdraw(&self.key, &self.id) {
            tracing::info!(key = %self.key, id = %self.id, "the request went away: its turn is stopped");
        }
    }
}

/// Longest wait for a withdrawn message to leave the bus ([`ApiChannel::ask_until`]): its
/// turn's tool call running on (a command ends within its timeout once stopped).
const WITHDRAW_WAIT: Duration = Duration::from_secs(5);

impl ApiChannel {
    pub fn named(name: &'static str) -> Self {
        Self {
            name,
            waiters: Mutex::new(HashMap::new()),
            places: AtomicU64::new(0),
            answers: None,
            closed: AtomicBool::new(false),
        }
    }

    /// Keep the answers of keyed requests in `store`, for their retries.
    pub fn keeping_answers(mut self, store: Arc<dyn Store>) -> Self {
        self.answers = Some(store);
        self
    }

    pub(super) fn answers(&self) -> Option<&Arc<dyn Store>> {
        self.answers.as_ref()
    }

    fn waiters(&self) -> std::sync::MutexGuard<'_, HashMap<String, Waiter>> {
        self.waiters.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Publish `msg` on the bus and wait for its reply, given up when `stop` is cancelled
    /// once the message is stored: it is then withdrawn as by `/stop` (its turn stops, or it leaves the queue), and this
    /// returns once the bus no longer holds it (within [`WITHDRAW_WAIT`]), so a shutdown
    /// that follows does not keep it for the next start.
    pub async fn ask_until(
        &self,
        bus: &Arc<Bus>,
        msg: InboundMessage,
        timeout: Duration,
        stop: &CancellationToken,
    ) -> Result<OutboundMessage, String> {
        let id = msg.id.clone();
        let rx = self.wait_for(&id, &msg.key, None);
        let key = msg.key.clone();
        let (publishing, gone) = publish_withdrawable(bus, msg);
        let guard = WaiterGuard {
            api: self,
            bus,
            key: key.clone(),
            id: id.clone(),
            armed: true,
            gone: Some(gone),
            place: None,
        };
        match publishing.await {
            Ok(Ok(Published::Accepted)) => {}
            Ok(Ok(other)) => return Err(format!("message not accepted: {other:?}")),
            Ok(Err(e)) => return Err(e.to_string()),
            Err(e) => return Err(format!("the message could not be taken: {e}")),
        }
        let answer = tokio::select! {
            answer = tokio::time::timeout(timeout, rx) => answer,
            _ = stop.cancelled() => {
                drop(guard); // withdraws it
                // Its turn ends (or it leaves the queue) and its inbox entry goes: then a
                // shutdown cannot keep it.
                let deadline = tokio::time::Instant::now() + WITHDRAW_WAIT;
                while bus.holds(&key, &id) && tokio::time::Instant::now() < deadline {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                return Err("stopped".into());
            }
        };
        match answer {
            // The model could not answer: the caller (`chat`) fails with that message.
            Ok(Ok(reply)) if reply.kind == OutboundKind::Error => Err(reply.text),
            Ok(Ok(reply)) => Ok(reply),
            Ok(Err(_)) => Err("the reply was lost".into()),
            Err(_) => Err(format!("no reply within {timeout:?}")),
        }
    }

    /// Stop waiting for the reply to `id`; whether it had not come yet.
    fn forget(&self, id: &str) -> bool {
        self.waiters().remove(id).is_some()
    }

    /// Wait for the reply to `id` (a fresh id: one request waits for it).
    pub(super) fn wait_for(
        &self,
        id: &str,
        key: &ChatKey,
        deltas: Option<mpsc::UnboundedSender<String>>,
    ) -> oneshot::Receiver<OutboundMessage> {
        let (tx, rx) = oneshot::channel();
        let waiter = Waiter {
            key: key.clone(),
            replies: vec![(0, tx)],
            deltas,
        };
        self.waiters().insert(id.to_string(), waiter);
        rx
    }

    /// Wait for the reply to `id` beside the requests already waiting for it (retries of
    /// one keyed request); `deltas` get its pieces if no request still takes them. The
    /// place to [`ApiChannel::leave`].
    pub(super) fn join(
        &self,
        id: &str,
        key: &ChatKey,
        deltas: Option<mpsc::UnboundedSender<String>>,
    ) -> (u64, oneshot::Receiver<OutboundMessage>) {
        let (tx, rx) = oneshot::channel();
        let place = self.places.fetch_add(1, Ordering::Relaxed);
        let mut waiters = self.waiters();
        if self.closed.load(Ordering::SeqCst) {
            // The gateway stops: nobody is to wait (the answer comes after the restart).
            let _ = tx.send(restart_notice(key.clone(), id.to_string()));
            return (place, rx);
        }
        let waiter = waiters.entry(id.to_string()).or_insert_with(|| Waiter {
            key: key.clone(),
            replies: Vec::new(),
            deltas: None,
        });
        waiter.replies.retain(|(_, r)| !r.is_closed());
        waiter.replies.push((place, tx));
        // A turn running already keeps the pieces' sender it took as it began
        // (`sink_for`): a request joining it gets its final text only.
        if waiter.deltas.as_ref().is_none_or(|d| d.is_closed()) {
            waiter.deltas = deltas;
        }
        (place, rx)
    }

    /// A keyed request stops waiting: its place is given up, the others still wait.
    fn leave(&self, id: &str, place: u64) {
        let mut waiters = self.waiters();
        if let Some(w) = waiters.get_mut(id) {
            w.replies.retain(|(p, r)| *p != place && !r.is_closed());
            if w.replies.is_empty() {
                waiters.remove(id);
            }
        }
    }

    /// Hand `reply` to every request waiting for `id`'s.
    fn deliver(&self, id: &str, reply: &OutboundMessage) {
        let waiter = self.waiters().remove(id);
        for (_, tx) in waiter.map(|w| w.replies).unwrap_or_default() {
            let _ = tx.send(reply.clone());
        }
    }
}

/// Publish `msg` in a task of its own, which withdraws the message once it is queued should
/// the flag returned be set by then: its waiter was gone while it was being stored (a
/// [`WaiterGuard`] given the flag sets it when it leaves, and withdraws it itself later).
pub(super) fn publish_withdrawable(
    bus: &Arc<Bus>,
    msg: InboundMessage,
) -> (
    tokio::task::JoinHandle<Result<Published, crate::bus::BusError>>,
    Arc<AtomicBool>,
) {
    let gone = Arc::new(AtomicBool::new(false));
    let (bus, key, id, flag) = (bus.clone(), msg.key.clone(), msg.id.clone(), gone.clone());
    let publishing = tokio::spawn(async move {
        let published = bus.publish(msg).await;
        if matches!(published, Ok(Published::Accepted)) && flag.load(Ordering::SeqCst) {
            bus.withdraw(&key, &id);
        }
        published
    });
    (publishing, gone)
}

impl ApiChannel {
    /// At shutdown: tell every request still waiting, so the HTTP server can drain. Its turn
    /// is interrupted; the message stays in the conversation and runs after the restart,
    /// but its answer can no longer come back over this request.
    /// A keyed request is told with a 503 (its retry with the same key gets the answer).
    pub fn close_waiters(&self) {
        let waiters = {
            let mut waiters = self.waiters();
            self.closed.store(true, Ordering::SeqCst);
            std::mem::take(&mut *waiters)
        };
        for (id, w) in waiters {
            let reply = restart_notice(w.key, id);
            for (_, tx) in w.replies {
                let _ = tx.send(reply.clone());
            }
        }
    }

    /// Answer the requests waiting for `inbound_id`, if any still do, with `text`; a keyed
    /// request's answer is kept (durable with the store's next flush: this reply does not
    /// pass the outbox).
    fn answer_now(&self, inbound_id: &str, text: &str, usage: Option<TokenUsage>) {
        if let (Some(store), true) = (&self.answers, idem::is_keyed(inbound_id)) {
            let answer = idem::Answer {
                text: text.to_string(),
                kind: OutboundKind::Final,
                usage,
            };
            if let Err(e) = idem::keep_answer_now(store.as_ref(), inbound_id, answer) {
                tracing::error!(id = inbound_id, "a keyed request's answer is not kept: {e}");
            }
        }
        let key = self.waiters().get(inbound_id).map(|w| w.key.clone());
        if let Some(key) = key {
            let mut reply = OutboundMessage::new(key, text);
            reply.in_reply_to_inbound = Some(inbound_id.to_string());
            reply.usage = usage;
            self.deliver(inbound_id, &reply);
        }
    }
}

impl StreamRegistry for ApiChannel {
    fn sink_for(&self, inbound_id: &str) -> Option<DeltaSink> {
        let tx = self.waiters().get(inbound_id)?.deltas.clone()?;
        Some(Arc::new(move |d: &str| {
            // Fails only once the request is gone.
            let _ = tx.send(d.to_string());
        }))
    }

    fn stopped(&self, inbound_id: &str) {
        self.answer_now(inbound_id, "Stopped.", None);
    }

    fn silent(&self, inbound_id: &str, usage: TokenUsage) {
        self.answer_now(inbound_id, "", Some(usage));
    }
}

#[async_trait]
impl Channel for ApiChannel {
    fn name(&self) -> &str {
        self.name
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            edits: false,
            typing: false,
            threads: false,
            max_message_len: usize::MAX,
            dialect: Dialect::Markdown,
        }
    }

    async fn run(
        &self,
        _inbound: InboundSender,
        shutdown: CancellationToken,
    ) -> Result<(), ChannelError> {
        shutdown.cancelled().await;
        Ok(())
    }

    async fn send(&self, msg: &OutboundMessage) -> Result<SendReceipt, SendError> {
        if msg.kind == OutboundKind::Progress {
            return Ok(SendReceipt::default());
        }
        let Some(id) = msg.in_reply_to_inbound.as_deref() else {
            tracing::debug!(key = %msg.key, "API reply to no request");
            return Ok(SendReceipt::default());
        };
        // Kept before the outbox lets go of the reply (when this returns): a retry of the
        // request finds it, after a crash too. The text is the outbox's, redacted.
        let kept = match (&self.answers, idem::is_keyed(id)) {
            (Some(store), true) => idem::keep_answer(store.as_ref(), id, msg).await,
            _ => Ok(()),
        };
        // Nobody may wait (the client left, or this is a replay after a restart).
        self.deliver(id, msg);
        match kept {
            Ok(()) => Ok(SendReceipt::default()),
            // The outbox tries again (the requests waiting have their answer already).
            Err(e) => Err(SendError::Transient(format!(
                "the answer of a keyed request could not be kept: {e}"
            ))),
        }
    }

    async fn typing(&self, _key: &ChatKey) -> Result<(), SendError> {
        Ok(())
    }
}
