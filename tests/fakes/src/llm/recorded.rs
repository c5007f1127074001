//! What the fake recorded of a request, and helpers that read a request body.

use std::collections::BTreeMap;

use serde_json::Value;
use tokio::time::Instant;

/// One request as it crossed the wire.
#[derive(Debug, Clone)]
pub struct RecordedRequest {
    /// The client's address: requests from the same port came down the same connection.
    pub peer: std::net::SocketAddr,
    /// Request path, e.g. `/v1/chat/completions`.
    pub path: String,
    /// The body's `model` (empty when absent).
    pub model: String,
    /// Headers, names lowercased; repeated headers joined with `", "`.
    pub headers: BTreeMap<String, String>,
    /// The JSON body (`Null` for a GET or a body that is not JSON).
    pub body: Value,
    /// The body's `stream` flag.
    pub stream: bool,
    /// When the request arrived (tokio clock, so it follows a paused test clock).
    pub at: Instant,
}

impl RecordedRequest {
    /// Text of the last user message (see [`last_user_text`]).
    pub fn last_user_text(&self) -> String {
        last_user_text(self)
    }

    /// The system prompt: Anthropic's top-level `system` and OpenAI's `system` /
    /// `developer` messages, text joined with `"\n\n"`.
    pub fn system_text(&self) -> String {
        let mut parts: Vec<&str> = Vec::new();
        match self.body.get("system") {
            Some(Value::String(text)) => parts.push(text),
            Some(Value::Array(blocks)) => parts.extend(blocks.iter().filter_map(block_text)),
            _ => {}
        }
        let messages = self.body.get("messages").and_then(Value::as_array);
        for message in messages.into_iter().flatten() {
            let role = message.get("role").and_then(Value::as_str);
            if matches!(role, Some("system" | "developer")) {
                match message.get("content") {
                    Some(Value::String(text)) => parts.push(text),
                    Some(Value::Array(blocks)) => {
                        parts.extend(blocks.iter().filter_map(block_text));
                    }
                    _ => {}
                }
            }
        }
        parts.join("\n\n")
    }

    /// Names of the tools offered to the model (OpenAI `tools[].function.name`,
    /// Anthropic `tools[].name`).
    pub fn tool_names(&self) -> Vec<String> {
        let tools = self.body.get("tools").and_then(Value::as_array);
        tools
            .into_iter()
            .flatten()
            .filter_map(|tool| {
                tool.pointer("/function/name")
                    .or_else(|| tool.get("name"))
                    .and_then(Value::as_str)
                    .map(str::to_owned)
            })
            .collect()
    }
}

/// The text of a `{"type":"text","text":…}` content block.
fn block_text(block: &Value) -> Option<&str> {
    (block.get("type").and_then(Value::as_str) == Some("text"))
        .then(|| block.get("text").and_then(Value::as_str))
        .flatten()
}

/// Text of the request's last user message: string content, or the text parts of an
/// array content joined with `"\n"`. Anthropic user messages that carry only
/// `tool_result` blocks are skipped, so both providers give the human's last words.
/// Empty when there is none.
pub fn last_user_text(request: &RecordedRequest) -> String {
    body_last_user_text(&request.body).unwrap_or_default()
}

/// Like [`last_user_text`], on a raw request body (for [`FakeLlm::set_responder`](super::FakeLlm::set_responder)).
pub fn body_last_user_text(body: &Value) -> Option<String> {
    let messages = body.get("messages")?.as_array()?;
    messages
        .iter()
        .rev()
        .filter(|m| m.get("role").and_then(Value::as_str) == Some("user"))
        .find_map(|m| match m.get("content")? {
            Value::String(text) => Some(text.clone()),
            Value::Array(parts) => {
                let texts: Vec<&str> = parts.iter().filter_map(block_text).collect();
                let only_tool_results = !parts.is_empty()
                    && parts
                        .iter()
                        .all(|p| p.get("type").and_then(Value::as_str) == Some("tool_result"));
                (!only_tool_results).then(|| texts.join("\n"))
            }
            _ => None,
        })
}
