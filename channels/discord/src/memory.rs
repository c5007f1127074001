//! What intake and replies share: the channels known (`places`) and the threads the bot
//! takes part in (`follow`, kept in the state file).

use std::time::SystemTime;

use serenity::model::id::ChannelId;
use switchboard_channel::state_file::unix_ms;

use crate::follow::Followed;
use crate::places::{Kind, Places};

/// The adapter's memory, shared by its clients and `send`.
#[derive(Default)]
pub(crate) struct Memory {
    pub(crate) places: Places,
    pub(crate) followed: Followed,
}

impl Memory {
    /// The bot is about to post in `channel`: a thread is followed from now on, before the
    /// post lands, so that a follow-up written the moment the answer shows is not missed.
    /// One not known yet is noted too; intake checks that it is a thread before it counts
    /// (see `places::situate`). Returns whether it was not followed before.
    pub(crate) fn posting(&self, channel: u64) -> bool {
        let Some(id) = (channel != 0).then(|| ChannelId::new(channel)) else {
            return false;
        };
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
}
