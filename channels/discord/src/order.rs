//! Per-channel publish order, as the gateway sent the messages.
//!
//! serenity runs the handler of every event in its own task, so the handlers of one channel's
//! messages can start in any order (tokio runs the task spawned last first). The shard runner
//! does call its collector callbacks synchronously, in gateway order, before it spawns those
//! tasks: [`Order::attach`] registers one that gives each `MESSAGE_CREATE` a place in its
//! channel's line, and a handler waits in [`Order::turn`] until the message before it in
//! the channel is done. Channels stay independent; a line exists only while it has messages.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serenity::gateway::{CollectorCallback, ShardMessenger};
use serenity::model::event::Event;
use serenity::model::id::{ChannelId, MessageId};
use tokio::sync::oneshot;

/// The lines of one client's messages; cheap to clone.
#[derive(Clone, Default)]
pub(crate) struct Order(Arc<Mutex<Lines>>);

#[derive(Default)]
struct Lines {
    /// Places handed out by the collector whose handler has not taken them yet.
    places: HashMap<MessageId, Place>,
    /// Per channel: the signal of the last message in line, and how many are in line.
    tails: HashMap<ChannelId, Tail>,
}

struct Place {
    /// Fires (or closes) when the previous message of the channel is done.
    after: Option<oneshot::Receiver<()>>,
    /// Dropped when this message is done.
    done: oneshot::Sender<()>,
}

struct Tail {
    last_done: oneshot::Receiver<()>,
    in_line: usize,
}

impl Lines {
    /// A new place at the end of `channel`'s line.
    fn join(&mut self, channel: ChannelId) -> Place {
        let (done, last_done) = oneshot::channel();
        let after = match self.tails.get_mut(&channel) {
            Some(tail) => {
                tail.in_line += 1;
                Some(std::mem::replace(&mut tail.last_done, last_done))
            }
            None => {
                self.tails.insert(
                    channel,
                    Tail {
                        last_done,
                        in_line: 1,
                    },
                );
                None
            }
        };
        Place { after, done }
    }
}

impl Order {
    fn lines(&self) -> std::sync::MutexGuard<'_, Lines> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Hook into the shard runner behind `shard`; call once per runner (on READY: serenity
    /// starts a new runner for every new session). The callback lives as long as the runner.
    pub(crate) fn attach(&self, shard: &ShardMessenger) {
        let order = self.clone();
        shard.add_collector(CollectorCallback(Box::new(move |event| {
            if let Event::MessageCreate(ev) = event {
                order.enqueue(ev.message.channel_id, ev.message.id);
            }
            true
        })));
    }

    /// Put message `id` at the end of `channel`'s line (a second call for it is a no-op).
    fn enqueue(&self, channel: ChannelId, id: MessageId) {
        let mut lines = self.lines();
        if lines.places.contains_key(&id) {
            return;
        }
        let place = lines.join(channel);
        lines.places.insert(id, place);
    }

    /// Take a place at the end of `channel`'s line now, for work that is not a gateway
    /// message (the messages fetched after a lost session): messages the gateway sends from
    /// now on wait for it. [`Reserved::wait`] waits for the messages before it.
    pub(crate) fn reserve(&self, channel: ChannelId) -> Reserved {
        let place = self.lines().join(channel);
        self.hold(channel, place)
    }

    /// Wait until the messages the gateway sent before `id` in `channel` are done; this one
    /// is done when the returned [`Turn`] drops (also on a panic or a cancelled handler).
    /// A message that reached serenity before [`Order::attach`] ran takes its place now.
    pub(crate) async fn turn(&self, channel: ChannelId, id: MessageId) -> Turn {
        let place = {
            let mut lines = self.lines();
            // One that reached serenity before `attach` ran (right after a new session's
            // READY) joins the line now, behind the places the READY handler reserved for
            // the session's catch-up: the client's runtime runs handlers in dispatch order.
            lines
                .places
                .remove(&id)
                .unwrap_or_else(|| lines.join(channel))
        };
        self.hold(channel, place).wait().await
    }

