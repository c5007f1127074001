//! Builders for the updates tests push into [`FakeTelegram`]: the JSON Telegram sends.
//!
//! Each returns the update without `update_id`, `message_id` or `date`;
//! [`FakeTelegram::push_update`] fills them in. Offsets of entities are UTF-16 code units,
//! as in the real Bot API.

use serde_json::{Value, json};

use super::{FakeFile, FakeTelegram};

/// A Telegram user who writes to the bot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TgUser {
    pub id: i64,
    pub first_name: String,
    pub last_name: Option<String>,
    pub username: Option<String>,
}

impl TgUser {
    /// A user with this id and username; the first name is the username.
    pub fn new(id: i64, username: &str) -> Self {
        Self {
            id,
            first_name: username.to_string(),
            last_name: None,
            username: Some(username.to_string()),
        }
    }

    /// Set first and last name.
    pub fn named(mut self, first: &str, last: Option<&str>) -> Self {
        self.first_name = first.to_string();
        self.last_name = last.map(str::to_string);
        self
    }

    /// The `User` object.
    pub fn json(&self) -> Value {
        let mut u = json!({"id": self.id, "is_bot": false, "first_name": self.first_name});
        if let Some(obj) = u.as_object_mut() {
            if let Some(l) = &self.last_name {
                obj.insert("last_name".into(), json!(l));
            }
            if let Some(n) = &self.username {
                obj.insert("username".into(), json!(n));
            }
        }
        u
    }
}

fn utf16_len(s: &str) -> usize {
    s.encode_utf16().count()
}

fn private_chat(user: &TgUser) -> Value {
    let mut c = user.json();
    if let Some(obj) = c.as_object_mut() {
        obj.remove("is_bot");
        obj.insert("type".into(), json!("private"));
    }
    c
}

fn group_chat(chat_id: i64) -> Value {
    json!({"id": chat_id, "type": "supergroup", "title": "Test group"})
}

fn message(chat: Value, user: &TgUser, text: &str) -> Value {
    json!({"chat": chat, "from": user.json(), "text": text})
}

fn with(mut v: Value, key: &str, value: Value) -> Value {
    if let Some(obj) = v.as_object_mut() {
        obj.insert(key.into(), value);
    }
    v
}

impl FakeTelegram {
    /// A private-chat text message from `user`.
    pub fn dm_text(&self, user: &TgUser, text: &str) -> Value {
        json!({"message": message(private_chat(user), user, text)})
    }

    /// A plain group text message (no mention).
    pub fn group_text(&self, chat_id: i64, user: &TgUser, text: &str) -> Value {
        json!({"message": message(group_chat(chat_id), user, text)})
    }

    /// A group message starting with `@botname ` as a `mention` entity.
    pub fn group_mention(&self, chat_id: i64, user: &TgUser, text: &str) -> Value {
        let mention = format!("@{}", self.bot_username());
        let full = format!("{mention} {text}");
        let m = message(group_chat(chat_id), user, &full);
        let entities = json!([{"type": "mention", "offset": 0, "length": utf16_len(&mention)}]);
        json!({"message": with(m, "entities", entities)})
    }

    /// A group message whose first word is a `text_mention` of the bot (no username).
    pub fn group_text_mention(&self, chat_id: i64, user: &TgUser, text: &str) -> Value {
        let name = "Switchboard";
        let full = format!("{name} {text}");
        let m = message(group_chat(chat_id), user, &full);
        let bot = json!({"id": self.bot_id(), "is_bot": true, "first_name": name});
        let entities =
            json!([{"type": "text_mention", "offset": 0, "length": utf16_len(name), "user": bot}]);
        json!({"message": with(m, "entities", entities)})
    }

    /// A group message replying to the bot's message `bot_message_id` (which said `bot_text`).
    pub fn group_reply_to_bot(
        &self,
        chat_id: i64,
        user: &TgUser,
        text: &str,
        bot_message_id: i64,
        bot_text: &str,
    ) -> Value {
        let bot = json!({"id": self.bot_id(), "is_bot": true, "first_name": "Switchboard",
                         "username": self.bot_username()});
        let replied = json!({"message_id": bot_message_id, "date": 1_700_000_000,
                             "chat": group_chat(chat_id), "from": bot, "text": bot_text});
        let m = message(group_chat(chat_id), user, text);
        json!({"message": with(m, "reply_to_message", replied)})
    }

    /// A message in forum topic `thread_id` of supergroup `chat_id`. Like the real API, it
    /// "replies" to the topic's creation message.
    pub fn topic_text(&self, chat_id: i64, thread_id: i64, user: &TgUser, text: &str) -> Value {
        let chat = json!({"id": chat_id, "type": "supergroup", "title": "Forum", "is_forum": true});
        let root = json!({"message_id": thread_id, "date": 1_700_000_000, "chat": chat,
                          "from": user.json(), "message_thread_id": thread_id,
                          "is_topic_message": true,
                          "forum_topic_created": {"name": "Topic", "icon_color": 7322096}});
        let mut m = message(chat, user, text);
        if let Some(obj) = m.as_object_mut() {
            obj.insert("message_thread_id".into(), json!(thread_id));
            obj.insert("is_topic_message".into(), json!(true));
            obj.insert("reply_to_message".into(), root);
        }
        json!({"message": m})
    }

