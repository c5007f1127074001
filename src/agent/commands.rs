//! Chat commands answered without the LLM: `/new`, `/status`, `/help`, and extra commands
//! the gateway registers (`/reminders`).
//! (`/stop` is handled by the bus, since it must not wait behind the running turn, and so
//! is `/status`, with the text made here.)

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

/// Slack's client takes a message starting with `/` for one of its slash commands, so
/// there the commands only work after a mention (which the adapter strips).
const SLACK_HELP: &str = "\n\nIn Slack, start with a mention: `@bot /stop`.";

/// The `/help` text for a chat on `channel`.
fn help(channel: &str) -> String {
    if channel == "slack" {
        format!("{HELP}{SLACK_HELP}")
    } else {
        HELP.to_string()
    }
}

/// The `/status` text for `key` (the bus answers it at once, even while a turn runs).
pub(super) fn status(agent: &Agent, key: &switchboard_channel::ChatKey) -> String {
    let session = Session::load(agent.store.as_ref(), key).unwrap_or_default();
    let extra = (agent.status)(key);
    format!(
        "Model: {}\nSession: {} messages\n{}",
        agent.config.llm.model,
        session.messages.len(),
        extra
    )
    .trim_end()
    .to_string()
}

/// Answer a command, or `None` when the turn is not a known command.
pub(super) fn handle(agent: &Agent, turn: &TurnInput) -> Option<TurnOutput> {
    let [only] = turn.messages.as_slice() else {
        return None;
    };
    if only.origin != switchboard_channel::Origin::User {
        return None;
    }
    let mut writes = Batch::default();
    let text = match only.command()?.as_str() {
        // The group's conversation is everyone's: a member does not wipe it for all.
        "new" | "reset"
            if only.is_group && !only.sender.is_owner && agent.config.names_owners() =>
        {
            "Only an owner can start a fresh conversation in this group.".to_string()
        }
        "new" | "reset" => {
            // What the old conversation set going would report into the new one.
            agent.stop_subagents(&turn.key);
            Session::reset(&turn.key, &mut writes);
            "Started a fresh conversation.".to_string()
        }
        "help" | "start" => help(&turn.key.channel),
        "status" => status(agent, &turn.key),
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

#[cfg(test)]
mod tests {
    #[test]
    fn slack_help_says_to_mention_the_bot_first() {
        assert!(super::help("slack").ends_with("start with a mention: `@bot /stop`."));
        assert!(!super::help("telegram").contains("mention"));
    }
}
