//! Reading a `POST /v1/chat/completions` body: only what the gateway uses (the last user
//! message's text, `user`, `stream`, `stream_options.include_usage`, `model`) is taken.
//!
//! Chat UIs resend the whole conversation, so a body may hold a million messages: they are
//! walked over once, unparsed (`RawValue`), keeping the last one that counts, never as a
//! `serde_json::Value` tree (which took ~25 times the body's size).

use std::fmt;

use serde::Deserializer as _;
use serde::de::{IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;

/// Longest `user`: it names a session (a store key) and shows in logs and the CLI.
const USER_MAX_BYTES: usize = 256;

/// What the gateway takes from a chat completion request.
#[derive(Debug, PartialEq)]
pub(super) struct ChatRequest {
    /// The last user message's text.
    pub(super) text: String,
    /// `user`, trimmed; `default` when absent or empty.
    pub(super) user: String,
    pub(super) stream: bool,
    /// `stream_options.include_usage` (only when streamed).
    pub(super) include_usage: bool,
    pub(super) model: String,
}

/// Read `body`; the error is a message for a 400 naming the problem.
pub(super) fn parse(body: &[u8]) -> Result<ChatRequest, String> {
    let first = body.iter().find(|b| !b.is_ascii_whitespace());
    if first != Some(&b'{') {
        return Err(match serde_json::from_slice::<IgnoredAny>(body) {
            Ok(_) => "the body must be a JSON object".into(),
            Err(e) => format!("malformed JSON: {e}"),
        });
    }
    let mut de = serde_json::Deserializer::from_slice(body);
    let [messages, user, stream, stream_options, model] = de
        .deserialize_map(Fields([
            "messages",
            "user",
            "stream",
            "stream_options",
            "model",
        ]))
        .and_then(|f| de.end().map(|()| f))
        .map_err(|e| format!("malformed JSON: {e}"))?;
    let text = last_user_text(messages)?;
    if text.trim().is_empty() {
        return Err("the last user message is empty".into());
    }
    let user = match user.map(|u| serde_json::from_str::<Option<String>>(u.get())) {
        None | Some(Ok(None)) => "default".to_string(),
        Some(Ok(Some(u))) => checked_user(&u)?,
        Some(Err(_)) => return Err("`user` must be a string".into()),
    };
    let stream = match stream.map(|s| serde_json::from_str::<Option<bool>>(s.get())) {
        None | Some(Ok(None)) => false,
        Some(Ok(Some(b))) => b,
        Some(Err(_)) => return Err("`stream` must be true or false".into()),
    };
    // As OpenAI: with `stream_options.include_usage` a last chunk before `[DONE]` reports
    // the tokens used. Anything else there is ignored.
    let include_usage = stream
        && stream_options
            .and_then(|o| object(o, ["include_usage"]))
            .and_then(|[u]| serde_json::from_str::<bool>(u?.get()).ok())
            .unwrap_or(false);
    let model = model
        .and_then(|m| serde_json::from_str::<String>(m.get()).ok())
        .unwrap_or_else(|| "switchboard".into());
    Ok(ChatRequest {
        text,
        user,
        stream,
        include_usage,
        model,
    })
}

/// `user` trimmed (an empty one is `default`: some clients always send the field), or why
/// it cannot name a session.
fn checked_user(user: &str) -> Result<String, String> {
    let user = user.trim();
    if user.is_empty() {
        return Ok("default".into());
    }
    if user.len() > USER_MAX_BYTES {
        return Err(format!("`user` is over {USER_MAX_BYTES} bytes"));
    }
    if user.chars().any(char::is_control) {
        return Err("`user` must not contain control characters".into());
    }
    Ok(user.to_string())
}

/// The text of the request's last message, the user's (string content or text parts; other
/// parts, such as images, are named as left out).
fn last_user_text(messages: Option<&RawValue>) -> Result<String, String> {
    let messages = messages
        .filter(|m| m.get().starts_with('['))
        .ok_or("`messages` must be a non-empty array")?;
    let last = serde_json::Deserializer::from_str(messages.get())
        .deserialize_seq(LastMessage)
        .map_err(|e| format!("malformed JSON: {e}"))?
        .ok_or("`messages` has no message with role `user`")?;
    if last.role.as_deref() != Some("user") {
        // An assistant's partial answer to continue, or a tool's result: an earlier user
        // message would be answered again in their place.
        return Err(
            "the last message must have role `user`: the gateway keeps the \
                    conversation itself and answers each new user message"
                .into(),
        );
    }
    let content = last.content.map(RawValue::get).unwrap_or("null");
    if content.starts_with('"') {
        return serde_json::from_str(content).map_err(|e| format!("malformed JSON: {e}"));
    }
    if !content.starts_with('[') {
        return Err("the last user message has no text `content`".into());
    }
    let (mut text, mut other) = (String::new(), 0);
    serde_json::Deserializer::from_str(content)
        .deserialize_seq(Each(|part: &RawValue| {
            let part_text = object(part, ["text"])
                .and_then(|[t]| serde_json::from_str::<String>(t?.get()).ok());
            match part_text {
                Some(t) => {
                    if !text.is_empty() {
                        text.push('\n');
                    }
                    text.push_str(&t);
                }
                None => other += 1,
            }
        }))
        .map_err(|e| format!("malformed JSON: {e}"))?;
    if other > 0 {
        let note = format!(
            "[{other} attachment(s), such as an image, left out: this API takes text only]"
        );
        text = if text.is_empty() {
            note
        } else {
            format!("{text}\n\n{note}")
        };
    }
    Ok(text)
}

/// A message as far as the gateway looks at it.
struct Message<'a> {
    /// When a string.
    role: Option<String>,
    content: Option<&'a RawValue>,
}

