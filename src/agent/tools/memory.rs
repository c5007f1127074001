//! `memory`: remember a fact in the workspace's `MEMORY.md`, or recall facts by keyword.

use async_trait::async_trait;
use serde_json::{Value, json};
use std::io::Write;

use crate::agent::tool::{Tool, ToolContext, ToolError};

/// The memory file, relative to the workspace.
pub const MEMORY_FILE: &str = "MEMORY.md";
/// Most of `MEMORY.md` that `recall` searches, in bytes.
const MAX_READ: u64 = 1024 * 1024;
/// Most lines `recall` returns.
const MAX_RECALL: usize = 20;
/// How a note kept for the owner ends: `- … (2026-11-25, owner only)`.
const OWNER_ONLY: &str = ", owner only)";

/// `text` without the notes kept for the owner: what a turn that is not the owner's alone
/// is shown (in a group, or for a member).
pub fn shared_only(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.contains(OWNER_ONLY) {
        return text.into();
    }
    text.lines()
        .filter(|l| !l.trim_end().ends_with(OWNER_ONLY))
        .collect::<Vec<_>>()
        .join("\n")
        .into()
}

/// `memory`: `remember` appends to `MEMORY.md`, `recall` searches it. Entries are dated
/// in the gateway's timezone (UTC by default). What the owner has it remember in their
/// direct chat is kept for them (`owner only`) unless said to be shared: only their own
/// direct chats are shown such notes, never a group or a member.
#[derive(Default)]
pub struct Memory {
    pub tz: Option<chrono_tz::Tz>,
}

#[async_trait]
impl Tool for Memory {
    fn name(&self) -> &'static str {
        "memory"
    }
    fn description(&self) -> &'static str {
        "Long-term memory in MEMORY.md. action=remember with text: store a lasting fact about the user or their preferences. action=recall with query: find remembered facts by keyword. What the owner says in their direct chat is kept for the owner alone unless shared=true (only when they say others may know it); what is remembered anywhere else is seen in every chat, groups and other people included."
    }
    fn schema(&self) -> Value {
        json!({"type": "object", "required": ["action"],
               "properties": {"action": {"type": "string", "enum": ["remember", "recall"]},
                              "text": {"type": "string", "minLength": 1, "maxLength": 2000},
                              "shared": {"type": "boolean"},
                              "query": {"type": "string", "minLength": 1}}})
    }
    async fn call(&self, args: Value, ctx: &ToolContext) -> Result<String, ToolError> {
        let path = ctx.workspace.join(MEMORY_FILE);
        match args["action"].as_str() {
            Some("remember") => {
                let text = args["text"]
                    .as_str()
                    .ok_or_else(|| ToolError::InvalidArguments("missing required text".into()))?;
                let mut line = text.split_whitespace().collect::<Vec<_>>().join(" ");
                // Every chat reads the memory: a member's note says whose it is, so it
                // reads as what they said, not as the owner's word.
                if let Some(m) = &ctx.member {
                    line = format!("{line} (from {})", m.name);
                }
                // Not through a link out of the workspace (see `crate::confine`).
                let mut f = crate::confine::append(&ctx.workspace, &path)
                    .map_err(|e| ToolError::Failed(format!("{MEMORY_FILE}: {e}")))?;
                let now = chrono::Utc::now();
                let mut date = match self.tz {
                    Some(tz) => now.with_timezone(&tz).format("%Y-%m-%d").to_string(),
                    None => now.format("%Y-%m-%d").to_string(),
                };
                let kept = ctx.owner_only && !args["shared"].as_bool().unwrap_or(false);
                if kept {
                    date.push_str(&OWNER_ONLY[..OWNER_ONLY.len() - 1]);
                }
                // A file edited by hand may not end its last line: the entry starts a new
                // one rather than running on from it.
                let open_line = f.len > 0
                    && crate::confine::read(&ctx.workspace, &path, 1, true)
                        .is_some_and(|end| !end.ends_with('\n'));
                let entry = if f.len == 0 {
                    format!("# Memory\n\n- {line} ({date})\n")
                } else if open_line {
                    format!("\n- {line} ({date})\n")
                } else {
                    format!("- {line} ({date})\n")
                };
                f.file
                    .write_all(entry.as_bytes())
                    .map_err(|e| ToolError::Failed(format!("{MEMORY_FILE}: {e}")))?;
                Ok(if kept {
                    format!("remembered, for the owner's direct chats only: {line}")
                } else {
                    format!("remembered: {line}")
                })
            }
            Some("recall") => {
                let query = args["query"]
                    .as_str()
                    .ok_or_else(|| ToolError::InvalidArguments("missing required query".into()))?;
                // Its newest part, as the prompt shows it.
                let text =
                    crate::confine::read(&ctx.workspace, &path, MAX_READ, true).unwrap_or_default();
                let text = if ctx.owner_only {
                    text.into()
                } else {
                    shared_only(&text)
                };
                let words: Vec<String> = query.split_whitespace().map(str::to_lowercase).collect();
                let hits: Vec<&str> = text
                    .lines()
                    .filter(|l| {
                        let l = l.to_lowercase();
                        !l.trim().is_empty()
                            && !l.starts_with('#')
                            && words.iter().any(|w| l.contains(w.as_str()))
                    })
                    .take(MAX_RECALL)
                    .collect();
                if hits.is_empty() {
                    Ok(format!("nothing remembered about {query}"))
                } else {
                    Ok(hits.join("\n"))
                }
            }
            _ => Err(ToolError::InvalidArguments(
                "action must be remember or recall".into(),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_owners_direct_notes_are_kept_for_their_direct_chats() {
        let dir = tempfile::tempdir().unwrap();
        let key = "telegram:1".parse().unwrap();
        let owner = ToolContext {
            owner_only: true,
            ..ToolContext::new(key, dir.path())
        };
        let group = ToolContext::new("telegram:-5".parse().unwrap(), dir.path());
        let memory = Memory::default();
        let remember = |text: &str, shared: bool| json!({"action": "remember", "text": text, "shared": shared});
        let said = memory
            .call(remember("door code is 7788", false), &owner)
            .await
            .unwrap();
        assert!(said.starts_with("remembered, for the owner's direct chats only"));
        memory
            .call(remember("dinner is at 7 on Sundays", true), &owner)
            .await
            .unwrap();
        memory
            .call(remember("the door sticks", false), &group)
            .await
            .unwrap();
        let file = std::fs::read_to_string(dir.path().join(MEMORY_FILE)).unwrap();
        let lines: Vec<&str> = file.lines().filter(|l| l.starts_with("- ")).collect();
        assert!(
            lines[0].starts_with("- door code is 7788 (") && lines[0].ends_with(", owner only)")
        );
        assert!(!lines[1].contains("owner only") && !lines[2].contains("owner only"));
        // Shown and recalled only where the turn is the owner's alone.
        assert!(!shared_only(&file).contains("7788") && shared_only(&file).contains("Sundays"));
        let recall = json!({"action": "recall", "query": "door"});
        let there = memory.call(recall.clone(), &owner).await.unwrap();
        assert!(
            there.contains("7788") && there.contains("sticks"),
            "{there}"
        );
        let elsewhere = memory.call(recall, &group).await.unwrap();
        assert!(
            !elsewhere.contains("7788") && elsewhere.contains("sticks"),
            "{elsewhere}"
        );
    }
}
