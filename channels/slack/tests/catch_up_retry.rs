//! A catch-up never costs the live traffic its socket, and never gives up on what it missed:
//! a live event of a conversation being caught up is left unacknowledged at once (Slack
//! sends it again) instead of blocking the socket's read loop; a catch-up that fails is
//! tried again from where it started, whatever live messages came meanwhile; a thread's
//! replies are read page after page.

mod common;

use std::time::Duration;

use common::catch_up::{all_sockets_down, back, history_reads, id, ids_in, live, live_held};
use common::{WAIT, socket_config, start};
use switchboard_fakes::slack::{FakeSlack, Fault, events};

const DM: &str = "D1";
const CHAN: &str = "C1";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_events_neither_block_their_socket_nor_other_conversations() {
    let fake = FakeSlack::start().await;
    let mut cfg = socket_config(&fake);
    // A socket whose frames are not read for 3 s (no pongs) is dropped by slack-morphism.
    cfg.socket_ping_interval = Duration::from_secs(1);
    let run = start(cfg);
    fake.wait_for_connections(1).await;
    live(&fake, events::dm(DM, "U1", "hello", "1.0")).await;
    all_sockets_down(&fake, &run).await;
    fake.add_unseen(events::dm(DM, "U1", "while away", "2.0"));
    // The DM's catch-up is slow.
    fake.inject(
        "conversations.history",
        Fault::Delay(Duration::from_secs(5)),
    );
    back(&fake, 2).await;
    fake.wait_for_calls("conversations.history", 1).await;

    // Three live DMs, held; then a message in a conversation no catch-up concerns.
    let mut held = Vec::new();
    for (i, ts) in ["3.0", "3.1", "3.2"].into_iter().enumerate() {
        let text = format!("live {i}");
        held.push(fake.push_event(events::dm(DM, "U1", &text, ts)).await);
    }
    let other = events::app_mention("C9", "U2", "<@UBOT> unrelated", "3.5");
    let other = fake.push_event(other).await;
    assert!(
        fake.wait_for_ack_within(&other.envelope_id, Duration::from_secs(1))
            .await,
        "another conversation's event waited behind the held ones"
    );
    assert!(
        held.iter().all(|p| !fake.acked(&p.envelope_id)),
        "a held event was acknowledged before its catch-up"
    );

    // The catch-up ends; Slack sends the held events again and they get in, after it.
    let got = run.sink.wait_for_published(3).await;
    assert_eq!(ids_in(&got, DM)[..2], [id(DM, "1.0"), id(DM, "2.0")]);
    let third = held
        .last()
        .map(|p| p.envelope_id.clone())
        .unwrap_or_default();
    for _ in 0..40 {
        if fake
            .wait_for_ack_within(&third, Duration::from_millis(250))
            .await
        {
            break;
        }
        fake.redeliver_unacked().await;
    }
    assert!(held.iter().all(|p| fake.acked(&p.envelope_id)));
    let got = run.sink.published();
    assert_eq!(
        ids_in(&got, DM),
        ["1.0", "2.0", "3.0", "3.1", "3.2"].map(|ts| id(DM, ts))
    );
    assert_eq!(fake.connections(), 2, "a socket was dropped meanwhile");
    run.stop().await.expect("clean stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_catch_up_is_tried_again_from_where_it_started() {
    let fake = FakeSlack::start().await;
    let mut cfg = socket_config(&fake);
    // Pages retried after 20, 40, 80 ms; the conversation after 0.6 s, then 1.2 s.
    cfg.catch_up_backoff = Duration::from_millis(20);
    let run = start(cfg);
    fake.wait_for_connections(1).await;
    live(&fake, events::dm(DM, "U1", "hello", "1.0")).await;
    all_sockets_down(&fake, &run).await;
    fake.add_unseen(events::dm(DM, "U1", "are you there?", "2.0"));
    fake.add_unseen(events::dm(DM, "U1", "hello??", "3.0"));
    // The catch-up and its first retry fail (a 500 and 3 retries each).
    for _ in 0..8 {
        fake.inject("conversations.history", Fault::Status(500));
    }
    back(&fake, 2).await;
    fake.wait_for_calls("conversations.history", 4).await;
    // A live DM after the failure gets in (and is handled: the last ts moves to it).
    live_held(&fake, events::dm(DM, "U1", "live", "4.0")).await;
    // Slack is fine again: the missed messages come, once each.
    let got = tokio::time::timeout(WAIT, run.sink.wait_for_published(4))
        .await
        .expect("the missed messages published");
    let mut dm = ids_in(&got, DM);
    assert_eq!(dm[..2], [id(DM, "1.0"), id(DM, "4.0")]);
    dm.sort();
    assert_eq!(dm, ["1.0", "2.0", "3.0", "4.0"].map(|ts| id(DM, ts)));
    let reads = history_reads(&fake);
    assert_eq!(reads.len(), 9, "{reads:?}");
    assert!(
        reads.iter().all(|r| r.1 == "1.0"),
        "asked after a message later than the gap: {reads:?}"
    );
    // Nothing more comes: the catch-up is done.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(history_reads(&fake).len(), 9);
    assert_eq!(run.sink.published().len(), 4);
    run.stop().await.expect("clean stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thread_with_more_than_a_page_of_missed_replies_is_caught_up_in_full() {
    let fake = FakeSlack::start().await;
    let run = start(socket_config(&fake));
    fake.wait_for_connections(1).await;
    // The bot is mentioned: its answer starts a thread, whose replies it follows.
    live(
        &fake,
        events::app_mention(CHAN, "U1", "<@UBOT> status?", "2.0"),
    )
    .await;
    run.sink.wait_for_published(1).await;
    all_sockets_down(&fake, &run).await;
    let replies: Vec<String> = (0..150).map(|i| format!("3.{i:06}")).collect();
    for ts in &replies {
        fake.add_reply(CHAN, "2.0", ts, "U1", &format!("reply {ts}"));
    }
    back(&fake, 2).await;
    let got = tokio::time::timeout(WAIT, run.sink.wait_for_published(151))
        .await
        .expect("every reply published");
    let want: Vec<String> = std::iter::once("2.0")
        .chain(replies.iter().map(String::as_str))
        .map(|ts| id(CHAN, ts))
        .collect();
    assert_eq!(ids_in(&got, CHAN), want);
    assert!(fake.calls_of("conversations.replies").len() >= 2);
    run.stop().await.expect("clean stop");
}
