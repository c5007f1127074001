//! OpenAI-compatible Chat Completions (OpenAI, OpenRouter, Ollama, vLLM, DeepSeek, Groq…).
//!
//! Requests suit the strictest servers of the family: one system message, first (strict
//! chat templates, Qwen's on vLLM and llama.cpp, refuse any later one), and `max_tokens`,
//! or `max_completion_tokens` for the models that refuse it (OpenAI's o-series, gpt-5);
//! `stream_options` unless the server forbids it (Mistral). What a model refuses is learnt
//! from its first refusal, and the request sent again at once.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use serde::Serialize;
use serde_json::Value;

pub use super::http::POOL_IDLE;
pub(crate) use super::http::with_causes;
use super::http::{self, Rejection};
use super::{DeltaSink, LlmError, LlmProvider, LlmRequest, LlmResponse, Role, sse};

mod stream;
mod think;

/// Client for `POST {base_url}/chat/completions`.
pub struct OpenAi {
    http: reqwest::Client,
    base_url: String,
    api_key: Option<String>,
    /// `llm.request_timeout`: the longest wait for an answer's headers, and for each piece
    /// of its stream.
    limit: Duration,
    /// What each model was found to refuse.
    quirks: Mutex<HashMap<String, Quirks>>,
}

/// What a model's server refused, learnt from its answer: the request is shaped for what
/// most servers read until a model says otherwise.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Quirks {
    /// The limit goes in `max_completion_tokens` (OpenAI's reasoning models), not in
    /// `max_tokens` (what Ollama, vLLM, llama.cpp and OpenRouter read).
    completion_tokens: bool,
    /// No `stream_options`: the server forbids fields it does not know (Mistral's 422
    /// `extra_forbidden`); the usage then comes only if the server sends it unasked.
    no_stream_options: bool,
    /// No `extra_content` on tool calls: what Gemini gave a call (kept in the history) is
    /// refused by a server that forbids fields it does not know, after a model change.
    no_extra_content: bool,
}

impl Quirks {
    /// What `r` teaches beyond what is known: the quirks to send again with, and what
    /// changed (for the log); `None` when it teaches nothing (a refusal to pass on).
    fn learn(self, r: &Rejection) -> Option<(Quirks, &'static str)> {
        if !self.completion_tokens && refuses_max_tokens(r) {
            let learnt = Quirks {
                completion_tokens: true,
                ..self
            };
            return Some((
                learnt,
                "sending max_completion_tokens instead of max_tokens",
            ));
        }
        if !self.no_stream_options && refuses_stream_options(r) {
            let learnt = Quirks {
                no_stream_options: true,
                ..self
            };
            return Some((learnt, "sending no stream_options"));
        }
        if !self.no_extra_content
            && matches!(r.status, 400 | 422)
            && r.body.contains("extra_content")
        {
            let learnt = Quirks {
                no_extra_content: true,
                ..self
            };
            return Some((learnt, "sending no extra_content on tool calls"));
        }
        None
    }
}

impl OpenAi {
    pub fn new(
        base_url: &str,
        api_key: Option<String>,
        timeout: Duration,
    ) -> Result<Self, LlmError> {
        // Error bodies are scrubbed of it from now on (see `http::classify`).
        switchboard_channel::redact::register(api_key.as_deref().unwrap_or_default());
        Ok(Self {
            http: http::client()?,
            base_url: base_url.trim_end_matches('/').to_string(),
            api_key,
            limit: timeout,
            quirks: Mutex::new(HashMap::new()),
        })
    }

    /// The one system message: the stable prefix, the dynamic part, then the steering (the
    /// request's `Role::System` messages, which strict chat templates refuse anywhere but
    /// first). The stable prefix stays first and unchanged, so providers still cache it.
    fn system_text(req: &LlmRequest) -> String {
        let mut text = req.system_text();
        for m in req.messages.iter().filter(|m| m.role == Role::System) {
            if !text.is_empty() {
                text.push_str("\n\n");
            }
            text.push_str(&m.content);
        }
        text
    }

