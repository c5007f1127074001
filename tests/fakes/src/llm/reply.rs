//! Scripted replies of the fake LLM: what the "model" answers, and injected faults.
//!
//! A [`Reply`] is provider-neutral; the OpenAI and Anthropic renderers turn it into
//! each provider's wire format (including provider-shaped error bodies).

use std::time::Duration;

use serde_json::Value;

/// One scripted answer of the fake LLM.
///
/// Build it with the constructors ([`Reply::text`], [`Reply::tool_call`],
/// [`Reply::rate_limited`], …) and refine it builder-style
/// ([`Reply::with_tool_call`], [`Reply::with_delay`], [`Reply::truncated`], …).
#[derive(Debug, Clone, PartialEq)]
pub struct Reply {
    pub(crate) kind: ReplyKind,
    /// Extra latency before the response headers are sent.
    pub(crate) delay: Duration,
    /// Pause between two streamed events (zero: the whole stream is sent at once).
    pub(crate) chunk_delay: Duration,
    /// Explicit token usage `(prompt, completion)`; estimated from sizes when `None`.
    pub(crate) usage: Option<(u64, u64)>,
    /// Anthropic only: prompt tokens read from and written to the prompt cache, reported
    /// apart from `input_tokens` as Anthropic does.
    pub(crate) cached: (u64, u64),
    /// `Retry-After` header (seconds) of an error reply.
    pub(crate) retry_after: Option<u64>,
    /// A streamed answer breaks after this many events.
    pub(crate) stream_fault: Option<(usize, StreamFault)>,
    /// SSE comment lines (`: keep-alive`) are mixed into a streamed answer.
    pub(crate) sse_comments: bool,
    /// OpenAI stream: tool calls come as Ollama sends them (see
    /// [`Reply::with_ollama_tool_calls`]).
    pub(crate) ollama_calls: bool,
    /// A streamed request gets the whole JSON answer (see [`Reply::ignoring_stream`]).
    pub(crate) ignore_stream: bool,
    /// The answer is these SSE lines verbatim (see [`Reply::sse_lines`]).
    pub(crate) raw_events: Option<Vec<String>>,
}

/// How a streamed answer breaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StreamFault {
    /// A provider-shaped error event ends the stream (no `[DONE]` / `message_stop`).
    ErrorEvent,
    /// The connection is cut: the chunked body never terminates properly.
    Disconnect,
    /// The body ends cleanly, but early: no finish reason, no `[DONE]` / `message_stop`.
    EndEarly,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum ReplyKind {
    /// A successful completion.
    Message {
        text: String,
        tool_calls: Vec<ToolCall>,
        /// The model hit `max_tokens` (`length` / `max_tokens`).
        truncated: bool,
    },
    /// An HTTP error.
    Error(ErrorReply),
}

/// Errors, either verbatim or shaped like the provider that is asked.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum ErrorReply {
    /// A status and a body sent as-is.
    Raw { status: u16, body: Value },
    /// 429.
    RateLimited,
    /// 500.
    Server,
    /// 529 (`overloaded_error`).
    Overloaded,
    /// 400 context length exceeded / prompt is too long.
    ContextOverflow,
}

/// A tool call the fake model makes.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    /// Call id; generated (`call_…` / `toolu_…`) when `None`.
    pub id: Option<String>,
    /// Function name.
    pub name: String,
    /// Arguments as sent on the wire (a JSON string, possibly invalid JSON on purpose).
    pub arguments: String,
}

impl ToolCall {
    /// A call of `name` with JSON `arguments`.
    pub fn new(name: impl Into<String>, arguments: Value) -> Self {
        Self {
            id: None,
            name: name.into(),
            arguments: arguments.to_string(),
        }
    }

    /// A call whose argument string is sent verbatim (e.g. malformed JSON).
    pub fn raw(name: impl Into<String>, arguments: impl Into<String>) -> Self {
        Self {
            id: None,
            name: name.into(),
            arguments: arguments.into(),
        }
    }

    /// Sets the call id instead of a generated one.
    pub fn with_id(mut self, id: impl Into<String>) -> Self {
        self.id = Some(id.into());
        self
    }
}

impl Reply {
    fn message(text: String, tool_calls: Vec<ToolCall>) -> Self {
        Self::from_kind(ReplyKind::Message {
            text,
            tool_calls,
            truncated: false,
        })
    }

