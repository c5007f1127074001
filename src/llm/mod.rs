//! LLM providers behind one trait with normalized request and response types.
//!
//! - [`openai`]: any OpenAI-compatible Chat Completions API.
//! - [`anthropic`]: the Anthropic Messages API.
//! - [`resilient`]: retries with backoff, fallback models and cool-downs, wrapping either.
//! - [`sse`]: the server-sent-events line splitter both providers stream with.
//! - `http`: the client, time limits and error classification both providers share.
//!
//! Retries, fallbacks and cool-downs wrap a provider rather than living inside it.

pub mod anthropic;
mod http;
pub mod openai;
pub mod resilient;
pub mod sse;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

/// Who said a message in a conversation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    System,
    User,
    Assistant,
    Tool,
}

/// A tool call the model asked for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    /// JSON text of the arguments, as the model wrote it.
    pub arguments: String,
    /// What an OpenAI-compatible server attached to the call for itself, sent back with
    /// it as it came (opaque): Gemini's `extra_content.google.thought_signature`, without
    /// which it refuses the next request. Stored with the session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extra_content: Option<serde_json::Value>,
}

/// One message of a conversation, provider-neutral.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChatMessage {
    pub role: Role,
    #[serde(default)]
    pub content: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// For `Role::Tool`: the call this result answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// For an assistant message of the running turn: what the model thought before it
    /// (DeepSeek's `reasoning_content`), sent back within the turn as DeepSeek's thinking
    /// mode requires. Never shown, and never stored: later turns need none of it, and
    /// other servers may refuse the field.
    #[serde(skip)]
    pub reasoning: String,
}

impl ChatMessage {
    pub fn new(role: Role, content: impl Into<String>) -> Self {
        Self {
            role,
            content: content.into(),
            tool_calls: Vec::new(),
            tool_call_id: None,
            reasoning: String::new(),
        }
    }
}

/// A tool offered to the model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    /// JSON schema of the arguments object.
    pub parameters: serde_json::Value,
}

/// One completion request.
#[derive(Debug, Clone, Default)]
pub struct LlmRequest {
    pub model: String,
    /// The stable part of the system prompt (identity, workspace files, skills): a cacheable
    /// prefix that stays byte-identical between turns.
    pub system: String,
    /// The small per-request part (date and time, model): sent after the stable prefix.
    pub system_dynamic: String,
    pub messages: Vec<ChatMessage>,
    /// Shared: a turn offers the same tools on every request.
    pub tools: Arc<[ToolSpec]>,
    /// The model must answer in text now (the loop's last step): it may call no tool,
    /// though the history may hold calls. Each provider says so as its API allows.
    pub answer_only: bool,
    pub max_tokens: u32,
}

/// Token counts reported by the provider.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
}

/// The model's answer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LlmResponse {
    pub text: String,
    pub tool_calls: Vec<ToolCall>,
    pub usage: Usage,
    pub finish_reason: String,
    /// What the model thought before it answered, where the server sends it apart
    /// (`reasoning_content`): never shown.
    pub reasoning: String,
}

impl LlmResponse {
    /// Whether the output token limit (`max_tokens`) cut the answer off: OpenAI's
    /// `finish_reason` `length`, Anthropic's `stop_reason` `max_tokens`.
    pub fn cut_off(&self) -> bool {
        matches!(self.finish_reason.as_str(), "length" | "max_tokens")
    }
}

/// What an assistant message without text or tool calls is sent back as: providers and
/// strict chat templates refuse an empty assistant turn, and an empty one teaches the model
/// that saying nothing is an answer.
pub(crate) const NO_ANSWER: &str = "(no answer)";

/// A tool call's arguments as the JSON object a provider takes back in the history: as the
/// model wrote them, `{}` when it wrote none, and otherwise (cut off by the output limit,
/// or not JSON) the model's text kept whole under `unparsed_arguments`: the model sees
/// what it sent, yet servers that refuse a history whose arguments are not an object
/// (Anthropic, Ollama, vLLM templates) accept it.
pub(crate) fn arguments_object(raw: &str) -> serde_json::Value {
    match serde_json::from_str::<serde_json::Value>(raw) {
        Ok(v) if v.is_object() => v,
        _ if raw.trim().is_empty() => serde_json::json!({}),
        _ => serde_json::json!({ "unparsed_arguments": raw }),
    }
}

