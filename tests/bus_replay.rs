//! The bus alone at start-up, on a store a previous run left: the replay of unfinished
//! messages against new ones, and which resumed messages a crash is counted against.

use std::sync::{Arc, Mutex};
use std::time::Duration;

mod common;

use async_trait::async_trait;
use common::bus::{DiesOnP, bus_on, bus_with, leave_in_inbox, stop_bus};
use common::{message, message_alone};
use switchboard::bus::{Interrupted, TurnHandler, TurnInput, TurnOutput};
use switchboard::store::{SledStore, Store, Tree};
use switchboard_channel::{ChatKey, InboundMessage, Published};
use tokio_util::sync::CancellationToken;

const WAIT: Duration = Duration::from_secs(20);

/// Records each turn: its messages' texts and `resumes` counts.
#[derive(Default)]
struct Turns {
    turns: Mutex<Vec<Vec<(String, u64)>>>,
    turned: tokio::sync::Notify,
}

impl Turns {
    async fn wait_for(&self, n: usize) -> Vec<Vec<(String, u64)>> {
        loop {
            let turned = self.turned.notified();
            let turns = self.turns.lock().unwrap().clone();
            if turns.len() >= n {
                return turns;
            }
            tokio::time::timeout(WAIT, turned)
                .await
                .expect("the turns ran");
        }
    }
}

#[async_trait]
impl TurnHandler for Turns {
    async fn handle(&self, turn: TurnInput) -> Result<TurnOutput, Interrupted> {
        let seen = turn
            .messages
            .iter()
            .map(|m| {
                let resumes = m.metadata.get("resumes").and_then(|v| v.as_u64());
                (m.text.clone(), resumes.unwrap_or(0))
            })
            .collect();
        self.turns.lock().unwrap().push(seen);
        self.turned.notify_waiters();
        Ok(TurnOutput::default())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn new_messages_wait_for_the_replay_of_unfinished_ones() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = Arc::new(SledStore::open(dir.path()).unwrap());
    let key = ChatKey::new("test", "kitchen");
    leave_in_inbox(&*store, &message_alone("old-1", &key, "left unfinished"));
    let turns = Arc::new(Turns::default());
    let (bus, shutdown, tracker) = bus_on(&store, 4, turns.clone());
    // As the gateway starts: intake held, then channels (a new message), then the replay.
    bus.hold_intake_until_replayed();
    let mut new = tokio::spawn({
        let (bus, key) = (bus.clone(), key.clone());
        async move {
            bus.publish(message_alone("new-1", &key, "just arrived"))
                .await
        }
    });
    let early = tokio::time::timeout(Duration::from_millis(300), &mut new).await;
    assert!(early.is_err(), "taken before the replay: {early:?}");
    assert_eq!(bus.replay().await.unwrap(), 1);
    assert_eq!(new.await.unwrap().unwrap(), Published::Accepted);
    let texts: Vec<String> = turns
        .wait_for(2)
        .await
        .concat()
        .into_iter()
        .map(|(text, _)| text)
        .collect();
    assert_eq!(texts, ["left unfinished", "just arrived"]);
    stop_bus(shutdown, tracker).await;
}

#[tokio::test]
async fn a_message_that_only_waited_through_crashes_is_never_given_up() {
    use std::sync::atomic::Ordering::SeqCst;
    use switchboard::bus::MAX_RESUMES;
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = Arc::new(SledStore::open(dir.path()).unwrap());
    let handler = Arc::new(DiesOnP::default());
    let (p, w) = (ChatKey::new("test", "p"), ChatKey::new("test", "w"));
    // One turn at a time: while the gateway is in p's (and dies in it), w's message waits.
    let runs = MAX_RESUMES as usize + 2;
    for run in 0..runs {
        let (bus, shutdown, tracker) = bus_on(&store, 1, handler.clone());
        bus.replay().await.unwrap();
        if run == 0 {
            bus.publish(message_alone("p-1", &p, "crash me"))
                .await
                .unwrap();
            bus.publish(message_alone("w-1", &w, "just waiting"))
                .await
                .unwrap();
        }
        if run + 1 < runs {
            handler
                .wait(WAIT, "p's turn to start", |h| {
                    h.p_starts.load(SeqCst) == run + 1
                })
                .await;
            assert!(
                handler.answered.lock().unwrap().is_empty(),
                "w ran in run {run}"
            );
        } else {
            // Started at every start after a crash until given up; then w, at last.
            handler
                .wait(WAIT, "w's turn", |h| !h.answered.lock().unwrap().is_empty())
                .await;
            assert_eq!(handler.p_starts.load(SeqCst), MAX_RESUMES as usize + 1);
            assert_eq!(*handler.answered.lock().unwrap(), ["just waiting"]);
        }
        // The gateway dies: no clean stop is noted.
        stop_bus(shutdown, tracker).await;
    }
    // p's sender was told (the reply waits for a `test` channel), and nothing is left.
    let told = store.scan(Tree::Outbox, &[]).unwrap();
    assert_eq!(told.len(), 1);
    assert!(String::from_utf8_lossy(&told[0].1).contains("could not handle"));
    assert!(store.scan(Tree::Inbox, &[]).unwrap().is_empty());
}

#[tokio::test]
async fn after_a_crash_the_message_that_was_running_is_counted_and_the_waiting_ones_join_it() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = Arc::new(SledStore::open(dir.path()).unwrap());
    // A crash left three messages of one chat (no clean stop noted): the first was running.
    let key = ChatKey::new("test", "busy");
    for (i, text) in ["was running", "waited", "waited too"].iter().enumerate() {
        leave_in_inbox(&*store, &message(&format!("b-{i}"), &key, text));
    }
    let turns = Arc::new(Turns::default());
    let (bus, shutdown, tracker) = bus_on(&store, 4, turns.clone());
    assert_eq!(bus.replay().await.unwrap(), 3);
    // One turn, as joined before the crash (so it can go on from its saved steps): only the
    // message that was running counts the start.
    assert_eq!(
        turns.wait_for(1).await,
        [vec![
            ("was running".to_string(), 1),
            ("waited".to_string(), 0),
            ("waited too".to_string(), 0)
        ]]
    );
    stop_bus(shutdown, tracker).await;
}

