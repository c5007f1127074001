//! OpenAI Chat Completions wire format: `chat.completion` JSON, `chat.completion.chunk`
//! SSE, and `{"error":{message,type,param,code}}` errors.

use axum::http::HeaderMap;
use serde_json::{Value, json};

use super::reply::{ErrorReply, Reply, ReplyKind, ToolCall, estimate_tokens, split_chars};
use super::server::{Ctx, Rendered, Rendering};

/// An OpenAI error body.
fn error_body(kind: &str, message: &str, code: Option<&str>, param: Option<&str>) -> Value {
    json!({"error": {"message": message, "type": kind, "param": param, "code": code}})
}

/// The event that breaks a stream in [`Reply::with_stream_error_after`].
pub(super) fn stream_error_event() -> String {
    let error = error_body(
        "server_error",
        "The server had an error while processing your request. Sorry about that!",
        None,
        None,
    );
    format!("data: {error}\n\n")
}

/// What the server asked refuses beyond what OpenAI itself refuses.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Rules {
    /// The model is one of those ([`super::FakeLlm::refuse_max_tokens`]) that take their
    /// limit in `max_completion_tokens` only, as OpenAI's o-series and gpt-5.
    pub refuses_max_tokens: bool,
    /// The model is served by a server that forbids `stream_options`, as Mistral's API
    /// ([`super::FakeLlm::refuse_stream_options`]).
    pub refuses_stream_options: bool,
    /// A `user` message may not follow a `tool` message, as Mistral's API and strict chat
    /// templates ([`super::FakeLlm::strict_role_order`]).
    pub strict_role_order: bool,
}

/// Rejects what the real API (and the server [`Rules`] describe) rejects before
/// generating anything.
pub(super) fn validate(
    headers: &HeaderMap,
    body: &Value,
    api_key: Option<&str>,
    rules: Rules,
) -> Option<Rendered> {
    if let Some(key) = api_key {
        let sent = headers.get("authorization").and_then(|v| v.to_str().ok());
        if sent.and_then(|v| v.strip_prefix("Bearer ")) != Some(key) {
            let message = "Incorrect API key provided. You can find your API key at \
                           https://platform.openai.com/account/api-keys.";
            let body = error_body(
                "invalid_request_error",
                message,
                Some("invalid_api_key"),
                None,
            );
            return Some(Rendered::json(401, body));
        }
    }
    let invalid = |message: &str, param: Option<&str>| {
        let body = error_body("invalid_request_error", message, None, param);
        Some(Rendered::json(400, body))
    };
    if !body.is_object() {
        return invalid("We could not parse the JSON body of your request.", None);
    }
    if body.get("model").and_then(Value::as_str).is_none() {
        return invalid("you must provide a model parameter", Some("model"));
    }
    if !body.get("messages").is_some_and(Value::is_array) {
        return invalid("Missing required parameter: 'messages'.", Some("messages"));
    }
    if rules.refuses_stream_options && body.get("stream_options").is_some() {
        // Mistral's answer, word for word.
        let body = json!({"object": "error", "message": {"detail": [{
            "type": "extra_forbidden", "loc": ["body", "stream_options", "include_usage"],
            "msg": "Extra inputs are not permitted", "input": true}]},
            "type": "invalid_request_error", "param": null, "code": null});
        return Some(Rendered::json(422, body));
    }
    if rules.strict_role_order && tool_then_user(body) {
        let body = json!({"object": "error", "message": "Unexpected role 'user' after role 'tool'",
            "type": "invalid_request_message_order", "param": null, "code": "3230"});
        return Some(Rendered::json(400, body));
    }
    if rules.refuses_max_tokens && body.get("max_tokens").is_some() {
        let message = "Unsupported parameter: 'max_tokens' is not supported with this model. \
                       Use 'max_completion_tokens' instead.";
        let body = error_body(
            "invalid_request_error",
            message,
            Some("unsupported_parameter"),
            Some("max_tokens"),
        );
        return Some(Rendered::json(400, body));
    }
    None
}

/// Whether a `user` message directly follows a `tool` message.
fn tool_then_user(body: &Value) -> bool {
    let roles: Vec<&str> = body["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|m| m["role"].as_str().unwrap_or_default())
        .collect();
    roles.windows(2).any(|w| w == ["tool", "user"])
}

/// Renders `reply` as OpenAI would answer `ctx`'s request.
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
            let finish = if *truncated {
                "length"
            } else if tool_calls.is_empty() {
                "stop"
            } else {
                "tool_calls"
            };
            let (prompt, completion) = reply.usage.unwrap_or_else(|| {
                let size = text.len() + tool_calls.iter().map(|c| c.arguments.len()).sum::<usize>();
                (ctx.prompt_tokens, estimate_tokens(size))
            });
            let usage = json!({"prompt_tokens": prompt, "completion_tokens": completion,
                               "total_tokens": prompt + completion});
            let body = if ctx.stream && reply.ollama_calls {
                Rendering::Events(ollama_stream(ctx, text, tool_calls, finish, usage))
            } else if ctx.stream {
                Rendering::Events(stream(ctx, text, tool_calls, finish, usage))
            } else {
                Rendering::Json(whole(ctx, text, tool_calls, finish, usage))
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
                "requests",
                "Rate limit reached for requests. Please try again later.",
                Some("rate_limit_exceeded"),
                None,
            ),
        ),
        ErrorReply::Server => (
            500,
            error_body(
                "server_error",
                "The server had an error while processing your request. Sorry about that!",
                None,
                None,
            ),
        ),
        ErrorReply::Overloaded => (
            529,
            error_body(
                "server_error",
                "The engine is currently overloaded, please try again later.",
                Some("overloaded"),
                None,
            ),
        ),
        ErrorReply::ContextOverflow => (
            400,
            error_body(
                "invalid_request_error",
                "This model's maximum context length is 128000 tokens. However, your messages \
                 resulted in 130000 tokens. Please reduce the length of the messages.",
                Some("context_length_exceeded"),
                Some("messages"),
            ),
        ),
    };
    Rendered::json(status, body)
}

