//! A conversation's catch-up goes before its newer live messages.
//!
//! When a catch-up is planned (right at the `hello` that ends a gap, or before Events API
//! intake opens), [`Holds::reserve`] marks each of its conversations; a live event of a
//! marked conversation waits in [`Holds::wait`] until that conversation's catch-up is done
//! (published, or given up). A live message the catch-up also fetched is then a duplicate
//! for the bus. Catch-ups of one conversation run one after the other. Conversations without
//! a catch-up are never held, and live events are not ordered among themselves here.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

/// The conversations with a catch-up planned or under way; cheap to clone.
#[derive(Clone, Default)]
pub(crate) struct Holds(Arc<Mutex<Inner>>);

#[derive(Default)]
struct Inner {
    /// Per conversation: the newest catch-up's number and its done signal.
    pending: HashMap<String, (u64, CancellationToken)>,
    next: u64,
}

/// A conversation's catch-up, planned; [`Reserved::wait`] waits for the one before it.
pub(crate) struct Reserved {
    after: Option<CancellationToken>,
    done: Done,
}

/// A conversation's catch-up under way; dropping it lets the held live events go.
pub(crate) struct Done {
    holds: Holds,
    channel: String,
    n: u64,
    signal: CancellationToken,
}

/// The live event waited too long for its conversation's catch-up.
#[derive(Debug)]
pub(crate) struct StillCatchingUp;

impl Holds {
    fn inner(&self) -> MutexGuard<'_, Inner> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Mark `channel`: its live events wait from now on until the returned catch-up is done.
    pub(crate) fn reserve(&self, channel: &str) -> Reserved {
        let signal = CancellationToken::new();
        let mut inner = self.inner();
        inner.next += 1;
        let n = inner.next;
        let before = inner
            .pending
            .insert(channel.to_string(), (n, signal.clone()))
            .map(|(_, s)| s);
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

    /// Wait, at most `limit`, until `channel` has no catch-up planned or under way.
    pub(crate) async fn wait(&self, channel: &str, limit: Duration) -> Result<(), StillCatchingUp> {
        let pending = self.inner().pending.get(channel).map(|(_, s)| s.clone());
        let Some(signal) = pending else {
            return Ok(());
        };
        tokio::time::timeout(limit, signal.cancelled())
            .await
            .map_err(|_| StillCatchingUp)
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
            .is_some_and(|(n, _)| *n == self.n)
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
    async fn live_events_wait_for_their_conversations_catch_up_only() {
        let holds = Holds::default();
        let place = holds.reserve("C1");
        assert!(holds.wait("C2", LONG).now_or_never().is_some(), "C2 held");
        let mut held = Box::pin(holds.wait("C1", LONG));
        assert!((&mut held).now_or_never().is_none(), "C1 not held");
        let done = place.wait().await;
        assert!((&mut held).now_or_never().is_none(), "released before done");
        drop(done);
        assert!(held.await.is_ok());
        assert!(holds.inner().pending.is_empty());
    }

    #[tokio::test]
    async fn a_second_catch_up_waits_for_the_first_and_holds_until_it_ends() {
        let holds = Holds::default();
        let first = holds.reserve("C1").wait().await;
        let second = holds.reserve("C1");
        let mut second = Box::pin(second.wait());
        assert!((&mut second).now_or_never().is_none(), "overtook the first");
        drop(first);
        let second = second.await;
        let mut held = Box::pin(holds.wait("C1", LONG));
        assert!((&mut held).now_or_never().is_none(), "the second one holds");
        drop(second);
        assert!(held.await.is_ok());
        assert!(holds.inner().pending.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn a_held_event_gives_up_after_the_limit() {
        let holds = Holds::default();
        let _place = holds.reserve("C1");
        assert!(holds.wait("C1", Duration::from_secs(2)).await.is_err());
    }
}
