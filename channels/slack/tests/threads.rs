//! Threads through the Events API handler: what the model is told of a thread a message is
//! in (`reply_to_text`), and whether a reply is addressed to the bot when the thread's
//! lookup (`conversations.replies`) fails.

mod common;

use std::time::{Duration, Instant};

use common::{events_config, start};
use http::HeaderMap;
use serde_json::json;
use switchboard_channel::{Channel, InboundMessage, OutboundMessage};
use switchboard_fakes::slack::{BOT_USER_ID, FakeSlack, Fault, events};

const SECRET: &str = "threads-signing-secret";

fn signed(body: &str) -> HeaderMap {
    events::signed_headers(SECRET, &events::now_timestamp(), body)
}

async fn running(fake: &FakeSlack) -> common::Running {
    let run = start(events_config(fake, SECRET));
    run.sink.wait_for_connected(true).await;
    run
}

/// Deliver `event` signed, as Slack does; 200 expected; the message it published.
async fn deliver(
    run: &common::Running,
    event_id: &str,
    event: serde_json::Value,
) -> InboundMessage {
    let body = events::event_callback_body(event_id, event);
    let (status, _, _) = run
        .channel
        .handle_events_request(&signed(&body), body.as_bytes())
        .await;
    assert_eq!(status, 200);
    run.sink
        .published()
        .pop()
        .expect("published before the 200")
}

fn context(m: &InboundMessage) -> Option<&str> {
    m.metadata.get("reply_to_text").and_then(|v| v.as_str())
}

/// The threads `conversations.replies` was asked about, in order.
fn asked(fake: &FakeSlack) -> Vec<String> {
    fake.calls_of("conversations.replies")
        .iter()
        .map(|p| p["ts"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// "@bot summarise this thread" under a proposal the bot never saw: the message carries the
/// proposal and the replies before it, with who wrote them — once: the next mention there
/// does not repeat it, nor ask Slack again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mention_in_a_thread_the_bot_never_saw_carries_the_thread_so_far() {
    let fake = FakeSlack::start().await;
    fake.add_message("C5", "20.0", "U1", "Proposal: move the standup to *10am*");
    fake.add_reply("C5", "20.0", "20.1", "U2", "+1 from me");
    fake.add_reply("C5", "20.0", "20.2", "U3", "I'd rather 11 &amp; no later");
    let run = running(&fake).await;
    let mention = |ts: &str| {
        let text = "<@UBOT> summarise this thread";
        events::app_mention_in_thread("C5", "U4", text, ts, "20.0")
    };
    let first = deliver(&run, "Ev20", mention("20.3")).await;
    assert_eq!(first.key.to_string(), "slack:C5:20.0");
    assert_eq!(first.text, "summarise this thread");
    assert_eq!(
        context(&first),
        Some(
            "Earlier in this Slack thread (oldest first):\n\
             <@U1> (started the thread): Proposal: move the standup to *10am*\n\
             <@U2>: +1 from me\n\
             <@U3>: I'd rather 11 & no later"
        )
    );
    let again = deliver(&run, "Ev21", mention("20.4")).await;
    assert_eq!(again.id, "slack:msg:C5:20.4");
    assert_eq!(context(&again), None, "given once a run");
    assert_eq!(asked(&fake), ["20.0"]);
    run.stop().await.unwrap();
}

/// An announcement the bot posted with the message tool (a top-level post), then a reply in
/// its thread: the new thread session starts with what the bot posted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_under_the_bots_own_post_carries_what_it_posted() {
    let fake = FakeSlack::start().await;
    let run = running(&fake).await;
    let announcement = "Deploy at 17:00: the API is down for 10 minutes";
    run.channel
        .send(&OutboundMessage::new(
            "slack:C9".parse().unwrap(),
            announcement,
        ))
        .await
        .unwrap();
    let post = fake.wait_for_posts(1).await.remove(0);
    let reply = |ts: &str| events::thread_reply("C9", "U1", "the dashboard too?", ts, &post.ts);
    let got = deliver(&run, "Ev30", reply("1700009999.000100")).await;
    assert!(got.mentions_bot);
    assert_eq!(got.key.to_string(), format!("slack:C9:{}", post.ts));
    assert_eq!(
        context(&got),
        Some(format!(
            "Earlier in this Slack thread (oldest first):\nyou (started the thread): {announcement}"
        ))
        .as_deref()
    );
    let next = deliver(&run, "Ev31", reply("1700009999.000200")).await;
    assert_eq!(context(&next), None);
    assert_eq!(asked(&fake), [post.ts]);
    run.stop().await.unwrap();
}

/// A thread Slack will not list just now (a 5xx), or lists too late for Slack's 3 s: the
/// message goes in at once without its context, and the thread's next message gets it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_or_slow_thread_read_never_holds_the_message() {
    let fake = FakeSlack::start().await;
    for root in ["40.0", "50.0"] {
        fake.add_message("C5", root, "U1", "Which release is it?");
    }
    let run = running(&fake).await;
    let mention = |ts: &str, root: &str| {
        events::app_mention_in_thread("C5", "U2", "<@UBOT> any idea?", ts, root)
    };
    fake.inject("conversations.replies", Fault::Status(500));
    let failed = deliver(&run, "Ev40", mention("40.1", "40.0")).await;
    assert_eq!(failed.id, "slack:msg:C5:40.1");
    assert_eq!(context(&failed), None);
    let next = deliver(&run, "Ev41", mention("40.2", "40.0")).await;
    assert!(context(&next).is_some_and(|c| c.ends_with("Which release is it?")));

    fake.inject(
        "conversations.replies",
        Fault::Delay(Duration::from_secs(30)),
    );
    let t0 = Instant::now();
    let slow = deliver(&run, "Ev50", mention("50.1", "50.0")).await;
    assert!(t0.elapsed() < Duration::from_secs(3), "{:?}", t0.elapsed());
    assert_eq!(slow.id, "slack:msg:C5:50.1");
    assert_eq!(context(&slow), None);
    let next = deliver(&run, "Ev51", mention("50.2", "50.0")).await;
    assert!(context(&next).is_some());
    assert_eq!(asked(&fake), ["40.0", "40.0", "50.0", "50.0"]);
    run.stop().await.unwrap();
}

