//! Messages sent while the gateway had no connection to Slack: every socket lost for a while,
//! or the channel stopped and started again on the same state file (Socket Mode and Events
//! API). The connection back, each conversation heard from is asked what came after its last
//! handled message (`conversations.history`, and `.replies` for the bot's threads), and those
//! messages are published in order, ahead of the conversation's newer live ones, each once.

mod common;

use std::sync::atomic::Ordering;
use std::time::Duration;

use common::catch_up::{
    all_sockets_down, back, history_reads, id, ids, ids_in, live, live_held, param,
};
use common::{Running, WAIT, events_config, socket_config, start};
use serde_json::Value;
use switchboard_channel::{Channel, ChatKey, OutboundMessage};
use switchboard_fakes::slack::{BOT_ID, FakeSlack, Fault, events};

const DM: &str = "D1";
const CHAN: &str = "C1";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_was_sent_while_every_socket_was_down_is_published_in_order_once() {
    let fake = FakeSlack::start().await;
    let mut cfg = socket_config(&fake);
    cfg.socket_connections = 2;
    let run = start(cfg);
    fake.wait_for_connections(2).await;
    // Heard from before the gap: a DM, and a channel thread the bot was mentioned in.
    live(&fake, events::dm(DM, "U1", "hello", "1.0")).await;
    live(
        &fake,
        events::app_mention(CHAN, "U1", "<@UBOT> status?", "2.0"),
    )
    .await;
    run.sink.wait_for_published(2).await;
    assert_eq!(
        fake.call_count("conversations.history"),
        0,
        "the first connection has nothing to catch up on"
    );

    all_sockets_down(&fake, &run).await;
    fake.add_unseen(events::dm(DM, "U1", "are you there?", "3.0"));
    fake.add_unseen(events::thread_reply(
        CHAN,
        "U1",
        "and the build?",
        "3.5",
        "2.0",
    ));
    fake.add_unseen(events::dm(DM, "U1", "hello??", "4.0"));
    fake.add_unseen(events::channel_message(CHAN, "U2", "lunch anyone?", "4.5"));
    fake.add_unseen(events::channel_message(
        CHAN,
        "U1",
        "<@UBOT> deploy now",
        "5.0",
    ));
    // Slow history: a live message that comes right after the reconnection is held.
    fake.inject(
        "conversations.history",
        Fault::Delay(Duration::from_millis(500)),
    );
    fake.inject(
        "conversations.history",
        Fault::Delay(Duration::from_millis(500)),
    );
    back(&fake, 3).await;
    live_held(&fake, events::dm(DM, "U1", "live again", "6.0")).await;

    let got = run.sink.wait_for_published(8).await;
    assert_eq!(
        ids_in(&got, DM),
        [id(DM, "1.0"), id(DM, "3.0"), id(DM, "4.0"), id(DM, "6.0")],
        "the fetched DM messages go before the live one"
    );
    assert_eq!(
        ids_in(&got, CHAN),
        [
            id(CHAN, "2.0"),
            id(CHAN, "3.5"),
            id(CHAN, "4.5"),
            id(CHAN, "5.0")
        ]
    );
    let by_id = |i: String| got.iter().find(|m| m.id == i).expect("published").clone();
    // Through the same rules as live events: keys, addressing, DMs.
    let reply = by_id(id(CHAN, "3.5"));
    assert_eq!(reply.key.to_string(), "slack:C1:2.0");
    assert!(
        reply.mentions_bot,
        "a reply in the bot's thread is addressed to it"
    );
    let chatter = by_id(id(CHAN, "4.5"));
    assert!(!chatter.mentions_bot && chatter.is_group);
    let mention = by_id(id(CHAN, "5.0"));
    assert_eq!(mention.key.to_string(), "slack:C1:5.0");
    assert_eq!(mention.text, "deploy now");
    assert!(mention.mentions_bot);
    let dm = by_id(id(DM, "3.0"));
    assert_eq!(dm.key.to_string(), "slack:D1");
    assert!(!dm.is_group);

    // On the wire: each conversation asked from its last handled message, excluded.
    let ex = |c: &str, o: &str| (c.into(), o.into(), "false".into(), "100".into());
    assert_eq!(history_reads(&fake), [ex(CHAN, "2.0"), ex(DM, "1.0")]);
    let replies: Vec<(String, String)> = fake
        .calls_of("conversations.replies")
        .iter()
        .filter(|p| !param(p, "oldest").is_empty())
        .map(|p| (param(p, "ts").into(), param(p, "oldest").into()))
        .collect();
    assert_eq!(replies, [("2.0".to_string(), "2.0".to_string())]);
    run.stop().await.expect("clean stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_slack_redelivers_and_the_catch_up_fetches_is_published_once() {
    let fake = FakeSlack::start().await;
    let run = start(socket_config(&fake));
    fake.wait_for_connections(1).await;
    live(&fake, events::dm(DM, "U1", "first", "1.0")).await;
    // This one reaches the socket, but the gateway cannot store it: no ack.
    run.sink.fail_next.store(1, Ordering::SeqCst);
    let unacked = fake.push_event(events::dm(DM, "U1", "second", "2.0")).await;
    run.sink.wait_for_attempts(2).await;

    all_sockets_down(&fake, &run).await;
    back(&fake, 2).await;
    // Fetched, then sent again by Slack: one message.
    let got = run.sink.wait_for_published(2).await;
    assert_eq!(ids(&got), [id(DM, "1.0"), id(DM, "2.0")]);
    assert_eq!(fake.redeliver_unacked().await, 1);
    // Held again while the catch-up is finishing: Slack tries again.
    while !fake
        .wait_for_ack_within(&unacked.envelope_id, Duration::from_millis(250))
        .await
    {
        assert_eq!(fake.redeliver_unacked().await, 1);
    }
    assert_eq!(ids(&run.sink.published()), [id(DM, "1.0"), id(DM, "2.0")]);
    assert_eq!(
        run.sink.attempts.load(Ordering::SeqCst),
        4,
        "first, the failed one, the fetched copy and the redelivery"
    );
    assert_eq!(history_reads(&fake).len(), 1);
    run.stop().await.expect("clean stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_on_the_same_state_file_publishes_only_what_came_meanwhile() {
    let fake = FakeSlack::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let state = dir.path().join("slack-recent.json");
    // Older than anything handled: never fetched again.
    fake.add_message(DM, "0.5", "U1", "from last week");
    let first = start(socket_config(&fake).with_state_file(&state));
    fake.wait_for_connections(1).await;
    live(&fake, events::dm(DM, "U1", "hello", "1.0")).await;
    live(
        &fake,
        events::app_mention(CHAN, "U1", "<@UBOT> status?", "2.0"),
    )
    .await;
    first.sink.wait_for_published(2).await;
    // The bot answered in the DM: its own post is in the history from now on.
    let answer = OutboundMessage::new(ChatKey::new("slack", DM), "All good.");
    first.channel.send(&answer).await.expect("sent");
    first.stop().await.expect("clean stop");
    assert!(state.exists(), "the state file is written at stop");

    fake.add_unseen(events::dm(DM, "U1", "still there?", "3.0"));
    fake.add_unseen(events::with_subtype(
        events::channel_message(CHAN, "U3", "joined", "3.2"),
        "channel_join",
    ));
    fake.add_unseen(events::bot_message(CHAN, "B0OTHER", "build green", "3.4"));
    fake.add_unseen(events::channel_message(
        CHAN,
        "U1",
        "<@UBOT> and now?",
        "4.0",
    ));
    let second = start(socket_config(&fake).with_state_file(&state));
    let got = second.sink.wait_for_published(2).await;
    // The catch-up of D1 is over once a live DM after it is in.
    live_held(&fake, events::dm(DM, "U1", "live", "9.0")).await;
    let got_all = second.sink.wait_for_published(3).await;
    assert_eq!(ids_in(&got, DM), [id(DM, "3.0")]);
    assert_eq!(ids_in(&got, CHAN), [id(CHAN, "4.0")]);
    assert_eq!(
        ids_in(&got_all, DM),
        [id(DM, "3.0"), id(DM, "9.0")],
        "nothing older, nothing the bot posted"
    );
    assert_eq!(got_all.len(), 3, "{:?}", ids(&got_all));
    let ex = |c: &str, o: &str| (c.into(), o.into(), "false".into(), "100".into());
    assert_eq!(history_reads(&fake), [ex(CHAN, "2.0"), ex(DM, "1.0")]);
    second.stop().await.expect("clean stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_events_api_catches_up_after_a_restart() {
    const SECRET: &str = "8f742231b10e8888abcd99yyyzzz85a5";
    let fake = FakeSlack::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let state = dir.path().join("slack-recent.json");
    let deliver = |run: &Running, ev: Value, event_id: &str| {
        let body = events::event_callback_body(event_id, ev);
        let headers = events::signed_headers(SECRET, &events::now_timestamp(), &body);
        let ch = run.channel.clone();
        async move { ch.handle_events_request(&headers, body.as_bytes()).await.0 }
    };
    let first = start(events_config(&fake, SECRET).with_state_file(&state));
    first.sink.wait_for_connected(true).await;
    let hello = events::dm(DM, "U1", "hello", "1.0");
    // Slack has it in the history as it sends it.
    fake.add_unseen(hello.clone());
    assert_eq!(deliver(&first, hello, "Ev1").await, 200);
    first.stop().await.expect("clean stop");

    fake.add_unseen(events::dm(DM, "U1", "while you were away", "2.0"));
    let second = start(events_config(&fake, SECRET).with_state_file(&state));
    let got = second.sink.wait_for_published(1).await;
    assert_eq!(ids(&got), [id(DM, "2.0")]);
    let ex = |c: &str, o: &str| (c.into(), o.into(), "false".into(), "100".into());
    assert_eq!(history_reads(&fake), [ex(DM, "1.0")]);
    // Slack's retry of the fetched message is a duplicate (held with a 503 while the
    // catch-up is finishing: Slack tries again).
    let again = events::dm(DM, "U1", "while you were away", "2.0");
    let mut status = deliver(&second, again.clone(), "Ev2").await;
    for _ in 0..40 {
        if status != 503 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        status = deliver(&second, again.clone(), "Ev2").await;
    }
    assert_eq!(status, 200);
    assert_eq!(second.sink.attempts.load(Ordering::SeqCst), 2);
    assert_eq!(ids(&second.sink.published()), [id(DM, "2.0")]);
    second.stop().await.expect("clean stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_limited_or_failing_history_is_asked_again() {
    let fake = FakeSlack::start().await;
    let run = start(socket_config(&fake));
    fake.wait_for_connections(1).await;
    live(&fake, events::dm(DM, "U1", "hello", "1.0")).await;
    all_sockets_down(&fake, &run).await;
    fake.add_unseen(events::dm(DM, "U1", "anyone?", "2.0"));
    fake.rate_limit("conversations.history", 1, 1);
    fake.inject("conversations.history", Fault::Status(500));
    back(&fake, 2).await;
    let got = run.sink.wait_for_published(2).await;
    assert_eq!(ids(&got), [id(DM, "1.0"), id(DM, "2.0")]);
    let ex = (DM.into(), "1.0".into(), "false".into(), "100".into());
    assert_eq!(
        history_reads(&fake),
        [ex.clone(), ex.clone(), ex],
        "a 429 and a 500, then the page"
    );
    run.stop().await.expect("clean stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_scope_is_not_asked_again() {
    let fake = FakeSlack::start().await;
    let run = start(socket_config(&fake));
    fake.wait_for_connections(1).await;
    live(&fake, events::dm(DM, "U1", "hello", "1.0")).await;
    all_sockets_down(&fake, &run).await;
    fake.add_unseen(events::dm(DM, "U1", "anyone?", "2.0"));
    fake.inject(
        "conversations.history",
        Fault::Error("missing_scope".into()),
    );
    back(&fake, 2).await;
    fake.wait_for_calls("conversations.history", 1).await;

    // Another gap: the conversation is not asked again (the scope is still missing).
    all_sockets_down(&fake, &run).await;
    back(&fake, 3).await;
    // A live DM after the reconnection gets in: no catch-up holds it.
    live_held(&fake, events::dm(DM, "U1", "live", "3.0")).await;
    assert_eq!(ids(&run.sink.published()), [id(DM, "1.0"), id(DM, "3.0")]);
    assert_eq!(fake.call_count("conversations.history"), 1);
    run.stop().await.expect("clean stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_catch_up_never_publishes_the_bots_own_posts() {
    let fake = FakeSlack::start().await;
    let run = start(socket_config(&fake));
    fake.wait_for_connections(1).await;
    live(&fake, events::dm(DM, "U1", "hello", "1.0")).await;
    let answer = OutboundMessage::new(ChatKey::new("slack", DM), "Hi!");
    run.channel.send(&answer).await.expect("sent");
    all_sockets_down(&fake, &run).await;
    // Another bot, and the bot itself (by its bot id), posted while the gateway was away.
    fake.add_unseen(events::bot_message(DM, "B0OTHER", "ping", "2.0"));
    fake.add_unseen(events::bot_message(DM, BOT_ID, "an old answer", "2.5"));
    fake.add_unseen(events::dm(DM, "U1", "thanks", "3.0"));
    back(&fake, 2).await;
    live_held(&fake, events::dm(DM, "U1", "bye", "9.0")).await;
    let got = tokio::time::timeout(WAIT, run.sink.wait_for_published(3))
        .await
        .expect("published");
    assert_eq!(ids(&got), [id(DM, "1.0"), id(DM, "3.0"), id(DM, "9.0")]);
    run.stop().await.expect("clean stop");
}
