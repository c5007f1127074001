//! The tool loop shared by turns and sub-agents: call the model, run the tool calls it
//! asks for in order (each under `agent.tool_timeout`), feed the results back, and stop on
//! a final answer, the iteration limit, cancellation or an error. Cancellation is checked
//! between every step; unrun tool calls get a "cancelled" result so the history stays valid.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use futures_util::future::BoxFuture;

use super::context;
use super::steering;
use super::tool::ToolContext;
use super::tools::Registry;
use crate::llm::{ChatMessage, DeltaSink, LlmError, LlmProvider, LlmRequest, Role, ToolSpec};
use crate::metrics::Metrics;

/// The fixed inputs of one loop.
pub struct LoopSpec {
    pub model: String,
    pub system: String,
    pub system_dynamic: String,
    pub max_tokens: u32,
    pub max_iterations: u32,
    pub tool_timeout: Duration,
    pub context_window: u32,
    /// Steering for the whole turn (channel, origin, re-anchor…), inserted before the last
    /// user message.
    pub steering: Vec<String>,
    /// The current user text (for the tool nudge).
    pub user_text: String,
}

/// Where the loop stands; kept across a compaction retry.
#[derive(Default)]
pub struct LoopState {
    /// History ending with the current user message.
    pub history: Vec<ChatMessage>,
    /// Assistant and tool messages produced in this turn, in order (to be stored).
    pub produced: Vec<ChatMessage>,
    pub iteration: u32,
    pub empty_retried: bool,
    /// Tokens the model reported over the turn's requests.
    pub usage: switchboard_channel::TokenUsage,
}

/// The result given to tool calls `/stop` (or shutdown) cut off or kept from running.
const STOPPED: &str = "cancelled: the user stopped this turn";

/// The result of a call whose arguments the output token limit cut off: run as invalid
/// JSON, the model would be told only that, and send the same too-long call again.
const CUT_OFF: &str = "error: not run: this call was cut off by the output token limit (max_tokens) before its arguments were complete. Send smaller pieces: split long content over several calls (e.g. write the first part of a file, then add the rest with further calls).";

/// Whether a call's arguments are whole: a JSON object (or none at all).
fn whole_arguments(arguments: &str) -> bool {
    arguments.trim().is_empty()
        || serde_json::from_str::<serde_json::Value>(arguments).is_ok_and(|v| v.is_object())
}

/// Saves the loop's progress (a turn's, see `resume`); awaited before the loop goes on,
/// so what a tool did is on disk before the next one runs.
pub type Progress<'a> = dyn Fn(&LoopState) -> BoxFuture<'static, ()> + Send + Sync + 'a;

/// How the loop ended.
#[derive(Debug)]
pub enum LoopEnd {
    /// The model's final answer.
    Answer(String),
    /// `agent.max_iterations` was reached; the text is the honest note for the user.
    Limit(String),
    Cancelled,
    /// The provider said the prompt is too long.
    Overflow,
    Failed(LlmError),
}

/// Put steering messages before the last user message of `history`, as `Role::System`
/// messages that each provider places as its dialect allows (OpenAI-compatible servers get
/// them in the one system message, Anthropic in the user's turn).
fn with_steering(history: Vec<ChatMessage>, steering: &[String]) -> Vec<ChatMessage> {
    if steering.is_empty() {
        return history;
    }
    let at = history
        .iter()
        .rposition(|m| m.role == Role::User)
        .unwrap_or(history.len());
    let mut out = Vec::with_capacity(history.len() + steering.len());
    let mut rest = history;
    let tail = rest.split_off(at);
    out.extend(rest);
    out.extend(
        steering
            .iter()
            .map(|s| ChatMessage::new(Role::System, s.clone())),
    );
    out.extend(tail);
    out
}

