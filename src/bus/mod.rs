//! The bus: durable intake, per-chat ordering, cross-chat parallelism, durable replies.
//!
//! `publish` dedups by message id and writes the inbox entry durably (group commit) before it
//! returns, so an adapter acknowledges upstream only what cannot be lost. Each `ChatKey` with
//! work gets a worker that runs one turn at a time (joining messages that waited) under a
//! global cap on concurrent turns; the worker disappears when its queue is empty. A turn's
//! replies go to the outbox in the same atomic write that completes its inbox entries, then
//! are delivered with retries; replies still failing after them wait, in their chat's order,
//! for the outbox's sweep.

mod at_once;
mod outbox;
mod replay;
mod seen;
mod worker;

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use switchboard_channel::{ChatKey, InboundMessage, OutboundMessage, Published};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::metrics::Metrics;
use crate::store::{Applied, Batch, Store, StoreError, Tree};

pub use outbox::{ChannelRegistry, Delivery, Outbox, SWEEP_EVERY, record as record_replies};
pub use seen::SEEN_RETENTION;
pub(crate) use seen::prune_days;

/// Most messages joined into one turn.
const MAX_JOIN: usize = 20;
/// Most messages held in memory waiting for their turn, across all chats. Past this,
/// `publish` waits (backpressure: the adapter does not acknowledge upstream meanwhile).
const MAX_QUEUED: usize = 16_384;
/// Most messages stored by one write of [`Bus::publish_many`].
const MAX_PUBLISH: usize = 1_024;
/// Starts after a crash a message may be resumed at: one the gateway keeps dying on (a crash
/// in its turn would otherwise repeat at every start) is given up after this many, and its
/// sender told.
pub const MAX_RESUMES: u64 = 5;
/// In `Tree::Meta` while the last run ended cleanly: every turn finished or put back.
const CLEAN_STOP: &[u8] = b"clean_stop";

/// One turn's input.
pub struct TurnInput {
    pub key: ChatKey,
    /// One or more messages, oldest first (several when they waited for a running turn).
    pub messages: Vec<InboundMessage>,
    /// Cancelled by `/stop` or by shutdown.
    pub cancel: CancellationToken,
}

/// What a turn produced: replies and store writes to commit with the inbox completion.
#[derive(Default)]
pub struct TurnOutput {
    pub replies: Vec<OutboundMessage>,
    pub writes: Batch,
}

/// The turn was interrupted by shutdown; its messages stay in the inbox for the next start.
#[derive(Debug)]
pub struct Interrupted;

/// Runs turns. The agent implements it; the bus knows nothing else about the agent.
#[async_trait]
pub trait TurnHandler: Send + Sync + 'static {
    async fn handle(&self, turn: TurnInput) -> Result<TurnOutput, Interrupted>;
    /// `/stop` in `key`: stop the chat's work outside its turns (its sub-agents); whether
    /// there was any.
    fn stop_background(&self, _key: &ChatKey) -> bool {
        false
    }
    /// These messages were stopped before their turn began (`/stop` while they waited):
    /// whoever waits for their answer (an API request) is told.
    fn stopped_before_start(&self, _messages: &[InboundMessage]) {}
    /// The answer to `/status` in `key`, given at once rather than behind the chat's
    /// running turn; `None` leaves the command to a turn.
    fn status(&self, _key: &ChatKey) -> Option<String> {
        None
    }
    /// The platform refused for good the reply to a turn that ran these cron jobs (the
    /// chat is gone, the bot was removed from it): `why` is its word.
    fn job_replies_refused(&self, _jobs: Vec<String>, _why: String) {}
}

/// Why a publish failed. The adapter must not acknowledge upstream.
#[derive(Debug, thiserror::Error)]
pub enum BusError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("the gateway is shutting down")]
    ShuttingDown,
    #[error("message cannot be stored: {0}")]
    Encode(String),
}

struct Queued {
    seq: u64,
    msg: InboundMessage,
    /// Resumed after a crash, when it may have been running: its start is counted
    /// (see [`MAX_RESUMES`]).
    counted: bool,
    _permit: OwnedSemaphorePermit,
}

#[derive(Default)]
struct Slot {
    pending: VecDeque<Queued>,
    /// Present while a turn of this key runs: cancels it (`/stop`).
    running: Option<CancellationToken>,
    /// The ids of the messages that turn answers.
    running_ids: Vec<String>,
    /// Who wrote them (a turn the gateway started: no one).
    running_for: Vec<String>,
}

