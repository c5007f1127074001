//! Telegram update → [`InboundMessage`]: which updates count, the chat key, the sender,
//! whether the bot is addressed, and the cleaned-up text. Pure: files are only listed here
//! ([`FileRef`]) and downloaded by [`crate::media`].

use serde_json::{Value, json};
use switchboard_channel::{AttachmentKind, ChatKey, FORWARDED_FROM, InboundMessage, Sender};
use teloxide::types::{
    FileMeta, Message, MessageEntityKind, MessageEntityRef, MessageOrigin, Update, UpdateKind, User,
};

use crate::intake::COMMANDS;

/// Metadata key of a message's album (`media_group_id`): each photo of an album is its own
/// message, and only one carries the caption.
pub(crate) const ALBUM: &str = "media_group_id";

/// Albums (by chat and `media_group_id`) of which a message addressed the bot: the other
/// photos of such an album, which carry no caption and so no mention, are addressed too (a
/// group that only mentions reach would otherwise get the captioned photo alone). They come
/// in one poll or the next few, so the last [`ALBUMS_KEPT`] albums are kept.
pub(crate) struct AddressedAlbums(switchboard_channel::bounded::Bounded<(String, String), ()>);

const ALBUMS_KEPT: usize = 256;

impl Default for AddressedAlbums {
    fn default() -> Self {
        Self(switchboard_channel::bounded::Bounded::with_cap(ALBUMS_KEPT))
    }
}

impl AddressedAlbums {
    /// Note the albums `batch` addresses, then mark the rest of their photos addressed.
    pub(crate) fn apply(&mut self, batch: &mut [InboundMessage]) {
        let album = |m: &InboundMessage| {
            let id = m.metadata.get(ALBUM)?.as_str()?;
            Some((m.key.to_string(), id.to_string()))
        };
        for m in batch.iter().filter(|m| m.mentions_bot) {
            if let Some(a) = album(m) {
                self.0.insert(a, ());
            }
        }
        for m in batch.iter_mut().filter(|m| !m.mentions_bot) {
            if album(m).is_some_and(|a| self.0.contains(&a)) {
                m.mentions_bot = true;
            }
        }
    }
}

/// The move an update reports, as `(old, new)` chat keys: a group became a supergroup with a
/// new id (the old group gets a service message naming the new id, the new one a message
/// naming the old).
pub(crate) fn migration(update: &Update) -> Option<(ChatKey, ChatKey)> {
    let UpdateKind::Message(m) = &update.kind else {
        return None;
    };
    let key = |id: i64| ChatKey::new("telegram", id.to_string());
    if let Some(to) = m.migrate_to_chat_id() {
        Some((key(m.chat.id.0), key(to.0)))
    } else {
        m.migrate_from_chat_id()
            .map(|from| (key(from.0), key(m.chat.id.0)))
    }
}

/// Who the bot is, from `getMe`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BotIdentity {
    pub id: u64,
    /// Username without `@`.
    pub username: String,
}

/// A file attached to a message, still on Telegram's side.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct FileRef {
    pub kind: AttachmentKind,
    pub file_id: String,
    pub unique_id: String,
    /// Size Telegram announced (0 when unknown).
    pub size: u64,
    pub name: Option<String>,
    pub mime: Option<String>,
}

/// A message to publish, with the files still to download.
#[derive(Debug, Clone)]
pub(crate) struct Mapped {
    pub msg: InboundMessage,
    pub files: Vec<FileRef>,
}

