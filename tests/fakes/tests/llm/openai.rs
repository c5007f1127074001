//! OpenAI Chat Completions: JSON and SSE shapes, tool-call deltas, errors, validation.

use serde_json::{Value, json};
use switchboard_fakes::llm::{FakeLlm, Reply, ToolCall, last_user_text};

use crate::support::*;

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
