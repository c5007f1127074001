//! The bus end to end in the gateway, through a recording test channel against the fake
//! LLM: per-chat order with cross-chat parallelism, joining, dedup, `/stop`, replies owed to
//! a channel not running, messages the gateway keeps dying on; and on the bus alone: the
//! start-up replay against new messages, and which resumed messages a crash is counted
//! against.

mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use futures_util::FutureExt;

use common::{Env, TestChannel, message, with_test_channel};
use switchboard::bus::{Bus, Interrupted, TurnHandler, TurnInput, TurnOutput};
use switchboard::store::{SledStore, Store, Tree};
use switchboard_channel::{ChatKey, InboundMessage, Published};
use switchboard_fakes::llm::{FakeLlm, Reply};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

const WAIT: Duration = Duration::from_secs(20);

/// A chat member's message that is never joined with others into one turn.
fn inbound(id: &str, key: &ChatKey, text: &str) -> InboundMessage {
    let mut m = message(id, key, text);
    m.metadata
        .insert("join".into(), serde_json::Value::Bool(false));
    m
}

#[tokio::test]
async fn a_publish_its_caller_gave_up_on_still_runs() {
    let llm = FakeLlm::start().await;
    let env = Env::new(&llm.base_url(), "");
    let (ch, running, shutdown) = env.start_with_test_channel().await;
    let key = ChatKey::new("test", "impatient");
    // Polled once and dropped: an HTTP client that went away before the durable write
    // finished. (On this one-thread runtime the publish cannot finish within that poll, so
    // the test does not depend on how fast the disk is.)
    let gave_up = running
        .inbound()
        .publish(inbound("gone-1", &key, "are you there?"))
        .now_or_never();
    assert!(
        gave_up.is_none(),
        "the publish finished at once: {gave_up:?}"
    );
    let sent = ch.wait_for(1, WAIT).await;
    assert_eq!(sent[0].key, key);
    // Its redelivery is a duplicate, and nothing runs twice.
    let again = running
        .inbound()
        .publish(inbound("gone-1", &key, "are you there?"))
        .await
        .unwrap();
    assert_eq!(again, Published::Duplicate);
    assert_eq!(llm.request_count(), 1);
    shutdown.cancel();
    running.stopped().await;
}

