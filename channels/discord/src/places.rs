//! What the adapter knows of the channels it hears from: whether one is a DM, a thread or a
//! forum, its name and parent. From serenity's cache first (fed by GUILD_CREATE and the
//! thread events), then from what the adapter learned itself: THREAD_CREATE / THREAD_UPDATE
//! as the shard runner reads them (so before the messages that follow them, and whether or
//! not the guild is cached), and `GET /channels/{id}` when neither knows. Bounded.
//!
//! [`situate`] uses it for a message: is it in a thread the bot takes part in (addressed to
//! it, see `follow`), and is it the first the bot gets of a forum post (the post's title
//! goes with it, or the model reads a body without its question).

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use serenity::all::Context;
use serenity::gateway::{CollectorCallback, ShardMessenger};
use serenity::model::channel::{GuildChannel, Message};
use serenity::model::event::Event;
use serenity::model::id::{ChannelId, GuildId, RoleId};
use switchboard_channel::Bounded;
use switchboard_channel::state_file::unix_ms;

use crate::memory::Memory;
use crate::rest::{ChannelInfo, Rest};

/// Channels remembered.
const MAX_PLACES: usize = 5000;
/// Longest wait for `GET /channels/{id}` while a message waits to be published.
const LOOKUP_WAIT: Duration = Duration::from_secs(5);

/// What kind of place a channel is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Dm,
    /// A public, private or announcement thread; a forum post is one too.
    Thread,
    /// A forum or media channel: its posts are threads.
    Forum,
    Other,
}

impl Kind {
    /// Discord's channel type number.
    fn of(kind: u8) -> Self {
        match kind {
            1 | 3 => Kind::Dm,
            10..=12 => Kind::Thread,
            15 | 16 => Kind::Forum,
            _ => Kind::Other,
        }
    }
}

/// A channel, as far as the adapter cares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Place {
    pub(crate) kind: Kind,
    pub(crate) name: Option<String>,
    /// A thread's channel (a text or forum channel).
    pub(crate) parent: Option<ChannelId>,
}

impl Place {
    pub(crate) fn dm() -> Self {
        Self {
            kind: Kind::Dm,
            name: None,
            parent: None,
        }
    }

    fn of_guild_channel(c: &GuildChannel) -> Self {
        Self {
            kind: Kind::of(u8::from(c.kind)),
            name: Some(c.name.clone()),
            parent: c.parent_id,
        }
    }
}

impl From<ChannelInfo> for Place {
    fn from(c: ChannelInfo) -> Self {
        Self {
            kind: Kind::of(c.kind),
            name: c.name,
            parent: c.parent_id,
        }
    }
}

/// Channels learned from thread events and REST, across the adapter's clients.
pub(crate) struct Places(Mutex<Bounded<ChannelId, Place>>);

impl Default for Places {
    fn default() -> Self {
        Self(Mutex::new(Bounded::with_cap(MAX_PLACES)))
    }
}

impl Places {
    fn known(&self) -> std::sync::MutexGuard<'_, Bounded<ChannelId, Place>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// What was learned of `id` (not looking in serenity's cache).
    pub(crate) fn get(&self, id: ChannelId) -> Option<Place> {
        self.known().get(&id).cloned()
    }

    pub(crate) fn learn(&self, id: ChannelId, place: Place) {
        self.known().insert(id, place);
    }

    /// Learn the threads of THREAD_CREATE and THREAD_UPDATE in gateway order, from the shard
    /// runner behind `shard` (call once per runner, on READY, as `Order::attach`).
    pub(crate) fn attach(memory: &Arc<Memory>, shard: &ShardMessenger) {
        let memory = memory.clone();
        shard.add_collector(CollectorCallback(Box::new(move |event| {
            let thread = match event {
                Event::ThreadCreate(ev) => Some(&ev.thread),
                Event::ThreadUpdate(ev) => Some(&ev.thread),
                _ => None,
            };
            if let Some(t) = thread {
                memory.places.learn(t.id, Place::of_guild_channel(t));
            }
            true
        })));
    }

    /// Channel `id` of `guild` (`None`: a DM) from the cache, from what was learned, or
    /// from Discord; `None` when it cannot be had in time (logged).
    pub(crate) async fn resolve(
        &self,
        ctx: &Context,
        rest: &Rest,
        guild: Option<GuildId>,
        id: ChannelId,
    ) -> Option<Place> {
        let Some(guild) = guild else {
            self.learn(id, Place::dm());
            return Some(Place::dm());
        };
        if let Some(p) = cached(ctx, guild, id) {
            // Noted for `send`, which has no cache to ask.
            self.learn(id, p.clone());
            return Some(p);
        }
        if let Some(p) = self.get(id) {
            return Some(p);
        }
        match tokio::time::timeout(LOOKUP_WAIT, rest.channel(id.get())).await {
            Ok(Ok(info)) => {
                let place = Place::from(info);
                self.learn(id, place.clone());
                Some(place)
            }
            Ok(Err(e)) => {
                tracing::debug!(channel = %id, error = %e, "discord: channel lookup failed");
                None
            }
            Err(_) => {
                tracing::debug!(channel = %id, "discord: channel lookup timed out");
                None
            }
        }
    }

    /// The name of channel `id` when the cache or what was learned knows it (no lookup).
    pub(crate) fn name(
        &self,
        ctx: &Context,
        guild: Option<GuildId>,
        id: ChannelId,
    ) -> Option<String> {
        let g = guild?;
        cached(ctx, g, id)
            .or_else(|| {
                // A thread learned otherwise (its create event, a lookup): named only when
                // its channel is this server's, never one of another server's.
                self.get(id).filter(|p| {
                    p.parent
                        .is_some_and(|parent| cached(ctx, g, parent).is_some())
                })
            })
            .and_then(|p| p.name)
    }
}

