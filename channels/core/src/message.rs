//! Messages crossing the bus: [`InboundMessage`] from platforms and producers,
//! [`OutboundMessage`] back to them.

use std::hash::{DefaultHasher, Hash, Hasher};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::ChatKey;

/// Who sent an inbound message.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sender {
    /// Platform user id (`"123456789"`, `"U0123ABC"`).
    pub id: String,
    /// Username without `@`, when the platform has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub username: Option<String>,
    /// Name to show the model.
    pub display_name: String,
    /// Set by the gateway, not the adapter: the sender is the gateway's owner.
    #[serde(default)]
    pub is_owner: bool,
}

/// What an attachment is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AttachmentKind {
    Image,
    Audio,
    Voice,
    Video,
    Document,
}

/// A file size as people read it (`2.0 MB`, `512.0 KB`, `10 bytes`), for the notes adapters
/// add when a file is not downloaded.
pub fn human_size(bytes: u64) -> String {
    const MB: u64 = 1024 * 1024;
    if bytes >= MB {
        format!("{:.1} MB", bytes as f64 / MB as f64)
    } else if bytes >= 1024 {
        format!("{:.1} KB", bytes as f64 / 1024.0)
    } else {
        format!("{bytes} bytes")
    }
}

/// A file that came with a message or goes out with a reply.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attachment {
    pub kind: AttachmentKind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mime: Option<String>,
    /// Local path (downloaded into the workspace inbox) or URL.
    pub location: String,
    #[serde(default)]
    pub size: u64,
}

/// Which producer injected a system message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum SystemOrigin {
    Cron { job_id: String },
    Heartbeat,
    Subagent { id: String },
}

/// Whether a person or the gateway itself produced a message.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", content = "system", rename_all = "snake_case")]
pub enum Origin {
    #[default]
    User,
    System(SystemOrigin),
}

/// Metadata key of a forwarded message: who wrote it first, in words (empty when the
/// platform does not say). The agent shows the model it is not the sender's own words.
pub const FORWARDED_FROM: &str = "forwarded_from";

/// A message on its way from a platform (or a producer) to the agent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InboundMessage {
    /// Globally unique and stable across redeliveries (`telegram:update:8812`).
    pub id: String,
    pub key: ChatKey,
    pub sender: Sender,
    pub text: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attachments: Vec<Attachment>,
    /// Platform id of the message this one answers, with its text when known
    /// (`metadata.reply_to_text`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply_to: Option<String>,
    #[serde(default)]
    pub is_group: bool,
    #[serde(default)]
    pub mentions_bot: bool,
    pub received_at: DateTime<Utc>,
    #[serde(default)]
    pub origin: Origin,
    #[serde(default, skip_serializing_if = "serde_json::Map::is_empty")]
    pub metadata: serde_json::Map<String, serde_json::Value>,
}

/// Metadata key of a message whose text was cut at the limit.
const CUT: &str = "cut_at_limit";

impl InboundMessage {
    /// The chat command this message is ([`command_name`]): only a person's own message
    /// can be one, never a forwarded one (someone else's `/new`) or a producer's.
    pub fn command(&self) -> Option<String> {
        if self.origin != Origin::User || self.metadata.contains_key(FORWARDED_FROM) {
            return None;
        }
        command_name(&self.text)
    }

    /// A plain user text message with defaults for everything else.
    pub fn text(
        id: impl Into<String>,
        key: ChatKey,
        sender: Sender,
        text: impl Into<String>,
    ) -> Self {
        Self {
            id: id.into(),
            key,
            sender,
            text: text.into(),
            attachments: Vec::new(),
            reply_to: None,
            is_group: false,
            mentions_bot: false,
            received_at: Utc::now(),
            origin: Origin::User,
            metadata: serde_json::Map::new(),
        }
    }

    /// Cut an oversized text at [`crate::MAX_INBOUND_CHARS`] characters, with a note.
    /// A text already cut so (by its adapter, then checked by the bus) is left as it is.
    /// Returns whether anything was cut.
    pub fn truncate_oversized(&mut self) -> bool {
        let limit = crate::MAX_INBOUND_CHARS;
        let Some((byte, _)) = self.text.char_indices().nth(limit) else {
            return false;
        };
        // Cut once already (by its adapter): its note stays, however long the note made it.
        if self.metadata.contains_key(CUT) {
            return false;
        }
        self.metadata.insert(CUT.into(), true.into());
        let total = self.text.chars().count();
        self.text.truncate(byte);
        self.text.push_str(&format!(
            "\n\n[message cut: it had {total} characters, the limit is {limit}]"
        ));
        true
    }
}

/// What a reply is.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OutboundKind {
    #[default]
    Final,
    Progress,
    Error,
}

/// A reply on its way to a platform.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutboundMessage {
    pub key: ChatKey,
    /// Markdown as the model wrote it; the adapter renders its dialect.
    pub text: String,
    /// Platform message id to reply to (the triggering message), when the adapter wants it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply_to: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attachments: Vec<Attachment>,
    #[serde(default)]
    pub kind: OutboundKind,
    /// Id of the inbound message this answers (the API channel routes replies by it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_reply_to_inbound: Option<String>,
    /// Tokens the model used for the turn this answers (the API channel reports them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<TokenUsage>,
    /// The outbox's number for this reply, set when it is recorded: the same on every
    /// attempt to send it, across restarts too, and never given to another reply. An
    /// adapter whose platform takes an idempotency key (Discord's `nonce`) derives it
    /// from this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delivery: Option<u64>,
}

/// Tokens reported by the model over one turn's requests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenUsage {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
}

