//! Messages a lost session never delivered.
//!
//! serenity resumes a dropped session when it can, and Discord then replays what was missed.
//! When it cannot (the resume failed, the session expired, the client was restarted), the new
//! session only brings what is sent from then on, and messages sent in the gap would be lost.
//! [`Recent`] keeps, for each channel heard from lately, the last message handled (its
//! channel's line is done up to it); after a new session each such channel is asked what came
//! after it (`GET /channels/{id}/messages?after=`), and those messages go through intake as if
//! the gateway had sent them. The bus drops any it already has (same message id).
//!
//! With a state file the same holds across restarts: it is written every few seconds while
//! something changed and when the adapter stops, and read when it starts, so the first session
//! after a restart fetches what was sent while the gateway was down. A crash loses only the
//! last few seconds of it; those messages are fetched again and dropped by the bus. The file
//! also keeps the threads the bot takes part in (`follow`).

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use switchboard_channel::state_file::unix_ms;

use futures_util::StreamExt;
use serde::{Deserialize, Serialize};
use serenity::all::Context;
use serenity::model::id::{ChannelId, GuildId, MessageId};

use crate::follow::{Followed, SavedThread};
use crate::handler::HandlerState;
use crate::order::Reserved;
use crate::rest::RestError;

/// Channels remembered (the most recently active).
const MAX_CHANNELS: usize = 500;
/// A channel quiet for longer is forgotten: Discord keeps no gap that long worth answering.
const MAX_AGE: Duration = Duration::from_secs(24 * 3600);
/// Messages fetched per channel (one page): more is a flood nobody expects answered.
const PAGE: usize = 100;
/// Channels fetched at once.
const PARALLEL: usize = 4;
/// Channels caught up on after a new session, the most recently active first: their next
/// messages wait for it.
const MAX_CATCH_UP: usize = 200;
/// Tries per channel, over a rate limit or a passing fault.
const ATTEMPTS: u32 = 3;
/// Longest wait for a rate limit before another try.
const MAX_WAIT: Duration = Duration::from_secs(10);

/// The last message handled per channel, across the adapter's clients.
#[derive(Default)]
pub(crate) struct Recent(Mutex<Inner>);

#[derive(Default)]
struct Inner {
    channels: HashMap<ChannelId, Last>,
    sessions: u64,
    /// Changed since the state file was written.
    dirty: bool,
}

/// The state file: each channel's last handled message, and the threads the bot takes part
/// in (absent from files written before it followed threads).
#[derive(Serialize, Deserialize)]
struct Saved {
    channels: Vec<SavedChannel>,
    #[serde(default)]
    threads: Vec<SavedThread>,
}

#[derive(Serialize, Deserialize)]
struct SavedChannel {
    channel: ChannelId,
    last: MessageId,
    guild: Option<GuildId>,
    /// When it was handled, in ms since the Unix epoch.
    at_ms: u64,
}

/// A channel's last handled message.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Last {
    pub(crate) id: MessageId,
    /// REST messages carry no guild id; the gateway's do.
    pub(crate) guild: Option<GuildId>,
    at: Instant,
}

