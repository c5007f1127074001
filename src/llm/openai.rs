//! OpenAI-compatible Chat Completions (OpenAI, OpenRouter, Ollama, vLLM, DeepSeek, Groq…).

use std::time::Duration;

use async_trait::async_trait;
use futures_util::StreamExt;
use serde::Serialize;
use serde_json::Value;

use super::{
    DeltaSink, LlmError, LlmProvider, LlmRequest, LlmResponse, Role, ToolCall, Usage, sse,
};

/// Client for `POST {base_url}/chat/completions`.
pub struct OpenAi {
    http: reqwest::Client,
    base_url: String,
    api_key: Option<String>,
}

impl OpenAi {
    pub fn new(
        base_url: &str,
        api_key: Option<String>,
        timeout: Duration,
    ) -> Result<Self, LlmError> {
        // Error bodies are scrubbed of it from now on (see `classify`).
        switchboard_channel::redact::register(api_key.as_deref().unwrap_or_default());
        Ok(Self {
            http: client(timeout)?,
            base_url: base_url.trim_end_matches('/').to_string(),
            api_key,
        })
    }

    /// The request body, serialized straight from `req` (no JSON tree is built);
    /// `system` is `req.system_text()`. Always a streamed answer (DESIGN §5), whether or not
    /// anyone listens to its text as it comes: tokens come as the model writes them.
    fn body<'a>(req: &'a LlmRequest, system: &'a str) -> Body<'a> {
        let mut messages = Vec::with_capacity(req.messages.len() + 1);
        if !system.is_empty() {
            messages.push(Msg {
                role: "system",
                content: Some(system),
                tool_calls: Vec::new(),
                tool_call_id: None,
            });
        }
        for m in &req.messages {
            let role = match m.role {
                Role::System => "system",
                Role::User => "user",
                Role::Assistant => "assistant",
                Role::Tool => "tool",
            };
            messages.push(Msg {
                role,
                content: (m.tool_calls.is_empty() || !m.content.is_empty())
                    .then_some(m.content.as_str()),
                tool_calls: m
                    .tool_calls
                    .iter()
                    .map(|c| CallJson {
                        id: &c.id,
                        kind: "function",
                        function: FnJson {
                            name: &c.name,
                            // As the model sent them, unless they are not a JSON object (cut
                            // off at max_tokens, or empty): some servers (Ollama, vLLM
                            // templates) refuse such a history with a 400 on every later turn.
                            arguments: if sent_as_object(&c.arguments) {
                                &c.arguments
                            } else {
                                "{}"
                            },
                        },
                    })
                    .collect(),
                tool_call_id: m.tool_call_id.as_deref(),
            });
        }
        Body {
            model: &req.model,
            messages,
            max_tokens: req.max_tokens,
            tools: req
                .tools
                .iter()
                .map(|t| ToolJson {
                    kind: "function",
                    function: ToolFn {
                        name: &t.name,
                        description: &t.description,
                        parameters: &t.parameters,
                    },
                })
                .collect(),
            stream: true,
            stream_options: StreamOptions {
                include_usage: true,
            },
        }
    }
}

/// `POST /chat/completions` body.
#[derive(Serialize)]
struct Body<'a> {
    model: &'a str,
    messages: Vec<Msg<'a>>,
    max_tokens: u32,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<ToolJson<'a>>,
    stream: bool,
    stream_options: StreamOptions,
}

#[derive(Serialize)]
struct Msg<'a> {
    role: &'static str,
    /// `null` for an assistant message that only calls tools.
    content: Option<&'a str>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tool_calls: Vec<CallJson<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_call_id: Option<&'a str>,
}

#[derive(Serialize)]
struct CallJson<'a> {
    id: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
    function: FnJson<'a>,
}

/// Whether a tool call's `arguments` are a JSON object.
fn sent_as_object(arguments: &str) -> bool {
    serde_json::from_str::<serde_json::Value>(arguments).is_ok_and(|v| v.is_object())
}

#[derive(Serialize)]
struct FnJson<'a> {
    name: &'a str,
    arguments: &'a str,
}

#[derive(Serialize)]
struct ToolJson<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    function: ToolFn<'a>,
}

#[derive(Serialize)]
struct ToolFn<'a> {
    name: &'a str,
    description: &'a str,
    parameters: &'a Value,
}

#[derive(Serialize)]
struct StreamOptions {
    include_usage: bool,
}

/// How long an idle connection to the provider is kept for the next turn. Shorter than
/// providers' own keep-alive (60 s and more), so the gateway closes first and never sends
/// a turn down a connection the server is closing. After a burst the pool holds one
/// connection per turn that ran at once (up to `gateway.max_concurrent_turns`, ~35 KB
/// each); they close within twice this time (hyper checks the pool every 30 s), before the
/// gateway's last idle heap trim. A turn after a longer pause pays one TLS handshake.
pub const POOL_IDLE: Duration = Duration::from_secs(30);