    /// What `model` was found to refuse so far.
    fn quirks(&self, model: &str) -> Quirks {
        self.quirks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(model)
            .copied()
            .unwrap_or_default()
    }

    fn post(&self, body: &Body<'_>) -> reqwest::RequestBuilder {
        let rb = self
            .http
            .post(format!("{}/chat/completions", self.base_url))
            .json(body);
        match &self.api_key {
            Some(key) => rb.bearer_auth(key),
            None => rb,
        }
    }

    /// The request body, serialized straight from `req` (no JSON tree is built);
    /// `system` is [`Self::system_text`], and no other system message is sent. Always a
    /// streamed answer (DESIGN §5), whether or not anyone listens to its text as it comes:
    /// tokens come as the model writes them.
    fn body<'a>(req: &'a LlmRequest, system: &'a str, quirks: Quirks) -> Body<'a> {
        let mut messages = Vec::with_capacity(req.messages.len() + 1);
        if !system.is_empty() {
            messages.push(Msg {
                role: "system",
                content: Some(Cow::Borrowed(system)),
                tool_calls: Vec::new(),
                tool_call_id: None,
                reasoning_content: None,
            });
        }
        for m in &req.messages {
            let role = match m.role {
                // Already in the system message.
                Role::System => continue,
                Role::User => "user",
                Role::Assistant => "assistant",
                Role::Tool => "tool",
            };
            // A user message right after a tool result (its turn failed or was stopped
            // after its tools ran) gets an assistant message between them: Mistral ("Unexpected
            // role 'user' after role 'tool'") and strict chat templates refuse it otherwise.
            if m.role == Role::User && messages.last().is_some_and(|p| p.role == "tool") {
                messages.push(Msg {
                    role: "assistant",
                    content: Some(Cow::Borrowed(super::NO_ANSWER)),
                    tool_calls: Vec::new(),
                    tool_call_id: None,
                    reasoning_content: None,
                });
            }
            // Two user messages in a row (one a `/stop` cut off before any answer, then
            // the next) travel as one: strict chat templates want the roles to alternate
            // and refuse every later turn otherwise.
            if let (Role::User, Some(prev)) = (m.role, messages.last_mut()) {
                if prev.role == "user" {
                    let joined = prev.content.get_or_insert_default().to_mut();
                    joined.push_str("\n\n");
                    joined.push_str(&m.content);
                    continue;
                }
            }
            let content = match m.role {
                Role::Assistant if m.content.trim().is_empty() => {
                    m.tool_calls.is_empty().then_some(super::NO_ANSWER)
                }
                _ => Some(m.content.as_str()),
            };
            messages.push(Msg {
                role,
                content: content.map(Cow::Borrowed),
                tool_calls: m
                    .tool_calls
                    .iter()
                    .map(|c| CallJson {
                        id: &c.id,
                        kind: "function",
                        extra_content: c
                            .extra_content
                            .as_ref()
                            .filter(|_| !quirks.no_extra_content),
                        function: FnJson {
                            name: &c.name,
                            // As the model sent them, unless they are not a JSON object (cut
                            // off at max_tokens, or empty): some servers (Ollama, vLLM
                            // templates) refuse such a history with a 400 on every later turn.
                            arguments: if sent_as_object(&c.arguments) {
                                Cow::Borrowed(c.arguments.as_str())
                            } else {
                                Cow::Owned(super::arguments_object(&c.arguments).to_string())
                            },
                        },
                    })
                    .collect(),
                tool_call_id: m.tool_call_id.as_deref(),
                reasoning_content: (m.role == Role::Assistant && !m.reasoning.is_empty())
                    .then_some(m.reasoning.as_str()),
            });
        }
        Body {
            model: &req.model,
            messages,
            max_tokens: (!quirks.completion_tokens).then_some(req.max_tokens),
            max_completion_tokens: quirks.completion_tokens.then_some(req.max_tokens),
            // None offered when the model must answer: servers that do not heed
            // `tool_choice` (Ollama) cannot call what is not offered.
            tools: req
                .tools
                .iter()
                .filter(|_| !req.answer_only)
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
            stream_options: (!quirks.no_stream_options).then_some(StreamOptions {
                include_usage: true,
            }),
        }
    }
}

