//! The context budget: estimate tokens (≈ chars / 3), keep the request within
//! `context_window − max_tokens − tool schema size − system prompt`, shortening old tool
//! results first and then dropping the oldest turns whole, so a tool call and its results
//! are never split. Also the extractive compaction summary of dropped turns.

use crate::llm::{ChatMessage, Role, ToolSpec};

/// Tool results of the last this-many tool-using steps are kept whole.
pub const KEEP_TOOL_STEPS: usize = 3;
/// Length an old tool result is shortened to, in characters.
const SHORT_RESULT: usize = 300;
/// Longest compaction summary kept, in characters (the newest part wins).
const MAX_SUMMARY: usize = 4_000;

/// Estimated tokens of a text.
pub fn tokens(text: &str) -> usize {
    text.chars().count().div_ceil(3)
}

/// Estimated tokens of one message (with a little per-message overhead).
pub fn message_tokens(m: &ChatMessage) -> usize {
    4 + tokens(&m.content)
        + tokens(&m.reasoning)
        + m.tool_calls
            .iter()
            .map(|c| 4 + tokens(&c.name) + tokens(&c.arguments))
            .sum::<usize>()
}

/// Estimated tokens of several messages.
pub fn total(ms: &[ChatMessage]) -> usize {
    ms.iter().map(message_tokens).sum()
}

/// Estimated tokens of the tool schemas offered.
pub fn schema_tokens(specs: &[ToolSpec]) -> usize {
    serde_json::to_string(specs)
        .map(|s| tokens(&s))
        .unwrap_or(0)
}

/// Tokens left for messages: `context_window − max_tokens − schemas − system prompt`.
pub fn input_budget(context_window: u32, max_tokens: u32, schema: usize, system: usize) -> usize {
    (context_window as usize)
        .saturating_sub(max_tokens as usize)
        .saturating_sub(schema)
        .saturating_sub(system)
}

/// Shorten tool results older than the last [`KEEP_TOOL_STEPS`] tool-using steps.
pub fn shorten_old_tool_results(ms: &mut [ChatMessage]) -> bool {
    let steps: Vec<usize> = ms
        .iter()
        .enumerate()
        .filter(|(_, m)| m.role == Role::Assistant && !m.tool_calls.is_empty())
        .map(|(i, _)| i)
        .collect();
    let Some(&keep_from) = steps.iter().rev().nth(KEEP_TOOL_STEPS - 1) else {
        return false;
    };
    let mut changed = false;
    for m in &mut ms[..keep_from] {
        if m.role == Role::Tool && m.content.chars().count() > SHORT_RESULT {
            let cut: String = m.content.chars().take(SHORT_RESULT).collect();
            m.content = format!("{cut}… [older tool result shortened]");
            changed = true;
        }
    }
    changed
}

/// Indexes where a turn starts (user messages), i.e. where the history may be cut
/// without orphaning a tool result.
fn cut_points(ms: &[ChatMessage]) -> Vec<usize> {
    ms.iter()
        .enumerate()
        .filter(|(_, m)| m.role == Role::User)
        .map(|(i, _)| i)
        .collect()
}

/// Fit `history` (ending with the current user message) plus `extra` tokens into `budget`.
/// Returns the kept messages and how many were dropped from the front.
pub fn fit(history: &[ChatMessage], extra: usize, budget: usize) -> (Vec<ChatMessage>, usize) {
    let mut kept = history.to_vec();
    if total(&kept) + extra <= budget {
        return (kept, 0);
    }
    shorten_old_tool_results(&mut kept);
    let mut start = 0;
    for p in cut_points(&kept) {
        if total(&kept[start..]) + extra <= budget {
            break;
        }
        // The last cut point (where the current turn starts) is as far as dropping goes.
        start = start.max(p);
    }
    // Never start with anything but a user message (providers reject orphans).
    let lead = kept[start..]
        .iter()
        .position(|m| m.role == Role::User)
        .unwrap_or(0);
    start += lead;
    kept.drain(..start);
    (kept, start)
}

/// Fold `older` messages into the running compaction summary (extractive: who said what,
/// first words of each message, tools used), keeping the newest [`MAX_SUMMARY`] characters.
pub fn summarize(previous: Option<&str>, older: &[ChatMessage]) -> String {
    let mut s = previous.unwrap_or_default().to_string();
    for m in older {
        let clip = |t: &str| -> String {
            let t = t.split_whitespace().collect::<Vec<_>>().join(" ");
            match t.char_indices().nth(160) {
                Some((b, _)) => format!("{}…", &t[..b]),
                None => t,
            }
        };
        let line = match m.role {
            Role::User => format!("- User: {}", clip(&m.content)),
            Role::Assistant if !m.tool_calls.is_empty() => {
                let names: Vec<&str> = m.tool_calls.iter().map(|c| c.name.as_str()).collect();
                format!("- You used: {}", names.join(", "))
            }
            Role::Assistant if !m.content.trim().is_empty() => {
                format!("- You: {}", clip(&m.content))
            }
            _ => continue,
        };
        if !s.is_empty() {
            s.push('\n');
        }
        s.push_str(&line);
    }
    if let Some((b, _)) = s.char_indices().rev().nth(MAX_SUMMARY) {
        let start = s[b..].find('\n').map_or(b, |n| b + n + 1);
        s = s[start..].to_string();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::ToolCall;

    fn user(t: &str) -> ChatMessage {
        ChatMessage::new(Role::User, t)
    }

    #[test]
    fn fit_drops_whole_turns_and_never_orphans_tool_results() {
        let big = "x".repeat(3000);
        let mut h = vec![user(&big), ChatMessage::new(Role::Assistant, big.clone())];
        let mut call = ChatMessage::new(Role::Assistant, "");
        call.tool_calls.push(ToolCall {
            id: "c1".into(),
            name: "read_file".into(),
            arguments: "{}".into(),
            extra_content: None,
        });
        let mut res = ChatMessage::new(Role::Tool, big.clone());
        res.tool_call_id = Some("c1".into());
        h.extend([
            user("second"),
            call,
            res,
            ChatMessage::new(Role::Assistant, "done"),
            user("now"),
        ]);
        let (kept, dropped) = fit(&h, 0, 1500);
        assert_eq!(dropped, 2);
        assert_eq!(kept[0], user("second"));
        let (kept, _) = fit(&h, 0, 100);
        assert_eq!(kept, vec![user("now")]);
        let (kept, dropped) = fit(&h, 0, 1_000_000);
        assert_eq!((kept.len(), dropped), (h.len(), 0));
    }

    #[test]
    fn summary_keeps_the_gist() {
        let s = summarize(
            Some("- User: hi"),
            &[user("what is 2+2"), ChatMessage::new(Role::Assistant, "4")],
        );
        assert_eq!(s, "- User: hi\n- User: what is 2+2\n- You: 4");
    }
}
