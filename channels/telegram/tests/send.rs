//! Sending against the fake Bot API: HTML on the wire, splitting, replies and topics,
//! 429 / 5xx retries, the plain-text fallback, typing.

mod common;

use std::time::{Duration, Instant};

use common::{Harness, WAIT};
use switchboard_channel::format::render;
use switchboard_channel::{Channel, ChatKey, Dialect, OutboundMessage, SendError};

fn key(s: &str) -> ChatKey {
    s.parse().expect("key")
}

/// 500 words starting with `p`: about 2 500 characters, so two make a reply of two chunks.
fn paragraph(p: char) -> String {
    (0..500)
        .map(|w| format!("{p}{w:04}"))
        .collect::<Vec<_>>()
        .join(" ")
}

#[tokio::test]
async fn dm_reply_goes_out_as_html() {
    let h = Harness::start().await;
    let md = "**Done** & dusted: `x < y` — see [docs](https://example.com/?a=1&b=\"2\")";
    let receipt = h
        .channel
        .send(&OutboundMessage::new(key("telegram:5001"), md))
        .await
        .expect("sent");
    let sent = h.fake.sent();
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].chat_id, 5001);
    assert_eq!(sent[0].parse_mode.as_deref(), Some("HTML"));
    assert_eq!(sent[0].text, render(md, Dialect::TelegramHtml));
    let html = &sent[0].text;
    assert!(
        html.starts_with("<b>Done</b> &amp; dusted: <code>x &lt; y</code>"),
        "{html}"
    );
    assert!(
        html.contains("<a href=\"https://example.com/?a=1&amp;b=&quot;2&quot;\">docs</a>"),
        "{html}"
    );
    assert_eq!(sent[0].reply_to, None, "no reply threading in DMs");
    assert_eq!(receipt.message_ids, [sent[0].message_id.to_string()]);
}

#[tokio::test]
async fn long_reply_is_split_in_order_under_the_limit() {
    let h = Harness::start().await;
    let paragraphs: Vec<String> = (0..120)
        .map(|p| {
            (0..16)
                .map(|w| format!("w{:04}", p * 16 + w))
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect();
    let text = paragraphs.join("\n\n");
    assert!(text.chars().count() >= 10_000);
    let receipt = h
        .channel
        .send(&OutboundMessage::new(key("telegram:5001"), &text))
        .await
        .expect("sent");
    let sent = h.fake.sent();
    assert!(sent.len() >= 3, "{} messages", sent.len());
    assert!(sent.iter().all(|m| m.text.chars().count() <= 4096));
    let words: Vec<String> = sent
        .iter()
        .flat_map(|m| m.text.split_whitespace().map(str::to_string))
        .collect();
    let expected: Vec<String> = (0..1920).map(|i| format!("w{i:04}")).collect();
    assert_eq!(words, expected, "every word once, in order");
    let ids: Vec<String> = sent.iter().map(|m| m.message_id.to_string()).collect();
    assert_eq!(receipt.message_ids, ids);
}

#[tokio::test]
async fn group_replies_thread_to_the_trigger_and_topics_keep_their_thread() {
    let h = Harness::start().await;
    let mut msg = OutboundMessage::new(
        key("telegram:-100200"),
        format!("{}\n\n{}", "a ".repeat(1500), "b ".repeat(1500)),
    );
    msg.reply_to = Some("55".into());
    h.channel.send(&msg).await.expect("sent");
    let mut topic = OutboundMessage::new(key("telegram:-100300:topic:42"), "in topic");
    topic.reply_to = Some("not-a-number".into());
    h.channel.send(&topic).await.expect("sent");
    let mut dm = OutboundMessage::new(key("telegram:5001"), "dm");
    dm.reply_to = Some("9".into());
    h.channel.send(&dm).await.expect("sent");

    let sent = h.fake.sent();
    assert_eq!(sent.len(), 4);
    assert_eq!(sent[0].reply_to, Some(55), "first chunk replies");
    assert!(sent[0].allow_without_reply);
    assert_eq!(sent[1].reply_to, None, "later chunks do not");
    assert_eq!(
        (sent[2].chat_id, sent[2].thread_id, sent[2].reply_to),
        (-100300, Some(42), None)
    );
    assert_eq!((sent[3].chat_id, sent[3].reply_to), (5001, None));
}

#[tokio::test]
async fn retry_after_is_honoured_then_delivered_once() {
    let h = Harness::start().await;
    h.fake.fail_sends_with_retry_after(1, 1);
    let t0 = Instant::now();
    h.channel
        .send(&OutboundMessage::new(key("telegram:5001"), "patience"))
        .await
        .expect("sent");
    assert!(
        t0.elapsed() >= Duration::from_secs(1),
        "waited {:?}",
        t0.elapsed()
    );
    assert_eq!(h.fake.requests("sendMessage").len(), 2);
    let sent = h.fake.sent();
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].text, render("patience", Dialect::TelegramHtml));
}

