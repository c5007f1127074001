//! Posts Discord refuses for want of a permission (403 with code 50001, Missing Access, or
//! 50013, Missing Permissions). Nobody in the chat sees anything, so the log says which
//! permission to grant in which channel: once per channel, not at every reply. Bounded; a
//! channel that takes a post again is forgotten, so a permission lost later is told again.

use std::sync::Mutex;
use std::time::Duration;

use serenity::model::id::ChannelId;
use switchboard_channel::Bounded;

use crate::places::{Kind, Place, Places};
use crate::rest::{MISSING_ACCESS, MISSING_PERMISSIONS, Rest, RestError};

/// Channels whose refusal was explained.
const REMEMBERED: usize = 1000;
/// Longest wait for the channel's name.
const LOOKUP_WAIT: Duration = Duration::from_secs(5);

/// The channels whose refused posts were explained in the log.
pub(crate) struct Explained(Mutex<Bounded<u64, ()>>);

impl Default for Explained {
    fn default() -> Self {
        Self(Mutex::new(Bounded::with_cap(REMEMBERED)))
    }
}

impl Explained {
    fn told(&self) -> std::sync::MutexGuard<'_, Bounded<u64, ()>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A post in `channel` went through.
    pub(crate) fn cleared(&self, channel: u64) {
        let mut told = self.told();
        if told.contains(&channel) {
            told.remove(&channel);
        }
    }

    /// When `err` is a permission refusal of a post in `channel` (`replying`: the post
    /// replied to a message) not yet explained: log what to grant there.
    pub(crate) async fn explain(
        &self,
        rest: &Rest,
        places: &Places,
        channel: u64,
        err: &RestError,
        replying: bool,
    ) {
        let code = match err {
            RestError::Status {
                status: 403,
                code: Some(c @ (MISSING_ACCESS | MISSING_PERMISSIONS)),
                ..
            } => *c,
            _ => return,
        };
        {
            let mut told = self.told();
            if told.contains(&channel) {
                return;
            }
            told.insert(channel, ());
        }
        let place = match places.get(ChannelId::new(channel.max(1))) {
            Some(p) => Some(p),
            // Often refused too (Missing Access): then the id has to do.
            None => match tokio::time::timeout(LOOKUP_WAIT, rest.channel(channel)).await {
                Ok(Ok(info)) => Some(Place::from(info)),
                _ => None,
            },
        };
        let what = where_(channel, place.as_ref());
        let grant = advice(code, place.map(|p| p.kind), replying);
        tracing::error!(
            channel,
            "discord: Discord refused a post in {what}: {err}. {grant} (Server Settings → Roles \
             for the bot's role, or the channel's Edit Channel → Permissions.) Replies there \
             are dropped until then; this is logged once for the channel."
        );
    }
}

/// "channel #general (123)", "thread \"how do I X\" (456)", or "channel 789".
fn where_(channel: u64, place: Option<&Place>) -> String {
    match place.map(|p| (p.kind, p.name.as_deref())) {
        Some((Kind::Thread, Some(name))) => format!("thread \"{name}\" ({channel})"),
        Some((Kind::Thread, None)) => format!("thread {channel}"),
        Some((_, Some(name))) => format!("channel #{name} ({channel})"),
        _ => format!("channel {channel}"),
    }
}

/// What to grant after a refusal with `code` in a channel of `kind`.
fn advice(code: u64, kind: Option<Kind>, replying: bool) -> String {
    let thread = kind == Some(Kind::Thread);
    if code == MISSING_ACCESS {
        return if thread {
            "The bot cannot see this thread: give its role \"View Channel\" and \"Send \
             Messages in Threads\" in the thread's channel; a private thread also needs the \
             bot added to it (mention it there, or add it from the thread's member list)."
                .into()
        } else {
            "The bot cannot see this channel: give its role \"View Channel\", \"Send \
             Messages\" and \"Read Message History\" there."
                .into()
        };
    }
    let (send, there) = match kind {
        // Thread permissions are set on the channel the thread is in.
        Some(Kind::Thread) => ("\"Send Messages in Threads\"", "in the thread's channel"),
        Some(_) => ("\"Send Messages\"", "there"),
        None => (
            "\"Send Messages\" (\"Send Messages in Threads\" if it is a thread)",
            "there",
        ),
    };
    if replying {
        format!(
            "Give the bot's role {send} {there}, and \"Read Message History\" (replies need it)."
        )
    } else {
        format!("Give the bot's role {send} {there}.")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_advice_names_the_permission_for_the_place() {
        let a = advice(MISSING_PERMISSIONS, Some(Kind::Thread), false);
        assert!(a.contains("\"Send Messages in Threads\""), "{a}");
        let a = advice(MISSING_PERMISSIONS, Some(Kind::Other), true);
        assert!(
            a.contains("\"Send Messages\"") && a.contains("\"Read Message History\""),
            "{a}"
        );
        let a = advice(MISSING_ACCESS, Some(Kind::Thread), false);
        assert!(
            a.contains("\"View Channel\"") && a.contains("private thread"),
            "{a}"
        );
        let a = advice(MISSING_ACCESS, None, false);
        assert!(a.contains("\"View Channel\""), "{a}");
    }
}
