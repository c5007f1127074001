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

/// `memory`: `remember` appends to `MEMORY.md`, `recall` searches it. Entries are dated
/// in the gateway's timezone (UTC by default).
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
        "Long-term memory in MEMORY.md. action=remember with text: store a lasting fact about the user or their preferences. action=recall with query: find remembered facts by keyword."
    }
    fn schema(&self) -> Value {
        json!({"type": "object", "required": ["action"],
               "properties": {"action": {"type": "string", "enum": ["remember", "recall"]},
                              "text": {"type": "string", "minLength": 1, "maxLength": 2000},
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
                let date = match self.tz {
                    Some(tz) => now.with_timezone(&tz).format("%Y-%m-%d").to_string(),
                    None => now.format("%Y-%m-%d").to_string(),
                };
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
                Ok(format!("remembered: {line}"))
            }
            Some("recall") => {
                let query = args["query"]
                    .as_str()
                    .ok_or_else(|| ToolError::InvalidArguments("missing required query".into()))?;
                // Its newest part, as the prompt shows it.
                let text =
                    crate::confine::read(&ctx.workspace, &path, MAX_READ, true).unwrap_or_default();
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
