//! Fake LLM server: OpenAI Chat Completions and Anthropic Messages on 127.0.0.1, scripted.
//!
//! Endpoints (each also without the `/v1` prefix, so a base URL with or without `/v1`
//! works):
//! - `POST /v1/chat/completions` — OpenAI, non-stream JSON or SSE (`stream: true`, with a
//!   usage chunk when `stream_options.include_usage` is true, then `data: [DONE]`);
//! - `POST /v1/messages` — Anthropic (requires `anthropic-version` and a key in `x-api-key`
//!   or `Authorization: Bearer`), non-stream JSON or SSE with `event:` lines;
//! - `GET /v1/models` — a model list (Anthropic's shape when `anthropic-version` is sent).
//!
//! Which [`Reply`] answers a request, first match wins:
//! 1. [`FakeLlm::fail_model`] for the request's `model`;
//! 2. the FIFO of [`FakeLlm::push_for`] whose matcher occurs in the last user message;
//! 3. the global FIFO of [`FakeLlm::push`];
//! 4. the default responder: `echo: <last user text>`, or what
//!    [`FakeLlm::set_default`] / [`FakeLlm::set_responder`] set.
//!
//! Faults: provider-shaped errors ([`Reply::rate_limited`] with `Retry-After`,
//! [`Reply::server_error`], [`Reply::overloaded`] 529, [`Reply::context_overflow`],
//! [`Reply::error`] verbatim), latency ([`Reply::with_delay`], [`FakeLlm::set_delay`],
//! [`Reply::with_chunk_delay`] between SSE events), broken streams
//! ([`Reply::with_stream_error_after`], [`Reply::with_disconnect_after`]), a whole JSON
//! answer to a streamed request ([`Reply::ignoring_stream`]), a required API
//! key ([`FakeLlm::require_api_key`]), models that refuse `max_tokens`
//! ([`FakeLlm::refuse_max_tokens`]), Mistral's refusals of `stream_options`
//! ([`FakeLlm::refuse_stream_options`]) and of a user message after a tool result
//! ([`FakeLlm::strict_role_order`]), Ollama's way of streaming parallel tool calls
//! ([`Reply::with_ollama_tool_calls`]), any server's own stream dialect verbatim
//! ([`Reply::sse_lines`]). Scripts are consumed only by requests the real API
//! would accept (a request without `model`, or Anthropic without `max_tokens`, gets a 400
//! and leaves the queues alone).
//!
//! Every request is recorded (unless [`FakeLlm::set_recording`] turned it off) and counted;
//! [`FakeLlm::wait_for_requests`] waits for a count and [`FakeLlm::wait_for_request`] for a
//! matching request, both with a bound. [`RecordedRequest`] has helpers for the last user
//! text, the system prompt and the offered tool names. Delays use `tokio::time::sleep`, so
//! tests under a paused clock stay instant. [`parse_openai_stream`] and
//! [`parse_anthropic_stream`] reassemble any SSE body of either dialect (the gateway's
//! own `/v1/chat/completions` too).
//!
//! ```no_run
//! # async fn demo() {
//! use std::time::Duration;
//! use serde_json::json;
//! use switchboard_fakes::llm::{FakeLlm, Reply};
//!
//! let llm = FakeLlm::start().await;
//! llm.push(Reply::tool_call("read_file", json!({"path": "notes.md"})));
//! llm.push(Reply::text("Done."));
//! llm.push_for("alice", Reply::rate_limited(2));
//! llm.fail_model("gpt-broken", Reply::server_error());
//! // point the client at llm.base_url() ("http://127.0.0.1:PORT/v1") …
//! let seen = llm.wait_for_requests(2, Duration::from_secs(5)).await.unwrap();
//! assert_eq!(seen[0].model, "gpt-4o-mini");
//! assert_eq!(seen[0].last_user_text(), "what is in notes.md?");
//! let alice = llm
//!     .wait_for_request(|r| r.last_user_text().contains("alice"), Duration::from_secs(5))
//!     .await
//!     .unwrap();
//! assert!(alice.tool_names().contains(&"cron".to_owned()));
//! # }
//! ```

mod anthropic;
mod openai;
mod recorded;
mod reply;
mod server;
pub mod sse;

use std::collections::VecDeque;
use std::fmt;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde_json::Value;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

pub use recorded::{RecordedRequest, body_last_user_text, last_user_text};
pub use reply::{Reply, ToolCall};
pub use sse::{StreamedCompletion, StreamedToolCall, parse_anthropic_stream, parse_openai_stream};

/// A custom default responder: gets the request body, returns the answer.
pub type Responder = dyn Fn(&Value) -> Reply + Send + Sync;

/// The default answer when no script applies.
#[derive(Clone)]
enum Fallback {
    Echo,
    Fixed(Reply),
    Custom(Arc<Responder>),
}

