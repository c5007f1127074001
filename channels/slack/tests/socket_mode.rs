//! Socket Mode against the fake Slack: publish before ack, no ack on failure, reconnects,
//! ignored events, watchdog, shutdown.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{WAIT, socket_config, start};
use switchboard_channel::{Channel, ChannelError, OutboundMessage};
use switchboard_fakes::slack::{BOT_ID, BOT_USER_ID, FakeSlack, events};
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
    assert_eq!(m.id, format!("slack:event:{}", pushed.event_id));
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
    assert_eq!(got[1].id, format!("slack:event:{}", failed.event_id));
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
    let p = fake
        .push_event(events::dm("D1", "U1", "after drop", "2.2"))
        .await;
    fake.wait_for_ack(&p.envelope_id).await;

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
    // The first message from a user shows the id while users.info runs in the background;
    // later ones carry the name. Bounded: each round trip gives the lookup time to land.
    let mut named = None;
    for i in 0..50 {
        let p = fake
            .push_event(events::dm("D5", "U5", "hi", &format!("6.{i}")))
            .await;
        fake.wait_for_ack(&p.envelope_id).await;
        let last = run.sink.wait_for_published(i + 1).await.pop().unwrap();
        if last.sender.display_name != "U5" {
            named = Some(last);
            break;
        }
    }
    let m = named.expect("a later message carries the user's name");
    assert_eq!(m.sender.id, "U5");
    assert_eq!(m.sender.display_name, "ada");
    assert_eq!(m.sender.username.as_deref(), Some("ada"));
    assert_eq!(
        fake.call_count("users.info"),
        1,
        "looked up once, then cached"
    );
    run.stop().await.expect("clean stop");
}
