//! Unfinished turns: a turn keeps its progress (the model's tool calls and their results)
//! in the store as it goes, so that a turn the gateway could not finish (stopped past its
//! grace, or killed) goes on from there at the next start instead of running its tools
//! again (a `message` sent twice, a reminder set twice). Kept apart from the session, so a
//! save costs the turn's own steps, not the whole history.

use serde::{Deserialize, Serialize};
use switchboard_channel::{ChatKey, InboundMessage};

use super::run::LoopState;
use crate::llm::{ChatMessage, Role};
use crate::store::{Batch, Store, StoreError, Tree};

/// The result a tool call without one gets when its turn goes on after a stop.
pub const UNKNOWN: &str = "unknown: the gateway stopped before this call's result was saved (it may not have run, or only in part); check before doing it again";

/// A turn's progress, kept until the turn ends.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Unfinished {
    /// The inbound messages the turn answers, in order.
    pub ids: Vec<String>,
    /// The user message as the model saw it.
    pub user: ChatMessage,
    /// The assistant and tool messages produced so far.
    pub produced: Vec<ChatMessage>,
    /// Model calls made so far (counted against `agent.max_iterations`).
    pub iteration: u32,
}

fn store_key(chat: &ChatKey) -> Vec<u8> {
    format!("unfinished/{chat}").into_bytes()
}

/// The write saving `state` as the progress of the turn of `chat` answering `ids` with
/// `user`.
pub fn checkpoint(chat: &ChatKey, ids: &[String], user: &ChatMessage, state: &LoopState) -> Batch {
    let unfinished = Unfinished {
        ids: ids.to_vec(),
        user: user.clone(),
        produced: state.produced.clone(),
        iteration: state.iteration,
    };
    let mut batch = Batch::default();
    let body = serde_json::to_vec(&unfinished).unwrap_or_default();
    batch.put(Tree::Meta, store_key(chat), body);
    batch
}

/// What was kept of the chat's unfinished turn.
#[derive(Debug, Default, PartialEq)]
pub struct Found {
    /// The turn to go on with: it answers the first of `messages` (all of its ids, in
    /// order, start the batch). Tool calls left without a result get [`UNKNOWN`].
    pub resume: Option<Unfinished>,
    /// Whether anything was kept (to be cleared when this turn ends, also one that does
    /// not match: its messages were given up or answered since).
    pub kept: bool,
}

/// Look up the chat's unfinished turn for a batch of `messages`.
pub fn find(
    store: &dyn Store,
    chat: &ChatKey,
    messages: &[InboundMessage],
) -> Result<Found, StoreError> {
    let Some(raw) = store.get(Tree::Meta, &store_key(chat))? else {
        return Ok(Found::default());
    };
    let Ok(mut u) = serde_json::from_slice::<Unfinished>(&raw) else {
        tracing::warn!(%chat, "dropping an unreadable unfinished turn");
        return Ok(Found {
            resume: None,
            kept: true,
        });
    };
    let matches = !u.ids.is_empty()
        && u.ids.len() <= messages.len()
        && u.ids.iter().zip(messages).all(|(id, m)| *id == m.id);
    if !matches {
        return Ok(Found {
            resume: None,
            kept: true,
        });
    }
    complete(&mut u.produced, UNKNOWN);
    Ok(Found {
        resume: Some(u),
        kept: true,
    })
}

/// Add the removal of the chat's unfinished turn to `writes` (its turn ended).
pub fn clear(chat: &ChatKey, writes: &mut Batch) {
    writes.delete(Tree::Meta, store_key(chat));
}

/// Give every tool call in `produced` that has no result one saying `text`, right after
/// the results it has (a valid history for every provider).
pub fn complete(produced: &mut Vec<ChatMessage>, text: &str) {
    let mut i = 0;
    while i < produced.len() {
        let calls = produced[i].tool_calls.clone();
        i += 1;
        if calls.is_empty() {
            continue;
        }
        let mut end = i;
        while end < produced.len() && produced[end].role == Role::Tool {
            end += 1;
        }
        let missing: Vec<ChatMessage> = calls
            .iter()
            .filter(|c| {
                !produced[i..end]
                    .iter()
                    .any(|r| r.tool_call_id.as_deref() == Some(c.id.as_str()))
            })
            .map(|c| {
                let mut r = ChatMessage::new(Role::Tool, text);
                r.tool_call_id = Some(c.id.clone());
                r
            })
            .collect();
        let added = missing.len();
        produced.splice(end..end, missing);
        i = end + added;
    }
}

