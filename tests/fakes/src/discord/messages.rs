//! Message objects as Discord sends them: authors, MESSAGE_CREATE payloads to dispatch,
//! attachments and full message JSON.

use serde_json::{Value, json};

use super::{BOT_USER_ID, BOT_USERNAME, GUILD_ID};

/// Someone who writes a message.
#[derive(Debug, Clone, PartialEq)]
pub struct Author {
    pub id: u64,
    pub username: String,
    pub global_name: Option<String>,
    pub bot: bool,
}

impl Author {
    /// A human user.
    pub fn user(id: u64, username: &str) -> Self {
        Self {
            id,
            username: username.to_string(),
            global_name: None,
            bot: false,
        }
    }

    /// Another bot.
    pub fn bot(id: u64, username: &str) -> Self {
        Self {
            id,
            username: username.to_string(),
            global_name: None,
            bot: true,
        }
    }

    /// The fake's own bot user.
    pub fn this_bot() -> Self {
        Self::bot(BOT_USER_ID, BOT_USERNAME)
    }

    /// Set the global (display) name.
    pub fn with_global_name(mut self, name: &str) -> Self {
        self.global_name = Some(name.to_string());
        self
    }

    /// The user object Discord sends.
    pub fn to_json(&self) -> Value {
        json!({
            "id": self.id.to_string(),
            "username": self.username,
            "discriminator": "0",
            "global_name": self.global_name,
            "avatar": null,
            "bot": self.bot,
        })
    }
}

/// A MESSAGE_CREATE to dispatch; build it with the constructors, adjust fields freely.
#[derive(Debug, Clone)]
pub struct IncomingMessage {
    pub channel_id: u64,
    /// `Some` for a guild (server) message, `None` for a DM.
    pub guild_id: Option<u64>,
    pub author: Author,
    pub content: String,
    /// Users mentioned (sent as full user objects in `mentions`).
    pub mentions: Vec<Author>,
    pub mention_roles: Vec<u64>,
    /// The message this one replies to: (id, author, content).
    pub reply_to: Option<(u64, Author, String)>,
    /// Raw attachment objects (see [`attachment`]).
    pub attachments: Vec<Value>,
    /// A forward: the forwarded message's content and attachments, sent as Discord does (a
    /// `message_reference` of type 1 and `message_snapshots`, this message's own content
    /// empty, and nothing of who wrote it).
    pub forwarded: Option<(String, Vec<Value>)>,
}

impl IncomingMessage {
    /// A guild message without any mention.
    pub fn guild(channel_id: u64, author: Author, content: &str) -> Self {
        Self {
            channel_id,
            guild_id: Some(GUILD_ID),
            author,
            content: content.to_string(),
            mentions: Vec::new(),
            mention_roles: Vec::new(),
            reply_to: None,
            attachments: Vec::new(),
            forwarded: None,
        }
    }

    /// A direct message forwarding a message that said `text` (see [`Self::forwarded`]).
    pub fn dm_forward(channel_id: u64, author: Author, text: &str) -> Self {
        let mut m = Self::dm(channel_id, author, "");
        m.forwarded = Some((text.to_string(), Vec::new()));
        m
    }

    /// A guild message starting with `<@BOT_USER_ID>` and listing the bot in `mentions`.
    pub fn guild_mention(channel_id: u64, author: Author, text: &str) -> Self {
        let mut m = Self::guild(channel_id, author, &format!("<@{BOT_USER_ID}> {text}"));
        m.mentions.push(Author::this_bot());
        m
    }

    /// A direct message.
    pub fn dm(channel_id: u64, author: Author, content: &str) -> Self {
        let mut m = Self::guild(channel_id, author, content);
        m.guild_id = None;
        m
    }

    /// A guild message replying to the bot's message `bot_message_id`.
    pub fn reply_to_bot(
        channel_id: u64,
        author: Author,
        content: &str,
        bot_message_id: u64,
    ) -> Self {
        let mut m = Self::guild(channel_id, author, content);
        m.reply_to = Some((
            bot_message_id,
            Author::this_bot(),
            "earlier answer".to_string(),
        ));
        m
    }
}

/// An attachment object as Discord sends it.
pub fn attachment(id: u64, filename: &str, size: u64, content_type: Option<&str>) -> Value {
    let url = format!("https://cdn.discordapp.com/attachments/1/{id}/{filename}");
    json!({
        "id": id.to_string(),
        "filename": filename,
        "size": size,
        "url": url,
        "proxy_url": url,
        "content_type": content_type,
    })
}

/// A full Discord message object (serenity's `Message` parses it).
pub fn message_json(
    id: u64,
    channel_id: u64,
    guild_id: Option<u64>,
    author: &Author,
    content: &str,
    extra: impl FnOnce(&mut serde_json::Map<String, Value>),
) -> Value {
    let mut m = serde_json::Map::new();
    m.insert("id".into(), json!(id.to_string()));
    m.insert("channel_id".into(), json!(channel_id.to_string()));
    if let Some(g) = guild_id {
        m.insert("guild_id".into(), json!(g.to_string()));
    }
    m.insert("author".into(), author.to_json());
    m.insert("content".into(), json!(content));
    m.insert(
        "timestamp".into(),
        json!("2025-01-01T00:00:00.000000+00:00"),
    );
    m.insert("edited_timestamp".into(), Value::Null);
    m.insert("tts".into(), json!(false));
    m.insert("mention_everyone".into(), json!(false));
    m.insert("mentions".into(), json!([]));
    m.insert("mention_roles".into(), json!([]));
    m.insert("attachments".into(), json!([]));
    m.insert("embeds".into(), json!([]));
    m.insert("pinned".into(), json!(false));
    m.insert("type".into(), json!(0));
    extra(&mut m);
    Value::Object(m)
}
