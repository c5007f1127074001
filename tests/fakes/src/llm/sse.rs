//! Parsers for the two SSE dialects, for tests that read a stream: the gateway's own
//! OpenAI-compatible endpoint, or a client check against this fake.

use serde_json::Value;

/// A streamed completion put back together.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StreamedCompletion {
    /// All text deltas joined.
    pub text: String,
    /// Tool calls in order, arguments joined from their fragments.
    pub tool_calls: Vec<StreamedToolCall>,
    /// OpenAI `finish_reason` or Anthropic `stop_reason`.
    pub finish_reason: Option<String>,
    /// The last non-null `usage` seen (OpenAI usage chunk, Anthropic message_delta).
    pub usage: Option<Value>,
    /// Number of data events, `[DONE]` excluded.
    pub events: usize,
    /// Number of non-empty text deltas.
    pub text_deltas: usize,
    /// The stream ended properly (`data: [DONE]` / `message_stop`).
    pub done: bool,
}

/// One reassembled tool call.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StreamedToolCall {
    /// Call id (`call_…` / `toolu_…`).
    pub id: String,
    /// Function name.
    pub name: String,
    /// The argument JSON text, fragments joined.
    pub arguments: String,
}

/// `(event name, data)` of each SSE event; comment lines (`: …`) are skipped, several
/// `data:` lines are joined with `"\n"`, CRLF is accepted.
pub fn sse_events(body: &str) -> Vec<(Option<String>, String)> {
    let body = body.replace("\r\n", "\n");
    body.split("\n\n")
        .filter_map(|block| {
            let mut name = None;
            let mut data: Vec<&str> = Vec::new();
            for line in block.lines() {
                if let Some(value) = line.strip_prefix("event:") {
                    name = Some(value.trim_start().to_owned());
                } else if let Some(value) = line.strip_prefix("data:") {
                    data.push(value.strip_prefix(' ').unwrap_or(value));
                }
            }
            (!data.is_empty()).then(|| (name, data.join("\n")))
        })
        .collect()
}

/// Reassembles an OpenAI `chat.completion.chunk` stream.
///
/// # Errors
/// A chunk that is not JSON, an `{"error":…}` event, or a tool-call fragment for an
/// index that was never started.
pub fn parse_openai_stream(body: &str) -> Result<StreamedCompletion, String> {
    let mut out = StreamedCompletion::default();
    for (_, data) in sse_events(body) {
        if data == "[DONE]" {
            out.done = true;
            continue;
        }
        out.events += 1;
        let chunk: Value =
            serde_json::from_str(&data).map_err(|e| format!("chunk is not JSON ({e}): {data}"))?;
        if let Some(error) = chunk.get("error") {
            return Err(format!("stream error: {error}"));
        }
        if let Some(usage) = chunk.get("usage").filter(|u| !u.is_null()) {
            out.usage = Some(usage.clone());
        }
        let Some(choice) = chunk.pointer("/choices/0") else {
            continue;
        };
        let delta = &choice["delta"];
        if let Some(piece) = delta.get("content").and_then(Value::as_str) {
            if !piece.is_empty() {
                out.text_deltas += 1;
            }
            out.text.push_str(piece);
        }
        for call in delta
            .get("tool_calls")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let index = call
                .get("index")
                .and_then(Value::as_u64)
                .ok_or_else(|| format!("tool-call delta without index: {call}"))?;
            let index = usize::try_from(index).map_err(|e| e.to_string())?;
            if index == out.tool_calls.len() {
                out.tool_calls.push(StreamedToolCall::default());
            }
            let slot = out
                .tool_calls
                .get_mut(index)
                .ok_or_else(|| format!("tool-call delta for unknown index {index}"))?;
            if let Some(id) = call.get("id").and_then(Value::as_str) {
                slot.id = id.to_owned();
            }
            if let Some(name) = call.pointer("/function/name").and_then(Value::as_str) {
                slot.name.push_str(name);
            }
            if let Some(args) = call.pointer("/function/arguments").and_then(Value::as_str) {
                slot.arguments.push_str(args);
            }
        }
        if let Some(finish) = choice.get("finish_reason").and_then(Value::as_str) {
            out.finish_reason = Some(finish.to_owned());
        }
    }
    Ok(out)
}

/// Reassembles an Anthropic Messages stream.
///
/// # Errors
/// An event that is not JSON, an `error` event, or a delta for a block never started.
pub fn parse_anthropic_stream(body: &str) -> Result<StreamedCompletion, String> {
    let mut out = StreamedCompletion::default();
    // Block index → position in `tool_calls` (None for text blocks).
    let mut blocks: Vec<Option<usize>> = Vec::new();
    for (_, data) in sse_events(body) {
        out.events += 1;
        let event: Value =
            serde_json::from_str(&data).map_err(|e| format!("event is not JSON ({e}): {data}"))?;
        let block_index = || {
            event
                .get("index")
                .and_then(Value::as_u64)
                .and_then(|i| usize::try_from(i).ok())
                .ok_or_else(|| format!("event without index: {event}"))
        };
        match event
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or_default()
        {
            "content_block_start" => {
                let index = block_index()?;
                blocks.resize(blocks.len().max(index + 1), None);
                let block = &event["content_block"];
                if block.get("type").and_then(Value::as_str) == Some("tool_use") {
                    blocks[index] = Some(out.tool_calls.len());
                    out.tool_calls.push(StreamedToolCall {
                        id: block["id"].as_str().unwrap_or_default().to_owned(),
                        name: block["name"].as_str().unwrap_or_default().to_owned(),
                        arguments: String::new(),
                    });
                }
            }
            "content_block_delta" => {
                let index = block_index()?;
                let delta = &event["delta"];
                match delta.get("type").and_then(Value::as_str) {
                    Some("text_delta") => {
                        let piece = delta["text"].as_str().unwrap_or_default();
                        if !piece.is_empty() {
                            out.text_deltas += 1;
                        }
                        out.text.push_str(piece);
                    }
                    Some("input_json_delta") => {
                        let call = blocks
                            .get(index)
                            .copied()
                            .flatten()
                            .ok_or_else(|| format!("input_json_delta for block {index}"))?;
                        let piece = delta["partial_json"].as_str().unwrap_or_default();
                        out.tool_calls[call].arguments.push_str(piece);
                    }
                    _ => {}
                }
            }
            "message_delta" => {
                if let Some(stop) = event.pointer("/delta/stop_reason").and_then(Value::as_str) {
                    out.finish_reason = Some(stop.to_owned());
                }
                if let Some(usage) = event.get("usage") {
                    out.usage = Some(usage.clone());
                }
            }
            "message_stop" => out.done = true,
            "error" => return Err(format!("stream error: {}", event["error"])),
            _ => {}
        }
    }
    Ok(out)
}
