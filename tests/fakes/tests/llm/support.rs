//! Helpers: request bodies, posting, SSE parsing and reassembly for both providers.

use std::time::Duration;

use serde_json::{Value, json};
use switchboard_fakes::llm::FakeLlm;

pub const WAIT: Duration = Duration::from_secs(5);

pub fn openai_body(model: &str, user: &str, stream: bool) -> Value {
    json!({
        "model": model,
        "stream": stream,
        "messages": [
            {"role": "system", "content": "You are a test."},
            {"role": "user", "content": user},
        ],
    })
}

pub async fn post(url: String, body: &Value) -> reqwest::Response {
    reqwest::Client::new()
        .post(url)
        .bearer_auth("sk-test")
        .json(body)
        .send()
        .await
        .expect("request to the fake")
}

pub async fn openai(llm: &FakeLlm, body: &Value) -> reqwest::Response {
    post(format!("{}/chat/completions", llm.base_url()), body).await
}

/// The JSON payloads of an OpenAI SSE body; asserts it ends with `data: [DONE]`.
pub fn openai_events(body: &str) -> Vec<Value> {
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
pub struct Assembled {
    pub text: String,
    pub calls: Vec<(String, String, String)>,
    pub finish: String,
    pub content_deltas: usize,
}

pub fn assemble_openai(chunks: &[Value]) -> Assembled {
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

pub fn anthropic_body(user: &str, stream: bool) -> Value {
    json!({
        "model": "claude-test",
        "max_tokens": 1024,
        "stream": stream,
        "system": "You are a test.",
        "messages": [{"role": "user", "content": user}],
    })
}

pub async fn anthropic(llm: &FakeLlm, body: &Value) -> reqwest::Response {
    reqwest::Client::new()
        .post(format!("{}/v1/messages", llm.url()))
        .header("x-api-key", "sk-ant-test")
        .header("anthropic-version", "2023-06-01")
        .json(body)
        .send()
        .await
        .expect("request to the fake")
}

/// `(event name, data)` pairs of an Anthropic SSE body; asserts each name equals the
/// data's `type`.
pub fn anthropic_events(body: &str) -> Vec<(String, Value)> {
    body.split("\n\n")
        .filter(|e| !e.is_empty())
        .map(|e| {
            let (name_line, data_line) = e.split_once('\n').expect("event: and data: lines");
            let name = name_line.strip_prefix("event: ").expect("event line");
            let data: Value =
                serde_json::from_str(data_line.strip_prefix("data: ").expect("data line")).unwrap();
            assert_eq!(data["type"], name, "event name matches data type");
            (name.to_owned(), data)
        })
        .collect()
}

/// A reassembled content block: `(type, text or tool name, tool id, joined partial_json)`.
pub type Block = (String, String, String, String);

/// Reassembled blocks: `(type, text or tool name, tool id, joined partial_json)`, plus the
/// stop reason and output tokens of message_delta.
pub fn assemble_anthropic(events: &[(String, Value)]) -> (Vec<Block>, String, u64) {
    let mut blocks: Vec<Block> = Vec::new();
    let mut open = None;
    let (mut stop, mut output) = (String::new(), 0);
    assert_eq!(events.first().unwrap().0, "message_start");
    assert_eq!(events.last().unwrap().0, "message_stop");
    for (name, data) in events {
        match name.as_str() {
            "content_block_start" => {
                assert!(open.is_none(), "blocks do not overlap");
                let index = data["index"].as_u64().unwrap() as usize;
                assert_eq!(index, blocks.len());
                let block = &data["content_block"];
                let kind = block["type"].as_str().unwrap().to_owned();
                let (label, id) = match kind.as_str() {
                    "text" => (block["text"].as_str().unwrap().to_owned(), String::new()),
                    _ => (
                        block["name"].as_str().unwrap().to_owned(),
                        block["id"].as_str().unwrap().to_owned(),
                    ),
                };
                blocks.push((kind, label, id, String::new()));
                open = Some(index);
            }
            "content_block_delta" => {
                let index = data["index"].as_u64().unwrap() as usize;
                assert_eq!(open, Some(index));
                let delta = &data["delta"];
                match delta["type"].as_str().unwrap() {
                    "text_delta" => blocks[index].1.push_str(delta["text"].as_str().unwrap()),
                    "input_json_delta" => blocks[index]
                        .3
                        .push_str(delta["partial_json"].as_str().unwrap()),
                    other => panic!("unexpected delta {other}"),
                }
            }
            "content_block_stop" => {
                assert_eq!(open.take(), Some(data["index"].as_u64().unwrap() as usize));
            }
            "message_delta" => {
                stop = data["delta"]["stop_reason"].as_str().unwrap().to_owned();
                output = data["usage"]["output_tokens"].as_u64().unwrap();
            }
            "message_start" | "message_stop" | "ping" => {}
            other => panic!("unexpected event {other}"),
        }
    }
    (blocks, stop, output)
}
