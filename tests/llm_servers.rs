//! The OpenAI-compatible provider (and Anthropic's) against what other servers of the
//! family answer on the wire: Mistral's refusals, llama.cpp's context overflow in its
//! three shapes, and errors that come inside a stream.

mod agent_support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_support::read_file_request;
use serde_json::{Value, json};
use switchboard::llm::openai::OpenAi;
use switchboard::llm::resilient::{Resilient, SleepFn};
use switchboard::llm::{LlmError, LlmProvider, LlmRequest};
use switchboard_fakes::llm::{FakeLlm, Reply};

const SECS_10: Duration = Duration::from_secs(10);

fn request(model: &str) -> LlmRequest {
    read_file_request(model, "what is in notes.md?")
}

fn openai(llm: &FakeLlm) -> OpenAi {
    OpenAi::new(&llm.base_url(), Some("sk-test".into()), SECS_10).unwrap()
}

type Sleeps = Arc<Mutex<Vec<Duration>>>;

/// `e` is the server's refusal, with its 400.
fn assert_refused_400(e: &LlmError) {
    assert!(
        matches!(
            e,
            LlmError::Refused {
                status: Some(400),
                ..
            }
        ),
        "{e:?}"
    );
}

/// `OpenAi` wrapped in retries whose waits are recorded, not slept.
fn resilient(llm: &FakeLlm) -> (Resilient, Sleeps) {
    let sleeps: Sleeps = Arc::default();
    let s = sleeps.clone();
    let sleep: SleepFn = Arc::new(move |d| {
        s.lock().unwrap().push(d);
        Box::pin(async {})
    });
    let p = Resilient::new(Arc::new(openai(llm)), Vec::new(), 8).with_sleep(sleep);
    (p, sleeps)
}

#[tokio::test]
async fn a_server_that_forbids_stream_options_is_asked_again_without_them_at_once() {
    let llm = FakeLlm::start().await;
    llm.refuse_stream_options("mistral-large-latest");
    let (p, sleeps) = resilient(&llm);
    llm.push(Reply::text("Bonjour"));
    let r = p
        .complete(&request("mistral-large-latest"), None)
        .await
        .unwrap();
    assert_eq!(r.text, "Bonjour");
    let sent: Vec<Value> = llm.requests().into_iter().map(|r| r.body).collect();
    assert_eq!(sent.len(), 2, "refused once, then sent again");
    assert_eq!(sent[0]["stream_options"], json!({"include_usage": true}));
    assert!(sent[1].get("stream_options").is_none(), "{}", sent[1]);
    assert_eq!(sent[1]["stream"], true);
    assert!(sleeps.lock().unwrap().is_empty(), "not a failure: no wait");

    // Learnt for the model: asked the right way from then on; other models unchanged.
    llm.clear();
    p.complete(&request("mistral-large-latest"), None)
        .await
        .unwrap();
    p.complete(&request("gpt-4o-mini"), None).await.unwrap();
    let sent: Vec<Value> = llm.requests().into_iter().map(|r| r.body).collect();
    assert_eq!(sent.len(), 2);
    assert!(sent[0].get("stream_options").is_none(), "{}", sent[0]);
    assert_eq!(sent[1]["stream_options"], json!({"include_usage": true}));

    // A 400 naming it (older Azure, other proxies) is learnt the same way; a 400 that
    // does not name it is still a refusal.
    llm.clear();
    llm.push(Reply::error(
        400,
        json!({"error": {"message": "Unrecognized request argument supplied: stream_options",
            "type": "invalid_request_error", "param": null, "code": null}}),
    ));
    p.complete(&request("azure-gpt"), None).await.unwrap();
    let sent = llm.requests();
    assert_eq!(sent.len(), 2);
    assert!(sent[1].body.get("stream_options").is_none());
    llm.push(Reply::error(
        400,
        json!({"error": {"message": "Invalid model", "type": "invalid_request_error"}}),
    ));
    let e = p.complete(&request("other"), None).await.unwrap_err();
    assert_refused_400(&e);
}

