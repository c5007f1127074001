//! Wire-level tests of the fake LLM: a real HTTP client (reqwest) against the fake, SSE
//! parsed by hand, reassembled text and tool-call arguments compared with the script.

use std::time::Duration;

use serde_json::{Value, json};
use switchboard_fakes::llm::{FakeLlm, Reply, ToolCall, last_user_text};

const WAIT: Duration = Duration::from_secs(5);

fn openai_body(model: &str, user: &str, stream: bool) -> Value {
    json!({
        "model": model,
        "stream": stream,
        "messages": [
            {"role": "system", "content": "You are a test."},
            {"role": "user", "content": user},
        ],
    })
}

async fn post(url: String, body: &Value) -> reqwest::Response {
    reqwest::Client::new()
        .post(url)
        .bearer_auth("sk-test")
        .json(body)
        .send()
        .await
        .expect("request to the fake")
}

async fn openai(llm: &FakeLlm, body: &Value) -> reqwest::Response {
    post(format!("{}/chat/completions", llm.base_url()), body).await
}

/// The JSON payloads of an OpenAI SSE body; asserts it ends with `data: [DONE]`.
fn openai_events(body: &str) -> Vec<Value> {
    let events: Vec<&str> = body.split("\n\n").filter(|e| !e.is_empty()).collect();
    assert_eq!(
        events.last(),
        Some(&"data: [DONE]"),
        "stream must end with [DONE]"
    );
    events[..events.len() - 1]
        .iter()
        .map(|e| {
            let data = e
                .strip_prefix("data: ")
                .expect("every event is a data line");
            serde_json::from_str(data).expect("chunk is JSON")
        })
        .collect()
}

/// Reassembled OpenAI stream: text, tool calls (id, name, arguments), finish reason.
struct Assembled {
    text: String,
    calls: Vec<(String, String, String)>,
    finish: String,
    content_deltas: usize,
}

fn assemble_openai(chunks: &[Value]) -> Assembled {
    let mut out = Assembled {
        text: String::new(),
        calls: Vec::new(),
        finish: String::new(),
        content_deltas: 0,
    };
    for chunk in chunks {
        assert_eq!(chunk["object"], "chat.completion.chunk");
        let Some(choice) = chunk["choices"].get(0) else {
            continue;
        };
        let delta = &choice["delta"];
        if let Some(piece) = delta["content"].as_str() {
            if !piece.is_empty() {
                out.content_deltas += 1;
            }
            out.text.push_str(piece);
        }
        for call in delta["tool_calls"].as_array().into_iter().flatten() {
            let index = call["index"].as_u64().expect("index on every tool delta") as usize;
            if let Some(id) = call["id"].as_str() {
                assert_eq!(
                    index,
                    out.calls.len(),
                    "a new call starts at the next index"
                );
                assert_eq!(call["type"], "function");
                let name = call["function"]["name"].as_str().expect("name with id");
                out.calls.push((id.into(), name.into(), String::new()));
            } else {
                assert!(call.get("type").is_none() && call["function"].get("name").is_none());
            }
            let fragment = call["function"]["arguments"].as_str().unwrap_or_default();
            out.calls[index].2.push_str(fragment);
        }
        if let Some(finish) = choice["finish_reason"].as_str() {
            out.finish = finish.into();
        }
    }
    out
}