fn call_id(ctx: &Ctx<'_>, index: usize, call: &ToolCall) -> String {
    call.id
        .clone()
        .unwrap_or_else(|| format!("call_fake{}_{index}", ctx.id))
}

/// The non-stream `chat.completion` object.
fn whole(ctx: &Ctx<'_>, text: &str, calls: &[ToolCall], finish: &str, usage: Value) -> Value {
    let mut message = json!({"role": "assistant", "content": text, "refusal": null});
    if !calls.is_empty() {
        if text.is_empty() {
            message["content"] = Value::Null;
        }
        let calls: Vec<Value> = calls
            .iter()
            .enumerate()
            .map(|(i, call)| {
                json!({"id": call_id(ctx, i, call), "type": "function",
                       "function": {"name": call.name, "arguments": call.arguments}})
            })
            .collect();
        message["tool_calls"] = Value::Array(calls);
    }
    json!({
        "id": format!("chatcmpl-fake{}", ctx.id),
        "object": "chat.completion",
        "created": ctx.created,
        "model": ctx.model,
        "choices": [{"index": 0, "message": message, "logprobs": null, "finish_reason": finish}],
        "usage": usage,
        "system_fingerprint": "fp_fake",
    })
}

/// The `chat.completion.chunk` events: role, content pieces, tool-call headers and
/// argument fragments, the finish chunk, the usage chunk (if asked), `[DONE]`.
fn stream(
    ctx: &Ctx<'_>,
    text: &str,
    calls: &[ToolCall],
    finish: &str,
    usage: Value,
) -> Vec<String> {
    let mut deltas = Vec::new();
    if !text.is_empty() || calls.is_empty() {
        deltas.push(json!({"role": "assistant", "content": "", "refusal": null}));
        deltas.extend(split_chars(text, ctx.chunk_chars).map(|piece| json!({"content": piece})));
    }
    for (index, call) in calls.iter().enumerate() {
        deltas.push(json!({"tool_calls": [{
            "index": index, "id": call_id(ctx, index, call), "type": "function",
            "function": {"name": call.name, "arguments": ""},
        }]}));
        deltas.extend(split_chars(&call.arguments, ctx.chunk_chars).map(|fragment| {
            json!({"tool_calls": [{"index": index, "function": {"arguments": fragment}}]})
        }));
    }
    match deltas.first_mut().and_then(Value::as_object_mut) {
        // A tool-call-only answer: the role rides on the first tool-call delta.
        Some(first) if !first.contains_key("role") => {
            first.insert("role".into(), json!("assistant"));
            first.insert("content".into(), Value::Null);
        }
        _ => {}
    }
    events(ctx, deltas, finish, usage)
}

/// The chunks of [`Reply::with_ollama_tool_calls`]: text in pieces, then each tool call
/// whole in its own chunk, all at `index: 0`; `role` and `content` on every chunk.
fn ollama_stream(
    ctx: &Ctx<'_>,
    text: &str,
    calls: &[ToolCall],
    finish: &str,
    usage: Value,
) -> Vec<String> {
    let mut deltas: Vec<Value> = split_chars(text, ctx.chunk_chars)
        .map(|piece| json!({"role": "assistant", "content": piece}))
        .collect();
    for (index, call) in calls.iter().enumerate() {
        deltas.push(json!({"role": "assistant", "content": "", "tool_calls": [{
            "id": call_id(ctx, index, call), "index": 0, "type": "function",
            "function": {"name": call.name, "arguments": call.arguments},
        }]}));
    }
    events(ctx, deltas, finish, usage)
}

/// `deltas` as `chat.completion.chunk` events, then the finish chunk, the usage chunk (if
/// asked) and `[DONE]`.
fn events(ctx: &Ctx<'_>, deltas: Vec<Value>, finish: &str, usage: Value) -> Vec<String> {
    let id = format!("chatcmpl-fake{}", ctx.id);
    let chunk = |choices: Value, usage: Value| {
        let mut chunk = json!({"id": id, "object": "chat.completion.chunk", "created": ctx.created,
                               "model": ctx.model, "system_fingerprint": "fp_fake",
                               "choices": choices});
        if ctx.include_usage {
            // OpenAI sends `usage: null` on every chunk but the last when usage is asked.
            chunk["usage"] = usage;
        }
        format!("data: {chunk}\n\n")
    };
    let mut events: Vec<String> = deltas
        .into_iter()
        .map(|delta| {
            chunk(
                json!([{"index": 0, "delta": delta, "logprobs": null, "finish_reason": null}]),
                Value::Null,
            )
        })
        .collect();
    events.push(chunk(
        json!([{"index": 0, "delta": {}, "logprobs": null, "finish_reason": finish}]),
        Value::Null,
    ));
    if ctx.include_usage {
        events.push(chunk(json!([]), usage));
    }
    events.push("data: [DONE]\n\n".to_owned());
    events
}
