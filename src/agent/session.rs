//! Conversation history per chat, stored as one JSON value per `ChatKey`.

use serde::{Deserialize, Serialize};
use switchboard_channel::{ChatKey, InboundMessage};

use crate::llm::{ChatMessage, Role};
use crate::store::{Batch, Store, StoreError, Tree};

/// Most messages kept in a stored session; older ones are dropped (or summarised).
pub const MAX_STORED: usize = 400;
/// Most files a session remembers were sent in its chat (the newest).
pub const FILES_KEPT: usize = 200;

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
    /// The files sent in this chat (where they were saved), newest last: the inbox files a
    /// member's turn here may open ([`crate::agent::member`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<std::path::PathBuf>,
    /// Whether the chat is a group, as its people's messages last said: what a turn no one
    /// wrote (a job's run, a sub-agent's result) goes by.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<bool>,
}

fn key_bytes(key: &ChatKey) -> Vec<u8> {
    key.to_string().into_bytes()
}

/// How long a Slack thread's conversation is kept after its last turn. Every top-level
/// message the bot answers in a thread starts one (`reply_in_thread`), so a team's pile up
/// by the thousand; a thread taken up again after that starts afresh.
pub const THREAD_KEPT: chrono::TimeDelta = chrono::TimeDelta::days(30);