/// What llama.cpp's server answers a prompt larger than its context, by version: a 400
/// or a 500 with `exceed_context_size_error`, or (older builds) an SSE `error:` field in
/// a 200 stream, then `[DONE]`.
fn llama_cpp_overflows() -> Vec<Reply> {
    vec![
        Reply::error(
            400,
            json!({"error": {"code": 400, "message": "request (4390 tokens) exceeds the available context size (4096 tokens), try increasing it",
                "type": "exceed_context_size_error", "n_prompt_tokens": 4390, "n_ctx": 4096}}),
        ),
        Reply::error(
            500,
            json!({"error": {"code": 500, "message": "the request exceeds the available context size. try increasing the context size or enable context shift",
                "type": "exceed_context_size_error", "n_prompt_tokens": 1407, "n_ctx": 256}}),
        ),
        Reply::sse_lines([
            "error: {\"code\":400,\"message\":\"the request exceeds the available context size. try increasing the context size or enable context shift\",\"type\":\"invalid_request_error\"}\n\n",
            "data: [DONE]\n\n",
        ]),
    ]
}

#[tokio::test]
async fn llama_cpp_context_overflow_is_known_in_all_its_shapes() {
    let llm = FakeLlm::start().await;
    let (p, sleeps) = resilient(&llm);
    for reply in llama_cpp_overflows() {
        llm.clear();
        llm.push(reply);
        llm.push(Reply::text("not asked"));
        let e = p.complete(&request("qwen3"), None).await.unwrap_err();
        assert!(matches!(e, LlmError::ContextOverflow), "{e:?}");
        assert_eq!(llm.request_count(), 1, "not retried as it stands");
        llm.reset();
    }
    assert!(sleeps.lock().unwrap().is_empty());
}

#[tokio::test]
async fn an_sse_error_field_is_an_error_not_an_empty_answer() {
    let llm = FakeLlm::start().await;
    llm.push(Reply::sse_lines([
        "error: {\"code\":500,\"message\":\"slot unavailable\",\"type\":\"server_error\"}\n\n",
        "data: [DONE]\n\n",
    ]));
    let e = openai(&llm)
        .complete(&request("qwen3"), None)
        .await
        .unwrap_err();
    assert!(e.is_retryable(), "{e:?}");
    assert!(e.to_string().contains("slot unavailable"), "{e}");
}

#[tokio::test]
async fn anthropics_input_plus_max_tokens_over_the_limit_is_a_context_overflow() {
    let llm = FakeLlm::start().await;
    let a =
        switchboard::llm::anthropic::Anthropic::new(&llm.url(), Some("k".into()), SECS_10).unwrap();
    llm.push(Reply::error(
        400,
        json!({"type": "error", "error": {"type": "invalid_request_error",
            "message": "input length and `max_tokens` exceed context limit: 199759 + 8192 > 200000, decrease input length or `max_tokens` and try again"}}),
    ));
    let e = a.complete(&request("claude"), None).await.unwrap_err();
    assert!(matches!(e, LlmError::ContextOverflow), "{e:?}");
}

#[tokio::test]
async fn a_llama_cpp_overflow_in_a_turn_compacts_the_session_and_retries_once() {
    for overflow in llama_cpp_overflows() {
        let h = agent_support::Harness::new().await;
        let agent = h.agent();
        for i in 0..2 {
            let m = agent_support::msg(&format!("t:{i}"), &format!("message number {i}"));
            agent_support::turn(&agent, &h.store, m).await;
        }
        h.llm.clear();
        h.llm.push(overflow);
        h.llm.push(Reply::text("after compaction"));
        let out = agent_support::turn(&agent, &h.store, agent_support::msg("t:x", "now?")).await;
        assert_eq!(out.replies[0].text, "after compaction");
        let reqs = h.llm.requests();
        assert_eq!(reqs.len(), 2, "one retry, not the backoff's");
        let retry = agent_support::messages(&reqs[1].body);
        assert_eq!(retry.iter().filter(|m| m["role"] == "user").count(), 1);
        let system = retry[0]["content"].as_str().unwrap();
        assert!(system.contains("message number 1"), "{system}");
    }
}

#[tokio::test]
async fn a_user_message_never_follows_a_tool_result_on_the_wire() {
    // A turn whose tools ran, then failed (or was stopped): its history ends in a tool
    // result, and the next turn's message comes right after it. Mistral refuses that.
    let h = agent_support::Harness::new().await;
    h.llm.strict_role_order();
    let agent = h.agent();
    h.llm
        .push(Reply::tool_call("list_dir", json!({"path": "."})));
    h.llm.push(Reply::error(
        400,
        json!({"object": "error", "message": "some transient refusal", "type": "invalid_request_error"}),
    ));
    agent_support::turn(&agent, &h.store, agent_support::msg("t:1", "look around")).await;
    h.llm.clear();
    h.llm.push(Reply::text("Here you are."));
    let out = agent_support::turn(&agent, &h.store, agent_support::msg("t:2", "well?")).await;
    assert_eq!(out.replies[0].text, "Here you are.");
    let sent = agent_support::messages(&h.llm.requests()[0].body);
    let roles: Vec<&str> = sent.iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert_eq!(
        roles,
        ["system", "user", "assistant", "tool", "assistant", "user"]
    );
    assert_eq!(sent[4]["content"], "(no answer)");
    assert_eq!(sent[5]["content"], "well?");
}

