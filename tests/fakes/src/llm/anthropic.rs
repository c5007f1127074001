//! Anthropic Messages wire format: `message` JSON, SSE with `event:` lines, and
//! `{"type":"error","error":{type,message}}` errors.

use axum::http::HeaderMap;
use serde_json::{Value, json};

use super::reply::{ErrorReply, Reply, ReplyKind, ToolCall, estimate_tokens, split_chars};
use super::server::{Ctx, Rendered, Rendering};

/// An Anthropic error body.
fn error_body(kind: &str, message: &str) -> Value {
    json!({"type": "error", "error": {"type": kind, "message": message}})
}

/// The event that breaks a stream in [`Reply::with_stream_error_after`].
pub(super) fn stream_error_event() -> String {
    event("error", &error_body("overloaded_error", "Overloaded"))
}

/// Rejects what the real API rejects before generating anything.
///
/// The key may come as `x-api-key` or as `Authorization: Bearer` (the official Python
/// SDK 2.x sends the latter); a request with neither gets a 401.
pub(super) fn validate(
    headers: &HeaderMap,
    body: &Value,
    api_key: Option<&str>,
) -> Option<Rendered> {
    let bearer = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    let sent = headers
        .get("x-api-key")
        .and_then(|v| v.to_str().ok())
        .or(bearer);
    let Some(sent) = sent else {
        let body = error_body("authentication_error", "x-api-key header is required");
        return Some(Rendered::json(401, body));
    };
    if api_key.is_some_and(|key| sent != key) {
        let body = error_body("authentication_error", "invalid x-api-key");
        return Some(Rendered::json(401, body));
    }
    let invalid = |message: &str| {
        Some(Rendered::json(
            400,
            error_body("invalid_request_error", message),
        ))
    };
    if !headers.contains_key("anthropic-version") {
        return invalid("anthropic-version: header is required");
    }
    if !body.is_object() {
        return invalid("There was an error parsing the body of your request.");
    }
    if body.get("model").and_then(Value::as_str).is_none() {
        return invalid("model: Field required");
    }
    if !body.get("messages").is_some_and(Value::is_array) {
        return invalid("messages: Field required");
    }
    if !body.get("max_tokens").is_some_and(Value::is_u64) {
        return invalid("max_tokens: Field required");
    }
    None
}

/// Renders `reply` as Anthropic would answer `ctx`'s request.
pub(super) fn render(reply: &Reply, ctx: &Ctx<'_>) -> Rendered {
    match &reply.kind {
        ReplyKind::Error(error) => {
            let mut rendered = render_error(error);
            rendered.retry_after = reply.retry_after;
            rendered
        }
        ReplyKind::Message {
            text,
            tool_calls,
            truncated,
        } => {
            let stop = if *truncated {
                "max_tokens"
            } else if tool_calls.is_empty() {
                "end_turn"
            } else {
                "tool_use"
            };
            let (input, output) = reply.usage.unwrap_or_else(|| {
                let size = text.len() + tool_calls.iter().map(|c| c.arguments.len()).sum::<usize>();
                (ctx.prompt_tokens, estimate_tokens(size))
            });
            let body = if ctx.stream {
                Rendering::Events(stream(
                    ctx,
                    text,
                    tool_calls,
                    stop,
                    usage(input, output, reply.cached),
                ))
            } else {
                Rendering::Json(whole(
                    ctx,
                    text,
                    tool_calls,
                    stop,
                    usage(input, output, reply.cached),
                ))
            };
            Rendered {
                status: 200,
                retry_after: None,
                body,
            }
        }
    }
}

fn render_error(error: &ErrorReply) -> Rendered {
    let (status, body) = match error {
        ErrorReply::Raw { status, body } => (*status, body.clone()),
        ErrorReply::RateLimited => (
            429,
            error_body(
                "rate_limit_error",
                "This request would exceed your organization's rate limit.",
            ),
        ),
        ErrorReply::Server => (500, error_body("api_error", "Internal server error")),
        ErrorReply::Overloaded => (529, error_body("overloaded_error", "Overloaded")),
        ErrorReply::ContextOverflow => (
            400,
            error_body(
                "invalid_request_error",
                "prompt is too long: 210000 tokens > 200000 maximum",
            ),
        ),
    };
    Rendered::json(status, body)
}

