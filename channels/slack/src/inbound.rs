//! Slack events → [`InboundMessage`]: which events count, and how they are keyed.
//!
//! Works on the JSON of an `event_callback` (the Events API body, or a Socket Mode
//! envelope's payload), so both intake modes share one set of rules:
//! - `app_mention`, and `message` in channels, private channels, DMs and group DMs;
//! - message subtypes other than `file_share` / `thread_broadcast` (edits, deletions, joins,
//!   bot messages…), messages carrying a `bot_id`, and the bot's own messages are ignored;
//! - a `message` that mentions the bot is published like the `app_mention` Slack also sends
//!   for it, under the same id ([`message_id`]): whichever comes first is taken in, and the
//!   gateway drops the other as a duplicate (so one user message is handled once, even when
//!   the app subscribes to only one of the two events).

use serde_json::{Map, Value, json};
use switchboard_channel::{ChatKey, InboundMessage, Sender};

use crate::files::FileRef;
use crate::web::BotIdentity;

/// What to do with one event.
#[derive(Debug)]
pub(crate) enum Intake {
    Publish(Box<Converted>),
    /// Dropped on purpose; the reason is for the debug log.
    Ignore(&'static str),
}

/// A message to publish, plus what the adapter remembers about it.
#[derive(Debug)]
pub(crate) struct Converted {
    pub msg: InboundMessage,
    pub channel: String,
    pub ts: String,
    /// `(channel, thread root ts)` the bot now takes part in, when it was mentioned there.
    pub joined_thread: Option<(String, String)>,
    /// Shared files, left on the message to be downloaded before its turn.
    pub files: Vec<FileRef>,
}

fn s<'a>(v: &'a Value, k: &str) -> Option<&'a str> {
    v.get(k).and_then(Value::as_str).filter(|x| !x.is_empty())
}

/// Subtypes that are still a person's new message.
const KEPT_SUBTYPES: &[&str] = &["file_share", "thread_broadcast"];

/// Channel type from the event, or guessed from the id prefix (`app_mention` has none).
fn channel_type(ev: &Value, channel: &str) -> String {
    if let Some(t) = s(ev, "channel_type") {
        return t.to_string();
    }
    let t = if is_dm(channel) {
        "im"
    } else if channel.starts_with('G') {
        "group"
    } else {
        "channel"
    };
    t.to_string()
}

/// Whether a channel id is a DM's (`D…`).
pub(crate) fn is_dm(channel: &str) -> bool {
    channel.starts_with('D')
}

/// `(channel, thread root ts)` of a channel thread reply that does not say the thread is the
/// bot's (no `parent_user_id`, or a person's): [`convert`] needs to
/// know whether the bot takes part in it. DMs, bots' and the bot's own messages need no
/// answer.
pub(crate) fn thread_to_look_up(callback: &Value, me: &BotIdentity) -> Option<(String, String)> {
    let ev = callback.get("event")?;
    // A root by the bot (the Events API says so) needs no lookup.
    if s(ev, "type") != Some("message") || s(ev, "parent_user_id") == Some(me.user_id.as_str()) {
        return None;
    }
    if s(ev, "bot_id").is_some() || s(ev, "user").is_none_or(|u| u == me.user_id) {
        return None;
    }
    let (channel, ts, root) = (s(ev, "channel")?, s(ev, "ts")?, s(ev, "thread_ts")?);
    if root == ts || channel_type(ev, channel) == "im" {
        return None;
    }
    Some((channel.to_string(), root.to_string()))
}

/// Where a message event sits: its conversation, ts, thread root and `channel_type`; `None`
/// for events that are no message. What `recent` notes as handled.
pub(crate) fn position(callback: &Value) -> Option<(&str, &str, Option<&str>, Option<&str>)> {
    let ev = callback.get("event")?;
    if !matches!(s(ev, "type"), Some("message" | "app_mention")) {
        return None;
    }
    let (channel, ts) = (s(ev, "channel")?, s(ev, "ts")?);
    Some((channel, ts, s(ev, "thread_ts"), s(ev, "channel_type")))
}

/// The id of the message `ts` of `channel`: the same for every event that carries it (a
/// mention comes as `message` and as `app_mention`, in a DM or group DM too, each with its
/// own `event_id`; Slack's retries and Socket Mode redeliveries repeat one), so the gateway
/// keeps one and drops the others as duplicates.
pub(crate) fn message_id(channel: &str, ts: &str) -> String {
    format!("slack:msg:{channel}:{ts}")
}

