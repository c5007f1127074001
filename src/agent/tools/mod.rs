//! The tool registry and the built-in tools.
//!
//! The registry is the one conversion point: it parses the model's argument text, validates
//! it against the tool's schema, runs the tool under `agent.tool_timeout`, and turns every
//! failure into a result text for the model (never a crash).
//!
//! - [`schema`]: argument validation.
//! - [`paths`]: workspace confinement for file tools.
//! - [`files`]: `read_file`, `write_file`, `edit_file`, `list_dir`.
//! - [`member_files`]: what a member's turn may not do with them.
//! - [`exec`]: shell commands with a deny list.
//! - [`net`]: address checks shared by the web tools (no private targets).
//! - [`web`]: `web_fetch` and `web_search`.
//! - [`memory`]: the `memory` tool (MEMORY.md).
//! - [`message`]: the `message` tool (send to another chat).
//! - [`read_skill`]: the `read_skill` tool.
//! - [`spawn`]: the `spawn` tool (background sub-agents).

pub mod exec;
pub mod files;
pub mod member_files;
pub mod memory;
pub mod message;
pub mod net;
pub mod paths;
pub mod read_skill;
pub mod schema;
pub mod spawn;
pub mod web;

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use serde_json::Value;
use switchboard_channel::redact_owned;

use super::tool::{Tool, ToolContext, ToolError};
use crate::llm::ToolSpec;

/// Longest tool result handed back to the model, in characters.
pub const MAX_RESULT_CHARS: usize = 16_000;

/// The tools offered in one turn, by name.
#[derive(Clone, Default)]
pub struct Registry {
    tools: Vec<Arc<dyn Tool>>,
    /// What the model is offered, built once per registry (schemas are JSON trees).
    specs: OnceLock<Arc<[ToolSpec]>>,
}

impl Registry {
    /// A registry of `tools`; a later tool with the same name replaces an earlier one.
    pub fn new(tools: Vec<Arc<dyn Tool>>) -> Self {
        let mut r = Self::default();
        for t in tools {
            r.add(t);
        }
        r
    }

    /// Add (or replace by name) a tool.
    pub fn add(&mut self, tool: Arc<dyn Tool>) {
        self.tools.retain(|t| t.name() != tool.name());
        self.tools.push(tool);
        self.specs = OnceLock::new();
    }

    /// Only the tools a read-only sub-agent may use.
    pub fn read_only(&self) -> Registry {
        Registry {
            tools: self
                .tools
                .iter()
                .filter(|t| t.read_only())
                .cloned()
                .collect(),
            specs: OnceLock::new(),
        }
    }

    /// These tools without those named `names`.
    pub fn without(&self, names: &[&str]) -> Registry {
        Registry {
            tools: self
                .tools
                .iter()
                .filter(|t| !names.contains(&t.name()))
                .cloned()
                .collect(),
            specs: OnceLock::new(),
        }
    }

    /// The tool of this name.
    pub fn get(&self, name: &str) -> Option<Arc<dyn Tool>> {
        self.tools.iter().find(|t| t.name() == name).cloned()
    }

    /// Whether a tool of this name is offered.
    pub fn has(&self, name: &str) -> bool {
        self.tools.iter().any(|t| t.name() == name)
    }

