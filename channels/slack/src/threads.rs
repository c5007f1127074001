//! Threads the bot hears in: whether it takes part in one, asked of `conversations.replies`
//! once per thread and remembered only when Slack lists the thread. A lookup that fails —
//! a refusal such as `thread_not_found` or `missing_scope`, a 5xx, a rate limit, a timeout —
//! is remembered as a failure, not as an answer: the thread's next message asks again, and
//! one that keeps failing is asked at most once per [`Failures::backoff`].

use std::time::{Duration, Instant};

use tracing::{debug, warn};

use crate::Shared;
use crate::web::{self, BotIdentity, WebError};

/// A thread: `(channel, root ts)`.
pub(crate) type ThreadId = (String, String);

/// The wait after the second failure in a row before a thread is asked again; it doubles
/// with each further failure, up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_secs(5);
/// The longest wait between two lookups of a thread that keeps failing.
const MAX_BACKOFF: Duration = Duration::from_secs(300);

/// Lookups of one thread that failed in a row, and when the last did.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Failures {
    count: u32,
    last: Instant,
}

impl Failures {
    /// How long after the last failure the thread may be asked again: not at all after the
    /// first (the next message asks), then 5 s, 10 s, 20 s… up to 5 minutes.
    fn backoff(&self) -> Duration {
        match self.count {
            0 | 1 => Duration::ZERO,
            n => FIRST_BACKOFF
                .saturating_mul(1 << (n - 2).min(16))
                .min(MAX_BACKOFF),
        }
    }

    fn may_ask(&self, now: Instant) -> bool {
        now >= self.last + self.backoff()
    }

    fn after(previous: Option<Failures>, now: Instant) -> Failures {
        Failures {
            count: previous.map_or(0, |f| f.count).saturating_add(1),
            last: now,
        }
    }
}

impl Shared {
    /// Read thread `id` (`conversations.replies`) by `until`. `None` when it failed, ran late
    /// or failed lately (see [`Failures`]); the failure is noted, never taken for an answer.
    pub(crate) async fn read_thread(
        &self,
        id: &ThreadId,
        until: tokio::time::Instant,
    ) -> Option<web::Thread> {
        let failed = self.memory().thread_failures.get(id).copied();
        if failed.is_some_and(|f| !f.may_ask(Instant::now())) {
            debug!(channel = %id.0, thread = %id.1, "slack thread lookup failed lately; not asked yet");
            return None;
        }
        let (channel, root) = id;
        let error = match tokio::time::timeout_at(until, self.web.thread(channel, root)).await {
            Ok(Ok(thread)) => {
                if failed.is_some() {
                    self.memory().thread_failures.remove(id);
                }
                return Some(thread);
            }
            Ok(Err(WebError::Api(code))) if code == "missing_scope" => {
                if !std::mem::replace(&mut self.memory().said_missing_scope, true) {
                    warn!(%channel, "slack conversations.replies refused (missing_scope): replies \
                    in threads the bot took part in before a restart are not recognised; add \
                    the channels:history, groups:history, im:history and mpim:history scopes \
                    and reinstall the app");
                }
                code
            }
            Ok(Err(e)) => e.to_string(),
            Err(_) => "no answer in time".to_string(),
        };
        debug!(%channel, thread = %root, %error, "slack conversations.replies failed; the \
            thread's next message asks again");
        let mut mem = self.memory();
        let next = Failures::after(mem.thread_failures.get(id).copied(), Instant::now());
        mem.thread_failures.insert(id.clone(), next);
        None
    }

    /// Is it a thread the bot takes part in? What this run saw is in `threads`; a thread
    /// from before a restart is not, and a reply's `parent_user_id` (when Slack sends one)
    /// names only the root's author (a person, when someone started the thread by
    /// mentioning the bot). So `conversations.replies` is asked: the bot posted the root, is
    /// among those who replied, or posted one of the first messages. Slack's answer, either
    /// way, is kept in `threads`; a lookup that fails or runs late (it and the user lookup
    /// end by `until` together) counts as someone else's thread for this message only.
    pub(crate) async fn learn_thread(
        &self,
        me: &BotIdentity,
        thread: ThreadId,
        until: tokio::time::Instant,
    ) {
        if self.memory().threads.contains(&thread) {
            return;
        }
        let Some(read) = self.read_thread(&thread, until).await else {
            return;
        };
        let by_me = |m: &web::ThreadMessage| {
            m.user.as_deref() == Some(me.user_id.as_str())
                || (m.bot_id.is_some() && m.bot_id == me.bot_id)
        };
        let mine = read.messages.iter().any(by_me)
            || read
                .messages
                .first()
                .is_some_and(|root| root.reply_users.contains(&me.user_id));
        self.memory().threads.insert(thread, mine);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failing_thread_is_asked_again_at_once_then_less_and_less_often() {
        let t0 = Instant::now();
        let first = Failures::after(None, t0);
        assert!(first.may_ask(t0), "the next message asks again");
        let second = Failures::after(Some(first), t0);
        assert!(!second.may_ask(t0 + Duration::from_secs(4)));
        assert!(second.may_ask(t0 + Duration::from_secs(5)));
        let third = Failures::after(Some(second), t0);
        assert_eq!(third.backoff(), Duration::from_secs(10));
        let mut many = third;
        for _ in 0..100 {
            many = Failures::after(Some(many), t0);
        }
        assert_eq!(many.backoff(), MAX_BACKOFF, "bounded");
    }
}
