//! `Idempotency-Key` on `POST /v1/chat/completions`, over real HTTP against the fake LLM: a
//! retry (in sequence, at the same time, or after a SIGKILL of the real binary mid-turn)
//! gets the one answer and the model is asked once; another user's same key is another
//! request; the same key with another body is refused, and so is a malformed key.

mod common;

use std::time::Duration;

use common::platform::{env_with, http_base};
use common::{Env, base, reply_text, sse_chunks, sse_text};
use serde_json::{Value, json};
use switchboard::agent::session::Session;
use switchboard::store::{SledStore, Store, Tree};
use switchboard_channel::ChatKey;
use switchboard_fakes::llm::{FakeLlm, RecordedRequest, Reply};

const WAIT: Duration = Duration::from_secs(30);

/// POST a chat completion with `Idempotency-Key: key` (the raw bytes given).
async fn send(base: &str, key: &[u8], body: Value) -> reqwest::Response {
    reqwest::Client::new()
        .post(format!("{base}/v1/chat/completions"))
        .header(
            "idempotency-key",
            reqwest::header::HeaderValue::from_bytes(key).expect("a header value"),
        )
        .json(&body)
        .send()
        .await
        .expect("request")
}

fn body(user: &str, text: &str) -> Value {
    json!({"model": "x", "user": user, "messages": [{"role": "user", "content": text}]})
}

/// A keyed, not streamed request that must succeed: its JSON body.
async fn ask_keyed(base: &str, key: &str, user: &str, text: &str) -> Value {
    let r = send(base, key.as_bytes(), body(user, text)).await;
    assert_eq!(r.status(), 200);
    r.json().await.expect("json")
}

/// A keyed, streamed request that must succeed: the SSE body.
async fn stream_keyed(base: &str, key: &str, user: &str, text: &str) -> String {
    let mut b = body(user, text);
    b["stream"] = json!(true);
    let r = send(base, key.as_bytes(), b).await;
    assert_eq!(r.status(), 200);
    r.text().await.expect("SSE body")
}