impl Recent {
    fn inner(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether `channel` has handled message `id` or a later one: a catch-up fetched it
    /// before the gateway sent it (or a resumed session replays it).
    pub(crate) fn has_handled(&self, channel: ChannelId, id: MessageId) -> bool {
        self.inner()
            .channels
            .get(&channel)
            .is_some_and(|last| last.id >= id)
    }

    /// Message `id` of `channel` was handled, at `now`.
    pub(crate) fn handled(
        &self,
        channel: ChannelId,
        id: MessageId,
        guild: Option<GuildId>,
        now: Instant,
    ) {
        let mut inner = self.inner();
        let last = inner
            .channels
            .entry(channel)
            .or_insert(Last { id, guild, at: now });
        last.id = last.id.max(id);
        last.guild = last.guild.or(guild);
        last.at = now;
        inner.dirty = true;
        if inner.channels.len() > MAX_CHANNELS {
            let oldest = inner
                .channels
                .iter()
                .min_by_key(|(_, l)| l.at)
                .map(|(c, _)| *c);
            if let Some(c) = oldest {
                inner.channels.remove(&c);
            }
        }
    }

    /// Read the state file written by [`Recent::save`] (a missing or unreadable one is
    /// nothing remembered); `now` and `wall` are the same moment on both clocks. What it holds
    /// is caught up on at the first session; its threads go to `followed`.
    pub(crate) fn load(path: &Path, now: Instant, wall: SystemTime, followed: &Followed) -> Self {
        let saved: Option<Saved> = switchboard_channel::state_file::read(path, "discord");
        let wall_ms = unix_ms(wall);
        let mut inner = Inner::default();
        let (channels, threads) = saved.map_or_else(Default::default, |s| (s.channels, s.threads));
        followed.restore(threads, wall_ms);
        for c in channels {
            let age = Duration::from_millis(wall_ms.saturating_sub(c.at_ms));
            if age > MAX_AGE {
                continue;
            }
            let at = now.checked_sub(age).unwrap_or(now);
            inner.channels.insert(
                c.channel,
                Last {
                    id: c.last,
                    guild: c.guild,
                    at,
                },
            );
        }
        // What was remembered counts as the session before the first one.
        inner.sessions = u64::from(!inner.channels.is_empty());
        Self(Mutex::new(inner))
    }

    /// Whether anything changed since the state file was written.
    pub(crate) fn changed(&self) -> bool {
        self.inner().dirty
    }

    /// Write the state file if anything changed since the last time, here or in `followed`
    /// (`now` and `wall` as in [`Recent::load`]). Atomic: a crash leaves the old file or the
    /// new one.
    pub(crate) fn save(&self, path: &Path, now: Instant, wall: SystemTime, followed: &Followed) {
        if !self.changed() && !followed.changed() {
            return;
        }
        let threads = followed.take_saved(unix_ms(wall));
        let saved = {
            let mut inner = self.inner();
            inner.dirty = false;
            let wall_ms = unix_ms(wall);
            let channels = inner
                .channels
                .iter()
                .map(|(c, l)| SavedChannel {
                    channel: *c,
                    last: l.id,
                    guild: l.guild,
                    at_ms: wall_ms.saturating_sub(
                        u64::try_from(now.saturating_duration_since(l.at).as_millis())
                            .unwrap_or(u64::MAX),
                    ),
                })
                .collect();
            Saved { channels, threads }
        };
        if let Err(e) = switchboard_channel::state_file::write(path, &saved) {
            self.inner().dirty = true;
            followed.unsaved();
            tracing::warn!(file = %path.display(), error = %e, "discord: cannot write the state file");
        }
    }

    /// A session began (READY) at `now`: the channels to catch up on (none after the first).
    pub(crate) fn new_session(&self, now: Instant) -> Vec<(ChannelId, Last)> {
        let mut inner = self.inner();
        inner.sessions += 1;
        inner
            .channels
            .retain(|_, l| now.saturating_duration_since(l.at) <= MAX_AGE);
        if inner.sessions == 1 {
            return Vec::new();
        }
        let mut gap: Vec<(ChannelId, Last)> =
            inner.channels.iter().map(|(c, l)| (*c, *l)).collect();
        gap.sort_by_key(|(_, l)| std::cmp::Reverse(l.at));
        gap.truncate(MAX_CATCH_UP);
        gap
    }
}

/// Fetch and handle what each channel got after its last handled message, in its place in
/// the channel's line.
pub(crate) async fn catch_up(
    state: Arc<HandlerState>,
    ctx: Context,
    todo: Vec<(ChannelId, Last, Reserved)>,
) {
    tracing::debug!(
        channels = todo.len(),
        "discord: new session; fetching what was sent meanwhile"
    );
    let shutdown = state.shutdown.clone();
    let all = futures_util::stream::iter(todo)
        .for_each_concurrent(PARALLEL, |(channel, last, place)| {
            let state = state.clone();
            let ctx = ctx.clone();
            async move {
                let _turn = place.wait().await;
                let Some(msgs) = fetch(&state, channel, last).await else {
                    return;
                };
                if msgs.len() >= PAGE {
                    tracing::warn!(channel = %channel,
                        "discord: {PAGE} or more messages came while disconnected; the first {PAGE} are handled");
                }
                for mut msg in msgs {
                    if msg.guild_id.is_none() {
                        msg.guild_id = last.guild;
                    }
                    tracing::info!(channel = %channel, id = %msg.id,
                        "discord: a message sent while disconnected");
                    state.handle(&ctx, &msg).await;
                }
            }
        });
    tokio::select! {
        _ = all => {}
        // What is left is fetched after the next start (the state file).
        _ = shutdown.cancelled() => {}
    }
}

/// What `channel` got after `last`, tried [`ATTEMPTS`] times over a rate limit or a
/// passing fault; `None` when it cannot be had (the gap is then lost, and said so).
async fn fetch(
    state: &HandlerState,
    channel: ChannelId,
    last: Last,
) -> Option<Vec<serenity::model::channel::Message>> {
    let mut wait = Duration::from_secs(1);
    for attempt in 1..=ATTEMPTS {
        let err = match state
            .rest
            .messages_after(channel.get(), last.id.get())
            .await
        {
            Ok(m) => return Some(m),
            Err(e) => e,
        };
        let retry = match &err {
            RestError::RateLimited(d) => Some((*d).min(MAX_WAIT)),
            e if e.is_transient() => Some(wait),
            _ => None,
        };
        match retry {
            Some(d) if attempt < ATTEMPTS => {
                tracing::info!(channel = %channel, error = %err, retry_in = ?d,
                    "discord: fetching the messages sent while disconnected");
                tokio::time::sleep(d).await;
                wait *= 2;
            }
            _ => {
                tracing::warn!(channel = %channel, error = %err,
                    "discord: could not fetch the messages sent while disconnected; they are not answered");
                return None;
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(c: u64, m: u64) -> (ChannelId, MessageId) {
        (ChannelId::new(c), MessageId::new(m))
    }

    #[test]
    fn the_first_session_has_no_gap_and_later_ones_get_every_recent_channel() {
        let recent = Recent::default();
        let t0 = Instant::now();
        assert!(recent.new_session(t0).is_empty());
        let (a, m5) = ids(1, 5);
        let (b, m7) = ids(2, 7);
        recent.handled(a, m5, Some(GuildId::new(9)), t0);
        recent.handled(a, MessageId::new(3), None, t0);
        recent.handled(b, m7, None, t0);
        // What a catch-up handled is not handled again when the gateway sends it.
        assert!(recent.has_handled(a, m5) && recent.has_handled(a, MessageId::new(4)));
        assert!(!recent.has_handled(a, MessageId::new(6)) && !recent.has_handled(ids(3, 1).0, m5));
        let mut gap = recent.new_session(t0 + Duration::from_secs(60));
        gap.sort_by_key(|(c, _)| *c);
        assert_eq!(gap.len(), 2);
        assert_eq!(
            (gap[0].0, gap[0].1.id, gap[0].1.guild),
            (a, m5, Some(GuildId::new(9)))
        );
        assert_eq!((gap[1].0, gap[1].1.id, gap[1].1.guild), (b, m7, None));
    }

    #[test]
    fn the_state_file_carries_recent_channels_across_a_restart() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("discord.json");
        let (t0, w0) = (Instant::now(), SystemTime::now());
        let followed = Followed::default();
        assert!(
            Recent::load(&path, t0, w0, &followed)
                .new_session(t0)
                .is_empty(),
            "no file"
        );

        let recent = Recent::default();
        recent.new_session(t0);
        recent.handled(
            ChannelId::new(1),
            MessageId::new(10),
            Some(GuildId::new(9)),
            t0,
        );
        recent.save(&path, t0, w0, &followed);
        recent.handled(ChannelId::new(2), MessageId::new(20), None, t0);
        recent.save(&path, t0, w0, &followed);
        // A thread the bot posted in is saved too, even when nothing else changed.
        followed.posted(ChannelId::new(3), unix_ms(w0));
        recent.save(&path, t0, w0, &followed);

        // An hour later: both channels are caught up on at the first session.
        let (t1, w1) = (
            t0 + Duration::from_secs(3600),
            w0 + Duration::from_secs(3600),
        );
        let back = Followed::default();
        let mut gap = Recent::load(&path, t1, w1, &back).new_session(t1);
        assert!(back.follows(ChannelId::new(3), unix_ms(w1)));
        gap.sort_by_key(|(c, _)| *c);
        let got: Vec<_> = gap
            .iter()
            .map(|(c, l)| (c.get(), l.id.get(), l.guild))
            .collect();
        assert_eq!(got, vec![(1, 10, Some(GuildId::new(9))), (2, 20, None)]);

        // Two days later: too old to answer.
        let w2 = w0 + MAX_AGE * 2;
        assert!(
            Recent::load(&path, t1, w2, &Followed::default())
                .new_session(t1)
                .is_empty()
        );

        // A file written before threads were kept reads as no thread followed.
        std::fs::write(&path, br#"{"channels":[]}"#).expect("write");
        let none = Followed::default();
        Recent::load(&path, t1, w1, &none);
        assert!(!none.follows(ChannelId::new(3), unix_ms(w1)));

        // A damaged file is nothing remembered.
        std::fs::write(&path, b"{not json").expect("write");
        assert!(
            Recent::load(&path, t1, w1, &Followed::default())
                .new_session(t1)
                .is_empty()
        );
    }

    #[test]
    fn quiet_channels_are_forgotten_and_the_map_is_bounded() {
        let recent = Recent::default();
        let t0 = Instant::now();
        recent.new_session(t0);
        recent.handled(ChannelId::new(1), MessageId::new(1), None, t0);
        for c in 2..=(MAX_CHANNELS as u64 + 1) {
            recent.handled(ChannelId::new(c), MessageId::new(c), None, t0 + MAX_AGE);
        }
        assert_eq!(recent.inner().channels.len(), MAX_CHANNELS);
        assert!(!recent.inner().channels.contains_key(&ChannelId::new(1)));
        let gap = recent.new_session(t0 + MAX_AGE * 2 + Duration::from_secs(1));
        assert!(gap.is_empty(), "a day quiet: {gap:?}");
    }
}