/// Map one update, or `None` when it is skipped on purpose: anything but a new message
/// (edits, channel posts, callback queries, member updates, unknown kinds), messages from
/// bots (this one included), a linked channel's posts copied into its group, commands for
/// another bot, and messages with neither text, nor a supported file, nor a location,
/// venue or contact (stickers, dice, polls, games, service messages).
pub(crate) fn map_update(update: &Update, me: &BotIdentity) -> Option<Mapped> {
    let UpdateKind::Message(m) = &update.kind else {
        return None;
    };
    // A linked channel's post copied into its discussion group is the channel's, not a
    // person's message to the bot.
    if m.chat.is_channel() || from_a_bot(m, me) || m.is_automatic_forward() {
        return None;
    }
    let files = files_of(m);
    let shared = shared_place_or_contact(m);
    let raw_text = m.text().or(m.caption()).unwrap_or_default();
    let entities = m
        .parse_entities()
        .or_else(|| m.parse_caption_entities())
        .unwrap_or_default();
    // A forwarded message is someone else's words, never a command.
    let command = leading_command(&entities).filter(|_| m.forward_origin().is_none());
    let in_group = !m.chat.is_private();
    if raw_text.trim().is_empty() && files.is_empty() && shared.is_none()
        || in_group && command.is_some_and(|c| c.bot.is_some_and(|b| !is_bot_name(b, me)))
    {
        return None;
    }
    let sender = sender_of(m)?;

    let chat_id = m.chat.id.0;
    let topic = m.thread_id.filter(|_| m.is_topic_message);
    let key = match topic {
        Some(t) => ChatKey::new("telegram", format!("{chat_id}:topic:{}", t.0.0)),
        None => ChatKey::new("telegram", chat_id.to_string()),
    };
    // In a forum topic every message "replies" to the topic's creation message: not a reply.
    let reply = m
        .reply_to_message()
        .filter(|r| topic.is_none_or(|t| r.id != t.0));
    let replies_to_bot = reply
        .and_then(|r| r.from.as_ref())
        .is_some_and(|u| u.id.0 == me.id);
    // A bare `/help` in a group is for every bot there (Telegram delivers it to each, even
    // in privacy mode, and its command menu sends it so when the group has one bot). A bare
    // `/stop` is ours only while our turn runs there, which the gateway knows.
    let our_command = command.is_some_and(|c| {
        c.bot.is_none()
            && !c.name.eq_ignore_ascii_case("stop")
            && COMMANDS.iter().any(|(n, _)| n.eq_ignore_ascii_case(c.name))
    });
    let mentions_bot =
        replies_to_bot || our_command || entities.iter().any(|e| addresses_bot(e, me));

    let mut text = normalise_command(&strip_leading_mention(raw_text, &entities, me), me);
    if let Some(shared) = shared {
        text = if text.is_empty() {
            shared
        } else {
            format!("{text}\n{shared}")
        };
    }
    let mut msg = InboundMessage::text(
        format!("telegram:update:{}", update.id.0),
        key,
        sender,
        text,
    );
    msg.is_group = m.chat.is_group() || m.chat.is_supergroup();
    msg.mentions_bot = mentions_bot;
    let meta = &mut msg.metadata;
    meta.insert("message_id".into(), json!(m.id.0.to_string()));
    meta.insert("chat_type".into(), json!(chat_type(m)));
    if let Some(title) = m.chat.title() {
        meta.insert("chat_title".into(), json!(title));
    }
    if let Some(t) = topic {
        meta.insert("thread_id".into(), json!(t.0.0.to_string()));
    }
    if let Some(origin) = m.forward_origin() {
        meta.insert(FORWARDED_FROM.into(), json!(forwarded_from(origin)));
    }
    if let Some(album) = m.media_group_id() {
        meta.insert(ALBUM.into(), json!(album.0));
    }
    if let Some(r) = reply {
        msg.reply_to = Some(r.id.0.to_string());
        if let Some(t) = r.text().or(r.caption()) {
            meta.insert("reply_to_text".into(), Value::String(t.to_string()));
        }
    }
    Some(Mapped { msg, files })
}

/// Who wrote a forwarded message first, in words: a person's name (and `@username`), the
/// name a person hides behind, or a group's or channel's title.
fn forwarded_from(origin: &MessageOrigin) -> String {
    match origin {
        MessageOrigin::User { sender_user, .. } => {
            let name = user_sender(sender_user).display_name;
            match &sender_user.username {
                Some(u) => format!("{name} (@{u})"),
                None => name,
            }
        }
        MessageOrigin::HiddenUser {
            sender_user_name, ..
        } => sender_user_name.clone(),
        MessageOrigin::Chat { sender_chat: c, .. } | MessageOrigin::Channel { chat: c, .. } => {
            c.title().unwrap_or_default().to_string()
        }
    }
}

