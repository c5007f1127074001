//! The fake's channels beyond plain text ones, as Discord's REST API and gateway show them:
//! threads (public and private) and forum channels with their posts, DM channels opened with
//! `POST /users/@me/channels`, ids that are users or nothing at all (a post there is
//! `404 Unknown Channel`, code 10003), and channels where the bot lacks a permission (a post
//! is `403 Missing Permissions`, 50013, or `403 Missing Access`, 50001).
//!
//! An id registered as none of these stays what it always was here: a text channel of
//! [`GUILD_ID`] that takes any post.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State as AxState};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::rest::check_auth;
use super::{Author, BOT_USER_ID, FakeDiscord, GUILD_ID, IncomingMessage, Shared};

/// A channel's type, as Discord numbers them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChannelKind {
    /// 0
    Text,
    /// 11
    PublicThread,
    /// 12
    PrivateThread,
    /// 15
    Forum,
}

impl ChannelKind {
    fn number(self) -> u8 {
        match self {
            ChannelKind::Text => 0,
            ChannelKind::PublicThread => 11,
            ChannelKind::PrivateThread => 12,
            ChannelKind::Forum => 15,
        }
    }

    fn is_thread(self) -> bool {
        matches!(self, ChannelKind::PublicThread | ChannelKind::PrivateThread)
    }
}

/// A guild channel to register with [`FakeDiscord::add_channel`].
#[derive(Debug, Clone)]
pub struct FakeChannel {
    pub id: u64,
    pub kind: ChannelKind,
    pub name: String,
    /// The channel a thread is in (a text or forum channel).
    pub parent_id: Option<u64>,
}

impl FakeChannel {
    /// A text channel.
    pub fn text(id: u64, name: &str) -> Self {
        Self {
            id,
            kind: ChannelKind::Text,
            name: name.into(),
            parent_id: None,
        }
    }

    /// A forum channel.
    pub fn forum(id: u64, name: &str) -> Self {
        Self {
            kind: ChannelKind::Forum,
            ..Self::text(id, name)
        }
    }

    /// A public thread in `parent`.
    pub fn thread(id: u64, parent: u64, name: &str) -> Self {
        Self {
            id,
            kind: ChannelKind::PublicThread,
            name: name.into(),
            parent_id: Some(parent),
        }
    }

    /// A private thread in `parent` (the bot has been added to it).
    pub fn private_thread(id: u64, parent: u64, name: &str) -> Self {
        Self {
            kind: ChannelKind::PrivateThread,
            ..Self::thread(id, parent, name)
        }
    }

    /// The channel object, as `GET /channels/{id}` and the gateway send it.
    pub fn to_json(&self) -> Value {
        let mut c = json!({
            "id": self.id.to_string(),
            "type": self.kind.number(),
            "guild_id": GUILD_ID.to_string(),
            "name": self.name,
            "parent_id": self.parent_id.map(|p| p.to_string()),
            "nsfw": false,
            "flags": 0,
            "last_message_id": null,
            "rate_limit_per_user": 0,
        });
        if self.kind.is_thread() {
            c["owner_id"] = json!("42");
            c["message_count"] = json!(0);
            c["member_count"] = json!(1);
            c["total_message_sent"] = json!(0);
            c["thread_metadata"] = json!({
                "archived": false, "auto_archive_duration": 1440,
                "archive_timestamp": "2025-01-01T00:00:00.000000+00:00", "locked": false,
                "create_timestamp": "2025-01-01T00:00:00.000000+00:00",
                "invitable": self.kind == ChannelKind::PrivateThread,
            });
        } else {
            c["position"] = json!(0);
            c["permission_overwrites"] = json!([]);
            c["topic"] = Value::Null;
        }
        if self.kind == ChannelKind::Forum {
            c["available_tags"] = json!([]);
            c["default_sort_order"] = Value::Null;
            c["default_forum_layout"] = json!(0);
        }
        c
    }
}

/// A permission the bot lacks in a channel ([`FakeDiscord::deny`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Denial {
    /// 403, code 50013: it sees the channel but may not post (Send Messages, or Send
    /// Messages in Threads in a thread).
    MissingPermissions,
    /// 403, code 50001: it cannot see the channel (View Channel; a private thread it was
    /// not added to).
    MissingAccess,
}

/// A message post (or typing call) Discord refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub channel_id: u64,
    pub status: u16,
    /// Discord's JSON error code.
    pub code: u64,
}

