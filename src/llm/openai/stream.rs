//! Assembling a streamed Chat Completions answer from its `chat.completion.chunk`s: text
//! deltas (a leading `<think>` block taken out, see [`super::think`]), usage, finish
//! reason, and tool calls sent in fragments; and reading a whole `chat.completion` that
//! came instead.

use serde_json::{Value, json};

use super::think::Think;
use crate::llm::http::classify;
use crate::llm::{DeltaSink, LlmError, LlmResponse, ToolCall, Usage};

/// Highest tool-call `index` accepted in a fragment.
const MAX_INDEX: usize = 64;

/// A streamed answer being put together.
#[derive(Default)]
pub(super) struct Assembly {
    out: LlmResponse,
    calls: Calls,
    think: Think,
}

impl Assembly {
    /// Fold one streamed chunk (its `data:` text) into the answer.
    pub fn apply(&mut self, data: &str, on_delta: &DeltaSink) -> Result<(), LlmError> {
        let v: Value = serde_json::from_str(data)
            .map_err(|e| LlmError::Protocol(format!("bad stream chunk: {e}")))?;
        if let Some(err) = v.get("error") {
            return Err(error_object(err));
        }
        if let Some(u) = v.get("usage").filter(|u| !u.is_null()) {
            self.out.usage = usage(u);
        }
        let Some(choice) = v["choices"].get(0) else {
            return Ok(());
        };
        if let Some(r) = choice["finish_reason"].as_str() {
            self.out.finish_reason = r.to_string();
        }
        let delta = &choice["delta"];
        if let Some(t) = delta["content"].as_str().filter(|t| !t.is_empty()) {
            let shown = self.think.push(t);
            self.show(&shown, on_delta);
        }
        // Never passed on: reasoning is not the answer.
        if let Some(r) = delta["reasoning_content"].as_str() {
            self.out.reasoning.push_str(r);
        }
        for fragment in delta["tool_calls"].as_array().into_iter().flatten() {
            self.calls.push(fragment)?;
        }
        Ok(())
    }

    /// A whole `chat.completion` (from a server or proxy that ignores `stream: true`),
    /// taken as one chunk holding all of it.
    pub fn whole(body: &[u8], on_delta: &DeltaSink) -> Result<LlmResponse, LlmError> {
        let v: Value = serde_json::from_slice(body)
            .map_err(|e| LlmError::Protocol(format!("bad completion: {e}")))?;
        if let Some(err) = v.get("error") {
            return Err(error_object(err));
        }
        let choice = &v["choices"][0];
        let message = &choice["message"];
        let calls: Vec<Value> = message["tool_calls"]
            .as_array()
            .into_iter()
            .flatten()
            .enumerate()
            .map(|(index, c)| {
                let mut c = c.clone();
                c["index"] = json!(index);
                // Some servers write the arguments as an object, not as its JSON text.
                if let Some(args) = c["function"]["arguments"].as_object() {
                    c["function"]["arguments"] = json!(Value::from(args.clone()).to_string());
                }
                c
            })
            .collect();
        let chunk = json!({
            "choices": [{
                "delta": {"content": message["content"], "tool_calls": calls,
                          "reasoning_content": message["reasoning_content"]},
                "finish_reason": choice["finish_reason"],
            }],
            "usage": v["usage"],
        });
        let mut answer = Self::default();
        answer.apply(&chunk.to_string(), on_delta)?;
        Ok(answer.finish(on_delta))
    }

    /// Text of the answer proper: streamed and kept.
    fn show(&mut self, text: &str, on_delta: &DeltaSink) {
        if !text.is_empty() {
            on_delta(text);
            self.out.text.push_str(text);
        }
    }

    /// Whether a finish reason came (an answer whose `[DONE]` got lost is still whole).
    pub fn finished(&self) -> bool {
        !self.out.finish_reason.is_empty()
    }

