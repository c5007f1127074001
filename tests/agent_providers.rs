//! The provider layer against the fake LLM server over real HTTP: OpenAI and Anthropic,
//! stream and non-stream, tool calls split across deltas, retries, fallbacks, cool-downs.

mod agent_support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_support::read_file_request;
use serde_json::json;
use switchboard::llm::anthropic::Anthropic;
use switchboard::llm::openai::OpenAi;
use switchboard::llm::resilient::Resilient;
use switchboard::llm::{ChatMessage, DeltaSink, LlmError, LlmProvider, LlmRequest, Role, ToolCall};
use switchboard_fakes::llm::{FakeLlm, Reply};

fn request(model: &str) -> LlmRequest {
    read_file_request(model, "what is in notes.md?")
}

fn collecting_sink() -> (DeltaSink, Arc<Mutex<Vec<String>>>) {
    let got = Arc::new(Mutex::new(Vec::new()));
    let g = got.clone();
    (
        Arc::new(move |t: &str| g.lock().unwrap().push(t.to_string())),
        got,
    )
}

fn script(llm: &FakeLlm) {
    llm.set_stream_chunk_chars(3);
    llm.push(
        Reply::text("Let me look.")
            .with_tool_call("read_file", json!({"path": "notes.md"}))
            .with_tool_call("read_file", json!({"path": "todo.md"}))
            .with_usage(120, 30),
    );
}

fn assert_tool_answer(r: &switchboard::llm::LlmResponse) {
    assert_eq!(r.text, "Let me look.");
    assert_eq!(r.tool_calls.len(), 2);
    assert_eq!(r.tool_calls[0].name, "read_file");
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&r.tool_calls[0].arguments).unwrap(),
        json!({"path": "notes.md"})
    );
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&r.tool_calls[1].arguments).unwrap(),
        json!({"path": "todo.md"})
    );
    assert_ne!(r.tool_calls[0].id, r.tool_calls[1].id);
    assert!(!r.tool_calls[0].id.is_empty());
    assert_eq!(
        (r.usage.prompt_tokens, r.usage.completion_tokens),
        (120, 30)
    );
}

#[tokio::test]
async fn openai_streams_every_answer_and_assembles_tool_calls() {
    let llm = FakeLlm::start().await;
    let p = OpenAi::new(
        &llm.base_url(),
        Some("sk-test".into()),
        Duration::from_secs(10),
    )
    .unwrap();
    script(&llm);
    let r = p.complete(&request("gpt-4o-mini"), None).await.unwrap();
    assert_tool_answer(&r);
    assert_eq!(r.finish_reason, "tool_calls");

    script(&llm);
    let (sink, got) = collecting_sink();
    let r = p
        .complete(&request("gpt-4o-mini"), Some(sink))
        .await
        .unwrap();
    assert_tool_answer(&r);
    let deltas = got.lock().unwrap().clone();
    assert!(deltas.len() >= 3, "text arrives in pieces: {deltas:?}");
    assert_eq!(deltas.concat(), "Let me look.");

    let reqs = llm.requests();
    assert_eq!(reqs.len(), 2);
    // Streamed whether or not anyone listens to the text as it comes (DESIGN §5).
    assert!(reqs[0].stream && reqs[1].stream);
    let body = &reqs[1].body;
    assert_eq!(reqs[1].headers["authorization"], "Bearer sk-test");
    assert_eq!(body["messages"][0]["role"], "system");
    assert_eq!(
        body["messages"][0]["content"],
        "You are Switchboard.\n\nCurrent time: 12:00."
    );
    assert_eq!(body["tools"][0]["function"]["name"], "read_file");
    assert_eq!(body["stream_options"]["include_usage"], true);
}

#[tokio::test]
async fn openai_sends_tool_results_with_their_call_ids() {
    let llm = FakeLlm::start().await;
    let p = OpenAi::new(&llm.base_url(), None, Duration::from_secs(10)).unwrap();
    let mut req = request("gpt-4o-mini");
    let mut call = ChatMessage::new(Role::Assistant, "");
    call.tool_calls.push(ToolCall {
        id: "call_1".into(),
        name: "read_file".into(),
        arguments: "{\"path\":\"a\"}".into(),
        extra_content: None,
    });
    let mut result = ChatMessage::new(Role::Tool, "file body");
    result.tool_call_id = Some("call_1".into());
    req.messages.extend([call, result]);
    llm.push(Reply::text("It says: file body"));
    let r = p.complete(&req, None).await.unwrap();
    assert_eq!(r.text, "It says: file body");
    let body = &llm.requests()[0].body;
    assert_eq!(body["messages"][2]["tool_calls"][0]["id"], "call_1");
    assert_eq!(body["messages"][2]["content"], serde_json::Value::Null);
    assert_eq!(
        body["messages"][3],
        json!({"role": "tool", "content": "file body", "tool_call_id": "call_1"})
    );
}