/// Everything behind the lock; every critical section is a few pointer moves.
struct State {
    queue: VecDeque<Reply>,
    routed: Vec<(String, VecDeque<Reply>)>,
    failing: Vec<(String, Reply)>,
    default: Fallback,
    delay: Duration,
    requests: Vec<RecordedRequest>,
    models: Vec<String>,
    chunk_chars: usize,
    api_key: Option<Arc<str>>,
    /// Models that refuse `max_tokens` ([`FakeLlm::refuse_max_tokens`]).
    no_max_tokens: Vec<String>,
    /// Models that refuse `stream_options` ([`FakeLlm::refuse_stream_options`]).
    no_stream_options: Vec<String>,
    /// [`FakeLlm::strict_role_order`].
    strict_role_order: bool,
}

/// State shared by the handle(s) and the server task.
struct Shared {
    state: Mutex<State>,
    /// Requests received since start or [`FakeLlm::clear`]; a watch so waits are bounded
    /// notifications, not polling.
    count: watch::Sender<usize>,
    recording: AtomicBool,
    /// Source of unique, deterministic ids (`chatcmpl-fake7`, `call_fake7_0`…).
    ids: AtomicU64,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding this lock cannot leave State half-updated in a way that
        // matters to a test fake, so a poisoned lock is simply reused.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Stops the server when the last [`FakeLlm`] clone is dropped.
struct ServerGuard(CancellationToken);

impl Drop for ServerGuard {
    fn drop(&mut self) {
        self.0.cancel();
    }
}

/// A running fake LLM server. Cheap to clone; the server stops when the last clone drops.
#[derive(Clone)]
pub struct FakeLlm {
    shared: Arc<Shared>,
    addr: SocketAddr,
    _guard: Arc<ServerGuard>,
}

impl fmt::Debug for FakeLlm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FakeLlm").field("addr", &self.addr).finish()
    }
}

