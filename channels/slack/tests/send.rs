//! `send` against the fake: mrkdwn on the wire, threads, splitting, 429s, partial failures.

mod common;

use std::time::{Duration, Instant};

use switchboard_channel::{Channel, ChatKey, OutboundMessage, SendError};
use switchboard_fakes::slack::{BOT_TOKEN, FakeSlack, Fault};
use switchboard_slack::{SlackChannel, SlackConfig};

fn channel(fake: &FakeSlack, max_len: usize) -> SlackChannel {
    let mut cfg = SlackConfig::new(BOT_TOKEN).with_api_url(fake.api_url());
    cfg.max_message_len = max_len;
    SlackChannel::new(cfg).unwrap()
}

fn key(s: &str) -> ChatKey {
    s.parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn markdown_goes_out_as_mrkdwn_in_the_thread() {
    let fake = FakeSlack::start().await;
    let ch = channel(&fake, 40_000);
    let text =
        "**Done** with _this_ & [docs](https://example.com/a) <now>\n\n```\nlet x = 1 < 2;\n```";
    ch.send(&OutboundMessage::new(key("slack:C1:170.1"), text))
        .await
        .unwrap();
    let p = &fake.wait_for_posts(1).await[0];
    assert_eq!(p.channel, "C1");
    assert_eq!(p.thread_ts.as_deref(), Some("170.1"));
    assert_eq!(p.mrkdwn, Some(true));
    assert!(
        p.text
            .starts_with("*Done* with _this_ &amp; <https://example.com/a|docs> &lt;now&gt;"),
        "{}",
        p.text
    );
    assert!(p.text.contains("```\nlet x = 1 &lt; 2;\n```"), "{}", p.text);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_reply_is_split_in_order_under_the_limit() {
    let fake = FakeSlack::start().await;
    let ch = channel(&fake, 200);
    let text: String = (0..40)
        .map(|i| format!("Paragraph {i:02} says something.\n\n"))
        .collect();
    let receipt = ch
        .send(&OutboundMessage::new(key("slack:D1"), &text))
        .await
        .unwrap();
    let posts = fake.posts();
    assert!(posts.len() >= 5, "{} posts", posts.len());
    assert_eq!(
        receipt.message_ids,
        posts.iter().map(|p| p.ts.clone()).collect::<Vec<_>>()
    );
    assert!(posts.iter().all(|p| p.text.chars().count() <= 200));
    assert!(
        posts
            .iter()
            .all(|p| p.channel == "D1" && p.thread_ts.is_none())
    );
    let all: String = posts
        .iter()
        .map(|p| p.text.as_str())
        .collect::<Vec<_>>()
        .join("\n\n");
    let mut last = 0;
    for i in 0..40 {
        let at = all
            .find(&format!("Paragraph {i:02} "))
            .expect("every paragraph sent");
        assert!(at >= last, "paragraph {i} out of order");
        last = at;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_429_is_waited_out_inside_send() {
    let fake = FakeSlack::start().await;
    let ch = channel(&fake, 40_000);
    fake.rate_limit("chat.postMessage", 1, 1);
    let t0 = Instant::now();
    ch.send(&OutboundMessage::new(key("slack:C1"), "hello"))
        .await
        .unwrap();
    assert!(
        t0.elapsed() >= Duration::from_secs(1),
        "Retry-After honoured"
    );
    assert_eq!(fake.call_count("chat.postMessage"), 2);
    assert_eq!(fake.posts().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_retry_after_goes_back_to_the_outbox() {
    let fake = FakeSlack::start().await;
    let mut cfg = SlackConfig::new(BOT_TOKEN).with_api_url(fake.api_url());
    cfg.max_inline_retry_after = Duration::from_secs(2);
    let ch = SlackChannel::new(cfg).unwrap();
    fake.rate_limit("chat.postMessage", 1, 120);
    let r = ch
        .send(&OutboundMessage::new(key("slack:C1"), "hello"))
        .await;
    assert_eq!(r, Err(SendError::RetryAfter(Duration::from_secs(120))));
    assert!(fake.posts().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_after_partial_delivery_never_resends_a_chunk() {
    let fake = FakeSlack::start().await;
    let ch = channel(&fake, 100);
    let text: String = (0..3)
        .map(|i| format!("{}\n\n", format!("chunk{i} ").repeat(12)))
        .collect();
    fake.inject("chat.postMessage", Fault::Pass);
    fake.inject("chat.postMessage", Fault::Status(503));
    let msg = OutboundMessage::new(key("slack:C1:9.9"), &text);
    let r = ch.send(&msg).await;
    assert!(matches!(r, Err(SendError::Transient(_))), "{r:?}");
    assert_eq!(fake.posts().len(), 1);
    ch.send(&msg).await.unwrap();
    let posts = fake.posts();
    let firsts: Vec<_> = posts
        .iter()
        .map(|p| p.text.split(' ').next().unwrap().to_string())
        .collect();
    assert_eq!(firsts, ["chunk0", "chunk1", "chunk2"], "{posts:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_are_permanent_and_bad_keys_never_reach_slack() {
    let fake = FakeSlack::start().await;
    let ch = channel(&fake, 40_000);
    fake.inject("chat.postMessage", Fault::Error("channel_not_found".into()));
    let r = ch
        .send(&OutboundMessage::new(key("slack:CGONE"), "hi"))
        .await;
    assert_eq!(r, Err(SendError::Permanent("channel_not_found".into())));
    let r = ch
        .send(&OutboundMessage::new(key("telegram:1"), "hi"))
        .await;
    assert!(matches!(r, Err(SendError::Permanent(_))));
    assert_eq!(fake.call_count("chat.postMessage"), 1);
}
