//! Send pacing within Telegram's published limits: about one message per second per chat,
//! 20 per minute per group, 30 per second overall.
//!
//! Each send finds its chat's earliest time (per-chat spacing, group window), then takes
//! the first free global slot (time is cut into slots of 1/30 s) at or after it, under a
//! short lock, and sleeps until it outside the lock. A chat whose own next slot is far
//! ahead takes a slot far ahead and leaves the earlier ones to other chats, so one busy
//! chat never delays another. When pacing is off, `acquire` returns at once (self-hosted
//! Bot API server, benchmark).

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// Spacing between two sends to the same chat.
const PER_CHAT: Duration = Duration::from_secs(1);
/// At most this many sends per group in [`GROUP_WINDOW`].
const GROUP_LIMIT: usize = 20;
const GROUP_WINDOW: Duration = Duration::from_secs(60);
/// Global slots per second: at most one send starts in each.
const GLOBAL_PER_SEC: u128 = 30;
const NANOS_PER_SEC: u128 = 1_000_000_000;
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
    /// Start of global slot 0, set by the first reservation.
    epoch: Option<Instant>,
    /// Reserved global slots not yet begun; each send takes one.
    used: BTreeSet<u64>,
    chats: HashMap<i64, ChatSlots>,
}

/// Limits the rate of sends; cheap to share behind an `Arc` or a reference.
pub(crate) struct Pacer {
    enabled: bool,
    state: Mutex<State>,
}

/// When global slot `slot` begins.
fn slot_start(epoch: Instant, slot: u64) -> Instant {
    let nanos = u128::from(slot) * NANOS_PER_SEC / GLOBAL_PER_SEC;
    epoch + Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
}

/// The first global slot that begins at or after `t`.
fn first_slot_from(epoch: Instant, t: Instant) -> u64 {
    let nanos = t.saturating_duration_since(epoch).as_nanos();
    u64::try_from((nanos * GLOBAL_PER_SEC).div_ceil(NANOS_PER_SEC)).unwrap_or(u64::MAX)
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
        let mut guard = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let st = &mut *guard;
        if st.chats.len() > 1024 {
            st.chats.retain(|_, c| {
                c.last
                    .is_some_and(|l| now.saturating_duration_since(l) < FORGET_AFTER)
            });
        }
        let epoch = *st.epoch.get_or_insert(now);
        // Slots that began before now can no longer be given out.
        let past = first_slot_from(epoch, now);
        st.used = st.used.split_off(&past);

        // This chat's own earliest time.
        let chat = st.chats.entry(chat_id).or_default();
        let mut earliest = now;
        if let Some(n) = chat.next {
            earliest = earliest.max(n);
        }
        if chat_id < 0 {
            while chat
                .recent
                .front()
                .is_some_and(|t| earliest.saturating_duration_since(*t) >= GROUP_WINDOW)
            {
                chat.recent.pop_front();
            }
            if chat.recent.len() >= GROUP_LIMIT
                && let Some(oldest) = chat.recent.front()
            {
                earliest = earliest.max(*oldest + GROUP_WINDOW);
            }
        }

        // The first free global slot from then on; earlier free slots stay for other chats.
        let mut slot = first_slot_from(epoch, earliest);
        while st.used.contains(&slot) {
            slot += 1;
        }
        st.used.insert(slot);
        let at = slot_start(epoch, slot);
        if chat_id < 0 {
            chat.recent.push_back(at);
        }
        chat.next = Some(at + PER_CHAT);
        chat.last = Some(at);
        at
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The spacing of global slots (rounded down to whole nanoseconds).
    const GLOBAL: Duration = Duration::from_nanos(1_000_000_000 / 30);

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
    async fn a_group_at_its_limit_never_delays_other_chats() {
        let p = Pacer::new(true);
        let t0 = Instant::now();
        for _ in 0..20 {
            p.acquire(-100).await;
        }
        // The group's 21st send is held back until its window moves on…
        let held = p.reserve(-100, Instant::now());
        assert_eq!(held - t0, Duration::from_secs(60));
        // …and a DM from another chat still goes out within one global slot.
        let t1 = Instant::now();
        p.acquire(5).await;
        let waited = Instant::now() - t1;
        // Tokio's timers fire on whole milliseconds.
        assert!(waited <= GLOBAL + Duration::from_millis(1), "{waited:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn never_more_than_thirty_sends_a_second_overall() {
        let p = Pacer::new(true);
        let now = Instant::now();
        // Groups reserved a while ahead, plus many chats asking at once.
        let mut at: Vec<Instant> = (1..=3)
            .flat_map(|g| (0..25).map(move |_| -g))
            .chain(100..190)
            .map(|chat| p.reserve(chat, now))
            .collect();
        at.sort();
        for (i, t) in at.iter().enumerate() {
            let in_a_second = at[i..]
                .iter()
                .take_while(|u| **u - *t < Duration::from_secs(1))
                .count();
            assert!(in_a_second <= 30, "{in_a_second} sends within 1 s of {i}");
        }
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