    /// The tool names, in order.
    pub fn names(&self) -> Vec<&'static str> {
        self.tools.iter().map(|t| t.name()).collect()
    }

    /// What the model is offered (built on first use, then shared).
    pub fn specs(&self) -> Arc<[ToolSpec]> {
        self.specs
            .get_or_init(|| {
                self.tools
                    .iter()
                    .map(|t| ToolSpec {
                        name: t.name().to_string(),
                        description: t.description().to_string(),
                        parameters: t.schema(),
                    })
                    .collect()
            })
            .clone()
    }

    /// Run one call: parse, validate, run with a timeout. Errors become the result text.
    pub async fn call(
        &self,
        name: &str,
        arguments: &str,
        ctx: &ToolContext,
        timeout: Duration,
    ) -> Result<String, ToolError> {
        let Some(tool) = self.tools.iter().find(|t| t.name() == name) else {
            return Err(ToolError::Failed(format!(
                "unknown tool {name}; available tools: {}",
                self.names().join(", ")
            )));
        };
        let args: Value = if arguments.trim().is_empty() {
            Value::Object(Default::default())
        } else {
            serde_json::from_str(arguments).map_err(|e| {
                ToolError::InvalidArguments(format!("arguments are not valid JSON: {e}"))
            })?
        };
        schema::validate(&args, &tool.schema()).map_err(ToolError::InvalidArguments)?;
        let args = whole_numbers(args);
        // `agent.tool_timeout` caps even a command's own `timeout_secs`; what outlives it is
        // dropped, which ends the command's process group (see `exec`).
        let timeout = tool.time_limit(&args).map_or(timeout, |t| t.min(timeout));
        match tokio::time::timeout(timeout, tool.call(args, ctx)).await {
            // A command's output or a file may hold a secret (the admin token, a key in a
            // note): out before the cut, so none is left half-shown, and the model never
            // sees it to repeat or stream it.
            Ok(r) => r.map(|s| cap(redact_owned(s), MAX_RESULT_CHARS)),
            Err(_) => Err(ToolError::Failed(format!(
                "{name} timed out after {}s",
                timeout.as_secs_f64()
            ))),
        }
    }
}

/// `args` with whole numbers written as floats (`1.0`, which the schema accepts as an
/// integer) made integers, so a tool reading `as_u64` sees them instead of its default.
fn whole_numbers(args: Value) -> Value {
    match args {
        Value::Number(n) if n.is_f64() => match n.as_f64() {
            Some(f) if f.fract() == 0.0 && f >= 0.0 && f < u64::MAX as f64 => Value::from(f as u64),
            Some(f) if f.fract() == 0.0 && f < 0.0 && f >= i64::MIN as f64 => Value::from(f as i64),
            _ => Value::Number(n),
        },
        Value::Array(items) => Value::Array(items.into_iter().map(whole_numbers).collect()),
        Value::Object(map) => Value::Object(
            map.into_iter()
                .map(|(k, v)| (k, whole_numbers(v)))
                .collect(),
        ),
        other => other,
    }
}

/// Cut `s` to `max` characters with a note.
pub fn cap(mut s: String, max: usize) -> String {
    if let Some((byte, _)) = s.char_indices().nth(max) {
        let total = s.chars().count();
        s.truncate(byte);
        s.push_str(&format!("\n[… cut: {total} characters in all]"));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(specs: &[ToolSpec]) -> Vec<&str> {
        specs.iter().map(|s| s.name.as_str()).collect()
    }

    #[test]
    fn specs_are_built_once_and_rebuilt_after_a_change() {
        let mut reg = Registry::new(vec![Arc::new(files::ReadFile)]);
        let first = reg.specs();
        assert!(
            Arc::ptr_eq(&first, &reg.specs()),
            "the second call reuses the first"
        );
        assert_eq!(names(&first), ["read_file"]);
        assert_eq!(first[0].parameters, files::ReadFile.schema());

        reg.add(Arc::new(files::ListDir));
        let second = reg.specs();
        assert!(!Arc::ptr_eq(&first, &second));
        assert_eq!(names(&second), ["read_file", "list_dir"]);
        assert_eq!(
            names(&reg.clone().read_only().specs()),
            ["read_file", "list_dir"]
        );
    }

    #[test]
    fn whole_numbers_written_as_floats_become_integers() {
        let args = serde_json::json!({"timeout_secs": 1.0, "n": [2.0, -3.0], "x": 0.5, "s": "1.0"});
        let got = whole_numbers(args);
        assert_eq!(got["timeout_secs"].as_u64(), Some(1));
        assert_eq!(got["n"], serde_json::json!([2, -3]));
        assert_eq!(got["x"], 0.5);
        assert_eq!(got["s"], "1.0");
    }
}
