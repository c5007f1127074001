//! End to end: the real `switchboard` binary with its Telegram adapter against the fake Bot
//! API and the fake LLM. Asserts what crossed the wire (the fake's recorded sends and
//! confirmed offsets, the LLM's recorded requests).

mod common;

use std::time::{Duration, Instant};

use common::platform::{self, cli, env_with, pairing_code, spawn_ready};
use common::{Env, GatewayProcess};
use switchboard_fakes::llm::{FakeLlm, Reply};
use switchboard_fakes::telegram::{FakeTelegram, SentMessage, TgUser};

const WAIT: Duration = Duration::from_secs(15);

/// The fakes and a running gateway with Telegram on.
struct Tg {
    llm: FakeLlm,
    tg: FakeTelegram,
    env: Env,
    gw: GatewayProcess,
}

impl Tg {
    /// Start the fakes and the gateway; `access` adds keys to `[channels.telegram]`.
    async fn start(access: &str) -> Tg {
        let llm = FakeLlm::start().await;
        let tg = FakeTelegram::start().await;
        let table = format!(
            "[channels.telegram]\nenabled = true\napi_url = \"{}\"\npacing = false\n{access}\n",
            tg.url()
        );
        let env = env_with(&llm.base_url(), &table);
        let gw = spawn(&env, &tg);
        Tg { llm, tg, env, gw }
    }

    /// Wait until the sent messages satisfy `done`, however many that takes.
    async fn sent_until(
        &self,
        what: &str,
        done: impl Fn(&[SentMessage]) -> bool,
    ) -> Vec<SentMessage> {
        let deadline = tokio::time::Instant::now() + WAIT;
        let mut n = 1;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let Some(sent) = self.tg.wait_for_sent(n, left).await else {
                panic!(
                    "timed out waiting for {what}; sent: {:#?}\nlogs:\n{}",
                    self.tg.sent(),
                    platform::logs(&self.env)
                );
            };
            if done(&sent) {
                return sent;
            }
            n = sent.len() + 1;
        }
    }

    async fn wait_sent(&self, n: usize) -> Vec<SentMessage> {
        self.sent_until(&format!("{n} sent messages"), |s| s.len() >= n)
            .await
    }
}

fn spawn(env: &Env, tg: &FakeTelegram) -> GatewayProcess {
    spawn_ready(env, &[("TELEGRAM_BOT_TOKEN", tg.token())], WAIT)
}