    fn from_kind(kind: ReplyKind) -> Self {
        Self {
            kind,
            delay: Duration::ZERO,
            chunk_delay: Duration::ZERO,
            usage: None,
            cached: (0, 0),
            retry_after: None,
            stream_fault: None,
            sse_comments: false,
            ollama_calls: false,
            ignore_stream: false,
            raw_events: None,
        }
    }

    /// A plain text answer (`finish_reason: "stop"` / `stop_reason: "end_turn"`).
    pub fn text(text: impl Into<String>) -> Self {
        Self::message(text.into(), Vec::new())
    }

    /// One tool call with JSON arguments (`tool_calls` / `tool_use`).
    pub fn tool_call(name: impl Into<String>, arguments: Value) -> Self {
        Self::message(String::new(), vec![ToolCall::new(name, arguments)])
    }

    /// Several tool calls in one answer, in order.
    pub fn tool_calls<N: Into<String>>(calls: impl IntoIterator<Item = (N, Value)>) -> Self {
        let calls = calls
            .into_iter()
            .map(|(name, args)| ToolCall::new(name, args))
            .collect();
        Self::message(String::new(), calls)
    }

    /// An answer made of fully specified [`ToolCall`]s (ids, raw argument strings).
    pub fn calls(calls: impl IntoIterator<Item = ToolCall>) -> Self {
        Self::message(String::new(), calls.into_iter().collect())
    }

    /// An answer with no text and no tool call.
    pub fn empty() -> Self {
        Self::message(String::new(), Vec::new())
    }

    /// The default responder's answer: `echo: <text>`.
    pub fn echo(text: &str) -> Self {
        Self::text(format!("echo: {text}"))
    }

    /// A `200 text/event-stream` answer made of `events` as written, each sent as it is
    /// (end each with a blank line): a server's own dialect (an SSE `error:` field, a
    /// `<think>` block in the content, tool-call fragments as LM Studio or Gemini send
    /// them). Stream settings ([`FakeLlm::set_stream_chunk_chars`](super::FakeLlm::set_stream_chunk_chars),
    /// `include_usage`) do not apply; [`Reply::with_chunk_delay`] does.
    pub fn sse_lines<S: Into<String>>(events: impl IntoIterator<Item = S>) -> Self {
        let mut reply = Self::empty();
        reply.raw_events = Some(events.into_iter().map(Into::into).collect());
        reply
    }

    /// An HTTP error with a verbatim JSON body.
    pub fn error(status: u16, body: Value) -> Self {
        Self::from_kind(ReplyKind::Error(ErrorReply::Raw { status, body }))
    }

    /// 429 in the provider's shape, with `Retry-After: secs`.
    pub fn rate_limited(retry_after_secs: u64) -> Self {
        Self::from_kind(ReplyKind::Error(ErrorReply::RateLimited))
            .with_retry_after(retry_after_secs)
    }

    /// 500 in the provider's shape.
    pub fn server_error() -> Self {
        Self::from_kind(ReplyKind::Error(ErrorReply::Server))
    }

    /// 529 overloaded in the provider's shape.
    pub fn overloaded() -> Self {
        Self::from_kind(ReplyKind::Error(ErrorReply::Overloaded))
    }

    /// 400 context overflow: OpenAI `code: "context_length_exceeded"`, Anthropic
    /// `invalid_request_error` "prompt is too long".
    pub fn context_overflow() -> Self {
        Self::from_kind(ReplyKind::Error(ErrorReply::ContextOverflow))
    }

    /// Adds a tool call (on a text reply: text + tool calls).
    pub fn with_tool_call(self, name: impl Into<String>, arguments: Value) -> Self {
        self.with_call(ToolCall::new(name, arguments))
    }

    /// Adds a fully specified tool call. No effect on an error reply.
    pub fn with_call(mut self, call: ToolCall) -> Self {
        if let ReplyKind::Message { tool_calls, .. } = &mut self.kind {
            tool_calls.push(call);
        }
        self
    }

    /// Adds a `Retry-After` header to an error reply (replaces the one of
    /// [`Reply::rate_limited`]). No effect on a successful reply.
    pub fn with_retry_after(mut self, secs: u64) -> Self {
        if self.is_error() {
            self.retry_after = Some(secs);
        }
        self
    }

    /// Waits this long before answering (on top of [`super::FakeLlm::set_delay`]).
    /// Uses `tokio::time::sleep`, so it follows a paused test clock.
    pub fn with_delay(mut self, delay: Duration) -> Self {
        self.delay = delay;
        self
    }