fn call_id(ctx: &Ctx<'_>, index: usize, call: &ToolCall) -> String {
    call.id
        .clone()
        .unwrap_or_else(|| format!("toolu_fake{}_{index}", ctx.id))
}

/// `input` of a `tool_use` block: the parsed arguments (a string if they are not JSON).
fn input(call: &ToolCall) -> Value {
    serde_json::from_str(&call.arguments).unwrap_or_else(|_| Value::String(call.arguments.clone()))
}

/// Anthropic's `usage` object; the cache counts only when there are any.
fn usage(input_tokens: u64, output_tokens: u64, (read, written): (u64, u64)) -> Value {
    let mut u = json!({"input_tokens": input_tokens, "output_tokens": output_tokens});
    if read + written > 0 {
        u["cache_read_input_tokens"] = json!(read);
        u["cache_creation_input_tokens"] = json!(written);
    }
    u
}

/// The non-stream `message` object.
fn whole(ctx: &Ctx<'_>, text: &str, calls: &[ToolCall], stop: &str, usage: Value) -> Value {
    let mut content = Vec::new();
    if !text.is_empty() {
        content.push(json!({"type": "text", "text": text}));
    }
    for (index, call) in calls.iter().enumerate() {
        content.push(json!({"type": "tool_use", "id": call_id(ctx, index, call),
                            "name": call.name, "input": input(call)}));
    }
    json!({
        "id": format!("msg_fake{}", ctx.id),
        "type": "message",
        "role": "assistant",
        "model": ctx.model,
        "content": content,
        "stop_reason": stop,
        "stop_sequence": null,
        "usage": usage,
    })
}

fn event(kind: &str, data: &Value) -> String {
    format!("event: {kind}\ndata: {data}\n\n")
}

/// message_start, a ping, one start/delta…/stop group per content block, message_delta
/// (stop reason and usage), message_stop.
fn stream(ctx: &Ctx<'_>, text: &str, calls: &[ToolCall], stop: &str, usage: Value) -> Vec<String> {
    let output_tokens = usage["output_tokens"].clone();
    // The start reports the prompt (with the cache counts) and one output token so far.
    let mut start_usage = usage;
    start_usage["output_tokens"] = json!(1);
    let mut events = vec![event(
        "message_start",
        &json!({"type": "message_start", "message": {
            "id": format!("msg_fake{}", ctx.id), "type": "message", "role": "assistant",
            "model": ctx.model, "content": [], "stop_reason": null, "stop_sequence": null,
            "usage": start_usage,
        }}),
    )];
    let mut block = 0;
    if !text.is_empty() {
        events.push(event(
            "content_block_start",
            &json!({"type": "content_block_start", "index": block,
                    "content_block": {"type": "text", "text": ""}}),
        ));
        events.push(event("ping", &json!({"type": "ping"})));
        for piece in split_chars(text, ctx.chunk_chars) {
            events.push(event(
                "content_block_delta",
                &json!({"type": "content_block_delta", "index": block,
                        "delta": {"type": "text_delta", "text": piece}}),
            ));
        }
        events.push(event(
            "content_block_stop",
            &json!({"type": "content_block_stop", "index": block}),
        ));
        block += 1;
    } else {
        events.push(event("ping", &json!({"type": "ping"})));
    }
    for (index, call) in calls.iter().enumerate() {
        events.push(event(
            "content_block_start",
            &json!({"type": "content_block_start", "index": block, "content_block": {
                "type": "tool_use", "id": call_id(ctx, index, call), "name": call.name,
                "input": {},
            }}),
        ));
        // Like the real API: an empty fragment first, then the JSON in pieces.
        let fragments = std::iter::once("").chain(split_chars(&call.arguments, ctx.chunk_chars));
        for fragment in fragments {
            events.push(event(
                "content_block_delta",
                &json!({"type": "content_block_delta", "index": block,
                        "delta": {"type": "input_json_delta", "partial_json": fragment}}),
            ));
        }
        events.push(event(
            "content_block_stop",
            &json!({"type": "content_block_stop", "index": block}),
        ));
        block += 1;
    }
    events.push(event(
        "message_delta",
        &json!({"type": "message_delta",
                "delta": {"stop_reason": stop, "stop_sequence": null},
                "usage": {"output_tokens": output_tokens}}),
    ));
    events.push(event("message_stop", &json!({"type": "message_stop"})));
    events
}