#[tokio::test]
async fn anthropic_streams_every_answer_and_assembles_tool_use() {
    let llm = FakeLlm::start().await;
    let p = Anthropic::new(&llm.url(), Some("ak-test".into()), Duration::from_secs(10)).unwrap();
    script(&llm);
    let r = p
        .complete(&request("claude-sonnet-4-5"), None)
        .await
        .unwrap();
    assert_tool_answer(&r);
    assert_eq!(r.finish_reason, "tool_use");

    script(&llm);
    let (sink, got) = collecting_sink();
    let r = p
        .complete(&request("claude-sonnet-4-5"), Some(sink))
        .await
        .unwrap();
    assert_tool_answer(&r);
    assert_eq!(got.lock().unwrap().concat(), "Let me look.");

    // The cached system prompt's tokens are prompt tokens too.
    llm.push(
        Reply::text("cached")
            .with_usage(20, 5)
            .with_cached_prompt(900, 100),
    );
    let r = p
        .complete(&request("claude-sonnet-4-5"), None)
        .await
        .unwrap();
    assert_eq!(
        (r.usage.prompt_tokens, r.usage.completion_tokens),
        (1020, 5)
    );

    let reqs = llm.requests();
    assert!(reqs[0].stream && reqs[1].stream);
    assert_eq!(reqs[1].path, "/v1/messages");
    assert_eq!(reqs[1].headers["x-api-key"], "ak-test");
    assert_eq!(reqs[1].headers["anthropic-version"], "2023-06-01");
    let body = &reqs[1].body;
    // Stable prefix cached, clock in a separate, uncached block.
    assert_eq!(
        body["system"],
        json!([
            {"type": "text", "text": "You are Switchboard.", "cache_control": {"type": "ephemeral"}},
            {"type": "text", "text": "Current time: 12:00."}
        ])
    );
    assert_eq!(
        body["tools"][0]["input_schema"]["required"],
        json!(["path"])
    );
}

#[tokio::test]
async fn anthropic_sends_tool_use_and_tool_result_blocks() {
    let llm = FakeLlm::start().await;
    let p = Anthropic::new(
        &format!("{}/v1", llm.url()),
        Some("k".into()),
        Duration::from_secs(10),
    )
    .unwrap();
    let mut req = request("claude-sonnet-4-5");
    let mut call = ChatMessage::new(Role::Assistant, "Checking.");
    call.tool_calls.push(ToolCall {
        id: "toolu_1".into(),
        name: "read_file".into(),
        arguments: "{\"path\":\"a\"}".into(),
        extra_content: None,
    });
    let mut result = ChatMessage::new(Role::Tool, "file body");
    result.tool_call_id = Some("toolu_1".into());
    req.messages.extend([
        call,
        result,
        ChatMessage::new(Role::System, "[steering] be brief"),
    ]);
    llm.push(Reply::text("done"));
    p.complete(&req, None).await.unwrap();
    let body = &llm.requests()[0].body;
    let msgs = body["messages"].as_array().unwrap();
    assert_eq!(msgs.len(), 3, "roles alternate: {msgs:?}");
    assert_eq!(
        msgs[1]["content"][1],
        json!({"type": "tool_use", "id": "toolu_1", "name": "read_file", "input": {"path": "a"}})
    );
    assert_eq!(msgs[2]["role"], "user");
    assert_eq!(
        msgs[2]["content"][0],
        json!({"type": "tool_result", "tool_use_id": "toolu_1", "content": "file body"})
    );
    assert_eq!(msgs[2]["content"][1]["text"], "[steering] be brief");
}

#[tokio::test]
async fn errors_are_classified() {
    let llm = FakeLlm::start().await;
    let p = OpenAi::new(&llm.base_url(), None, Duration::from_secs(10)).unwrap();
    llm.push(Reply::context_overflow());
    assert!(matches!(
        p.complete(&request("m"), None).await,
        Err(LlmError::ContextOverflow)
    ));
    llm.push(Reply::rate_limited(7));
    match p.complete(&request("m"), None).await {
        Err(LlmError::RateLimited { retry_after }) => {
            assert_eq!(retry_after, Some(Duration::from_secs(7)))
        }
        other => panic!("{other:?}"),
    }
    let a = Anthropic::new(&llm.url(), Some("k".into()), Duration::from_secs(10)).unwrap();
    llm.push(Reply::overloaded());
    assert!(matches!(
        a.complete(&request("m"), None).await,
        Err(LlmError::Unavailable(_))
    ));
    llm.push(Reply::context_overflow());
    assert!(matches!(
        a.complete(&request("m"), None).await,
        Err(LlmError::ContextOverflow)
    ));
}

