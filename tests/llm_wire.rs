//! The providers against what real servers do on the wire: Ollama's parallel tool calls,
//! OpenAI's quota refusals and reasoning models' `max_completion_tokens`, strict chat
//! templates that take one system message only, slow but steady streams, and answers cut
//! off by `max_tokens`.

mod agent_support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_support::*;
use serde_json::{Value, json};
use switchboard::llm::anthropic::Anthropic;
use switchboard::llm::openai::OpenAi;
use switchboard::llm::resilient::Resilient;
use switchboard::llm::{ChatMessage, LlmError, LlmProvider, LlmRequest, Role};
use switchboard_channel::{Origin, SystemOrigin};
use switchboard_fakes::llm::{FakeLlm, Reply};

fn request(model: &str) -> LlmRequest {
    read_file_request(model, "what is in a.md and b.md?")
}

fn openai(llm: &FakeLlm, limit: Duration) -> OpenAi {
    OpenAi::new(&llm.base_url(), Some("sk-test".into()), limit).unwrap()
}

const SECS_10: Duration = Duration::from_secs(10);

#[tokio::test]
async fn ollama_parallel_tool_calls_at_one_index_stay_apart() {
    let llm = FakeLlm::start().await;
    let p = openai(&llm, SECS_10);
    llm.push(
        Reply::text("Reading both.")
            .with_tool_call("read_file", json!({"path": "a.md"}))
            .with_tool_call("read_file", json!({"path": "b.md"}))
            .with_ollama_tool_calls(),
    );
    let r = p.complete(&request("qwen3"), None).await.unwrap();
    assert_eq!(r.text, "Reading both.");
    let calls: Vec<(&str, Value)> = r
        .tool_calls
        .iter()
        .map(|c| {
            let args = serde_json::from_str(&c.arguments);
            (
                c.name.as_str(),
                args.unwrap_or(Value::from(c.arguments.as_str())),
            )
        })
        .collect();
    assert_eq!(
        calls,
        [
            ("read_file", json!({"path": "a.md"})),
            ("read_file", json!({"path": "b.md"}))
        ]
    );
    assert_ne!(r.tool_calls[0].id, r.tool_calls[1].id);
}

/// What OpenAI answers an account without quota: a 429 that waiting does not cure.
fn insufficient_quota() -> Reply {
    Reply::error(
        429,
        json!({"error": {"message": "You exceeded your current quota, please check your plan and \
            billing details. For more information on this error, read the docs: \
            https://platform.openai.com/docs/guides/error-codes/api-errors.",
            "type": "insufficient_quota", "param": null, "code": "insufficient_quota"}}),
    )
}

#[tokio::test]
async fn a_used_up_quota_is_not_retried_and_the_owner_is_told_to_check_billing() {
    let llm = FakeLlm::start().await;
    let sleeps = Arc::new(Mutex::new(Vec::new()));
    let s = sleeps.clone();
    let p =
        Resilient::new(Arc::new(openai(&llm, SECS_10)), vec![], 8).with_sleep(Arc::new(move |d| {
            s.lock().unwrap().push(d);
            Box::pin(async {})
        }));
    llm.push(insufficient_quota());
    let e = p.complete(&request("gpt-4o-mini"), None).await.unwrap_err();
    assert!(
        matches!(e, LlmError::QuotaExhausted { status: 429, .. }),
        "{e:?}"
    );
    assert!(!e.is_retryable());
    assert_eq!(llm.request_count(), 1, "no retry");
    assert!(sleeps.lock().unwrap().is_empty());
    // The log keeps the provider's words; the user gets the kind and what to do.
    assert!(
        e.to_string().contains("You exceeded your current quota"),
        "{e}"
    );
    assert!(
        e.brief().contains("no quota or credit left"),
        "{}",
        e.brief()
    );
    assert!(e.advice().contains("billing"), "{}", e.advice());
    assert!(!e.brief().contains("exceeded") && !e.advice().contains("exceeded"));

    // Its kin: OpenAI's hard billing limit, Anthropic's empty credit balance.
    llm.push(Reply::error(
        400,
        json!({"error": {"message": "Billing hard limit has been reached",
            "type": "invalid_request_error", "param": null, "code": "billing_hard_limit_reached"}}),
    ));
    let e = openai(&llm, SECS_10)
        .complete(&request("gpt-4o-mini"), None)
        .await
        .unwrap_err();
    assert!(matches!(e, LlmError::QuotaExhausted { .. }), "{e:?}");
    llm.push(Reply::error(
        400,
        json!({"type": "error", "error": {"type": "invalid_request_error",
            "message": "Your credit balance is too low to access the Anthropic API. Please go \
                        to Plans & Billing to upgrade or purchase credits."}}),
    ));
    let a = Anthropic::new(&llm.url(), Some("k".into()), SECS_10).unwrap();
    let e = a.complete(&request("claude"), None).await.unwrap_err();
    assert!(matches!(e, LlmError::QuotaExhausted { .. }), "{e:?}");
    // A passing rate limit is still waited out.
    llm.push(Reply::rate_limited(3));
    let e = openai(&llm, SECS_10)
        .complete(&request("gpt-4o-mini"), None)
        .await
        .unwrap_err();
    assert!(e.is_retryable(), "{e:?}");
}

