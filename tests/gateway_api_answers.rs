//! The API channel's answers over real HTTP against the fake LLM, whatever the turn does: a
//! stream read late gets every word, a stopped stream says so after what came, a turn that
//! says nothing after its tools answers at once, `/status` is answered during a turn, and
//! a request its client gave up (or a `chat` message) withdraws its message.

mod common;

use std::time::Duration;

use common::{Env, ask, ask_stream, base, reply_text, sse_text};
use futures_util::StreamExt;
use switchboard_fakes::llm::{FakeLlm, Reply};

const WAIT: Duration = Duration::from_secs(20);

#[tokio::test]
async fn a_streamed_answer_arrives_whole_and_every_request_is_answered() {
    let llm = FakeLlm::start().await;
    llm.set_stream_chunk_chars(8);
    let env = Env::new(&llm.base_url(), "");
    let (running, shutdown) = env.start(Default::default()).await;
    let base = base(&running);
    let turns = || {
        running
            .shared
            .metrics
            .turns
            .load(std::sync::atomic::Ordering::Relaxed)
    };
    // A reader that reads nothing until the turn is over still gets every word.
    let long: String = (0..60_000).map(|i| format!("w{i} ")).collect();
    llm.push(Reply::text(long.clone()));
    let resp = ask_stream(&base, "slow", "a long one").await;
    common::platform::poll_until(WAIT, "the turn to end", || async {
        (turns() == 1).then_some(())
    })
    .await;
    let streamed = sse_text(&resp.text().await.unwrap());
    assert_eq!(streamed.len(), long.len());
    assert!(streamed == long, "the streamed answer differs");

    // /stop while an answer streams: what came, then "Stopped.".
    let slow = "partial ".repeat(400);
    llm.push(Reply::text(slow.clone()).with_chunk_delay(Duration::from_millis(50)));
    let resp = ask_stream(&base, "stopper", "go on").await;
    let mut body = String::new();
    let mut s = resp.bytes_stream();
    while !body.contains("partial") {
        let chunk = tokio::time::timeout(WAIT, s.next()).await.unwrap();
        let chunk = chunk.unwrap_or_else(|| panic!("the stream ended: {body}"));
        body.push_str(&String::from_utf8_lossy(&chunk.unwrap()));
    }
    assert_eq!(
        reply_text(&ask(&base, "stopper", "/stop").await),
        "Stopped."
    );
    while let Some(chunk) = tokio::time::timeout(WAIT, s.next()).await.unwrap() {
        body.push_str(&String::from_utf8_lossy(&chunk.unwrap()));
    }
    let text = sse_text(&body);
    let (came, note) = text.rsplit_once("\n\n").unwrap_or_else(|| panic!("{text}"));
    assert!(!came.is_empty() && slow.starts_with(came), "{text}");
    assert_eq!(note, "Stopped.");

    // A turn whose tools did the work and that says nothing after them answers at once,
    // with nothing, streamed or not.
    for stream in [false, true] {
        llm.push(Reply::tool_call(
            "list_dir",
            serde_json::json!({"path": "."}),
        ));
        llm.push(Reply::text(""));
        let resp = tokio::time::timeout(
            WAIT,
            reqwest::Client::new()
                .post(format!("{base}/v1/chat/completions"))
                .json(
                    &serde_json::json!({"model": "x", "stream": stream, "user": "quiet",
                    "messages": [{"role": "user", "content": "tidy up"}]}),
                )
                .send(),
        )
        .await
        .unwrap()
        .unwrap();
        assert_eq!(resp.status(), 200);
        let body = tokio::time::timeout(WAIT, resp.text())
            .await
            .unwrap()
            .unwrap();
        if stream {
            assert!(body.trim_end().ends_with("data: [DONE]"), "{body}");
            assert_eq!(sse_text(&body), "");
        } else {
            let v: serde_json::Value = serde_json::from_str(&body).unwrap();
            assert_eq!(v["choices"][0]["message"]["content"], "", "{body}");
            assert_eq!(v["choices"][0]["finish_reason"], "stop");
        }
    }
    shutdown.cancel();
    running.stopped().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_is_answered_at_once_while_a_turn_runs() {
    let llm = FakeLlm::start().await;
    llm.set_delay(Duration::from_secs(10));
    let env = Env::new(&llm.base_url(), "");
    let opts = switchboard::StartOptions {
        turn_grace: Duration::from_millis(100),
        ..Default::default()
    };
    let (running, shutdown) = env.start(opts).await;
    let url = base(&running);
    let slow = tokio::spawn(async move { ask(&url, "ann", "a slow question").await });
    llm.wait_for_requests(1, WAIT)
        .await
        .expect("the turn started");
    // Not behind the running turn (10 s): answered now, and it says what is going on.
    let status = reply_text(&ask(&base(&running), "ann", "/status").await);
    assert!(status.contains("Now: answering a message here"), "{status}");
    assert!(status.contains("Model: "), "{status}");
    assert!(!slow.is_finished());
    assert_eq!(llm.request_count(), 1);
    shutdown.cancel();
    running.stopped().await;
}

/// Ask as `user`, giving up after `ms` (a client's timeout): whether it gave up.
async fn give_up(url: &str, user: &str, text: &str, ms: u64) -> bool {
    let body = serde_json::json!({"user": user, "messages": [{"role": "user", "content": text}]});
    reqwest::Client::new()
        .post(format!("{url}/v1/chat/completions"))
        .timeout(Duration::from_millis(ms))
        .json(&body)
        .send()
        .await
        .is_err()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_its_client_gave_up_stops_its_turn() {
    let llm = FakeLlm::start().await;
    let env = Env::new(&llm.base_url(), "");
    let (running, shutdown) = env.start(Default::default()).await;
    let url = base(&running);
    // A client that gives up after 300 ms (a timeout), then one that leaves a stream after
    // its first chunk (a chat UI's Stop button).
    let slow = |text: &str| Reply::text(text).with_delay(Duration::from_secs(3));
    llm.push_for("a slow question", slow("the first abandoned answer"));
    assert!(give_up(&url, "ann", "a slow question", 300).await);
    llm.push_for("another slow one", slow("the second abandoned answer"));
    let mut left = ask_stream(&url, "ann", "another slow one")
        .await
        .bytes_stream();
    left.next().await.expect("the first chunk").unwrap();
    // Left while the model is answering.
    llm.wait_for_request(|r| r.last_user_text().contains("another slow one"), WAIT)
        .await
        .expect("its turn began");
    drop(left);
    // Neither holds up the next request, and neither answer enters the conversation.
    let next = reply_text(&ask(&url, "ann", "never mind").await);
    assert_eq!(next, "echo: never mind");
    let reqs = llm.requests();
    let body = reqs.last().unwrap().body.to_string();
    assert!(body.contains("another slow one"), "{body}");
    assert!(!body.contains("abandoned answer"), "{body}");
    shutdown.cancel();
    running.stopped().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queued_request_its_client_gave_up_never_runs() {
    let llm = FakeLlm::start().await;
    let env = Env::new(&llm.base_url(), "");
    let (running, shutdown) = env.start(Default::default()).await;
    let url = base(&running);
    llm.push(Reply::text("the slow answer").with_delay(Duration::from_secs(2)));
    let first_url = url.clone();
    let first = tokio::spawn(async move { ask(&first_url, "bob", "a slow question").await });
    llm.wait_for_requests(1, WAIT)
        .await
        .expect("the first turn began");
    // Waiting behind it, given up.
    assert!(give_up(&url, "bob", "the withdrawn one", 300).await);
    assert_eq!(reply_text(&first.await.unwrap()), "the slow answer");
    assert_eq!(reply_text(&ask(&url, "bob", "next").await), "echo: next");
    let reqs = llm.requests();
    assert_eq!(reqs.len(), 2, "the withdrawn message never ran");
    assert!(!reqs[1].body.to_string().contains("the withdrawn one"));
    assert_eq!(running.shared.store.len(switchboard::store::Tree::Inbox), 0);
    shutdown.cancel();
    running.stopped().await;
}

#[tokio::test]
async fn a_chat_message_given_up_while_it_is_stored_never_runs() {
    let llm = FakeLlm::start().await;
    let env = Env::new(&llm.base_url(), "");
    let (running, shutdown) = env.start(Default::default()).await;
    let shared = running.shared.clone();
    llm.push(Reply::text("the slow answer").with_delay(Duration::from_secs(1)));
    let first = tokio::spawn(async move { shared.ask_cli("a slow question", WAIT).await });
    llm.wait_for_requests(1, WAIT)
        .await
        .expect("the first turn began");
    // `switchboard chat` (or /admin/chat) gone while its message is being stored: polled
    // once, it started storing it (in a task of its own, which this single-threaded
    // runtime has not run yet), then dropped.
    let abandoned = running.shared.ask_cli("the abandoned one", WAIT);
    assert!(futures_util::FutureExt::now_or_never(abandoned).is_none());
    assert_eq!(first.await.unwrap().unwrap(), "the slow answer");
    let next = running.shared.ask_cli("next", WAIT).await.unwrap();
    assert_eq!(next, "echo: next");
    let reqs = llm.requests();
    assert_eq!(reqs.len(), 2, "the abandoned message never ran");
    assert!(!reqs[1].body.to_string().contains("the abandoned one"));
    assert_eq!(running.shared.store.len(switchboard::store::Tree::Inbox), 0);
    shutdown.cancel();
    running.stopped().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_given_up_while_the_gateway_stops_keeps_its_message() {
    let llm = FakeLlm::start().await;
    llm.set_delay(Duration::from_secs(10));
    let env = Env::new(&llm.base_url(), "");
    let opts = switchboard::StartOptions {
        turn_grace: Duration::from_secs(2),
        ..Default::default()
    };
    let (running, shutdown) = env.start(opts).await;
    let url = base(&running);
    let first_url = url.clone();
    let _first = tokio::spawn(async move { ask(&first_url, "cy", "running").await });
    llm.wait_for_requests(1, WAIT)
        .await
        .expect("the turn began");
    // Waiting behind it; its client gives up while the gateway stops.
    let waiting = tokio::spawn(async move { give_up(&url, "cy", "waiting", 500).await });
    let key: switchboard_channel::ChatKey = "api:cy".parse().unwrap();
    common::until("cy's message queued", || {
        running.shared.bus.queued_for(&key) > 0
    })
    .await;
    shutdown.cancel();
    assert!(waiting.await.unwrap(), "the client gave up");
    let store = running.shared.store.clone();
    running.stopped().await;
    // Both stay for the next start: the running one interrupted, the waiting one queued.
    assert_eq!(store.len(switchboard::store::Tree::Inbox), 2);
}

/// A gateway with one turn slot, held by Dee's turn (60 s, until she stops it), and Eve's
/// `text` waiting for it: the gateway, its URL, and Eve's request.
async fn eve_waits_for_dee(
    llm: &FakeLlm,
    text: &'static str,
) -> (
    Env,
    switchboard::gateway::Running,
    tokio_util::sync::CancellationToken,
    String,
    tokio::task::JoinHandle<serde_json::Value>,
) {
    let env = Env::new(&llm.base_url(), "");
    let config = std::fs::read_to_string(env.config_path()).unwrap();
    let config = config.replacen("[gateway]\n", "[gateway]\nmax_concurrent_turns = 1\n", 1);
    std::fs::write(env.config_path(), config).unwrap();
    let (running, shutdown) = env.start(Default::default()).await;
    let url = base(&running);
    llm.push_for(
        "slow",
        Reply::text("done").with_delay(Duration::from_secs(60)),
    );
    let dee_url = url.clone();
    tokio::spawn(async move { ask(&dee_url, "dee", "slow").await });
    llm.wait_for_requests(1, WAIT)
        .await
        .expect("dee's turn began");
    let eve_url = url.clone();
    let eve = tokio::spawn(async move { ask(&eve_url, "eve", text).await });
    let key: switchboard_channel::ChatKey = "api:eve".parse().unwrap();
    common::until("eve's message up", || running.shared.bus.is_running(&key)).await;
    (env, running, shutdown, url, eve)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_while_waiting_for_a_turn_slot_drops_the_message_and_says_so() {
    let llm = FakeLlm::start().await;
    let (_env, running, shutdown, url, eve) = eve_waits_for_dee(&llm, "never run me").await;
    assert_eq!(reply_text(&ask(&url, "eve", "/stop").await), "Stopped.");
    // Her waiting request is told at once, and her message never reaches the model or her
    // history.
    let told = tokio::time::timeout(WAIT, eve).await.expect("told at once");
    assert_eq!(reply_text(&told.unwrap()), "Stopped.");
    assert_eq!(reply_text(&ask(&url, "dee", "/stop").await), "Stopped.");
    assert_eq!(reply_text(&ask(&url, "eve", "hello").await), "echo: hello");
    let reqs = llm.requests();
    assert_eq!(reqs.len(), 2, "{reqs:?}");
    assert!(!reqs[1].body.to_string().contains("never run me"));
    shutdown.cancel();
    running.stopped().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_waiting_for_a_turn_slot_still_takes_effect_after_a_stop() {
    let llm = FakeLlm::start().await;
    let (_env, running, shutdown, url, eve) = eve_waits_for_dee(&llm, "/new").await;
    assert_eq!(reply_text(&ask(&url, "eve", "/stop").await), "Stopped.");
    assert_eq!(reply_text(&ask(&url, "dee", "/stop").await), "Stopped.");
    let told = tokio::time::timeout(WAIT, eve).await.expect("answered");
    assert_eq!(reply_text(&told.unwrap()), "Started a fresh conversation.");
    shutdown.cancel();
    running.stopped().await;
}
