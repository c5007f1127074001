//! `MESSAGE_CREATE` → [`InboundMessage`]: who wrote it, whether it addresses the bot (user
//! mention, the bot's managed role, a reply to the bot, or a thread the bot takes part in),
//! its text with mentions read as names (and a forum post's title with its first message),
//! replies and attachments.

use chrono::{DateTime, Utc};
use serenity::model::channel::{
    Message, MessageFlags, MessageReferenceKind, MessageSnapshot, MessageType,
};
use serenity::model::id::{RoleId, UserId};
use switchboard_channel::{
    Attachment, AttachmentKind, ChatKey, FORWARDED_FROM, InboundMessage, Sender, command_name,
};

use crate::mentions::{self, Names};
use crate::places::Situation;

/// Metadata key of a forum post's title, given with the first message the bot gets of it.
pub(crate) const FORUM_POST_TITLE: &str = "forum_post_title";

/// Whether serenity `msg` should reach the gateway at all: not ours, not another bot's, a
/// message a person typed (not a join, pin or other system notice), with text or files (a
/// sticker, poll or embed alone would be a turn about nothing).
pub(crate) fn wanted(msg: &Message, bot_id: UserId) -> bool {
    let has_body = |content: &str, files: &[serenity::model::channel::Attachment]| {
        !content.trim().is_empty() || !files.is_empty()
    };
    msg.author.id != bot_id
        && !msg.author.bot
        && matches!(msg.kind, MessageType::Regular | MessageType::InlineReply)
        && (has_body(&msg.content, &msg.attachments)
            || forwarded(msg).is_some_and(|f| has_body(&f.content, &f.attachments)))
}

/// The message a forward carries (Discord puts its body in `message_snapshots`, and not
/// who wrote it), when `msg` is a forward.
fn forwarded(msg: &Message) -> Option<&MessageSnapshot> {
    msg.message_reference
        .as_ref()
        .filter(|r| r.kind == MessageReferenceKind::Forward)?;
    msg.message_snapshots.first()
}

/// Remove a leading `<@id>` / `<@!id>` (or `<@&role>` of the bot's role) and the space after it.
pub(crate) fn strip_leading_mention(text: &str, bot_id: UserId, bot_role: Option<RoleId>) -> &str {
    let trimmed = text.trim_start();
    let mut prefixes = vec![format!("<@{bot_id}>"), format!("<@!{bot_id}>")];
    if let Some(r) = bot_role {
        prefixes.push(format!("<@&{r}>"));
    }
    for p in &prefixes {
        if let Some(rest) = trimmed.strip_prefix(p.as_str()) {
            return rest.trim_start();
        }
    }
    text
}

fn attachment_kind(mime: Option<&str>, voice: bool) -> AttachmentKind {
    let top = mime.and_then(|m| m.split('/').next()).unwrap_or("");
    match top {
        _ if voice => AttachmentKind::Voice,
        "image" => AttachmentKind::Image,
        "audio" => AttachmentKind::Audio,
        "video" => AttachmentKind::Video,
        _ => AttachmentKind::Document,
    }
}

/// Whether `msg` mentions the bot (or its managed role) or replies to one of its messages.
pub(crate) fn addresses_bot(msg: &Message, bot_id: UserId, bot_role: Option<RoleId>) -> bool {
    msg.mentions.iter().any(|u| u.id == bot_id)
        || bot_role.is_some_and(|r| msg.mention_roles.contains(&r))
        || replies_to_bot(msg, bot_id)
}

fn replies_to_bot(msg: &Message, bot_id: UserId) -> bool {
    msg.referenced_message
        .as_ref()
        .is_some_and(|r| r.author.id == bot_id)
}