/// The message bus. Cheap to share as `Arc<Bus>`.
pub struct Bus {
    store: Arc<dyn Store>,
    /// The agent. It refers back to the bus (publisher, `/status`, scheduler), so a stopped
    /// gateway drops it ([`Bus::release_handler`]) to let the bus and its store go.
    handler: RwLock<Option<Arc<dyn TurnHandler>>>,
    slots: Mutex<HashMap<ChatKey, Slot>>,
    turns: Arc<Semaphore>,
    queued: Arc<Semaphore>,
    /// Held by the turn of a message resumed after two crashes or more (see `replay`): such
    /// turns run one at a time, so a crash counts only against the one running.
    probation: Arc<tokio::sync::Mutex<()>>,
    outbox: Outbox,
    metrics: Arc<Metrics>,
    shutdown: CancellationToken,
    /// Cancels the turns still running (they stay in the inbox): at shutdown itself, or
    /// after the gateway's grace for running turns ([`Bus::with_turn_grace`]).
    interrupt: CancellationToken,
    tracker: TaskTracker,
    /// The chat workers (also on `tracker`): [`Bus::turns_settled`] waits for them.
    workers: TaskTracker,
    /// Notified when the last chat with work leaves the slot table.
    idle: tokio::sync::Notify,
    /// Whether new messages are taken: not while the start-up [`Bus::replay`] has yet to
    /// queue the last run's unfinished ones, which must run first (and only once).
    intake: tokio::sync::watch::Sender<bool>,
    /// Whether [`Bus::replay`] ran (it took up the last run's clean-stop mark).
    replayed: std::sync::atomic::AtomicBool,
    /// Whether the config names owners: only then is `/stop` in a group held to the
    /// person answered or an owner (where none is named, everyone is trusted as one).
    owners_named: std::sync::atomic::AtomicBool,
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Add `msg` to `batch` as an inbox entry with its id marked seen; its inbox sequence.
fn stage(
    store: &dyn Store,
    batch: &mut Batch,
    now: u64,
    msg: &InboundMessage,
) -> Result<u64, BusError> {
    let seq = store.next_id()?;
    let body = serde_json::to_vec(msg).map_err(|e| BusError::Encode(e.to_string()))?;
    seen::mark(batch, now, &msg.id);
    batch.put(Tree::Inbox, seq.to_be_bytes().to_vec(), body);
    Ok(seq)
}

/// Accept `msg` durably while no gateway runs (the CLI on the store): written to the inbox
/// as [`Bus::publish`] writes it, and run by the next gateway's start-up replay.
pub async fn publish_offline(
    store: &dyn Store,
    mut msg: InboundMessage,
) -> Result<Published, BusError> {
    msg.truncate_oversized();
    let mut batch = Batch::default();
    stage(store, &mut batch, now_secs(), &msg)?;
    Ok(match store.commit(batch).await? {
        Applied::Conflict => Published::Duplicate,
        Applied::Done => Published::Accepted,
    })
}

impl Bus {
    /// A bus whose running turns are interrupted as soon as `shutdown` is cancelled.
    pub fn new(
        store: Arc<dyn Store>,
        channels: ChannelRegistry,
        max_concurrent_turns: usize,
        metrics: Arc<Metrics>,
        shutdown: CancellationToken,
        tracker: TaskTracker,
    ) -> Arc<Self> {
        let interrupt = shutdown.clone();
        Self::with_turn_grace(
            store,
            channels,
            max_concurrent_turns,
            metrics,
            (shutdown, interrupt),
            tracker,
        )
    }

    /// A bus that stops starting turns when `stop.0` (shutdown) is cancelled, and
    /// interrupts the running ones only when `stop.1` is: in between they may finish.
    pub fn with_turn_grace(
        store: Arc<dyn Store>,
        channels: ChannelRegistry,
        max_concurrent_turns: usize,
        metrics: Arc<Metrics>,
        (shutdown, interrupt): (CancellationToken, CancellationToken),
        tracker: TaskTracker,
    ) -> Arc<Self> {
        let outbox = Outbox::new(store.clone(), channels, metrics.clone(), shutdown.clone());
        Arc::new(Self {
            store,
            handler: RwLock::new(None),
            slots: Mutex::new(HashMap::new()),
            turns: Arc::new(Semaphore::new(max_concurrent_turns.max(1))),
            queued: Arc::new(Semaphore::new(MAX_QUEUED)),
            probation: Default::default(),
            outbox,
            metrics,
            shutdown,
            interrupt,
            tracker,
            workers: TaskTracker::new(),
            idle: tokio::sync::Notify::new(),
            intake: tokio::sync::watch::Sender::new(true),
            replayed: Default::default(),
            owners_named: Default::default(),
        })
    }

