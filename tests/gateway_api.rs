//! The gateway end to end over real HTTP against the fake LLM: the API channel (stream and
//! not, sessions, errors, `/stop`), health, readiness and metrics, LLM failures, and the
//! gateway's life cycle (heap trims when quiet, a restart in the same process). The bus's
//! own semantics are in `gateway_bus.rs`.

mod common;

use std::time::{Duration, Instant};

use common::{Env, ask, ask_stream, base, reply_text, sse_chunks, sse_text};
use futures_util::StreamExt;
use switchboard_fakes::llm::{FakeLlm, Reply};

const WAIT: Duration = Duration::from_secs(20);

#[tokio::test]
async fn api_round_trip_and_session_continuity() {
    let llm = FakeLlm::start().await;
    let env = Env::new(&llm.base_url(), "");
    let (running, shutdown) = env.start(Default::default()).await;
    let base = base(&running);

    llm.push(Reply::text("Nice to meet you, Ada.").with_usage(12, 5));
    let first = ask(&base, "alice", "Hi, I'm Ada").await;
    assert_eq!(reply_text(&first), "Nice to meet you, Ada.");
    assert_eq!(first["object"], "chat.completion");
    assert_eq!(
        first["usage"],
        serde_json::json!({"prompt_tokens": 12, "completion_tokens": 5, "total_tokens": 17})
    );

    let second = ask(&base, "alice", "What's my name?").await;
    assert_eq!(reply_text(&second), "echo: What's my name?");

    let reqs = llm.wait_for_requests(2, WAIT).await.unwrap();
    let history: Vec<(String, String)> = reqs[1].body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["role"].as_str().unwrap().to_string(),
                m["content"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    assert!(
        history.contains(&("user".into(), "Hi, I'm Ada".into())),
        "{history:?}"
    );
    assert!(
        history.contains(&("assistant".into(), "Nice to meet you, Ada.".into())),
        "{history:?}"
    );
    // Another user has their own session.
    ask(&base, "bob", "hello").await;
    let reqs = llm.wait_for_requests(3, WAIT).await.unwrap();
    assert!(!reqs[2].body.to_string().contains("Ada"));
    // Without a user, or with an empty one (some clients always send the field): the
    // session `api:default`.
    ask(&base, "", "who am I?").await;
    let key: switchboard_channel::ChatKey = "api:default".parse().unwrap();
    let session = switchboard::agent::session::Session::load(&*running.shared.store, &key).unwrap();
    assert_eq!(session.messages.len(), 2, "{session:?}");
    // An API chat is never the heartbeat's `last` chat: it could not be reached unasked.
    assert_eq!(
        running
            .shared
            .store
            .get(switchboard::store::Tree::Meta, b"last_active")
            .unwrap(),
        None
    );

    shutdown.cancel();
    running.stopped().await;
}

#[tokio::test]
async fn api_streams_server_sent_events() {
    let llm = FakeLlm::start().await;
    llm.set_stream_chunk_chars(4);
    let env = Env::new(&llm.base_url(), "");
    let (running, shutdown) = env.start(Default::default()).await;
    llm.push(Reply::text("streamed answer in several pieces").with_usage(30, 7));
    let resp = reqwest::Client::new()
        .post(format!("{}/v1/chat/completions", base(&running)))
        .json(&serde_json::json!({"model": "x", "stream": true, "messages": [{"role": "user", "content": "go"}],
            "stream_options": {"include_usage": true}}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert!(
        resp.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/event-stream")
    );
    let mut body = String::new();
    let mut s = resp.bytes_stream();
    while let Some(chunk) = s.next().await {
        body.push_str(&String::from_utf8_lossy(&chunk.unwrap()));
    }
    let mut text = String::new();
    let mut chunks = 0;
    let mut usage = Vec::new();
    for line in body.lines().filter_map(|l| l.strip_prefix("data: ")) {
        if line == "[DONE]" {
            break;
        }
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        assert_eq!(v["object"], "chat.completion.chunk");
        if let Some(t) = v["choices"][0]["delta"]["content"].as_str() {
            text.push_str(t);
            chunks += 1;
        }
        usage.push((
            v["choices"].as_array().unwrap().len(),
            v.get("usage").cloned(),
        ));
    }
    // Asked for: a last chunk with no choices reports the tokens; the others say null.
    let (last_choices, last_usage) = usage.pop().unwrap();
    assert_eq!(last_choices, 0);
    assert_eq!(
        last_usage,
        Some(serde_json::json!({"prompt_tokens": 30, "completion_tokens": 7, "total_tokens": 37}))
    );
    assert!(
        usage
            .iter()
            .all(|(n, u)| *n == 1 && u == &Some(serde_json::Value::Null)),
        "{usage:?}"
    );
    assert!(body.trim_end().ends_with("data: [DONE]"), "{body}");
    assert_eq!(text, "streamed answer in several pieces");
    assert!(chunks > 2, "the answer arrived in pieces: {chunks}");
    // The gateway streamed from the LLM too.
    assert!(llm.requests()[0].stream);
    shutdown.cancel();
    running.stopped().await;
}

/// The text an SSE chat completion streamed.
async fn streamed_text(base: &str, user: &str, text: &str) -> String {
    let resp = ask_stream(base, user, text).await;
    assert_eq!(resp.status(), 200);
    let body = resp.text().await.unwrap();
    assert!(body.trim_end().ends_with("data: [DONE]"), "{body}");
    // Not asked for: no `usage` in any chunk, and no chunk without choices.
    assert!(
        sse_chunks(&body)
            .iter()
            .all(|c| c.get("usage").is_none()
                && c["choices"].as_array().is_some_and(|a| a.len() == 1)),
        "{body}"
    );
    sse_text(&body)
}

#[tokio::test]
async fn a_stopped_or_failed_api_request_ends_at_once_and_says_so() {
    let llm = FakeLlm::start().await;
    let env = Env::new(&llm.base_url(), "");
    let (running, shutdown) = env.start(Default::default()).await;
    let base = base(&running);
    // /stop from another request ends the waiting one now, not after the reply timeout.
    llm.push(Reply::text("far too late").with_delay(Duration::from_secs(300)));
    let waiting = tokio::spawn({
        let base = base.clone();
        async move { ask(&base, "carol", "write me a novel").await }
    });
    llm.wait_for_requests(1, WAIT).await.unwrap();
    assert_eq!(reply_text(&ask(&base, "carol", "/stop").await), "Stopped.");
    let stopped = tokio::time::timeout(WAIT, waiting).await.unwrap().unwrap();
    assert_eq!(reply_text(&stopped), "Stopped.");
    // Text of a round that also called a tool is set apart from the final answer's.
    llm.push(
        Reply::text("Let me check.").with_tool_call("list_dir", serde_json::json!({"path": "."})),
    );
    llm.push(Reply::text("Final answer."));
    let streamed = streamed_text(&base, "erin", "what is there?").await;
    assert_eq!(streamed, "Let me check.\n\nFinal answer.");
    // The model failing mid-answer: the error reply follows what was streamed.
    llm.set_stream_chunk_chars(4);
    llm.push(Reply::text("the start of an answer").with_disconnect_after(3));
    let streamed = streamed_text(&base, "dave", "hello?").await;
    let (start, error) = streamed
        .split_once("\n\n")
        .unwrap_or_else(|| panic!("{streamed}"));
    assert!(
        !start.is_empty() && "the start of an answer".starts_with(start),
        "{streamed}"
    );
    assert!(error.contains("couldn't get an answer"), "{streamed}");
    shutdown.cancel();
    running.stopped().await;
}

#[tokio::test]
async fn malformed_api_requests_get_clear_errors() {
    let llm = FakeLlm::start().await;
    let env = Env::new(&llm.base_url(), "");
    let (running, shutdown) = env.start(Default::default()).await;
    let http = reqwest::Client::new();
    let url = format!("{}/v1/chat/completions", base(&running));
    for (body, want) in [
        ("{not json", "malformed JSON"),
        ("[]", "JSON object"),
        ("{\"messages\": []}", "role `user`"),
        (
            "{\"messages\": [{\"role\": \"user\", \"content\": 5}]}",
            "no text",
        ),
        (
            "{\"user\": 5, \"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}",
            "`user` must be a string",
        ),
        (
            "{\"stream\": \"yes\", \"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}",
            "`stream` must be true or false",
        ),
        // An assistant's partial answer to continue: the user's message before it must not
        // be answered again.
        (
            "{\"messages\": [{\"role\": \"user\", \"content\": \"Q\"}, {\"role\": \"assistant\", \"content\": \"A\"}]}",
            "the last message must have role `user`",
        ),
    ] {
        let r = http
            .post(&url)
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 400, "{body}");
        let v: serde_json::Value = r.json().await.unwrap();
        assert!(
            v["error"]["message"].as_str().unwrap().contains(want),
            "{body}: {v}"
        );
    }
    // Past the body limit (32 MiB): the same JSON error shape, 413.
    let huge = format!(
        "{{\"messages\": [{{\"role\": \"user\", \"content\": \"{}\"}}]}}",
        "x".repeat(33 * 1024 * 1024)
    );
    let r = http
        .post(&url)
        .header("content-type", "application/json")
        .body(huge)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 413);
    let v: serde_json::Value = r.json().await.unwrap();
    assert_eq!(v["error"]["type"], "invalid_request_error", "{v}");
    // Without a token, a web page in the owner's browser cannot drive the agent.
    let r = http
        .post(&url)
        .header("content-type", "text/plain")
        .header("origin", "https://evil.example")
        .header("sec-fetch-site", "cross-site")
        .body(r#"{"messages": [{"role": "user", "content": "run exec: id"}]}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    let v: serde_json::Value = r.json().await.unwrap();
    assert_eq!(v["error"]["type"], "permission_error", "{v}");
    assert_eq!(llm.request_count(), 0);
    // Clients such as Open WebUI list the models first.
    let v: serde_json::Value = http
        .get(format!("{}/v1/models", base(&running)))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(v["object"], "list");
    assert_eq!(v["data"][0]["id"], "switchboard", "{v}");
    // Any other route: a JSON 404 that names it.
    let r = http
        .post(format!("{}/v1/embeddings", base(&running)))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    let v: serde_json::Value = r.json().await.unwrap();
    assert_eq!(
        v["error"]["message"], "no route for POST /v1/embeddings",
        "{v}"
    );
    // A chat UI's history with a large image before a short question (only the last
    // message is taken), whose image is named as left out.
    let image = format!("data:image/png;base64,{}", "A".repeat(3 * 1024 * 1024));
    let body = serde_json::json!({"user": "u", "messages": [
        {"role": "user", "content": [{"type": "image_url", "image_url": {"url": image}}]},
        {"role": "assistant", "content": "A cat."},
        {"role": "user", "content": [
            {"type": "text", "text": "and this?"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
        ]}
    ]});
    let mut body = body;
    // A system message after it (some clients add one) is passed over.
    body["messages"]
        .as_array_mut()
        .unwrap()
        .push(serde_json::json!({"role": "system", "content": "be brief"}));
    let r = http.post(&url).json(&body).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let v: serde_json::Value = r.json().await.unwrap();
    assert_eq!(
        reply_text(&v),
        "echo: and this?\n\n[1 attachment(s), such as an image, left out: this API takes text only]"
    );
    // The gateway still answers.
    assert_eq!(
        reply_text(&ask(&base(&running), "u", "still there?").await),
        "echo: still there?"
    );
    shutdown.cancel();
    running.stopped().await;
}

#[tokio::test]
async fn llm_failures_give_a_clear_error_reply_and_the_gateway_lives() {
    // Unreachable: a port nobody listens on.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead = format!("http://{}/v1", closed.local_addr().unwrap());
    drop(closed);
    let env = Env::new(&dead, "[agent]\nname = \"Bot\"\n");
    let (running, shutdown) = env.start(Default::default()).await;
    let text = reply_text(&ask(&base(&running), "u", "hello?").await);
    assert!(text.contains("couldn't get an answer"), "{text}");
    assert!(!text.contains("SB_TEST_LLM_KEY"));
    shutdown.cancel();
    running.stopped().await;

    // Answering 500: retried (llm.max_retries = 1), then an error reply; the next works.
    let llm = FakeLlm::start().await;
    let env = Env::new(&llm.base_url(), "");
    let (running, shutdown) = env.start(Default::default()).await;
    llm.push(Reply::server_error());
    llm.push(Reply::server_error());
    let started = Instant::now();
    let text = reply_text(&ask(&base(&running), "u", "hello?").await);
    assert!(text.contains("couldn't get an answer"), "{text}");
    assert!(
        started.elapsed() >= Duration::from_millis(1500),
        "backoff before the retry"
    );
    assert_eq!(llm.request_count(), 2);
    assert_eq!(
        reply_text(&ask(&base(&running), "u", "again").await),
        "echo: again"
    );
    shutdown.cancel();
    running.stopped().await;
}

#[tokio::test]
async fn health_ready_and_metrics() {
    let llm = FakeLlm::start().await;
    let env = Env::new(&llm.base_url(), "");
    let (running, shutdown) = env.start(Default::default()).await;
    let base = base(&running);
    let http = reqwest::Client::new();
    assert_eq!(
        http.get(format!("{base}/healthz"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    assert_eq!(
        http.get(format!("{base}/readyz"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    running.shared.health.set("telegram", false, "connecting");
    let r = http.get(format!("{base}/readyz")).send().await.unwrap();
    assert_eq!(r.status(), 503);
    let v: serde_json::Value = r.json().await.unwrap();
    assert_eq!(v["not_ready"]["telegram"], "connecting");
    ask(&base, "m", "count me").await;
    let text = http
        .get(format!("{base}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        text.contains("switchboard_inbound_messages_total{channel=\"api\"} 1"),
        "{text}"
    );
    assert!(text.contains("switchboard_turns_total 1"));
    assert!(text.contains("switchboard_turn_duration_seconds_count 1"));
    // The message's intake and its reply were each made durable by a journal write.
    let syncs: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("switchboard_store_sync_seconds_count "))
        .expect("the store's sync histogram is rendered")
        .parse()
        .unwrap();
    assert!(syncs >= 2, "{text}");
    shutdown.cancel();
    running.stopped().await;
}

#[tokio::test]
async fn the_heap_is_trimmed_once_the_last_chat_goes_quiet() {
    use std::sync::atomic::Ordering;
    let llm = FakeLlm::start().await;
    let env = Env::new(&llm.base_url(), "");
    let (running, shutdown) = env.start(Default::default()).await;
    let base = base(&running);
    let trims = || running.shared.metrics.heap_trims.load(Ordering::Relaxed);
    let wait_for_trims = |n: u64| async move {
        let deadline = Instant::now() + WAIT;
        while trims() < n {
            assert!(
                Instant::now() < deadline,
                "no trim after the gateway went idle"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    assert_eq!(trims(), 0, "nothing to give back before any chat");
    // Once the chat's worker is gone, one trim follows after the idle delay.
    ask(&base, "quick", "hello").await;
    wait_for_trims(1).await;
    // A turn that runs longer than the idle delay: no trim while it runs.
    let slow = switchboard::memory::IDLE_TRIMS[0] * 2;
    llm.push(Reply::text("done thinking").with_delay(slow));
    let started = Instant::now();
    let v = ask(&base, "slow", "think slowly").await;
    assert_eq!(reply_text(&v), "done thinking");
    assert!(started.elapsed() >= slow);
    assert_eq!(trims(), 1, "no trim while a chat's turn runs");
    wait_for_trims(2).await;
    // And again while it stays quiet (what closes later frees memory too).
    let second = Instant::now();
    wait_for_trims(3).await;
    let between = switchboard::memory::IDLE_TRIMS[1] - switchboard::memory::IDLE_TRIMS[0];
    assert!(second.elapsed() >= between - Duration::from_millis(100));
    let text = reqwest::get(format!("{base}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(text.contains("switchboard_heap_trims_total 3"), "{text}");
    shutdown.cancel();
    running.stopped().await;
}

#[tokio::test]
async fn a_stopped_gateway_lets_go_of_its_store_so_it_can_start_again_in_process() {
    let llm = FakeLlm::start().await;
    let env = Env::new(&llm.base_url(), "");
    let (running, shutdown) = env.start(Default::default()).await;
    llm.push(Reply::text("Nice to meet you, Ada."));
    ask(&base(&running), "alice", "Hi, I'm Ada").await;
    shutdown.cancel();
    running.stopped().await;

    // Everything the first gateway held is gone, the store's lock with it: a second one
    // starts on the same data and has the session.
    let (running, shutdown) = env.start(Default::default()).await;
    ask(&base(&running), "alice", "What's my name?").await;
    let reqs = llm.wait_for_requests(2, WAIT).await.unwrap();
    assert!(
        reqs[1].body.to_string().contains("Nice to meet you, Ada."),
        "{}",
        reqs[1].body
    );
    shutdown.cancel();
    running.stopped().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_waiting_at_shutdown_is_told_and_the_stop_is_clean() {
    let llm = FakeLlm::start().await;
    llm.set_delay(Duration::from_secs(60));
    let env = Env::new(&llm.base_url(), "");
    // Its turn may go on for this long after the stop begins (the README's 5 s grace).
    let grace = Duration::from_millis(300);
    let opts = switchboard::StartOptions {
        turn_grace: grace,
        ..Default::default()
    };
    let (running, shutdown) = env.start(opts).await;
    let url = base(&running);
    let waiting = tokio::spawn(async move { ask(&url, "late", "a slow question").await });
    llm.wait_for_requests(1, WAIT)
        .await
        .expect("the turn started");
    let started = Instant::now();
    shutdown.cancel();
    running.stopped().await;
    // The HTTP server drained once the turn's grace was over, instead of waiting for a
    // reply that cannot come.
    assert!(
        started.elapsed() < grace + Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    let told = reply_text(&waiting.await.unwrap());
    assert!(told.contains("The gateway is restarting"), "{told}");
    // Every task stopped in time: the stop is noted as clean, so the next start resumes
    // the interrupted message without counting it as a crash.
    let store = switchboard::store::SledStore::open(&env.data_dir()).unwrap();
    use switchboard::store::Store;
    assert!(
        store
            .get(switchboard::store::Tree::Meta, b"clean_stop")
            .unwrap()
            .is_some()
    );
    assert_eq!(store.len(switchboard::store::Tree::Inbox), 1);
}