#[tokio::test]
async fn a_stream_that_ends_early_is_not_taken_for_the_answer() {
    let llm = FakeLlm::start().await;
    llm.set_stream_chunk_chars(4);
    let p = OpenAi::new(&llm.base_url(), None, Duration::from_secs(10)).unwrap();
    let a = Anthropic::new(&llm.url(), Some("k".into()), Duration::from_secs(10)).unwrap();
    for provider in [&p as &dyn LlmProvider, &a] {
        llm.push(Reply::text("a long answer cut short").with_early_end_after(3));
        let e = provider.complete(&request("m"), None).await.unwrap_err();
        assert!(e.is_retryable(), "{e:?}");
        // A whole stream still is.
        llm.push(Reply::text("a whole answer"));
        assert_eq!(
            provider.complete(&request("m"), None).await.unwrap().text,
            "a whole answer"
        );
    }
}

#[tokio::test]
async fn a_refusal_quoting_the_api_key_never_repeats_it() {
    let llm = FakeLlm::start().await;
    let key = "sk-proj-SECRET-4711";
    let refusal = json!({"error": {"message": format!("Incorrect API key provided: {key}"),
        "type": "invalid_request_error"}});
    let p = OpenAi::new(&llm.base_url(), Some(key.into()), Duration::from_secs(10)).unwrap();
    let a = Anthropic::new(&llm.url(), Some(key.into()), Duration::from_secs(10)).unwrap();
    for provider in [&p as &dyn LlmProvider, &a] {
        llm.push(Reply::error(401, refusal.clone()));
        let e = provider.complete(&request("m"), None).await.unwrap_err();
        let logged = e.to_string();
        assert!(
            logged.contains("HTTP 401") && logged.contains("Incorrect API key"),
            "{logged}"
        );
        assert!(!logged.contains(key), "{logged}");
        // What the user is told: the kind of failure and the status, not the provider's text.
        assert_eq!(
            e.brief(),
            "the model provider refused the request, HTTP 401"
        );
    }
}

type Sleeps = Arc<Mutex<Vec<Duration>>>;

fn recording_sleep() -> (switchboard::llm::resilient::SleepFn, Sleeps) {
    let sleeps: Sleeps = Arc::default();
    let s = sleeps.clone();
    (
        Arc::new(move |d| {
            s.lock().unwrap().push(d);
            Box::pin(async {})
        }),
        sleeps,
    )
}

#[tokio::test]
async fn retries_429_honouring_retry_after_then_backs_off_exponentially() {
    let llm = FakeLlm::start().await;
    let inner = Arc::new(OpenAi::new(&llm.base_url(), None, Duration::from_secs(10)).unwrap());
    let (sleep, sleeps) = recording_sleep();
    let p = Resilient::new(inner, vec![], 4).with_sleep(sleep);
    llm.push(Reply::rate_limited(7));
    llm.push(Reply::server_error());
    llm.push(Reply::overloaded());
    // A 5xx or 529 that says when to come back is heard too.
    llm.push(Reply::overloaded().with_retry_after(11));
    llm.push(Reply::text("finally"));
    let r = p.complete(&request("gpt-4o-mini"), None).await.unwrap();
    assert_eq!(r.text, "finally");
    assert_eq!(llm.request_count(), 5);
    let s = sleeps.lock().unwrap().clone();
    assert_eq!(s[0], Duration::from_secs(7), "Retry-After honoured");
    let (a, b) = (s[1].as_secs_f64(), s[2].as_secs_f64());
    assert!((3.2..=4.8).contains(&a), "2nd retry ≈ 4 s ±20 %: {a}");
    assert!((6.4..=9.6).contains(&b), "3rd retry ≈ 8 s ±20 %: {b}");
    assert_eq!(
        s[3],
        Duration::from_secs(11),
        "a 529's Retry-After honoured"
    );
}

