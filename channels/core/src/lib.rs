//! Types every switchboard channel adapter shares with the gateway.
//!
//! - [`key`]: [`ChatKey`], the `channel:chat_id` address of a conversation.
//! - [`message`]: [`InboundMessage`] (platform → bus) and [`OutboundMessage`] (agent → platform).
//! - [`channel`]: the small [`Channel`] trait, [`Capabilities`] as data, and the
//!   [`InboundSender`] an adapter publishes through.
//! - [`format`]: markdown rendering for each platform dialect and chunking at a platform's
//!   message limit, written once for all adapters.
//! - [`files`]: saving a downloaded file into the inbox under a size limit.
//! - [`bounded`]: [`Bounded`], the capped map adapters remember things in between intake
//!   and replies.
//! - [`redact`](mod@redact): the process-wide list of secrets, and [`redact()`] to keep
//!   them out of logs, health reasons, errors and replies.
//!
//! Adapters depend on this crate only; they never see the bus, the agent or the store.

pub mod bounded;
pub mod channel;
pub mod files;
pub mod format;
pub mod key;
pub mod message;
pub mod redact;
pub mod state_file;

pub use bounded::Bounded;
pub use channel::{
    Capabilities, Channel, ChannelError, Dialect, InboundSender, InboundSink, PublishError,
    Published, SendError, SendReceipt,
};
pub use key::{ChatKey, ParseKeyError};
pub use message::{
    Attachment, AttachmentKind, FORWARDED_FROM, InboundMessage, Origin, OutboundKind,
    OutboundMessage, Sender, SystemOrigin, TokenUsage, command_name, human_size,
};
pub use redact::{StreamRedactor, redact, redact_owned};

/// Longest inbound text accepted; longer texts are cut here with a note (DESIGN §11).
pub const MAX_INBOUND_CHARS: usize = 32_000;

/// The platforms' limits for one message, in characters (DESIGN §7): adapters split longer
/// replies, and a channel may be configured lower.
pub const TELEGRAM_MAX_MESSAGE_LEN: usize = 4096;
pub const DISCORD_MAX_MESSAGE_LEN: usize = 2000;
pub const SLACK_MAX_MESSAGE_LEN: usize = 40_000;
/// The shortest message limit a channel may be given: shorter would cut most sentences.
pub const MIN_MESSAGE_LEN: usize = 100;
