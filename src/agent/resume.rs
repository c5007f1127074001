//! Unfinished turns: a turn keeps its progress (the model's tool calls and their results)
//! in its chat's session as it goes, so that a turn the gateway could not finish (stopped
//! past its grace, or killed) goes on from there at the next start instead of running its
//! tools again (a `message` sent twice, a reminder set twice).

use serde::{Deserialize, Serialize};
use switchboard_channel::{ChatKey, InboundMessage};

use super::run::LoopState;
use super::session::Session;
use crate::llm::{ChatMessage, Role};
use crate::store::Batch;

/// The result given to a tool call cut off by a graceful stop.
pub const INTERRUPTED: &str = "interrupted: the gateway restarted before this call finished (it may not have run, or only in part); check before doing it again";
/// The result given to a tool call that has none after a crash.
pub const UNKNOWN: &str = "unknown: the gateway stopped before this call's result was saved (it may or may not have run); check before doing it again";

/// A turn's progress, saved in its session until the turn ends.
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

/// The write saving `state` as the progress of the turn answering `ids` with `user`, in a
/// copy of `session` (as loaded when the turn began).
pub fn checkpoint(
    session: &Session,
    key: &ChatKey,
    ids: &[String],
    user: &ChatMessage,
    state: &LoopState,
) -> Batch {
    let mut s = session.clone();
    s.unfinished = Some(Unfinished {
        ids: ids.to_vec(),
        user: user.clone(),
        produced: state.produced.clone(),
        iteration: state.iteration,
    });
    let mut batch = Batch::default();
    s.save(key, &mut batch);
    batch
}

/// Take the session's unfinished turn: `Some` when it answers the first of `messages`
/// (all of its ids, in order, start the batch); any other is dropped (its messages were
/// given up or answered since). Tool calls left without a result get [`UNKNOWN`].
pub fn take(session: &mut Session, messages: &[InboundMessage]) -> Option<Unfinished> {
    let mut u = session.unfinished.take()?;
    let matches = !u.ids.is_empty()
        && u.ids.len() <= messages.len()
        && u.ids.iter().zip(messages).all(|(id, m)| *id == m.id);
    if !matches {
        return None;
    }
    complete(&mut u.produced, UNKNOWN);
    Some(u)
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
pub fn add_extra(produced: &mut Vec<ChatMessage>, extra: &[InboundMessage]) {
    if !extra.is_empty() {
        produced.push(ChatMessage::new(
            Role::User,
            super::Agent::user_content(extra),
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
        let msg = |id: &str| {
            let sender = switchboard_channel::Sender {
                id: "u1".into(),
                username: None,
                display_name: "Ann".into(),
                is_owner: false,
            };
            InboundMessage::text(id, ChatKey::new("test", "1"), sender, "hi")
        };
        let unfinished = Unfinished {
            ids: vec!["1".into(), "2".into()],
            user: ChatMessage::new(Role::User, "hi\n\nhi"),
            produced: vec![asks(&["a"])],
            iteration: 1,
        };
        let with = |u: &Unfinished| Session {
            unfinished: Some(u.clone()),
            ..Default::default()
        };
        for batch in [vec![msg("1")], vec![msg("2"), msg("1")], vec![msg("9")]] {
            let mut s = with(&unfinished);
            assert_eq!(take(&mut s, &batch), None, "{batch:?}");
            assert_eq!(s.unfinished, None, "dropped");
        }
        let mut s = with(&unfinished);
        let u = take(&mut s, &[msg("1"), msg("2"), msg("3")]).unwrap();
        assert_eq!(u.produced.len(), 2, "the open call got a result");
        assert_eq!(u.produced[1].content, UNKNOWN);
    }
}
