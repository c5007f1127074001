//! Chat commands answered without the LLM: `/new`, `/status`, `/help`, and extra commands
//! the gateway registers (`/reminders`).
//! (`/stop` is handled by the bus, since it must not wait behind the running turn.)

use switchboard_channel::OutboundKind;

use super::Agent;
use super::session::Session;
use crate::bus::{TurnInput, TurnOutput};
use crate::store::Batch;

const HELP: &str = "Commands:\n\
/new — start a fresh conversation\n\
/stop — stop what I'm doing\n\
/status — model, session size and queue\n\
/reminders — this chat's scheduled reminders\n\
/help — this list";

/// Answer a command, or `None` when the turn is not a known command.
pub(super) fn handle(agent: &Agent, turn: &TurnInput) -> Option<TurnOutput> {
    let [only] = turn.messages.as_slice() else {
        return None;
    };
    if only.origin != switchboard_channel::Origin::User {
        return None;
    }
    let mut writes = Batch::default();
    let text = match switchboard_channel::command_name(&only.text)?.as_str() {
        "new" | "reset" => {
            Session::reset(&turn.key, &mut writes);
            "Started a fresh conversation.".to_string()
        }
        "help" | "start" => HELP.to_string(),
        "status" => {
            let session = Session::load(agent.store.as_ref(), &turn.key).unwrap_or_default();
            let extra = (agent.status)(&turn.key);
            format!(
                "Model: {}\nSession: {} messages\n{}",
                agent.config.llm.model,
                session.messages.len(),
                extra
            )
            .trim_end()
            .to_string()
        }
        other => match agent.commands.get(other) {
            Some(f) => f(&turn.key),
            None => return None,
        },
    };
    Some(TurnOutput {
        replies: vec![Agent::reply(only, text, OutboundKind::Final)],
        writes,
    })
}
