//! `memory`: remember a fact in the workspace's `MEMORY.md`, or recall facts by keyword.

use async_trait::async_trait;
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;

use crate::agent::tool::{Tool, ToolContext, ToolError};

/// The memory file, relative to the workspace.
pub const MEMORY_FILE: &str = "MEMORY.md";
/// Most lines `recall` returns.
const MAX_RECALL: usize = 20;

/// `memory`: `remember` appends to `MEMORY.md`, `recall` searches it.
pub struct Memory;

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
                let line = text.split_whitespace().collect::<Vec<_>>().join(" ");
                let fresh = !path.exists();
                let mut f = tokio::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&path)
                    .await
                    .map_err(|e| ToolError::Failed(format!("{MEMORY_FILE}: {e}")))?;
                let date = chrono::Utc::now().format("%Y-%m-%d");
                let entry = if fresh {
                    format!("# Memory\n\n- {line} ({date})\n")
                } else {
                    format!("- {line} ({date})\n")
                };
                f.write_all(entry.as_bytes())
                    .await
                    .map_err(|e| ToolError::Failed(format!("{MEMORY_FILE}: {e}")))?;
                Ok(format!("remembered: {line}"))
            }
            Some("recall") => {
                let query = args["query"]
                    .as_str()
                    .ok_or_else(|| ToolError::InvalidArguments("missing required query".into()))?;
                let text = tokio::fs::read_to_string(&path).await.unwrap_or_default();
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