/// The HTTP client of a provider: `timeout` for a whole request, connections kept for reuse.
pub(crate) fn client(timeout: Duration) -> Result<reqwest::Client, LlmError> {
    reqwest::Client::builder()
        .timeout(timeout)
        .connect_timeout(Duration::from_secs(10))
        .pool_idle_timeout(POOL_IDLE)
        .pool_max_idle_per_host(256)
        .build()
        .map_err(|e| LlmError::Refused {
            status: None,
            detail: format!("cannot build the HTTP client: {e}"),
        })
}

/// Map an HTTP error status and body (or a streamed error event) to an [`LlmError`]. The
/// body is kept for the logs with the API key blotted out: providers quote the key they
/// refused ("Incorrect API key provided: sk-…"), also in an error event mid-stream.
pub(crate) fn classify(status: u16, retry_after: Option<Duration>, body: &str) -> LlmError {
    let body = switchboard_channel::redact(body);
    let lower = body.to_lowercase();
    if lower.contains("context_length_exceeded")
        || lower.contains("maximum context length")
        || lower.contains("prompt is too long")
    {
        return LlmError::ContextOverflow;
    }
    let snippet: String = body.chars().take(300).collect();
    match status {
        429 => LlmError::RateLimited { retry_after },
        500..=599 => LlmError::Unavailable(format!("HTTP {status}: {snippet}")),
        _ => LlmError::Refused {
            status: Some(status),
            detail: snippet,
        },
    }
}

/// `Retry-After` as seconds or as an HTTP date; `None` when it is neither (or absurd, like
/// `inf`), and the usual backoff applies.
pub(crate) fn retry_after(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    let v = headers
        .get(reqwest::header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim();
    if let Ok(secs) = v.parse::<f64>() {
        return Duration::try_from_secs_f64(secs).ok();
    }
    let at = chrono::DateTime::parse_from_rfc2822(v).ok()?;
    Some(
        (at.with_timezone(&chrono::Utc) - chrono::Utc::now())
            .to_std()
            .unwrap_or_default(),
    )
}

/// Send a provider request; a non-2xx answer becomes the matching [`LlmError`].
pub(crate) async fn send_checked(
    rb: reqwest::RequestBuilder,
) -> Result<reqwest::Response, LlmError> {
    let resp = rb.send().await.map_err(transport)?;
    if resp.status().is_success() {
        return Ok(resp);
    }
    let status = resp.status().as_u16();
    let ra = retry_after(resp.headers());
    let body = resp.text().await.unwrap_or_default();
    Err(classify(status, ra, &body))
}

pub(crate) fn transport(e: reqwest::Error) -> LlmError {
    LlmError::Unavailable(with_causes(e))
}

/// A transport error with what caused it ("error sending request: client error (Connect):
/// tcp connect error: Connection refused"): reqwest's own text names no cause. Never the
/// URL: it may carry credentials for some proxies.
pub(crate) fn with_causes(e: reqwest::Error) -> String {
    let e = e.without_url();
    let mut text = e.to_string();
    let mut source = std::error::Error::source(&e);
    while let Some(cause) = source {
        let said = cause.to_string();
        if !text.contains(&said) {
            text.push_str(": ");
            text.push_str(&said);
        }
        source = cause.source();
    }
    text
}

#[derive(Default)]
struct PartialCall {
    id: String,
    name: String,
    arguments: String,
}

#[async_trait]
impl LlmProvider for OpenAi {
    async fn complete(
        &self,
        req: &LlmRequest,
        on_delta: Option<DeltaSink>,
    ) -> Result<LlmResponse, LlmError> {
        let system = req.system_text();
        let mut rb = self
            .http
            .post(format!("{}/chat/completions", self.base_url))
            .json(&Self::body(req, &system));
        if let Some(key) = &self.api_key {
            rb = rb.bearer_auth(key);
        }
        let resp = send_checked(rb).await?;
        let on_delta = on_delta.unwrap_or_else(|| std::sync::Arc::new(|_: &str| {}));
        let mut out = LlmResponse::default();
        let mut calls: Vec<PartialCall> = Vec::new();
        let mut parser = sse::Parser::default();
        let mut body = resp.bytes_stream();
        let mut done = false;
        'stream: while let Some(chunk) = body.next().await {
            let chunk = chunk.map_err(transport)?;
            for ev in parser.push(&chunk) {
                if ev.data == "[DONE]" {
                    done = true;
                    break 'stream;
                }
                apply_chunk(&ev.data, &mut out, &mut calls, &on_delta)?;
            }
        }
        match parser.finish() {
            Some(ev) if ev.data == "[DONE]" => done = true,
            Some(ev) => apply_chunk(&ev.data, &mut out, &mut calls, &on_delta)?,
            None => {}
        }
        // A connection closed mid-answer is not an answer: neither `[DONE]` nor a
        // `finish_reason` came. Retried like any dropped connection.
        if !done && out.finish_reason.is_empty() {
            return Err(LlmError::Unavailable(
                "the answer's stream ended before it was complete".into(),
            ));
        }
        out.tool_calls = calls
            .into_iter()
            .filter(|c| !c.name.is_empty())
            .enumerate()
            .map(|(i, c)| ToolCall {
                id: if c.id.is_empty() {
                    format!("call_{i}")
                } else {
                    c.id
                },
                name: c.name,
                arguments: c.arguments,
            })
            .collect();
        Ok(out)
    }
}

