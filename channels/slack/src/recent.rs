//! What was handled lately, per conversation: where a catch-up starts.
//!
//! For each conversation (channel, private channel, DM, group DM) heard from in the last
//! 24 h, [`Recent`] keeps the `ts` of the last message intake handled (published, dropped as
//! a duplicate, or ignored on purpose), and for the threads the bot takes part in there, the
//! last reply handled. After a connection gap (see `catch_up`) each is asked what came after
//! it. A catch-up planned leaves an *unfinished* mark where it starts, which live messages
//! do not move; only the catch-up's success clears it, so one that failed (or was cut short
//! by a stop or a crash) is asked again from the same point, in this run and after a
//! restart. With a state file the same holds across restarts: it is written every few
//! seconds while something changed and when the channel stops, and read when it starts. A
//! crash loses only the last few seconds of it; those messages are fetched again and the bus
//! drops them (same message id).

use std::cmp::Ordering;
use std::collections::HashMap;
use std::path::Path;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};

use switchboard_channel::state_file::unix_ms;

use serde::{Deserialize, Serialize};

/// Conversations remembered (the most recently active).
const MAX_CONVERSATIONS: usize = 500;
/// Threads remembered per conversation (the most recently active).
const MAX_THREADS: usize = 10;
/// A conversation quiet for longer is forgotten: no gap that old is worth answering.
const MAX_AGE: Duration = Duration::from_secs(24 * 3600);
/// Conversations caught up on after a gap, the most recently active first.
const MAX_CATCH_UP: usize = 200;

/// A Slack message timestamp (`"1700000000.000100"`), which is also the message's id in its
/// conversation. Ordered by its value (seconds, then microseconds), not as text: `"9.5"`
/// comes before `"10.1"`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub(crate) struct Ts(String);

impl Ts {
    pub(crate) fn new(ts: impl Into<String>) -> Self {
        Self(ts.into())
    }

    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }

    /// `(seconds, microseconds)`; fractions are read as decimals (`.2` is 200 000 µs).
    fn value(&self) -> (u64, u32) {
        let (secs, frac) = self.0.split_once('.').unwrap_or((&self.0, ""));
        let micros: String = frac.chars().chain(std::iter::repeat('0')).take(6).collect();
        (secs.parse().unwrap_or(0), micros.parse().unwrap_or(0))
    }
}

impl Ord for Ts {
    fn cmp(&self, other: &Self) -> Ordering {
        self.value()
            .cmp(&other.value())
            .then_with(|| self.0.cmp(&other.0))
    }
}

impl PartialOrd for Ts {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// One handled message, as intake saw it.
pub(crate) struct Handled<'a> {
    pub channel: &'a str,
    /// `channel_type` when the event said (`channel`, `group`, `im`, `mpim`).
    pub kind: Option<&'a str>,
    pub ts: Ts,
    /// The thread it belongs to (its root's ts), when in one.
    pub thread: Option<Ts>,
    /// The bot takes part in that thread: its replies are caught up on too.
    pub bot_thread: bool,
}

/// Where a conversation's catch-up starts.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Gap {
    pub channel: String,
    pub kind: Option<String>,
    /// The last message handled: the catch-up asks for what came after it.
    pub last: Ts,
    /// Threads the bot takes part in: `(root, last reply handled)`.
    pub threads: Vec<(Ts, Ts)>,
    /// The session that handed it out: its success clears the unfinished mark only if no
    /// later session handed the conversation out again.
    pub session: u64,
}

#[derive(Default)]
struct Inner {
    conversations: HashMap<String, Conversation>,
    /// Gaps handed out; what was loaded from a state file counts as one.
    sessions: u64,
    /// Changed since the state file was written.
    dirty: bool,
}

struct Conversation {
    kind: Option<String>,
    last: Ts,
    at: Instant,
    threads: Vec<Thread>,
    /// A catch-up from here has not succeeded yet.
    unfinished: Option<Unfinished>,
}

/// Where a catch-up that has not succeeded yet starts; live messages leave it alone.
struct Unfinished {
    from: Ts,
    threads: Vec<(Ts, Ts)>,
    /// The session that last handed it out (0: loaded from the state file).
    session: u64,
}

impl Unfinished {
    fn gap(&self, channel: &str, kind: Option<&String>) -> Gap {
        Gap {
            channel: channel.to_string(),
            kind: kind.cloned(),
            last: self.from.clone(),
            threads: self.threads.clone(),
            session: self.session,
        }
    }
}

struct Thread {
    root: Ts,
    last: Ts,
    at: Instant,
}