#[tokio::test]
async fn the_chat_is_told_when_the_quota_is_used_up() {
    let h = Harness::new().await;
    h.llm.push(insufficient_quota());
    let out = turn(&h.agent(), &h.store, msg("t:1", "hello")).await;
    let text = &out.replies[0].text;
    assert!(text.contains("no quota or credit left"), "{text}");
    assert!(text.contains("check the billing"), "{text}");
    assert!(!text.contains("You exceeded"), "{text}");
    assert_eq!(h.llm.request_count(), 1);
}

#[tokio::test]
async fn a_model_that_refuses_max_tokens_gets_max_completion_tokens_from_then_on() {
    let llm = FakeLlm::start().await;
    llm.refuse_max_tokens("o3-mini");
    let p = openai(&llm, SECS_10);
    llm.push(Reply::text("thought it through"));
    let r = p.complete(&request("o3-mini"), None).await.unwrap();
    assert_eq!(r.text, "thought it through");
    let sent: Vec<Value> = llm.requests().into_iter().map(|r| r.body).collect();
    assert_eq!(sent.len(), 2, "refused once, then sent again");
    assert_eq!(sent[0]["max_tokens"], 512);
    assert_eq!(sent[1]["max_completion_tokens"], 512);
    assert!(sent[1].get("max_tokens").is_none(), "{}", sent[1]);

    // Remembered: the next request asks the right way at once.
    llm.clear();
    p.complete(&request("o3-mini"), None).await.unwrap();
    let sent = llm.requests();
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].body["max_completion_tokens"], 512);
    // Other models (and other servers: Ollama, vLLM, llama.cpp) still get `max_tokens`.
    llm.clear();
    p.complete(&request("qwen3"), None).await.unwrap();
    let sent = llm.requests();
    assert_eq!(sent[0].body["max_tokens"], 512);
    assert!(sent[0].body.get("max_completion_tokens").is_none());
}

#[tokio::test]
async fn steering_rides_in_the_one_system_message_after_the_stable_prefix() {
    let llm = FakeLlm::start().await;
    let p = openai(&llm, SECS_10);
    let mut req = request("qwen3");
    req.messages = vec![
        ChatMessage::new(Role::User, "earlier"),
        ChatMessage::new(Role::Assistant, "noted"),
        ChatMessage::new(Role::System, "Telegram: keep replies short."),
        ChatMessage::new(Role::System, "This is your last step."),
        ChatMessage::new(Role::User, "now?"),
    ];
    p.complete(&req, None).await.unwrap();
    let body = &llm.requests()[0].body;
    let sent: Vec<(&str, &str)> = body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| (m["role"].as_str().unwrap(), m["content"].as_str().unwrap()))
        .collect();
    assert_eq!(
        sent,
        [
            (
                "system",
                "You are Switchboard.\n\nCurrent time: 12:00.\n\n\
                 Telegram: keep replies short.\n\nThis is your last step."
            ),
            ("user", "earlier"),
            ("assistant", "noted"),
            ("user", "now?"),
        ]
    );
}

