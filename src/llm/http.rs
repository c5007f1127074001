//! The HTTP side both providers share: the client, the time limits of a streamed answer,
//! and how a provider's error answer becomes an [`LlmError`].

use std::time::Duration;

use bytes::Bytes;
use futures_util::{Stream, StreamExt};
use serde_json::Value;

use super::LlmError;

/// How long an idle connection to the provider is kept for the next turn. Shorter than
/// providers' own keep-alive (60 s and more), so the gateway closes first and never sends
/// a turn down a connection the server is closing. After a burst the pool holds one
/// connection per turn that ran at once (up to `gateway.max_concurrent_turns`, ~35 KB
/// each); they close within twice this time (hyper checks the pool every 30 s), before the
/// gateway's last idle heap trim. A turn after a longer pause pays one TLS handshake.
pub const POOL_IDLE: Duration = Duration::from_secs(30);

/// The HTTP client of a provider, connections kept for reuse. It has no limit on a whole
/// request: a streamed answer may rightly take longer than `llm.request_timeout` (a local
/// model on a small machine, a reasoning model), so [`send`] and [`next_chunk`] limit the
/// wait for its headers and each silence within its body instead.
/// Longest one LLM request may take in all, however steadily its answer comes.
const MAX_REQUEST: Duration = Duration::from_secs(30 * 60);

pub(crate) fn client() -> Result<reqwest::Client, LlmError> {
    reqwest::Client::builder()
        // An outer bound only, so that no request runs for ever: `request_timeout` is
        // enforced on the wait for the answer to start and on each silence in it (see
        // `send`, `next_chunk`).
        .timeout(MAX_REQUEST)
        .connect_timeout(Duration::from_secs(10))
        .pool_idle_timeout(POOL_IDLE)
        .pool_max_idle_per_host(256)
        .build()
        .map_err(|e| LlmError::Refused {
            status: None,
            detail: format!("cannot build the HTTP client: {e}"),
        })
}

/// Send a provider request and wait at most `limit` for the answer's headers, whatever
/// their status.
pub(crate) async fn send(
    rb: reqwest::RequestBuilder,
    limit: Duration,
) -> Result<reqwest::Response, LlmError> {
    match tokio::time::timeout(limit, rb.send()).await {
        Ok(sent) => sent.map_err(transport),
        Err(_) => Err(LlmError::Unavailable(format!(
            "no answer from the model provider within {}s",
            limit.as_secs_f64()
        ))),
    }
}

/// [`send`], and a non-2xx answer becomes the matching [`LlmError`].
pub(crate) async fn send_checked(
    rb: reqwest::RequestBuilder,
    limit: Duration,
) -> Result<reqwest::Response, LlmError> {
    let resp = send(rb, limit).await?;
    if resp.status().is_success() {
        return Ok(resp);
    }
    Err(Rejection::read(resp, limit).await.into())
}

/// The next piece of a streamed answer's body (`None` at its end); an error when nothing
/// comes for `idle`: a stalled stream, retried like a dropped connection. Any bytes count,
/// keep-alive comments too, so a slow but steady answer is never cut off.
pub(crate) async fn next_chunk<S>(body: &mut S, idle: Duration) -> Result<Option<Bytes>, LlmError>
where
    S: Stream<Item = reqwest::Result<Bytes>> + Unpin,
{
    match tokio::time::timeout(idle, body.next()).await {
        Ok(Some(chunk)) => chunk.map(Some).map_err(transport),
        Ok(None) => Ok(None),
        Err(_) => Err(LlmError::Unavailable(format!(
            "the answer's stream stalled: nothing came for {}s",
            idle.as_secs_f64()
        ))),
    }
}

/// A provider's non-2xx answer, its body with the API key blotted out.
pub(crate) struct Rejection {
    pub status: u16,
    pub retry_after: Option<Duration>,
    pub body: String,
}

impl Rejection {
    /// Read the rest of `resp` (an error body is short: at most `limit` to come).
    pub async fn read(resp: reqwest::Response, limit: Duration) -> Self {
        let status = resp.status().as_u16();
        let retry_after = retry_after(resp.headers());
        let body = tokio::time::timeout(limit, resp.text())
            .await
            .ok()
            .and_then(Result::ok)
            .unwrap_or_default();
        Self {
            status,
            retry_after,
            body: switchboard_channel::redact(&body).into_owned(),
        }
    }

    /// The OpenAI-style error object's `param` and `code` (`{"error": {…}}`).
    pub fn param_and_code(&self) -> (Option<String>, Option<String>) {
        let v: Value = serde_json::from_str(&self.body).unwrap_or_default();
        let field = |k: &str| v["error"][k].as_str().map(str::to_owned);
        (field("param"), field("code"))
    }
}

impl From<Rejection> for LlmError {
    fn from(r: Rejection) -> Self {
        classify(r.status, r.retry_after, &r.body)
    }
}

/// Error codes and types that say the account has no quota or credit left: a 429 that
/// waiting does not cure (OpenAI `insufficient_quota`), and its kin.
const BILLING_CODES: &[&str] = &[
    "insufficient_quota",
    "billing_hard_limit_reached",
    "billing_not_active",
    "insufficient_balance",
    "insufficient_credits",
];

/// Whether an error body says the account is out of quota or credit.
fn out_of_credit(status: u16, body: &str, lower: &str) -> bool {
    if status == 402 || lower.contains("credit balance is too low") {
        return true;
    }
    let v: Value = serde_json::from_str(body).unwrap_or_default();
    // `{"error": {…}}` from an HTTP answer; the bare object from an error event mid-stream.
    let error = if v["error"].is_object() {
        &v["error"]
    } else {
        &v
    };
    ["code", "type"]
        .iter()
        .filter_map(|k| error[*k].as_str())
        .any(|c| BILLING_CODES.contains(&c))
}

/// What providers say when the prompt does not fit the context window, lowercased:
/// OpenAI's code and words, Anthropic's two messages ("prompt is too long", "input length
/// and `max_tokens` exceed context limit"), llama.cpp's error type and words (in a 400, a
/// 500, or an SSE `error:` field, by version).
const OVERFLOW_WORDS: &[&str] = &[
    "context_length_exceeded",
    "maximum context length",
    "prompt is too long",
    "exceed context limit",
    "exceed_context_size_error",
    "exceeds the available context size",
];

/// Map an HTTP error status and body (or a streamed error event) to an [`LlmError`]. The
/// body is kept for the logs with the API key blotted out: providers quote the key they
/// refused ("Incorrect API key provided: sk-…"), also in an error event mid-stream.
pub(crate) fn classify(status: u16, retry_after: Option<Duration>, body: &str) -> LlmError {
    let body = switchboard_channel::redact(body);
    let lower = body.to_lowercase();
    if OVERFLOW_WORDS.iter().any(|w| lower.contains(w)) {
        return LlmError::ContextOverflow;
    }
    let snippet: String = body.chars().take(300).collect();
    if out_of_credit(status, &body, &lower) {
        return LlmError::QuotaExhausted {
            status,
            detail: snippet,
        };
    }
    match status {
        429 => LlmError::RateLimited { retry_after },
        500..=599 => match retry_after {
            Some(retry_after) => LlmError::Overloaded {
                retry_after,
                detail: format!("HTTP {status}: {snippet}"),
            },
            None => LlmError::Unavailable(format!("HTTP {status}: {snippet}")),
        },
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

pub(crate) fn transport(e: reqwest::Error) -> LlmError {
    if e.is_connect() {
        LlmError::Unreachable(with_causes(e))
    } else {
        LlmError::Unavailable(with_causes(e))
    }
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