#[tokio::test]
async fn per_key_order_with_cross_key_parallelism() {
    let llm = FakeLlm::start().await;
    llm.set_delay(Duration::from_millis(200));
    let env = Env::new(&llm.base_url(), "");
    let (ch, running, shutdown) = env.start_with_test_channel().await;
    let inbound_tx = running.inbound();
    let started = Instant::now();
    for k in 0..50 {
        let key = ChatKey::new("test", format!("chat{k}"));
        for i in 0..3 {
            let r = inbound_tx
                .publish(inbound(&format!("m-{k}-{i}"), &key, &format!("k{k} m{i}")))
                .await
                .unwrap();
            assert_eq!(r, Published::Accepted);
        }
    }
    let sent = ch.wait_for(150, Duration::from_secs(30)).await;
    let elapsed = started.elapsed();
    // Serial would take 150 × 200 ms = 30 s; three rounds of parallel turns take ~0.6 s.
    // (Half the serial time: room for 150 durable publishes on a slow disk.)
    assert!(elapsed < Duration::from_secs(15), "took {elapsed:?}");
    for k in 0..50 {
        let texts: Vec<String> = sent
            .iter()
            .filter(|m| m.key.chat_id == format!("chat{k}"))
            .map(|m| m.text.clone())
            .collect();
        assert_eq!(
            texts,
            vec![
                format!("echo: k{k} m0"),
                format!("echo: k{k} m1"),
                format!("echo: k{k} m2")
            ]
        );
    }
    // Workers are dropped once their chats are idle.
    let deadline = Instant::now() + WAIT;
    while running.shared.bus.active_chats() > 0 {
        assert!(Instant::now() < deadline, "workers not dropped");
        tokio::task::yield_now().await;
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    shutdown.cancel();
    running.stopped().await;
}

#[tokio::test]
async fn a_reply_for_a_channel_not_running_waits_for_a_start_where_it_runs() {
    let llm = FakeLlm::start().await;
    let env = Env::new(&llm.base_url(), "");
    let key = ChatKey::new("test", "1");
    // No `test` channel in this run: the reply is recorded and kept, not dropped.
    let opts = switchboard::StartOptions {
        channels: false,
        ..Default::default()
    };
    let (running, shutdown) = env.start(opts).await;
    let r = running
        .inbound()
        .publish(inbound("m-owed", &key, "remind me"))
        .await
        .unwrap();
    assert_eq!(r, Published::Accepted);
    let deadline = Instant::now() + WAIT;
    while llm.request_count() == 0 || running.shared.bus.active_chats() > 0 {
        assert!(Instant::now() < deadline, "turn not finished");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    shutdown.cancel();
    running.stopped().await;
    let store = SledStore::open(&env.data_dir()).unwrap();
    assert_eq!(store.scan(Tree::Outbox, &[]).unwrap().len(), 1, "kept");
    drop(store);

    // The terminal's offline `chat` gateway (no background work) leaves it alone, even with
    // the channel there.
    let ch = Arc::new(TestChannel::default());
    let mut opts = with_test_channel(&ch);
    opts.background = false;
    let (running, shutdown) = env.start(opts).await;
    shutdown.cancel();
    running.stopped().await;
    assert!(ch.sent().is_empty());

    // A start where the channel runs delivers it, once, without asking the model again.
    let (running, shutdown) = env.start(with_test_channel(&ch)).await;
    let sent = ch.wait_for(1, WAIT).await;
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].text, "echo: remind me");
    assert_eq!(llm.request_count(), 1);
    shutdown.cancel();
    running.stopped().await;
    let store = SledStore::open(&env.data_dir()).unwrap();
    assert!(store.scan(Tree::Outbox, &[]).unwrap().is_empty());
}

#[tokio::test]
async fn a_message_the_gateway_keeps_dying_on_is_given_up_and_its_sender_told() {
    use switchboard::bus::MAX_RESUMES;
    let llm = FakeLlm::start().await;
    let env = Env::new(&llm.base_url(), "");
    // As crashes in their turns would leave them (no clean stop noted): one resumed at
    // every start so far, one resumed once.
    let mut poison = inbound("poison", &ChatKey::new("test", "p"), "crash me");
    poison
        .metadata
        .insert("resumes".into(), serde_json::json!(MAX_RESUMES));
    {
        let store = SledStore::open(&env.data_dir()).unwrap();
        let mut fine = inbound("fine", &ChatKey::new("test", "q"), "hello");
        fine.metadata.insert("resumes".into(), serde_json::json!(1));
        let mut b = switchboard::store::Batch::default();
        for (seq, m) in [(1u64, &poison), (2, &fine)] {
            b.put(
                Tree::Inbox,
                seq.to_be_bytes().to_vec(),
                serde_json::to_vec(m).unwrap(),
            );
        }
        store.commit(b).await.unwrap();
    }
    let (ch, running, shutdown) = env.start_with_test_channel().await;
    let mut sent = ch.wait_for(2, WAIT).await;
    sent.sort_by(|a, b| a.key.chat_id.cmp(&b.key.chat_id));
    assert_eq!(sent[0].key.chat_id, "p");
    assert_eq!(sent[0].kind, switchboard_channel::OutboundKind::Error);
    assert!(
        sent[0].text.contains("could not handle"),
        "{}",
        sent[0].text
    );
    assert_eq!(sent[1].text, "echo: hello");
    assert_eq!(
        llm.request_count(),
        1,
        "the given-up message never reached the model"
    );
    shutdown.cancel();
    running.stopped().await;
    // After a clean stop, what is left is resumed without counting: the same entry runs.
    let store = SledStore::open(&env.data_dir()).unwrap();
    assert!(store.scan(Tree::Inbox, &[]).unwrap().is_empty());
    let mut b = switchboard::store::Batch::default();
    b.put(
        Tree::Inbox,
        3u64.to_be_bytes().to_vec(),
        serde_json::to_vec(&poison).unwrap(),
    );
    store.commit(b).await.unwrap();
    drop(store);
    let (running, shutdown) = env.start(with_test_channel(&ch)).await;
    let sent = ch.wait_for(3, WAIT).await;
    assert_eq!(sent[2].text, "echo: crash me");
    shutdown.cancel();
    running.stopped().await;
}