/// How many user messages with `text` the model was sent in `request`.
fn user_messages(request: &RecordedRequest, text: &str) -> usize {
    request.body["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .filter(|m| m["role"] == "user" && m["content"] == text)
        .count()
}

/// How many user messages with `text` the session of `chat` holds.
fn stored(store: &dyn Store, chat: &str, text: &str) -> usize {
    let key: ChatKey = chat.parse().unwrap();
    Session::load(store, &key)
        .unwrap()
        .messages
        .iter()
        .filter(|m| m.content == text)
        .count()
}

#[tokio::test]
async fn a_retry_in_sequence_gets_the_kept_answer_without_a_second_turn() {
    let llm = FakeLlm::start().await;
    let env = Env::new(&llm.base_url(), "");
    let (running, shutdown) = env.start(Default::default()).await;
    let url = base(&running);
    llm.push(Reply::text("Paris.").with_usage(10, 2));
    let first = ask_keyed(&url, "k-1", "ann", "capital of France?").await;
    assert_eq!(reply_text(&first), "Paris.");
    // The same request again: the same completion, the model not asked.
    let again = ask_keyed(&url, "k-1", "ann", "capital of France?").await;
    assert_eq!(again, first);
    // Asked again as a stream: the answer as SSE, then `[DONE]`.
    let sse = stream_keyed(&url, "k-1", "ann", "capital of France?").await;
    assert_eq!(sse_text(&sse), "Paris.");
    assert_eq!(sse_chunks(&sse)[0]["id"], first["id"]);
    assert!(sse.trim_end().ends_with("data: [DONE]"), "{sse}");
    assert_eq!(llm.request_count(), 1);
    assert_eq!(
        stored(&*running.shared.store, "api:ann", "capital of France?"),
        1
    );
    // A new key is a new request.
    let next = ask_keyed(&url, "k-2", "ann", "capital of France?").await;
    assert_eq!(reply_text(&next), "echo: capital of France?");
    assert_eq!(llm.request_count(), 2);
    shutdown.cancel();
    running.stopped().await;
}

#[tokio::test]
async fn a_kept_answer_is_redacted_as_the_live_one() {
    // As the config's `api_key_env` registers the LLM key.
    let secret = "sk-fake-idem-secret-0123456789";
    switchboard_channel::redact::register(secret);
    let llm = FakeLlm::start().await;
    let env = Env::new(&llm.base_url(), "");
    let (running, shutdown) = env.start(Default::default()).await;
    let url = base(&running);
    llm.push(Reply::text(format!("The key is {secret}.")));
    let live = ask_keyed(&url, "s-1", "eve", "the key?").await;
    assert_eq!(reply_text(&live), "The key is [redacted].");
    let sse = stream_keyed(&url, "s-1", "eve", "the key?").await;
    assert_eq!(sse_text(&sse), "The key is [redacted].");
    let kept = running.shared.store.scan(Tree::Meta, b"idem/").unwrap();
    assert_eq!(kept.len(), 1);
    let record = String::from_utf8_lossy(&kept[0].1);
    assert!(
        record.contains("[redacted]") && !record.contains(secret),
        "{record}"
    );
    assert_eq!(llm.request_count(), 1);
    shutdown.cancel();
    running.stopped().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_at_the_same_time_wait_for_the_one_turn() {
    let llm = FakeLlm::start().await;
    let env = Env::new(&llm.base_url(), "");
    let (running, shutdown) = env.start(Default::default()).await;
    let url = base(&running);
    llm.push(Reply::text("the one answer").with_delay(Duration::from_secs(2)));
    // Two at once (one streamed), then one while the model is answering.
    let at_once = {
        let (a, b) = (url.clone(), url.clone());
        tokio::spawn(async move {
            tokio::join!(
                ask_keyed(&a, "same", "bo", "slow question"),
                stream_keyed(&b, "same", "bo", "slow question"),
            )
        })
    };
    llm.wait_for_requests(1, WAIT)
        .await
        .expect("the turn began");
    let during = ask_keyed(&url, "same", "bo", "slow question").await;
    let (first, streamed) = at_once.await.unwrap();
    assert_eq!(reply_text(&first), "the one answer");
    assert_eq!(sse_text(&streamed), "the one answer");
    assert!(streamed.trim_end().ends_with("data: [DONE]"), "{streamed}");
    assert_eq!(reply_text(&during), "the one answer");
    assert_eq!(during["id"], first["id"]);
    assert_eq!(llm.request_count(), 1);
    assert_eq!(stored(&*running.shared.store, "api:bo", "slow question"), 1);
    shutdown.cancel();
    running.stopped().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_after_the_client_gave_up_gets_the_answer_of_the_running_turn() {
    let llm = FakeLlm::start().await;
    let env = Env::new(&llm.base_url(), "");
    let (running, shutdown) = env.start(Default::default()).await;
    let url = base(&running);
    llm.push(Reply::text("worth the wait").with_delay(Duration::from_secs(2)));
    // A client's timeout: the request goes away, its turn goes on (no key: it would stop).
    let gave_up = reqwest::Client::new()
        .post(format!("{url}/v1/chat/completions"))
        .header("idempotency-key", "t-1")
        .timeout(Duration::from_millis(300))
        .json(&body("di", "a slow one"))
        .send()
        .await;
    assert!(gave_up.is_err());
    let retry = ask_keyed(&url, "t-1", "di", "a slow one").await;
    assert_eq!(reply_text(&retry), "worth the wait");
    assert_eq!(llm.request_count(), 1);
    assert_eq!(stored(&*running.shared.store, "api:di", "a slow one"), 1);
    shutdown.cancel();
    running.stopped().await;
}

#[tokio::test]
async fn the_same_key_is_per_user_and_per_request() {
    let llm = FakeLlm::start().await;
    let env = Env::new(&llm.base_url(), "");
    let (running, shutdown) = env.start(Default::default()).await;
    let url = base(&running);
    // Two users, one key: two requests, two turns.
    let ann = ask_keyed(&url, "shared-key", "ann", "hello from ann").await;
    let bob = ask_keyed(&url, "shared-key", "bob", "hello from bob").await;
    assert_eq!(reply_text(&ann), "echo: hello from ann");
    assert_eq!(reply_text(&bob), "echo: hello from bob");
    assert_eq!(llm.request_count(), 2);
    // The same key with another request (another message, another model): refused, nothing
    // runs or is stored.
    let mut other_model = body("ann", "hello from ann");
    other_model["model"] = json!("y");
    for other in [body("ann", "something else"), other_model] {
        let r = send(&url, b"shared-key", other).await;
        assert_eq!(r.status(), 409);
        let v: Value = r.json().await.unwrap();
        let message = v["error"]["message"].as_str().unwrap();
        assert!(message.contains("`Idempotency-Key`"), "{message}");
        assert_eq!(v["error"]["type"], "invalid_request_error");
    }
    assert_eq!(llm.request_count(), 2);
    assert_eq!(
        stored(&*running.shared.store, "api:ann", "something else"),
        0
    );
    // The request itself is still answered as before.
    assert_eq!(
        ask_keyed(&url, "shared-key", "ann", "hello from ann").await,
        ann
    );
    assert_eq!(llm.request_count(), 2);
    shutdown.cancel();
    running.stopped().await;
}

#[tokio::test]
async fn a_malformed_key_gets_a_400_naming_the_header() {
    let llm = FakeLlm::start().await;
    let env = Env::new(&llm.base_url(), "");
    let (running, shutdown) = env.start(Default::default()).await;
    let url = base(&running);
    let too_long = "k".repeat(256);
    let bad: [&[u8]; 5] = [
        b"",
        too_long.as_bytes(),
        b"tab\there",
        b"two words",
        b"caf\xc3\xa9",
    ];
    for key in bad {
        let r = send(&url, key, body("ann", "hi")).await;
        assert_eq!(r.status(), 400, "{key:?}");
        let v: Value = r.json().await.unwrap();
        let message = v["error"]["message"].as_str().unwrap();
        assert!(message.contains("`Idempotency-Key`"), "{message}");
        assert_eq!(v["error"]["type"], "invalid_request_error");
    }
    assert_eq!(llm.request_count(), 0);
    assert_eq!(running.shared.store.len(Tree::Inbox), 0);
    assert_eq!(running.shared.store.len(Tree::Sessions), 0);
    // The longest key is fine.
    let longest = "k".repeat(255);
    let ok = ask_keyed(&url, &longest, "ann", "hi").await;
    assert_eq!(reply_text(&ok), "echo: hi");
    shutdown.cancel();
    running.stopped().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_after_a_sigkill_mid_turn_gets_the_answer_of_the_one_turn() {
    let llm = FakeLlm::start().await;
    let env = env_with(&llm.base_url(), "");
    // The first LLM call hangs long enough for the gateway to be killed during it.
    llm.push(Reply::text("too late").with_delay(Duration::from_secs(120)));
    let mut gw = env.spawn();
    gw.wait_admin(WAIT);
    let url = http_base(&env);
    let first = reqwest::Client::new()
        .post(format!("{url}/v1/chat/completions"))
        .header("idempotency-key", "crash-1")
        .json(&body("cy", "remember the milk"))
        .send();
    let first = tokio::spawn(first);
    llm.wait_for_requests(1, WAIT).await.unwrap();
    gw.kill9();
    assert!(
        first.await.unwrap().is_err(),
        "the first request died with the gateway"
    );

    // After the restart the inbox replay runs the turn; the client's retry waits for it.
    llm.push(Reply::text("Noted: milk."));
    let mut gw = env.spawn();
    gw.wait_admin(WAIT);
    let retry = ask_keyed(&url, "crash-1", "cy", "remember the milk").await;
    assert_eq!(reply_text(&retry), "Noted: milk.");
    let reqs = llm.requests();
    assert_eq!(reqs.len(), 2, "the first run's call and the replay's");
    assert_eq!(user_messages(&reqs[1], "remember the milk"), 1);

    // Answered: kept across a restart, the model not asked again.
    gw.sigterm();
    assert!(gw.wait_exit(WAIT).0.success());
    let mut gw = env.spawn();
    gw.wait_admin(WAIT);
    let later = ask_keyed(&url, "crash-1", "cy", "remember the milk").await;
    assert_eq!(later, retry);
    gw.sigterm();
    assert!(gw.wait_exit(WAIT).0.success());
    assert_eq!(llm.request_count(), 2);
    let store = SledStore::open(&env.data_dir()).unwrap();
    assert_eq!(stored(&store, "api:cy", "remember the milk"), 1);
    assert_eq!(store.len(Tree::Inbox), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keyed_request_cut_off_by_a_restart_gets_a_503_and_its_retry_the_answer() {
    let llm = FakeLlm::start().await;
    let env = Env::new(&llm.base_url(), "");
    let opts = switchboard::StartOptions {
        turn_grace: Duration::from_millis(100),
        ..Default::default()
    };
    let (running, shutdown) = env.start(opts).await;
    let url = base(&running);
    // Both turns still running when the gateway stops: interrupted, run again after it.
    for q in ["plain question", "streamed question"] {
        llm.push_for(
            q,
            Reply::text("too late").with_delay(Duration::from_secs(60)),
        );
    }
    let u = url.clone();
    let plain = tokio::spawn(async move { send(&u, b"r-1", body("fay", "plain question")).await });
    let mut b = body("gus", "streamed question");
    b["stream"] = json!(true);
    let u = url.clone();
    let streamed = tokio::spawn(async move { send(&u, b"r-2", b).await });
    llm.wait_for_requests(2, WAIT)
        .await
        .expect("both turns began");
    shutdown.cancel();
    let stopping = tokio::spawn(running.stopped());
    // Not a success: the client is to retry with its key.
    let plain = plain.await.unwrap();
    assert_eq!(plain.status(), 503);
    let after = plain
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().to_string());
    assert_eq!(after.as_deref(), Some("5"));
    let v: Value = plain.json().await.unwrap();
    assert_eq!(v["error"]["code"], "gateway_restarting", "{v}");
    let message = v["error"]["message"].as_str().unwrap();
    assert!(message.contains("same `Idempotency-Key`"), "{message}");
    let streamed = streamed.await.unwrap();
    assert_eq!(streamed.status(), 200, "the stream had begun");
    let sse = streamed.text().await.unwrap();
    assert!(!sse.contains("[DONE]"), "{sse}");
    assert!(!sse.contains("restarting. Your message"), "{sse}");
    let last = sse_chunks(&sse).pop().expect("an event");
    assert_eq!(last["error"]["code"], "gateway_restarting", "{sse}");
    tokio::time::timeout(WAIT, stopping).await.unwrap().unwrap();

    // After the restart: the replay runs each turn once, the retries get their answers.
    llm.push_for("plain question", Reply::text("the plain answer"));
    llm.push_for("streamed question", Reply::text("the streamed answer"));
    let (running, shutdown) = env.start(Default::default()).await;
    let url = base(&running);
    let retry = ask_keyed(&url, "r-1", "fay", "plain question").await;
    assert_eq!(reply_text(&retry), "the plain answer");
    let sse = stream_keyed(&url, "r-2", "gus", "streamed question").await;
    assert_eq!(sse_text(&sse), "the streamed answer");
    assert!(sse.trim_end().ends_with("data: [DONE]"), "{sse}");
    // Kept: asked again, the same answers.
    let again = ask_keyed(&url, "r-1", "fay", "plain question").await;
    assert_eq!(reply_text(&again), "the plain answer");
    let sse = stream_keyed(&url, "r-2", "gus", "streamed question").await;
    assert_eq!(sse_text(&sse), "the streamed answer");
    let reqs = llm.requests();
    assert_eq!(reqs.len(), 4, "each turn's cut-off call and its replay's");
    for q in ["plain question", "streamed question"] {
        let replayed = reqs[2..]
            .iter()
            .filter(|r| user_messages(r, q) == 1)
            .count();
        assert_eq!(replayed, 1, "{q}");
    }
    assert_eq!(
        stored(&*running.shared.store, "api:fay", "plain question"),
        1
    );
    assert_eq!(
        stored(&*running.shared.store, "api:gus", "streamed question"),
        1
    );
    shutdown.cancel();
    running.stopped().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_retry_joining_a_running_turn_gets_the_text_once() {
    let llm = FakeLlm::start().await;
    let env = Env::new(&llm.base_url(), "");
    let (running, shutdown) = env.start(Default::default()).await;
    let url = base(&running);
    let text = "one two three four five six seven eight nine ten eleven twelve";
    llm.set_stream_chunk_chars(4);
    llm.push(Reply::text(text).with_chunk_delay(Duration::from_millis(150)));
    let mut b = body("hal", "count slowly");
    b["stream"] = json!(true);
    // The first client leaves once some of the answer came.
    let mut first = send(&url, b"m-1", b).await;
    assert_eq!(first.status(), 200);
    let mut got = String::new();
    while sse_text(&got).is_empty() {
        let chunk = first.chunk().await.unwrap().expect("more of the stream");
        got.push_str(&String::from_utf8_lossy(&chunk));
    }
    drop(first);
    // Its retry joins the turn halfway through.
    let sse = stream_keyed(&url, "m-1", "hal", "count slowly").await;
    assert_eq!(sse_text(&sse), text, "{sse}");
    assert!(sse.trim_end().ends_with("data: [DONE]"), "{sse}");
    assert_eq!(llm.request_count(), 1);
    shutdown.cancel();
    running.stopped().await;
}
