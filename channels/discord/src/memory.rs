//! What intake and replies share, all bounded: the channels known (`places`), the threads
//! the bot takes part in (`follow`, kept in the state file), the DM channels opened for
//! user ids given as targets, and the channels whose refused posts were explained
//! (`refused`).

use std::sync::Mutex;
use std::time::SystemTime;

use serenity::model::id::ChannelId;
use switchboard_channel::Bounded;
use switchboard_channel::state_file::unix_ms;

use crate::follow::Followed;
use crate::places::{Kind, Places};
use crate::refused::Explained;

/// DM channels remembered.
const MAX_DMS: usize = 1000;

/// The adapter's memory, shared by its clients and `send`.
pub(crate) struct Memory {
    pub(crate) places: Places,
    pub(crate) followed: Followed,
    /// User id → the DM channel opened with them.
    dms: Mutex<Bounded<u64, u64>>,
    pub(crate) explained: Explained,
}

impl Default for Memory {
    fn default() -> Self {
        Self {
            places: Places::default(),
            followed: Followed::default(),
            dms: Mutex::new(Bounded::with_cap(MAX_DMS)),
            explained: Explained::default(),
        }
    }
}

impl Memory {
    fn dms(&self) -> std::sync::MutexGuard<'_, Bounded<u64, u64>> {
        self.dms.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The DM channel opened with user `user`, if one was.
    pub(crate) fn dm_of(&self, user: u64) -> Option<u64> {
        self.dms().get(&user).copied()
    }

    /// `dm` is the DM channel with user `user`.
    pub(crate) fn remember_dm(&self, user: u64, dm: u64) {
        self.dms().insert(user, dm);
        if let Some(id) = (dm != 0).then(|| ChannelId::new(dm)) {
            self.places.learn(id, crate::places::Place::dm());
        }
    }

    /// The bot is about to post in `channel`, answering the platform message `reply_to`.
    /// A thread opened for the bot (its answer replies to the thread's own first message —
    /// a forum post, or a thread started from a message that asked it: Discord gives both
    /// that message's id) is followed from now on, before the post lands, so that a
    /// follow-up written the moment the answer shows is not missed; one followed already
    /// stays followed. Any other post (an answer to a mention in someone's busy thread, a
    /// reminder, a message sent there) follows nothing. One not known yet is noted too;
    /// intake checks that it is a thread before it counts (see `places::situate`).
    /// Returns whether it was not followed before.
    pub(crate) fn posting(&self, channel: u64, reply_to: Option<&str>) -> bool {
        let Some(id) = (channel != 0).then(|| ChannelId::new(channel)) else {
            return false;
        };
        let opens = reply_to == Some(channel.to_string().as_str());
        if !opens && !self.followed.follows(id, unix_ms(SystemTime::now())) {
            return false;
        }
        match self.places.get(id).map(|p| p.kind) {
            Some(Kind::Thread) | None => self.followed.posted(id, unix_ms(SystemTime::now())),
            Some(_) => false,
        }
    }

    /// Nothing was posted in `channel` after all ([`Memory::posting`] said `newly`).
    pub(crate) fn not_posted(&self, channel: u64, newly: bool) {
        if newly && channel != 0 {
            self.followed.forget(ChannelId::new(channel));
        }
    }

    /// A post in `channel` went through.
    pub(crate) fn posted(&self, channel: u64) {
        self.explained.cleared(channel);
    }
}