/// Channel or thread `id` of `guild` in serenity's cache.
fn cached(ctx: &Context, guild: GuildId, id: ChannelId) -> Option<Place> {
    let g = ctx.cache.guild(guild)?;
    g.channels
        .get(&id)
        .or_else(|| g.threads.iter().find(|t| t.id == id))
        .map(Place::of_guild_channel)
}

/// The name of role `id` of `guild` in serenity's cache.
pub(crate) fn role_name(ctx: &Context, guild: Option<GuildId>, id: RoleId) -> Option<String> {
    let g = ctx.cache.guild(guild?)?;
    g.roles.get(&id).map(|r| r.name.clone())
}

/// Where a message was sent, as far as addressing the bot goes.
#[derive(Debug, Default)]
pub(crate) struct Situation {
    /// In a thread the bot takes part in: addressed to it.
    pub(crate) in_bot_thread: bool,
    /// The title of the forum post this message opens, or brings the bot into.
    pub(crate) forum_title: Option<String>,
}

/// Situate guild message `msg` (`addressed`: it mentions or replies to the bot). Channels
/// are looked up only when it matters: in a thread the bot posted in, a message that
/// addresses it, or the starter message of a forum post (whose id is its thread's id).
pub(crate) async fn situate(
    memory: &Memory,
    ctx: &Context,
    rest: &Rest,
    msg: &Message,
    addressed: bool,
) -> Situation {
    let channel = msg.channel_id;
    let Some(guild) = msg.guild_id else {
        memory.places.learn(channel, Place::dm());
        return Situation::default();
    };
    let followed = memory.followed.follows(channel, unix_ms(SystemTime::now()));
    let starter = msg.id.get() == channel.get();
    if !(followed || addressed || starter) {
        return Situation::default();
    }
    let Some(place) = memory.places.resolve(ctx, rest, Some(guild), channel).await else {
        return Situation::default();
    };
    if place.kind != Kind::Thread {
        if followed {
            memory.followed.forget(channel);
        }
        return Situation::default();
    }
    let brings_bot_in = !followed && (starter || addressed);
    let forum_title = match (brings_bot_in, &place.name) {
        (true, Some(title)) => {
            let parent = match place.parent {
                Some(p) => memory.places.resolve(ctx, rest, Some(guild), p).await,
                None => None,
            };
            // A forum post's starter message has its thread's id: that says enough when
            // the parent cannot be looked up.
            let in_forum = parent.map_or(starter, |p| p.kind == Kind::Forum);
            in_forum.then(|| title.clone())
        }
        _ => None,
    };
    Situation {
        in_bot_thread: followed,
        forum_title,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn discord_channel_types_map_to_kinds() {
        assert_eq!(Kind::of(0), Kind::Other);
        assert_eq!(Kind::of(1), Kind::Dm);
        assert_eq!(Kind::of(5), Kind::Other);
        for t in [10, 11, 12] {
            assert_eq!(Kind::of(t), Kind::Thread, "{t}");
        }
        assert_eq!(Kind::of(15), Kind::Forum);
        assert_eq!(Kind::of(16), Kind::Forum, "media channels have posts too");
    }
}