#[tokio::test]
async fn a_given_up_message_leaves_the_ones_joined_behind_it_to_run() {
    use switchboard::bus::MAX_RESUMES;
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = Arc::new(SledStore::open(dir.path()).unwrap());
    let key = ChatKey::new("test", "poisoned");
    let mut poison = message("g-0", &key, "crash me");
    poison
        .metadata
        .insert("resumes".into(), serde_json::json!(MAX_RESUMES));
    leave_in_inbox(&*store, &poison);
    leave_in_inbox(&*store, &message("g-1", &key, "waited"));
    let turns = Arc::new(Turns::default());
    let (bus, shutdown, tracker) = bus_on(&store, 4, turns.clone());
    assert_eq!(bus.replay().await.unwrap(), 2);
    assert_eq!(turns.wait_for(1).await, [vec![("waited".to_string(), 0)]]);
    stop_bus(shutdown, tracker).await;
    assert!(store.scan(Tree::Inbox, &[]).unwrap().is_empty());
    let told = store.scan(Tree::Outbox, &[]).unwrap();
    assert_eq!(told.len(), 1);
    assert!(String::from_utf8_lossy(&told[0].1).contains("could not handle"));
}

/// A channel registry holding `channel`.
fn registry_with(
    channel: Arc<dyn switchboard_channel::Channel>,
) -> switchboard::bus::ChannelRegistry {
    let channels: switchboard::bus::ChannelRegistry = Default::default();
    channels.write().unwrap().insert("test".into(), channel);
    channels
}

/// A `test` channel whose file downloads never end (as if the gateway died in them), or
/// end as `go` lets them (one permit each).
struct HangingFiles {
    go: tokio::sync::Semaphore,
    fetches: std::sync::atomic::AtomicUsize,
    fetching: tokio::sync::Notify,
    sent: Mutex<Vec<String>>,
    sending: tokio::sync::Notify,
}

impl Default for HangingFiles {
    fn default() -> Self {
        Self {
            go: tokio::sync::Semaphore::new(0),
            fetches: Default::default(),
            fetching: Default::default(),
            sent: Default::default(),
            sending: Default::default(),
        }
    }
}