#[tokio::test]
async fn a_turn_sends_one_system_message_and_stores_no_steering() {
    let h = Harness::new().await;
    h.llm
        .push(Reply::tool_call("list_dir", json!({"path": "."})));
    h.llm.push(Reply::text("Time to stretch!"));
    let mut m = msg("t:1", "remind me to stretch");
    m.origin = Origin::System(SystemOrigin::Cron {
        job_id: "job-7".into(),
    });
    let out = turn(&h.agent(), &h.store, m).await;
    assert_eq!(out.replies[0].text, "Time to stretch!");
    for request in h.llm.requests() {
        let sent = messages(&request.body);
        let roles: Vec<&str> = sent.iter().map(|m| m["role"].as_str().unwrap()).collect();
        assert_eq!(
            roles.iter().filter(|r| **r == "system").count(),
            1,
            "{roles:?}"
        );
        assert_eq!(roles[0], "system");
        let system = sent[0]["content"].as_str().unwrap();
        assert!(system.starts_with("You are Switchboard"), "{system}");
        assert!(system.contains("scheduled reminder you set earlier (job job-7)"));
    }
    let stored = stored_session(&h.store).to_string();
    assert!(!stored.contains("scheduled reminder you set"), "{stored}");
}

#[tokio::test(start_paused = true)]
async fn a_slow_steady_stream_outlasts_the_request_timeout_but_a_stall_does_not() {
    let llm = FakeLlm::start().await;
    llm.set_stream_chunk_chars(2);
    let limit = Duration::from_secs(10);
    let p = openai(&llm, limit);
    let a = Anthropic::new(&llm.url(), Some("k".into()), limit).unwrap();
    let slow = "a long answer, a few words every few seconds";
    for provider in [&p as &dyn LlmProvider, &a] {
        // A piece every 4 s, for well over the limit: a healthy stream.
        llm.push(Reply::text(slow).with_chunk_delay(Duration::from_secs(4)));
        let start = tokio::time::Instant::now();
        let r = provider.complete(&request("m"), None).await.unwrap();
        assert_eq!(r.text, slow);
        assert!(start.elapsed() > 4 * limit, "{:?}", start.elapsed());

        // Headers after 8 s: within the limit.
        llm.push(Reply::text("thinking done").with_delay(Duration::from_secs(8)));
        let r = provider.complete(&request("m"), None).await.unwrap();
        assert_eq!(r.text, "thinking done");

        // A stream that goes silent for longer than the limit has stalled.
        llm.push(Reply::text("stalls").with_chunk_delay(Duration::from_secs(15)));
        let start = tokio::time::Instant::now();
        let e = provider.complete(&request("m"), None).await.unwrap_err();
        assert!(e.is_retryable(), "{e:?}");
        assert!(e.to_string().contains("stalled"), "{e}");
        let waited = start.elapsed();
        assert!(
            waited >= limit && waited < limit + Duration::from_secs(1),
            "{waited:?}"
        );

        // As do headers that never come.
        llm.push(Reply::text("late").with_delay(Duration::from_secs(60)));
        let e = provider.complete(&request("m"), None).await.unwrap_err();
        assert!(e.is_retryable(), "{e:?}");
    }
}

