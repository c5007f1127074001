//! Latency under a paused clock, broken streams, API-key enforcement.

use std::time::Duration;

use serde_json::Value;
use switchboard_fakes::llm::{FakeLlm, Reply};

use crate::support::*;

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
async fn stream_error_event_breaks_the_stream_in_provider_shape() {
    let llm = FakeLlm::start().await;
    llm.push(Reply::text("a long answer that will not finish").with_stream_error_after(3));
    llm.push(Reply::text("a long answer that will not finish").with_stream_error_after(4));

    let raw = openai(&llm, &openai_body("m", "hi", true))
        .await
        .text()
        .await
        .unwrap();
    let events: Vec<&str> = raw.split("\n\n").filter(|e| !e.is_empty()).collect();
    assert_eq!(events.len(), 4);
    assert!(!raw.contains("[DONE]"));
    let last: Value = serde_json::from_str(events[3].strip_prefix("data: ").unwrap()).unwrap();
    assert_eq!(last["error"]["type"], "server_error");

    let raw = anthropic(&llm, &anthropic_body("hi", true))
        .await
        .text()
        .await
        .unwrap();
    let events = anthropic_events(&raw);
    assert_eq!(events.len(), 5);
    assert_eq!(events[4].0, "error");
    assert_eq!(events[4].1["error"]["type"], "overloaded_error");
    assert!(!events.iter().any(|(name, _)| name == "message_stop"));
}

#[tokio::test]
async fn disconnect_cuts_the_body_mid_stream() {
    let llm = FakeLlm::start().await;
    llm.push(Reply::text("never completes").with_disconnect_after(2));
    let response = openai(&llm, &openai_body("m", "hi", true)).await;
    assert_eq!(response.status(), 200);
    let mut response = response;
    let mut received = Vec::new();
    let outcome = loop {
        match response.chunk().await {
            Ok(Some(bytes)) => received.extend_from_slice(&bytes),
            Ok(None) => break Ok(()),
            Err(error) => break Err(error),
        }
    };
    assert!(outcome.is_err(), "the body must fail");
    let received = String::from_utf8(received).unwrap();
    let events: Vec<&str> = received.split("\n\n").filter(|e| !e.is_empty()).collect();
    assert_eq!(
        events.len(),
        2,
        "the events before the cut arrive: {received}"
    );
    assert!(events[0].contains("\"role\":\"assistant\""));
    // The server keeps serving new connections.
    let ok: Value = openai(&llm, &openai_body("m", "after", false))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(ok["choices"][0]["message"]["content"], "echo: after");
}

#[tokio::test]
async fn require_api_key_rejects_wrong_keys_in_provider_shape() {
    let llm = FakeLlm::start().await;
    llm.require_api_key(Some("sk-ant-test"));
    let r = openai(&llm, &openai_body("m", "hi", false)).await; // sends sk-test
    assert_eq!(r.status(), 401);
    assert_eq!(
        r.json::<Value>().await.unwrap()["error"]["code"],
        "invalid_api_key"
    );
    let r = anthropic(&llm, &anthropic_body("hi", false)).await; // sends sk-ant-test
    assert_eq!(r.status(), 200);
    llm.require_api_key(Some("other"));
    let r = anthropic(&llm, &anthropic_body("hi", false)).await;
    assert_eq!(r.status(), 401);
    assert_eq!(
        r.json::<Value>().await.unwrap()["error"]["type"],
        "authentication_error"
    );
}