/// Run the loop until it ends.
#[allow(clippy::too_many_arguments)]
pub async fn run(
    llm: &dyn LlmProvider,
    tools: &Registry,
    ctx: &ToolContext,
    spec: &LoopSpec,
    state: &mut LoopState,
    sink: Option<DeltaSink>,
    metrics: &Metrics,
    progress: Option<&Progress<'_>>,
) -> LoopEnd {
    let save = |state: &LoopState| progress.map(|p| p(state));
    let specs: Arc<[ToolSpec]> = tools.specs();
    let budget = context::input_budget(
        spec.context_window,
        spec.max_tokens,
        context::schema_tokens(&specs),
        context::tokens(&spec.system) + context::tokens(&spec.system_dynamic),
    );
    let names = tools.names();
    while state.iteration < spec.max_iterations {
        if ctx.cancel.is_cancelled() {
            return LoopEnd::Cancelled;
        }
        state.iteration += 1;
        let mut steer = spec.steering.clone();
        steer.extend(steering::iteration_budget(
            state.iteration,
            spec.max_iterations,
        ));
        if state.iteration == 1 || state.empty_retried {
            steer.extend(steering::tool_nudge(
                &spec.user_text,
                &names,
                state.empty_retried && state.produced.is_empty(),
            ));
        }
        let extra: usize = context::total(&state.produced)
            + steer.iter().map(|s| context::tokens(s) + 4).sum::<usize>();
        let (history, dropped) = context::fit(&state.history, extra, budget);
        steer.extend(steering::history_cut(dropped));
        let mut messages = with_steering(history, &steer);
        let mut produced = state.produced.clone();
        if context::total(&messages) + context::total(&produced) > budget {
            context::shorten_old_tool_results(&mut produced);
        }
        messages.extend(produced);
        let req = LlmRequest {
            model: spec.model.clone(),
            system: spec.system.clone(),
            system_dynamic: spec.system_dynamic.clone(),
            messages,
            tools: specs.clone(),
            // The last step's calls could not be followed by an answer: it must answer.
            answer_only: state.iteration == spec.max_iterations,
            max_tokens: spec.max_tokens,
        };
        metrics.llm_requests.fetch_add(1, Ordering::Relaxed);
        // Text an earlier round streamed ("Let me check.") is set apart from this round's.
        let said_before = last_said(&state.produced).is_some();
        let round_sink = match &sink {
            Some(s) if said_before => Some(separated(s.clone())),
            other => other.clone(),
        };
        let resp = tokio::select! {
            r = llm.complete(&req, round_sink) => r,
            _ = ctx.cancel.cancelled() => return LoopEnd::Cancelled,
        };
        let mut resp = match resp {
            Ok(r) => r,
            Err(LlmError::ContextOverflow) => {
                metrics.llm_errors.fetch_add(1, Ordering::Relaxed);
                state.iteration -= 1;
                return LoopEnd::Overflow;
            }
            Err(e) => {
                metrics.llm_errors.fetch_add(1, Ordering::Relaxed);
                return LoopEnd::Failed(e);
            }
        };
        metrics
            .llm_prompt_tokens
            .fetch_add(resp.usage.prompt_tokens, Ordering::Relaxed);
        metrics
            .llm_completion_tokens
            .fetch_add(resp.usage.completion_tokens, Ordering::Relaxed);
        state.usage.prompt_tokens += resp.usage.prompt_tokens;
        state.usage.completion_tokens += resp.usage.completion_tokens;
        if resp.tool_calls.is_empty() {
            if resp.text.trim().is_empty() && state.produced.is_empty() && !state.empty_retried {
                // An empty first answer is retried once, with a nudge.
                state.empty_retried = true;
                state.iteration -= 1;
                continue;
            }
            // A model that gave its answer beside a tool call ("The answer is 42." and a
            // look at a folder) may end with nothing more to say: the answer it gave
            // stands, rather than an empty reply.
            let text = match last_said(&state.produced) {
                Some(said) if resp.text.trim().is_empty() => said.to_string(),
                _ => resp.text,
            };
            state
                .produced
                .push(ChatMessage::new(Role::Assistant, text.clone()));
            return LoopEnd::Answer(text);
        }
        let mut call_msg = ChatMessage::new(Role::Assistant, resp.text.clone());
        call_msg.tool_calls = resp.tool_calls.clone();
        // Sent back within this turn only (DeepSeek's thinking mode wants it), never stored.
        call_msg.reasoning = std::mem::take(&mut resp.reasoning);
        state.produced.push(call_msg);
        if let Some(saved) = save(state) {
            saved.await;
        }
        let mut cancelled = false;
        for call in &resp.tool_calls {
            let content = if cancelled || ctx.cancel.is_cancelled() {
                cancelled = true;
                STOPPED.to_string()
            } else if resp.cut_off() && !whole_arguments(&call.arguments) {
                CUT_OFF.to_string()
            } else {
                let result = tokio::select! {
                    // A tool that ends because its turn was cancelled (`exec` kills its
                    // command) is cut off, whatever it says.
                    biased;
                    _ = ctx.cancel.cancelled() => None,
                    r = tools.call(&call.name, &call.arguments, ctx, spec.tool_timeout) => Some(r),
                };
                match result {
                    // Secrets are already out of a result (the registry takes them out
                    // before its cut); an error may quote one too (a platform's answer).
                    Some(Ok(text)) => text,
                    Some(Err(e)) => {
                        tracing::debug!(tool = %call.name, "tool error: {e}");
                        switchboard_channel::redact_owned(format!("error: {e}"))
                    }
                    None => {
                        cancelled = true;
                        STOPPED.to_string()
                    }
                }
            };
            let mut result = ChatMessage::new(Role::Tool, content);
            result.tool_call_id = Some(call.id.clone());
            state.produced.push(result);
            if !cancelled {
                if let Some(saved) = save(state) {
                    saved.await;
                }
            }
        }
        if cancelled {
            return LoopEnd::Cancelled;
        }
    }
    let note = format!(
        "I stopped after {} steps without finishing (my limit per message). Tell me if I should continue from where I got.",
        spec.max_iterations
    );
    state
        .produced
        .push(ChatMessage::new(Role::Assistant, note.clone()));
    LoopEnd::Limit(note)
}

/// The last text the model said in `produced` (beside a tool call), if it said any.
fn last_said(produced: &[ChatMessage]) -> Option<&str> {
    produced
        .iter()
        .rev()
        .find(|m| m.role == Role::Assistant && !m.content.trim().is_empty())
        .map(|m| m.content.as_str())
}

/// `sink` with a paragraph break before its first piece of text.
fn separated(sink: DeltaSink) -> DeltaSink {
    let first = std::sync::atomic::AtomicBool::new(true);
    Arc::new(move |d: &str| {
        if first.swap(false, Ordering::Relaxed) {
            sink("\n\n");
        }
        sink(d);
    })
}
