//! Reply selection (push, push_for, fail_model, default, responder), recording and waits.

use std::time::Duration;

use serde_json::{Value, json};
use switchboard_fakes::llm::{FakeLlm, Reply};

use crate::support::*;

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
async fn reset_forgets_scripts_and_failures() {
    let llm = FakeLlm::start().await;
    llm.push(Reply::text("queued"));
    llm.push_for("x", Reply::text("routed"));
    llm.fail_model("m", Reply::server_error());
    llm.set_default(Reply::text("fixed"));
    llm.reset();
    assert_eq!(llm.pending(), 0);
    let r: Value = openai(&llm, &openai_body("m", "x", false))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(r["choices"][0]["message"]["content"], "echo: x");
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

#[tokio::test]
async fn recorded_requests_expose_system_prompt_and_tools() {
    let llm = FakeLlm::start().await;
    let mut body = openai_body("m", "hi", false);
    body["tools"] = json!([
        {"type": "function", "function": {"name": "read_file", "parameters": {"type": "object"}}},
        {"type": "function", "function": {"name": "exec", "parameters": {"type": "object"}}},
    ]);
    openai(&llm, &body).await;
    let mut body = anthropic_body("hi", false);
    body["system"] =
        json!([{"type": "text", "text": "Block one."}, {"type": "text", "text": "Two."}]);
    body["tools"] = json!([{"name": "cron", "input_schema": {"type": "object"}}]);
    anthropic(&llm, &body).await;

    let seen = llm.wait_for_requests(2, WAIT).await.unwrap();
    assert_eq!(seen[0].system_text(), "You are a test.");
    assert_eq!(seen[0].tool_names(), ["read_file", "exec"]);
    assert_eq!(seen[1].system_text(), "Block one.\n\nTwo.");
    assert_eq!(seen[1].tool_names(), ["cron"]);
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