#[tokio::test(start_paused = true)]
async fn backoff_runs_under_the_paused_clock() {
    let llm = FakeLlm::start().await;
    let inner = Arc::new(OpenAi::new(&llm.base_url(), None, Duration::from_secs(120)).unwrap());
    let p = Resilient::new(inner, vec![], 2);
    llm.push(Reply::rate_limited(30));
    llm.push(Reply::text("ok"));
    let start = tokio::time::Instant::now();
    let r = p.complete(&request("gpt-4o-mini"), None).await.unwrap();
    assert_eq!(r.text, "ok");
    let reqs = llm.requests();
    assert!(reqs[1].at - reqs[0].at >= Duration::from_secs(30));
    assert!(start.elapsed() < Duration::from_secs(60));
}

#[tokio::test]
async fn falls_back_after_repeated_500s_and_cools_the_failed_model_down() {
    let llm = FakeLlm::start().await;
    let inner = Arc::new(OpenAi::new(&llm.base_url(), None, Duration::from_secs(10)).unwrap());
    let (sleep, _sleeps) = recording_sleep();
    let p = Resilient::new(inner, vec!["backup-model".into()], 2).with_sleep(sleep);
    llm.fail_model("gpt-4o-mini", Reply::server_error());
    llm.set_default(Reply::text("from backup"));
    let r = p.complete(&request("gpt-4o-mini"), None).await.unwrap();
    assert_eq!(r.text, "from backup");
    let models: Vec<String> = llm.requests().iter().map(|r| r.model.clone()).collect();
    assert_eq!(
        models,
        ["gpt-4o-mini", "gpt-4o-mini", "gpt-4o-mini", "backup-model"]
    );

    // The failed model cools down: the next request goes straight to the fallback.
    llm.clear();
    let r = p.complete(&request("gpt-4o-mini"), None).await.unwrap();
    assert_eq!(r.text, "from backup");
    let models: Vec<String> = llm.requests().iter().map(|r| r.model.clone()).collect();
    assert_eq!(models, ["backup-model"]);
}

#[tokio::test]
async fn a_5xx_asking_to_come_back_in_an_hour_goes_to_the_fallback_at_once() {
    let llm = FakeLlm::start().await;
    let inner = Arc::new(OpenAi::new(&llm.base_url(), None, Duration::from_secs(10)).unwrap());
    let (sleep, sleeps) = recording_sleep();
    let p = Resilient::new(inner, vec!["backup-model".into()], 8).with_sleep(sleep);
    llm.fail_model("gpt-4o-mini", Reply::server_error().with_retry_after(3600));
    llm.set_default(Reply::text("from backup"));
    let r = p.complete(&request("gpt-4o-mini"), None).await.unwrap();
    assert_eq!(r.text, "from backup");
    let models: Vec<String> = llm.requests().iter().map(|r| r.model.clone()).collect();
    assert_eq!(models, ["gpt-4o-mini", "backup-model"]);
    assert!(sleeps.lock().unwrap().is_empty());
}

#[tokio::test]
async fn a_429_asking_to_come_back_in_an_hour_goes_to_the_fallback_or_fails_at_once() {
    let llm = FakeLlm::start().await;
    let inner = Arc::new(OpenAi::new(&llm.base_url(), None, Duration::from_secs(10)).unwrap());
    let (sleep, sleeps) = recording_sleep();
    let p = Resilient::new(inner.clone(), vec!["backup-model".into()], 8).with_sleep(sleep);
    llm.fail_model("gpt-4o-mini", Reply::rate_limited(3600));
    llm.set_default(Reply::text("from backup"));
    let r = p.complete(&request("gpt-4o-mini"), None).await.unwrap();
    assert_eq!(r.text, "from backup");
    let models: Vec<String> = llm.requests().iter().map(|r| r.model.clone()).collect();
    assert_eq!(models, ["gpt-4o-mini", "backup-model"]);
    assert!(sleeps.lock().unwrap().is_empty(), "{sleeps:?}");

    // With no fallback, the chat is told at once, in brief.
    llm.clear();
    let (sleep, sleeps) = recording_sleep();
    let alone = Resilient::new(inner, vec![], 8).with_sleep(sleep);
    let err = alone
        .complete(&request("gpt-4o-mini"), None)
        .await
        .unwrap_err();
    assert!(matches!(err, LlmError::RateLimited { .. }), "{err:?}");
    assert_eq!(err.brief(), "the model provider is rate limiting requests");
    assert_eq!(llm.request_count(), 1);
    assert!(sleeps.lock().unwrap().is_empty(), "{sleeps:?}");
}