#[tokio::test]
async fn endless_rate_limiting_is_bounded_and_reported() {
    let h = Harness::start().await;
    h.fake.fail_sends_with_retry_after(10, 0);
    let err = h
        .channel
        .send(&OutboundMessage::new(key("telegram:5001"), "x"))
        .await
        .unwrap_err();
    assert_eq!(err, SendError::RetryAfter(Duration::ZERO));
    assert_eq!(h.fake.requests("sendMessage").len(), 6);
    assert!(h.fake.sent().is_empty());
}

#[tokio::test]
async fn rejected_html_is_resent_as_plain_text() {
    let h = Harness::start().await;
    h.fake.reject_html(true);
    let md = "**bold** and _odd_ <markup>";
    h.channel
        .send(&OutboundMessage::new(key("telegram:5001"), md))
        .await
        .expect("sent");
    let sent = h.fake.sent();
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].parse_mode, None);
    assert_eq!(sent[0].text, render(md, Dialect::Plain));
    assert!(sent[0].text.starts_with("bold and odd"), "{}", sent[0].text);
    let first = &h.fake.requests("sendMessage")[0];
    assert_eq!(first["parse_mode"], "HTML", "HTML was tried first");
    assert_eq!(h.fake.requests("sendMessage").len(), 2);
}

#[tokio::test]
async fn server_error_is_retried() {
    // teloxide itself waits 10 s after any 5xx before returning the error.
    let h = Harness::start().await;
    h.fake.fail_sends_with_server_error(1);
    h.channel
        .send(&OutboundMessage::new(key("telegram:5001"), "again"))
        .await
        .expect("sent");
    assert_eq!(h.fake.requests("sendMessage").len(), 2);
    assert_eq!(h.fake.sent().len(), 1);
}

#[tokio::test]
async fn bad_keys_are_permanent_errors() {
    let h = Harness::start().await;
    for k in ["telegram:abc", "discord:1", "telegram:1:topic:x"] {
        let err = h
            .channel
            .send(&OutboundMessage::new(key(k), "x"))
            .await
            .unwrap_err();
        assert!(matches!(err, SendError::Permanent(_)), "{k}: {err:?}");
    }
    assert!(h.fake.requests("sendMessage").is_empty());
}

#[tokio::test]
async fn typing_goes_to_the_topic() {
    let h = Harness::start().await;
    h.channel
        .typing(&key("telegram:-100300:topic:42"))
        .await
        .expect("typing");
    let r = h
        .fake
        .wait_for_requests("sendChatAction", 1, WAIT)
        .await
        .expect("request");
    assert_eq!(r[0]["chat_id"], -100300);
    assert_eq!(r[0]["action"], "typing");
    assert_eq!(r[0]["message_thread_id"], 42);
}

#[tokio::test]
async fn network_errors_are_transient_and_never_carry_the_token() {
    let dead = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}", dead.local_addr().expect("addr"));
    drop(dead);
    let inbox = tempfile::tempdir().expect("tempdir");
    let mut cfg = switchboard_telegram::TelegramConfig::new("4242:SECRET-token", url, inbox.path());
    cfg.retry_initial = Duration::from_millis(5);
    cfg.retry_max = Duration::from_millis(20);
    let channel = switchboard_telegram::TelegramChannel::new(cfg).expect("channel");
    let err = channel
        .send(&OutboundMessage::new(key("telegram:5001"), "hello"))
        .await
        .unwrap_err();
    match err {
        SendError::Transient(text) => assert!(!text.contains("SECRET-token"), "{text}"),
        other => panic!("expected Transient, got {other:?}"),
    }
}

#[tokio::test]
async fn a_reply_that_failed_part_way_resumes_without_resending() {
    // Two attempts per chunk; teloxide waits 10 s after each 5xx before returning it.
    let h = Harness::start_with(|_| {}, |cfg| cfg.send_attempts = 2).await;
    let text = ['a', 'b', 'c'].map(paragraph).join("\n\n");
    let mut msg = OutboundMessage::new(key("telegram:-100200"), &text);
    msg.reply_to = Some("55".into());
    // Chunk 1 goes out; chunk 2 fails on both of its attempts.
    h.fake.pass_sends(1);
    h.fake.fail_sends_with_server_error(2);

    let err = h.channel.send(&msg).await.unwrap_err();
    assert!(matches!(err, SendError::Transient(_)), "{err:?}");
    let sent = h.fake.sent();
    assert_eq!(sent.len(), 1, "only chunk 1 is out");
    assert_eq!(sent[0].text, paragraph('a'));

    // The outbox retries the same reply: chunks 2 and 3 once each, chunk 1 not again.
    let receipt = h.channel.send(&msg).await.expect("the rest is sent");
    let sent = h.fake.sent();
    let texts: Vec<&str> = sent.iter().map(|m| m.text.as_str()).collect();
    assert_eq!(texts, [paragraph('a'), paragraph('b'), paragraph('c')]);
    assert_eq!(
        sent.iter().map(|m| m.reply_to).collect::<Vec<_>>(),
        [Some(55), None, None],
        "only the first chunk replies"
    );
    assert_eq!(h.fake.requests("sendMessage").len(), 5, "1 + 2 failed + 2");
    let ids: Vec<String> = sent.iter().map(|m| m.message_id.to_string()).collect();
    assert_eq!(receipt.message_ids, ids);
}