    /// Waits this long between streamed events (to test incremental delivery).
    pub fn with_chunk_delay(mut self, delay: Duration) -> Self {
        self.chunk_delay = delay;
        self
    }

    /// When streamed, sends the first `events` SSE events, then a provider-shaped error
    /// event (OpenAI `data: {"error":…}`, Anthropic `event: error` overloaded_error) and
    /// ends without `[DONE]` / `message_stop`. Non-stream requests are unaffected.
    pub fn with_stream_error_after(mut self, events: usize) -> Self {
        self.stream_fault = Some((events, StreamFault::ErrorEvent));
        self
    }

    /// When streamed, sends the first `events` SSE events, then cuts the connection
    /// mid-body (the client sees a body/decoding error). Non-stream requests are
    /// unaffected.
    pub fn with_disconnect_after(mut self, events: usize) -> Self {
        self.stream_fault = Some((events, StreamFault::Disconnect));
        self
    }

    /// When streamed, sends the first `events` SSE events, then ends the body cleanly, as
    /// a proxy that gives up may: no finish reason, no `[DONE]`. Non-stream requests are
    /// unaffected.
    pub fn with_early_end_after(mut self, events: usize) -> Self {
        self.stream_fault = Some((events, StreamFault::EndEarly));
        self
    }

    /// When streamed, mixes SSE comment lines (`: keep-alive`, as OpenRouter sends) before
    /// the first event and between events; SSE clients must ignore them.
    pub fn with_sse_comments(mut self) -> Self {
        self.sse_comments = true;
        self
    }

    /// When streamed by the OpenAI endpoint, sends tool calls as Ollama's OpenAI
    /// compatibility does: each call whole (id, name and all its arguments) in a chunk of
    /// its own, every one with `index: 0` (ollama/ollama#15457), and `role` and `content`
    /// repeated on every chunk.
    pub fn with_ollama_tool_calls(mut self) -> Self {
        self.ollama_calls = true;
        self
    }

    /// Answers a streamed request (`stream: true`) as if it were not streamed: one
    /// `application/json` body, as a proxy or server that ignores `stream` does.
    pub fn ignoring_stream(mut self) -> Self {
        self.ignore_stream = true;
        self
    }

    /// Marks the answer as cut by `max_tokens` (`"length"` / `"max_tokens"`).
    pub fn truncated(mut self) -> Self {
        if let ReplyKind::Message { truncated, .. } = &mut self.kind {
            *truncated = true;
        }
        self
    }

    /// Reports this token usage instead of the size-based estimate.
    pub fn with_usage(mut self, prompt_tokens: u64, completion_tokens: u64) -> Self {
        self.usage = Some((prompt_tokens, completion_tokens));
        self
    }

    /// Anthropic: also report `cache_read_input_tokens` and `cache_creation_input_tokens`
    /// (prompt tokens on top of `input_tokens`).
    pub fn with_cached_prompt(mut self, read: u64, written: u64) -> Self {
        self.cached = (read, written);
        self
    }

    /// The reply's text, if it is a successful answer.
    pub fn text_content(&self) -> Option<&str> {
        match &self.kind {
            ReplyKind::Message { text, .. } => Some(text),
            ReplyKind::Error(_) => None,
        }
    }

    /// Whether this reply is an HTTP error.
    pub fn is_error(&self) -> bool {
        matches!(self.kind, ReplyKind::Error(_))
    }
}

/// Splits `s` into pieces of at most `n` characters (never inside a UTF-8 character).
pub(crate) fn split_chars(s: &str, n: usize) -> impl Iterator<Item = &str> {
    let n = n.max(1);
    let mut rest = s;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let cut = rest
            .char_indices()
            .nth(n)
            .map_or(rest.len(), |(index, _)| index);
        let (head, tail) = rest.split_at(cut);
        rest = tail;
        Some(head)
    })
}

/// A rough token estimate (4 bytes a token, at least 1).
pub(crate) fn estimate_tokens(bytes: usize) -> u64 {
    (bytes as u64).div_ceil(4).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_respects_char_boundaries() {
        let pieces: Vec<&str> = split_chars("héllo wörld", 4).collect();
        assert_eq!(pieces, ["héll", "o wö", "rld"]);
        assert_eq!(split_chars("", 4).count(), 0);
    }
}