/// What the fake knows of channels and users beyond plain text channels.
#[derive(Default)]
pub(crate) struct Channels {
    known: HashMap<u64, FakeChannel>,
    users: HashMap<u64, Author>,
    missing: HashSet<u64>,
    /// The DM channel opened with each user.
    dms: HashMap<u64, u64>,
    dm_opens: Vec<u64>,
    denied: HashMap<u64, Denial>,
    reads: Vec<u64>,
    refused: Vec<Refusal>,
}

impl Channels {
    /// Threads registered, as GUILD_CREATE lists the active ones.
    pub(crate) fn threads_json(&self) -> Vec<Value> {
        self.known
            .values()
            .filter(|c| c.kind.is_thread())
            .map(FakeChannel::to_json)
            .collect()
    }

    /// Other channels registered (forums, text channels).
    pub(crate) fn channels_json(&self) -> Vec<Value> {
        self.known
            .values()
            .filter(|c| !c.kind.is_thread())
            .map(FakeChannel::to_json)
            .collect()
    }

    /// The error a message post or typing call in `channel_id` gets, if any (recorded).
    pub(crate) fn refusal(&mut self, channel_id: u64) -> Option<Response> {
        let (status, code, message) = if self.is_not_a_channel(channel_id) {
            (StatusCode::NOT_FOUND, 10003, "Unknown Channel")
        } else {
            match self.denied.get(&channel_id)? {
                Denial::MissingPermissions => (StatusCode::FORBIDDEN, 50013, "Missing Permissions"),
                Denial::MissingAccess => (StatusCode::FORBIDDEN, 50001, "Missing Access"),
            }
        };
        self.refused.push(Refusal {
            channel_id,
            status: status.as_u16(),
            code,
        });
        Some((status, Json(json!({"message": message, "code": code}))).into_response())
    }

    fn is_not_a_channel(&self, id: u64) -> bool {
        self.missing.contains(&id) || self.users.contains_key(&id)
    }
}

/// `GET /channels/{id}`: a registered channel, a DM channel, 404 for a user id or a missing
/// one, 403 where the bot cannot see it; any other id is a text channel.
pub(crate) async fn get_channel(
    AxState(shared): AxState<Arc<Shared>>,
    headers: HeaderMap,
    Path(id): Path<u64>,
) -> Response {
    if let Some(r) = check_auth(&shared, &headers) {
        return r;
    }
    let mut st = shared.lock();
    st.channels.reads.push(id);
    let ch = &st.channels;
    let found = if ch.is_not_a_channel(id) {
        Err((StatusCode::NOT_FOUND, 10003, "Unknown Channel"))
    } else if ch.denied.get(&id) == Some(&Denial::MissingAccess) {
        Err((StatusCode::FORBIDDEN, 50001, "Missing Access"))
    } else if let Some(c) = ch.known.get(&id) {
        Ok(c.to_json())
    } else if let Some((user, _)) = ch.dms.iter().find(|(_, dm)| **dm == id) {
        Ok(dm_json(id, ch.users.get(user)))
    } else {
        Ok(FakeChannel::text(id, &format!("channel-{id}")).to_json())
    };
    drop(st);
    shared.bump();
    match found {
        Ok(c) => Json(c).into_response(),
        Err((status, code, message)) => {
            (status, Json(json!({"message": message, "code": code}))).into_response()
        }
    }
}

fn dm_json(id: u64, user: Option<&Author>) -> Value {
    json!({
        "id": id.to_string(),
        "type": 1,
        "last_message_id": null,
        "flags": 0,
        "recipients": user.map(|u| vec![u.to_json()]).unwrap_or_default(),
    })
}

/// `POST /users/@me/channels {"recipient_id"}`: the DM channel with a known user (the same
/// one every time), else `400 Invalid Recipient(s)` (code 50033).
pub(crate) async fn open_dm(
    AxState(shared): AxState<Arc<Shared>>,
    headers: HeaderMap,
    body: Option<Json<Value>>,
) -> Response {
    if let Some(r) = check_auth(&shared, &headers) {
        return r;
    }
    let recipient = body.and_then(|Json(b)| {
        b["recipient_id"]
            .as_str()
            .and_then(|s| s.parse::<u64>().ok())
    });
    let mut st = shared.lock();
    let Some(user) = recipient else {
        return (
            StatusCode::BAD_REQUEST,
            Json(json!({"message": "Invalid Form Body", "code": 50035})),
        )
            .into_response();
    };
    st.channels.dm_opens.push(user);
    let opened = match st.channels.users.get(&user).cloned() {
        Some(author) => {
            let id = match st.channels.dms.get(&user) {
                Some(id) => *id,
                None => {
                    let id = st.new_id();
                    st.channels.dms.insert(user, id);
                    id
                }
            };
            Some(dm_json(id, Some(&author)))
        }
        None => None,
    };
    drop(st);
    shared.bump();
    match opened {
        Some(dm) => Json(dm).into_response(),
        None => (
            StatusCode::BAD_REQUEST,
            Json(json!({"message": "Invalid Recipient(s)", "code": 50033})),
        )
            .into_response(),
    }
}