#[tokio::test]
async fn openai_default_echoes_the_last_user_message_with_and_without_v1() {
    let llm = FakeLlm::start().await;
    let body = openai_body("gpt-4o-mini", "hello there", false);
    let with_v1: Value = openai(&llm, &body).await.json().await.unwrap();
    let without = post(format!("{}/chat/completions", llm.url()), &body).await;
    assert_eq!(without.status(), 200);
    let without: Value = without.json().await.unwrap();

    for reply in [&with_v1, &without] {
        assert_eq!(reply["object"], "chat.completion");
        assert_eq!(reply["model"], "gpt-4o-mini");
        assert!(reply["id"].as_str().unwrap().starts_with("chatcmpl-"));
        assert!(reply["created"].as_u64().unwrap() > 1_600_000_000);
        let choice = &reply["choices"][0];
        assert_eq!(choice["message"]["role"], "assistant");
        assert_eq!(choice["message"]["content"], "echo: hello there");
        assert_eq!(choice["finish_reason"], "stop");
        let usage = &reply["usage"];
        assert_eq!(
            usage["total_tokens"].as_u64().unwrap(),
            usage["prompt_tokens"].as_u64().unwrap() + usage["completion_tokens"].as_u64().unwrap()
        );
    }
    let seen = llm.requests();
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[0].path, "/v1/chat/completions");
    assert_eq!(seen[1].path, "/chat/completions");
    assert_eq!(seen[0].model, "gpt-4o-mini");
    assert!(!seen[0].stream);
    assert_eq!(seen[0].headers["authorization"], "Bearer sk-test");
    assert_eq!(last_user_text(&seen[0]), "hello there");
    assert_eq!(seen[0].body, body);
}

#[tokio::test]
async fn openai_non_stream_text_and_tool_calls() {
    let llm = FakeLlm::start().await;
    llm.push(
        Reply::text("Let me look.")
            .with_tool_call("read_file", json!({"path": "a.md"}))
            .with_call(ToolCall::raw("exec", "{\"command\": \"ls\"").with_id("call_mine")),
    );
    llm.push(Reply::text("cut off").truncated());
    llm.push(Reply::empty());

    let body = openai_body("m", "go", false);
    let reply: Value = openai(&llm, &body).await.json().await.unwrap();
    let message = &reply["choices"][0]["message"];
    assert_eq!(message["content"], "Let me look.");
    assert_eq!(reply["choices"][0]["finish_reason"], "tool_calls");
    let calls = message["tool_calls"].as_array().unwrap();
    assert_eq!(calls.len(), 2);
    assert_eq!(calls[0]["type"], "function");
    assert_eq!(calls[0]["function"]["name"], "read_file");
    let args: Value =
        serde_json::from_str(calls[0]["function"]["arguments"].as_str().unwrap()).unwrap();
    assert_eq!(args, json!({"path": "a.md"}));
    assert_eq!(calls[1]["id"], "call_mine");
    assert_eq!(calls[1]["function"]["arguments"], "{\"command\": \"ls\"");
    assert_ne!(calls[0]["id"], calls[1]["id"]);

    let reply: Value = openai(&llm, &body).await.json().await.unwrap();
    assert_eq!(reply["choices"][0]["finish_reason"], "length");
    assert_eq!(reply["choices"][0]["message"]["content"], "cut off");

    let reply: Value = openai(&llm, &body).await.json().await.unwrap();
    assert_eq!(reply["choices"][0]["message"]["content"], "");
    assert_eq!(reply["choices"][0]["finish_reason"], "stop");
    assert!(reply["choices"][0]["message"].get("tool_calls").is_none());
}

