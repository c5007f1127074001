//! `message`: send a text to another chat this gateway knows (or any chat, for the owner).

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{Value, json};
use switchboard_channel::{ChatKey, OutboundMessage};

use crate::agent::publisher::Publisher;
use crate::agent::tool::{Tool, ToolContext, ToolError};
use crate::bus::Delivery;

/// `message`: an outbound message to `key`.
pub struct Message {
    publisher: Arc<dyn Publisher>,
}

impl Message {
    pub fn new(publisher: Arc<dyn Publisher>) -> Self {
        Self { publisher }
    }
}

#[async_trait]
impl Tool for Message {
    fn name(&self) -> &'static str {
        "message"
    }
    fn description(&self) -> &'static str {
        "Send a message to another chat, by key like telegram:123456 or slack:C0123ABC. Your normal reply already goes to the current chat."
    }
    fn schema(&self) -> Value {
        json!({"type": "object", "required": ["key", "text"],
               "properties": {"key": {"type": "string", "minLength": 3}, "text": {"type": "string", "minLength": 1}}})
    }
    async fn call(&self, args: Value, ctx: &ToolContext) -> Result<String, ToolError> {
        let raw = args["key"].as_str().unwrap_or_default();
        let key: ChatKey = raw
            .parse()
            .map_err(|e| ToolError::InvalidArguments(format!("key: {e}")))?;
        crate::channels::check_chat_id(&key)
            .map_err(|e| ToolError::InvalidArguments(format!("key: {e}")))?;
        if !ctx.sender_is_owner && !self.publisher.known_key(&key) {
            return Err(ToolError::Refused(format!(
                "{key} is not a chat this gateway has talked with; only the owner may message new chats"
            )));
        }
        let mut text = args["text"].as_str().unwrap_or_default().to_string();
        // From a member: the chat reads who sent it, not the assistant's own word.
        if let Some(m) = &ctx.member {
            text = format!("From {}:\n{text}", m.name);
        }
        let outcome = self
            .publisher
            .send(OutboundMessage::new(key.clone(), text))
            .await
            .map_err(|e| ToolError::Failed(format!("could not send to {key}: {e}")))?;
        match outcome {
            Delivery::Delivered => Ok(format!("sent to {key}")),
            Delivery::Refused(why) => Err(ToolError::Failed(format!(
                "{key} refused the message, which is dropped: {why}"
            ))),
            Delivery::Later(why) => Ok(format!(
                "not delivered to {key} yet ({why}); it is kept and tried again"
            )),
        }
    }
}