/// A long `retry_after` in the middle of a reply goes back to the outbox at once (which
/// waits, bounded and heeding shutdown) instead of being waited out inside the send; its
/// retry goes on from the refused chunk.
#[tokio::test]
async fn a_long_retry_after_mid_reply_is_handed_back_and_the_retry_goes_on() {
    let h = Harness::start().await;
    let text = ['a', 'b'].map(paragraph).join("\n\n");
    let mut msg = OutboundMessage::new(key("telegram:5001"), &text);
    msg.delivery = Some(7);
    h.fake.pass_sends(1);
    h.fake.fail_sends_with_retry_after(1, 3600);
    let t0 = Instant::now();
    let err = h.channel.send(&msg).await.unwrap_err();
    assert_eq!(err, SendError::RetryAfter(Duration::from_secs(3600)));
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
    assert_eq!(h.fake.sent().len(), 1);
    h.channel.send(&msg).await.expect("the rest is sent");
    let texts: Vec<String> = h.fake.sent().into_iter().map(|m| m.text).collect();
    assert_eq!(texts, [paragraph('a'), paragraph('b')]);
}

/// What was sent of a reply that failed part-way belongs to that reply (its outbox delivery),
/// not to its text: the same long text sent again later (a daily reminder) goes out whole.
#[tokio::test]
async fn an_equal_reply_after_one_that_failed_part_way_is_sent_whole() {
    let h = Harness::start().await;
    let text = ['a', 'b'].map(paragraph).join("\n\n");
    let mut monday = OutboundMessage::new(key("telegram:5001"), &text);
    monday.delivery = Some(1);
    // Chunk 1 goes out; chunk 2 is refused until the adapter gives up (6 attempts).
    h.fake.pass_sends(1);
    h.fake.fail_sends_with_retry_after(6, 0);
    h.channel.send(&monday).await.unwrap_err();
    assert_eq!(h.fake.sent().len(), 1);

    let mut tuesday = monday.clone();
    tuesday.delivery = Some(2);
    h.channel.send(&tuesday).await.expect("sent");
    let texts: Vec<String> = h.fake.sent().into_iter().map(|m| m.text).collect();
    assert_eq!(texts, [paragraph('a'), paragraph('a'), paragraph('b')]);
}

#[tokio::test]
async fn plain_text_fallback_is_split_to_fit_the_limit() {
    let h = Harness::start_with(|_| {}, |cfg| cfg.max_message_len = 100).await;
    h.fake.reject_html(true);
    // Fits as HTML (the link shows as "docs"), not as plain text ("docs (https://…)").
    let md = format!(
        "{} see [docs](https://example.com/some/long/path/page)",
        "🙂".repeat(40)
    );
    h.channel
        .send(&OutboundMessage::new(key("telegram:5001"), &md))
        .await
        .expect("sent");
    let sent = h.fake.sent();
    assert!(sent.len() >= 2, "{sent:?}");
    for m in &sent {
        assert_eq!(m.parse_mode, None);
        assert!(m.text.encode_utf16().count() <= 100, "{}", m.text);
    }
    let texts: Vec<&str> = sent.iter().map(|m| m.text.as_str()).collect();
    assert_eq!(texts.join(" "), render(&md, Dialect::Plain));
}

#[tokio::test]
async fn a_reply_to_a_group_that_became_a_supergroup_goes_to_the_supergroup() {
    let h = Harness::start().await;
    // Made public or given topics: Telegram moved the group to a new id.
    h.fake.migrate(-555, -100_555);
    let receipt = h
        .channel
        .send(&OutboundMessage::new(key("telegram:-555"), "still here"))
        .await
        .expect("sent");
    let sent = h.fake.sent();
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert_eq!(
        (sent[0].chat_id, sent[0].text.as_str()),
        (-100_555, "still here")
    );
    assert_eq!(receipt.message_ids, [sent[0].message_id.to_string()]);
}