#[tokio::test]
async fn an_error_inside_a_stream_keeps_the_status_its_code_gives() {
    let llm = FakeLlm::start().await;
    let (p, sleeps) = resilient(&llm);
    let error_stream = |error: Value| {
        Reply::sse_lines([
            ": OPENROUTER PROCESSING\n\n".to_string(),
            format!(
                "data: {}\n\n",
                json!({"id": "c1", "object": "chat.completion.chunk",
                "error": error,
                "choices": [{"index": 0, "delta": {"content": ""}, "finish_reason": "error"}]})
            ),
        ])
    };
    // A request the upstream refused: not retried for minutes.
    llm.push(error_stream(
        json!({"code": 400, "message": "Invalid schema for function 'read_file'"}),
    ));
    let e = p.complete(&request("m"), None).await.unwrap_err();
    assert_refused_400(&e);
    assert_eq!(llm.request_count(), 1);
    // Nor is llama.cpp's SSE `error:` field with its code.
    llm.clear();
    llm.push(Reply::sse_lines([
        "error: {\"code\":400,\"message\":\"invalid grammar\",\"type\":\"invalid_request_error\"}\n\n",
        "data: [DONE]\n\n",
    ]));
    let e = p.complete(&request("m"), None).await.unwrap_err();
    assert_refused_400(&e);
    assert_eq!(llm.request_count(), 1);
    assert!(sleeps.lock().unwrap().is_empty(), "{sleeps:?}");
    // A rate limit is waited out; a provider that dropped (502), or an error without a
    // number, is retried as before.
    for error in [
        json!({"code": 429, "message": "Rate limit exceeded"}),
        json!({"code": 502, "message": "Provider disconnected unexpectedly"}),
        json!({"code": "server_error", "message": "oops"}),
    ] {
        llm.clear();
        llm.push(error_stream(error));
        llm.push(Reply::text("recovered"));
        assert_eq!(
            p.complete(&request("m"), None).await.unwrap().text,
            "recovered"
        );
        assert_eq!(llm.request_count(), 2);
    }
}

/// A history holding what Gemini attached to a tool call (`extra_content`), sent after a
/// change to a model whose server forbids fields it does not know: learnt like
/// `stream_options`, and asked again at once without it.
#[tokio::test]
async fn a_server_that_forbids_extra_content_is_asked_again_without_it() {
    use switchboard::llm::{ChatMessage, Role, ToolCall};
    let llm = FakeLlm::start().await;
    let (p, sleeps) = resilient(&llm);
    let mut req = request("mistral-large-latest");
    let mut call = ChatMessage::new(Role::Assistant, "");
    call.tool_calls.push(ToolCall {
        id: "c1".into(),
        name: "read_file".into(),
        arguments: r#"{"path":"notes.md"}"#.into(),
        extra_content: Some(json!({"google": {"thought_signature": "sig"}})),
    });
    let mut result = ChatMessage::new(Role::Tool, "hello");
    result.tool_call_id = Some("c1".into());
    req.messages
        .extend([call, result, ChatMessage::new(Role::User, "and?")]);
    llm.push(Reply::error(
        422,
        json!({"detail": [{"type": "extra_forbidden",
            "loc": ["body", "messages", 1, "tool_calls", 0, "extra_content"],
            "msg": "Extra inputs are not permitted"}]}),
    ));
    llm.push(Reply::text("done"));
    assert_eq!(p.complete(&req, None).await.unwrap().text, "done");
    let sent: Vec<Value> = llm.requests().into_iter().map(|r| r.body).collect();
    assert_eq!(sent.len(), 2);
    let first_call = |b: &Value| b["messages"][2]["tool_calls"][0].clone();
    assert_eq!(
        first_call(&sent[0])["extra_content"]["google"]["thought_signature"],
        "sig"
    );
    assert!(
        first_call(&sent[1]).get("extra_content").is_none(),
        "{}",
        sent[1]
    );
    assert!(sleeps.lock().unwrap().is_empty(), "not a failure: no wait");
}
