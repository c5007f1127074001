//! The bus end to end in the gateway, through a recording test channel against the fake
//! LLM: per-chat order with cross-chat parallelism, joining, dedup, `/stop`, replies owed to
//! a channel not running, messages the gateway keeps dying on. (The bus alone at start-up:
//! `bus_replay.rs`.)

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::FutureExt;

use common::{Env, TestChannel, message, message_alone, with_test_channel};
use switchboard::store::{SledStore, Store, Tree};
use switchboard_channel::{ChatKey, Published};
use switchboard_fakes::llm::{FakeLlm, Reply};

const WAIT: Duration = Duration::from_secs(20);

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
        .publish(message_alone("gone-1", &key, "are you there?"))
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
        .publish(message_alone("gone-1", &key, "are you there?"))
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
                .publish(message_alone(
                    &format!("m-{k}-{i}"),
                    &key,
                    &format!("k{k} m{i}"),
                ))
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
        .publish(message_alone("m-owed", &key, "remind me"))
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
    let mut poison = message_alone("poison", &ChatKey::new("test", "p"), "crash me");
    poison
        .metadata
        .insert("resumes".into(), serde_json::json!(MAX_RESUMES));
    {
        let store = SledStore::open(&env.data_dir()).unwrap();
        let mut fine = message_alone("fine", &ChatKey::new("test", "q"), "hello");
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
        tx.publish(message_alone("dup-1", &key, "hello")),
        tx.publish(message_alone("dup-1", &key, "hello"))
    );
    let mut outcomes = vec![a.unwrap(), b.unwrap()];
    outcomes.sort_by_key(|p| format!("{p:?}"));
    assert_eq!(outcomes, vec![Published::Accepted, Published::Duplicate]);
    ch.wait_for(1, WAIT).await;
    assert_eq!(
        tx.publish(message_alone("dup-1", &key, "hello"))
            .await
            .unwrap(),
        Published::Duplicate
    );
    tx.publish(message_alone("dup-2", &key, "next"))
        .await
        .unwrap();
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
        tx.publish(message_alone("test:old-1", &key, "again"))
            .await
            .unwrap(),
        Published::Duplicate
    );
    tx.publish(message_alone("test:new-1", &key, "new"))
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
    tx.publish(message_alone("s1", &key, "write me a novel"))
        .await
        .unwrap();
    llm.wait_for_requests(1, WAIT).await.unwrap();
    let started = Instant::now();
    // As a phone's keyboard may send it: capitalised, with more words.
    tx.publish(message_alone("s2", &key, "/Stop please"))
        .await
        .unwrap();
    let sent = ch.wait_for(1, WAIT).await;
    assert_eq!(sent[0].text, "Stopped.");
    assert!(started.elapsed() < Duration::from_secs(5));
    // The chat is free again: the next message is answered, and the novel never arrives.
    tx.publish(message_alone("s3", &key, "hello again"))
        .await
        .unwrap();
    let sent = ch.wait_for(2, WAIT).await;
    assert_eq!(sent[1].text, "echo: hello again");
    assert!(!ch.sent().iter().any(|m| m.text.contains("too late")));
    // A slow platform does not hold up the publish of a `/stop` (the adapter's intake, every
    // chat's messages): its answer goes out in the background.
    ch.hold_sends();
    let published =
        tokio::time::timeout(WAIT, tx.publish(message_alone("s4", &key, "/stop"))).await;
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
            message_alone("b1", &key, "write a long essay"),
            message_alone("b2", &other, "hello"),
            message_alone("b3", &key, "/stop"),
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
        .publish(message_alone("b1", &key, "write a long essay"))
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

