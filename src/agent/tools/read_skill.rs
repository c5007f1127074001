//! `read_skill`: the full instructions of a skill from the catalog.

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{Value, json};

use crate::agent::skills::Skill;
use crate::agent::tool::{Tool, ToolContext, ToolError};

/// `read_skill`: a skill's `SKILL.md` body, by name (available skills only).
pub struct ReadSkill {
    skills: Arc<Vec<Skill>>,
}

impl ReadSkill {
    pub fn new(skills: Arc<Vec<Skill>>) -> Self {
        Self { skills }
    }
}

#[async_trait]
impl Tool for ReadSkill {
    fn name(&self) -> &'static str {
        "read_skill"
    }
    fn description(&self) -> &'static str {
        "Read the full instructions of a skill listed in the skills catalog before using it."
    }
    fn schema(&self) -> Value {
        json!({"type": "object", "required": ["name"], "properties": {"name": {"type": "string", "minLength": 1}}})
    }
    fn read_only(&self) -> bool {
        true
    }
    async fn call(&self, args: Value, _ctx: &ToolContext) -> Result<String, ToolError> {
        let name = args["name"].as_str().unwrap_or_default();
        match self.skills.iter().find(|s| s.name == name) {
            Some(s) if s.available() => Ok(format!(
                "# Skill: {}\n(folder: {})\n\n{}",
                s.name,
                s.dir.display(),
                s.body
            )),
            Some(s) => Err(ToolError::Failed(format!(
                "skill {name} is unavailable: missing {}",
                s.missing.join(", ")
            ))),
            None => {
                let names: Vec<&str> = self
                    .skills
                    .iter()
                    .filter(|s| s.available())
                    .map(|s| s.name.as_str())
                    .collect();
                Err(ToolError::Failed(format!(
                    "no skill named {name}; available: {}",
                    names.join(", ")
                )))
            }
        }
    }
}
