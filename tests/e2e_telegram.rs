//! End to end: the real `switchboard` binary with its Telegram adapter against the fake Bot
//! API and the fake LLM. Asserts what crossed the wire (the fake's recorded sends and
//! confirmed offsets, the LLM's recorded requests).

mod common;

use std::time::{Duration, Instant};

use common::platform::{self, cli, env_with, pairing_code, spawn_ready};
use common::telegram::{Tg, WAIT, spawn};
use switchboard_fakes::llm::{FakeLlm, Reply};
use switchboard_fakes::telegram::{FakeTelegram, TgUser};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dm_round_trip_renders_html_and_splits_a_long_reply_in_order() {
    let t = Tg::start("dm_policy = \"open\"").await;
    let alice = TgUser::new(4242, "alice");
    t.llm
        .push(Reply::text("Here is **bold** and `<tag>` & co."));
    t.tg.push_update(t.tg.dm_text(&alice, "hello"));
    let sent = t.wait_sent(1).await;
    assert_eq!(sent[0].chat_id, 4242);
    assert_eq!(sent[0].parse_mode.as_deref(), Some("HTML"));
    assert!(sent[0].text.contains("<b>bold</b>"), "{}", sent[0].text);
    assert!(
        sent[0].text.contains("&lt;tag&gt;") && !sent[0].text.contains("<tag>"),
        "{}",
        sent[0].text
    );
    assert!(sent[0].text.contains("&amp; co."), "{}", sent[0].text);
    assert_eq!(t.llm.requests()[0].last_user_text(), "hello");

    // 100 lines of 100 characters: 10 000 characters, more than two Telegram messages.
    let lines: Vec<String> = (0..100)
        .map(|i| format!("line {i:04} {}", "x".repeat(89)))
        .collect();
    let long = lines.join("\n");
    assert_eq!(long.chars().count(), 100 * 100 - 1);
    t.llm.push(Reply::text(long));
    t.tg.push_update(t.tg.dm_text(&alice, "a long answer please"));
    let last = lines[99].clone();
    let sent = t
        .sent_until("the whole long reply", |s| {
            s.iter().any(|m| m.text.contains(&last))
        })
        .await;
    let parts = &sent[1..];
    assert!(
        parts.len() >= 3,
        "10 000 characters need at least 3 messages: {}",
        parts.len()
    );
    for p in parts {
        assert!(
            p.text.chars().count() <= 4096,
            "a message of {} characters",
            p.text.chars().count()
        );
        assert_eq!(p.chat_id, 4242);
    }
    let joined: Vec<&str> = parts
        .iter()
        .flat_map(|p| p.text.lines())
        .filter(|l| !l.trim().is_empty())
        .collect();
    assert_eq!(
        joined,
        lines.iter().map(String::as_str).collect::<Vec<_>>(),
        "every line once, in order"
    );
    let ids: Vec<i64> = parts.iter().map(|p| p.message_id).collect();
    assert!(
        ids.windows(2).all(|w| w[0] < w[1]),
        "sent in order: {ids:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_message_len_splits_replies_below_the_platform_limit() {
    let t = Tg::start("dm_policy = \"open\"\nmax_message_len = 1000").await;
    let alice = TgUser::new(4343, "alice");
    let lines: Vec<String> = (0..30)
        .map(|i| format!("line {i:02} {}", "y".repeat(92)))
        .collect();
    t.llm.push(Reply::text(lines.join("\n")));
    t.tg.push_update(t.tg.dm_text(&alice, "a long answer please"));
    let last = lines[29].clone();
    let sent = t
        .sent_until("the whole reply", |s| {
            s.iter().any(|m| m.text.contains(&last))
        })
        .await;
    assert!(
        sent.len() >= 3,
        "3 000 characters in messages of at most 1 000: {}",
        sent.len()
    );
    for m in &sent {
        assert!(
            m.text.chars().count() <= 1000,
            "{} characters",
            m.text.chars().count()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_strangers_file_is_never_fetched() {
    let t = Tg::start("").await;
    let mallory = TgUser::new(6060, "mallory");
    let file = t.tg.add_file("payload.pdf", vec![7u8; 2000]);
    t.tg.push_update(t.tg.photo(6060, &mallory, &file, Some("open this")));
    // Not let in: the pairing code goes out, and the file was never fetched.
    let sent = t.wait_sent(1).await;
    assert!(pairing_code(&sent[0].text).is_some(), "{}", sent[0].text);
    assert!(t.tg.requests("getFile").is_empty());
    let inbox = t.env.dir.path().join("workspace").join("inbox");
    let left: Vec<_> = std::fs::read_dir(&inbox)
        .map(|d| d.map(|e| e.unwrap().path()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "{left:?}");
    assert_eq!(t.llm.request_count(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_dm_gets_a_pairing_code_and_is_answered_once_approved() {
    let t = Tg::start("").await;
    let bob = TgUser::new(5005, "bob");
    t.tg.push_update(t.tg.dm_text(&bob, "hi, who are you?"));
    let sent = t.wait_sent(1).await;
    assert_eq!(sent[0].chat_id, 5005);
    let code =
        pairing_code(&sent[0].text).unwrap_or_else(|| panic!("no code in {:?}", sent[0].text));
    assert!(!code.contains(['O', 'I', 'L', '0', '1']), "{code}");
    assert_eq!(
        t.llm.request_count(),
        0,
        "nothing reaches the LLM before approval"
    );
    // The code is sent once: another message before approval (or a redelivery) gets none.
    let again = t.tg.push_update(t.tg.dm_text(&bob, "hello??"));
    assert!(t.tg.wait_for_offset_confirmed(again, WAIT).await);
    assert_eq!(t.tg.sent().len(), 1, "{:?}", t.tg.sent());

    // The owner approves from a second process, through the running gateway.
    let (ok, out, err) = cli(&t.env, &["pairing", "approve", "telegram", &code]);
    assert!(ok, "approve failed: {out}{err}");
    assert!(out.contains("5005"), "{out}");
    // The same code cannot be used twice.
    let (ok, _, _) = cli(&t.env, &["pairing", "approve", "telegram", &code]);
    assert!(!ok);

    // Told in their chat that they are in.
    let sent = t.wait_sent(2).await;
    assert_eq!(sent[1].chat_id, 5005);
    assert!(sent[1].text.starts_with("✅ You're in"), "{}", sent[1].text);
    assert!(out.contains("told in their chat"), "{out}");

    t.tg.push_update(t.tg.dm_text(&bob, "now do you know me?"));
    let sent = t.wait_sent(3).await;
    assert_eq!(sent[2].chat_id, 5005);
    assert!(
        sent[2].text.contains("now do you know me?"),
        "{}",
        sent[2].text
    );
    let reqs = t.llm.requests();
    assert_eq!(reqs.len(), 1);
    assert_eq!(reqs[0].last_user_text(), "now do you know me?");

    // Revoked by name, with the channel written as people do: the CLI says whom.
    let (ok, out, err) = cli(&t.env, &["pairing", "revoke", "Telegram", "@bob"]);
    assert!(ok, "revoke failed: {out}{err}");
    assert!(out.contains("(5005)"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_between_intake_and_reply_delivers_exactly_one_reply() {
    let mut t = Tg::start("dm_policy = \"open\"").await;
    let carol = TgUser::new(7007, "carol");
    // A first round trip, so the gateway's next getUpdates is already waiting at the fake.
    let warm = t.tg.push_update(t.tg.dm_text(&carol, "warm up"));
    t.wait_sent(1).await;
    assert!(t.tg.wait_for_offset_confirmed(warm, WAIT).await);

    // The getUpdates after the next publish is refused (409), so the update stays
    // unconfirmed at the fake; the LLM answers too late: the gateway dies mid-turn.
    t.tg.conflict_polls(1);
    t.llm
        .push(Reply::text("too late").with_delay(Duration::from_secs(120)));
    let uid = t.tg.push_update(t.tg.dm_text(&carol, "survive the crash"));
    t.llm.wait_for_requests(2, WAIT).await.unwrap();
    t.gw.kill9();
    assert!(
        t.tg.pending_updates().contains(&uid),
        "the update was not confirmed before the crash"
    );

    t.gw = spawn(&t.env, &t.tg);
    // Telegram redelivers the update; the restarted gateway drops it as a duplicate and
    // finishes the stored one.
    assert!(
        t.tg.wait_for_offset_confirmed(uid, WAIT).await,
        "redelivered update never confirmed"
    );
    let sent = t
        .sent_until("the reply after the restart", |s| {
            s.iter().any(|m| m.text.contains("survive the crash"))
        })
        .await;
    t.gw.sigterm();
    assert!(t.gw.wait_exit(WAIT).0.success());
    let replies =
        t.tg.sent()
            .iter()
            .filter(|m| m.text.contains("survive the crash"))
            .count();
    assert_eq!(replies, 1, "{sent:?}");
    let reqs = t.llm.requests();
    assert_eq!(reqs.len(), 3, "warm-up, the killed turn, the resumed turn");
    assert_eq!(reqs[2].last_user_text(), "survive the crash");
    assert!(!t.tg.sent().iter().any(|m| m.text.contains("too late")));
    assert!(
        !platform::logs(&t.env).contains(t.tg.token()),
        "the bot token leaked into the log"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_after_is_waited_out_and_refused_html_is_resent_as_plain_text() {
    let t = Tg::start("dm_policy = \"open\"").await;
    let dave = TgUser::new(8008, "dave");
    t.tg.fail_sends_with_retry_after(1, 2);
    t.tg.push_update(t.tg.dm_text(&dave, "rate limit me"));
    t.tg.wait_for_requests("sendMessage", 1, WAIT)
        .await
        .expect("a first send");
    let refused_at = Instant::now();
    let sent = t.wait_sent(1).await;
    let waited = sent[0].at.duration_since(refused_at);
    assert!(
        waited >= Duration::from_millis(1800),
        "resent after {waited:?}, retry_after was 2 s"
    );
    assert!(sent[0].text.contains("rate limit me"));
    assert_eq!(t.tg.requests("sendMessage").len(), 2);

    t.tg.reject_html(true);
    t.llm.push(Reply::text("Some **bold** words"));
    t.tg.push_update(t.tg.dm_text(&dave, "format me"));
    let sent = t.wait_sent(2).await;
    assert_eq!(sent[1].parse_mode, None, "{:?}", sent[1]);
    assert!(
        sent[1].text.contains("bold") && !sent[1].text.contains('<'),
        "{}",
        sent[1].text
    );
    let sends = t.tg.requests("sendMessage");
    assert_eq!(sends.len(), 4, "one refused HTML send, one plain resend");
    assert_eq!(sends[2]["parse_mode"], "HTML");
    assert!(
        sends[3].get("parse_mode").is_none_or(|p| p.is_null()),
        "{:?}",
        sends[3]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_refused_through_all_its_retries_goes_out_before_the_next_one() {
    let t = Tg::start("dm_policy = \"open\"").await;
    let fay = TgUser::new(9100, "fay");
    // Every attempt of the first reply is refused: six tries in the adapter, eight rounds
    // of those in the outbox.
    t.tg.fail_sends_with_retry_after(48, 0);
    t.tg.push_update(t.tg.dm_text(&fay, "first"));
    t.tg.wait_for_requests("sendMessage", 48, WAIT)
        .await
        .expect("every attempt made");
    assert!(t.tg.sent().is_empty());
    // Kept, not lost: the chat's next reply brings it out, in order, without a restart.
    t.tg.push_update(t.tg.dm_text(&fay, "second"));
    let sent = t.wait_sent(2).await;
    assert!(sent[0].text.contains("first"), "{sent:?}");
    assert!(sent[1].text.contains("second"), "{sent:?}");
    assert_eq!(t.tg.requests("sendMessage").len(), 50, "each sent once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn odd_updates_and_a_huge_text_do_not_crash_and_the_text_is_cut() {
    let mut t = Tg::start("dm_policy = \"open\"").await;
    t.llm.set_default(Reply::text("noted"));
    let erin = TgUser::new(9009, "erin");
    t.tg.push_update(t.tg.edited_message(&erin, "edited"));
    t.tg.push_update(t.tg.sticker(&erin));
    t.tg.push_update(t.tg.channel_post(-100_999, "news"));
    t.tg.push_update(t.tg.callback_query(&erin, "button"));
    t.tg.push_update(t.tg.my_chat_member(-100_555, &erin));
    let huge: String = "0123456789".repeat(10_000);
    t.tg.push_update(t.tg.dm_text(&erin, &huge));
    t.wait_sent(1).await;
    let reqs = t.llm.requests();
    assert_eq!(reqs.len(), 1, "only the text reaches the LLM");
    let got = reqs[0].last_user_text();
    assert!(
        got.starts_with(&huge[..32_000]),
        "the first 32 000 characters are kept"
    );
    assert!(
        !got.contains(&huge[..32_001]),
        "nothing past 32 000 characters"
    );
    assert!(
        got.contains("[message cut"),
        "a note says it was cut: {}",
        &got[32_000..]
    );
    assert!(got.chars().count() < 32_200);

    let last = t.tg.push_update(t.tg.dm_text(&erin, "still there?"));
    let sent = t.wait_sent(2).await;
    assert_eq!(sent[1].text, "noted");
    assert_eq!(t.llm.requests()[1].last_user_text(), "still there?");
    assert!(t.tg.wait_for_offset_confirmed(last, WAIT).await);
    assert!(t.gw.is_running());
    assert_eq!(t.tg.sent().len(), 2, "no reply to the odd updates");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_chats_run_in_parallel_and_each_stays_in_order() {
    let t = Tg::start("dm_policy = \"open\"").await;
    let delay = Duration::from_millis(300);
    t.llm.set_delay(delay);
    let users: Vec<TgUser> = (0..20)
        .map(|i| TgUser::new(20_000 + i, &format!("user{i}")))
        .collect();
    let started = Instant::now();
    for j in 0..3 {
        for (i, u) in users.iter().enumerate() {
            t.tg.push_update(t.tg.dm_text(u, &format!("chat{i:02}-msg{j}")));
        }
    }
    let sent = t
        .sent_until("every chat's third message answered", |s| {
            (0..20).all(|i| {
                s.iter()
                    .any(|m| m.text.contains(&format!("chat{i:02}-msg2")))
            })
        })
        .await;
    let elapsed = started.elapsed();
    let turns = t.llm.request_count();
    let serial = delay * turns as u32;
    eprintln!("{turns} turns for 60 messages in 20 chats: {elapsed:?} (one at a time: {serial:?})");
    assert!(
        elapsed < serial / 2,
        "{turns} turns took {elapsed:?}; one at a time they take {serial:?}"
    );

    let reqs = t.llm.requests();
    for (i, u) in users.iter().enumerate() {
        let tag = format!("chat{i:02}-");
        // What the LLM saw and what was sent for this chat: msg0, msg1, msg2, once each, in order.
        let seen: String = reqs
            .iter()
            .map(|r| r.last_user_text())
            .filter(|x| x.contains(&tag))
            .collect::<Vec<_>>()
            .join("|");
        let replies: String = sent
            .iter()
            .filter(|m| m.chat_id == u.id)
            .map(|m| m.text.clone())
            .collect::<Vec<_>>()
            .join("|");
        for text in [&seen, &replies] {
            let pos: Vec<usize> = (0..3)
                .map(|j| text.find(&format!("{tag}msg{j}")).expect("each message"))
                .collect();
            assert!(
                pos[0] < pos[1] && pos[1] < pos[2],
                "out of order in chat {i}: {text}"
            );
            assert_eq!(
                text.matches(&tag).count(),
                3,
                "each message once in chat {i}: {text}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_telegram_token_never_stops_the_api_channel() {
    let llm = FakeLlm::start().await;
    let tg = FakeTelegram::start().await;
    let table = format!(
        "[channels.telegram]\nenabled = true\napi_url = \"{}\"\npacing = false\n",
        tg.url()
    );
    let env = env_with(&llm.base_url(), &table);
    let mut gw = spawn_ready(
        &env,
        &[("TELEGRAM_BOT_TOKEN", "999:not-the-right-token")],
        WAIT,
    );
    let http = platform::http_base(&env);
    let body = platform::poll_until(WAIT, "/readyz to report the refused token", || async {
        let (status, body) = platform::readyz(&env).await?;
        let detail = body["not_ready"]["telegram"].as_str()?.to_lowercase();
        (status == 503 && detail.contains("refused")).then_some(body)
    })
    .await;
    assert_eq!(body["ready"], false);
    assert!(
        !body.to_string().contains("not-the-right-token"),
        "the token leaked: {body}"
    );

    let answer = common::ask(&http, "someone", "are you still there?").await;
    assert_eq!(common::reply_text(&answer), "echo: are you still there?");
    assert!(gw.is_running());
    assert!(tg.sent().is_empty());
    let logs = platform::logs(&env);
    assert!(logs.contains("telegram"), "{logs}");
    assert!(
        !logs.contains('\u{1b}'),
        "ANSI colour codes in a log that is not a terminal"
    );
    assert!(
        !logs.contains("not-the-right-token"),
        "the token leaked into the log"
    );
}
