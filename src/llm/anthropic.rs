//! Anthropic Messages API: `POST {base_url}/v1/messages`, streaming events, `tool_use` and
//! `tool_result` blocks, and the system prompt as a top-level field.
//!
//! The system prompt is sent as two blocks: the stable prefix, marked with
//! `cache_control` so the provider can cache it across turns, then the small dynamic
//! suffix (clock, model) which changes every request and is therefore not cached.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Value, json};

use super::http::{self, classify};
use super::{DeltaSink, LlmError, LlmProvider, LlmRequest, LlmResponse, Role, ToolCall, sse};

/// The API version header every request carries.
const VERSION: &str = "2023-06-01";

/// `rb` with the headers every Anthropic request carries: the API version, and the key.
pub fn with_headers(rb: reqwest::RequestBuilder, key: Option<&str>) -> reqwest::RequestBuilder {
    let rb = rb.header("anthropic-version", VERSION);
    match key {
        Some(k) => rb.header("x-api-key", k),
        None => rb,
    }
}

/// Client for the Anthropic Messages API.
pub struct Anthropic {
    http: reqwest::Client,
    url: String,
    api_key: Option<String>,
    /// `llm.request_timeout`: the longest wait for an answer's headers, and for each piece
    /// of its stream.
    limit: Duration,
}

impl Anthropic {
    /// `base_url` is `https://api.anthropic.com` (with or without `/v1`).
    pub fn new(
        base_url: &str,
        api_key: Option<String>,
        timeout: Duration,
    ) -> Result<Self, LlmError> {
        let http = http::client()?;
        let url = endpoint(base_url, "messages");
        // Error bodies are scrubbed of it from now on (see `http::classify`).
        switchboard_channel::redact::register(api_key.as_deref().unwrap_or_default());
        Ok(Self {
            http,
            url,
            api_key,
            limit: timeout,
        })
    }

    /// The request body for `req`: always a streamed answer (DESIGN §5), whether or not
    /// anyone listens to its text as it comes.
    pub fn body(req: &LlmRequest) -> Value {
        let mut turns: Vec<(&'static str, Vec<Value>)> = Vec::new();
        for m in &req.messages {
            let (role, blocks) = match m.role {
                // A stray system message inside the history becomes user text.
                Role::User | Role::System => {
                    ("user", vec![json!({"type": "text", "text": m.content})])
                }
                Role::Assistant => {
                    let mut blocks = Vec::new();
                    if !m.content.trim().is_empty() {
                        blocks.push(json!({"type": "text", "text": m.content}));
                    }
                    for c in &m.tool_calls {
                        let input = super::arguments_object(&c.arguments);
                        blocks.push(
                            json!({"type": "tool_use", "id": c.id, "name": c.name, "input": input}),
                        );
                    }
                    if blocks.is_empty() {
                        blocks.push(json!({"type": "text", "text": super::NO_ANSWER}));
                    }
                    ("assistant", blocks)
                }
                Role::Tool => (
                    "user",
                    vec![json!({
                        "type": "tool_result",
                        "tool_use_id": m.tool_call_id.clone().unwrap_or_default(),
                        "content": m.content,
                    })],
                ),
            };
            // The API wants strictly alternating roles: merge neighbours of the same role
            // (tool results and the next user text travel in one user message).
            match turns.last_mut() {
                Some((r, b)) if *r == role => b.extend(blocks),
                _ => turns.push((role, blocks)),
            }
        }
        let messages: Vec<Value> = turns
            .into_iter()
            .map(|(role, content)| json!({"role": role, "content": content}))
            .collect();
        let mut system = Vec::new();
        if !req.system.is_empty() {
            system.push(
                json!({"type": "text", "text": req.system, "cache_control": {"type": "ephemeral"}}),
            );
        }
        if !req.system_dynamic.is_empty() {
            system.push(json!({"type": "text", "text": req.system_dynamic}));
        }
        let mut body = json!({
            "model": req.model,
            "max_tokens": req.max_tokens,
            "messages": messages,
            "stream": true,
        });
        if !system.is_empty() {
            body["system"] = Value::Array(system);
        }
        if !req.tools.is_empty() {
            body["tools"] = req
                .tools
                .iter()
                .map(|t| json!({"name": t.name, "description": t.description, "input_schema": t.parameters}))
                .collect();
            // Still described (the API refuses `tool_use` blocks in the history without
            // them), but not to be called.
            if req.answer_only {
                body["tool_choice"] = json!({"type": "none"});
            }
        }
        body
    }
}

/// A content block being streamed.
#[derive(Default)]
struct Block {
    id: String,
    name: String,
    json: String,
    is_tool: bool,
}

/// Assembles a streamed message from its events.
#[derive(Default)]
struct Assembly {
    out: LlmResponse,
    blocks: BTreeMap<u64, Block>,
    /// `message_stop` came: the answer is complete.
    stopped: bool,
}

impl Assembly {
    fn apply(&mut self, ev: &sse::Event, on_delta: &DeltaSink) -> Result<(), LlmError> {
        if ev.data.is_empty() {
            return Ok(());
        }
        let v: Value = serde_json::from_str(&ev.data)
            .map_err(|e| LlmError::Protocol(format!("bad stream event: {e}")))?;
        let kind = v["type"].as_str().unwrap_or(ev.event.as_str());
        let index = v["index"].as_u64().unwrap_or(0);
        match kind {
            "message_start" => {
                // Tokens read from or written to the prompt cache are not in `input_tokens`;
                // they are prompt tokens all the same (OpenAI's `prompt_tokens` counts them).
                let u = &v["message"]["usage"];
                self.out.usage.prompt_tokens = [
                    "input_tokens",
                    "cache_read_input_tokens",
                    "cache_creation_input_tokens",
                ]
                .iter()
                .filter_map(|k| u[*k].as_u64())
                .sum();
            }
            "content_block_start" => {
                let cb = &v["content_block"];
                let block = self.blocks.entry(index).or_default();
                if cb["type"] == "tool_use" {
                    block.is_tool = true;
                    block.id = cb["id"].as_str().unwrap_or_default().to_string();
                    block.name = cb["name"].as_str().unwrap_or_default().to_string();
                } else if let Some(t) = cb["text"].as_str().filter(|t| !t.is_empty()) {
                    on_delta(t);
                    self.out.text.push_str(t);
                }
            }
            "content_block_delta" => {
                let d = &v["delta"];
                match d["type"].as_str() {
                    Some("text_delta") => {
                        if let Some(t) = d["text"].as_str().filter(|t| !t.is_empty()) {
                            on_delta(t);
                            self.out.text.push_str(t);
                        }
                    }
                    Some("input_json_delta") => {
                        let frag = d["partial_json"].as_str().unwrap_or_default();
                        self.blocks.entry(index).or_default().json.push_str(frag);
                    }
                    _ => {}
                }
            }
            "message_delta" => {
                if let Some(r) = v["delta"]["stop_reason"].as_str() {
                    self.out.finish_reason = r.to_string();
                }
                if let Some(n) = v["usage"]["output_tokens"].as_u64() {
                    self.out.usage.completion_tokens = n;
                }
            }
            "message_stop" => self.stopped = true,
            "error" => {
                let status = if v["error"]["type"] == "overloaded_error" {
                    529
                } else {
                    500
                };
                return Err(classify(status, None, &v["error"].to_string()));
            }
            _ => {}
        }
        Ok(())
    }