/// `POST /chat/completions` body.
#[derive(Serialize)]
struct Body<'a> {
    model: &'a str,
    messages: Vec<Msg<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_completion_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<ToolJson<'a>>,
    stream: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    stream_options: Option<StreamOptions>,
}

#[derive(Serialize)]
struct Msg<'a> {
    role: &'static str,
    /// `null` for an assistant message that only calls tools.
    content: Option<Cow<'a, str>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tool_calls: Vec<CallJson<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_call_id: Option<&'a str>,
    /// The reasoning before an assistant message of the running turn (DeepSeek's
    /// thinking mode refuses a tool call sent back without it).
    #[serde(skip_serializing_if = "Option::is_none")]
    reasoning_content: Option<&'a str>,
}

#[derive(Serialize)]
struct CallJson<'a> {
    id: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
    function: FnJson<'a>,
    /// As the server sent it with the call (Gemini's thought signature).
    #[serde(skip_serializing_if = "Option::is_none")]
    extra_content: Option<&'a Value>,
}

/// Whether a tool call's `arguments` are a JSON object.
fn sent_as_object(arguments: &str) -> bool {
    serde_json::from_str::<serde_json::Value>(arguments).is_ok_and(|v| v.is_object())
}

#[derive(Serialize)]
struct FnJson<'a> {
    name: &'a str,
    arguments: Cow<'a, str>,
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

/// Whether `resp` is a JSON document rather than an event stream.
fn is_json(resp: &reqwest::Response) -> bool {
    resp.headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|t| {
            t.trim_start()
                .to_ascii_lowercase()
                .starts_with("application/json")
        })
}

/// Whether a 400 says the model takes its limit in `max_completion_tokens` ("Unsupported
/// parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens'
/// instead.", param `max_tokens`, code `unsupported_parameter`).
fn refuses_max_tokens(r: &Rejection) -> bool {
    if r.status != 400 {
        return false;
    }
    let (param, code) = r.param_and_code();
    (param.as_deref() == Some("max_tokens") && code.as_deref() == Some("unsupported_parameter"))
        || r.body
            .to_lowercase()
            .contains("use 'max_completion_tokens'")
}

/// Whether a 400 or 422 refuses `stream_options` (Mistral: 422 `extra_forbidden` at
/// `["body", "stream_options", …]`, "Extra inputs are not permitted"; older Azure: 400
/// "Unrecognized request argument supplied: stream_options").
fn refuses_stream_options(r: &Rejection) -> bool {
    matches!(r.status, 400 | 422) && r.body.contains("stream_options")
}