impl FakeLlm {
    /// Binds 127.0.0.1:0 and serves until the last handle is dropped.
    ///
    /// # Panics
    /// If no loopback port can be bound.
    pub async fn start() -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("fake LLM: bind 127.0.0.1:0");
        let addr = listener
            .local_addr()
            .expect("fake LLM: local address of a bound listener");
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                queue: VecDeque::new(),
                routed: Vec::new(),
                failing: Vec::new(),
                default: Fallback::Echo,
                delay: Duration::ZERO,
                requests: Vec::new(),
                models: vec!["gpt-4o-mini".into(), "claude-sonnet-4-5".into()],
                chunk_chars: 8,
                api_key: None,
                no_max_tokens: Vec::new(),
                no_stream_options: Vec::new(),
                strict_role_order: false,
            }),
            count: watch::Sender::new(0),
            recording: AtomicBool::new(true),
            ids: AtomicU64::new(1),
        });
        let token = CancellationToken::new();
        server::spawn(listener, Arc::clone(&shared), token.clone());
        Self {
            shared,
            addr,
            _guard: Arc::new(ServerGuard(token)),
        }
    }

    /// `http://127.0.0.1:PORT/v1`, the base URL OpenAI-style clients expect.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// `http://127.0.0.1:PORT`, the base URL Anthropic-style clients expect.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Appends a reply to the global FIFO.
    pub fn push(&self, reply: Reply) {
        self.shared.lock().queue.push_back(reply);
    }

    /// Appends a reply to the FIFO used only by requests whose last user message contains
    /// `matcher`.
    pub fn push_for(&self, matcher: &str, reply: Reply) {
        let mut state = self.shared.lock();
        match state.routed.iter_mut().find(|(m, _)| m == matcher) {
            Some((_, queue)) => queue.push_back(reply),
            None => state
                .routed
                .push((matcher.to_owned(), VecDeque::from([reply]))),
        }
    }

    /// Every request for `model` answers `reply` (until [`FakeLlm::reset`]).
    pub fn fail_model(&self, model: &str, reply: Reply) {
        let mut state = self.shared.lock();
        state.failing.retain(|(m, _)| m != model);
        state.failing.push((model.to_owned(), reply));
    }

    /// Replaces the default (echo) answer with a fixed reply.
    pub fn set_default(&self, reply: Reply) {
        self.shared.lock().default = Fallback::Fixed(reply);
    }

    /// Replaces the default (echo) answer with a function of the request body.
    /// It runs outside the fake's lock, so it may call back into the fake.
    pub fn set_responder(&self, responder: impl Fn(&Value) -> Reply + Send + Sync + 'static) {
        self.shared.lock().default = Fallback::Custom(Arc::new(responder));
    }

    /// Latency added to every request (`tokio::time::sleep`).
    pub fn set_delay(&self, delay: Duration) {
        self.shared.lock().delay = delay;
    }

    /// Turns request recording on or off (off for benchmarks; requests are still counted).
    pub fn set_recording(&self, on: bool) {
        self.shared.recording.store(on, Ordering::Relaxed);
    }

    /// Size of streamed text and argument fragments, in characters (default 8).
    pub fn set_stream_chunk_chars(&self, chars: usize) {
        self.shared.lock().chunk_chars = chars.max(1);
    }

    /// Requires this API key (`Authorization: Bearer …` / `x-api-key`); a wrong or missing
    /// key gets the provider's 401. `None` (the default) accepts any key.
    pub fn require_api_key(&self, key: Option<&str>) {
        self.shared.lock().api_key = key.map(Arc::from);
    }

    /// OpenAI requests for `model` that carry `max_tokens` get OpenAI's 400
    /// `unsupported_parameter` ("Use 'max_completion_tokens' instead"), as OpenAI's
    /// o-series and gpt-5 models answer.
    pub fn refuse_max_tokens(&self, model: &str) {
        self.shared.lock().no_max_tokens.push(model.to_owned());
    }

    /// OpenAI requests for `model` that carry `stream_options` get Mistral's 422
    /// `extra_forbidden` ("Extra inputs are not permitted").
    pub fn refuse_stream_options(&self, model: &str) {
        self.shared.lock().no_stream_options.push(model.to_owned());
    }

    /// OpenAI requests with a `user` message right after a `tool` message get Mistral's
    /// 400 "Unexpected role 'user' after role 'tool'".
    pub fn strict_role_order(&self) {
        self.shared.lock().strict_role_order = true;
    }

    /// Model ids listed by `GET /v1/models`.
    pub fn set_models<S: Into<String>>(&self, models: impl IntoIterator<Item = S>) {
        self.shared.lock().models = models.into_iter().map(Into::into).collect();
    }

    /// Replies still queued (global and routed FIFOs together).
    pub fn pending(&self) -> usize {
        let state = self.shared.lock();
        state.queue.len() + state.routed.iter().map(|(_, q)| q.len()).sum::<usize>()
    }

    /// The recorded requests, oldest first.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.shared.lock().requests.clone()
    }

    /// Requests received since start or the last [`FakeLlm::clear`] (recorded or not).
    pub fn request_count(&self) -> usize {
        *self.shared.count.borrow()
    }

    /// Waits until at least `n` requests have arrived, then returns the recorded ones.
    ///
    /// # Errors
    /// A message naming the count reached when `timeout` elapses first.
    pub async fn wait_for_requests(
        &self,
        n: usize,
        timeout: Duration,
    ) -> Result<Vec<RecordedRequest>, String> {
        let mut rx = self.shared.count.subscribe();
        match tokio::time::timeout(timeout, rx.wait_for(|count| *count >= n)).await {
            Ok(Ok(_)) => Ok(self.requests()),
            Ok(Err(_)) => Err("fake LLM: server state dropped".to_owned()),
            Err(_) => Err(format!(
                "fake LLM: waited {timeout:?} for {n} request(s), got {}",
                self.request_count()
            )),
        }
    }

    /// Waits until a recorded request satisfies `matches` and returns the first such one.
    /// `matches` runs under the fake's lock: it must not call back into the fake.
    ///
    /// # Errors
    /// A message when `timeout` elapses first (always, when recording is off).
    pub async fn wait_for_request(
        &self,
        matches: impl Fn(&RecordedRequest) -> bool,
        timeout: Duration,
    ) -> Result<RecordedRequest, String> {
        let mut rx = self.shared.count.subscribe();
        let found = async {
            loop {
                // Mark the current count seen before looking, so no arrival is missed.
                rx.borrow_and_update();
                let hit = self
                    .shared
                    .lock()
                    .requests
                    .iter()
                    .find(|r| matches(r))
                    .cloned();
                if let Some(request) = hit {
                    return Some(request);
                }
                if rx.changed().await.is_err() {
                    return None;
                }
            }
        };
        match tokio::time::timeout(timeout, found).await {
            Ok(Some(request)) => Ok(request),
            Ok(None) => Err("fake LLM: server state dropped".to_owned()),
            Err(_) => Err(format!(
                "fake LLM: no matching request within {timeout:?} ({} received)",
                self.request_count()
            )),
        }
    }

    /// Forgets recorded requests and resets the count; scripts stay.
    pub fn clear(&self) {
        self.shared.lock().requests.clear();
        self.shared.count.send_replace(0);
    }

    /// Forgets requests, scripts, failing models, default, delay: back to a fresh server.
    pub fn reset(&self) {
        {
            let mut state = self.shared.lock();
            state.queue.clear();
            state.routed.clear();
            state.failing.clear();
            state.default = Fallback::Echo;
            state.delay = Duration::ZERO;
            state.requests.clear();
        }
        self.shared.count.send_replace(0);
    }
}
