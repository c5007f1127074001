//! A conversation's catch-up goes before its newer live messages — for a bounded time.
//!
//! When a catch-up is planned (right at the `hello` that ends a gap, or before Events API
//! intake opens), [`Holds::reserve`] marks each of its conversations. A live event of a
//! marked conversation is never waited on (intake runs in the socket's read loop, where
//! pongs are read too): [`Holds::check`] says at once that it is held, intake leaves it
//! unacknowledged, and Slack sends it again later (with backoff). The first refusal moves
//! the conversation's catch-up to the front of the queue. A conversation is held at most
//! [`Holds::check`]'s `limit` after its first refused event: then its live events go
//! through, and the messages its catch-up still publishes come after them (late, never
//! lost). A live message the catch-up also fetched is a duplicate for the bus. Catch-ups of
//! one conversation run one after the other.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

/// The conversations with a catch-up planned or under way; cheap to clone.
#[derive(Clone, Default)]
pub(crate) struct Holds(Arc<Mutex<Inner>>);

#[derive(Default)]
struct Inner {
    /// Per conversation: the newest catch-up.
    pending: HashMap<String, Pending>,
    next: u64,
}

struct Pending {
    n: u64,
    /// Cancelled when that catch-up is done.
    signal: CancellationToken,
    /// When a live event was first refused for it.
    first_refused: Option<Instant>,
    /// Held long enough: live events go through.
    open: bool,
}

/// What [`Holds::check`] says about a live event.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Check {
    /// Take it in now.
    Go,
    /// Its conversation is being caught up: leave it unacknowledged. `first`: the first
    /// refusal there (the catch-up should go first).
    Held { first: bool },
    /// Held for `limit` already: taken in now, ahead of fetched messages (said once).
    Opened,
}

/// A conversation's catch-up, planned; [`Reserved::wait`] waits for the one before it.
pub(crate) struct Reserved {
    after: Option<CancellationToken>,
    done: Done,
}

/// A conversation's catch-up under way; dropping it lets the live events go.
pub(crate) struct Done {
    holds: Holds,
    channel: String,
    n: u64,
    signal: CancellationToken,
}

impl Holds {
    fn inner(&self) -> MutexGuard<'_, Inner> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Mark `channel`: its live events are held from now on until the returned catch-up is
    /// done (or for the limit of [`Holds::check`]).
    pub(crate) fn reserve(&self, channel: &str) -> Reserved {
        let signal = CancellationToken::new();
        let mut inner = self.inner();
        inner.next += 1;
        let n = inner.next;
        let pending = Pending {
            n,
            signal: signal.clone(),
            first_refused: None,
            open: false,
        };
        let before = inner
            .pending
            .insert(channel.to_string(), pending)
            .map(|p| p.signal);
        Reserved {
            after: before,
            done: Done {
                holds: self.clone(),
                channel: channel.to_string(),
                n,
                signal,
            },
        }
    }

    /// Whether a live event of `channel` may be taken in at `now`, never waiting: held while
    /// its catch-up is planned or under way, at most `limit` after the first refusal.
    pub(crate) fn check(&self, channel: &str, now: Instant, limit: Duration) -> Check {
        let mut inner = self.inner();
        let Some(p) = inner.pending.get_mut(channel) else {
            return Check::Go;
        };
        if p.open {
            return Check::Go;
        }
        match p.first_refused {
            None => {
                p.first_refused = Some(now);
                Check::Held { first: true }
            }
            Some(t) if now.saturating_duration_since(t) < limit => Check::Held { first: false },
            Some(_) => {
                p.open = true;
                Check::Opened
            }
        }
    }
}

impl Reserved {
    /// Wait until the conversation's previous catch-up, if any, is done.
    pub(crate) async fn wait(self) -> Done {
        if let Some(after) = &self.after {
            after.cancelled().await;
        }
        self.done
    }
}

impl Drop for Done {
    fn drop(&mut self) {
        self.signal.cancel();
        let mut inner = self.holds.inner();
        if inner
            .pending
            .get(&self.channel)
            .is_some_and(|p| p.n == self.n)
        {
            inner.pending.remove(&self.channel);
        }
    }
}

#[cfg(test)]
mod tests {
    use futures_util::FutureExt;

    use super::*;

    const LONG: Duration = Duration::from_secs(3600);

    #[tokio::test]
    async fn live_events_are_held_for_their_conversations_catch_up_only() {
        let holds = Holds::default();
        let now = Instant::now();
        let place = holds.reserve("C1");
        assert_eq!(holds.check("C2", now, LONG), Check::Go);
        assert_eq!(holds.check("C1", now, LONG), Check::Held { first: true });
        assert_eq!(holds.check("C1", now, LONG), Check::Held { first: false });
        let done = place.wait().await;
        assert_eq!(holds.check("C1", now, LONG), Check::Held { first: false });
        drop(done);
        assert_eq!(holds.check("C1", now, LONG), Check::Go);
        assert!(holds.inner().pending.is_empty());
    }

    #[tokio::test]
    async fn a_second_catch_up_waits_for_the_first_and_holds_until_it_ends() {
        let holds = Holds::default();
        let now = Instant::now();
        let first = holds.reserve("C1").wait().await;
        let second = holds.reserve("C1");
        let mut second = Box::pin(second.wait());
        assert!((&mut second).now_or_never().is_none(), "overtook the first");
        drop(first);
        let second = second.await;
        assert_eq!(holds.check("C1", now, LONG), Check::Held { first: true });
        drop(second);
        assert_eq!(holds.check("C1", now, LONG), Check::Go);
        assert!(holds.inner().pending.is_empty());
    }

    #[test]
    fn a_conversation_is_held_at_most_the_limit_after_its_first_refusal() {
        let holds = Holds::default();
        let t0 = Instant::now();
        let limit = Duration::from_secs(30);
        let _place = holds.reserve("C1");
        assert_eq!(holds.check("C1", t0, limit), Check::Held { first: true });
        let later = t0 + Duration::from_secs(29);
        assert_eq!(
            holds.check("C1", later, limit),
            Check::Held { first: false }
        );
        assert_eq!(holds.check("C1", t0 + limit, limit), Check::Opened);
        assert_eq!(holds.check("C1", t0 + limit, limit), Check::Go);
    }
}
