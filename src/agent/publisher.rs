//! What the agent needs from the bus beyond a turn's replies: publishing a `System` message
//! (a sub-agent's result) and sending to another chat (`message`). The gateway implements
//! it over `Bus::publish` and `Bus::send_direct`; the agent never sees the bus itself.

use async_trait::async_trait;
use switchboard_channel::{ChatKey, InboundMessage, OutboundMessage};

/// The agent's way back onto the bus.
#[async_trait]
pub trait Publisher: Send + Sync + 'static {
    /// Durably publish an inbound message (a sub-agent's result for its parent chat).
    async fn publish(&self, msg: InboundMessage) -> Result<(), String>;
    /// Durably send a message to a chat (the `message` tool), and say what became of it.
    async fn send(&self, msg: OutboundMessage) -> Result<crate::bus::Delivery, String>;
    /// Whether this gateway has seen `key` (only such chats may be messaged by non-owners).
    fn known_key(&self, key: &ChatKey) -> bool;
}
