//! Events API via `handle_events_request`: signatures, timestamps, challenge, publish, retries,
//! sender names, bot threads.

mod common;

use std::time::{Duration, Instant};

use common::{Sink, events_config, start};
use http::HeaderMap;
use switchboard_channel::{Channel, InboundSender, OutboundMessage};
use switchboard_fakes::slack::{BOT_USER_ID, FakeSlack, Fault, events};
use switchboard_slack::SlackChannel;

const SECRET: &str = "8f742231b10e8888abcd99yyyzzz85a5";

fn signed(body: &str) -> HeaderMap {
    events::signed_headers(SECRET, &events::now_timestamp(), body)
}

/// Deliver `body` signed, as Slack does; the status answered.
async fn deliver(ch: &SlackChannel, body: &str) -> u16 {
    ch.handle_events_request(&signed(body), body.as_bytes())
        .await
        .0
}

async fn running(fake: &FakeSlack) -> common::Running {
    let run = start(events_config(fake, SECRET));
    run.sink.wait_for_connected(true).await;
    run
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn url_verification_is_answered_with_the_challenge() {
    let fake = FakeSlack::start().await;
    let ch = SlackChannel::new(events_config(&fake, SECRET)).unwrap();
    let body =
        events::url_verification_body("3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P");
    let (status, resp, ctype) = ch
        .handle_events_request(&signed(&body), body.as_bytes())
        .await;
    assert_eq!(status, 200);
    assert_eq!(ctype, "application/json");
    let v: serde_json::Value = serde_json::from_str(&resp).unwrap();
    assert_eq!(
        v["challenge"],
        "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signed_event_is_published_and_answered_200() {
    let fake = FakeSlack::start().await;
    let run = running(&fake).await;
    let body = events::event_callback_body(
        "Ev0ABC",
        events::app_mention("C9", "U1", "<@UBOT> summarise", "1700000000.000100"),
    );
    let status = deliver(&run.channel, &body).await;
    assert_eq!(status, 200);
    let got = run.sink.published();
    assert_eq!(got.len(), 1, "published before the 200");
    assert_eq!(got[0].id, "slack:msg:C9:1700000000.000100");
    assert_eq!(got[0].key.to_string(), "slack:C9:1700000000.000100");
    assert_eq!(got[0].text, "summarise");
    run.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_signature_stale_or_future_timestamp_and_missing_headers_are_401() {
    let fake = FakeSlack::start().await;
    let run = running(&fake).await;
    let body = events::event_callback_body("Ev1", events::dm("D1", "U1", "hi", "1.0"));
    let now = events::now_timestamp();
    let now_n: u64 = now.parse().unwrap();

    let wrong = events::signed_headers("not-the-secret", &now, &body);
    let stale_ts = (now_n - 600).to_string();
    let stale = events::signed_headers(SECRET, &stale_ts, &body);
    let future_ts = (now_n + 600).to_string();
    let future = events::signed_headers(SECRET, &future_ts, &body);
    let mut tampered = signed(&body);
    tampered.insert(
        "x-slack-request-timestamp",
        (now_n - 1).to_string().parse().unwrap(),
    );
    for (name, h) in [
        ("wrong secret", wrong),
        ("stale", stale),
        ("future", future),
        ("tampered timestamp", tampered),
        ("no headers", HeaderMap::new()),
    ] {
        let (status, _, _) = run.channel.handle_events_request(&h, body.as_bytes()).await;
        assert_eq!(status, 401, "{name}");
    }
    // A body changed after signing.
    let other = events::event_callback_body("Ev1", events::dm("D1", "U1", "evil", "1.0"));
    let (status, _, _) = run
        .channel
        .handle_events_request(&signed(&body), other.as_bytes())
        .await;
    assert_eq!(status, 401);
    assert!(run.sink.published().is_empty());
    assert_eq!(
        run.sink.attempts.load(std::sync::atomic::Ordering::SeqCst),
        0
    );
    run.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_bodies_are_400_and_publish_nothing() {
    let fake = FakeSlack::start().await;
    let run = running(&fake).await;
    for body in ["not json", "{\"type\":\"event_callback\"}", "[1,2]"] {
        let status = deliver(&run.channel, body).await;
        assert_eq!(status, 400, "{body}");
    }
    assert!(run.sink.published().is_empty());
    run.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_event_carries_the_same_id_and_is_processed_once() {
    let fake = FakeSlack::start().await;
    let run = running(&fake).await;
    let body = events::event_callback_body("Ev0RETRY", events::dm("D1", "U1", "once", "1.0"));
    let first = signed(&body);
    let mut retry = signed(&body);
    retry.insert("x-slack-retry-num", "1".parse().unwrap());
    retry.insert("x-slack-retry-reason", "http_timeout".parse().unwrap());
    for h in [first, retry] {
        let (status, _, _) = run.channel.handle_events_request(&h, body.as_bytes()).await;
        assert_eq!(status, 200);
    }
    assert_eq!(
        run.sink.attempts.load(std::sync::atomic::Ordering::SeqCst),
        2
    );
    let got = run.sink.published();
    assert_eq!(
        got.len(),
        1,
        "the sink (like the gateway) drops the duplicate id"
    );
    assert!(got[0].id.starts_with("slack:msg:"), "{}", got[0].id);
    run.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn not_running_is_503_and_a_failed_publish_is_500() {
    let fake = FakeSlack::start().await;
    let ch = SlackChannel::new(events_config(&fake, SECRET)).unwrap();
    let body = events::event_callback_body("Ev2", events::dm("D1", "U1", "hi", "1.0"));
    let status = deliver(&ch, &body).await;
    assert_eq!(status, 503);

    let run = running(&fake).await;
    run.sink
        .fail_next
        .store(1, std::sync::atomic::Ordering::SeqCst);
    let status = deliver(&run.channel, &body).await;
    assert_eq!(status, 500);
    let status = deliver(&run.channel, &body).await;
    assert_eq!(status, 200, "Slack's retry goes through");
    assert_eq!(run.sink.published().len(), 1);
    run.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn first_dm_from_a_user_allowlisted_by_username_gets_in() {
    let fake = FakeSlack::start().await;
    fake.add_user("U5", "alice");
    let run = running(&fake).await;
    run.sink.allow_only(&["@alice"]);
    let body = events::event_callback_body("Ev5", events::dm("D5", "U5", "hello", "5.0"));
    let status = deliver(&run.channel, &body).await;
    assert_eq!(status, 200);
    let got = run.sink.published();
    assert_eq!(got.len(), 1, "published before the 200");
    assert_eq!(got[0].sender.username.as_deref(), Some("alice"));
    run.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_users_info_does_not_hold_the_answer_past_slacks_3_s() {
    let fake = FakeSlack::start().await;
    fake.add_user("U5", "alice");
    fake.inject("users.info", Fault::Delay(Duration::from_secs(30)));
    let run = running(&fake).await;
    let body = events::event_callback_body("Ev6", events::dm("D5", "U5", "hello", "6.0"));
    let t0 = Instant::now();
    let status = deliver(&run.channel, &body).await;
    let took = t0.elapsed();
    assert_eq!(status, 200);
    assert!(took < Duration::from_secs(3), "answered after {took:?}");
    let got = run.sink.published();
    assert_eq!(got.len(), 1);
    assert_eq!(
        (
            got[0].sender.display_name.as_str(),
            got[0].sender.username.as_deref()
        ),
        ("U5", None)
    );
    assert_eq!(fake.call_count("users.info"), 1);
    run.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_under_the_bots_own_top_level_post_is_addressed_to_it() {
    let fake = FakeSlack::start().await;
    let run = running(&fake).await;
    run.channel
        .send(&OutboundMessage::new(
            "slack:C9".parse().unwrap(),
            "Daily report",
        ))
        .await
        .unwrap();
    let post = fake.wait_for_posts(1).await.remove(0);
    // Without `parent_user_id`, as in Socket Mode: the bot remembers its own post.
    let body = events::event_callback_body(
        "Ev7",
        events::thread_reply("C9", "U1", "thanks!", "7.1", &post.ts),
    );
    let status = deliver(&run.channel, &body).await;
    assert_eq!(status, 200);
    let got = run.sink.published();
    assert_eq!(got.len(), 1);
    assert!(got[0].mentions_bot);
    assert_eq!(got[0].key.to_string(), format!("slack:C9:{}", post.ts));
    run.stop().await.unwrap();
}

/// A thread someone started by mentioning the bot, which answered in it before a restart:
/// the Events API names the person as `parent_user_id`, and the bot is found among those
/// who replied, so a follow-up without a mention is still addressed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follow_up_in_a_thread_the_bot_answered_before_a_restart_is_addressed() {
    let fake = FakeSlack::start().await;
    fake.add_message("C9", "4.0", "U2", "<@UBOT> how many users?");
    fake.add_reply("C9", "4.0", "4.1", BOT_USER_ID, "1 200.");
    let run = running(&fake).await;
    let mut ev = events::thread_reply("C9", "U2", "and last month?", "4.2", "4.0");
    ev["parent_user_id"] = serde_json::json!("U2");
    let body = events::event_callback_body("Ev8", ev);
    assert_eq!(deliver(&run.channel, &body).await, 200);
    let got = run.sink.published();
    assert_eq!(got.len(), 1);
    assert!(got[0].mentions_bot);
    assert_eq!(got[0].key.to_string(), "slack:C9:4.0");
    run.stop().await.unwrap();
}

/// 200 events/s for 2 s through the handler (signature check, parse, publish): every one
/// answered 200 and published once. (Its latency is measured by the benchmark.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_at_200_per_second_are_each_answered_and_published_once() {
    let fake = FakeSlack::start().await;
    let ch = SlackChannel::new(events_config(&fake, SECRET)).unwrap();
    let sink = Sink::new();
    let shutdown = tokio_util::sync::CancellationToken::new();
    let (c, s, t) = (ch.clone(), sink.clone(), shutdown.clone());
    let task = tokio::spawn(async move { c.run(InboundSender::new(s), t).await });
    sink.wait_for_connected(true).await;

    let mut tick = tokio::time::interval(Duration::from_millis(5));
    for i in 0..400 {
        tick.tick().await;
        let body = events::event_callback_body(
            &format!("EvP{i}"),
            events::dm("D1", "U1", "load", &format!("{i}.0")),
        );
        let h = signed(&body);
        let (status, _, _) = ch.handle_events_request(&h, body.as_bytes()).await;
        assert_eq!(status, 200);
    }
    // Each published once: as many publish calls as events, all with distinct ids.
    assert_eq!(sink.attempts.load(std::sync::atomic::Ordering::SeqCst), 400);
    let ids: std::collections::HashSet<String> =
        sink.published().into_iter().map(|m| m.id).collect();
    assert_eq!(ids.len(), 400);
    shutdown.cancel();
    task.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_lookups_together_do_not_hold_the_answer_past_slacks_3_s() {
    let fake = FakeSlack::start().await;
    fake.add_user("U5", "alice");
    // A thread nobody here knows the root of, from a user seen for the first time: both
    // lookups hang.
    fake.inject("users.info", Fault::Delay(Duration::from_secs(30)));
    fake.inject(
        "conversations.replies",
        Fault::Delay(Duration::from_secs(30)),
    );
    let run = running(&fake).await;
    let reply = events::thread_reply("C7", "U5", "and Q3?", "9.1", "9.0");
    let body = events::event_callback_body("Ev9", reply);
    let t0 = Instant::now();
    let status = deliver(&run.channel, &body).await;
    let took = t0.elapsed();
    assert_eq!(status, 200);
    assert!(took < Duration::from_secs(3), "answered after {took:?}");
    // Published in time, as far as the lookups got: the user's id for a name.
    let got = run.sink.published();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].sender.display_name, "U5");
    assert_eq!(fake.call_count("conversations.replies"), 1);
    run.stop().await.unwrap();
}

/// With names in `allow_from`, a sender is not judged without their name: a failed
/// `users.info` leaves the event to Slack's redelivery (503), which then finds the name.
/// A user Slack says it does not know goes in nameless, as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn when_names_decide_access_an_event_waits_for_its_senders_name() {
    let fake = FakeSlack::start().await;
    fake.add_user("U5", "alice");
    fake.inject("users.info", Fault::Status(500));
    let mut cfg = events_config(&fake, SECRET);
    cfg.names_decide_access = true;
    let run = start(cfg);
    run.sink.wait_for_connected(true).await;
    let body = events::event_callback_body("Ev20", events::dm("D5", "U5", "hello", "20.0"));
    assert_eq!(deliver(&run.channel, &body).await, 503);
    assert!(run.sink.published().is_empty());
    // Slack's retry of the same event.
    assert_eq!(deliver(&run.channel, &body).await, 200);
    let got = run.sink.published();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].sender.username.as_deref(), Some("alice"));
    assert_eq!(fake.call_count("users.info"), 2);

    // Someone listed by id is let in without a name: never held for it.
    fake.inject("users.info", Fault::Status(500));
    let listed = events::event_callback_body("Ev22", events::dm("D7", "U7", "hey", "22.0"));
    let mut cfg = events_config(&fake, SECRET);
    cfg.names_decide_access = true;
    cfg.ids_let_in = vec!["U7".into()];
    let by_id = start(cfg);
    by_id.sink.wait_for_connected(true).await;
    assert_eq!(deliver(&by_id.channel, &listed).await, 200);
    assert_eq!(by_id.sink.published().len(), 1);
    by_id.stop().await.unwrap();

    fake.inject("users.info", Fault::Error("user_not_found".into()));
    let body = events::event_callback_body("Ev21", events::dm("D6", "U6", "hi", "21.0"));
    assert_eq!(deliver(&run.channel, &body).await, 200);
    let got = run.sink.published();
    assert_eq!(got.len(), 2);
    assert_eq!(got[1].sender.username, None);
    run.stop().await.unwrap();
}

/// Both intakes set, as while switching over, and Slack refuses the app token: Socket Mode
/// is off, but signed events still come in over the Events API.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_app_token_leaves_the_events_api_taking_events_in() {
    let fake = FakeSlack::start().await;
    let run = start(events_config(&fake, SECRET).with_app_token("xapp-refused"));
    run.sink.wait_for_connected(true).await;
    let detail = run
        .sink
        .connected
        .lock()
        .unwrap()
        .last()
        .cloned()
        .unwrap()
        .1;
    assert!(detail.contains("app token was refused"), "{detail}");
    let body = events::event_callback_body("Ev30", events::dm("D3", "U3", "still here?", "30.0"));
    assert_eq!(deliver(&run.channel, &body).await, 200);
    assert_eq!(run.sink.published()[0].text, "still here?");
    assert_eq!(fake.call_count("apps.connections.open"), 1);
    assert_eq!(fake.connections(), 0, "no socket");
    assert!(!run.task.is_finished());
    run.stop().await.unwrap();
}

/// A 503 says why the event cannot be taken in: the channel not started yet, or stopped
/// because Slack refused the bot token (with Slack's code, never the token).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_503_names_the_reason() {
    let fake = FakeSlack::start().await;
    let body = events::event_callback_body("Ev31", events::dm("D3", "U3", "hi", "31.0"));
    let ch = SlackChannel::new(events_config(&fake, SECRET)).unwrap();
    let (status, why, _) = ch
        .handle_events_request(&signed(&body), body.as_bytes())
        .await;
    assert_eq!(
        (status, why.as_str()),
        (503, "slack channel not running: not started")
    );

    let mut cfg = events_config(&fake, SECRET);
    cfg.bot_token = "xoxb-refused-token".into();
    let run = start(cfg);
    let ended = tokio::time::timeout(Duration::from_secs(10), run.task)
        .await
        .unwrap()
        .unwrap();
    assert!(ended.is_err());
    let (status, why, _) = run
        .channel
        .handle_events_request(&signed(&body), body.as_bytes())
        .await;
    assert_eq!(status, 503);
    assert!(
        why.starts_with("slack channel not running: stopped: ")
            && why.contains("bot token refused by auth.test")
            && why.contains("invalid_auth"),
        "{why}"
    );
    assert!(!why.contains("xoxb-refused-token"), "{why}");
}

/// Slack says the app was uninstalled, or revoked the bot's token: answered 200 (Slack needs
/// nothing more), and the channel is reported not ready, saying what to do — not for a
/// revocation of someone else's token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_uninstall_or_a_revoked_bot_token_leaves_the_channel_not_ready() {
    let fake = FakeSlack::start().await;
    for (name, event) in [
        ("uninstalled", events::app_uninstalled()),
        ("revoked", events::tokens_revoked(&[BOT_USER_ID], &[])),
    ] {
        let run = running(&fake).await;
        let people = events::tokens_revoked(&[], &["U7"]);
        let body = events::event_callback_body(&format!("Ev{name}0"), people);
        assert_eq!(deliver(&run.channel, &body).await, 200);
        assert_eq!(
            run.sink.connected_log(),
            [true],
            "{name}: not the bot's token"
        );

        let body = events::event_callback_body(&format!("Ev{name}1"), event);
        assert_eq!(deliver(&run.channel, &body).await, 200, "{name}");
        let (up, detail) = run.sink.connected.lock().unwrap().last().cloned().unwrap();
        assert!(!up, "{name}");
        assert!(
            detail.contains("reinstall the app") && detail.contains("$SLACK_BOT_TOKEN"),
            "{name}: {detail}"
        );
        assert!(run.sink.published().is_empty());
        run.stop().await.unwrap();
    }
}