/// The last message of a `messages` array that is not a system message (some clients add
/// one after the user's): each is looked at and let go in turn.
struct LastMessage;

impl<'de> Visitor<'de> for LastMessage {
    type Value = Option<Message<'de>>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an array of messages")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut last = None;
        while let Some(m) = seq.next_element::<&RawValue>()? {
            // Not an object, or a role not a string: no role, which is not `user`.
            let [role, content] = object(m, ["role", "content"]).unwrap_or([None, None]);
            let role = role.and_then(|r| serde_json::from_str::<String>(r.get()).ok());
            if !matches!(role.as_deref(), Some("system" | "developer")) {
                last = Some(Message { role, content });
            }
        }
        Ok(last)
    }
}

/// The fields named of the JSON object `raw`, unparsed (the last of a repeated one); `None`
/// when it is not an object.
fn object<'a, const N: usize>(
    raw: &'a RawValue,
    names: [&'static str; N],
) -> Option<[Option<&'a RawValue>; N]> {
    if !raw.get().starts_with('{') {
        return None;
    }
    serde_json::Deserializer::from_str(raw.get())
        .deserialize_map(Fields(names))
        .ok()
}

/// Visits a JSON object, keeping the named fields unparsed and skipping the rest.
struct Fields<const N: usize>([&'static str; N]);

impl<'de, const N: usize> Visitor<'de> for Fields<N> {
    type Value = [Option<&'de RawValue>; N];

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut found = [None; N];
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            match self.0.iter().position(|n| *n == key) {
                Some(i) => found[i] = Some(map.next_value::<&RawValue>()?),
                None => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(found)
    }
}

/// Visits a JSON array, handing each element to the closure unparsed.
struct Each<F>(F);

impl<'de, F: FnMut(&'de RawValue)> Visitor<'de> for Each<F> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an array")
    }

    fn visit_seq<A: SeqAccess<'de>>(mut self, mut seq: A) -> Result<(), A::Error> {
        while let Some(e) = seq.next_element::<&RawValue>()? {
            (self.0)(e);
        }
        Ok(())
    }
}

#[cfg(test)]
#[path = "request_tests.rs"]
mod tests;
