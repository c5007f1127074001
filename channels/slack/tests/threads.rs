//! Threads through the Events API handler: whether a reply is addressed to the bot when the
//! thread's lookup (`conversations.replies`) fails.

mod common;

use common::{events_config, start};
use http::HeaderMap;
use serde_json::json;
use switchboard_channel::InboundMessage;
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
    let asked: Vec<String> = fake
        .calls_of("conversations.replies")
        .iter()
        .map(|p| p["ts"].as_str().unwrap_or_default().to_string())
        .collect();
    assert_eq!(asked, ["4.0", "4.0", "5.0", "5.0"]);
    run.stop().await.unwrap();
}