#[tokio::test]
async fn gives_up_with_the_last_error_when_every_model_fails() {
    let llm = FakeLlm::start().await;
    let inner = Arc::new(OpenAi::new(&llm.base_url(), None, Duration::from_secs(10)).unwrap());
    let (sleep, _) = recording_sleep();
    let p = Resilient::new(inner, vec!["b".into()], 1).with_sleep(sleep);
    llm.set_default(Reply::server_error());
    let err = p.complete(&request("a"), None).await.unwrap_err();
    assert!(matches!(err, LlmError::Unavailable(_)), "{err:?}");
    assert_eq!(llm.request_count(), 4, "1 + 1 retry for each of two models");
}

#[tokio::test(start_paused = true)]
async fn an_idle_connection_is_reused_for_a_while_then_closed() {
    let llm = FakeLlm::start().await;
    let p = OpenAi::new(&llm.base_url(), None, Duration::from_secs(10)).unwrap();
    p.complete(&request("gpt-4o-mini"), None).await.unwrap();
    // Soon after: the same connection.
    tokio::time::sleep(Duration::from_secs(10)).await;
    p.complete(&request("gpt-4o-mini"), None).await.unwrap();
    // After a longer pause the gateway has closed it (before a provider's own keep-alive,
    // 60 s and more, would): a new connection.
    tokio::time::sleep(switchboard::llm::openai::POOL_IDLE + Duration::from_secs(1)).await;
    p.complete(&request("gpt-4o-mini"), None).await.unwrap();
    let peers: Vec<_> = llm.requests().iter().map(|r| r.peer).collect();
    assert_eq!(peers.len(), 3);
    assert_eq!(
        peers[0], peers[1],
        "a connection used 10 s before is reused"
    );
    assert_ne!(
        peers[1], peers[2],
        "a connection idle past POOL_IDLE is not"
    );
}

#[tokio::test]
async fn an_unreachable_provider_says_why() {
    // A port nothing listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let p = OpenAi::new(
        &format!("http://127.0.0.1:{port}/v1"),
        None,
        Duration::from_secs(10),
    )
    .unwrap();
    let e = p.complete(&request("m"), None).await.unwrap_err();
    assert!(e.is_retryable(), "{e:?}");
    // Not only reqwest's "error sending request": the cause an operator can act on.
    assert!(e.to_string().contains("Connection refused"), "{e}");
    assert!(!e.to_string().contains(&port.to_string()), "no URL: {e}");
}

/// A provider nothing answers at (a server that is down, a wrong `llm.base_url`): 5 retries
/// and no fallback model (they share its address), so the chat hears it in about a minute
/// rather than after the full backoff's 9 minutes; nor is the model cooled down, so once the
/// server is back it is asked first again.
/// The models a provider was asked for, in order, before it passes the request on.
struct Recording {
    inner: Arc<dyn LlmProvider>,
    asked: Mutex<Vec<String>>,
}

#[async_trait::async_trait]
impl LlmProvider for Recording {
    async fn complete(
        &self,
        req: &LlmRequest,
        on_delta: Option<DeltaSink>,
    ) -> Result<switchboard::llm::LlmResponse, LlmError> {
        self.asked.lock().unwrap().push(req.model.clone());
        self.inner.complete(req, on_delta).await
    }
}

#[tokio::test]
async fn an_unreachable_provider_gets_a_few_retries_and_no_fallback() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("http://127.0.0.1:{port}/v1");
    let inner = Arc::new(Recording {
        inner: Arc::new(OpenAi::new(&url, None, Duration::from_secs(10)).unwrap()),
        asked: Mutex::default(),
    });
    let (sleep, sleeps) = recording_sleep();
    let p = Resilient::new(inner.clone(), vec!["b".into(), "c".into()], 8).with_sleep(sleep);
    let err = p.complete(&request("a"), None).await.unwrap_err();
    assert!(matches!(err, LlmError::Unreachable(_)), "{err:?}");
    assert_eq!(err.brief(), "the model provider cannot be reached");
    let waits: Vec<f64> = sleeps
        .lock()
        .unwrap()
        .iter()
        .map(|d| d.as_secs_f64())
        .collect();
    assert_eq!(
        waits.len(),
        5,
        "5 retries of the first model only: {waits:?}"
    );
    assert!(waits.iter().sum::<f64>() < 75.0, "{waits:?}");
    // Not cooled down: the next request asks the same model first, not its fallback.
    let _ = p.complete(&request("a"), None).await;
    let asked = inner.asked.lock().unwrap().clone();
    assert_eq!(asked, vec!["a"; 12], "{asked:?}");
}
