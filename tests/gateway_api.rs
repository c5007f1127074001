//! The gateway end to end over real HTTP against the fake LLM: the API channel, sessions,
//! per-chat order with cross-chat parallelism, dedup, and LLM failures.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{Env, TestChannel, ask, reply_text, with_test_channel};
use futures_util::StreamExt;
use switchboard::store::{SledStore, Store, Tree};
use switchboard_channel::{ChatKey, InboundMessage, Published, Sender};
use switchboard_fakes::llm::{FakeLlm, Reply};

const WAIT: Duration = Duration::from_secs(20);

fn base(running: &switchboard::gateway::Running) -> String {
    format!("http://{}", running.http_addr.expect("http is on"))
}

#[tokio::test]
async fn api_round_trip_and_session_continuity() {
    let llm = FakeLlm::start().await;
    let env = Env::new(&llm.base_url(), "");
    let (running, shutdown) = env.start(Default::default()).await;
    let base = base(&running);

    llm.push(Reply::text("Nice to meet you, Ada."));
    let first = ask(&base, "alice", "Hi, I'm Ada").await;
    assert_eq!(reply_text(&first), "Nice to meet you, Ada.");
    assert_eq!(first["object"], "chat.completion");

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

    shutdown.cancel();
    running.stopped().await;
}