/// Forget the conversations of Slack threads whose last turn is older than [`THREAD_KEPT`]
/// at `now`; the number forgotten. Blocks on the store (run it off the async threads);
/// ends early once `stop` says so.
pub fn prune_idle_threads(
    store: &dyn Store,
    now: chrono::DateTime<chrono::Utc>,
    stop: &dyn Fn() -> bool,
) -> Result<usize, StoreError> {
    #[derive(Deserialize)]
    struct Stamp {
        updated_at: Option<chrono::DateTime<chrono::Utc>>,
    }
    let idle_thread = |k: &[u8], v: &[u8]| {
        let thread = std::str::from_utf8(k)
            .ok()
            .and_then(|k| k.parse::<ChatKey>().ok())
            .is_some_and(|key| key.room() != key);
        let stamp = serde_json::from_slice::<Stamp>(v)
            .ok()
            .and_then(|s| s.updated_at);
        thread && stamp.is_some_and(|at| now - at > THREAD_KEPT)
    };
    let mut idle = Vec::new();
    store.for_each(Tree::Sessions, b"slack:", &mut |k, v| {
        if idle_thread(k, v) {
            idle.push(k.to_vec());
        }
        !stop()
    })?;
    let mut forgotten = 0;
    for k in idle {
        if stop() {
            break;
        }
        // Read again: a thread taken up since the walk stays.
        if store
            .get(Tree::Sessions, &k)?
            .is_some_and(|v| idle_thread(&k, &v))
        {
            let mut batch = Batch::default();
            batch.delete(Tree::Sessions, k);
            store.apply(batch)?;
            forgotten += 1;
        }
    }
    Ok(forgotten)
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
            let cut = self.turn_start(self.messages.len() - MAX_STORED);
            self.messages.drain(..cut);
        }
        let body = serde_json::to_vec(self).unwrap_or_default();
        batch.put(Tree::Sessions, key_bytes(key), body);
    }

    /// Once more than `keep` messages are stored, fold all but the last half of `keep` (cut
    /// at a user message, so tool pairs stay together) into the compaction summary. In
    /// steps, not one message a turn: the history the model is sent, and the summary in
    /// its system prompt, then stay the same from turn to turn for a while, which is what
    /// lets a provider's prompt cache serve them. Returns whether anything was folded.
    pub fn compact(&mut self, keep: usize) -> bool {
        if self.window(keep).len() == self.messages.len() {
            return false;
        }
        let start = self.messages.len() - self.window(keep.div_ceil(2)).len();
        if start == 0 {
            return false;
        }
        let older: Vec<ChatMessage> = self.messages.drain(..start).collect();
        self.summary = Some(super::context::summarize(self.summary.as_deref(), &older));
        true
    }

    /// Note the files that came with `msgs` as sent in this chat.
    pub fn note_files(&mut self, msgs: &[InboundMessage]) {
        for a in msgs.iter().flat_map(|m| &m.attachments) {
            let path = std::path::PathBuf::from(&a.location);
            if !self.files.contains(&path) {
                self.files.push(path);
            }
        }
        let extra = self.files.len().saturating_sub(FILES_KEPT);
        self.files.drain(..extra);
    }

    pub fn reset(key: &ChatKey, batch: &mut Batch) {
        batch.delete(Tree::Sessions, key_bytes(key));
    }

    /// The last `n` messages, never starting inside a tool-call / tool-result group.
    pub fn window(&self, n: usize) -> &[ChatMessage] {
        &self.messages[self.turn_start(self.messages.len().saturating_sub(n))..]
    }

    /// The first turn (user message) at or after `from`; when the newest turn alone began
    /// before it (a long run of tool steps), that turn's start: it is kept whole, never
    /// dropped for being long.
    fn turn_start(&self, from: usize) -> usize {
        let is_user = |m: &ChatMessage| m.role == Role::User;
        match self.messages[from..].iter().position(is_user) {
            Some(i) => from + i,
            None => self.messages[..from].iter().rposition(is_user).unwrap_or(0),
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn turn(session: &mut Session, steps: usize) {
        session.messages.push(ChatMessage::new(Role::User, "do it"));
        for _ in 0..steps {
            session
                .messages
                .push(ChatMessage::new(Role::Assistant, "(a tool call)"));
            session
                .messages
                .push(ChatMessage::new(Role::Tool, "(its result)"));
        }
        session
            .messages
            .push(ChatMessage::new(Role::Assistant, "done"));
    }

    #[test]
    fn a_turn_longer_than_the_window_is_kept_whole() {
        let mut s = Session::default();
        turn(&mut s, 1);
        turn(&mut s, 30);
        assert_eq!(s.window(50).len(), 62);
        assert_eq!(s.window(50)[0].role, Role::User);
        assert!(s.compact(50));
        assert_eq!(
            s.messages.len(),
            62,
            "the last turn stays, the one before is folded"
        );
        assert_eq!(s.messages.last().unwrap().content, "done");
        // Stored: past MAX_STORED, the newest turn is still kept whole.
        let mut s = Session::default();
        turn(&mut s, 1);
        turn(&mut s, MAX_STORED);
        let mut batch = Batch::default();
        s.save(&"api:a".parse().unwrap(), &mut batch);
        assert_eq!(s.messages.len(), 2 * MAX_STORED + 2);
        assert_eq!(s.messages[0].role, Role::User);
    }

    #[test]
    fn compaction_folds_in_steps_so_the_history_stays_the_same_for_a_while() {
        let mut s = Session::default();
        let (mut folds, mut first) = (0, Vec::new());
        for i in 0..30 {
            s.messages
                .push(ChatMessage::new(Role::User, format!("ask {i}")));
            s.messages.push(ChatMessage::new(Role::Assistant, "answer"));
            if s.compact(10) {
                folds += 1;
                assert_eq!(s.messages.len(), 4, "folded to the last two turns");
            }
            assert!(s.messages.len() <= 10, "{}", s.messages.len());
            first.push(s.messages[0].content.clone());
        }
        // 60 messages in, 10 kept at most: folded every fourth turn, not every turn.
        assert_eq!(folds, 7);
        let moves = first.windows(2).filter(|w| w[0] != w[1]).count();
        assert_eq!(moves, folds, "the history's start moves only at a fold");
    }

    #[tokio::test]
    async fn only_slack_threads_idle_past_their_time_are_forgotten() {
        let dir = tempfile::tempdir().unwrap();
        let store = crate::store::SledStore::open(dir.path()).unwrap();
        let now = chrono::Utc::now();
        let keys = [
            ("slack:C1:1700000000.000100", 31),
            ("slack:C1:1700000000.000200", 29),
            ("slack:C1", 400),
            ("slack:D1", 400),
            ("telegram:-100:topic:7", 400),
        ];
        let mut batch = Batch::default();
        for (key, days) in keys {
            let mut s = Session {
                updated_at: Some(now - chrono::TimeDelta::days(days)),
                ..Session::default()
            };
            s.save(&key.parse().unwrap(), &mut batch);
        }
        store.apply(batch).unwrap();
        assert_eq!(prune_idle_threads(&store, now, &|| false).unwrap(), 1);
        for (key, _) in keys {
            let gone = store.get(Tree::Sessions, key.as_bytes()).unwrap().is_none();
            assert_eq!(gone, key.ends_with("0100"), "{key}");
        }
    }

    #[test]
    fn a_window_starts_at_a_user_message() {
        let mut s = Session::default();
        turn(&mut s, 2);
        turn(&mut s, 2);
        // The last 7 begin inside the first turn: the window starts at the second.
        assert_eq!(s.window(7).len(), 6);
        assert_eq!(s.window(100).len(), 12);
        assert!(!s.compact(100));
    }

    #[test]
    fn the_files_sent_are_noted_once_and_the_newest_kept() {
        let file = |n: usize| switchboard_channel::Attachment {
            kind: switchboard_channel::AttachmentKind::Document,
            name: None,
            mime: None,
            location: format!("/w/inbox/f{n}"),
            size: 1,
        };
        let mut m = InboundMessage::text(
            "t:1",
            "telegram:1".parse().unwrap(),
            switchboard_channel::Sender {
                id: "1".into(),
                username: None,
                display_name: "A".into(),
                is_owner: false,
            },
            "see",
        );
        m.attachments = (0..FILES_KEPT + 5).map(file).collect();
        let mut session = Session::default();
        session.note_files(std::slice::from_ref(&m));
        assert_eq!(session.files.len(), FILES_KEPT);
        assert_eq!(session.files[0], std::path::PathBuf::from("/w/inbox/f5"));
        // One already noted (a redelivered message's) is not noted twice.
        m.attachments = vec![file(FILES_KEPT + 4)];
        session.note_files(std::slice::from_ref(&m));
        assert_eq!(session.files.len(), FILES_KEPT);
        assert_eq!(session.files[0], std::path::PathBuf::from("/w/inbox/f5"));
    }
}
