//! End to end: the real `switchboard` binary with its Slack adapter (slack-morphism) against
//! the fake Slack (Web API + Socket Mode) and the fake LLM, and the Events API through the
//! gateway's own HTTP listener. Asserts what crossed the wire: posts, acks, HTTP statuses,
//! and the LLM's recorded requests.

mod common;

use std::time::Duration;

use common::platform;
use common::{Env, GatewayProcess};
use switchboard_fakes::llm::{FakeLlm, Reply};
use switchboard_fakes::slack::events::{
    app_mention, app_mention_in_thread, dm, event_callback_body, now_timestamp, signed_headers,
    url_verification_body,
};
use switchboard_fakes::slack::{APP_TOKEN, BOT_TOKEN, FakeSlack, Post};

const WAIT: Duration = Duration::from_secs(15);
const SECRET: &str = "e2e-signing-secret";
const CHANNEL: &str = "C0CHAN";
const USER: &str = "U0ALICE";

/// The fakes and a running gateway with Slack on.
struct Sl {
    llm: FakeLlm,
    slack: FakeSlack,
    env: Env,
    gw: GatewayProcess,
    socket_mode: bool,
}

impl Sl {
    /// Socket Mode (`socket_mode`) or the Events API only.
    async fn start(socket_mode: bool) -> Sl {
        let (llm, slack, env) = platform::slack_fakes().await;
        let gw = spawn(&env, socket_mode);
        let t = Sl {
            llm,
            slack,
            env,
            gw,
            socket_mode,
        };
        t.wait_ready().await;
        t
    }

    /// Until `/readyz` says every channel is up (Slack identified, sockets open).
    async fn wait_ready(&self) {
        platform::poll_until(WAIT, "the gateway to be ready", || async {
            (platform::readyz(&self.env).await?.0 == 200).then_some(())
        })
        .await;
        if self.socket_mode {
            self.slack.wait_for_connections(1).await;
        }
    }

    async fn restart(&mut self) {
        self.gw = spawn(&self.env, self.socket_mode);
        self.wait_ready().await;
    }

    /// POST a body to the gateway's `/slack/events` with these headers.
    async fn post_event(&self, body: &str, headers: reqwest::header::HeaderMap) -> (u16, String) {
        let resp = reqwest::Client::new()
            .post(format!("{}/slack/events", platform::http_base(&self.env)))
            .headers(headers)
            .body(body.to_string())
            .send()
            .await
            .expect("POST /slack/events");
        (
            resp.status().as_u16(),
            resp.text().await.unwrap_or_default(),
        )
    }

    async fn wait_posts(&self, n: usize) -> Vec<Post> {
        if tokio::time::timeout(WAIT, self.slack.wait_for_posts(n))
            .await
            .is_err()
        {
            panic!(
                "expected {n} posts, got {:#?}\nlogs:\n{}",
                self.slack.posts(),
                platform::logs(&self.env)
            );
        }
        self.slack.posts()
    }
}

fn spawn(env: &Env, socket_mode: bool) -> GatewayProcess {
    let vars: &[(&str, &str)] = if socket_mode {
        &[
            ("SLACK_BOT_TOKEN", BOT_TOKEN),
            ("SLACK_APP_TOKEN", APP_TOKEN),
        ]
    } else {
        &[
            ("SLACK_BOT_TOKEN", BOT_TOKEN),
            ("SLACK_SIGNING_SECRET", SECRET),
        ]
    };
    platform::spawn_ready(env, vars, WAIT)
}

