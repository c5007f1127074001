//! A provider wrapper for robustness: retries with exponential backoff and jitter
//! (2 s·2^(n-1) ±20 %, `Retry-After` honoured) up to `llm.max_retries`, then each of
//! `llm.fallback_models` in order; a model that failed cools down before it is tried again.
//! A server that asks for a longer wait than the longest backoff (a 429 or 5xx with an
//! hour's `Retry-After`) sends the request on to the next model at once. A server no
//! connection can be made to gets 5 retries, and no fallback (they share its address).
//!
//! The sleep function is injectable so tests can observe the delays without waiting.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use tokio::time::Instant;

use super::{DeltaSink, LlmError, LlmProvider, LlmRequest, LlmResponse};

/// How the wrapper waits between attempts.
pub type SleepFn = Arc<dyn Fn(Duration) -> Pin<Box<dyn Future<Output = ()> + Send>> + Send + Sync>;

/// First backoff delay.
const BASE_DELAY: Duration = Duration::from_secs(2);
/// Longest backoff delay: 2 s·2^7, so the default 8 retries follow 2 s·2^(n-1) throughout.
const MAX_DELAY: Duration = Duration::from_secs(256);
/// How long a model that exhausted its retries is skipped.
const COOL_DOWN: Duration = Duration::from_secs(60);
/// Retries of a provider no connection could be made to (2 + 4 + 8 + 16 + 32 s, about a
/// minute: a server restarting, a network blip): one that stays down, or a wrong
/// `llm.base_url`, is told to the chat then, not after the full backoff's 9 minutes (a
/// reminder still goes out, in its own words).
const UNREACHABLE_RETRIES: u32 = 5;

/// Retries, fallbacks and cool-downs around any provider.
pub struct Resilient {
    inner: Arc<dyn LlmProvider>,
    fallbacks: Vec<String>,
    max_retries: u32,
    cool_down: Duration,
    sleep: SleepFn,
    /// Model → when it may be tried again.
    cooling: Mutex<HashMap<String, Instant>>,
}

impl Resilient {
    /// Wrap `inner`: `max_retries` retries per model, then `fallbacks` in order.
    pub fn new(inner: Arc<dyn LlmProvider>, fallbacks: Vec<String>, max_retries: u32) -> Self {
        Self {
            inner,
            fallbacks,
            max_retries,
            cool_down: COOL_DOWN,
            sleep: Arc::new(|d| Box::pin(tokio::time::sleep(d))),
            cooling: Mutex::new(HashMap::new()),
        }
    }

    /// Replace the sleep between attempts (tests record the delays instead of waiting).
    pub fn with_sleep(mut self, sleep: SleepFn) -> Self {
        self.sleep = sleep;
        self
    }

    /// How long a failed model is skipped.
    pub fn with_cool_down(mut self, d: Duration) -> Self {
        self.cool_down = d;
        self
    }

    /// The models to try for `primary`, cooling ones left out unless every one is cooling.
    fn candidates(&self, primary: &str) -> Vec<String> {
        let mut all = vec![primary.to_string()];
        for f in &self.fallbacks {
            if !all.contains(f) {
                all.push(f.clone());
            }
        }
        let now = Instant::now();
        let mut cooling = self.cooling.lock().unwrap_or_else(|p| p.into_inner());
        cooling.retain(|_, until| *until > now);
        let ready: Vec<String> = all
            .iter()
            .filter(|m| !cooling.contains_key(*m))
            .cloned()
            .collect();
        if ready.is_empty() { all } else { ready }
    }

    fn cool(&self, model: &str) {
        let until = Instant::now() + self.cool_down;
        self.cooling
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(model.to_string(), until);
    }

    /// The wait the server asked for (429's or 5xx's `Retry-After`), if it asked.
    fn asked_wait(err: &LlmError) -> Option<Duration> {
        match err {
            LlmError::RateLimited { retry_after } => *retry_after,
            LlmError::Overloaded { retry_after, .. } => Some(*retry_after),
            _ => None,
        }
    }

    /// How many retries `err` gets: `llm.max_retries`, fewer when nothing answers at all.
    fn retries_for(&self, err: &LlmError) -> u32 {
        match err {
            LlmError::Unreachable(_) => self.max_retries.min(UNREACHABLE_RETRIES),
            _ => self.max_retries,
        }
    }

    fn delay_for(attempt: u32, err: &LlmError) -> Duration {
        match Self::asked_wait(err) {
            // At most MAX_DELAY (longer goes to the next model), and never no pause at all.
            Some(d) => d.max(Duration::from_secs(1)),
            None => crate::backoff::delay(attempt, BASE_DELAY, MAX_DELAY),
        }
    }
}

#[async_trait]
impl LlmProvider for Resilient {
    async fn complete(
        &self,
        req: &LlmRequest,
        on_delta: Option<DeltaSink>,
    ) -> Result<LlmResponse, LlmError> {
        // Once text has been streamed to a listener, a retry would repeat it.
        let streamed = Arc::new(AtomicBool::new(false));
        let sink = on_delta.map(|f| {
            let streamed = streamed.clone();
            Arc::new(move |t: &str| {
                streamed.store(true, Ordering::Relaxed);
                f(t)
            }) as DeltaSink
        });
        let mut last_err = LlmError::Unavailable("no model to try".into());
        for model in self.candidates(&req.model) {
            let mut attempt_req = req.clone();
            attempt_req.model = model.clone();
            let mut attempt = 0u32;
            loop {
                match self.inner.complete(&attempt_req, sink.clone()).await {
                    Ok(r) => return Ok(r),
                    Err(LlmError::ContextOverflow) => return Err(LlmError::ContextOverflow),
                    Err(e) if streamed.load(Ordering::Relaxed) => return Err(e),
                    // Down or rate limited for longer than any backoff (a maintenance
                    // window, an hourly quota): the next model now, rather than retries
                    // hours apart while the chat waits.
                    Err(e) if Self::asked_wait(&e).is_some_and(|d| d > MAX_DELAY) => {
                        tracing::warn!(%model, "giving up on this model: {e}");
                        self.cool(&model);
                        last_err = e;
                        break;
                    }
                    Err(e) if e.is_retryable() && attempt < self.retries_for(&e) => {
                        attempt += 1;
                        let wait = Self::delay_for(attempt, &e);
                        tracing::warn!(%model, attempt, ?wait, "LLM request failed, retrying: {e}");
                        (self.sleep)(wait).await;
                    }
                    // The fallbacks are on the same server; so the model is not cooled
                    // down either (its fallback would come first once the server is back).
                    Err(e @ LlmError::Unreachable(_)) => {
                        tracing::warn!(%model, "giving up: {e}");
                        return Err(e);
                    }
                    Err(e) => {
                        tracing::warn!(%model, "giving up on this model: {e}");
                        self.cool(&model);
                        last_err = e;
                        break;
                    }
                }
            }
        }
        Err(last_err)
    }
}