/// Decide about one `event_callback`. `in_bot_thread(channel, thread_ts)` says whether the
/// bot already takes part in that thread.
pub(crate) fn convert(
    callback: &Value,
    me: &BotIdentity,
    reply_in_thread: bool,
    in_bot_thread: impl Fn(&str, &str) -> bool,
) -> Intake {
    if s(callback, "event_id").is_none() {
        return Intake::Ignore("no event_id");
    }
    let Some(ev) = callback.get("event") else {
        return Intake::Ignore("no event");
    };
    let is_mention_event = match s(ev, "type") {
        Some("app_mention") => true,
        Some("message") => false,
        _ => return Intake::Ignore("event type not handled"),
    };
    if let Some(sub) = s(ev, "subtype") {
        if !KEPT_SUBTYPES.contains(&sub) {
            return Intake::Ignore("message subtype");
        }
    }
    if is_mention_event && ev.get("edited").is_some_and(|e| !e.is_null()) {
        return Intake::Ignore("edited mention");
    }
    if s(ev, "bot_id").is_some() {
        return Intake::Ignore("bot message");
    }
    let Some(user) = s(ev, "user") else {
        return Intake::Ignore("no user");
    };
    if user == me.user_id {
        return Intake::Ignore("own message");
    }
    let (Some(channel), Some(ts)) = (s(ev, "channel"), s(ev, "ts")) else {
        return Intake::Ignore("no channel or ts");
    };
    let ctype = channel_type(ev, channel);
    let is_im = ctype == "im";
    let raw_text = s(ev, "text").unwrap_or("");
    let tag = format!("<@{}>", me.user_id);
    let mentions_tag = raw_text.contains(&tag);
    let thread_ts = s(ev, "thread_ts");
    let root = thread_ts.unwrap_or(ts);
    let in_thread = thread_ts.is_some_and(|t| t != ts);
    // Without threads the bot answers in the channel, so talk in a thread under one of its
    // posts is not taken for a question to it (the answer would land outside the thread).
    let bot_thread = reply_in_thread
        && in_thread
        && (in_bot_thread(channel, root) || s(ev, "parent_user_id") == Some(me.user_id.as_str()));
    let mentions_bot = is_mention_event || mentions_tag || bot_thread;

    // A DM is one conversation, except a thread the user opened in it: that thread is its
    // own, and the reply must land in it rather than at the DM's top level.
    let threaded = reply_in_thread && (!is_im || in_thread);
    let chat_id = if threaded {
        format!("{channel}:{root}")
    } else {
        channel.to_string()
    };
    let trimmed = raw_text.trim_start();
    let text = plain_text(
        trimmed
            .strip_prefix(&tag)
            .map(str::trim_start)
            .unwrap_or(raw_text),
    );
    let sender = Sender {
        id: user.to_string(),
        username: None,
        display_name: user.to_string(),
        is_owner: false,
    };
    let mut msg = InboundMessage::text(
        message_id(channel, ts),
        ChatKey::new("slack", chat_id),
        sender,
        text,
    );
    msg.is_group = !is_im;
    msg.mentions_bot = mentions_bot;
    if in_thread {
        msg.reply_to = Some(root.to_string());
    }
    let mut meta = Map::new();
    meta.insert("message_id".into(), json!(ts));
    meta.insert("channel".into(), json!(channel));
    meta.insert("channel_type".into(), json!(ctype));
    if let Some(t) = thread_ts {
        meta.insert("thread_ts".into(), json!(t));
    }
    if let Some(team) = s(callback, "team_id") {
        meta.insert("team_id".into(), json!(team));
    }
    msg.metadata = meta;
    let mut files = Vec::new();
    for f in ev
        .get("files")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        match FileRef::from_event(f) {
            Some(file) => files.push(file),
            // A file from another organisation (Slack Connect) comes without a link
            // (`file_access: check_file_info`): said, rather than dropped without a word.
            None => {
                let name = s(f, "name").unwrap_or("(unnamed)");
                msg.text.push_str(&format!(
                    "\n[file {name} not downloaded: Slack gave no link to it (a file from \
                     another organisation); ask for it to be shared here]"
                ));
            }
        }
    }
    msg.truncate_oversized();
    let joined_thread = (!is_im && mentions_bot).then(|| (channel.to_string(), root.to_string()));
    Intake::Publish(Box::new(Converted {
        msg,
        channel: channel.to_string(),
        ts: ts.to_string(),
        joined_thread,
        files,
    }))
}

/// Slack's `mrkdwn` of an incoming message as plain text: `&amp; &lt; &gt;` unescaped, a
/// link `<https://x|label>` as `label (https://x)`, `<#C1|general>` as `#general`, `<!here>`
/// as `@here`; a user mention `<@U1>` stays as it is, so the model can write it back.
pub(crate) fn plain_text(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find('<') {
        out.push_str(&unescape(&rest[..start]));
        let after = &rest[start + 1..];
        let Some(end) = after.find('>') else {
            out.push_str(&unescape(&rest[start..]));
            rest = "";
            break;
        };
        let token = &after[..end];
        let (target, label) = match token.split_once('|') {
            Some((t, l)) => (t, Some(l)),
            None => (token, None),
        };
        let label = label.map(unescape);
        match target.chars().next() {
            Some('@') => out.push_str(&format!("<{target}>")),
            Some('#') => out.push_str(&format!(
                "#{}",
                label.unwrap_or_else(|| target[1..].to_string())
            )),
            Some('!') => {
                let word = target[1..].split('^').next().unwrap_or_default();
                match label {
                    Some(l) => out.push_str(&l),
                    None => out.push_str(&format!("@{word}")),
                }
            }
            _ => {
                let url = unescape(target);
                let url = url.strip_prefix("mailto:").unwrap_or(&url).to_string();
                match label {
                    Some(l) if l != url => out.push_str(&format!("{l} ({url})")),
                    _ => out.push_str(&url),
                }
            }
        }
        rest = &after[end + 1..];
    }
    out.push_str(&unescape(rest));
    out
}

fn unescape(s: &str) -> String {
    s.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&")
}

#[cfg(test)]
#[path = "inbound_tests.rs"]
mod tests;
