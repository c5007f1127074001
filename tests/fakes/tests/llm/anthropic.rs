//! Anthropic Messages: JSON and `event:` SSE shapes, tool_use input fragments, errors, headers.

use serde_json::{Value, json};
use switchboard_fakes::llm::{FakeLlm, Reply};

use crate::support::*;

#[tokio::test]
async fn anthropic_non_stream_text_tool_use_and_stop_reasons() {
    let llm = FakeLlm::start().await;
    let reply: Value = anthropic(&llm, &anthropic_body("hi there", false))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(reply["type"], "message");
    assert_eq!(reply["role"], "assistant");
    assert_eq!(reply["model"], "claude-test");
    assert!(reply["id"].as_str().unwrap().starts_with("msg_"));
    assert_eq!(
        reply["content"],
        json!([{"type": "text", "text": "echo: hi there"}])
    );
    assert_eq!(reply["stop_reason"], "end_turn");
    assert!(reply["usage"]["input_tokens"].as_u64().unwrap() > 0);
    assert!(reply["usage"]["output_tokens"].as_u64().unwrap() > 0);

    llm.push(Reply::text("On it.").with_tool_call("exec", json!({"command": "date"})));
    llm.push(Reply::text("partial").truncated().with_usage(10, 20));
    llm.push(Reply::empty());
    let reply: Value = anthropic(&llm, &anthropic_body("x", false))
        .await
        .json()
        .await
        .unwrap();
    let content = reply["content"].as_array().unwrap();
    assert_eq!(content[0], json!({"type": "text", "text": "On it."}));
    assert_eq!(content[1]["type"], "tool_use");
    assert_eq!(content[1]["name"], "exec");
    assert_eq!(content[1]["input"], json!({"command": "date"}));
    assert!(content[1]["id"].as_str().unwrap().starts_with("toolu_"));
    assert_eq!(reply["stop_reason"], "tool_use");

    let reply: Value = anthropic(&llm, &anthropic_body("x", false))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(reply["stop_reason"], "max_tokens");
    assert_eq!(
        reply["usage"],
        json!({"input_tokens": 10, "output_tokens": 20})
    );

    let reply: Value = anthropic(&llm, &anthropic_body("x", false))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(reply["content"], json!([]));
    assert_eq!(reply["stop_reason"], "end_turn");

    let seen = llm.requests();
    assert_eq!(seen[0].path, "/v1/messages");
    assert_eq!(seen[0].headers["x-api-key"], "sk-ant-test");
    assert_eq!(seen[0].headers["anthropic-version"], "2023-06-01");
}

#[tokio::test]
async fn anthropic_stream_reassembles_text_and_tool_input() {
    let llm = FakeLlm::start().await;
    let text = "I'll write that down and set a reminder — ça marche.";
    let note = json!({"path": "notes.md", "content": "remember the milk and the eggs"});
    let cron = json!({"action": "add", "message": "milk", "at": "in 10m"});
    llm.push(
        Reply::text(text)
            .with_tool_call("write_file", note.clone())
            .with_tool_call("cron", cron.clone()),
    );
    let response = anthropic(&llm, &anthropic_body("hi", true)).await;
    assert_eq!(response.status(), 200);
    assert!(
        response.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/event-stream")
    );
    let events = anthropic_events(&response.text().await.unwrap());

    let start = &events[0].1["message"];
    assert_eq!(start["role"], "assistant");
    assert_eq!(start["content"], json!([]));
    assert!(start["stop_reason"].is_null());
    assert!(events.iter().any(|(name, _)| name == "ping"));
    let text_deltas = events
        .iter()
        .filter(|(_, d)| d["delta"]["type"] == "text_delta")
        .count();
    assert!(text_deltas >= 3, "text split into several deltas");
    let json_deltas = events
        .iter()
        .filter(|(_, d)| d["delta"]["type"] == "input_json_delta")
        .count();
    assert!(json_deltas > 6, "tool input split into fragments");

    let (blocks, stop, output) = assemble_anthropic(&events);
    assert_eq!(stop, "tool_use");
    assert!(output > 0);
    assert_eq!(blocks.len(), 3);
    assert_eq!((blocks[0].0.as_str(), blocks[0].1.as_str()), ("text", text));
    assert_eq!(
        (blocks[1].0.as_str(), blocks[1].1.as_str()),
        ("tool_use", "write_file")
    );
    assert_eq!(
        (blocks[2].0.as_str(), blocks[2].1.as_str()),
        ("tool_use", "cron")
    );
    assert_ne!(blocks[1].2, blocks[2].2);
    assert_eq!(serde_json::from_str::<Value>(&blocks[1].3).unwrap(), note);
    assert_eq!(serde_json::from_str::<Value>(&blocks[2].3).unwrap(), cron);
}