    /// Once shutdown began: wait until no chat worker is left, i.e. the turns that were
    /// running have ended and their replies were handed to the outbox (no new turn starts).
    pub async fn turns_settled(&self) {
        self.workers.close();
        self.workers.wait().await;
    }

    /// Hold new messages until [`Bus::replay`] has queued the last run's (call before the
    /// channels, the HTTP API and the scheduler start).
    pub fn hold_intake_until_replayed(&self) {
        self.intake.send_replace(false);
    }

    /// Set the turn handler (before messages flow).
    pub fn set_handler(&self, handler: Arc<dyn TurnHandler>) {
        *self.handler.write().unwrap_or_else(|p| p.into_inner()) = Some(handler);
    }

    /// Drop the turn handler once no turn runs any more (a stopped gateway): the reference
    /// cycle through it would otherwise keep the bus, the store and its lock alive for as
    /// long as the process lives.
    pub fn release_handler(&self) {
        self.handler
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .take();
    }

    fn handler(&self) -> Option<Arc<dyn TurnHandler>> {
        self.handler
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Wait until no chat has work any more (after the last one finished since the previous
    /// call).
    pub async fn became_idle(&self) {
        self.idle.notified().await;
    }

    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    pub fn outbox(&self) -> &Outbox {
        &self.outbox
    }

    /// Durably accept a message, or drop it as a duplicate. When this returns `Ok`, the
    /// message survives a crash and will be handled exactly once.
    pub async fn publish(self: &Arc<Self>, msg: InboundMessage) -> Result<Published, BusError> {
        let mut results = self.publish_many(vec![msg]).await?;
        Ok(results.pop().unwrap_or(Published::Duplicate))
    }

    /// Durably accept several messages with one atomic write and one flush (a scheduler
    /// round): one result per message, in order. Same promise as [`Bus::publish`].
    pub async fn publish_many(
        self: &Arc<Self>,
        msgs: Vec<InboundMessage>,
    ) -> Result<Vec<Published>, BusError> {
        // In a task of its own: a caller that gives up midway (an HTTP client gone, a
        // platform's timeout) must not leave a message stored and marked seen but never
        // queued, which its redelivery, a duplicate now, could not fix.
        let bus = self.clone();
        self.tracker
            .spawn(async move { bus.publish_now(msgs).await })
            .await
            .map_err(|_| BusError::ShuttingDown)?
    }

    async fn publish_now(
        self: &Arc<Self>,
        msgs: Vec<InboundMessage>,
    ) -> Result<Vec<Published>, BusError> {
        // A sub-agent's result is still taken while the gateway stops (its turn had said
        // one would come): kept in the inbox, it runs at the next start.
        let results_only = || {
            msgs.iter().all(|m| {
                matches!(
                    m.origin,
                    switchboard_channel::Origin::System(
                        switchboard_channel::SystemOrigin::Subagent { .. }
                    )
                )
            })
        };
        if self.shutdown.is_cancelled() && !results_only() {
            return Err(BusError::ShuttingDown);
        }
        if !*self.intake.borrow() {
            let mut open = self.intake.subscribe();
            tokio::select! {
                r = open.wait_for(|open| *open) => { r.map_err(|_| BusError::ShuttingDown)?; }
                _ = self.shutdown.cancelled() => return Err(BusError::ShuttingDown),
            }
        }
        let mut results = vec![Published::Duplicate; msgs.len()];
        let mut fresh: Vec<(usize, InboundMessage)> = Vec::with_capacity(msgs.len());
        // Repeats within one call (a single message cannot repeat itself).
        let mut ids = std::collections::HashSet::new();
        let several = msgs.len() > 1;
        for (i, mut msg) in msgs.into_iter().enumerate() {
            if msg.truncate_oversized() {
                tracing::info!(id = %msg.id, "inbound text cut at {} characters", switchboard_channel::MAX_INBOUND_CHARS);
            }
            // Ids seen before are refused by the durable write (`seen::mark`).
            if several && !ids.insert(msg.id.clone()) {
                self.metrics.duplicates.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            let command = msg.command();
            if command.as_deref() == Some("stop") {
                // Its sender's messages in its chat just before it in this delivery (a
                // backlog after an outage, one poll) are what it stops: they never run.
                // Another member's question in the same group still does.
                let (stopped, kept) = fresh
                    .into_iter()
                    .partition(|(_, m)| m.key == msg.key && m.sender.id == msg.sender.id);
                fresh = kept;
                results[i] = self.stop(msg, stopped, &mut results).await?;
                continue;
            }
            if command.as_deref() == Some("status")
                && msg.origin == switchboard_channel::Origin::User
                && let Some(text) = self.handler().and_then(|h| h.status(&msg.key))
            {
                results[i] = self.answer_at_once(msg, text).await?;
                continue;
            }
            fresh.push((i, msg));
        }
        let mut rest = fresh.into_iter().peekable();
        while rest.peek().is_some() {
            let chunk: Vec<(usize, InboundMessage)> = rest.by_ref().take(MAX_PUBLISH).collect();
            self.accept(chunk, &mut results).await?;
        }
        Ok(results)
    }

    /// Store `chunk` (new ids, at most [`MAX_PUBLISH`]) in one write, flush, then queue it.
    async fn accept(
        self: &Arc<Self>,
        chunk: Vec<(usize, InboundMessage)>,
        results: &mut [Published],
    ) -> Result<(), BusError> {
        // Backpressure before the durable write: a full queue makes the adapter wait.
        let mut permits = tokio::select! {
            // A room free at once is taken also while stopping (a sub-agent's result).
            biased;
            p = self.queued.clone().acquire_many_owned(chunk.len() as u32) => p.map_err(|_| BusError::ShuttingDown)?,
            _ = self.shutdown.cancelled() => return Err(BusError::ShuttingDown),
        };
        let now = now_secs();
        let mut batch = Batch::default();
        let mut accepted = Vec::with_capacity(chunk.len());
        for (i, msg) in chunk {
            let seq = stage(self.store.as_ref(), &mut batch, now, &msg)?;
            accepted.push((i, seq, msg));
        }
        if self.store.commit(batch).await? == Applied::Conflict {
            // Another publish of one of these ids won the race.
            drop(permits);
            if accepted.len() == 1 {
                self.metrics.duplicates.fetch_add(1, Ordering::Relaxed);
                return Ok(());
            }
            for (i, _, msg) in accepted {
                let mut one: Vec<Published> = Box::pin(self.publish_now(vec![msg])).await?;
                results[i] = one.pop().unwrap_or(Published::Duplicate);
            }
            return Ok(());
        }
        for (i, seq, msg) in accepted {
            self.metrics.inbound(&msg.key.channel);
            let permit = permits
                .split(1)
                .expect("one queue permit was acquired per message");
            self.enqueue(Queued {
                seq,
                msg,
                counted: false,
                _permit: permit,
            });
            results[i] = Published::Accepted;
        }
        Ok(())
    }

    /// Send replies that did not come from a turn (pairing codes, notices, the `message`
    /// tool), durably. In a task of its own: a caller that gives up (a tool's time limit,
    /// `/stop`, a client gone) must not cut a send short, which would send it twice.
    pub async fn send_direct(
        &self,
        replies: Vec<OutboundMessage>,
    ) -> Result<Vec<Delivery>, BusError> {
        let outbox = self.outbox.clone();
        let outcomes = self
            .tracker
            .spawn(async move { outbox.record_and_deliver(replies, Batch::default()).await })
            .await
            .map_err(|_| BusError::ShuttingDown)??;
        Ok(outcomes)
    }

    /// Record replies durably, then deliver them in the background: for intake, which must
    /// not hold up the platform's acknowledgement (and every other chat's messages) while a
    /// send and its retries run.
    pub async fn send_direct_in_background(
        &self,
        replies: Vec<OutboundMessage>,
    ) -> Result<(), BusError> {
        self.record_then_deliver(replies, Batch::default()).await
    }

    /// Record `replies` with `writes`, then deliver them in the background.
    async fn record_then_deliver(
        &self,
        replies: Vec<OutboundMessage>,
        writes: Batch,
    ) -> Result<(), BusError> {
        let entries = self.outbox.record(replies, writes).await?;
        let outbox = self.outbox.clone();
        self.tracker
            .spawn(async move { outbox.deliver(entries).await });
        Ok(())
    }

    fn enqueue(self: &Arc<Self>, q: Queued) {
        let key = q.msg.key.clone();
        let spawn = {
            let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
            let fresh = !slots.contains_key(&key);
            slots.entry(key.clone()).or_default().pending.push_back(q);
            fresh
        };
        self.metrics.queue_depth.fetch_add(1, Ordering::Relaxed);
        if spawn {
            self.metrics.active_workers.fetch_add(1, Ordering::Relaxed);
            let bus = self.clone();
            let worker = self
                .workers
                .track_future(async move { bus.run_worker(key).await });
            self.tracker.spawn(worker);
        }
    }

    /// Take the next batch for `key`, marking a turn as running; `None` removes the slot.
    fn next_batch(&self, key: &ChatKey, cancel: &CancellationToken) -> Option<Vec<Queued>> {
        let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        let slot = slots.get_mut(key)?;
        let first = match slot.pending.pop_front() {
            Some(q) => q,
            None => {
                slots.remove(key);
                if slots.is_empty() {
                    // A burst of chats leaves a large table behind; give it back when idle.
                    slots.shrink_to(64);
                    self.idle.notify_one();
                }
                return None;
            }
        };
        let joinable = |m: &InboundMessage| {
            m.origin == switchboard_channel::Origin::User
                && m.metadata.get("join").and_then(|v| v.as_bool()) != Some(false)
                && !m.text.trim_start().starts_with('/')
        };
        let mut batch = vec![first];
        // Also after a crash: the messages joined then are joined again, so the turn goes
        // on from its saved progress (see `agent::resume`); only the first is counted.
        if joinable(&batch[0].msg) {
            while batch.len() < MAX_JOIN {
                match slot.pending.front() {
                    Some(next) if joinable(&next.msg) => {
                        batch.extend(slot.pending.pop_front());
                    }
                    _ => break,
                }
            }
        }
        slot.running = Some(cancel.clone());
        slot.running_ids = batch.iter().map(|q| q.msg.id.clone()).collect();
        slot.running_for = batch
            .iter()
            .filter(|q| q.msg.origin == switchboard_channel::Origin::User)
            .map(|q| q.msg.sender.id.clone())
            .collect();
        self.metrics
            .queue_depth
            .fetch_sub(batch.len() as u64, Ordering::Relaxed);
        Some(batch)
    }

    fn turn_finished(&self, key: &ChatKey) {
        let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(slot) = slots.get_mut(key) {
            slot.running = None;
            slot.running_ids.clear();
            slot.running_for.clear();
        }
    }

    /// Number of chats with a live worker (for tests and `/status`).
    pub fn active_chats(&self) -> usize {
        self.slots.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// Messages of `key` waiting behind its running turn.
    pub fn queued_for(&self, key: &ChatKey) -> usize {
        self.slots
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(key)
            .map_or(0, |s| s.pending.len())
    }

    /// Whether message `id` of `key` waits for its turn or is in the one running now, by the
    /// bus's own table (no store read). Not while it is being taken, nor between its turn's
    /// end and the write recording its replies: the inbox holds it then.
    pub fn holds(&self, key: &ChatKey, id: &str) -> bool {
        let slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        slots.get(key).is_some_and(|s| {
            s.running_ids.iter().any(|r| r == id) || s.pending.iter().any(|q| q.msg.id == id)
        })
    }

    /// Whether a turn of `key` runs now.
    pub fn is_running(&self, key: &ChatKey) -> bool {
        self.slots
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(key)
            .is_some_and(|s| s.running.is_some())
    }

    /// Note that this run ends cleanly, every turn finished or put back in the inbox: the
    /// next start resumes those without counting them against the messages (see
    /// [`MAX_RESUMES`]). Made durable by the store's final checkpoint.
    /// Not noted by a gateway that did not replay the last run's messages (the terminal's
    /// `chat`): the next one must still count a crash before it.
    pub fn note_clean_stop(&self) -> Result<(), StoreError> {
        if !self.replayed.load(Ordering::Relaxed) {
            return Ok(());
        }
        self.store.put(Tree::Meta, CLEAN_STOP, b"1")
    }

    /// Forget the seen ids past [`SEEN_RETENTION`]; returns how many were removed.
    pub fn prune_seen(&self) -> Result<usize, StoreError> {
        seen::prune(&*self.store, now_secs(), &|| self.shutdown.is_cancelled())
    }
}