/// A message with a chosen `message_id`, so replies to it can be checked.
fn with_message_id(mut update: serde_json::Value, id: i64) -> serde_json::Value {
    update["message"]["message_id"] = serde_json::json!(id);
    update
}

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

    t.tg.push_update(t.tg.dm_text(&bob, "now do you know me?"));
    let sent = t.wait_sent(2).await;
    assert_eq!(sent[1].chat_id, 5005);
    assert!(
        sent[1].text.contains("now do you know me?"),
        "{}",
        sent[1].text
    );
    let reqs = t.llm.requests();
    assert_eq!(reqs.len(), 1);
    assert_eq!(reqs[0].last_user_text(), "now do you know me?");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn group_answers_mentions_and_replies_to_the_bot_only() {
    let t = Tg::start("allow_from = [\"5151\"]").await;
    let group = -100_777;
    let alice = TgUser::new(5151, "alice");
    let stranger = TgUser::new(6006, "mallory");
    t.tg.push_update(t.tg.group_text(group, &alice, "just chatting among ourselves"));
    t.tg.push_update(with_message_id(
        t.tg.group_mention(group, &stranger, "stranger danger"),
        8999,
    ));
    t.tg.push_update(with_message_id(
        t.tg.group_mention(group, &alice, "first question"),
        9001,
    ));
    let sent = t.wait_sent(1).await;
    assert_eq!(
        (sent[0].chat_id, sent[0].reply_to),
        (group, Some(9001)),
        "{sent:?}"
    );
    assert!(sent[0].text.contains("first question"));

    t.tg.push_update(with_message_id(
        t.tg.group_text_mention(group, &alice, "second question"),
        9002,
    ));
    let sent = t.wait_sent(2).await;
    assert_eq!((sent[1].chat_id, sent[1].reply_to), (group, Some(9002)));
    assert!(sent[1].text.contains("second question"));

    let bot_msg = sent[0].clone();
    let reply = t.tg.group_reply_to_bot(
        group,
        &alice,
        "third, as a reply",
        bot_msg.message_id,
        &bot_msg.text,
    );
    // A reply of several messages: only the first one replies to the trigger.
    let long: Vec<String> = (0..60)
        .map(|i| format!("part {i:02} {}", "z".repeat(120)))
        .collect();
    t.llm.push(Reply::text(long.join("\n\n")));
    t.tg.push_update(with_message_id(reply, 9003));
    let sent = t
        .sent_until("the long group reply", |s| {
            s.iter().any(|m| m.text.contains("part 59"))
        })
        .await;
    let parts = &sent[2..];
    assert!(parts.len() >= 2, "{parts:?}");
    assert_eq!((parts[0].chat_id, parts[0].reply_to), (group, Some(9003)));
    assert!(
        parts[1..]
            .iter()
            .all(|m| m.chat_id == group && m.reply_to.is_none()),
        "{parts:?}"
    );

    // Nothing else was sent: no pairing code in the group, no answer to the plain message.
    assert!(
        t.tg.sent().iter().all(|m| m.chat_id == group),
        "{:?}",
        t.tg.sent()
    );
    assert_eq!(t.tg.sent().len(), 2 + parts.len(), "{:?}", t.tg.sent());
    let texts: Vec<String> = t
        .llm
        .requests()
        .iter()
        .map(|r| r.last_user_text())
        .collect();
    assert_eq!(texts.len(), 3, "{texts:?}");
    assert!(
        texts[0].ends_with("first question") && texts[0].contains("alice"),
        "{texts:?}"
    );
    assert!(texts[1].ends_with("second question"), "{texts:?}");
    assert!(texts[2].ends_with("third, as a reply"), "{texts:?}");
    assert!(
        !texts
            .iter()
            .any(|t| t.contains("just chatting") || t.contains("stranger")),
        "{texts:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bare_stop_in_a_group_stops_the_turn_running_there() {
    let t = Tg::start("allow_from = [\"5151\"]").await;
    let group = -100_778;
    let alice = TgUser::new(5151, "alice");
    let mallory = TgUser::new(6006, "mallory");
    // `/stop` as a Telegram client sends it, without `@bot`.
    let stop = |user: &TgUser, id: i64| {
        let mut u = with_message_id(t.tg.group_text(group, user, "/stop"), id);
        u["message"]["entities"] =
            serde_json::json!([{"type": "bot_command", "offset": 0, "length": 5}]);
        u
    };
    // Nothing of ours runs there: it may be for another bot, and is not answered.
    t.tg.push_update(stop(&alice, 7000));
    t.llm
        .push(Reply::text("far too late").with_delay(Duration::from_secs(300)));
    t.tg.push_update(t.tg.group_mention(group, &alice, "write me a novel"));
    t.llm.wait_for_requests(1, WAIT).await.unwrap();
    // Someone the bot does not serve cannot stop it; a member it serves can.
    t.tg.push_update(stop(&mallory, 7001));
    t.tg.push_update(stop(&alice, 7002));
    let sent = t.wait_sent(1).await;
    assert_eq!(
        (sent[0].text.as_str(), sent[0].chat_id, sent[0].reply_to),
        ("Stopped.", group, Some(7002)),
        "{sent:?}"
    );
    // The group is free again; the novel never comes, and nothing else was said.
    t.tg.push_update(t.tg.group_mention(group, &alice, "hello again"));
    let sent = t.wait_sent(2).await;
    assert!(sent[1].text.contains("hello again"), "{sent:?}");
    assert_eq!(t.tg.sent().len(), 2, "{:?}", t.tg.sent());
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