#[async_trait]
impl LlmProvider for OpenAi {
    async fn complete(
        &self,
        req: &LlmRequest,
        on_delta: Option<DeltaSink>,
    ) -> Result<LlmResponse, LlmError> {
        let system = Self::system_text(req);
        let mut quirks = self.quirks(&req.model);
        // Each refusal that teaches something is learnt for the model and the request sent
        // again at once (not a failure, no backoff); each quirk is learnt once, so this
        // ends.
        let resp = loop {
            let resp = http::send(self.post(&Self::body(req, &system, quirks)), self.limit).await?;
            if resp.status().is_success() {
                break resp;
            }
            let rejection = Rejection::read(resp, self.limit).await;
            let Some((learnt, change)) = quirks.learn(&rejection) else {
                return Err(rejection.into());
            };
            tracing::info!(model = %req.model, "the model's server refused the request: {change} from now on");
            self.quirks
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(req.model.clone(), learnt);
            quirks = learnt;
        };
        let on_delta = on_delta.unwrap_or_else(|| std::sync::Arc::new(|_: &str| {}));
        if is_json(&resp) {
            // A server or proxy that ignores `stream: true` sends the whole answer at once.
            let mut whole = Vec::new();
            let mut body = resp.bytes_stream();
            while let Some(chunk) = http::next_chunk(&mut body, self.limit).await? {
                whole.extend_from_slice(&chunk);
            }
            return stream::Assembly::whole(&whole, &on_delta);
        }
        let mut answer = stream::Assembly::default();
        let mut parser = sse::Parser::default();
        let mut body = resp.bytes_stream();
        let mut done = false;
        'stream: while let Some(chunk) = http::next_chunk(&mut body, self.limit).await? {
            for ev in parser.push(&chunk) {
                if let Some(error) = &ev.error {
                    return Err(stream::error(error));
                }
                if ev.data == "[DONE]" {
                    done = true;
                    break 'stream;
                }
                answer.apply(&ev.data, &on_delta)?;
            }
        }
        match parser.finish() {
            Some(ev) if ev.error.is_some() => {
                return Err(stream::error(ev.error.as_deref().unwrap_or_default()));
            }
            Some(ev) if ev.data == "[DONE]" => done = true,
            Some(ev) => answer.apply(&ev.data, &on_delta)?,
            None => {}
        }
        // A connection closed mid-answer is not an answer: neither `[DONE]` nor a
        // `finish_reason` came. Retried like any dropped connection.
        if !done && !answer.finished() {
            return Err(LlmError::Unavailable(
                "the answer's stream ended before it was complete".into(),
            ));
        }
        Ok(answer.finish(&on_delta))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::llm::{ChatMessage, ToolCall, ToolSpec};

    #[test]
    fn body_has_the_chat_completions_shape() {
        let mut calls = ChatMessage::new(Role::Assistant, "");
        calls.tool_calls.push(ToolCall {
            id: "c1".into(),
            name: "read_file".into(),
            arguments: r#"{"path":"a"}"#.into(),
            extra_content: None,
        });
        let mut result = ChatMessage::new(Role::Tool, "contents");
        result.tool_call_id = Some("c1".into());
        let req = LlmRequest {
            model: "m".into(),
            system: "sys".into(),
            system_dynamic: "now".into(),
            messages: vec![
                ChatMessage::new(Role::System, "be brief"),
                ChatMessage::new(Role::User, "hi"),
                calls,
                result,
            ],
            tools: vec![ToolSpec {
                name: "read_file".into(),
                description: "Read".into(),
                parameters: json!({"type": "object"}),
            }]
            .into(),
            answer_only: false,
            max_tokens: 7,
        };
        let system = OpenAi::system_text(&req);
        let streamed =
            serde_json::to_value(OpenAi::body(&req, &system, Quirks::default())).unwrap();
        assert_eq!(
            streamed,
            json!({
                "model": "m",
                "max_tokens": 7,
                "messages": [
                    {"role": "system", "content": "sys\n\nnow\n\nbe brief"},
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
        let no_system = serde_json::to_value(OpenAi::body(&req, "", Quirks::default())).unwrap();
        assert_eq!(no_system["messages"][0]["role"], "user");
        let quirks = Quirks {
            completion_tokens: true,
            no_stream_options: true,
            no_extra_content: true,
        };
        let reasoning = serde_json::to_value(OpenAi::body(&req, &system, quirks)).unwrap();
        assert_eq!(reasoning["max_completion_tokens"], 7);
        assert!(reasoning.get("max_tokens").is_none(), "{reasoning}");
        assert!(reasoning.get("stream_options").is_none(), "{reasoning}");
    }
}
