//! Send pacing within Telegram's published limits: about one message per second per chat,
//! 20 per minute per group, 30 per second overall.
//!
//! Each send reserves the earliest slot that satisfies all three limits (under a short
//! lock), then sleeps until it outside the lock. When pacing is off, `acquire` returns
//! at once (self-hosted Bot API server, benchmark).

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// Spacing between two sends to the same chat.
const PER_CHAT: Duration = Duration::from_secs(1);
/// At most this many sends per group in [`GROUP_WINDOW`].
const GROUP_LIMIT: usize = 20;
const GROUP_WINDOW: Duration = Duration::from_secs(60);
/// Spacing between any two sends (30 per second).
const GLOBAL: Duration = Duration::from_nanos(1_000_000_000 / 30);
/// Forget chats idle this long, so memory does not grow with the chats ever seen.
const FORGET_AFTER: Duration = Duration::from_secs(61);

#[derive(Default)]
struct ChatSlots {
    next: Option<Instant>,
    /// Reserved send times in the last [`GROUP_WINDOW`] (groups only).
    recent: VecDeque<Instant>,
    last: Option<Instant>,
}

#[derive(Default)]
struct State {
    next_global: Option<Instant>,
    chats: HashMap<i64, ChatSlots>,
}

/// Limits the rate of sends; cheap to share behind an `Arc` or a reference.
pub(crate) struct Pacer {
    enabled: bool,
    state: Mutex<State>,
}

impl Pacer {
    pub(crate) fn new(enabled: bool) -> Self {
        Self {
            enabled,
            state: Mutex::new(State::default()),
        }
    }

    /// Wait for a send slot in `chat_id` (negative ids are groups).
    pub(crate) async fn acquire(&self, chat_id: i64) {
        if !self.enabled {
            return;
        }
        let at = self.reserve(chat_id, Instant::now());
        tokio::time::sleep_until(at).await;
    }

    /// Reserve the earliest slot at or after `now`; returns when it starts.
    fn reserve(&self, chat_id: i64, now: Instant) -> Instant {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if st.chats.len() > 1024 {
            st.chats.retain(|_, c| {
                c.last
                    .is_some_and(|l| now.saturating_duration_since(l) < FORGET_AFTER)
            });
        }
        let mut at = now;
        if let Some(g) = st.next_global {
            at = at.max(g);
        }
        let chat = st.chats.entry(chat_id).or_default();
        if let Some(n) = chat.next {
            at = at.max(n);
        }
        if chat_id < 0 {
            while chat
                .recent
                .front()
                .is_some_and(|t| at.saturating_duration_since(*t) >= GROUP_WINDOW)
            {
                chat.recent.pop_front();
            }
            if chat.recent.len() >= GROUP_LIMIT
                && let Some(oldest) = chat.recent.front()
            {
                at = at.max(*oldest + GROUP_WINDOW);
            }
            chat.recent.push_back(at);
        }
        chat.next = Some(at + PER_CHAT);
        chat.last = Some(at);
        st.next_global = Some(at + GLOBAL);
        at
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn spaces_sends_per_chat_and_overall() {
        let p = Pacer::new(true);
        let t0 = Instant::now();
        p.acquire(1).await;
        p.acquire(1).await;
        p.acquire(1).await;
        assert_eq!(Instant::now() - t0, Duration::from_secs(2));
        // Other chats only wait for the global 1/30 s spacing.
        let t1 = Instant::now();
        for chat in 2..32 {
            p.acquire(chat).await;
        }
        let spent = Instant::now() - t1;
        assert!(spent <= Duration::from_secs(1), "{spent:?}");
        assert!(spent >= GLOBAL * 29, "{spent:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn groups_get_twenty_per_minute() {
        let p = Pacer::new(true);
        let t0 = Instant::now();
        for _ in 0..21 {
            p.acquire(-100).await;
        }
        // 20 sends a second apart, then the 21st waits for the window to move on.
        assert_eq!(Instant::now() - t0, Duration::from_secs(60));
    }

    #[tokio::test(start_paused = true)]
    async fn disabled_never_waits() {
        let p = Pacer::new(false);
        let t0 = Instant::now();
        for _ in 0..100 {
            p.acquire(5).await;
        }
        assert_eq!(Instant::now(), t0);
    }
}
