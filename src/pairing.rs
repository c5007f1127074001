//! Pairing: an unknown DM sender gets a one-time code; the owner approves it from the CLI.
//!
//! Stored in `Tree::Pairing`: `code:<channel>:<CODE>` → pending request,
//! `sender:<channel>:<id>` → that sender's live code, `approved:<channel>:<id>` → approval.

use chrono::{DateTime, Duration, Utc};
use serde::{Deserialize, Serialize};
use switchboard_channel::Sender;

use crate::store::{Batch, Store, StoreError, Tree};

/// Code characters: A–Z and 2–9 without look-alikes (no O, I, L, 0, 1).
const ALPHABET: &[u8] = b"ABCDEFGHJKMNPQRSTUVWXYZ23456789";
const CODE_LEN: usize = 8;
/// How long a code stays valid.
pub const CODE_TTL: Duration = Duration::hours(1);
/// Live codes a channel holds at most: past it, a new stranger gets no code and no answer
/// (many accounts writing to the bot cannot make it post without end, nor fill the store).
pub const MAX_PENDING: usize = 50;

/// A sender waiting for approval.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Request {
    pub channel: String,
    pub code: String,
    pub sender_id: String,
    pub username: Option<String>,
    pub display_name: String,
    pub expires_at: DateTime<Utc>,
    /// The chat the code was sent in (`telegram:5005`), told when the code is approved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chat: Option<String>,
}

/// An approved sender.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Approved {
    pub channel: String,
    pub sender_id: String,
    pub username: Option<String>,
    pub display_name: String,
    pub approved_at: DateTime<Utc>,
    /// The chat their code was sent in, to tell them they are in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chat: Option<String>,
}