    /// The assembled answer; a stream that ended before `message_stop` and without a
    /// `stop_reason` is not an answer (a dropped connection, retried like one).
    fn finish(mut self) -> Result<LlmResponse, LlmError> {
        if !self.stopped && self.out.finish_reason.is_empty() {
            return Err(LlmError::Unavailable(
                "the answer's stream ended before it was complete".into(),
            ));
        }
        self.out.tool_calls = self
            .blocks
            .into_values()
            .filter(|b| b.is_tool)
            .map(|b| ToolCall {
                id: b.id,
                name: b.name,
                arguments: if b.json.trim().is_empty() {
                    "{}".into()
                } else {
                    b.json
                },
                extra_content: None,
            })
            .collect();
        Ok(self.out)
    }
}

/// The address of the API's `path` (`messages`, `models`) under `base_url`, which may be
/// given with or without its `/v1`.
pub fn endpoint(base_url: &str, path: &str) -> String {
    let base = base_url.trim_end_matches('/');
    if base.ends_with("/v1") {
        format!("{base}/{path}")
    } else {
        format!("{base}/v1/{path}")
    }
}

#[async_trait]
impl LlmProvider for Anthropic {
    async fn complete(
        &self,
        req: &LlmRequest,
        on_delta: Option<DeltaSink>,
    ) -> Result<LlmResponse, LlmError> {
        let rb =
            with_headers(self.http.post(&self.url), self.api_key.as_deref()).json(&Self::body(req));
        let resp = http::send_checked(rb, self.limit).await?;
        let on_delta = on_delta.unwrap_or_else(|| Arc::new(|_: &str| {}));
        let mut asm = Assembly::default();
        let mut parser = sse::Parser::default();
        let mut body = resp.bytes_stream();
        while let Some(chunk) = http::next_chunk(&mut body, self.limit).await? {
            for ev in parser.push(&chunk) {
                asm.apply(&ev, &on_delta)?;
            }
        }
        if let Some(ev) = parser.finish() {
            asm.apply(&ev, &on_delta)?;
        }
        asm.finish()
    }
}