#[tokio::test]
async fn waiting_messages_are_joined_into_the_next_turn() {
    let llm = FakeLlm::start().await;
    let env = Env::new(&llm.base_url(), "");
    let (ch, running, shutdown) = env.start_with_test_channel().await;
    let tx = running.inbound();
    let key = ChatKey::new("test", "j");
    // Long enough for the next two to be stored while it runs, on a slow disk too.
    llm.push(Reply::text("first").with_delay(Duration::from_secs(2)));
    let mk = |id: &str, t: &str| message(id, &key, t);
    tx.publish(mk("j1", "one")).await.unwrap();
    llm.wait_for_requests(1, WAIT).await.unwrap();
    tx.publish(mk("j2", "two")).await.unwrap();
    tx.publish(mk("j3", "three")).await.unwrap();
    let sent = ch.wait_for(2, WAIT).await;
    assert_eq!(sent[0].text, "first");
    let reqs = llm.wait_for_requests(2, WAIT).await.unwrap();
    let last = reqs[1].last_user_text();
    assert!(last.contains("two") && last.contains("three"), "{last}");
    assert_eq!(llm.request_count(), 2);
    shutdown.cancel();
    running.stopped().await;
}

#[tokio::test]
async fn the_same_inbound_id_is_processed_once() {
    let llm = FakeLlm::start().await;
    let env = Env::new(&llm.base_url(), "");
    let (ch, running, shutdown) = env.start_with_test_channel().await;
    let tx = running.inbound();
    let key = ChatKey::new("test", "d");
    let (a, b) = tokio::join!(
        tx.publish(inbound("dup-1", &key, "hello")),
        tx.publish(inbound("dup-1", &key, "hello"))
    );
    let mut outcomes = vec![a.unwrap(), b.unwrap()];
    outcomes.sort_by_key(|p| format!("{p:?}"));
    assert_eq!(outcomes, vec![Published::Accepted, Published::Duplicate]);
    ch.wait_for(1, WAIT).await;
    assert_eq!(
        tx.publish(inbound("dup-1", &key, "hello")).await.unwrap(),
        Published::Duplicate
    );
    tx.publish(inbound("dup-2", &key, "next")).await.unwrap();
    let sent = ch.wait_for(2, WAIT).await;
    assert_eq!(sent.len(), 2);
    assert_eq!(llm.request_count(), 2);
    shutdown.cancel();
    running.stopped().await;
}

#[tokio::test]
async fn ids_a_store_of_the_previous_layout_has_seen_stay_duplicates() {
    let llm = FakeLlm::start().await;
    let env = Env::new(&llm.base_url(), "");
    {
        // Before seen ids were filed by day: the bare id, then when it was seen.
        let store: Arc<dyn Store> = Arc::new(SledStore::open(&env.data_dir()).unwrap());
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs();
        store
            .put(Tree::Seen, b"test:old-1", &now.to_be_bytes())
            .unwrap();
        store.flush().await.unwrap();
    }
    let ch = Arc::new(TestChannel::default());
    let key = ChatKey::new("test", "o");
    let (running, shutdown) = env.start(with_test_channel(&ch)).await;
    let tx = running.inbound();
    assert_eq!(
        tx.publish(inbound("test:old-1", &key, "again"))
            .await
            .unwrap(),
        Published::Duplicate
    );
    tx.publish(inbound("test:new-1", &key, "new"))
        .await
        .unwrap();
    ch.wait_for(1, WAIT).await;
    shutdown.cancel();
    running.stopped().await;
    assert_eq!(llm.request_count(), 1, "only the new id reached the model");
}