/// Build the inbound message for a wanted Discord message: `names` for its mentions,
/// `situation` for where it was sent.
pub(crate) fn to_inbound(
    msg: &Message,
    bot_id: UserId,
    bot_role: Option<RoleId>,
    names: &Names,
    situation: &Situation,
) -> InboundMessage {
    let author = &msg.author;
    let display_name = msg
        .member
        .as_ref()
        .and_then(|m| m.nick.clone())
        .or_else(|| author.global_name.clone())
        .unwrap_or_else(|| author.name.clone());
    let sender = Sender {
        id: author.id.to_string(),
        username: Some(author.name.clone()),
        display_name,
        is_owner: false,
    };
    let replied_to_bot = replies_to_bot(msg, bot_id);
    // In a thread the bot takes part in, as a reply to it would.
    let mentions_bot = addresses_bot(msg, bot_id, bot_role) || situation.in_bot_thread;
    let forward = forwarded(msg);
    // Mentions further on (the bot's, other people's, roles, channels) read as names.
    let mut text = mentions::render(strip_leading_mention(&msg.content, bot_id, bot_role), names);
    if let Some(f) = forward.filter(|f| !f.content.trim().is_empty()) {
        let content = mentions::render(&f.content, names);
        text = if text.trim().is_empty() {
            content
        } else {
            format!("{text}\n{content}")
        };
    }
    // The post's question is often in its title alone; a command stays a command.
    if let Some(title) = &situation.forum_title {
        if command_name(&text).is_none() {
            let line = format!("(forum post titled \"{title}\")");
            text = if text.trim().is_empty() {
                line
            } else {
                format!("{line}\n{text}")
            };
        }
    }
    let key = ChatKey::new("discord", msg.channel_id.to_string());
    let mut m = InboundMessage::text(format!("discord:msg:{}", msg.id), key, sender, text);
    m.is_group = msg.guild_id.is_some();
    m.mentions_bot = mentions_bot;
    m.received_at =
        DateTime::<Utc>::from_timestamp(msg.timestamp.unix_timestamp(), 0).unwrap_or_else(Utc::now);
    m.reply_to = msg
        .message_reference
        .as_ref()
        .filter(|_| forward.is_none())
        .and_then(|r| r.message_id)
        .or_else(|| msg.referenced_message.as_ref().map(|r| r.id))
        .map(|id| id.to_string());
    if let Some(r) = &msg.referenced_message {
        m.metadata.insert(
            "reply_to_text".into(),
            mentions::render(&r.content, names).into(),
        );
        m.metadata
            .insert("reply_to_bot".into(), replied_to_bot.into());
    }
    m.metadata
        .insert("message_id".into(), msg.id.to_string().into());
    m.metadata
        .insert("channel_id".into(), msg.channel_id.to_string().into());
    if let Some(g) = msg.guild_id {
        m.metadata.insert("guild_id".into(), g.to_string().into());
    }
    if forward.is_some() {
        m.metadata.insert(FORWARDED_FROM.into(), "".into());
    }
    if let Some(title) = &situation.forum_title {
        m.metadata
            .insert(FORUM_POST_TITLE.into(), title.clone().into());
    }
    let voice = msg
        .flags
        .is_some_and(|f| f.contains(MessageFlags::IS_VOICE_MESSAGE));
    let attached: Vec<Attachment> = msg
        .attachments
        .iter()
        .chain(forward.iter().flat_map(|f| &f.attachments))
        .map(|a| Attachment {
            kind: attachment_kind(a.content_type.as_deref(), voice),
            name: Some(a.filename.clone()),
            mime: a.content_type.clone(),
            location: a.url.clone(),
            size: u64::from(a.size),
        })
        .collect();
    if !attached.is_empty() {
        let pending = crate::files::Pending {
            message: msg.id.to_string(),
            files: attached,
        };
        switchboard_channel::files::leave_pending(&mut m, &pending);
    }
    m.truncate_oversized();
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strips_only_a_leading_bot_mention() {
        let bot = UserId::new(42);
        assert_eq!(strip_leading_mention("<@42> hello", bot, None), "hello");
        assert_eq!(strip_leading_mention("  <@!42>hello", bot, None), "hello");
        assert_eq!(
            strip_leading_mention("<@&7> hi", bot, Some(RoleId::new(7))),
            "hi"
        );
        assert_eq!(
            strip_leading_mention("<@43> hello", bot, None),
            "<@43> hello"
        );
        assert_eq!(strip_leading_mention("hi <@42>", bot, None), "hi <@42>");
    }

    #[test]
    fn attachment_kinds_follow_the_mime_type() {
        assert_eq!(
            attachment_kind(Some("image/png"), false),
            AttachmentKind::Image
        );
        assert_eq!(
            attachment_kind(Some("audio/ogg"), true),
            AttachmentKind::Voice
        );
        assert_eq!(
            attachment_kind(Some("application/pdf"), false),
            AttachmentKind::Document
        );
        assert_eq!(attachment_kind(None, false), AttachmentKind::Document);
    }
}
