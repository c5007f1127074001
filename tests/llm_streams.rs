//! Streamed Chat Completions as servers of the family really send them: reasoning in a
//! `<think>` block of the content, tool calls in LM Studio's and MiniMax's fragments,
//! Gemini's thought signatures, DeepSeek's `reasoning_content`.

mod agent_support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_support::*;
use serde_json::{Value, json};
use switchboard::llm::openai::OpenAi;
use switchboard::llm::{DeltaSink, LlmProvider, LlmRequest};
use switchboard_fakes::llm::{FakeLlm, Reply};

fn request(model: &str) -> LlmRequest {
    read_file_request(model, "what is in notes.md?")
}

fn openai(llm: &FakeLlm) -> OpenAi {
    OpenAi::new(&llm.base_url(), None, Duration::from_secs(10)).unwrap()
}

/// One `chat.completion.chunk` event with `delta` (and a finish reason).
fn chunk(delta: Value, finish: Option<&str>) -> String {
    let c = json!({"id": "c1", "object": "chat.completion.chunk", "model": "m",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
    format!("data: {c}\n\n")
}

/// A stream of `contents` as content deltas, then `stop` and `[DONE]`.
fn text_stream(contents: &[&str]) -> Reply {
    let mut events: Vec<String> = contents
        .iter()
        .map(|t| chunk(json!({"content": t}), None))
        .collect();
    events.push(chunk(json!({}), Some("stop")));
    events.push("data: [DONE]\n\n".into());
    Reply::sse_lines(events)
}

fn collecting_sink() -> (DeltaSink, Arc<Mutex<String>>) {
    let got = Arc::new(Mutex::new(String::new()));
    let g = got.clone();
    (Arc::new(move |t: &str| g.lock().unwrap().push_str(t)), got)
}

/// The answer's text, and what was streamed of it.
async fn answer(p: &OpenAi, llm: &FakeLlm, reply: Reply) -> (String, String) {
    llm.push(reply);
    let (sink, heard) = collecting_sink();
    let r = p.complete(&request("qwen3"), Some(sink)).await.unwrap();
    let heard = heard.lock().unwrap().clone();
    (r.text, heard)
}

#[tokio::test]
async fn a_leading_think_block_is_neither_shown_nor_kept() {
    let llm = FakeLlm::start().await;
    let p = openai(&llm);
    // vLLM without a reasoning parser, as the reviewer saw it.
    let said = answer(
        &p,
        &llm,
        text_stream(&[
            "<think>\nThe user says hi. Internal musing: do not reveal.\n",
            "</think>\n\n",
            "Hello there!",
        ]),
    )
    .await;
    assert_eq!(said, ("Hello there!".into(), "Hello there!".into()));
    // Its tags split across deltas, after leading whitespace.
    let said = answer(
        &p,
        &llm,
        text_stream(&[
            "\n", "<thi", "nk>sec", "ret</th", "ink", ">", "\n", "Hi", " you",
        ]),
    )
    .await;
    assert_eq!(said, ("Hi you".into(), "Hi you".into()));
    // Never closed: all of it was reasoning (cut off by max_tokens, or a server that
    // sends the answer elsewhere).
    let said = answer(&p, &llm, text_stream(&["<think>", "still thinking", "…"])).await;
    assert_eq!(said, (String::new(), String::new()));
    // A whole JSON answer too.
    let said = answer(
        &p,
        &llm,
        Reply::text("<think>hidden</think>Visible").ignoring_stream(),
    )
    .await;
    assert_eq!(said, ("Visible".into(), "Visible".into()));
}

#[tokio::test]
async fn think_tags_anywhere_but_at_the_start_are_ordinary_text() {
    let llm = FakeLlm::start().await;
    let p = openai(&llm);
    let text = "Wrap reasoning in <think>…</think> tags, like <think>this</think>.";
    let said = answer(
        &p,
        &llm,
        text_stream(&["Wrap reasoning in <th", &text[21..]]),
    )
    .await;
    assert_eq!(said, (text.into(), text.into()));
    // A start that looks like a tag for a while, and is not one.
    let said = answer(&p, &llm, text_stream(&["  <", "thi", "s> is <b>bold</b>"])).await;
    let text = "  <this> is <b>bold</b>";
    assert_eq!(said, (text.into(), text.into()));
    let said = answer(&p, &llm, text_stream(&["<thin"])).await;
    assert_eq!(said, ("<thin".into(), "<thin".into()));
}

#[tokio::test]
async fn a_turn_stores_and_sends_no_reasoning_from_a_think_block() {
    let h = Harness::new().await;
    h.llm.push(text_stream(&[
        "<think>\nThe user says hi. Internal musing: do not reveal.\n",
        "</think>\n\n",
        "Hello there!",
    ]));
    let out = turn(&h.agent(), &h.store, msg("t:1", "hi")).await;
    assert_eq!(out.replies[0].text, "Hello there!");
    turn(&h.agent(), &h.store, msg("t:2", "and again")).await;
    let sent = h.llm.requests()[1].body.to_string();
    assert!(sent.contains("Hello there!"), "{sent}");
    assert!(
        !sent.contains("musing") && !sent.contains("think>"),
        "{sent}"
    );
    let stored = stored_session(&h.store).to_string();
    assert!(!stored.contains("musing"), "{stored}");
}

/// A stream of `tool_calls` deltas (one fragment each), then `tool_calls` and `[DONE]`.
fn call_stream(fragments: Vec<Value>) -> Reply {
    let mut events: Vec<String> = fragments
        .into_iter()
        .map(|f| chunk(json!({"tool_calls": [f]}), None))
        .collect();
    events.push(chunk(json!({}), Some("tool_calls")));
    events.push("data: [DONE]\n\n".into());
    Reply::sse_lines(events)
}

/// Runs a turn whose first answer is `calls`, and returns the assistant message the
/// follow-up request sent back, and its tool results' call ids.
async fn sent_back(calls: Reply) -> (Value, Vec<String>) {
    let h = Harness::new().await;
    std::fs::write(h.workspace().join("notes.txt"), "milk, eggs").unwrap();
    h.llm.push(calls);
    h.llm.push(Reply::text("You need milk and eggs."));
    let out = turn(&h.agent(), &h.store, msg("t:1", "what is in notes.txt?")).await;
    assert_eq!(out.replies[0].text, "You need milk and eggs.");
    let sent = messages(&h.llm.requests()[1].body);
    let asked = sent
        .iter()
        .find(|m| m["role"] == "assistant")
        .unwrap()
        .clone();
    let answered = sent
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["tool_call_id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(tool_results(&h.llm.requests()[1].body), ["milk, eggs"]);
    (asked, answered)
}

#[tokio::test]
async fn lm_studios_argument_fragments_with_new_ids_continue_one_call() {
    // LM Studio (Gemma): the name comes first, then each argument fragment with an id of
    // its own and an empty name, all at index 0.
    let mut fragments = vec![json!({"index": 0, "id": "call_A", "type": "function",
        "function": {"name": "read_file", "arguments": ""}})];
    for (i, c) in r#"{"path": "notes.txt"}"#.chars().enumerate() {
        fragments.push(
            json!({"index": 0, "id": format!("call_x{i}"), "type": "function",
            "function": {"name": "", "arguments": c.to_string()}}),
        );
    }
    let (asked, answered) = sent_back(call_stream(fragments)).await;
    assert_eq!(
        asked["tool_calls"],
        json!([{"id": "call_A", "type": "function",
            "function": {"name": "read_file", "arguments": "{\"path\": \"notes.txt\"}"}}])
    );
    assert_eq!(answered, ["call_A"]);
}

#[tokio::test]
async fn a_name_sent_again_on_every_fragment_is_taken_once() {
    // MiniMax through NVIDIA NIM: the whole name on every fragment, the same id.
    let fragment = |args: &str| {
        json!({"index": 0, "id": "call_A", "type": "function",
            "function": {"name": "read_file", "arguments": args}})
    };
    let fragments = vec![
        fragment(""),
        fragment("{\"path\":"),
        fragment(" \"notes.txt\"}"),
    ];
    let (asked, answered) = sent_back(call_stream(fragments)).await;
    assert_eq!(asked["tool_calls"][0]["function"]["name"], "read_file");
    assert_eq!(
        asked["tool_calls"][0]["function"]["arguments"],
        "{\"path\": \"notes.txt\"}"
    );
    assert_eq!(asked["tool_calls"].as_array().unwrap().len(), 1);
    assert_eq!(answered, ["call_A"]);
}

/// Gemini 3 through its OpenAI-compatible endpoint: calls without an `index`, each with
/// its own id, the first with the thought signature the next request must carry back.
fn gemini_calls() -> Reply {
    let event = |v: Value| format!("data: {v}\n\n");
    Reply::sse_lines([
        event(
            json!({"choices": [{"delta": {"role": "assistant", "tool_calls": [{
            "extra_content": {"google": {"thought_signature": "SIG_AAA"}},
            "function": {"arguments": "{\"path\":\"notes.txt\"}", "name": "read_file"},
            "id": "function-call-1", "type": "function"}]}, "index": 0}],
            "object": "chat.completion.chunk"}),
        ),
        event(
            json!({"choices": [{"delta": {"role": "assistant", "tool_calls": [{
            "function": {"arguments": "{\"path\":\"notes.txt\"}", "name": "read_file"},
            "id": "function-call-2", "type": "function"}]}, "index": 0, "finish_reason": "stop"}],
            "object": "chat.completion.chunk"}),
        ),
        "data: [DONE]\n\n".to_string(),
    ])
}

#[tokio::test]
async fn geminis_thought_signatures_go_back_with_their_calls_in_this_turn_and_later_ones() {
    let h = Harness::new().await;
    std::fs::write(h.workspace().join("notes.txt"), "milk").unwrap();
    h.llm.push(gemini_calls());
    h.llm.push(Reply::text("Milk."));
    let out = turn(&h.agent(), &h.store, msg("t:1", "what is in notes.txt?")).await;
    assert_eq!(out.replies[0].text, "Milk.");
    h.llm.push(Reply::text("Still milk."));
    turn(&h.agent(), &h.store, msg("t:2", "and now?")).await;
    let signature = json!({"google": {"thought_signature": "SIG_AAA"}});
    let requests = h.llm.requests();
    // The follow-up in the turn, and the next turn's request from the stored session.
    for request in &requests[1..] {
        let sent = messages(&request.body);
        let asked = sent.iter().find(|m| m["role"] == "assistant").unwrap();
        let calls = asked["tool_calls"].as_array().unwrap();
        assert_eq!(calls.len(), 2, "{asked}");
        assert_eq!(calls[0]["id"], "function-call-1");
        assert_eq!(calls[0]["extra_content"], signature, "{asked}");
        assert!(calls[1].get("extra_content").is_none(), "{asked}");
    }
    assert_eq!(
        messages(&requests[2].body).last().unwrap()["content"],
        "and now?"
    );
}

#[tokio::test]
async fn deepseeks_reasoning_goes_back_within_its_turn_only_and_is_never_shown_or_stored() {
    let h = Harness::new().await;
    std::fs::write(h.workspace().join("notes.txt"), "milk").unwrap();
    let calls = Reply::sse_lines([
        chunk(
            json!({"role": "assistant", "content": null, "reasoning_content": "I should read the file."}),
            None,
        ),
        chunk(json!({"reasoning_content": " Use read_file."}), None),
        chunk(
            json!({"tool_calls": [{"index": 0, "id": "call_00_x", "type": "function",
                "function": {"name": "read_file", "arguments": ""}}]}),
            None,
        ),
        chunk(
            json!({"tool_calls": [{"index": 0, "function": {"arguments": "{\"path\":\"notes.txt\"}"}}]}),
            None,
        ),
        chunk(json!({}), Some("tool_calls")),
        "data: [DONE]\n\n".to_string(),
    ]);
    h.llm.push(calls);
    h.llm.push(Reply::text("Milk."));
    let out = turn(&h.agent(), &h.store, msg("t:1", "what is in notes.txt?")).await;
    assert_eq!(out.replies[0].text, "Milk.");
    let sent = messages(&h.llm.requests()[1].body);
    let asked = sent.iter().find(|m| m["role"] == "assistant").unwrap();
    assert_eq!(
        asked["reasoning_content"], "I should read the file. Use read_file.",
        "{asked}"
    );
    assert_eq!(asked["tool_calls"][0]["id"], "call_00_x");
    let stored = stored_session(&h.store).to_string();
    assert!(!stored.contains("should read"), "{stored}");
    // A later turn sends the earlier turn's messages without it.
    h.llm.push(Reply::text("Still milk."));
    turn(&h.agent(), &h.store, msg("t:2", "and now?")).await;
    let later = h.llm.requests()[2].body.to_string();
    assert!(later.contains("call_00_x"), "{later}");
    assert!(!later.contains("reasoning_content"), "{later}");
    // Streamed, only the answer is heard.
    let thinking = Reply::sse_lines([
        chunk(json!({"reasoning_content": "Let me think."}), None),
        chunk(json!({"content": "Hi"}), Some("stop")),
        "data: [DONE]\n\n".to_string(),
    ]);
    let said = answer(&openai(&h.llm), &h.llm, thinking).await;
    assert_eq!(said, ("Hi".into(), "Hi".into()));
}