#[tokio::test]
async fn stop_cancels_the_running_turn_without_waiting_behind_it() {
    let llm = FakeLlm::start().await;
    let env = Env::new(&llm.base_url(), "");
    let (ch, running, shutdown) = env.start_with_test_channel().await;
    let tx = running.inbound();
    let key = ChatKey::new("test", "s");
    llm.push(Reply::text("far too late").with_delay(Duration::from_secs(300)));
    tx.publish(inbound("s1", &key, "write me a novel"))
        .await
        .unwrap();
    llm.wait_for_requests(1, WAIT).await.unwrap();
    let started = Instant::now();
    // As a phone's keyboard may send it: capitalised, with more words.
    tx.publish(inbound("s2", &key, "/Stop please"))
        .await
        .unwrap();
    let sent = ch.wait_for(1, WAIT).await;
    assert_eq!(sent[0].text, "Stopped.");
    assert!(started.elapsed() < Duration::from_secs(5));
    // The chat is free again: the next message is answered, and the novel never arrives.
    tx.publish(inbound("s3", &key, "hello again"))
        .await
        .unwrap();
    let sent = ch.wait_for(2, WAIT).await;
    assert_eq!(sent[1].text, "echo: hello again");
    assert!(!ch.sent().iter().any(|m| m.text.contains("too late")));
    // A slow platform does not hold up the publish of a `/stop` (the adapter's intake, every
    // chat's messages): its answer goes out in the background.
    ch.hold_sends();
    let published = tokio::time::timeout(WAIT, tx.publish(inbound("s4", &key, "/stop"))).await;
    assert_eq!(
        published.expect("the publish waited for the send").unwrap(),
        Published::Accepted
    );
    assert_eq!(ch.sent().len(), 2, "sent while held");
    ch.release_sends();
    let sent = ch.wait_for(3, WAIT).await;
    assert_eq!(sent[2].text, "Nothing is running.");
    shutdown.cancel();
    running.stopped().await;
}

#[tokio::test]
async fn a_stop_delivered_with_the_message_before_it_stops_that_message() {
    let llm = FakeLlm::start().await;
    let env = Env::new(&llm.base_url(), "");
    let (ch, running, shutdown) = env.start_with_test_channel().await;
    let (key, other) = (
        ChatKey::new("test", "backlog"),
        ChatKey::new("test", "else"),
    );
    // One delivery (a poll after an outage): the essay, another chat's message, the /stop.
    let results = running
        .inbound()
        .publish_many(vec![
            inbound("b1", &key, "write a long essay"),
            inbound("b2", &other, "hello"),
            inbound("b3", &key, "/stop"),
        ])
        .await
        .unwrap();
    assert_eq!(results, vec![Published::Accepted; 3]);
    let sent = ch.wait_for(2, WAIT).await;
    let of = |k: &ChatKey| -> Vec<&str> {
        sent.iter()
            .filter(|m| &m.key == k)
            .map(|m| m.text.as_str())
            .collect()
    };
    assert_eq!(of(&key), ["Stopped."]);
    assert_eq!(of(&other), ["echo: hello"]);
    // Redelivered, the stopped message is a duplicate: it never runs.
    let again = running
        .inbound()
        .publish(inbound("b1", &key, "write a long essay"))
        .await
        .unwrap();
    assert_eq!(again, Published::Duplicate);
    shutdown.cancel();
    running.stopped().await;
    assert_eq!(
        llm.request_count(),
        1,
        "only the other chat reached the model"
    );
    assert_eq!(ch.sent().len(), 2);
}