/// The state file.
#[derive(Serialize, Deserialize)]
struct Saved {
    conversations: Vec<SavedConversation>,
}

#[derive(Serialize, Deserialize)]
struct SavedConversation {
    channel: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    kind: Option<String>,
    last: Ts,
    /// When it was handled, in ms since the Unix epoch.
    at_ms: u64,
    #[serde(default)]
    threads: Vec<SavedThread>,
    /// Absent in files written before it existed: nothing unfinished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    unfinished: Option<SavedUnfinished>,
}

#[derive(Serialize, Deserialize)]
struct SavedUnfinished {
    from: Ts,
    #[serde(default)]
    threads: Vec<SavedMark>,
}

#[derive(Serialize, Deserialize)]
struct SavedMark {
    root: Ts,
    last: Ts,
}

#[derive(Serialize, Deserialize)]
struct SavedThread {
    root: Ts,
    last: Ts,
    at_ms: u64,
}

/// The last handled message per conversation; see the module docs.
#[derive(Default)]
pub(crate) struct Recent(Mutex<Inner>);

impl Recent {
    fn inner(&self) -> MutexGuard<'_, Inner> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Note `m` handled at `now`.
    pub(crate) fn handled(&self, m: Handled<'_>, now: Instant) {
        let mut inner = self.inner();
        inner.dirty = true;
        let conv = inner
            .conversations
            .entry(m.channel.to_string())
            .or_insert_with(|| Conversation {
                kind: None,
                last: m.ts.clone(),
                at: now,
                threads: Vec::new(),
                unfinished: None,
            });
        if m.ts > conv.last {
            conv.last = m.ts.clone();
        }
        conv.at = now;
        if let Some(k) = m.kind {
            conv.kind = Some(k.to_string());
        }
        if let Some(root) = m.thread {
            match conv.threads.iter_mut().find(|t| t.root == root) {
                Some(t) => {
                    t.last = t.last.clone().max(m.ts);
                    t.at = now;
                }
                None if m.bot_thread => {
                    conv.threads.push(Thread {
                        root,
                        last: m.ts,
                        at: now,
                    });
                    if conv.threads.len() > MAX_THREADS {
                        conv.threads.sort_by_key(|t| std::cmp::Reverse(t.at));
                        conv.threads.truncate(MAX_THREADS);
                    }
                }
                None => {}
            }
        }
        if inner.conversations.len() > MAX_CONVERSATIONS {
            let oldest = inner
                .conversations
                .iter()
                .min_by_key(|(_, c)| c.at)
                .map(|(c, _)| c.clone());
            if let Some(c) = oldest {
                inner.conversations.remove(&c);
            }
        }
    }

    /// Forget `channel` (the bot was removed from it).
    pub(crate) fn forget(&self, channel: &str) {
        let mut inner = self.inner();
        if inner.conversations.remove(channel).is_some() {
            inner.dirty = true;
        }
    }

    /// The connection was back at `now` after a gap (or the channel started): the
    /// conversations to catch up on, the most recently active first. None at the first
    /// connection of a run that remembered nothing.
    pub(crate) fn new_session(&self, now: Instant) -> Vec<Gap> {
        let mut inner = self.inner();
        inner.sessions += 1;
        inner
            .conversations
            .retain(|_, c| now.saturating_duration_since(c.at) <= MAX_AGE);
        if inner.sessions == 1 {
            return Vec::new();
        }
        let session = inner.sessions;
        inner.dirty = true;
        let mut order: Vec<(Instant, String)> = inner
            .conversations
            .iter()
            .map(|(channel, c)| (c.at, channel.clone()))
            .collect();
        order.sort_by_key(|(at, _)| std::cmp::Reverse(*at));
        order.truncate(MAX_CATCH_UP);
        let mut gaps = Vec::with_capacity(order.len());
        for (_, channel) in order {
            let Some(c) = inner.conversations.get_mut(&channel) else {
                continue;
            };
            let current: Vec<(Ts, Ts)> = c
                .threads
                .iter()
                .filter(|t| now.saturating_duration_since(t.at) <= MAX_AGE)
                .map(|t| (t.root.clone(), t.last.clone()))
                .collect();
            let last = c.last.clone();
            let mark = c.unfinished.get_or_insert_with(|| Unfinished {
                from: last,
                threads: Vec::new(),
                session,
            });
            mark.session = session;
            // Threads joined since the mark was made start from their last handled reply.
            for (root, last) in current {
                if !mark.threads.iter().any(|(r, _)| *r == root) {
                    mark.threads.push((root, last));
                }
            }
            gaps.push(mark.gap(&channel, c.kind.as_ref()));
        }
        gaps
    }

