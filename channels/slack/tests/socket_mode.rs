//! Socket Mode against the fake Slack: publish before ack, no ack on failure, reconnects,
//! ignored events, watchdog, shutdown, sender names, bot threads, readiness.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{WAIT, socket_config, start};
use switchboard_channel::{Channel, ChannelError, OutboundMessage};
use switchboard_fakes::slack::{BOT_ID, BOT_USER_ID, FakeSlack, Fault, events};
use tokio::sync::Semaphore;

const TS: &str = "1700000000.000100";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn app_mention_is_published_before_the_ack_and_answered_in_thread() {
    let fake = FakeSlack::start().await;
    let run = start(socket_config(&fake));
    fake.wait_for_connections(1).await;
    run.sink.wait_for_connected(true).await;

    // Hold the publish to see that no ack goes out while it runs.
    let gate = Arc::new(Semaphore::new(0));
    *run.sink.gate.lock().unwrap() = Some(gate.clone());
    let pushed = fake
        .push_event(events::app_mention(
            "C1",
            "U1",
            "<@UBOT> what is **up**?",
            TS,
        ))
        .await;
    run.sink.wait_for_attempts(1).await;
    assert!(
        !fake.acked(&pushed.envelope_id),
        "acked before publish returned"
    );
    gate.add_permits(1);
    fake.wait_for_ack(&pushed.envelope_id).await;

    let got = run.sink.published();
    assert_eq!(got.len(), 1);
    let m = &got[0];
    assert_eq!(m.id, format!("slack:msg:C1:{TS}"));
    assert_eq!(m.key.to_string(), format!("slack:C1:{TS}"));
    assert_eq!(m.text, "what is **up**?");
    assert!(m.mentions_bot && m.is_group);
    assert_eq!(m.sender.id, "U1");
    assert_eq!(m.metadata["message_id"], TS);

    let reply = OutboundMessage::new(m.key.clone(), "It is **fine**.");
    let receipt = run.channel.send(&reply).await.expect("sent");
    assert_eq!(receipt.message_ids.len(), 1);
    let posts = fake.wait_for_posts(1).await;
    assert_eq!(posts[0].channel, "C1");
    assert_eq!(posts[0].thread_ts.as_deref(), Some(TS));
    assert_eq!(posts[0].mrkdwn, Some(true));
    assert_eq!(posts[0].text, "It is *fine*.");

    // A later reply in that thread, without a mention, is addressed to the bot.
    let p2 = fake
        .push_event(events::thread_reply(
            "C1",
            "U1",
            "and then?",
            "1700000001.000200",
            TS,
        ))
        .await;
    fake.wait_for_ack(&p2.envelope_id).await;
    let got = run.sink.wait_for_published(2).await;
    assert_eq!(got[1].key.to_string(), format!("slack:C1:{TS}"));
    assert!(got[1].mentions_bot);
    run.stop().await.expect("clean stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_publish_is_not_acked_and_the_redelivery_is() {
    let fake = FakeSlack::start().await;
    let run = start(socket_config(&fake));
    fake.wait_for_connections(1).await;
    run.sink
        .fail_next
        .store(1, std::sync::atomic::Ordering::SeqCst);
    let failed = fake
        .push_event(events::dm("D1", "U1", "first", "1.1"))
        .await;
    run.sink.wait_for_attempts(1).await;
    // Envelopes on one socket are handled in order: once the next one is acked, the
    // failed one would have been acked already if it ever were.
    let next = fake
        .push_event(events::dm("D1", "U1", "second", "1.2"))
        .await;
    fake.wait_for_ack(&next.envelope_id).await;
    assert!(
        !fake.acked(&failed.envelope_id),
        "a failed publish was acked"
    );
    assert_eq!(run.sink.published().len(), 1);

    assert_eq!(fake.redeliver_unacked().await, 1);
    fake.wait_for_ack(&failed.envelope_id).await;
    let got = run.sink.wait_for_published(2).await;
    assert_eq!(got[1].text, "first");
    assert!(got[1].id.starts_with("slack:msg:"), "{}", got[1].id);
    run.stop().await.expect("clean stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dm_is_published_with_the_channel_key() {
    let fake = FakeSlack::start().await;
    let run = start(socket_config(&fake));
    let p = fake
        .push_event(events::dm("D42", "U7", "hello bot", "5.5"))
        .await;
    fake.wait_for_ack(&p.envelope_id).await;
    let got = run.sink.wait_for_published(1).await;
    assert_eq!(got[0].key.to_string(), "slack:D42");
    assert!(!got[0].is_group);
    assert_eq!(got[0].metadata["channel_type"], "im");
    run.channel
        .send(&OutboundMessage::new(got[0].key.clone(), "hi"))
        .await
        .unwrap();
    let posts = fake.wait_for_posts(1).await;
    assert_eq!(
        (posts[0].channel.as_str(), posts[0].thread_ts.as_deref()),
        ("D42", None)
    );
    run.stop().await.expect("clean stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thread_in_a_dm_is_its_own_chat_and_answered_in_it() {
    let fake = FakeSlack::start().await;
    let run = start(socket_config(&fake));
    let mut ev = events::dm("D42", "U7", "follow-up in the thread", "5.7");
    ev["thread_ts"] = serde_json::json!("5.5");
    let p = fake.push_event(ev).await;
    fake.wait_for_ack(&p.envelope_id).await;
    let got = run.sink.wait_for_published(1).await;
    assert_eq!(got[0].key.to_string(), "slack:D42:5.5");
    assert_eq!(got[0].reply_to.as_deref(), Some("5.5"));
    assert!(!got[0].is_group);
    run.channel
        .send(&OutboundMessage::new(got[0].key.clone(), "answer"))
        .await
        .unwrap();
    let posts = fake.wait_for_posts(1).await;
    assert_eq!(
        (posts[0].channel.as_str(), posts[0].thread_ts.as_deref()),
        ("D42", Some("5.5"))
    );
    run.stop().await.expect("clean stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconnects_after_disconnect_and_after_a_dropped_socket() {
    let fake = FakeSlack::start().await;
    let run = start(socket_config(&fake));
    fake.wait_for_connections(1).await;

    fake.send_disconnect();
    fake.wait_for_connections(2).await;
    let p = fake
        .push_event(events::dm("D1", "U1", "after refresh", "2.1"))
        .await;
    fake.wait_for_ack(&p.envelope_id).await;

    fake.drop_sockets();
    fake.wait_for_connections(3).await;
    // D1 is being caught up after the drop: its event is held until Slack sends it again.
    common::catch_up::live_held(&fake, events::dm("D1", "U1", "after drop", "2.2")).await;

    let got = run.sink.wait_for_published(2).await;
    let texts: Vec<_> = got.iter().map(|m| m.text.as_str()).collect();
    assert_eq!(texts, ["after refresh", "after drop"]);
    run.stop().await.expect("clean stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subtypes_bots_own_messages_and_doubled_mentions_are_acked_not_published() {
    let fake = FakeSlack::start().await;
    let run = start(socket_config(&fake));
    let skipped = [
        events::with_subtype(events::dm("D1", "U1", "edited", "3.1"), "message_changed"),
        events::with_subtype(events::dm("D1", "U1", "gone", "3.2"), "message_deleted"),
        events::with_subtype(
            events::channel_message("C1", "U1", "", "3.3"),
            "channel_join",
        ),
        events::bot_message("C1", "BOTHER", "beep", "3.4"),
        events::dm("D1", BOT_USER_ID, "my own words", "3.5"),
        {
            let mut e = events::dm("D1", "U9", "bot with a user", "3.6");
            e["bot_id"] = BOT_ID.into();
            e
        },
        // Slack sends both; the app_mention below carries this one.
        events::channel_message("C1", "U1", "<@UBOT> ping", "3.7"),
    ];
    for e in skipped {
        let p = fake.push_event(e).await;
        fake.wait_for_ack(&p.envelope_id).await;
    }
    let p = fake
        .push_event(events::app_mention("C1", "U1", "<@UBOT> ping", "3.7"))
        .await;
    fake.wait_for_ack(&p.envelope_id).await;
    let got = run.sink.wait_for_published(1).await;
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0].text, "ping");
    assert_eq!(got[0].key.to_string(), "slack:C1:3.7");
    run.stop().await.expect("clean stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watchdog_reconnects_a_silent_socket() {
    let fake = FakeSlack::start().await;
    let mut cfg = socket_config(&fake);
    cfg.socket_idle_timeout = Duration::from_secs(1);
    let run = start(cfg);
    fake.wait_for_connections(1).await;
    fake.freeze_sockets();
    fake.wait_for_connections(2).await;
    let p = fake
        .push_event(events::dm("D1", "U1", "still there?", "4.1"))
        .await;
    fake.wait_for_ack(&p.envelope_id).await;
    run.sink.wait_for_published(1).await;
    run.stop().await.expect("clean stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typing_adds_eyes_once_to_the_triggering_message() {
    let fake = FakeSlack::start().await;
    let run = start(socket_config(&fake));
    let p = fake
        .push_event(events::app_mention("C1", "U1", "<@UBOT> hi", TS))
        .await;
    fake.wait_for_ack(&p.envelope_id).await;
    let key = run.sink.wait_for_published(1).await[0].key.clone();
    run.channel.typing(&key).await.unwrap();
    run.channel.typing(&key).await.unwrap();
    let r = fake.wait_for_reactions(1).await;
    assert_eq!(
        (
            r[0].channel.as_str(),
            r[0].timestamp.as_str(),
            r[0].name.as_str()
        ),
        ("C1", TS, "eyes")
    );
    assert_eq!(fake.call_count("reactions.add"), 1);
    run.stop().await.expect("clean stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_returns_promptly_and_reports_disconnected() {
    let fake = FakeSlack::start().await;
    let run = start(socket_config(&fake));
    fake.wait_for_connections(1).await;
    run.sink.wait_for_connected(true).await;
    let sink = run.sink.clone();
    run.stop().await.expect("clean stop");
    assert_eq!(
        sink.connected.lock().unwrap().last().map(|c| c.0),
        Some(false)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_tokens_end_the_channel() {
    let fake = FakeSlack::start().await;
    let mut cfg = socket_config(&fake);
    cfg.bot_token = "xoxb-wrong".into();
    let r = tokio::time::timeout(WAIT, start(cfg).task)
        .await
        .unwrap()
        .unwrap();
    assert!(matches!(r, Err(ChannelError::Unauthorized(_))), "{r:?}");

    let mut cfg = socket_config(&fake);
    cfg.app_token = Some("xapp-wrong".into());
    let r = tokio::time::timeout(WAIT, start(cfg).task)
        .await
        .unwrap()
        .unwrap();
    assert!(matches!(r, Err(ChannelError::Unauthorized(_))), "{r:?}");
    assert_eq!(fake.connections(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sender_names_come_from_a_users_info_cache() {
    let fake = FakeSlack::start().await;
    fake.add_user("U5", "ada");
    let run = start(socket_config(&fake));
    for (i, ts) in ["6.1", "6.2"].into_iter().enumerate() {
        let p = fake.push_event(events::dm("D5", "U5", "hi", ts)).await;
        fake.wait_for_ack(&p.envelope_id).await;
        let m = run.sink.wait_for_published(i + 1).await.pop().unwrap();
        assert_eq!(m.sender.id, "U5");
        assert_eq!(m.sender.display_name, "ada", "message {i} is named");
        assert_eq!(m.sender.username.as_deref(), Some("ada"));
    }
    assert_eq!(
        fake.call_count("users.info"),
        1,
        "looked up once, then cached"
    );
    run.stop().await.expect("clean stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn first_dm_from_a_user_allowlisted_by_username_gets_in() {
    let fake = FakeSlack::start().await;
    fake.add_user("U5", "alice");
    let run = start(socket_config(&fake));
    run.sink.allow_only(&["alice"]);
    let p = fake
        .push_event(events::dm("D5", "U5", "hello, first time", "6.1"))
        .await;
    fake.wait_for_ack(&p.envelope_id).await;
    let got = run.sink.wait_for_published(1).await;
    assert_eq!(got[0].text, "hello, first time");
    assert_eq!(got[0].sender.username.as_deref(), Some("alice"));
    assert!(run.sink.ignored().is_empty());
    run.stop().await.expect("clean stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_users_info_publishes_with_the_id() {
    let fake = FakeSlack::start().await;
    fake.add_user("U5", "ada");
    fake.inject("users.info", Fault::Status(500));
    let run = start(socket_config(&fake));
    let p = fake.push_event(events::dm("D5", "U5", "hi", "6.1")).await;
    fake.wait_for_ack(&p.envelope_id).await;
    let m = run.sink.wait_for_published(1).await.pop().unwrap();
    assert_eq!(
        (m.sender.display_name.as_str(), m.sender.username),
        ("U5", None)
    );
    // Not cached as unknown: the next message asks again and gets the name.
    let p = fake.push_event(events::dm("D5", "U5", "hi", "6.2")).await;
    fake.wait_for_ack(&p.envelope_id).await;
    let m = run.sink.wait_for_published(2).await.pop().unwrap();
    assert_eq!(m.sender.username.as_deref(), Some("ada"));
    assert_eq!(fake.call_count("users.info"), 2);
    run.stop().await.expect("clean stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_under_the_bots_own_top_level_post_is_addressed_to_it() {
    let fake = FakeSlack::start().await;
    let run = start(socket_config(&fake));
    // A post without a thread (a scheduled report, say) roots a thread of the bot's.
    let key = "slack:C1".parse().unwrap();
    run.channel
        .send(&OutboundMessage::new(key, "Daily report"))
        .await
        .expect("sent");
    let post = fake.wait_for_posts(1).await.remove(0);
    assert_eq!((post.channel.as_str(), post.thread_ts), ("C1", None));

    let other = fake
        .push_event(events::thread_reply("C1", "U1", "chatter", "7.2", "7.0"))
        .await;
    fake.wait_for_ack(&other.envelope_id).await;
    let reply = fake
        .push_event(events::thread_reply("C1", "U1", "thanks!", "7.3", &post.ts))
        .await;
    fake.wait_for_ack(&reply.envelope_id).await;
    let got = run.sink.wait_for_published(2).await;
    assert!(!got[0].mentions_bot, "someone else's thread");
    assert!(got[1].mentions_bot, "a reply in the bot's thread");
    assert_eq!(got[1].key.to_string(), format!("slack:C1:{}", post.ts));
    run.stop().await.expect("clean stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ignored_mention_marks_no_thread_and_gets_no_eyes() {
    let fake = FakeSlack::start().await;
    fake.add_user("U5", "alice");
    fake.add_user("U6", "mallory");
    let run = start(socket_config(&fake));
    run.sink.allow_only(&["alice"]);
    let p = fake
        .push_event(events::app_mention("C1", "U6", "<@UBOT> hi", TS))
        .await;
    fake.wait_for_ack(&p.envelope_id).await;
    let ignored = run.sink.ignored();
    assert_eq!(ignored.len(), 1);
    let key = ignored[0].key.clone();
    run.channel.typing(&key).await.unwrap();
    assert_eq!(fake.call_count("reactions.add"), 0, "no 👀 for a stranger");

    let p = fake
        .push_event(events::thread_reply("C1", "U5", "unrelated", "8.1", TS))
        .await;
    fake.wait_for_ack(&p.envelope_id).await;
    let got = run.sink.wait_for_published(1).await;
    assert_eq!(got[0].key, key);
    assert!(
        !got[0].mentions_bot,
        "the stranger's mention did not make it the bot's thread"
    );
    run.channel.typing(&key).await.unwrap();
    let r = fake.wait_for_reactions(1).await;
    assert_eq!(
        (r[0].channel.as_str(), r[0].timestamp.as_str()),
        ("C1", "8.1")
    );
    run.stop().await.expect("clean stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_frame_keeps_the_socket_ready_and_a_lost_socket_does_not() {
    let fake = FakeSlack::start().await;
    let run = start(socket_config(&fake));
    fake.wait_for_connections(1).await;
    run.sink.wait_for_connected(true).await;

    fake.send_frame("this is not json").await;
    // Frames on one socket are handled in order: once this is acked, the bad one was seen.
    let p = fake
        .push_event(events::dm("D1", "U1", "still here", "9.1"))
        .await;
    fake.wait_for_ack(&p.envelope_id).await;
    assert_eq!(
        run.sink.connected_log(),
        [true],
        "a bad frame is no lost socket"
    );

    fake.drop_sockets();
    run.sink
        .wait("the lost socket reported", |s| {
            s.connected_log().contains(&false)
        })
        .await;
    fake.wait_for_connections(2).await;
    run.sink.wait_for_connected(true).await;
    run.stop().await.expect("clean stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_under_a_post_from_before_a_restart_is_looked_up_once() {
    let fake = FakeSlack::start().await;
    // Posted by an earlier run: this one has no memory of it.
    fake.add_message("C7", "8.0", BOT_USER_ID, "Yesterday's report");
    fake.add_message("C7", "6.0", "U2", "lunch?");
    // A thread someone started by mentioning the bot, which answered in it.
    fake.add_message("C7", "5.0", "U2", "<@UBOT> what is our Q2 revenue?");
    fake.add_reply("C7", "5.0", "5.1", BOT_USER_ID, "About 1.2 M.");
    let run = start(socket_config(&fake));
    fake.wait_for_connections(1).await;

    for (ts, root) in [
        ("8.2", "8.0"),
        ("8.3", "8.0"),
        ("6.1", "6.0"),
        ("6.2", "6.0"),
        ("5.2", "5.0"),
    ] {
        let p = fake
            .push_event(events::thread_reply("C7", "U1", "and Q3?", ts, root))
            .await;
        fake.wait_for_ack(&p.envelope_id).await;
    }
    let got = run.sink.wait_for_published(5).await;
    let addressed: Vec<bool> = got.iter().map(|m| m.mentions_bot).collect();
    assert_eq!(addressed, [true, true, false, false, true]);
    assert_eq!(got[0].key.to_string(), "slack:C7:8.0");
    // One lookup per thread, whatever the answer.
    let lookups: Vec<_> = fake
        .calls()
        .into_iter()
        .filter(|c| c.method == "conversations.replies")
        .map(|c| (c.params["ts"].clone(), c.params["limit"].clone()))
        .collect();
    assert_eq!(
        lookups,
        [
            ("8.0".into(), "50".into()),
            ("6.0".into(), "50".into()),
            ("5.0".into(), "50".into())
        ]
    );
    run.stop().await.expect("clean stop");
}

/// After Slack says the app was uninstalled (over the socket), a socket that opens again
/// does not make the channel ready: its tokens are gone until a restart with new ones.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_an_uninstall_a_reopened_socket_leaves_the_channel_not_ready() {
    let fake = FakeSlack::start().await;
    let run = start(socket_config(&fake));
    fake.wait_for_connections(1).await;
    run.sink.wait_for_connected(true).await;
    let p = fake.push_event(events::app_uninstalled()).await;
    fake.wait_for_ack(&p.envelope_id).await;
    assert_eq!(run.sink.connected_log(), [true, false]);
    fake.drop_sockets();
    fake.wait_for_connections(2).await;
    // Closed ("reconnecting"), then the new socket's hello.
    run.sink
        .wait("the new socket's report", |s| s.connected_log().len() >= 4)
        .await;
    assert_eq!(run.sink.connected_log(), [true, false, false, false]);
    let last = run.sink.connected.lock().unwrap().last().cloned().unwrap();
    assert!(last.1.starts_with("app_uninstalled: "), "{}", last.1);
    run.stop().await.expect("clean stop");
}