/// Put `msg` in the inbox, as a run that stopped before its turn ended leaves it.
fn leave_in_inbox(store: &dyn Store, msg: &InboundMessage) {
    store
        .put(
            Tree::Inbox,
            &store.next_id().unwrap().to_be_bytes(),
            &serde_json::to_vec(msg).unwrap(),
        )
        .unwrap();
}

/// A bus alone (no gateway) on `store`, running at most `turns` turns at once.
fn bus_on(
    store: &Arc<dyn Store>,
    turns: usize,
    handler: Arc<dyn TurnHandler>,
) -> (Arc<Bus>, CancellationToken, TaskTracker) {
    let (shutdown, tracker) = (CancellationToken::new(), TaskTracker::new());
    let bus = Bus::new(
        store.clone(),
        Default::default(),
        turns,
        Default::default(),
        shutdown.clone(),
        tracker.clone(),
    );
    bus.set_handler(handler);
    (bus, shutdown, tracker)
}

/// Stop a bus from [`bus_on`] (without noting a clean stop, as a crash would).
async fn stop_bus(shutdown: CancellationToken, tracker: TaskTracker) {
    shutdown.cancel();
    tracker.close();
    tracker.wait().await;
}

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
    leave_in_inbox(&*store, &inbound("old-1", &key, "left unfinished"));
    let turns = Arc::new(Turns::default());
    let (bus, shutdown, tracker) = bus_on(&store, 4, turns.clone());
    // As the gateway starts: intake held, then channels (a new message), then the replay.
    bus.hold_intake_until_replayed();
    let mut new = tokio::spawn({
        let (bus, key) = (bus.clone(), key.clone());
        async move { bus.publish(inbound("new-1", &key, "just arrived")).await }
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

/// Never finishes a turn of chat `p` (as if the gateway died in it: it ends only with the
/// run); records the texts of the others.
#[derive(Default)]
struct DiesOnP {
    p_starts: std::sync::atomic::AtomicUsize,
    texts: Mutex<Vec<String>>,
    changed: tokio::sync::Notify,
}

impl DiesOnP {
    async fn wait(&self, what: &str, done: impl Fn(&Self) -> bool) {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let changed = self.changed.notified();
            if done(self) {
                return;
            }
            if tokio::time::timeout_at(deadline, changed).await.is_err() {
                panic!("timed out waiting for {what}");
            }
        }
    }
}

#[async_trait]
impl TurnHandler for DiesOnP {
    async fn handle(&self, turn: TurnInput) -> Result<TurnOutput, Interrupted> {
        if turn.key.chat_id == "p" {
            self.p_starts
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            self.changed.notify_waiters();
            turn.cancel.cancelled().await;
            return Err(Interrupted);
        }
        let mut texts = self.texts.lock().unwrap();
        texts.extend(turn.messages.iter().map(|m| m.text.clone()));
        self.changed.notify_waiters();
        Ok(TurnOutput::default())
    }
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
            bus.publish(inbound("p-1", &p, "crash me")).await.unwrap();
            bus.publish(inbound("w-1", &w, "just waiting"))
                .await
                .unwrap();
        }
        if run + 1 < runs {
            handler
                .wait("p's turn to start", |h| h.p_starts.load(SeqCst) == run + 1)
                .await;
            assert!(
                handler.texts.lock().unwrap().is_empty(),
                "w ran in run {run}"
            );
        } else {
            // Started at every start after a crash until given up; then w, at last.
            handler
                .wait("w's turn", |h| !h.texts.lock().unwrap().is_empty())
                .await;
            assert_eq!(handler.p_starts.load(SeqCst), MAX_RESUMES as usize + 1);
            assert_eq!(*handler.texts.lock().unwrap(), ["just waiting"]);
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