/// Whether a bot wrote the message, so that bots never answer each other in a loop. The
/// stand-ins Telegram names as `from` for anonymous admins and linked channels are bots
/// too, but a person is behind them (`sender_chat` says who): those count.
fn from_a_bot(m: &Message, me: &BotIdentity) -> bool {
    m.from.as_ref().is_some_and(|u| {
        u.id.0 == me.id
            || (u.is_bot && !(m.sender_chat.is_some() && (u.is_anonymous() || u.is_channel())))
    })
}

fn chat_type(m: &Message) -> &'static str {
    let c = &m.chat;
    if c.is_private() {
        "private"
    } else if c.is_supergroup() {
        "supergroup"
    } else if c.is_group() {
        "group"
    } else {
        "channel"
    }
}

/// The person that sent the message, or the chat it was sent on behalf of: an anonymous
/// admin writes as the group, a channel's posts (and what is sent as the channel) as the
/// channel. Telegram then names a stand-in bot as `from` (`GroupAnonymousBot`,
/// `Channel_Bot`), the same for every group and channel: taken as the sender, all of them
/// would be one person.
fn sender_of(m: &Message) -> Option<Sender> {
    if let (Some(u), None) = (&m.from, &m.sender_chat) {
        return Some(user_sender(u));
    }
    let Some(c) = m.sender_chat.as_ref() else {
        return m.from.as_ref().map(user_sender);
    };
    Some(Sender {
        id: c.id.0.to_string(),
        username: c.username().map(str::to_string),
        display_name: c.title().unwrap_or_default().to_string(),
        is_owner: false,
    })
}

fn user_sender(u: &User) -> Sender {
    let display_name = match &u.last_name {
        Some(l) if !l.is_empty() => format!("{} {l}", u.first_name),
        _ => u.first_name.clone(),
    };
    Sender {
        id: u.id.0.to_string(),
        username: u.username.clone(),
        display_name,
        is_owner: false,
    }
}

/// Whether an entity addresses the bot: `@username`, a `text_mention` of its id, or a
/// `/command@username`.
fn addresses_bot(e: &MessageEntityRef<'_>, me: &BotIdentity) -> bool {
    match e.kind() {
        MessageEntityKind::Mention => is_bot_name(e.text().trim_start_matches('@'), me),
        MessageEntityKind::TextMention { user } => user.id.0 == me.id,
        MessageEntityKind::BotCommand => e
            .text()
            .split_once('@')
            .is_some_and(|(_, name)| is_bot_name(name, me)),
        _ => false,
    }
}

fn is_bot_name(name: &str, me: &BotIdentity) -> bool {
    !me.username.is_empty() && name.eq_ignore_ascii_case(&me.username)
}

/// Drop a mention of the bot at the very start ("@bot, what's up" → "what's up").
fn strip_leading_mention(
    text: &str,
    entities: &[MessageEntityRef<'_>],
    me: &BotIdentity,
) -> String {
    let lead = text.len() - text.trim_start().len();
    let leading = entities.iter().find(|e| {
        e.start() == lead
            && matches!(
                e.kind(),
                MessageEntityKind::Mention | MessageEntityKind::TextMention { .. }
            )
            && addresses_bot(e, me)
    });
    match leading {
        Some(e) => text[e.end()..]
            .trim_start_matches(|c: char| c.is_whitespace() || c == ',' || c == ':')
            .to_string(),
        None => text.to_string(),
    }
}

/// A bot command that starts a message, as Telegram marked it (a `bot_command` entity at
/// offset 0: `/home/alice@laptop` is not one): `/Name@bot` → name `name`, bot `bot`.
#[derive(Debug, Clone, Copy)]
struct Command<'a> {
    name: &'a str,
    bot: Option<&'a str>,
}