    /// A photo (a small thumbnail size that is not served, then `file` as the largest size)
    /// in chat `chat_id` (positive: the user's DM), with an optional caption.
    pub fn photo(
        &self,
        chat_id: i64,
        user: &TgUser,
        file: &FakeFile,
        caption: Option<&str>,
    ) -> Value {
        let chat = if chat_id > 0 {
            private_chat(user)
        } else {
            group_chat(chat_id)
        };
        let sizes = json!([
            {"file_id": "THUMB-not-served", "file_unique_id": "thumb", "width": 90, "height": 60, "file_size": 10},
            {"file_id": file.file_id, "file_unique_id": file.file_unique_id,
             "width": 1280, "height": 960, "file_size": file.size},
        ]);
        let mut m = json!({"chat": chat, "from": user.json(), "photo": sizes});
        if let (Some(c), Some(obj)) = (caption, m.as_object_mut()) {
            obj.insert("caption".into(), json!(c));
        }
        json!({"message": m})
    }

    /// A document with a file name and MIME type, with an optional caption.
    pub fn document(
        &self,
        chat_id: i64,
        user: &TgUser,
        file: &FakeFile,
        file_name: &str,
        mime: &str,
        caption: Option<&str>,
    ) -> Value {
        let chat = if chat_id > 0 {
            private_chat(user)
        } else {
            group_chat(chat_id)
        };
        let doc = json!({"file_id": file.file_id, "file_unique_id": file.file_unique_id,
                         "file_name": file_name, "mime_type": mime, "file_size": file.size});
        let mut m = json!({"chat": chat, "from": user.json(), "document": doc});
        if let (Some(c), Some(obj)) = (caption, m.as_object_mut()) {
            obj.insert("caption".into(), json!(c));
        }
        json!({"message": m})
    }

    /// A voice note in the user's DM.
    pub fn voice(&self, user: &TgUser, file: &FakeFile) -> Value {
        let v = json!({"file_id": file.file_id, "file_unique_id": file.file_unique_id,
                       "duration": 3, "mime_type": "audio/ogg", "file_size": file.size});
        json!({"message": {"chat": private_chat(user), "from": user.json(), "voice": v}})
    }

    /// A DM caption mentioning the bot on a photo in a group.
    pub fn group_photo_mention(
        &self,
        chat_id: i64,
        user: &TgUser,
        file: &FakeFile,
        text: &str,
    ) -> Value {
        let mention = format!("@{}", self.bot_username());
        let caption = format!("{mention} {text}");
        let mut u = self.photo(chat_id, user, file, Some(&caption));
        if let Some(m) = u.get_mut("message").and_then(Value::as_object_mut) {
            m.insert(
                "caption_entities".into(),
                json!([{"type": "mention", "offset": 0, "length": utf16_len(&mention)}]),
            );
        }
        u
    }

    /// An edited message (the adapter skips edits).
    pub fn edited_message(&self, user: &TgUser, text: &str) -> Value {
        let mut m = message(private_chat(user), user, text);
        if let Some(obj) = m.as_object_mut() {
            obj.insert("edit_date".into(), json!(1_700_000_100));
        }
        json!({"edited_message": m})
    }

    /// A sticker-only message.
    pub fn sticker(&self, user: &TgUser) -> Value {
        let s = json!({"file_id": "STICKER", "file_unique_id": "st", "type": "regular",
                       "width": 512, "height": 512, "is_animated": false, "is_video": false});
        json!({"message": {"chat": private_chat(user), "from": user.json(), "sticker": s}})
    }

    /// A post in a channel.
    pub fn channel_post(&self, chat_id: i64, text: &str) -> Value {
        json!({"channel_post": {"chat": {"id": chat_id, "type": "channel", "title": "News"},
                                "text": text}})
    }

    /// An inline-keyboard button press.
    pub fn callback_query(&self, user: &TgUser, data: &str) -> Value {
        json!({"callback_query": {"id": "cbq1", "from": user.json(),
                                  "chat_instance": "ci1", "data": data}})
    }

    /// The bot was added to a group.
    pub fn my_chat_member(&self, chat_id: i64, user: &TgUser) -> Value {
        let bot = json!({"id": self.bot_id(), "is_bot": true, "first_name": "Switchboard",
                         "username": self.bot_username()});
        json!({"my_chat_member": {
            "chat": group_chat(chat_id), "from": user.json(), "date": 1_700_000_000,
            "old_chat_member": {"status": "left", "user": bot},
            "new_chat_member": {"status": "member", "user": bot}}})
    }
}