#[tokio::test]
async fn anthropic_says_when_max_tokens_cut_a_call_and_takes_its_text_back() {
    let llm = FakeLlm::start().await;
    let p = Anthropic::new(&llm.url(), Some("k".into()), SECS_10).unwrap();
    let cut = r#"{"path":"story.md","content":"Once upon a"#;
    llm.push(Reply::calls([switchboard_fakes::llm::ToolCall::raw("write_file", cut)]).truncated());
    let r = p
        .complete(&request("claude-sonnet-4-5"), None)
        .await
        .unwrap();
    assert_eq!(r.finish_reason, "max_tokens");
    assert!(r.cut_off());
    assert_eq!(r.tool_calls[0].arguments, cut);

    let mut req = request("claude-sonnet-4-5");
    let mut call = ChatMessage::new(Role::Assistant, "");
    call.tool_calls = r.tool_calls.clone();
    let mut result = ChatMessage::new(Role::Tool, "error: cut off");
    result.tool_call_id = Some(r.tool_calls[0].id.clone());
    req.messages.extend([call, result]);
    llm.push(Reply::text("in parts, then"));
    p.complete(&req, None).await.unwrap();
    let sent = &llm.requests()[1].body["messages"][1]["content"][0];
    assert_eq!(sent["type"], "tool_use");
    assert_eq!(sent["input"], json!({"unparsed_arguments": cut}));
}

#[tokio::test]
async fn a_request_that_must_be_answered_calls_no_tool_on_either_api() {
    let llm = FakeLlm::start().await;
    let mut req = request("m");
    req.answer_only = true;
    openai(&llm, SECS_10).complete(&req, None).await.unwrap();
    let body = &llm.requests()[0].body;
    assert!(body.get("tools").is_none(), "{body}");
    // Anthropic refuses tool_use blocks in the history without the tools described.
    let anthropic = Anthropic::new(&llm.url(), Some("k".into()), SECS_10).unwrap();
    anthropic.complete(&req, None).await.unwrap();
    let body = &llm.requests()[1].body;
    assert_eq!(body["tools"][0]["name"], "read_file");
    assert_eq!(body["tool_choice"], json!({"type": "none"}));
    req.answer_only = false;
    anthropic.complete(&req, None).await.unwrap();
    assert!(llm.requests()[2].body.get("tool_choice").is_none());
}

#[tokio::test]
async fn a_whole_json_answer_to_a_streamed_request_is_read_as_the_answer() {
    let llm = FakeLlm::start().await;
    let p = Resilient::new(Arc::new(openai(&llm, SECS_10)), Vec::new(), 2);
    llm.push(
        Reply::text("Let me look.")
            .with_tool_call("read_file", json!({"path": "a.md"}))
            .with_usage(30, 12)
            .ignoring_stream(),
    );
    let heard = Arc::new(Mutex::new(String::new()));
    let sink = {
        let heard = heard.clone();
        Arc::new(move |d: &str| heard.lock().unwrap().push_str(d)) as switchboard::llm::DeltaSink
    };
    let r = p.complete(&request("m"), Some(sink)).await.unwrap();
    assert_eq!(llm.request_count(), 1, "not retried");
    assert!(llm.requests()[0].body["stream"] == true);
    assert_eq!(r.text, "Let me look.");
    assert_eq!(*heard.lock().unwrap(), "Let me look.");
    assert_eq!(r.finish_reason, "tool_calls");
    assert_eq!(r.tool_calls.len(), 1);
    assert_eq!(r.tool_calls[0].name, "read_file");
    let args: Value = serde_json::from_str(&r.tool_calls[0].arguments).unwrap();
    assert_eq!(args, json!({"path": "a.md"}));
    assert_eq!((r.usage.prompt_tokens, r.usage.completion_tokens), (30, 12));
}

#[tokio::test]
async fn two_user_messages_in_a_row_go_to_an_openai_server_as_one() {
    // A history stored before a /stop was answered in it: the stopped message, then the
    // next, with the turn's steering between them.
    let llm = FakeLlm::start().await;
    let mut req = request("qwen3");
    req.messages = vec![
        ChatMessage::new(Role::User, "write a poem"),
        ChatMessage::new(Role::System, "Telegram: keep replies short."),
        ChatMessage::new(Role::User, "a short one"),
    ];
    openai(&llm, SECS_10).complete(&req, None).await.unwrap();
    let sent = messages(&llm.requests()[0].body);
    let roles: Vec<&str> = sent.iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert_eq!(roles, ["system", "user"], "{sent:?}");
    assert_eq!(sent[1]["content"], "write a poem\n\na short one");
}
