//! `ChatKey`: the address of one conversation, `channel:chat_id`.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// One conversation: a channel name and a chat id within it.
///
/// Displayed and parsed as `channel:chat_id`. The chat id may itself contain `:` (a Slack
/// thread is `slack:C0123ABC:1700000000.000100`), so parsing splits at the first `:` only.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ChatKey {
    pub channel: String,
    pub chat_id: String,
}

impl ChatKey {
    pub fn new(channel: impl Into<String>, chat_id: impl Into<String>) -> Self {
        Self {
            channel: channel.into(),
            chat_id: chat_id.into(),
        }
    }

    /// The chat this conversation is part of: a Slack thread's channel or DM
    /// (`slack:C0123ABC:1700000000.000100` → `slack:C0123ABC`), a Telegram forum topic's
    /// group (`telegram:-100123:topic:7` → `telegram:-100123`); the key itself otherwise.
    /// Everyone in a thread or topic can read the rest of its chat.
    pub fn room(&self) -> ChatKey {
        match self.chat_id.split_once(':') {
            Some((chat, _)) if self.has_threads() => ChatKey::new(self.channel.clone(), chat),
            _ => self.clone(),
        }
    }

    /// Whether this channel's keys name threads or topics after a `:` (Slack, Telegram);
    /// other channels' chat ids are taken whole, colons and all (an API `user`).
    pub fn has_threads(&self) -> bool {
        matches!(self.channel.as_str(), "slack" | "telegram")
    }
}

/// Why a string is not a `ChatKey`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseKeyError {
    #[error("chat key {0:?} must look like channel:chat_id")]
    MissingColon(String),
    #[error("chat key {0:?} has an empty channel or chat id")]
    Empty(String),
    #[error("chat key {0:?}: channel names are lowercase letters, digits, '_' or '-'")]
    BadChannel(String),
}

impl FromStr for ChatKey {
    type Err = ParseKeyError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (channel, chat_id) = s
            .split_once(':')
            .ok_or_else(|| ParseKeyError::MissingColon(s.to_string()))?;
        if channel.is_empty() || chat_id.is_empty() {
            return Err(ParseKeyError::Empty(s.to_string()));
        }
        if !channel
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
        {
            return Err(ParseKeyError::BadChannel(s.to_string()));
        }
        Ok(Self::new(channel, chat_id))
    }
}

impl fmt::Display for ChatKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.channel, self.chat_id)
    }
}

impl fmt::Debug for ChatKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ChatKey({self})")
    }
}

impl Serialize for ChatKey {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for ChatKey {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_at_first_colon_and_round_trips() {
        let k: ChatKey = "slack:C0123ABC:1700000000.000100".parse().unwrap();
        assert_eq!(k.channel, "slack");
        assert_eq!(k.chat_id, "C0123ABC:1700000000.000100");
        assert_eq!(k.to_string(), "slack:C0123ABC:1700000000.000100");
        let t: ChatKey = "telegram:-100123:topic:7".parse().unwrap();
        assert_eq!(t.chat_id, "-100123:topic:7");
    }

    #[test]
    fn rejects_malformed_keys() {
        assert!(matches!(
            "nocolon".parse::<ChatKey>(),
            Err(ParseKeyError::MissingColon(_))
        ));
        assert!(matches!(
            ":x".parse::<ChatKey>(),
            Err(ParseKeyError::Empty(_))
        ));
        assert!(matches!(
            "api:".parse::<ChatKey>(),
            Err(ParseKeyError::Empty(_))
        ));
        assert!(matches!(
            "Tele gram:1".parse::<ChatKey>(),
            Err(ParseKeyError::BadChannel(_))
        ));
    }

    #[test]
    fn a_thread_or_topic_belongs_to_its_chat() {
        let room = |k: &str| k.parse::<ChatKey>().unwrap().room().to_string();
        assert_eq!(room("slack:C0123ABC:1700000000.000100"), "slack:C0123ABC");
        assert_eq!(room("slack:C0123ABC"), "slack:C0123ABC");
        assert_eq!(room("telegram:-100123:topic:7"), "telegram:-100123");
        assert_eq!(room("telegram:42"), "telegram:42");
        // Other channels' ids are taken whole (an API `user` may contain a colon).
        assert_eq!(room("api:team:bob"), "api:team:bob");
    }

    #[test]
    fn serde_uses_the_display_form() {
        let k = ChatKey::new("api", "alice");
        assert_eq!(serde_json::to_string(&k).unwrap(), "\"api:alice\"");
        let back: ChatKey = serde_json::from_str("\"api:alice\"").unwrap();
        assert_eq!(back, k);
    }
}
