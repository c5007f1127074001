//! Steering: short ephemeral guidance messages chosen by channel and situation. They are
//! inserted before the last user message of the request (where each provider's dialect
//! allows: see `run::with_steering`), never stored and never shown. Each generator is a
//! small function returning `Option<String>`.

use switchboard_channel::{Origin, SystemOrigin};

/// Every how many assistant turns the identity is re-anchored.
pub const REANCHOR_EVERY: u64 = 8;
/// After this long without a message, the date and time are restated.
pub const CLOCK_REFRESH_MINUTES: i64 = 30;

/// How replies should look on this channel.
pub fn channel_style(channel: &str, is_group: bool) -> Option<String> {
    let style = match channel {
        "telegram" => {
            "Telegram: keep replies short and conversational; use simple markdown (bold, italic, code, links), no tables, no headings."
        }
        "discord" => {
            "Discord: keep each reply under 2000 characters; Discord markdown is fine; no tables."
        }
        "slack" => {
            "Slack: use Slack-friendly formatting (bold, italic, code, bullet lists; no tables or headings); you reply in a thread."
        }
        "api" => "API: reply in plain markdown; complete, self-contained answers.",
        "cli" => "Terminal: plain text with light markdown; no wide tables.",
        _ => return None,
    };
    let group = if is_group {
        " This is a group: several people talk; address the person who asked."
    } else {
        ""
    };
    Some(format!("{style}{group}"))
}

/// Instructions for messages the gateway itself produced.
pub fn system_origin(origin: &Origin) -> Option<String> {
    match origin {
        Origin::User => None,
        Origin::System(SystemOrigin::Cron { job_id }) => Some(format!(
            "This is a scheduled reminder you set earlier (job {job_id}); deliver it to the user now, \
             addressing them directly. Do not schedule it again."
        )),
        Origin::System(SystemOrigin::Heartbeat) => Some(
            "This is a periodic heartbeat: check the tasks in HEARTBEAT.md. If nothing needs the user's \
             attention, reply exactly HEARTBEAT_OK and nothing else."
                .into(),
        ),
        Origin::System(SystemOrigin::Subagent { id }) => Some(format!(
            "A background sub-agent you started ({id}) finished; tell the user its result in your own words."
        )),
    }
}

/// Remaining iterations, shown near the end of the budget.
pub fn iteration_budget(iteration: u32, max: u32) -> Option<String> {
    let left = max.saturating_sub(iteration);
    match left {
        0 => Some("This is your last step: answer the user now without calling tools.".into()),
        1..=2 => Some(format!(
            "You have {left} more tool step(s) after this one; wrap up and answer soon."
        )),
        _ => None,
    }
}

/// A nudge towards the right tool, when the request obviously needs one.
pub fn tool_nudge(user_text: &str, tools: &[&str], empty_retry: bool) -> Option<String> {
    if empty_retry {
        return Some("Your previous answer was empty. Answer the user, or call a tool.".into());
    }
    let t = user_text.to_lowercase();
    if tools.contains(&"cron")
        && (t.contains("remind") || t.contains("every day") || t.contains("schedule"))
    {
        return Some(
            "To remind or schedule, use the cron tool; do not just promise to remember.".into(),
        );
    }
    if tools.contains(&"web_fetch") && (t.contains("http://") || t.contains("https://")) {
        return Some(
            "The message contains a link: fetch it with web_fetch before talking about it.".into(),
        );
    }
    if tools.contains(&"memory") && t.contains("remember") {
        return Some("To keep a fact for later, store it with the memory tool.".into());
    }
    None
}

/// Re-anchor the identity every [`REANCHOR_EVERY`] assistant turns.
pub fn identity_reanchor(name: &str, turns: u64) -> Option<String> {
    (turns > 0 && turns % REANCHOR_EVERY == 0).then(|| {
        format!("Reminder: you are {name}. Keep the voice and rules of your system prompt (SOUL.md, AGENTS.md).")
    })
}

/// Several people's messages joined into one group turn (`names`, in order): the answer is
/// one message, so it should answer each of them by name.
pub fn several_askers(names: &[&str]) -> Option<String> {
    (names.len() > 1).then(|| {
        format!(
            "Several people wrote since your last answer ({}); your answer is one message: \
             answer each of them, by name.",
            names.join(", ")
        )
    })
}

/// Say that the oldest `dropped` messages of the history did not fit the model's context.
pub fn history_cut(dropped: usize) -> Option<String> {
    (dropped > 0).then(|| {
        format!(
            "The {dropped} oldest messages of this conversation did not fit your context window \
             and are left out (the summary in your instructions covers what came before them). \
             If the user refers to something you cannot see, say so rather than guess."
        )
    })
}

/// Restate the clock after a long pause.
pub fn clock_refresh(minutes_since_last: Option<i64>, now: &str) -> Option<String> {
    match minutes_since_last {
        Some(m) if m >= CLOCK_REFRESH_MINUTES => Some(format!(
            "Time has passed since the previous message ({m} minutes). It is now {now}."
        )),
        _ => None,
    }
}

/// For a turn taken up again after the gateway stopped during it.
pub fn resumed() -> Option<String> {
    Some(
        "The gateway restarted while you were working on this message. Your earlier steps and \
         their results are above: go on from there, and do not repeat an action that already \
         took effect."
            .into(),
    )
}

/// After compaction, say that older details are condensed.
pub fn compaction_recovery(compacted: bool) -> Option<String> {
    compacted.then(|| {
        "Older parts of this conversation were condensed into a summary to fit. If a needed detail is \
         missing, ask the user rather than guessing."
            .into()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generators_fire_only_when_relevant() {
        assert!(channel_style("discord", false).unwrap().contains("2000"));
        assert_eq!(channel_style("matrix", false), None);
        assert!(
            system_origin(&Origin::System(SystemOrigin::Heartbeat))
                .unwrap()
                .contains("HEARTBEAT_OK")
        );
        assert_eq!(system_origin(&Origin::User), None);
        assert_eq!(iteration_budget(2, 20), None);
        assert!(iteration_budget(18, 20).unwrap().contains("2 more"));
        assert!(iteration_budget(20, 20).unwrap().contains("last step"));
        assert_eq!(identity_reanchor("Bo", 7), None);
        assert!(identity_reanchor("Bo", 16).unwrap().contains("you are Bo"));
        assert_eq!(clock_refresh(Some(5), "now"), None);
        assert!(clock_refresh(Some(45), "12:00").unwrap().contains("12:00"));
        assert!(
            tool_nudge("remind me at 5", &["cron"], false)
                .unwrap()
                .contains("cron")
        );
        assert_eq!(tool_nudge("remind me at 5", &["exec"], false), None);
    }
}
