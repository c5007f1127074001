//! Replies against the fake Discord: chunking, reply reference, safe mentions, typing, 429.

mod common;

use std::time::Duration;

use serde_json::json;
use switchboard_channel::{Channel, ChatKey, OutboundMessage, SendError};
use switchboard_discord::DiscordChannel;
use switchboard_fakes::discord::Fault;

const CHAN: u64 = 111;
const PARAS: usize = 20;

fn key() -> ChatKey {
    ChatKey::new("discord", CHAN.to_string())
}

/// A channel pointed at the fake; `send` and `typing` need no gateway connection.
async fn setup() -> (switchboard_fakes::discord::FakeDiscord, DiscordChannel) {
    let fake = common::fake().await;
    let ch = DiscordChannel::new(common::config(&fake, common::TOKEN)).expect("channel");
    (fake, ch)
}

/// About 5 000 characters of paragraphs with a long code block in the middle.
fn long_reply() -> String {
    let mut s = String::new();
    for i in 0..PARAS {
        s.push_str(&format!(
            "Paragraph {i}: {}\n\n",
            "lorem ipsum dolor sit amet ".repeat(6)
        ));
    }
    s.push_str("```rust\n");
    for i in 0..40 {
        s.push_str(&format!("let value_{i} = compute({i}); // step {i}\n"));
    }
    s.push_str("```\n\nThe end.");
    s
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_reply_is_split_in_order_with_balanced_fences_and_first_chunk_replies() {
    let (fake, ch) = setup().await;
    let text = long_reply();
    let n = text.chars().count();
    assert!((4900..6000).contains(&n), "{n}");
    let mut msg = OutboundMessage::new(key(), text.clone());
    msg.reply_to = Some("5555".into());
    let receipt = ch.send(&msg).await.expect("sent");
    let posts = fake.posts();
    assert!(
        posts.len() >= 3,
        "expected several chunks, got {}",
        posts.len()
    );
    assert_eq!(receipt.message_ids.len(), posts.len());
    for (i, p) in posts.iter().enumerate() {
        assert_eq!(p.channel_id, CHAN);
        assert!(p.content().chars().count() <= 2000, "chunk {i} too long");
        assert_eq!(
            p.content().matches("```").count() % 2,
            0,
            "chunk {i} leaves a fence open"
        );
        assert_eq!(p.body["allowed_mentions"]["parse"], json!(["users"]));
        if i == 0 {
            assert_eq!(p.body["message_reference"]["message_id"], "5555");
            assert_eq!(p.body["message_reference"]["fail_if_not_exists"], false);
        } else {
            assert!(
                p.body.get("message_reference").is_none(),
                "only the first chunk replies"
            );
        }
    }
    // In order: every paragraph and code line shows up once, in the original order.
    let all: String = posts
        .iter()
        .map(|p| p.content().to_string())
        .collect::<Vec<_>>()
        .join("\n");
    let mut at = 0;
    for needle in (0..PARAS)
        .map(|i| format!("Paragraph {i}:"))
        .chain((0..40).map(|i| format!("let value_{i} =")))
    {
        let pos = all[at..]
            .find(&needle)
            .unwrap_or_else(|| panic!("{needle} missing or out of order"));
        at += pos + needle.len();
        assert!(!all[at..].contains(&needle), "{needle} posted twice");
    }
    assert!(all.ends_with("The end."));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn everyone_in_a_reply_does_not_ping() {
    let (fake, ch) = setup().await;
    ch.send(&OutboundMessage::new(
        key(),
        "@everyone @here the build is green",
    ))
    .await
    .expect("sent");
    let posts = fake.posts();
    assert_eq!(posts.len(), 1);
    assert_eq!(posts[0].content(), "@everyone @here the build is green");
    let parse = posts[0].body["allowed_mentions"]["parse"]
        .as_array()
        .expect("parse list")
        .clone();
    assert!(
        !parse.contains(&json!("everyone")) && !parse.contains(&json!("roles")),
        "{parse:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typing_posts_to_the_channel() {
    let (fake, ch) = setup().await;
    ch.typing(&key()).await.expect("typing");
    assert!(fake.wait_for_typing(1, common::WAIT).await);
    assert_eq!(fake.typing_calls(), vec![CHAN]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_limit_and_server_error_are_retried_and_delivered_once() {
    let (fake, ch) = setup().await;
    fake.inject_faults([Fault::RateLimited { retry_after: 0.3 }, Fault::ServerError]);
    let started = tokio::time::Instant::now();
    let receipt = ch
        .send(&OutboundMessage::new(key(), "hello once"))
        .await
        .expect("sent");
    assert!(
        started.elapsed() >= Duration::from_millis(300),
        "retry_after not honoured"
    );
    assert_eq!(fake.faulted_posts(), 2);
    let posts = fake.posts();
    assert_eq!(posts.len(), 1, "delivered exactly once");
    assert_eq!(posts[0].content(), "hello once");
    assert_eq!(receipt.message_ids, vec![posts[0].message_id.to_string()]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_post_whose_answer_was_lost_is_not_posted_again() {
    let (fake, ch) = setup().await;
    // Discord created the message, but its answer was lost (a 502 from the edge).
    fake.inject_faults([Fault::LostAnswer]);
    let mut msg = OutboundMessage::new(key(), "your answer is 42");
    msg.in_reply_to_inbound = Some("discord:msg:7".into());
    let receipt = ch.send(&msg).await.expect("sent");
    let posts = fake.posts();
    assert_eq!(posts.len(), 1, "posted once: {posts:?}");
    assert_eq!(receipt.message_ids, vec![posts[0].message_id.to_string()]);
    assert_eq!(posts[0].body["enforce_nonce"], json!(true));
    let nonce = posts[0].body["nonce"].as_str().expect("nonce").to_string();
    assert!(nonce.len() <= 25, "{nonce}");
    // Sent again from scratch (the outbox after a restart): still the one message.
    let again = DiscordChannel::new(common::config(&fake, common::TOKEN)).expect("channel");
    let receipt = again.send(&msg).await.expect("sent");
    assert_eq!(fake.posts().len(), 1);
    assert_eq!(receipt.message_ids, vec![posts[0].message_id.to_string()]);
    // Another answer gets its own nonce; a message that answers nothing (a reminder sent
    // as set) has none, so the same text minutes later is posted again.
    let mut other = OutboundMessage::new(key(), "and 43");
    other.in_reply_to_inbound = Some("discord:msg:8".into());
    ch.send(&other).await.expect("sent");
    assert_eq!(fake.posts().len(), 2);
    let reminder = OutboundMessage::new(key(), "drink water");
    ch.send(&reminder).await.expect("sent");
    ch.send(&reminder).await.expect("sent");
    let posts = fake.posts();
    assert_eq!(posts.len(), 4);
    assert!(posts[3].body.get("nonce").is_none(), "{:?}", posts[3].body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_numbered_by_the_outbox_is_posted_once_though_its_answer_was_lost() {
    let (fake, ch) = setup().await;
    // A reminder (it answers no message) as the outbox hands it over: numbered.
    let mut reminder = OutboundMessage::new(key(), "drink water");
    reminder.delivery = Some(41);
    fake.inject_faults([Fault::LostAnswer]);
    let receipt = ch.send(&reminder).await.expect("sent");
    let posts = fake.posts();
    assert_eq!(posts.len(), 1, "posted once: {posts:?}");
    assert_eq!(receipt.message_ids, vec![posts[0].message_id.to_string()]);
    let nonce = posts[0].body["nonce"].as_str().expect("nonce");
    assert!(nonce.len() <= 25, "{nonce}");
    // The same text recorded again later is another reply, with another number: posted.
    let mut later = reminder.clone();
    later.delivery = Some(97);
    ch.send(&later).await.expect("sent");
    assert_eq!(fake.posts().len(), 2);
    assert_ne!(fake.posts()[1].body["nonce"], posts[0].body["nonce"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_rate_limit_goes_back_to_the_outbox_and_delivered_chunks_are_not_resent() {
    let (fake, ch) = setup().await;
    let msg = OutboundMessage::new(key(), long_reply());
    // First chunk goes through, the second meets a long 429 (above max_inline_wait).
    fake.inject_faults([]);
    let first = {
        // Let one post succeed, then fault: inject after the first post lands.
        let f = &fake;
        let sending = ch.send(&msg);
        tokio::pin!(sending);
        tokio::select! {
            r = &mut sending => r,
            _ = async {
                f.wait_for_posts(1, common::WAIT).await;
                f.inject_faults([Fault::RateLimited { retry_after: 60.0 }]);
                std::future::pending::<()>().await
            } => unreachable!(),
        }
    };
    let n_before = fake.posts().len();
    match first {
        Err(SendError::RetryAfter(d)) => assert_eq!(d, Duration::from_secs(60)),
        // The fault may have landed after every chunk was posted; then nothing to check.
        Ok(_) => return,
        Err(e) => panic!("unexpected {e:?}"),
    }
    // The outbox retries the same reply: delivered chunks are skipped.
    let receipt = ch.send(&msg).await.expect("retry delivered");
    let posts = fake.posts();
    let total = posts.len();
    assert!(total > n_before);
    let contents: Vec<&str> = posts.iter().map(|p| p.content()).collect();
    for (i, c) in contents.iter().enumerate() {
        assert!(!contents[..i].contains(c), "chunk {i} was posted twice");
    }
    assert_eq!(receipt.message_ids.len(), total);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_key_is_a_permanent_error() {
    let (_fake, ch) = setup().await;
    let r = ch
        .send(&OutboundMessage::new(
            ChatKey::new("discord", "general"),
            "x",
        ))
        .await;
    assert!(matches!(r, Err(SendError::Permanent(_))), "{r:?}");
}
