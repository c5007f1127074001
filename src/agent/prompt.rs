//! The system prompt: a stable prefix (identity, workspace bootstrap files, memory, skills,
//! channel facts, the compaction summary) that stays byte-identical between turns so
//! providers can cache it, and a small dynamic suffix (date and time, model).

use std::fmt::Write;
use std::path::Path;

use switchboard_channel::InboundMessage;

use super::skills::Skill;
use crate::config::Config;

/// Workspace files inlined into the prompt, in order.
pub const BOOTSTRAP_FILES: [&str; 4] = ["AGENTS.md", "SOUL.md", "USER.md", "TOOLS.md"];
/// Longest part of one file put into the prompt, in characters.
const MAX_FILE_CHARS: usize = 12_000;

fn read_capped(path: &Path) -> Option<String> {
    let text = std::fs::read_to_string(path).ok()?;
    let text = text.trim();
    if text.is_empty() {
        return None;
    }
    Some(match text.char_indices().nth(MAX_FILE_CHARS) {
        Some((b, _)) => format!("{}\n[… cut]", &text[..b]),
        None => text.to_string(),
    })
}

/// The stable prefix for a turn whose last message is `last`.
pub fn stable(
    config: &Config,
    skills: &[Skill],
    last: &InboundMessage,
    summary: Option<&str>,
) -> String {
    let name = &config.agent.name;
    let mut p = format!(
        "You are {name}, a personal AI assistant. People reach you over several chat apps \
         (Telegram, Discord, Slack, an HTTP API); it is the same you everywhere. Be helpful, \
         accurate and brief. Use tools when they help; never invent tool results. Your workspace \
         folder holds your files and notes."
    );
    let ws = &config.gateway.workspace;
    for file in BOOTSTRAP_FILES {
        if let Some(text) = read_capped(&ws.join(file)) {
            let _ = write!(p, "\n\n## {file}\n{text}");
        }
    }
    if let Some(text) = read_capped(&ws.join(super::tools::memory::MEMORY_FILE)) {
        let _ = write!(p, "\n\n## Memory (MEMORY.md)\n{text}");
    }
    let available: Vec<&Skill> = skills.iter().filter(|s| s.available()).collect();
    if !available.is_empty() {
        p.push_str("\n\n## Skills\nBefore using a skill, read its instructions with read_skill.\n");
        for s in available.iter().filter(|s| !s.always) {
            let _ = writeln!(p, "- {}: {}", s.name, s.description);
        }
        for s in available.iter().filter(|s| s.always) {
            let _ = write!(p, "\n### Skill: {}\n{}\n", s.name, s.body);
        }
    }
    let chat = if last.is_group {
        "a group chat"
    } else {
        "a direct chat"
    };
    let _ = write!(
        p,
        "\n\n## This chat\nChannel: {} ({chat}), chat key {}. Talking with: {}.",
        last.key.channel, last.key, last.sender.display_name
    );
    if let Some(s) = summary.filter(|s| !s.trim().is_empty()) {
        let _ = write!(p, "\n\n## Earlier in this conversation (condensed)\n{s}");
    }
    p
}

/// The dynamic suffix: current date and time in `gateway.timezone`, and the model.
pub fn dynamic(config: &Config, model: &str) -> String {
    let now = chrono::Utc::now().with_timezone(&config.gateway.tz());
    format!(
        "Current date and time: {} ({}). Model: {model}.",
        now.format("%A %Y-%m-%d %H:%M"),
        config.gateway.timezone
    )
}