impl OutboundMessage {
    pub fn new(key: ChatKey, text: impl Into<String>) -> Self {
        Self {
            key,
            text: text.into(),
            reply_to: None,
            attachments: Vec::new(),
            kind: OutboundKind::Final,
            in_reply_to_inbound: None,
            usage: None,
            delivery: None,
        }
    }

    /// An answer to `msg`: in its chat, quoting it where the platform can (its
    /// `message_id`), and tied to it (a request waiting for it gets it).
    pub fn answering(msg: &InboundMessage, text: impl Into<String>) -> Self {
        let mut reply = Self::new(msg.key.clone(), text);
        reply.in_reply_to_inbound = Some(msg.id.clone());
        reply.reply_to = msg
            .metadata
            .get("message_id")
            .and_then(|v| v.as_str())
            .map(String::from);
        reply
    }

    /// The reply with the tokens its turn used.
    pub fn with_usage(mut self, usage: TokenUsage) -> Self {
        self.usage = Some(usage);
        self
    }

    /// Identifies a reply across the outbox's retries: a hash of its key, text, `reply_to`
    /// and `in_reply_to_inbound`. The same build gives the same value, across restarts too
    /// (Discord's nonces use it); another build may not, so it is never stored.
    pub fn fingerprint(&self) -> u64 {
        let mut h = DefaultHasher::new();
        (
            &self.key,
            &self.text,
            &self.reply_to,
            &self.in_reply_to_inbound,
        )
            .hash(&mut h);
        h.finish()
    }

    /// Names this reply's progress across the outbox's retries (the chunks of a long reply
    /// already posted): its fingerprint mixed with its delivery number, so two equal replies
    /// (a daily reminder's same long text) never share what was sent of one of them.
    pub fn progress_key(&self) -> u64 {
        let mut h = DefaultHasher::new();
        (self.fingerprint(), self.delivery).hash(&mut h);
        h.finish()
    }
}

/// The chat command a text is, lowercased (`"/Stop now"` → `"stop"`); `None` when the text
/// does not start with `/`, or names another bot: adapters strip the bot's own `@name`
/// (`/stop@my_bot` arrives as `/stop`), so a `/new@other_bot` left is not for us.
pub fn command_name(text: &str) -> Option<String> {
    let word = text.trim().strip_prefix('/')?.split_whitespace().next()?;
    (!word.is_empty() && !word.contains('@')).then(|| word.to_lowercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_names_ignore_case_and_arguments_but_not_other_bots() {
        assert_eq!(command_name("/new").as_deref(), Some("new"));
        assert_eq!(command_name("  /Status extra").as_deref(), Some("status"));
        assert_eq!(command_name("/new@other_bot"), None);
        assert_eq!(command_name("/STOP now").as_deref(), Some("stop"));
        assert_eq!(command_name("hello /new"), None);
        assert_eq!(command_name("/"), None);
        assert_eq!(command_name("/@bot"), None);
    }

    #[test]
    fn only_a_persons_own_message_is_a_command() {
        let key: ChatKey = "telegram:7".parse().unwrap();
        let sender = Sender {
            id: "7".into(),
            username: None,
            display_name: "Ann".into(),
            is_owner: false,
        };
        let mut m = InboundMessage::text("t:1", key, sender, "/new");
        assert_eq!(m.command().as_deref(), Some("new"));
        m.metadata.insert(FORWARDED_FROM.into(), "Bob".into());
        assert_eq!(m.command(), None, "someone else's /new, forwarded");
        m.metadata.clear();
        m.origin = Origin::System(SystemOrigin::Heartbeat);
        assert_eq!(m.command(), None);
    }

    #[test]
    fn oversized_text_is_cut_with_a_note() {
        let key: ChatKey = "api:a".parse().unwrap();
        let mut m = InboundMessage::text("1", key, Sender::default(), "é".repeat(100_000));
        assert!(m.truncate_oversized());
        assert!(m.text.starts_with(&"é".repeat(crate::MAX_INBOUND_CHARS)));
        let note = "\n\n[message cut: it had 100000 characters, the limit is 32000]";
        assert!(m.text.ends_with(note));
        // Checked again (the adapter cut it, then the bus looks): left as it is.
        let once = m.text.clone();
        assert!(!m.truncate_oversized());
        assert_eq!(m.text, once);
        let mut short =
            InboundMessage::text("2", "api:a".parse().unwrap(), Sender::default(), "hi");
        assert!(!short.truncate_oversized());
        assert_eq!(short.text, "hi");
    }

    #[test]
    fn fingerprints_tell_replies_apart() {
        let key: ChatKey = "api:a".parse().unwrap();
        let m = OutboundMessage::new(key.clone(), "hi");
        assert_eq!(m.fingerprint(), m.clone().fingerprint());
        let other_key = OutboundMessage::new("api:b".parse().unwrap(), "hi");
        let other_text = OutboundMessage::new(key, "ho");
        let replying = OutboundMessage {
            reply_to: Some("1".into()),
            ..m.clone()
        };
        let answering = OutboundMessage {
            in_reply_to_inbound: Some("1".into()),
            ..m.clone()
        };
        for o in [other_key, other_text, replying, answering] {
            assert_ne!(m.fingerprint(), o.fingerprint(), "{o:?}");
        }
        // Two deliveries of the same reply: one fingerprint, two progress keys.
        let (mut first, mut second) = (m.clone(), m.clone());
        (first.delivery, second.delivery) = (Some(1), Some(2));
        assert_eq!(first.fingerprint(), second.fingerprint());
        assert_ne!(first.progress_key(), second.progress_key());
    }

    #[test]
    fn origin_round_trips_through_json() {
        let o = Origin::System(SystemOrigin::Cron {
            job_id: "j1".into(),
        });
        let s = serde_json::to_string(&o).unwrap();
        assert_eq!(serde_json::from_str::<Origin>(&s).unwrap(), o);
    }
}