/// Fold one streamed `chat.completion.chunk` into the answer being assembled.
fn apply_chunk(
    data: &str,
    out: &mut LlmResponse,
    calls: &mut Vec<PartialCall>,
    on_delta: &DeltaSink,
) -> Result<(), LlmError> {
    let v: Value = serde_json::from_str(data)
        .map_err(|e| LlmError::Protocol(format!("bad stream chunk: {e}")))?;
    if let Some(err) = v.get("error") {
        return Err(classify(500, None, &err.to_string()));
    }
    if let Some(u) = v.get("usage").filter(|u| !u.is_null()) {
        out.usage = usage(u);
    }
    let Some(choice) = v["choices"].get(0) else {
        return Ok(());
    };
    if let Some(r) = choice["finish_reason"].as_str() {
        out.finish_reason = r.to_string();
    }
    let delta = &choice["delta"];
    if let Some(t) = delta["content"].as_str().filter(|t| !t.is_empty()) {
        on_delta(t);
        out.text.push_str(t);
    }
    for tc in delta["tool_calls"].as_array().into_iter().flatten() {
        // Fragments of one call share an `index`; the id and name come with the first.
        let i = tc["index"]
            .as_u64()
            .map_or(calls.len().saturating_sub(1), |i| i as usize);
        if i > 64 {
            return Err(LlmError::Protocol(format!(
                "tool call index {i} out of range"
            )));
        }
        if calls.len() <= i {
            calls.resize_with(i + 1, PartialCall::default);
        }
        let c = &mut calls[i];
        if let Some(id) = tc["id"].as_str() {
            c.id = id.to_string();
        }
        if let Some(n) = tc["function"]["name"].as_str() {
            c.name.push_str(n);
        }
        if let Some(a) = tc["function"]["arguments"].as_str() {
            c.arguments.push_str(a);
        }
    }
    Ok(())
}

fn usage(u: &Value) -> Usage {
    Usage {
        prompt_tokens: u["prompt_tokens"].as_u64().unwrap_or(0),
        completion_tokens: u["completion_tokens"].as_u64().unwrap_or(0),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::llm::{ChatMessage, ToolSpec};

    #[test]
    fn retry_after_takes_seconds_or_a_date_and_never_panics() {
        let ra = |v: &str| {
            let mut h = reqwest::header::HeaderMap::new();
            h.insert(reqwest::header::RETRY_AFTER, v.parse().unwrap());
            retry_after(&h)
        };
        assert_eq!(ra("7"), Some(Duration::from_secs(7)));
        assert_eq!(ra("1.5"), Some(Duration::from_millis(1500)));
        for absurd in ["inf", "NaN", "1e20", "-3", "soon"] {
            assert_eq!(ra(absurd), None, "{absurd}");
        }
        let later = chrono::Utc::now() + chrono::Duration::seconds(30);
        let d = ra(&later.format("%a, %d %b %Y %H:%M:%S GMT").to_string()).unwrap();
        assert!(
            d > Duration::from_secs(25) && d <= Duration::from_secs(30),
            "{d:?}"
        );
        assert_eq!(
            ra("Wed, 21 Oct 2015 07:28:00 GMT"),
            Some(Duration::ZERO),
            "a date in the past: retry now"
        );
    }

    #[test]
    fn body_has_the_chat_completions_shape() {
        let mut calls = ChatMessage::new(Role::Assistant, "");
        calls.tool_calls.push(ToolCall {
            id: "c1".into(),
            name: "read_file".into(),
            arguments: r#"{"path":"a"}"#.into(),
        });
        let mut result = ChatMessage::new(Role::Tool, "contents");
        result.tool_call_id = Some("c1".into());
        let req = LlmRequest {
            model: "m".into(),
            system: "sys".into(),
            system_dynamic: "now".into(),
            messages: vec![ChatMessage::new(Role::User, "hi"), calls, result],
            tools: vec![ToolSpec {
                name: "read_file".into(),
                description: "Read".into(),
                parameters: json!({"type": "object"}),
            }]
            .into(),
            max_tokens: 7,
        };
        let system = req.system_text();
        let streamed = serde_json::to_value(OpenAi::body(&req, &system)).unwrap();
        assert_eq!(
            streamed,
            json!({
                "model": "m",
                "max_tokens": 7,
                "messages": [
                    {"role": "system", "content": "sys\n\nnow"},
                    {"role": "user", "content": "hi"},
                    {"role": "assistant", "content": null, "tool_calls": [
                        {"id": "c1", "type": "function",
                         "function": {"name": "read_file", "arguments": "{\"path\":\"a\"}"}}
                    ]},
                    {"role": "tool", "content": "contents", "tool_call_id": "c1"}
                ],
                "tools": [{"type": "function", "function": {
                    "name": "read_file", "description": "Read", "parameters": {"type": "object"}
                }}],
                "stream": true,
                "stream_options": {"include_usage": true}
            })
        );
        let no_system = serde_json::to_value(OpenAi::body(&req, "")).unwrap();
        assert_eq!(no_system["messages"][0]["role"], "user");
    }
}