fn leading_command<'a>(entities: &'a [MessageEntityRef<'_>]) -> Option<Command<'a>> {
    let e = entities
        .iter()
        .find(|e| e.start() == 0 && matches!(e.kind(), MessageEntityKind::BotCommand))?;
    let word = e.text().strip_prefix('/')?;
    let (name, bot) = match word.split_once('@') {
        Some((name, bot)) => (name, Some(bot)),
        None => (word, None),
    };
    Some(Command { name, bot })
}

/// `/cmd@botname args` → `/cmd args`.
fn normalise_command(text: &str, me: &BotIdentity) -> String {
    if !text.starts_with('/') {
        return text.to_string();
    }
    let end = text.find(char::is_whitespace).unwrap_or(text.len());
    match text[..end].split_once('@') {
        Some((cmd, name)) if is_bot_name(name, me) => format!("{cmd}{}", &text[end..]),
        _ => text.to_string(),
    }
}

/// A shared location, venue or contact, in words for the model (a live location's later
/// positions come as edits, which are not passed on).
fn shared_place_or_contact(m: &Message) -> Option<String> {
    let at = |l: &teloxide::types::Location| format!("{:.6}, {:.6}", l.latitude, l.longitude);
    if let Some(v) = m.venue() {
        return Some(format!(
            "[venue: {}, {} ({})]",
            v.title,
            v.address,
            at(&v.location)
        ));
    }
    if let Some(l) = m.location() {
        let live = if l.live_period.is_some() { "live " } else { "" };
        return Some(format!("[{live}location: {}]", at(l)));
    }
    m.contact().map(|c| {
        let name = match &c.last_name {
            Some(last) => format!("{} {last}", c.first_name),
            None => c.first_name.clone(),
        };
        format!("[contact: {name}, {}]", c.phone_number)
    })
}

/// Photos (largest size), documents, voice notes, audio files, videos, round video notes
/// and animations (GIFs, sent as MP4) of a message.
fn files_of(m: &Message) -> Vec<FileRef> {
    let file = |kind, meta: &FileMeta, name: Option<&String>, mime: Option<String>| FileRef {
        kind,
        file_id: meta.id.0.clone(),
        unique_id: meta.unique_id.0.clone(),
        size: u64::from(meta.size),
        name: name.cloned(),
        mime,
    };
    let mut out = Vec::new();
    if let Some(p) = m.photo().and_then(|sizes| {
        sizes
            .iter()
            .max_by_key(|s| (u64::from(s.width) * u64::from(s.height), s.file.size))
    }) {
        out.push(file(
            AttachmentKind::Image,
            &p.file,
            None,
            Some("image/jpeg".into()),
        ));
    }
    if let Some(d) = m.document() {
        let mime = d.mime_type.as_ref().map(|m| m.to_string());
        out.push(file(
            AttachmentKind::Document,
            &d.file,
            d.file_name.as_ref(),
            mime,
        ));
    }
    if let Some(v) = m.voice() {
        let mime = v.mime_type.as_ref().map(|m| m.to_string());
        out.push(file(AttachmentKind::Voice, &v.file, None, mime));
    }
    if let Some(a) = m.audio() {
        let mime = a.mime_type.as_ref().map(|m| m.to_string());
        out.push(file(
            AttachmentKind::Audio,
            &a.file,
            a.file_name.as_ref(),
            mime,
        ));
    }
    if let Some(v) = m.video() {
        let mime = v.mime_type.as_ref().map(|m| m.to_string());
        out.push(file(
            AttachmentKind::Video,
            &v.file,
            v.file_name.as_ref(),
            mime,
        ));
    }
    if let Some(v) = m.video_note() {
        let mime = Some("video/mp4".to_string());
        out.push(file(AttachmentKind::Video, &v.file, None, mime));
    }
    if let Some(a) = m.animation() {
        let mime = a.mime_type.as_ref().map(|m| m.to_string());
        out.push(file(
            AttachmentKind::Video,
            &a.file,
            a.file_name.as_ref(),
            mime,
        ));
    }
    out
}

#[cfg(test)]
mod tests;
