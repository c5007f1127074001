//! Turning teloxide errors into switchboard errors: classification, token scrubbing, backoff.

use std::time::Duration;

use switchboard_channel::SendError;
use teloxide::{ApiError, RequestError};

/// An error text without the bot token (registered by `TelegramChannel::new`): teloxide's
/// network errors carry the request URL, `/bot<token>/…`, which teloxide hides only for
/// tokens of the usual shape, and an unreadable answer is quoted whole.
pub(crate) fn scrub(text: &str) -> String {
    switchboard_channel::redact(text).into_owned()
}

/// How a failed request should be treated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Failure {
    /// Telegram asked to wait this long.
    RetryAfter(Duration),
    /// Network trouble, a 5xx, an unreadable answer: retry with backoff.
    Transient(String),
    /// The token was refused.
    Unauthorized,
    /// Another process polls with this token (409 Conflict).
    Conflict(String),
    /// A webhook is set, so `getUpdates` is refused until it is deleted.
    WebhookActive,
    /// Refused for good (bad request, bot blocked, chat gone).
    Permanent(String),
}

/// Classify a teloxide error; the token is scrubbed from every text.
pub(crate) fn classify(err: &RequestError) -> Failure {
    let text = scrub(&err.to_string());
    match err {
        RequestError::RetryAfter(s) => Failure::RetryAfter(s.duration()),
        RequestError::Network(_) | RequestError::InvalidJson { .. } | RequestError::Io(_) => {
            Failure::Transient(text)
        }
        RequestError::MigrateToChatId(id) => {
            Failure::Permanent(format!("the group moved to supergroup {id}"))
        }
        RequestError::Api(ApiError::InvalidToken) => Failure::Unauthorized,
        RequestError::Api(ApiError::TerminatedByOtherGetUpdates) => Failure::Conflict(text),
        RequestError::Api(ApiError::CantGetUpdates) => Failure::WebhookActive,
        RequestError::Api(ApiError::Unknown(desc)) => {
            let d = desc.as_str();
            if d.contains("webhook is active") {
                Failure::WebhookActive
            } else if d.starts_with("Conflict") {
                Failure::Conflict(scrub(d))
            } else if ["Bad Request", "Forbidden", "Unauthorized", "Not Found"]
                .iter()
                .any(|p| d.starts_with(p))
            {
                Failure::Permanent(scrub(d))
            } else {
                // "Internal Server Error", "Bad Gateway", "Too Many Requests" without
                // parameters, anything a proxy invents: worth another try.
                Failure::Transient(scrub(d))
            }
        }
        RequestError::Api(_) => Failure::Permanent(text),
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::RetryAfter(d) => write!(f, "Telegram asked to wait {}s", d.as_secs()),
            Failure::Transient(t) | Failure::Conflict(t) | Failure::Permanent(t) => f.write_str(t),
            Failure::Unauthorized => f.write_str("the bot token was refused"),
            Failure::WebhookActive => f.write_str("a webhook is set"),
        }
    }
}

impl Failure {
    /// The matching [`SendError`].
    pub(crate) fn into_send_error(self) -> SendError {
        match self {
            Failure::RetryAfter(d) => SendError::RetryAfter(d),
            Failure::Transient(t) | Failure::Conflict(t) => SendError::Transient(t),
            Failure::WebhookActive => SendError::Transient("a webhook is set".into()),
            Failure::Unauthorized => SendError::Permanent("the bot token was refused".into()),
            Failure::Permanent(t) => SendError::Permanent(t),
        }
    }
}

/// Exponential backoff with ±20 % jitter, capped.
#[derive(Debug, Clone)]
pub(crate) struct Backoff {
    initial: Duration,
    max: Duration,
    current: Duration,
}

impl Backoff {
    pub(crate) fn new(initial: Duration, max: Duration) -> Self {
        Self {
            initial,
            max,
            current: initial,
        }
    }

    /// The next delay; each call doubles the base up to the cap.
    pub(crate) fn next_delay(&mut self) -> Duration {
        let base = self.current;
        self.current = (self.current * 2).min(self.max);
        let factor: f64 = rand::random_range(0.8..1.2);
        base.mul_f64(factor).min(self.max.mul_f64(1.2))
    }

    /// After a success: start again from the initial delay.
    pub(crate) fn reset(&mut self) {
        self.current = self.initial;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scrub_removes_the_token_everywhere() {
        let t = "123:scrub-unit-test-token";
        switchboard_channel::redact::register(t);
        let s = scrub(&format!(
            "error sending request for url (http://x/bot{t}/GetUpdates) {t}"
        ));
        assert!(!s.contains(t));
        assert!(s.contains("/bot[redacted]/GetUpdates"));
    }

    #[test]
    fn classifies_api_errors() {
        assert_eq!(
            classify(&RequestError::Api(ApiError::InvalidToken)),
            Failure::Unauthorized
        );
        assert!(matches!(
            classify(&RequestError::Api(ApiError::TerminatedByOtherGetUpdates)),
            Failure::Conflict(_)
        ));
        assert!(matches!(
            classify(&RequestError::Api(ApiError::Unknown(
                "Internal Server Error".into()
            ))),
            Failure::Transient(_)
        ));
        assert!(matches!(
            classify(&RequestError::Api(ApiError::Unknown(
                "Bad Request: nope".into()
            ))),
            Failure::Permanent(_)
        ));
        assert!(matches!(
            classify(&RequestError::Api(ApiError::BotBlocked)),
            Failure::Permanent(_)
        ));
    }

    #[test]
    fn backoff_doubles_to_the_cap_and_resets() {
        let mut b = Backoff::new(Duration::from_secs(1), Duration::from_secs(4));
        let d: Vec<Duration> = (0..5).map(|_| b.next_delay()).collect();
        assert!(d[0] >= Duration::from_millis(800) && d[0] <= Duration::from_millis(1200));
        assert!(d[1] >= Duration::from_millis(1600) && d[1] <= Duration::from_millis(2400));
        assert!(d[4] <= Duration::from_millis(4800) && d[4] >= Duration::from_millis(3200));
        b.reset();
        assert!(b.next_delay() <= Duration::from_millis(1200));
    }
}