#[tokio::test]
async fn api_streams_server_sent_events() {
    let llm = FakeLlm::start().await;
    llm.set_stream_chunk_chars(4);
    let env = Env::new(&llm.base_url(), "");
    let (running, shutdown) = env.start(Default::default()).await;
    llm.push(Reply::text("streamed answer in several pieces"));
    let resp = reqwest::Client::new()
        .post(format!("{}/v1/chat/completions", base(&running)))
        .json(&serde_json::json!({"model": "x", "stream": true, "messages": [{"role": "user", "content": "go"}]}))
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
    }
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
    let resp = reqwest::Client::new()
        .post(format!("{base}/v1/chat/completions"))
        .json(
            &serde_json::json!({"model": "x", "stream": true, "user": user,
            "messages": [{"role": "user", "content": text}]}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let body = resp.text().await.unwrap();
    assert!(body.trim_end().ends_with("data: [DONE]"), "{body}");
    body.lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|v| {
            v["choices"][0]["delta"]["content"]
                .as_str()
                .map(String::from)
        })
        .collect()
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
    // Past the body limit (2 MiB): the same JSON error shape, 413.
    let huge = format!(
        "{{\"messages\": [{{\"role\": \"user\", \"content\": \"{}\"}}]}}",
        "x".repeat(3 * 1024 * 1024)
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
    assert_eq!(llm.request_count(), 0);
    // The gateway still answers.
    assert_eq!(
        reply_text(&ask(&base(&running), "u", "still there?").await),
        "echo: still there?"
    );
    shutdown.cancel();
    running.stopped().await;
}

fn inbound(id: &str, key: &ChatKey, text: &str) -> InboundMessage {
    let mut m = InboundMessage::text(
        id,
        key.clone(),
        Sender {
            id: "u".into(),
            username: None,
            display_name: "U".into(),
            is_owner: false,
        },
        text,
    );
    m.metadata
        .insert("join".into(), serde_json::Value::Bool(false));
    m
}

#[tokio::test]
async fn per_key_order_with_cross_key_parallelism() {
    let llm = FakeLlm::start().await;
    llm.set_delay(Duration::from_millis(200));
    let env = Env::new(&llm.base_url(), "");
    let ch = Arc::new(TestChannel::default());
    let (running, shutdown) = env.start(with_test_channel(&ch)).await;
    let inbound_tx = running.inbound();
    let started = Instant::now();
    for k in 0..50 {
        let key = ChatKey::new("test", format!("chat{k}"));
        for i in 0..3 {
            let r = inbound_tx
                .publish(inbound(&format!("m-{k}-{i}"), &key, &format!("k{k} m{i}")))
                .await
                .unwrap();
            assert_eq!(r, Published::Accepted);
        }
    }
    let sent = ch.wait_for(150, Duration::from_secs(30)).await;
    let elapsed = started.elapsed();
    // Serial would take 150 × 200 ms = 30 s; three rounds of parallel turns take ~0.6 s.
    assert!(elapsed < Duration::from_secs(8), "took {elapsed:?}");
    for k in 0..50 {
        let texts: Vec<String> = sent
            .iter()
            .filter(|m| m.key.chat_id == format!("chat{k}"))
            .map(|m| m.text.clone())
            .collect();
        assert_eq!(
            texts,
            vec![
                format!("echo: k{k} m0"),
                format!("echo: k{k} m1"),
                format!("echo: k{k} m2")
            ]
        );
    }
    // Workers are dropped once their chats are idle.
    let deadline = Instant::now() + WAIT;
    while running.shared.bus.active_chats() > 0 {
        assert!(Instant::now() < deadline, "workers not dropped");
        tokio::task::yield_now().await;
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    shutdown.cancel();
    running.stopped().await;
}

#[tokio::test]
async fn a_reply_for_a_channel_not_running_waits_for_a_start_where_it_runs() {
    let llm = FakeLlm::start().await;
    let env = Env::new(&llm.base_url(), "");
    let key = ChatKey::new("test", "1");
    // No `test` channel in this run: the reply is recorded and kept, not dropped.
    let opts = switchboard::StartOptions {
        channels: false,
        ..Default::default()
    };
    let (running, shutdown) = env.start(opts).await;
    let r = running
        .inbound()
        .publish(inbound("m-owed", &key, "remind me"))
        .await
        .unwrap();
    assert_eq!(r, Published::Accepted);
    let deadline = Instant::now() + WAIT;
    while llm.request_count() == 0 || running.shared.bus.active_chats() > 0 {
        assert!(Instant::now() < deadline, "turn not finished");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    shutdown.cancel();
    running.stopped().await;
    let store = SledStore::open(&env.data_dir()).unwrap();
    assert_eq!(store.scan(Tree::Outbox, &[]).unwrap().len(), 1, "kept");
    drop(store);

    // The terminal's offline `chat` gateway (no background work) leaves it alone, even with
    // the channel there.
    let ch = Arc::new(TestChannel::default());
    let mut opts = with_test_channel(&ch);
    opts.background = false;
    let (running, shutdown) = env.start(opts).await;
    shutdown.cancel();
    running.stopped().await;
    assert!(ch.sent().is_empty());

    // A start where the channel runs delivers it, once, without asking the model again.
    let (running, shutdown) = env.start(with_test_channel(&ch)).await;
    let sent = ch.wait_for(1, WAIT).await;
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].text, "echo: remind me");
    assert_eq!(llm.request_count(), 1);
    shutdown.cancel();
    running.stopped().await;
    let store = SledStore::open(&env.data_dir()).unwrap();
    assert!(store.scan(Tree::Outbox, &[]).unwrap().is_empty());
}

#[tokio::test]
async fn a_message_the_gateway_keeps_dying_on_is_given_up_and_its_sender_told() {
    use switchboard::bus::MAX_RESUMES;
    let llm = FakeLlm::start().await;
    let env = Env::new(&llm.base_url(), "");
    // As crashes in their turns would leave them (no clean stop noted): one resumed at
    // every start so far, one resumed once.
    let mut poison = inbound("poison", &ChatKey::new("test", "p"), "crash me");
    poison
        .metadata
        .insert("resumes".into(), serde_json::json!(MAX_RESUMES));
    {
        let store = SledStore::open(&env.data_dir()).unwrap();
        let mut fine = inbound("fine", &ChatKey::new("test", "q"), "hello");
        fine.metadata.insert("resumes".into(), serde_json::json!(1));
        let mut b = switchboard::store::Batch::default();
        for (seq, m) in [(1u64, &poison), (2, &fine)] {
            b.put(
                Tree::Inbox,
                seq.to_be_bytes().to_vec(),
                serde_json::to_vec(m).unwrap(),
            );
        }
        store.commit(b).await.unwrap();
    }
    let ch = Arc::new(TestChannel::default());
    let (running, shutdown) = env.start(with_test_channel(&ch)).await;
    let mut sent = ch.wait_for(2, WAIT).await;
    sent.sort_by(|a, b| a.key.chat_id.cmp(&b.key.chat_id));
    assert_eq!(sent[0].key.chat_id, "p");
    assert_eq!(sent[0].kind, switchboard_channel::OutboundKind::Error);
    assert!(
        sent[0].text.contains("could not handle"),
        "{}",
        sent[0].text
    );
    assert_eq!(sent[1].text, "echo: hello");
    assert_eq!(
        llm.request_count(),
        1,
        "the given-up message never reached the model"
    );
    shutdown.cancel();
    running.stopped().await;
    // After a clean stop, what is left is resumed without counting: the same entry runs.
    let store = SledStore::open(&env.data_dir()).unwrap();
    assert!(store.scan(Tree::Inbox, &[]).unwrap().is_empty());
    let mut b = switchboard::store::Batch::default();
    b.put(
        Tree::Inbox,
        3u64.to_be_bytes().to_vec(),
        serde_json::to_vec(&poison).unwrap(),
    );
    store.commit(b).await.unwrap();
    drop(store);
    let (running, shutdown) = env.start(with_test_channel(&ch)).await;
    let sent = ch.wait_for(3, WAIT).await;
    assert_eq!(sent[2].text, "echo: crash me");
    shutdown.cancel();
    running.stopped().await;
}

#[tokio::test]
async fn waiting_messages_are_joined_into_the_next_turn() {
    let llm = FakeLlm::start().await;
    let env = Env::new(&llm.base_url(), "");
    let ch = Arc::new(TestChannel::default());
    let (running, shutdown) = env.start(with_test_channel(&ch)).await;
    let tx = running.inbound();
    let key = ChatKey::new("test", "j");
    llm.push(Reply::text("first").with_delay(Duration::from_millis(500)));
    let mk = |id: &str, t: &str| {
        InboundMessage::text(
            id,
            key.clone(),
            Sender {
                id: "u".into(),
                username: None,
                display_name: "U".into(),
                is_owner: false,
            },
            t,
        )
    };
    tx.publish(mk("j1", "one")).await.unwrap();
    llm.wait_for_requests(1, WAIT).await.unwrap();
    tx.publish(mk("j2", "two")).await.unwrap();
    tx.publish(mk("j3", "three")).await.unwrap();
    let sent = ch.wait_for(2, WAIT).await;
    assert_eq!(sent[0].text, "first");
    let reqs = llm.wait_for_requests(2, WAIT).await.unwrap();
    let last = reqs[1].last_user_text();
    assert!(last.contains("two") && last.contains("three"), "{last}");
    assert_eq!(llm.request_count(), 2);
    shutdown.cancel();
    running.stopped().await;
}

#[tokio::test]
async fn the_same_inbound_id_is_processed_once() {
    let llm = FakeLlm::start().await;
    let env = Env::new(&llm.base_url(), "");
    let ch = Arc::new(TestChannel::default());
    let (running, shutdown) = env.start(with_test_channel(&ch)).await;
    let tx = running.inbound();
    let key = ChatKey::new("test", "d");
    let (a, b) = tokio::join!(
        tx.publish(inbound("dup-1", &key, "hello")),
        tx.publish(inbound("dup-1", &key, "hello"))
    );
    let mut outcomes = vec![a.unwrap(), b.unwrap()];
    outcomes.sort_by_key(|p| format!("{p:?}"));
    assert_eq!(outcomes, vec![Published::Accepted, Published::Duplicate]);
    ch.wait_for(1, WAIT).await;
    assert_eq!(
        tx.publish(inbound("dup-1", &key, "hello")).await.unwrap(),
        Published::Duplicate
    );
    tx.publish(inbound("dup-2", &key, "next")).await.unwrap();
    let sent = ch.wait_for(2, WAIT).await;
    assert_eq!(sent.len(), 2);
    assert_eq!(llm.request_count(), 2);
    shutdown.cancel();
    running.stopped().await;
}

#[tokio::test]
async fn ids_a_store_of_the_previous_layout_has_seen_stay_duplicates() {
    let llm = FakeLlm::start().await;
    let env = Env::new(&llm.base_url(), "");
    {
        // Before seen ids were filed by day: the bare id, then when it was seen.
        let store: Arc<dyn Store> = Arc::new(SledStore::open(&env.data_dir()).unwrap());
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs();
        store
            .put(Tree::Seen, b"test:old-1", &now.to_be_bytes())
            .unwrap();
        store.flush().await.unwrap();
    }
    let ch = Arc::new(TestChannel::default());
    let key = ChatKey::new("test", "o");
    let (running, shutdown) = env.start(with_test_channel(&ch)).await;
    let tx = running.inbound();
    assert_eq!(
        tx.publish(inbound("test:old-1", &key, "again"))
            .await
            .unwrap(),
        Published::Duplicate
    );
    tx.publish(inbound("test:new-1", &key, "new"))
        .await
        .unwrap();
    ch.wait_for(1, WAIT).await;
    shutdown.cancel();
    running.stopped().await;
    assert_eq!(llm.request_count(), 1, "only the new id reached the model");
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
async fn stop_cancels_the_running_turn_without_waiting_behind_it() {
    let llm = FakeLlm::start().await;
    let env = Env::new(&llm.base_url(), "");
    let ch = Arc::new(TestChannel::default());
    let (running, shutdown) = env.start(with_test_channel(&ch)).await;
    let tx = running.inbound();
    let key = ChatKey::new("test", "s");
    llm.push(Reply::text("far too late").with_delay(Duration::from_secs(300)));
    tx.publish(inbound("s1", &key, "write me a novel"))
        .await
        .unwrap();
    llm.wait_for_requests(1, WAIT).await.unwrap();
    let started = Instant::now();
    // As a phone's keyboard may send it: capitalised, with more words.
    tx.publish(inbound("s2", &key, "/Stop please"))
        .await
        .unwrap();
    let sent = ch.wait_for(1, WAIT).await;
    assert_eq!(sent[0].text, "Stopped.");
    assert!(started.elapsed() < Duration::from_secs(5));
    // The chat is free again: the next message is answered, and the novel never arrives.
    tx.publish(inbound("s3", &key, "hello again"))
        .await
        .unwrap();
    let sent = ch.wait_for(2, WAIT).await;
    assert_eq!(sent[1].text, "echo: hello again");
    assert!(!ch.sent().iter().any(|m| m.text.contains("too late")));
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