fn mention(text: &str, ts: &str) -> serde_json::Value {
    app_mention(CHANNEL, USER, &format!("<@UBOT> {text}"), ts)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn socket_mode_mentions_in_thread_dms_and_reconnects_after_a_drop() {
    let t = Sl::start(true).await;
    t.llm.push(Reply::text("Sure, **bold** it is."));
    let ts = "1700000000.000100";
    let pushed = t.slack.push_event(mention("make it bold", ts)).await;
    t.slack.wait_for_ack(&pushed.envelope_id).await;
    let posts = t.wait_posts(1).await;
    assert_eq!(posts[0].channel, CHANNEL);
    assert_eq!(
        posts[0].thread_ts.as_deref(),
        Some(ts),
        "replies in the mention's thread"
    );
    assert!(
        posts[0].text.contains("*bold*") && !posts[0].text.contains("**"),
        "mrkdwn: {}",
        posts[0].text
    );
    assert!(
        t.llm.requests()[0]
            .last_user_text()
            .ends_with("make it bold")
    );

    t.slack
        .push_event(dm("D0DM", USER, "a private word", "1700000001.000200"))
        .await;
    let posts = t.wait_posts(2).await;
    assert_eq!(posts[1].channel, "D0DM");
    assert_eq!(posts[1].thread_ts, None);
    assert_eq!(posts[1].text, "echo: a private word");

    let before = t.slack.connections();
    t.slack.drop_sockets();
    tokio::time::timeout(WAIT, t.slack.wait_for_connections(before + 1))
        .await
        .unwrap_or_else(|_| panic!("no reconnect; logs:\n{}", platform::logs(&t.env)));
    let pushed = t
        .slack
        .push_event(mention("after the drop", "1700000002.000300"))
        .await;
    // While the channel's catch-up after the drop runs, a live event of it is left
    // unacknowledged: Slack sends it again, as here, until it is taken in.
    let mut acked = false;
    for _ in 0..40 {
        acked = t
            .slack
            .wait_for_ack_within(&pushed.envelope_id, Duration::from_millis(250))
            .await;
        if acked {
            break;
        }
        t.slack.redeliver_unacked().await;
    }
    assert!(
        acked,
        "never acknowledged; logs:\n{}",
        platform::logs(&t.env)
    );
    let posts = t.wait_posts(3).await;
    assert_eq!(posts[2].thread_ts.as_deref(), Some("1700000002.000300"));
    assert!(
        posts[2].text.ends_with("after the drop"),
        "{}",
        posts[2].text
    );
    assert_eq!(t.llm.request_count(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_api_verifies_signatures_and_processes_a_retried_event_once() {
    let t = Sl::start(false).await;

    let body = url_verification_body("challenge-e2e-42");
    let (status, text) = t
        .post_event(&body, signed_headers(SECRET, &now_timestamp(), &body))
        .await;
    assert_eq!(status, 200);
    let v: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    assert_eq!(v["challenge"], "challenge-e2e-42");

    let forged = event_callback_body("Ev0FORGED", mention("forged request", "1700000010.000100"));
    let (status, _) = t
        .post_event(
            &forged,
            signed_headers("not-the-secret", &now_timestamp(), &forged),
        )
        .await;
    assert_eq!(status, 401, "wrong signature");
    let stale = event_callback_body("Ev0STALE", mention("stale request", "1700000011.000100"));
    let old = (now_timestamp().parse::<u64>().unwrap() - 600).to_string();
    let (status, _) = t
        .post_event(&stale, signed_headers(SECRET, &old, &stale))
        .await;
    assert_eq!(status, 401, "timestamp 10 minutes old");

    let ts = "1700000012.000100";
    let valid = event_callback_body("Ev0VALID1", mention("a real question", ts));
    let (status, _) = t
        .post_event(&valid, signed_headers(SECRET, &now_timestamp(), &valid))
        .await;
    assert_eq!(status, 200);
    let posts = t.wait_posts(1).await;
    assert_eq!(
        (posts[0].channel.as_str(), posts[0].thread_ts.as_deref()),
        (CHANNEL, Some(ts))
    );
    assert!(
        posts[0].text.ends_with("a real question"),
        "{}",
        posts[0].text
    );

    // Slack retries the same event (same event_id), signed anew.
    let mut headers = signed_headers(SECRET, &now_timestamp(), &valid);
    headers.insert("x-slack-retry-num", "1".parse().unwrap());
    headers.insert("x-slack-retry-reason", "http_timeout".parse().unwrap());
    let (status, _) = t.post_event(&valid, headers).await;
    assert_eq!(status, 200);

    // A later event is answered; by then the retry was long decided.
    let next = event_callback_body(
        "Ev0VALID2",
        mention("the next question", "1700000013.000100"),
    );
    let (status, _) = t
        .post_event(&next, signed_headers(SECRET, &now_timestamp(), &next))
        .await;
    assert_eq!(status, 200);
    let posts = t.wait_posts(2).await;
    assert!(
        posts[1].text.ends_with("the next question"),
        "{}",
        posts[1].text
    );

    assert_eq!(t.slack.posts().len(), 2, "{:#?}", t.slack.posts());
    let texts: Vec<String> = t
        .llm
        .requests()
        .iter()
        .map(|r| r.last_user_text())
        .collect();
    assert_eq!(texts.len(), 2, "{texts:?}");
    assert!(
        !texts
            .iter()
            .any(|x| x.contains("forged") || x.contains("stale")),
        "{texts:?}"
    );
    assert!(
        !platform::logs(&t.env).contains(SECRET),
        "the signing secret leaked into the log"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_between_intake_and_reply_delivers_exactly_one_reply() {
    let mut t = Sl::start(true).await;
    t.llm
        .push(Reply::text("too late").with_delay(Duration::from_secs(120)));
    let ts = "1700000020.000100";
    let event = mention("survive the crash", ts);
    let pushed = t.slack.push_event(event.clone()).await;
    // Acknowledged only once stored; then the turn starts and the gateway dies in it.
    t.slack.wait_for_ack(&pushed.envelope_id).await;
    t.llm.wait_for_requests(1, WAIT).await.unwrap();
    t.gw.kill9();

    t.restart().await;
    let posts = t.wait_posts(1).await;
    assert_eq!(posts[0].thread_ts.as_deref(), Some(ts));
    assert!(
        posts[0].text.ends_with("survive the crash"),
        "{}",
        posts[0].text
    );

    // Slack delivers the same event again: acknowledged, dropped as a duplicate.
    let again = t.slack.push_event_with_id(&pushed.event_id, event).await;
    t.slack.wait_for_ack(&again.envelope_id).await;
    t.slack
        .push_event(mention("anything else?", "1700000021.000100"))
        .await;
    let posts = t.wait_posts(2).await;
    assert!(
        posts[1].text.ends_with("anything else?"),
        "{}",
        posts[1].text
    );
    t.gw.sigterm();
    assert!(t.gw.wait_exit(WAIT).0.success());

    let replies = t
        .slack
        .posts()
        .iter()
        .filter(|p| p.text.contains("survive the crash"))
        .count();
    assert_eq!(replies, 1, "{:#?}", t.slack.posts());
    let reqs = t.llm.requests();
    assert_eq!(
        reqs.len(),
        3,
        "the killed turn, the resumed one, the next question"
    );
    assert!(reqs[1].last_user_text().ends_with("survive the crash"));
    assert!(!t.slack.posts().iter().any(|p| p.text.contains("too late")));
    let logs = platform::logs(&t.env);
    assert!(
        !logs.contains(BOT_TOKEN) && !logs.contains(APP_TOKEN),
        "a token leaked into the log"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_sent_while_the_gateway_was_stopped_are_answered_once_after_it_starts() {
    let mut t = Sl::start(true).await;
    let dm_chan = "D0DM";
    for event in [
        dm(dm_chan, USER, "before the stop", "1700000030.000100"),
        mention("first question", "1700000030.000200"),
    ] {
        let pushed = t.slack.push_event(event).await;
        t.slack.wait_for_ack(&pushed.envelope_id).await;
    }
    t.wait_posts(2).await;
    t.gw.sigterm();
    assert!(t.gw.wait_exit(WAIT).0.success());
    assert!(
        t.env.data_dir().join("slack-recent.json").exists(),
        "the state file is written at stop"
    );

    // Sent while no gateway ran: Slack never delivers these.
    t.slack.add_unseen(dm(
        dm_chan,
        USER,
        "while you were away",
        "1700000031.000100",
    ));
    t.slack
        .add_unseen(mention("are you back?", "1700000032.000100"));
    t.restart().await;
    let posts = t.wait_posts(4).await;
    let mut late: Vec<(&str, Option<&str>, &str)> = posts[2..]
        .iter()
        .map(|p| (p.channel.as_str(), p.thread_ts.as_deref(), p.text.as_str()))
        .collect();
    late.sort();
    assert_eq!(late.len(), 2, "{late:?}");
    assert_eq!(
        (late[0].0, late[0].1),
        (CHANNEL, Some("1700000032.000100")),
        "answered in the mention's thread"
    );
    assert!(late[0].2.ends_with("are you back?"), "{late:?}");
    assert_eq!(late[1], (dm_chan, None, "echo: while you were away"));
    let mut reads: Vec<(String, String, String)> = t
        .slack
        .calls_of("conversations.history")
        .iter()
        .map(|p| {
            let get = |k: &str| p[k].as_str().unwrap_or_default().to_string();
            (get("channel"), get("oldest"), get("inclusive"))
        })
        .collect();
    reads.sort();
    let read = |c: &str, o: &str| (c.to_string(), o.to_string(), "false".to_string());
    assert_eq!(
        reads,
        [
            read(CHANNEL, "1700000030.000200"),
            read(dm_chan, "1700000030.000100")
        ]
    );

    // Each once: the next message is the only further answer.
    let pushed = t
        .slack
        .push_event(dm(dm_chan, USER, "thanks", "1700000033.000100"))
        .await;
    t.slack.wait_for_ack(&pushed.envelope_id).await;
    let posts = t.wait_posts(5).await;
    assert_eq!(posts[4].text, "echo: thanks");
    assert_eq!(t.slack.posts().len(), 5, "{:#?}", t.slack.posts());
    assert_eq!(t.llm.request_count(), 5);
}

/// "@bot summarise this thread" in a thread the bot never took part in: the model is shown
/// the thread's root and replies (with who wrote them), not only the mention.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mention_in_someone_elses_thread_shows_the_model_the_thread() {
    let t = Sl::start(false).await;
    let root = "1700000040.000100";
    t.slack
        .add_message(CHANNEL, root, "U0BOB", "Proposal: ship the beta on Friday");
    t.slack.add_reply(
        CHANNEL,
        root,
        "1700000040.000200",
        "U0EVE",
        "Not before QA signs off",
    );
    let ev = app_mention_in_thread(
        CHANNEL,
        USER,
        "<@UBOT> summarise this thread",
        "1700000040.000300",
        root,
    );
    let body = event_callback_body("Ev0THREAD", ev);
    let (status, _) = t
        .post_event(&body, signed_headers(SECRET, &now_timestamp(), &body))
        .await;
    assert_eq!(status, 200);
    let posts = t.wait_posts(1).await;
    assert_eq!(posts[0].thread_ts.as_deref(), Some(root));
    let seen = t.llm.requests()[0].last_user_text();
    for said in [
        "<@U0BOB> (started the thread): Proposal: ship the beta on Friday",
        "<@U0EVE>: Not before QA signs off",
    ] {
        assert!(seen.contains(said), "{seen}");
    }
    assert!(seen.ends_with("summarise this thread"), "{seen}");
}