/// Why a pairing command failed.
#[derive(Debug, thiserror::Error)]
pub enum PairingError {
    #[error("no pending pairing code {code} for {channel} (codes expire after one hour)")]
    UnknownCode { channel: String, code: String },
    #[error("no approved {channel} user {user}")]
    UnknownUser { channel: String, user: String },
    #[error(transparent)]
    Store(#[from] StoreError),
}

pub fn new_code() -> String {
    (0..CODE_LEN)
        .map(|_| ALPHABET[rand::random_range(0..ALPHABET.len())] as char)
        .collect()
}

fn k(kind: &str, channel: &str, id: &str) -> Vec<u8> {
    format!("{kind}:{channel}:{id}").into_bytes()
}

pub fn is_approved(store: &dyn Store, channel: &str, sender_id: &str) -> Result<bool, StoreError> {
    Ok(store
        .get(Tree::Pairing, &k("approved", channel, sender_id))?
        .is_some())
}

/// The sender's live code, creating one when it has none (or it expired); `true` when the
/// code is new, so the sender is told it once rather than on every message or redelivery.
/// `None` when the channel already holds [`MAX_PENDING`] live codes. Expired codes are
/// removed as new ones are made.
pub async fn code_for(
    store: &dyn Store,
    channel: &str,
    sender: &Sender,
    chat: Option<&str>,
) -> Result<Option<(String, bool)>, StoreError> {
    // One at a time: two messages of a stranger at once (Discord and Slack deliver them
    // concurrently) would otherwise each find no code and each be sent one, and many
    // strangers at once could pass the cap together.
    static ISSUING: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    let _one = ISSUING.lock().await;
    let now = Utc::now();
    if let Some(code) = store.get(Tree::Pairing, &k("sender", channel, &sender.id))? {
        let code = String::from_utf8_lossy(&code).into_owned();
        if let Some(req) = store.get_json::<Request>(Tree::Pairing, &k("code", channel, &code))? {
            if req.expires_at > now {
                return Ok(Some((code, false)));
            }
        }
    }
    let mut b = Batch::default();
    let mut live = 0;
    for (key, v) in store.scan(Tree::Pairing, &k("code", channel, ""))? {
        match serde_json::from_slice::<Request>(&v) {
            Ok(r) if r.expires_at > now => live += 1,
            Ok(r) => {
                b.delete(Tree::Pairing, key);
                b.delete(Tree::Pairing, k("sender", channel, &r.sender_id));
            }
            Err(_) => b.delete(Tree::Pairing, key),
        }
    }
    if live >= MAX_PENDING {
        store.commit(b).await?;
        return Ok(None);
    }
    let code = new_code();
    let req = Request {
        channel: channel.to_string(),
        code: code.clone(),
        sender_id: sender.id.clone(),
        username: sender.username.clone(),
        display_name: sender.display_name.clone(),
        expires_at: now + CODE_TTL,
        chat: chat.map(str::to_string),
    };
    b.put(
        Tree::Pairing,
        k("code", channel, &code),
        serde_json::to_vec(&req).unwrap_or_default(),
    );
    b.put(
        Tree::Pairing,
        k("sender", channel, &sender.id),
        code.clone(),
    );
    store.commit(b).await?;
    Ok(Some((code, true)))
}

/// Approve a pending code.
pub async fn approve(
    store: &dyn Store,
    channel: &str,
    code: &str,
) -> Result<Approved, PairingError> {
    let channel = &channel.trim().to_ascii_lowercase();
    let code = code.trim().to_uppercase();
    let unknown = || PairingError::UnknownCode {
        channel: channel.to_string(),
        code: code.clone(),
    };
    let req: Request = store
        .get_json(Tree::Pairing, &k("code", channel, &code))?
        .ok_or_else(unknown)?;
    if req.expires_at <= Utc::now() {
        return Err(unknown());
    }
    let approved = Approved {
        channel: channel.to_string(),
        sender_id: req.sender_id.clone(),
        username: req.username,
        display_name: req.display_name,
        approved_at: Utc::now(),
        chat: req.chat,
    };
    let mut b = Batch::default();
    b.delete(Tree::Pairing, k("code", channel, &code));
    b.delete(Tree::Pairing, k("sender", channel, &req.sender_id));
    b.put(
        Tree::Pairing,
        k("approved", channel, &req.sender_id),
        serde_json::to_vec(&approved).unwrap_or_default(),
    );
    store.commit(b).await?;
    Ok(approved)
}

/// Revoke an approval by user id or username.
pub async fn revoke(
    store: &dyn Store,
    channel: &str,
    user: &str,
) -> Result<Approved, PairingError> {
    let channel = &channel.trim().to_ascii_lowercase();
    let user_l = user.trim().trim_start_matches('@').to_lowercase();
    let found = list(store)?.1.into_iter().find(|a| {
        a.channel == *channel
            && (a.sender_id == user.trim()
                || a.username
                    .as_deref()
                    .is_some_and(|u| u.to_lowercase() == user_l))
    });
    let a = found.ok_or_else(|| PairingError::UnknownUser {
        channel: channel.to_string(),
        user: user.to_string(),
    })?;
    let mut b = Batch::default();
    b.delete(Tree::Pairing, k("approved", channel, &a.sender_id));
    store.commit(b).await?;
    Ok(a)
}

/// Pending (unexpired) requests and approvals.
pub fn list(store: &dyn Store) -> Result<(Vec<Request>, Vec<Approved>), StoreError> {
    let now = Utc::now();
    let pending = store
        .scan(Tree::Pairing, b"code:")?
        .into_iter()
        .filter_map(|(_, v)| serde_json::from_slice::<Request>(&v).ok())
        .filter(|r| r.expires_at > now)
        .collect();
    let approved = store
        .scan(Tree::Pairing, b"approved:")?
        .into_iter()
        .filter_map(|(_, v)| serde_json::from_slice(&v).ok())
        .collect();
    Ok((pending, approved))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::SledStore;

    #[test]
    fn codes_use_the_unambiguous_alphabet() {
        for _ in 0..200 {
            let c = new_code();
            assert_eq!(c.len(), 8);
            assert!(c.chars().all(|ch| ALPHABET.contains(&(ch as u8))), "{c}");
            assert!(!c.contains(['O', 'I', 'L', '0', '1']));
        }
    }

    #[tokio::test]
    async fn request_approve_revoke() {
        let dir = tempfile::tempdir().unwrap();
        let store = SledStore::open(dir.path()).unwrap();
        let s = Sender {
            id: "77".into(),
            username: Some("bob".into()),
            display_name: "Bob".into(),
            is_owner: false,
        };
        let (c1, new1) = code_for(&store, "telegram", &s, None)
            .await
            .unwrap()
            .unwrap();
        let (c2, new2) = code_for(&store, "telegram", &s, None)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(c1, c2, "a live code is reused");
        assert!(new1 && !new2);
        assert!(!is_approved(&store, "telegram", "77").unwrap());
        assert!(matches!(
            approve(&store, "discord", &c1).await,
            Err(PairingError::UnknownCode { .. })
        ));
        approve(&store, "Telegram", &c1.to_lowercase())
            .await
            .unwrap();
        assert!(is_approved(&store, "telegram", "77").unwrap());
        assert!(list(&store).unwrap().0.is_empty());
        revoke(&store, "telegram", "@Bob").await.unwrap();
        assert!(!is_approved(&store, "telegram", "77").unwrap());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn messages_at_once_from_one_stranger_get_one_code_told_once() {
        let dir = tempfile::tempdir().unwrap();
        let store = std::sync::Arc::new(SledStore::open(dir.path()).unwrap());
        let s = Sender {
            id: "88".into(),
            username: None,
            display_name: "Eve".into(),
            is_owner: false,
        };
        let tasks: Vec<_> = (0..8)
            .map(|_| {
                let (store, s) = (store.clone(), s.clone());
                tokio::spawn(async move { code_for(store.as_ref(), "discord", &s, None).await })
            })
            .collect();
        let mut got = Vec::new();
        for t in tasks {
            got.push(t.await.unwrap().unwrap().unwrap());
        }
        assert_eq!(got.iter().filter(|(_, new)| *new).count(), 1, "{got:?}");
        assert!(got.iter().all(|(c, _)| *c == got[0].0), "{got:?}");
        assert_eq!(list(store.as_ref()).unwrap().0.len(), 1);
    }

    #[tokio::test]
    async fn a_channel_holds_a_bounded_number_of_live_codes_and_drops_expired_ones() {
        let dir = tempfile::tempdir().unwrap();
        let store = SledStore::open(dir.path()).unwrap();
        let stranger = |i: usize| Sender {
            id: format!("s{i}"),
            username: None,
            display_name: format!("S{i}"),
            is_owner: false,
        };
        for i in 0..MAX_PENDING {
            assert!(
                code_for(&store, "telegram", &stranger(i), None)
                    .await
                    .unwrap()
                    .is_some()
            );
        }
        // Full: the next stranger gets no code (and so no answer); another channel does.
        assert!(
            code_for(&store, "telegram", &stranger(999), None)
                .await
                .unwrap()
                .is_none()
        );
        assert!(
            code_for(&store, "discord", &stranger(999), None)
                .await
                .unwrap()
                .is_some()
        );
        // Codes that expired are removed, with their senders, as a new one is made.
        let mut b = Batch::default();
        for (key, v) in store.scan(Tree::Pairing, b"code:telegram:").unwrap() {
            let mut r: Request = serde_json::from_slice(&v).unwrap();
            r.expires_at = Utc::now() - Duration::minutes(1);
            b.put(Tree::Pairing, key, serde_json::to_vec(&r).unwrap());
        }
        store.commit(b).await.unwrap();
        assert!(
            code_for(&store, "telegram", &stranger(999), None)
                .await
                .unwrap()
                .is_some()
        );
        assert_eq!(
            store.scan(Tree::Pairing, b"code:telegram:").unwrap().len(),
            1
        );
        assert_eq!(
            store
                .scan(Tree::Pairing, b"sender:telegram:")
                .unwrap()
                .len(),
            1
        );
    }
}