#[tokio::test]
async fn openai_stream_splits_text_into_deltas() {
    let llm = FakeLlm::start().await;
    let text = "The quick brown fox jumps over the lazy dog — ünïcödé too.";
    llm.push(Reply::text(text));
    let response = openai(&llm, &openai_body("m", "hi", true)).await;
    assert_eq!(response.status(), 200);
    let content_type = response.headers()["content-type"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(
        content_type.starts_with("text/event-stream"),
        "{content_type}"
    );
    let chunks = openai_events(&response.text().await.unwrap());

    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    let ids: Vec<&Value> = chunks.iter().map(|c| &c["id"]).collect();
    assert!(
        ids.iter().all(|id| *id == ids[0]),
        "one id for the whole stream"
    );
    assert!(
        chunks.iter().all(|c| c.get("usage").is_none()),
        "usage not asked"
    );
    let out = assemble_openai(&chunks);
    assert_eq!(out.text, text);
    assert!(out.content_deltas >= 3, "text split into several deltas");
    assert!(out.calls.is_empty());
    assert_eq!(out.finish, "stop");
    assert!(llm.requests()[0].stream);
}

#[tokio::test]
async fn openai_stream_tool_calls_and_usage_chunk() {
    let llm = FakeLlm::start().await;
    let first = json!({"path": "notes/today.md", "content": "a fairly long line of content"});
    let second = json!({"action": "add", "message": "stand up", "every": "1h"});
    llm.push(Reply::tool_calls([
        ("write_file", first.clone()),
        ("cron", second.clone()),
    ]));
    let mut body = openai_body("m", "hi", true);
    body["stream_options"] = json!({"include_usage": true});
    let raw = openai(&llm, &body).await.text().await.unwrap();
    let chunks = openai_events(&raw);

    let first_delta = &chunks[0]["choices"][0]["delta"];
    assert_eq!(first_delta["role"], "assistant");
    assert_eq!(first_delta["tool_calls"][0]["index"], 0);
    let usage_chunk = chunks.last().unwrap();
    assert_eq!(usage_chunk["choices"], json!([]));
    let usage = &usage_chunk["usage"];
    assert!(usage["completion_tokens"].as_u64().unwrap() > 0);
    assert!(
        chunks[..chunks.len() - 1]
            .iter()
            .all(|c| c["usage"].is_null())
    );

    let out = assemble_openai(&chunks);
    assert_eq!(out.text, "");
    assert_eq!(out.finish, "tool_calls");
    assert_eq!(out.calls.len(), 2);
    assert_eq!(out.calls[0].1, "write_file");
    assert_eq!(out.calls[1].1, "cron");
    assert_eq!(
        serde_json::from_str::<Value>(&out.calls[0].2).unwrap(),
        first
    );
    assert_eq!(
        serde_json::from_str::<Value>(&out.calls[1].2).unwrap(),
        second
    );
    // Arguments really arrive in fragments.
    let fragments = raw.matches("\"arguments\"").count();
    assert!(fragments > 6, "only {fragments} argument deltas");
}

#[tokio::test]
async fn openai_stream_text_then_tool_call() {
    let llm = FakeLlm::start().await;
    llm.push(
        Reply::text("Checking the file now.").with_tool_call("read_file", json!({"path": "x"})),
    );
    let chunks = openai_events(
        &openai(&llm, &openai_body("m", "hi", true))
            .await
            .text()
            .await
            .unwrap(),
    );
    let out = assemble_openai(&chunks);
    assert_eq!(out.text, "Checking the file now.");
    assert_eq!(out.calls.len(), 1);
    assert_eq!(
        serde_json::from_str::<Value>(&out.calls[0].2).unwrap(),
        json!({"path": "x"})
    );
    assert_eq!(out.finish, "tool_calls");
}

#[tokio::test]
async fn openai_errors_have_status_headers_and_shape() {
    let llm = FakeLlm::start().await;
    llm.push(Reply::rate_limited(7));
    llm.push(Reply::server_error());
    llm.push(Reply::overloaded());
    llm.push(Reply::context_overflow());
    llm.push(Reply::error(418, json!({"teapot": true})).with_retry_after(3));
    let body = openai_body("m", "hi", true);

    let r = openai(&llm, &body).await;
    assert_eq!(r.status(), 429);
    assert_eq!(r.headers()["retry-after"], "7");
    let e: Value = r.json().await.unwrap();
    assert_eq!(e["error"]["code"], "rate_limit_exceeded");
    assert!(e["error"]["message"].is_string());

    let r = openai(&llm, &body).await;
    assert_eq!(r.status(), 500);
    assert!(r.headers().get("retry-after").is_none());
    assert_eq!(
        r.json::<Value>().await.unwrap()["error"]["type"],
        "server_error"
    );

    let r = openai(&llm, &body).await;
    assert_eq!(r.status(), 529);
    assert!(r.json::<Value>().await.unwrap()["error"]["message"].is_string());

    let r = openai(&llm, &body).await;
    assert_eq!(r.status(), 400);
    let e: Value = r.json().await.unwrap();
    assert_eq!(e["error"]["code"], "context_length_exceeded");
    assert_eq!(e["error"]["type"], "invalid_request_error");

    let r = openai(&llm, &body).await;
    assert_eq!(r.status(), 418);
    assert_eq!(r.headers()["retry-after"], "3");
    assert_eq!(r.json::<Value>().await.unwrap(), json!({"teapot": true}));

    // Scripts used up: back to the echo default.
    let r = openai(&llm, &openai_body("m", "again", false)).await;
    assert_eq!(
        r.json::<Value>().await.unwrap()["choices"][0]["message"]["content"],
        "echo: again"
    );
}

#[tokio::test]
async fn openai_rejects_malformed_requests_without_consuming_scripts() {
    let llm = FakeLlm::start().await;
    llm.push(Reply::text("scripted"));
    let r = openai(&llm, &json!({"messages": []})).await;
    assert_eq!(r.status(), 400);
    assert_eq!(r.json::<Value>().await.unwrap()["error"]["param"], "model");
    let r = openai(&llm, &json!({"model": "m"})).await;
    assert_eq!(r.status(), 400);
    let r = reqwest::Client::new()
        .post(format!("{}/chat/completions", llm.base_url()))
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    assert_eq!(llm.request_count(), 3);
    assert_eq!(llm.pending(), 1);
    let ok: Value = openai(&llm, &openai_body("m", "x", false))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(ok["choices"][0]["message"]["content"], "scripted");
}

#[tokio::test]
async fn push_for_routes_by_last_user_message() {
    let llm = FakeLlm::start().await;
    llm.push_for("alice", Reply::text("for alice"));
    llm.push_for("bob", Reply::text("for bob 1"));
    llm.push_for("bob", Reply::text("for bob 2"));
    llm.push(Reply::text("global"));

    let ask = |user: &str| {
        let mut body = openai_body("m", "earlier message from alice", false);
        body["messages"].as_array_mut().unwrap().extend([
            json!({"role": "assistant", "content": "ok"}),
            json!({"role": "user", "content": [{"type": "text", "text": user}]}),
        ]);
        let llm = llm.clone();
        async move {
            let reply: Value = openai(&llm, &body).await.json().await.unwrap();
            reply["choices"][0]["message"]["content"]
                .as_str()
                .unwrap()
                .to_owned()
        }
    };
    assert_eq!(ask("this is bob").await, "for bob 1");
    assert_eq!(ask("carol here").await, "global");
    assert_eq!(ask("alice again").await, "for alice");
    assert_eq!(ask("bob!").await, "for bob 2");
    assert_eq!(ask("bob?").await, "echo: bob?");
    assert_eq!(llm.pending(), 0);
}

#[tokio::test]
async fn fail_model_answers_every_request_for_that_model() {
    let llm = FakeLlm::start().await;
    llm.fail_model("primary", Reply::overloaded());
    llm.push(Reply::text("from fallback"));
    for _ in 0..3 {
        let r = openai(&llm, &openai_body("primary", "hi", false)).await;
        assert_eq!(r.status(), 529);
    }
    let r: Value = openai(&llm, &openai_body("fallback", "hi", false))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(r["choices"][0]["message"]["content"], "from fallback");
    assert_eq!(r["model"], "fallback");
    let models: Vec<String> = llm.requests().into_iter().map(|r| r.model).collect();
    assert_eq!(models, ["primary", "primary", "primary", "fallback"]);
}

#[tokio::test]
async fn default_and_responder_can_be_replaced() {
    let llm = FakeLlm::start().await;
    llm.set_default(Reply::text("fixed"));
    let r: Value = openai(&llm, &openai_body("m", "a", false))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(r["choices"][0]["message"]["content"], "fixed");

    let inner = llm.clone();
    llm.set_responder(move |body| {
        // Responders run outside the fake's lock, so calling back in is fine.
        let n = inner.request_count();
        let model = body["model"].as_str().unwrap_or_default();
        Reply::text(format!("{model} #{n}"))
    });
    let r: Value = openai(&llm, &openai_body("m2", "b", false))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(r["choices"][0]["message"]["content"], "m2 #1");
}

#[tokio::test]
async fn wait_for_requests_times_out_with_an_error_and_returns_recorded() {
    let llm = FakeLlm::start().await;
    let err = llm
        .wait_for_requests(1, Duration::from_millis(50))
        .await
        .expect_err("nothing was sent");
    assert!(err.contains("got 0"), "{err}");

    let waiter = {
        let llm = llm.clone();
        tokio::spawn(async move { llm.wait_for_requests(2, WAIT).await })
    };
    openai(&llm, &openai_body("m", "one", false)).await;
    openai(&llm, &openai_body("m", "two", true)).await;
    let seen = waiter.await.unwrap().unwrap();
    let texts: Vec<String> = seen.iter().map(|r| r.last_user_text()).collect();
    assert_eq!(texts, ["one", "two"]);
    assert!(seen[1].at >= seen[0].at);

    llm.clear();
    assert_eq!(llm.request_count(), 0);
    assert!(llm.requests().is_empty());
}

#[tokio::test]
async fn recording_off_still_counts() {
    let llm = FakeLlm::start().await;
    llm.set_recording(false);
    let client = reqwest::Client::new();
    let url = format!("{}/chat/completions", llm.base_url());
    let body = openai_body("m", "fast", false);
    let mut tasks = Vec::new();
    for _ in 0..64 {
        let (client, url, body) = (client.clone(), url.clone(), body.clone());
        tasks.push(tokio::spawn(async move {
            client.post(url).json(&body).send().await.unwrap().status()
        }));
    }
    for task in tasks {
        assert_eq!(task.await.unwrap(), 200);
    }
    let seen = llm.wait_for_requests(64, WAIT).await.unwrap();
    assert!(seen.is_empty());
    assert_eq!(llm.request_count(), 64);
}

#[tokio::test(start_paused = true)]
async fn delays_follow_the_paused_clock() {
    let llm = FakeLlm::start().await;
    llm.set_delay(Duration::from_secs(30));
    llm.push(Reply::text("slow").with_delay(Duration::from_secs(60)));
    llm.push(Reply::text("paced stream").with_chunk_delay(Duration::from_secs(1)));
    let start = tokio::time::Instant::now();
    let r: Value = openai(&llm, &openai_body("m", "a", false))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(r["choices"][0]["message"]["content"], "slow");
    assert!(
        start.elapsed() >= Duration::from_secs(90),
        "{:?}",
        start.elapsed()
    );

    llm.set_delay(Duration::ZERO);
    let start = tokio::time::Instant::now();
    let raw = openai(&llm, &openai_body("m", "b", true))
        .await
        .text()
        .await
        .unwrap();
    assert_eq!(assemble_openai(&openai_events(&raw)).text, "paced stream");
    assert!(
        start.elapsed() >= Duration::from_secs(3),
        "{:?}",
        start.elapsed()
    );
}

#[tokio::test]
async fn models_are_listed_in_both_shapes() {
    let llm = FakeLlm::start().await;
    llm.set_models(["gpt-a", "gpt-b"]);
    let client = reqwest::Client::new();
    let list: Value = client
        .get(format!("{}/models", llm.base_url()))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(list["object"], "list");
    assert_eq!(list["data"][1]["id"], "gpt-b");
    let list: Value = client
        .get(format!("{}/v1/models", llm.url()))
        .header("x-api-key", "k")
        .header("anthropic-version", "2023-06-01")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(list["data"][0]["type"], "model");
    assert_eq!(list["has_more"], false);
    assert_eq!(llm.requests()[0].path, "/v1/models");
}