/// Put `extra` messages (arrived after the unfinished turn's, and joined to its next run)
/// after its progress, as a user message of their own.
pub fn add_extra(produced: &mut Vec<ChatMessage>, extra: &[InboundMessage], owners: bool) {
    if !extra.is_empty() {
        produced.push(ChatMessage::new(
            Role::User,
            super::Agent::user_content(extra, owners),
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::ToolCall;

    fn call(id: &str) -> ToolCall {
        ToolCall {
            id: id.into(),
            name: "exec".into(),
            arguments: "{}".into(),
            extra_content: None,
        }
    }

    fn result(id: &str, text: &str) -> ChatMessage {
        let mut r = ChatMessage::new(Role::Tool, text);
        r.tool_call_id = Some(id.into());
        r
    }

    fn asks(ids: &[&str]) -> ChatMessage {
        let mut m = ChatMessage::new(Role::Assistant, "");
        m.tool_calls = ids.iter().map(|i| call(i)).collect();
        m
    }

    #[test]
    fn calls_without_a_result_get_one_after_those_that_have_one() {
        let mut produced = vec![
            asks(&["a", "b"]),
            result("a", "done"),
            asks(&["c"]),
            result("c", "ok"),
            asks(&["d", "e"]),
        ];
        complete(&mut produced, UNKNOWN);
        let shape: Vec<(Role, Option<&str>, &str)> = produced
            .iter()
            .map(|m| (m.role, m.tool_call_id.as_deref(), m.content.as_str()))
            .collect();
        assert_eq!(
            shape,
            vec![
                (Role::Assistant, None, ""),
                (Role::Tool, Some("a"), "done"),
                (Role::Tool, Some("b"), UNKNOWN),
                (Role::Assistant, None, ""),
                (Role::Tool, Some("c"), "ok"),
                (Role::Assistant, None, ""),
                (Role::Tool, Some("d"), UNKNOWN),
                (Role::Tool, Some("e"), UNKNOWN),
            ]
        );
    }

    #[test]
    fn an_unfinished_turn_resumes_only_for_the_messages_it_answers() {
        let dir = tempfile::tempdir().unwrap();
        let store = crate::store::SledStore::open(dir.path()).unwrap();
        let chat = ChatKey::new("test", "1");
        let msg = |id: &str| {
            let sender = switchboard_channel::Sender {
                id: "u1".into(),
                username: None,
                display_name: "Ann".into(),
                is_owner: false,
            };
            InboundMessage::text(id, chat.clone(), sender, "hi")
        };
        let state = LoopState {
            produced: vec![asks(&["a"])],
            iteration: 1,
            ..Default::default()
        };
        let ids = ["1".to_string(), "2".to_string()];
        let user = ChatMessage::new(Role::User, "hi\n\nhi");
        store.apply(checkpoint(&chat, &ids, &user, &state)).unwrap();
        for batch in [vec![msg("1")], vec![msg("2"), msg("1")], vec![msg("9")]] {
            let found = find(&store, &chat, &batch).unwrap();
            assert_eq!(
                found,
                Found {
                    resume: None,
                    kept: true
                },
                "{batch:?}"
            );
        }
        let found = find(&store, &chat, &[msg("1"), msg("2"), msg("3")]).unwrap();
        let u = found.resume.expect("resumed");
        assert_eq!((u.ids.as_slice(), u.iteration), (&ids[..], 1));
        assert_eq!(u.produced.len(), 2, "the open call got a result");
        assert_eq!(u.produced[1].content, UNKNOWN);
        let mut writes = Batch::default();
        clear(&chat, &mut writes);
        store.apply(writes).unwrap();
        assert_eq!(find(&store, &chat, &[msg("1")]).unwrap(), Found::default());
    }
}