#[async_trait]
impl switchboard_channel::Channel for HangingFiles {
    fn name(&self) -> &str {
        "test"
    }

    fn capabilities(&self) -> switchboard_channel::Capabilities {
        switchboard_channel::Capabilities {
            edits: false,
            typing: false,
            threads: false,
            max_message_len: 4096,
            dialect: switchboard_channel::Dialect::Plain,
        }
    }

    async fn run(
        &self,
        _: switchboard_channel::InboundSender,
        shutdown: CancellationToken,
    ) -> Result<(), switchboard_channel::ChannelError> {
        shutdown.cancelled().await;
        Ok(())
    }

    async fn send(
        &self,
        msg: &switchboard_channel::OutboundMessage,
    ) -> Result<switchboard_channel::SendReceipt, switchboard_channel::SendError> {
        self.sent.lock().unwrap().push(msg.text.clone());
        self.sending.notify_waiters();
        Ok(Default::default())
    }

    async fn typing(&self, _: &ChatKey) -> Result<(), switchboard_channel::SendError> {
        Ok(())
    }

    async fn fetch_files(&self, msg: &mut InboundMessage) {
        self.fetches
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.fetching.notify_waiters();
        self.go.acquire().await.expect("never closed").forget();
        msg.metadata.remove(switchboard_channel::files::PENDING);
        msg.text.push_str(" [fetched]");
    }
}

#[tokio::test]
async fn a_message_is_counted_before_its_download_which_can_be_what_stops_the_gateway() {
    use switchboard::bus::MAX_RESUMES;
    use switchboard_channel::files::{PENDING, leave_pending};
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = Arc::new(SledStore::open(dir.path()).unwrap());
    let key = ChatKey::new("test", "files");
    let with_file = |id: &str, resumes: u64| {
        let mut m = message(id, &key, "look at this");
        leave_pending(&mut m, &serde_json::json!([{"file": id}]));
        m.metadata.insert("resumes".into(), resumes.into());
        m
    };
    // Crashes in its download reached the limit: given up without another download.
    leave_in_inbox(&*store, &with_file("f-0", MAX_RESUMES));
    let channel = Arc::new(HangingFiles::default());
    let channels = registry_with(channel.clone());
    let turns = Arc::new(Turns::default());
    let (bus, shutdown, tracker) = bus_with(&store, 4, turns.clone(), channels.clone());
    let sending = channel.sending.notified();
    assert_eq!(bus.replay().await.unwrap(), 1);
    tokio::time::timeout(WAIT, sending)
        .await
        .expect("the sender was told");
    stop_bus(shutdown, tracker).await;
    let sent = channel.sent.lock().unwrap().clone();
    assert!(
        sent.len() == 1 && sent[0].contains("could not handle"),
        "{sent:?}"
    );
    assert_eq!(channel.fetches.load(std::sync::atomic::Ordering::SeqCst), 0);
    assert!(store.scan(Tree::Inbox, &[]).unwrap().is_empty());

    // Below the limit: its start is stored before the download begins, the message as it
    // came (files still to fetch).
    leave_in_inbox(&*store, &with_file("f-1", 1));
    let (bus, shutdown, tracker) = bus_with(&store, 4, turns.clone(), channels);
    let fetching = channel.fetching.notified();
    assert_eq!(bus.replay().await.unwrap(), 1);
    tokio::time::timeout(WAIT, fetching)
        .await
        .expect("the download began");
    let stored = store.scan(Tree::Inbox, &[]).unwrap();
    let m: InboundMessage = serde_json::from_slice(&stored[0].1).unwrap();
    assert_eq!(m.metadata["resumes"], 2);
    assert!(m.metadata.contains_key(PENDING));
    stop_bus(shutdown, tracker).await;
    assert!(turns.turns.lock().unwrap().is_empty());
}

/// Records turns as [`Turns`] does; those of chat `x` say they began, then wait for a
/// permit of `open`.
struct GatedX {
    turns: Turns,
    x_began: tokio::sync::Notify,
    open: tokio::sync::Semaphore,
}