    /// The answer (with the text held back until the content ended, if it was not
    /// reasoning); calls without a name are dropped, calls without an id get one.
    pub fn finish(mut self, on_delta: &DeltaSink) -> LlmResponse {
        let rest = self.think.finish();
        self.show(&rest, on_delta);
        let mut out = self.out;
        out.tool_calls = self
            .calls
            .calls
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
                extra_content: c.extra_content,
            })
            .collect();
        out
    }
}

#[derive(Default)]
struct PartialCall {
    id: String,
    name: String,
    arguments: String,
    extra_content: Option<Value>,
}

/// Tool calls being assembled, in the order they began.
#[derive(Default)]
struct Calls {
    calls: Vec<PartialCall>,
    /// By fragment `index`: the position in `calls` of the call that index now feeds.
    slots: Vec<Option<usize>>,
    /// The call the last fragment fed (a fragment without an `index` goes on with it).
    last: Option<usize>,
}

impl Calls {
    /// Add one fragment. Fragments of one call share an `index`, the id and name come with
    /// the first. A fragment that brings a name and another id than its slot's begins a
    /// new call: Ollama sends parallel calls whole, each with its own id, all with
    /// `index: 0` (ollama/ollama#15457), and they must not run together into one. A
    /// fragment without a name goes on with its slot's call whatever its id: LM Studio
    /// gives every argument fragment an id of its own. A name sent again (MiniMax repeats
    /// it on every fragment) is the name already there.
    fn push(&mut self, fragment: &Value) -> Result<(), LlmError> {
        let index = match fragment["index"].as_u64() {
            Some(i) if i as usize > MAX_INDEX => {
                return Err(LlmError::Protocol(format!(
                    "tool call index {i} out of range"
                )));
            }
            Some(i) => Some(i as usize),
            None => None,
        };
        let id = fragment["id"].as_str().filter(|id| !id.is_empty());
        let name = fragment["function"]["name"]
            .as_str()
            .filter(|n| !n.is_empty());
        let current = match index {
            Some(i) => self.slots.get(i).copied().flatten(),
            None => self.last,
        };
        let same_call = |at: usize| {
            let known = self.calls[at].id.as_str();
            name.is_none() || id.is_none_or(|id| [id, ""].contains(&known))
        };
        let at = match current {
            Some(at) if same_call(at) => at,
            _ => {
                self.calls.push(PartialCall::default());
                let at = self.calls.len() - 1;
                if let Some(i) = index {
                    if self.slots.len() <= i {
                        self.slots.resize(i + 1, None);
                    }
                    self.slots[i] = Some(at);
                }
                at
            }
        };
        self.last = Some(at);
        let c = &mut self.calls[at];
        if let (Some(id), true) = (id, c.id.is_empty()) {
            c.id = id.to_string();
        }
        match name {
            Some(n) if c.name.is_empty() => c.name = n.to_string(),
            Some(n) if n != c.name => c.name.push_str(n),
            _ => {}
        }
        if let Some(a) = fragment["function"]["arguments"].as_str() {
            c.arguments.push_str(a);
        }
        if let Some(extra) = fragment.get("extra_content").filter(|v| !v.is_null()) {
            c.extra_content = Some(extra.clone());
        }
        Ok(())
    }
}

/// A failure the server sent in the stream (an SSE `error:` field's text): what the
/// same words in an HTTP answer would be.
pub(super) fn error(text: &str) -> LlmError {
    match serde_json::from_str::<Value>(text) {
        Ok(err) if err.is_object() => error_object(&err),
        _ => classify(500, None, text),
    }
}

/// An error object inside a stream (`{"code": 400, "message": …}`): its `code` is the
/// HTTP status the server would have answered with when it is one (OpenRouter, llama.cpp),
/// so a refused request is not retried for minutes; otherwise a server error.
fn error_object(err: &Value) -> LlmError {
    let status = err["code"]
        .as_u64()
        .filter(|c| (400..=599).contains(c))
        .map_or(500, |c| c as u16);
    classify(status, None, &err.to_string())
}

fn usage(u: &Value) -> Usage {
    Usage {
        prompt_tokens: u["prompt_tokens"].as_u64().unwrap_or(0),
        completion_tokens: u["completion_tokens"].as_u64().unwrap_or(0),
    }
}