#[tokio::test]
async fn in_a_group_one_member_cannot_stop_what_another_asked_but_they_or_an_owner_can() {
    let llm = FakeLlm::start().await;
    let env = Env::new(&llm.base_url(), "");
    let (ch, running, shutdown) = env.start_with_test_channel().await;
    let tx = running.inbound();
    // As with owners named in `allow_from` (where none is, anyone may stop anything).
    running.shared.bus.set_owners_named(true);
    let key = ChatKey::new("test", "group");
    let from = |id: &str, who: &str, owner: bool, text: &str| {
        let mut m = in_group(message_alone(id, &key, text), who);
        m.sender.is_owner = owner;
        m
    };
    llm.push(Reply::text("the plan").with_delay(Duration::from_secs(1)));
    tx.publish(from("g1", "ann", false, "plan the trip"))
        .await
        .unwrap();
    llm.wait_for_requests(1, WAIT).await.unwrap();
    tx.publish(from("g2", "bob", false, "/stop")).await.unwrap();
    let sent = ch.wait_for(2, WAIT).await;
    assert_eq!(
        sent[0].text,
        "I'm answering someone else here: only they or an owner can stop that."
    );
    assert_eq!(sent[1].text, "the plan", "Ann's answer still came");
    // Ann stops her own; the owner stops anyone's.
    for (n, (who, owner)) in [("ann", false), ("olivia", true)].into_iter().enumerate() {
        llm.push(Reply::text("far too late").with_delay(Duration::from_secs(300)));
        tx.publish(from(&format!("a{n}"), "ann", false, "write a novel"))
            .await
            .unwrap();
        llm.wait_for_requests(2 + n, WAIT).await.unwrap();
        tx.publish(from(&format!("s{n}"), who, owner, "/stop"))
            .await
            .unwrap();
        let sent = ch.wait_for(3 + n, WAIT).await;
        assert_eq!(sent[2 + n].text, "Stopped.", "{who}");
    }
    shutdown.cancel();
    running.stopped().await;
    assert!(!ch.sent().iter().any(|m| m.text == "far too late"));
}

#[tokio::test]
async fn where_no_owner_is_named_anyone_in_a_group_may_stop_an_answer() {
    let llm = FakeLlm::start().await;
    let env = Env::new(&llm.base_url(), "");
    let (ch, running, shutdown) = env.start_with_test_channel().await;
    let tx = running.inbound();
    let key = ChatKey::new("test", "group");
    let from = |id: &str, who: &str, text: &str| in_group(message_alone(id, &key, text), who);
    llm.push(Reply::text("far too late").with_delay(Duration::from_secs(300)));
    tx.publish(from("g1", "ann", "write a novel"))
        .await
        .unwrap();
    llm.wait_for_requests(1, WAIT).await.unwrap();
    tx.publish(from("g2", "bob", "/stop")).await.unwrap();
    let sent = ch.wait_for(1, WAIT).await;
    assert_eq!(sent[0].text, "Stopped.");
    shutdown.cancel();
    running.stopped().await;
}

/// Several people's messages joined into one group turn: the model is asked to answer each.
#[tokio::test]
async fn a_turn_joining_several_peoples_messages_asks_the_model_to_answer_each() {
    let llm = FakeLlm::start().await;
    let env = Env::new(&llm.base_url(), "");
    let (ch, running, shutdown) = env.start_with_test_channel().await;
    let tx = running.inbound();
    let key = ChatKey::new("test", "busy");
    let from = |id: &str, who: &str, text: &str| in_group(common::message(id, &key, text), who);
    llm.push(Reply::text("first").with_delay(Duration::from_secs(1)));
    llm.push(Reply::text("both"));
    tx.publish(from("b1", "Ann", "slow question"))
        .await
        .unwrap();
    llm.wait_for_requests(1, WAIT).await.unwrap();
    for (id, who) in [("b2", "Bob"), ("b3", "Carol"), ("b4", "Bob")] {
        tx.publish(from(id, who, "me too")).await.unwrap();
    }
    ch.wait_for(2, WAIT).await;
    let second = serde_json::to_string(&llm.requests()[1].body).unwrap();
    assert!(
        second.contains("Several people wrote since your last answer (Bob, Carol)"),
        "{second}"
    );
    let first = serde_json::to_string(&llm.requests()[0].body).unwrap();
    assert!(!first.contains("Several people"), "one asker: {first}");
    shutdown.cancel();
    running.stopped().await;
}

/// `m` as written in a group by `who` (their name, and their id in lower case).
fn in_group(
    mut m: switchboard_channel::InboundMessage,
    who: &str,
) -> switchboard_channel::InboundMessage {
    m.is_group = true;
    (m.sender.id, m.sender.display_name) = (who.to_lowercase(), who.into());
    m
}
