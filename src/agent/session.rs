//! Conversation history per chat, stored as one JSON value per `ChatKey`.

use serde::{Deserialize, Serialize};
use switchboard_channel::ChatKey;

use crate::llm::{ChatMessage, Role};
use crate::store::{Batch, Store, StoreError, Tree};

/// Most messages kept in a stored session; older ones are dropped (or summarised).
pub const MAX_STORED: usize = 400;

/// A chat's stored conversation.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Session {
    pub messages: Vec<ChatMessage>,
    /// Summary of older turns that no longer fit (compaction).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
    /// Assistant turns completed (drives the identity re-anchor).
    #[serde(default)]
    pub turns: u64,
    /// When the last turn was stored (drives the date/time refresh).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_at: Option<chrono::DateTime<chrono::Utc>>,
}

fn key_bytes(key: &ChatKey) -> Vec<u8> {
    key.to_string().into_bytes()
}

impl Session {
    pub fn load(store: &dyn Store, key: &ChatKey) -> Result<Session, StoreError> {
        match store.get(Tree::Sessions, &key_bytes(key))? {
            None => Ok(Session::default()),
            Some(v) => serde_json::from_slice(&v)
                .map_err(|e| StoreError::Backend(format!("corrupt session {key}: {e}"))),
        }
    }

    /// Add the write of this session to `batch`.
    pub fn save(&mut self, key: &ChatKey, batch: &mut Batch) {
        if self.messages.len() > MAX_STORED {
            let mut cut = self.messages.len() - MAX_STORED;
            // Never start with an orphaned tool result.
            while cut < self.messages.len()
                && matches!(self.messages[cut].role, Role::Tool | Role::Assistant)
            {
                cut += 1;
            }
            self.messages.drain(..cut);
        }
        let body = serde_json::to_vec(self).unwrap_or_default();
        batch.put(Tree::Sessions, key_bytes(key), body);
    }

    /// Fold every message before the last `keep` (cut at a user message, so tool pairs stay
    /// together) into the compaction summary. Returns whether anything was folded.
    pub fn compact(&mut self, keep: usize) -> bool {
        let start = self.messages.len() - self.window(keep).len();
        if start == 0 {
            return false;
        }
        let older: Vec<ChatMessage> = self.messages.drain(..start).collect();
        self.summary = Some(super::context::summarize(self.summary.as_deref(), &older));
        true
    }

    pub fn reset(key: &ChatKey, batch: &mut Batch) {
        batch.delete(Tree::Sessions, key_bytes(key));
    }

    /// The last `n` messages, never starting inside a tool-call / tool-result group.
    pub fn window(&self, n: usize) -> &[ChatMessage] {
        let mut start = self.messages.len().saturating_sub(n);
        while start < self.messages.len() && self.messages[start].role != Role::User {
            start += 1;
        }
        &self.messages[start..]
    }

    /// All stored session keys (for `sessions list`).
    pub fn keys(store: &dyn Store) -> Result<Vec<(String, usize)>, StoreError> {
        Ok(store
            .scan(Tree::Sessions, &[])?
            .into_iter()
            .map(|(k, v)| {
                let n = serde_json::from_slice::<Session>(&v)
                    .map(|s| s.messages.len())
                    .unwrap_or(0);
                (String::from_utf8_lossy(&k).into_owned(), n)
            })
            .collect())
    }
}
