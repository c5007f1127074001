//! A bus alone (no gateway) on a store a previous run left, for the replay tests.

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};

use async_trait::async_trait;
use switchboard::bus::{Bus, Interrupted, TurnHandler, TurnInput, TurnOutput};
use switchboard::store::{Store, Tree};
use switchboard_channel::InboundMessage;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// Put `msg` in the inbox, as a run that stopped before its turn ended leaves it.
pub fn leave_in_inbox(store: &dyn Store, msg: &InboundMessage) {
    store
        .put(
            Tree::Inbox,
            &store.next_id().unwrap().to_be_bytes(),
            &serde_json::to_vec(msg).unwrap(),
        )
        .unwrap();
}

/// A bus alone (no gateway) on `store`, running at most `turns` turns at once.
pub fn bus_on(
    store: &Arc<dyn Store>,
    turns: usize,
    handler: Arc<dyn TurnHandler>,
) -> (Arc<Bus>, CancellationToken, TaskTracker) {
    bus_with(store, turns, handler, Default::default())
}

/// [`bus_on`] with these channels.
pub fn bus_with(
    store: &Arc<dyn Store>,
    turns: usize,
    handler: Arc<dyn TurnHandler>,
    channels: switchboard::bus::ChannelRegistry,
) -> (Arc<Bus>, CancellationToken, TaskTracker) {
    let (shutdown, tracker) = (CancellationToken::new(), TaskTracker::new());
    let bus = Bus::new(
        store.clone(),
        channels,
        turns,
        Default::default(),
        shutdown.clone(),
        tracker.clone(),
    );
    bus.set_handler(handler);
    (bus, shutdown, tracker)
}

/// Stop a bus from [`bus_on`] (without noting a clean stop, as a crash would).
pub async fn stop_bus(shutdown: CancellationToken, tracker: TaskTracker) {
    shutdown.cancel();
    tracker.close();
    tracker.wait().await;
}

/// Wait until `done(this)` holds, looking again at each `changed` notification; panics
/// naming `what` after `within`.
pub async fn wait_on<T>(
    this: &T,
    changed: &tokio::sync::Notify,
    within: std::time::Duration,
    what: &str,
    done: impl Fn(&T) -> bool,
) {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let notified = changed.notified();
        if done(this) {
            return;
        }
        if tokio::time::timeout_at(deadline, notified).await.is_err() {
            panic!("timed out waiting for {what}");
        }
    }
}

/// Never finishes a turn of chat `p` (as if the gateway died in it: it ends only with the
/// run). The other chats' turns are answered (their texts kept in `answered`), or, while
/// `hold_others` is set, are slow: still running when the gateway dies.
#[derive(Default)]
pub struct DiesOnP {
    pub p_starts: AtomicUsize,
    pub hold_others: AtomicBool,
    pub others_running: AtomicUsize,
    pub answered: Mutex<Vec<String>>,
    pub changed: tokio::sync::Notify,
}

impl DiesOnP {
    /// Wait (at most `within`) until `done` holds.
    pub async fn wait(
        &self,
        within: std::time::Duration,
        what: &str,
        done: impl Fn(&Self) -> bool,
    ) {
        wait_on(self, &self.changed, within, what, done).await;
    }
}

#[async_trait]
impl TurnHandler for DiesOnP {
    async fn handle(&self, turn: TurnInput) -> Result<TurnOutput, Interrupted> {
        if turn.key.chat_id == "p" {
            self.p_starts.fetch_add(1, SeqCst);
            self.changed.notify_waiters();
            turn.cancel.cancelled().await;
            return Err(Interrupted);
        }
        if self.hold_others.load(SeqCst) {
            self.others_running.fetch_add(1, SeqCst);
            self.changed.notify_waiters();
            turn.cancel.cancelled().await;
            self.others_running.fetch_sub(1, SeqCst);
            return Err(Interrupted);
        }
        let mut answered = self.answered.lock().unwrap();
        answered.extend(turn.messages.iter().map(|m| m.text.clone()));
        self.changed.notify_waiters();
        Ok(TurnOutput::default())
    }
}