/// Why a request failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum LlmError {
    /// 429 (with the server's `Retry-After` when it sent one).
    #[error("rate limited by the model provider")]
    RateLimited { retry_after: Option<Duration> },
    /// 5xx / 529, a timeout or a connection cut: worth retrying.
    #[error("model provider unavailable: {0}")]
    Unavailable(String),
    /// No connection could be made (refused, no such host, connect timeout): retried a few
    /// times only, and the fallback models (on the same server) are not tried.
    #[error("model provider unreachable: {0}")]
    Unreachable(String),
    /// 5xx / 529 with the server's `Retry-After`: retried when it says.
    #[error("model provider unavailable: {detail} (retry after {retry_after:?})")]
    Overloaded {
        retry_after: Duration,
        detail: String,
    },
    /// The prompt is larger than the model's context window.
    #[error("the conversation is too long for the model's context window")]
    ContextOverflow,
    /// The account has no quota or credit left (OpenAI's 429 `insufficient_quota`, a 402):
    /// waiting does not help, paying does.
    #[error("the model provider's quota or credit is used up: HTTP {status}: {detail}")]
    QuotaExhausted { status: u16, detail: String },
    /// Refused for good (bad key, bad request).
    #[error("model provider refused the request: {}{detail}", .status.map(|s| format!("HTTP {s}: ")).unwrap_or_default())]
    Refused { status: Option<u16>, detail: String },
    /// The answer could not be understood.
    #[error("unreadable answer from the model provider: {0}")]
    Protocol(String),
}

impl LlmError {
    /// What a user is told: the kind of failure and the HTTP status, never the provider's
    /// own words (which the logs keep).
    pub fn brief(&self) -> String {
        match self {
            LlmError::RateLimited { .. } => "the model provider is rate limiting requests".into(),
            LlmError::Unavailable(_) | LlmError::Overloaded { .. } => {
                "the model provider is unavailable".into()
            }
            LlmError::Unreachable(_) => "the model provider cannot be reached".into(),
            LlmError::ContextOverflow => "the conversation is too long for the model".into(),
            LlmError::QuotaExhausted { .. } => {
                "the gateway's account at the model provider has no quota or credit left".into()
            }
            LlmError::Refused {
                status: Some(s), ..
            } => format!("the model provider refused the request, HTTP {s}"),
            LlmError::Refused { .. } => "the model provider refused the request".into(),
            LlmError::Protocol(_) => "the model provider's answer could not be read".into(),
        }
    }

    /// What the person in the chat can do about it: wait for a passing failure, or have the
    /// gateway's owner fix a setting that will not fix itself.
    pub fn advice(&self) -> &'static str {
        match self {
            LlmError::Refused {
                status: Some(401 | 403),
                ..
            } => {
                "The provider did not accept the gateway's API key: its owner should check llm.api_key_env."
            }
            LlmError::Refused {
                status: Some(404), ..
            } => {
                "The provider does not know the model: the gateway's owner should check llm.model."
            }
            LlmError::QuotaExhausted { .. } => {
                "Retrying will not help: the gateway's owner should check the billing with the provider."
            }
            LlmError::Refused { .. } | LlmError::Protocol(_) => {
                "The gateway's log has the details for its owner."
            }
            _ => "Please try again in a moment.",
        }
    }

    /// Worth retrying the same model (429, 5xx, 529, connection errors).
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            LlmError::RateLimited { .. }
                | LlmError::Unavailable(_)
                | LlmError::Overloaded { .. }
                | LlmError::Unreachable(_)
        )
    }
}

impl LlmRequest {
    /// The whole system prompt as one text (stable prefix, then the dynamic suffix).
    pub fn system_text(&self) -> String {
        match (self.system.is_empty(), self.system_dynamic.is_empty()) {
            (_, true) => self.system.clone(),
            (true, false) => self.system_dynamic.clone(),
            (false, false) => format!("{}\n\n{}", self.system, self.system_dynamic),
        }
    }
}

/// Build the configured provider (`llm.provider`), wrapped in retries, fallbacks and
/// cool-downs. The API key is read from the variable `llm.api_key_env` names.
pub fn from_config(cfg: &crate::config::LlmConfig) -> Result<Arc<dyn LlmProvider>, LlmError> {
    let api_key = crate::config::secret(&cfg.api_key_env);
    let timeout = cfg.request_timeout.get();
    let inner: Arc<dyn LlmProvider> = match cfg.provider {
        crate::config::Provider::Openai => {
            Arc::new(openai::OpenAi::new(&cfg.base_url, api_key, timeout)?)
        }
        crate::config::Provider::Anthropic => {
            Arc::new(anthropic::Anthropic::new(&cfg.base_url, api_key, timeout)?)
        }
    };
    Ok(Arc::new(resilient::Resilient::new(
        inner,
        cfg.fallback_models.clone(),
        cfg.max_retries,
    )))
}

/// Receives streamed text as it arrives.
pub type DeltaSink = Arc<dyn Fn(&str) + Send + Sync>;

/// A chat model.
#[async_trait]
pub trait LlmProvider: Send + Sync + 'static {
    /// Complete `req`; when `on_delta` is given, stream and pass text deltas to it.
    async fn complete(
        &self,
        req: &LlmRequest,
        on_delta: Option<DeltaSink>,
    ) -> Result<LlmResponse, LlmError>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tool_call_stored_without_extra_content_still_loads_and_stores_the_same() {
        let old = r#"{"id":"c1","name":"read_file","arguments":"{}"}"#;
        let call: ToolCall = serde_json::from_str(old).unwrap();
        assert_eq!(call.extra_content, None);
        assert_eq!(serde_json::to_string(&call).unwrap(), old);
    }
}