/// A thread someone started by mentioning the bot, answered by it before a restart; its
/// lookup fails once (a passing `internal_error`, a `missing_scope` fixed meanwhile). That
/// reply is not taken for the bot's, but nor is the failure kept as an answer: the next
/// reply asks again, and is addressed to the bot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_thread_lookup_is_asked_again_by_the_next_reply() {
    let fake = FakeSlack::start().await;
    for root in ["4.0", "5.0"] {
        fake.add_message("C9", root, "U2", "<@UBOT> how many users?");
        fake.add_reply("C9", root, &format!("{root}1"), BOT_USER_ID, "1 200.");
    }
    let run = running(&fake).await;
    let reply = |ts: &str, root: &str| {
        let mut ev = events::thread_reply("C9", "U2", "and last month?", ts, root);
        ev["parent_user_id"] = json!("U2");
        ev
    };
    for (fault, root) in [("internal_error", "4.0"), ("missing_scope", "5.0")] {
        fake.inject("conversations.replies", Fault::Error(fault.into()));
        let failed = deliver(
            &run,
            &format!("Ev{root}2"),
            reply(&format!("{root}2"), root),
        )
        .await;
        assert!(
            !failed.mentions_bot,
            "{fault}: no answer, no thread of the bot's"
        );
        let next = deliver(
            &run,
            &format!("Ev{root}3"),
            reply(&format!("{root}3"), root),
        )
        .await;
        assert!(next.mentions_bot, "{fault}: the next reply asked again");
        assert_eq!(next.key.to_string(), format!("slack:C9:{root}"));
    }
    assert_eq!(asked(&fake), ["4.0", "4.0", "5.0", "5.0"]);
    run.stop().await.unwrap();
}

/// A thread a mention started (the bot answers in it): its conversation holds it whole, so
/// its replies are addressed to the bot without reading the thread from Slack.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_replies_in_a_thread_a_mention_started_need_no_context() {
    let fake = FakeSlack::start().await;
    let run = running(&fake).await;
    let first = deliver(
        &run,
        "Ev60",
        events::app_mention("C6", "U1", "<@UBOT> plan the offsite", "60.0"),
    )
    .await;
    assert_eq!(context(&first), None);
    let reply = events::thread_reply("C6", "U1", "and the budget?", "60.1", "60.0");
    let next = deliver(&run, "Ev61", reply).await;
    assert!(next.mentions_bot);
    assert_eq!(context(&next), None);
    assert!(asked(&fake).is_empty(), "{:?}", asked(&fake));
    run.stop().await.unwrap();
}