    fn hold(&self, channel: ChannelId, place: Place) -> Reserved {
        Reserved {
            after: place.after,
            turn: Turn {
                order: self.clone(),
                channel,
                _done: place.done,
            },
        }
    }
}

/// A place in a channel's line, not yet its turn.
pub(crate) struct Reserved {
    after: Option<oneshot::Receiver<()>>,
    turn: Turn,
}

impl Reserved {
    /// Wait until the work before this place in its channel is done.
    pub(crate) async fn wait(self) -> Turn {
        if let Some(after) = self.after {
            // Err only means the one before is gone without sending: done as well.
            let _ = after.await;
        }
        self.turn
    }
}

/// A message's turn in its channel; dropping it lets the next message go.
pub(crate) struct Turn {
    order: Order,
    channel: ChannelId,
    /// Dropped with the turn (after `drop` below): the next in line goes.
    _done: oneshot::Sender<()>,
}

impl Drop for Turn {
    fn drop(&mut self) {
        let mut lines = self.order.lines();
        if let Some(tail) = lines.tails.get_mut(&self.channel) {
            tail.in_line -= 1;
            if tail.in_line == 0 {
                lines.tails.remove(&self.channel);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use futures_util::FutureExt;

    use super::*;

    fn ids(n: u64) -> (ChannelId, MessageId) {
        (ChannelId::new(7), MessageId::new(n))
    }

    #[tokio::test]
    async fn a_later_message_waits_for_the_earlier_one() {
        let order = Order::default();
        let (chan, first) = ids(1);
        let (_, second) = ids(2);
        order.enqueue(chan, first);
        order.enqueue(chan, second);
        order.enqueue(ChannelId::new(8), MessageId::new(3));

        let mut later = Box::pin(order.turn(chan, second));
        let other = order.turn(ChannelId::new(8), MessageId::new(3)).await;
        drop(other);
        // The other channel went; this one still waits for `first`.
        assert!((&mut later).now_or_never().is_none());
        let earlier = order.turn(chan, first).await;
        drop(earlier);
        drop(later.await);
        assert!(order.lines().tails.is_empty() && order.lines().places.is_empty());
    }

    #[tokio::test]
    async fn a_reserved_place_holds_later_messages_and_waits_for_earlier_ones() {
        let order = Order::default();
        let (chan, first) = ids(1);
        let (_, later) = ids(2);
        order.enqueue(chan, first);
        let reserved = order.reserve(chan);
        order.enqueue(chan, later);

        let mut held = Box::pin(reserved.wait());
        assert!((&mut held).now_or_never().is_none(), "waits for the first");
        drop(order.turn(chan, first).await);
        let turn = held.await;
        let mut next = Box::pin(order.turn(chan, later));
        assert!(
            (&mut next).now_or_never().is_none(),
            "held by the reservation"
        );
        drop(turn);
        drop(next.await);
        assert!(order.lines().tails.is_empty() && order.lines().places.is_empty());
    }

    #[tokio::test]
    async fn a_message_without_a_place_waits_behind_a_reservation() {
        let order = Order::default();
        let (chan, unplaced) = ids(5);
        let reserved = order.reserve(chan).wait().await;
        let mut later = Box::pin(order.turn(chan, unplaced));
        assert!(
            (&mut later).now_or_never().is_none(),
            "overtook the catch-up"
        );
        drop(reserved);
        drop(later.await);
        assert!(order.lines().tails.is_empty() && order.lines().places.is_empty());
    }

    #[tokio::test]
    async fn enqueueing_twice_and_unplaced_messages_do_not_block() {
        let order = Order::default();
        let (chan, id) = ids(1);
        order.enqueue(chan, id);
        order.enqueue(chan, id);
        drop(order.turn(chan, id).await);
        drop(order.turn(chan, MessageId::new(99)).await);
        assert!(order.lines().tails.is_empty() && order.lines().places.is_empty());
    }
}