impl Default for GatedX {
    fn default() -> Self {
        Self {
            turns: Turns::default(),
            x_began: Default::default(),
            open: tokio::sync::Semaphore::new(0),
        }
    }
}

#[async_trait]
impl TurnHandler for GatedX {
    async fn handle(&self, turn: TurnInput) -> Result<TurnOutput, Interrupted> {
        if turn.key.chat_id == "x" {
            self.x_began.notify_one();
            self.open.acquire().await.expect("never closed").forget();
        }
        self.turns.handle(turn).await
    }
}

#[tokio::test]
async fn a_start_counted_before_a_download_is_taken_back_while_the_message_waits_for_a_turn() {
    use switchboard_channel::files::leave_pending;
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = Arc::new(SledStore::open(dir.path()).unwrap());
    // A crash left a message in chat x and one with a file in chat y, neither counted yet
    // (counted ones would run one at a time: see bus_probation.rs).
    let (x, y) = (ChatKey::new("test", "x"), ChatKey::new("test", "y"));
    let mut first = message("x-0", &x, "x's");
    first.metadata.insert("resumes".into(), 0.into());
    leave_in_inbox(&*store, &first);
    let mut photo = message("y-0", &y, "y's");
    leave_pending(&mut photo, &serde_json::json!([{"file": "y-0"}]));
    photo.metadata.insert("resumes".into(), 0.into());
    leave_in_inbox(&*store, &photo);
    let channel = Arc::new(HangingFiles::default());
    let channels = registry_with(channel.clone());
    let handler = Arc::new(GatedX::default());
    // One turn at a time, x's: y downloads its file, then waits.
    let (bus, shutdown, tracker) = bus_with(&store, 1, handler.clone(), channels);
    let fetching = channel.fetching.notified();
    assert_eq!(bus.replay().await.unwrap(), 2);
    tokio::time::timeout(WAIT, handler.x_began.notified())
        .await
        .expect("x's turn began");
    tokio::time::timeout(WAIT, fetching)
        .await
        .expect("y's download began");
    channel.go.add_permits(1);
    // Counted before the download (1), taken back once it is done: waiting is not counted.
    let y_resumes = || {
        let entries = store.scan(Tree::Inbox, &[]).unwrap();
        entries.iter().find_map(|(_, v)| {
            let m: InboundMessage = serde_json::from_slice(v).unwrap();
            (m.key == y).then(|| m.metadata["resumes"].as_u64().unwrap())
        })
    };
    common::until("the count taken back", || y_resumes() == Some(0)).await;
    assert!(handler.turns.turns.lock().unwrap().len() <= 1);
    // y's own turn counts its start, once.
    handler.open.add_permits(1);
    let turns = handler.turns.wait_for(2).await;
    assert_eq!(turns[1], [("y's [fetched]".to_string(), 1)]);
    stop_bus(shutdown, tracker).await;
}

#[tokio::test]
async fn a_message_joined_behind_a_given_up_one_with_files_runs_uncounted() {
    use switchboard::bus::MAX_RESUMES;
    use switchboard_channel::files::leave_pending;
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = Arc::new(SledStore::open(dir.path()).unwrap());
    // After a crash: a photo the gateway kept dying on, and a text joined behind it.
    let key = ChatKey::new("test", "album");
    let mut photo = message("p-0", &key, "crash me");
    leave_pending(&mut photo, &serde_json::json!([{"file": "p-0"}]));
    photo
        .metadata
        .insert("resumes".into(), serde_json::json!(MAX_RESUMES));
    leave_in_inbox(&*store, &photo);
    leave_in_inbox(&*store, &message("p-1", &key, "waited"));
    let channel = Arc::new(HangingFiles::default());
    let turns = Arc::new(Turns::default());
    let (bus, shutdown, tracker) = bus_with(&store, 4, turns.clone(), registry_with(channel));
    assert_eq!(bus.replay().await.unwrap(), 2);
    // The photo is given up; the text runs, its own count untouched (the photo's count is
    // not taken back onto it).
    assert_eq!(turns.wait_for(1).await, [vec![("waited".to_string(), 0)]]);
    stop_bus(shutdown, tracker).await;
    assert!(store.scan(Tree::Inbox, &[]).unwrap().is_empty());
}
