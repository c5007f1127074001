//! The public SSE parsers against the fake's own streams (with SSE comments mixed in),
//! and the predicate wait.

use std::time::Duration;

use serde_json::{Value, json};
use switchboard_fakes::llm::{FakeLlm, Reply, parse_anthropic_stream, parse_openai_stream};

use crate::support::*;

fn script() -> (Reply, Value) {
    let args = json!({"query": "weather in Paris", "count": 3});
    let reply = Reply::text("Searching — one moment.")
        .with_tool_call("web_search", args.clone())
        .with_sse_comments();
    (reply, args)
}

#[tokio::test]
async fn openai_parser_reassembles_a_stream_with_comments() {
    let llm = FakeLlm::start().await;
    let (reply, args) = script();
    llm.push(reply);
    let mut body = openai_body("m", "hi", true);
    body["stream_options"] = json!({"include_usage": true});
    let raw = openai(&llm, &body).await.text().await.unwrap();
    assert!(raw.contains(": keep-alive\n\n"));

    let parsed = parse_openai_stream(&raw).unwrap();
    assert!(parsed.done);
    assert_eq!(parsed.text, "Searching — one moment.");
    assert!(parsed.text_deltas >= 2);
    assert_eq!(parsed.finish_reason.as_deref(), Some("tool_calls"));
    assert_eq!(parsed.tool_calls.len(), 1);
    assert_eq!(parsed.tool_calls[0].name, "web_search");
    assert!(parsed.tool_calls[0].id.starts_with("call_"));
    let parsed_args: Value = serde_json::from_str(&parsed.tool_calls[0].arguments).unwrap();
    assert_eq!(parsed_args, args);
    assert!(parsed.usage.unwrap()["total_tokens"].as_u64().unwrap() > 0);
}

#[tokio::test]
async fn anthropic_parser_reassembles_a_stream_with_comments() {
    let llm = FakeLlm::start().await;
    let (reply, args) = script();
    llm.push(reply);
    let raw = anthropic(&llm, &anthropic_body("hi", true))
        .await
        .text()
        .await
        .unwrap();
    assert!(raw.contains(": keep-alive\n\n"));

    let parsed = parse_anthropic_stream(&raw).unwrap();
    assert!(parsed.done);
    assert_eq!(parsed.text, "Searching — one moment.");
    assert_eq!(parsed.finish_reason.as_deref(), Some("tool_use"));
    assert_eq!(parsed.tool_calls.len(), 1);
    assert!(parsed.tool_calls[0].id.starts_with("toolu_"));
    let parsed_args: Value = serde_json::from_str(&parsed.tool_calls[0].arguments).unwrap();
    assert_eq!(parsed_args, args);
}

#[tokio::test]
async fn parsers_report_stream_errors_and_missing_end() {
    let llm = FakeLlm::start().await;
    llm.push(Reply::text("breaks half way through").with_stream_error_after(3));
    llm.push(Reply::text("breaks half way through").with_stream_error_after(3));
    let raw = openai(&llm, &openai_body("m", "hi", true))
        .await
        .text()
        .await
        .unwrap();
    let err = parse_openai_stream(&raw).unwrap_err();
    assert!(err.contains("server_error"), "{err}");
    let raw = anthropic(&llm, &anthropic_body("hi", true))
        .await
        .text()
        .await
        .unwrap();
    let err = parse_anthropic_stream(&raw).unwrap_err();
    assert!(err.contains("overloaded_error"), "{err}");

    let partial = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\r\n\r\n";
    let parsed = parse_openai_stream(partial).unwrap();
    assert_eq!(parsed.text, "hi");
    assert!(!parsed.done, "no [DONE]: the stream did not end properly");
}

#[tokio::test]
async fn wait_for_request_finds_the_matching_one() {
    let llm = FakeLlm::start().await;
    let waiter = {
        let llm = llm.clone();
        tokio::spawn(async move {
            llm.wait_for_request(|r| r.last_user_text().contains("bob"), WAIT)
                .await
        })
    };
    openai(&llm, &openai_body("m", "alice speaking", false)).await;
    openai(&llm, &openai_body("m2", "bob speaking", false)).await;
    let found = waiter.await.unwrap().unwrap();
    assert_eq!(found.model, "m2");

    let err = llm
        .wait_for_request(|r| r.model == "nope", Duration::from_millis(50))
        .await
        .unwrap_err();
    assert!(err.contains("2 received"), "{err}");
}