    /// The gap of `channel` still unfinished, to try again; `None` when there is none.
    pub(crate) fn unfinished(&self, channel: &str) -> Option<Gap> {
        let inner = self.inner();
        let c = inner.conversations.get(channel)?;
        c.unfinished
            .as_ref()
            .map(|u| u.gap(channel, c.kind.as_ref()))
    }

    /// The catch-up of `gap` succeeded: clear its unfinished mark, unless a later session
    /// handed the conversation out again (that one clears it).
    pub(crate) fn finished(&self, gap: &Gap) {
        let mut inner = self.inner();
        let Some(c) = inner.conversations.get_mut(&gap.channel) else {
            return;
        };
        if c.unfinished
            .as_ref()
            .is_some_and(|u| u.session == gap.session)
        {
            c.unfinished = None;
            inner.dirty = true;
        }
    }

    /// Read the state file written by [`Recent::save`] into this (a missing or unreadable
    /// file is nothing remembered); `now` and `wall` are the same moment on both clocks.
    /// What it holds is caught up on at the first session.
    pub(crate) fn load(&self, path: &Path, now: Instant, wall: SystemTime) {
        let saved: Option<Saved> = switchboard_channel::state_file::read(path, "slack");
        let wall_ms = unix_ms(wall);
        let at = |at_ms: u64| {
            let age = Duration::from_millis(wall_ms.saturating_sub(at_ms));
            (age <= MAX_AGE).then(|| now.checked_sub(age).unwrap_or(now))
        };
        let mut inner = Inner::default();
        for c in saved.map(|s| s.conversations).unwrap_or_default() {
            let Some(conv_at) = at(c.at_ms) else { continue };
            let threads = c
                .threads
                .into_iter()
                .filter_map(|t| {
                    at(t.at_ms).map(|at| Thread {
                        root: t.root,
                        last: t.last,
                        at,
                    })
                })
                .take(MAX_THREADS)
                .collect();
            inner.conversations.insert(
                c.channel,
                Conversation {
                    kind: c.kind,
                    last: c.last,
                    at: conv_at,
                    threads,
                    unfinished: c.unfinished.map(|u| Unfinished {
                        from: u.from,
                        threads: u.threads.into_iter().map(|t| (t.root, t.last)).collect(),
                        session: 0,
                    }),
                },
            );
        }
        // What was remembered counts as the session before the first one.
        inner.sessions = u64::from(!inner.conversations.is_empty());
        *self.inner() = inner;
    }

    /// Whether anything changed since the state file was written.
    pub(crate) fn changed(&self) -> bool {
        self.inner().dirty
    }

    /// Write the state file if anything changed since the last time (`now` and `wall` as in
    /// [`Recent::load`]). Atomic: a crash leaves the old file or the new one.
    pub(crate) fn save(&self, path: &Path, now: Instant, wall: SystemTime) {
        let saved = {
            let mut inner = self.inner();
            if !inner.dirty {
                return;
            }
            inner.dirty = false;
            let wall_ms = unix_ms(wall);
            let at_ms = |at: Instant| {
                let age = now.saturating_duration_since(at).as_millis();
                wall_ms.saturating_sub(u64::try_from(age).unwrap_or(u64::MAX))
            };
            let conversations = inner
                .conversations
                .iter()
                .map(|(channel, c)| SavedConversation {
                    channel: channel.clone(),
                    kind: c.kind.clone(),
                    last: c.last.clone(),
                    at_ms: at_ms(c.at),
                    threads: c
                        .threads
                        .iter()
                        .map(|t| SavedThread {
                            root: t.root.clone(),
                            last: t.last.clone(),
                            at_ms: at_ms(t.at),
                        })
                        .collect(),
                    unfinished: c.unfinished.as_ref().map(|u| SavedUnfinished {
                        from: u.from.clone(),
                        threads: u
                            .threads
                            .iter()
                            .map(|(root, last)| SavedMark {
                                root: root.clone(),
                                last: last.clone(),
                            })
                            .collect(),
                    }),
                })
                .collect();
            Saved { conversations }
        };
        if let Err(e) = switchboard_channel::state_file::write(path, &saved) {
            self.inner().dirty = true;
            tracing::warn!(file = %path.display(), error = %e, "slack: cannot write the state file");
        }
    }
}

#[cfg(test)]
#[path = "recent_tests.rs"]
mod tests;