impl FakeDiscord {
    /// Register a channel (a thread, a forum…): `GET /channels/{id}` answers with it, and
    /// [`FakeDiscord::push_guild_create`] lists it. No event is sent.
    pub fn add_channel(&self, channel: FakeChannel) {
        self.shared
            .lock()
            .channels
            .known
            .insert(channel.id, channel);
        self.shared.bump();
    }

    /// Register `thread` and dispatch its THREAD_CREATE, as Discord does when a thread is
    /// created (`newly_created`) or the bot is added to a private one (with its member
    /// object). Returns the sequence number.
    pub fn push_thread_create(&self, thread: FakeChannel) -> u64 {
        let mut d = thread.to_json();
        if thread.kind == ChannelKind::PrivateThread {
            d["member"] = json!({"id": thread.id.to_string(), "user_id": BOT_USER_ID.to_string(),
                "join_timestamp": "2025-01-01T00:00:00.000000+00:00", "flags": 0});
        } else {
            d["newly_created"] = json!(true);
        }
        self.add_channel(thread);
        self.push_dispatch("THREAD_CREATE", d)
    }

    /// Someone opens a post titled `title` in forum `forum_id` with message `msg` (its
    /// `channel_id` is replaced): Discord creates a thread whose id is the starter message's
    /// id, and dispatches THREAD_CREATE, then the starter's MESSAGE_CREATE. Returns that id.
    pub fn push_forum_post(&self, forum_id: u64, title: &str, mut msg: IncomingMessage) -> u64 {
        let id = self.shared.lock().new_id();
        self.push_thread_create(FakeChannel::thread(id, forum_id, title));
        msg.channel_id = id;
        self.push_message_create_with_id(id, msg);
        id
    }

    /// [`FakeDiscord::push_forum_post`], but the bot never got the events (it was
    /// disconnected, or the post came before it joined): only REST shows the thread and its
    /// starter message. Returns the post's id.
    pub fn add_unseen_forum_post(
        &self,
        forum_id: u64,
        title: &str,
        mut msg: IncomingMessage,
    ) -> u64 {
        let id = self.shared.lock().new_id();
        self.add_channel(FakeChannel::thread(id, forum_id, title));
        msg.channel_id = id;
        let d = super::incoming_json(id, &msg);
        self.shared.lock().remember(id, &d);
        self.shared.bump();
        id
    }

    /// `user` exists: a post to their id as if it were a channel is `404 Unknown Channel`,
    /// and `POST /users/@me/channels` opens a DM channel with them.
    pub fn add_user(&self, user: Author) {
        self.shared.lock().channels.users.insert(user.id, user);
        self.shared.bump();
    }

    /// `id` is neither a channel nor a user (a deleted channel, a typo).
    pub fn add_missing(&self, id: u64) {
        self.shared.lock().channels.missing.insert(id);
        self.shared.bump();
    }

    /// Posts and typing in `channel_id` are refused with `denial` until [`FakeDiscord::allow`].
    pub fn deny(&self, channel_id: u64, denial: Denial) {
        self.shared
            .lock()
            .channels
            .denied
            .insert(channel_id, denial);
        self.shared.bump();
    }

    /// The permission denied in `channel_id` was granted.
    pub fn allow(&self, channel_id: u64) {
        self.shared.lock().channels.denied.remove(&channel_id);
        self.shared.bump();
    }

    /// The DM channel opened with `user`, if one was.
    pub fn dm_channel_of(&self, user: u64) -> Option<u64> {
        self.shared.lock().channels.dms.get(&user).copied()
    }

    /// Recipients of `POST /users/@me/channels`, in order.
    pub fn dm_opens(&self) -> Vec<u64> {
        self.shared.lock().channels.dm_opens.clone()
    }

    /// Channel ids of `GET /channels/{id}` calls, in order.
    pub fn channel_reads(&self) -> Vec<u64> {
        self.shared.lock().channels.reads.clone()
    }

    /// Message posts and typing calls refused (404 Unknown Channel, 403), in order.
    pub fn refused_posts(&self) -> Vec<Refusal> {
        self.shared.lock().channels.refused.clone()
    }
}