#[tokio::test]
async fn anthropic_requires_its_headers_and_max_tokens() {
    let llm = FakeLlm::start().await;
    llm.push(Reply::text("scripted"));
    let url = format!("{}/v1/messages", llm.url());
    let client = reqwest::Client::new();
    let body = anthropic_body("hi", false);

    let r = client
        .post(&url)
        .header("anthropic-version", "2023-06-01")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    let e: Value = r.json().await.unwrap();
    assert_eq!(e["type"], "error");
    assert_eq!(e["error"]["type"], "authentication_error");

    let r = client
        .post(&url)
        .header("x-api-key", "k")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    assert_eq!(
        r.json::<Value>().await.unwrap()["error"]["type"],
        "invalid_request_error"
    );

    // The official SDK 2.x sends the key as a bearer token instead of x-api-key.
    let r = client
        .post(&url)
        .bearer_auth("sk-ant-test")
        .header("anthropic-version", "2023-06-01")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(
        r.json::<Value>().await.unwrap()["content"][0]["text"],
        "scripted"
    );
    llm.push(Reply::text("scripted"));

    let mut no_max = body.clone();
    no_max.as_object_mut().unwrap().remove("max_tokens");
    let r = anthropic(&llm, &no_max).await;
    assert_eq!(r.status(), 400);
    let message = r.json::<Value>().await.unwrap()["error"]["message"].clone();
    assert!(message.as_str().unwrap().contains("max_tokens"));

    assert_eq!(llm.request_count(), 4);
    let r: Value = anthropic(&llm, &body).await.json().await.unwrap();
    assert_eq!(r["content"][0]["text"], "scripted");
}

#[tokio::test]
async fn anthropic_errors_have_status_headers_and_shape() {
    let llm = FakeLlm::start().await;
    llm.push(Reply::overloaded());
    llm.push(Reply::rate_limited(5));
    llm.push(Reply::server_error());
    llm.push(Reply::context_overflow());
    let body = anthropic_body("hi", true);

    let r = anthropic(&llm, &body).await;
    assert_eq!(r.status(), 529);
    assert_eq!(
        r.json::<Value>().await.unwrap(),
        json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})
    );

    let r = anthropic(&llm, &body).await;
    assert_eq!(r.status(), 429);
    assert_eq!(r.headers()["retry-after"], "5");
    assert_eq!(
        r.json::<Value>().await.unwrap()["error"]["type"],
        "rate_limit_error"
    );

    let r = anthropic(&llm, &body).await;
    assert_eq!(r.status(), 500);
    assert_eq!(
        r.json::<Value>().await.unwrap()["error"]["type"],
        "api_error"
    );

    let r = anthropic(&llm, &body).await;
    assert_eq!(r.status(), 400);
    let e: Value = r.json().await.unwrap();
    assert_eq!(e["error"]["type"], "invalid_request_error");
    assert!(
        e["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("prompt is too long")
    );
}

#[tokio::test]
async fn anthropic_tool_results_do_not_hide_the_last_user_text() {
    let llm = FakeLlm::start().await;
    llm.push_for("dave", Reply::text("for dave"));
    let body = json!({
        "model": "claude-test",
        "max_tokens": 100,
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "dave asks for the date"}]},
            {"role": "assistant", "content": [
                {"type": "tool_use", "id": "toolu_1", "name": "exec", "input": {"command": "date"}}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "Mon"}]},
        ],
    });
    let r: Value = anthropic(&llm, &body).await.json().await.unwrap();
    assert_eq!(r["content"][0]["text"], "for dave");
    let r: Value = anthropic(&llm, &body).await.json().await.unwrap();
    assert_eq!(r["content"][0]["text"], "echo: dave asks for the date");
    assert_eq!(llm.requests()[1].last_user_text(), "dave asks for the date");
}
