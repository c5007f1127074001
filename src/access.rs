//! Who may reach the agent: `dm_policy`, `allow_from` and `group_policy` (DESIGN §7),
//! applied to every channel in one place before a message is stored.

use serde::{Deserialize, Serialize};
use switchboard_channel::{InboundMessage, Origin, Sender};

use crate::config::{Access, Config, DmPolicy, GroupPolicy};
use crate::pairing;
use crate::store::{Store, StoreError};

/// What to do with an inbound user message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Store it and answer.
    Allow,
    /// Drop it silently.
    Ignore,
    /// Unknown DM sender under `pairing`: answer with a pairing code, nothing reaches the LLM.
    Pair,
}

/// Whether `allow_from` names the sender (by id, or username with or without `@`), or `"*"`.
pub fn listed(access: &Access, sender: &Sender) -> bool {
    access
        .allow_from
        .iter()
        .any(|e| e.trim() == "*" || names(e, sender))
}

/// Whether the sender is an owner: named in `allow_from` themselves, not let in by `"*"`
/// (`["1001", "*"]`: 1001 is the owner, everyone else a member).
pub fn is_owner(access: &Access, sender: &Sender) -> bool {
    access.allow_from.iter().any(|e| names(e, sender))
}

/// Whether the rules name an owner: someone listed in `allow_from` other than by `"*"`.
pub fn names_an_owner(access: &Access) -> bool {
    access.allow_from.iter().any(|a| a.trim() != "*")
}

/// Whether the `allow_from` entry `entry` names `sender` (not `"*"`).
fn names(entry: &str, sender: &Sender) -> bool {
    let e = entry.trim();
    let username = sender
        .username
        .as_deref()
        .map(|u| u.trim_start_matches('@'));
    let by_name = |u: &str| match e.strip_prefix('@') {
        Some(name) => u.eq_ignore_ascii_case(name),
        None => !id_like(e) && u.eq_ignore_ascii_case(e),
    };
    e != "*" && (e == sender.id || username.is_some_and(by_name))
}

/// An entry written like a user id matches only the id: anyone may pick a username of
/// digits (Discord) or one that reads like a Slack id, and would pass as the owner listed
/// by id. Numbers (Telegram, Discord) and `U…`/`W…` (Slack) are ids; `@name` is a name.
pub(crate) fn id_like(e: &str) -> bool {
    let slack = e.len() >= 9
        && (e.starts_with('U') || e.starts_with('W'))
        && e.chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit());
    slack || (!e.is_empty() && e.chars().all(|c| c.is_ascii_digit()))
}

/// Decide for a user message; `approved` says whether the sender was approved by pairing
/// (which `allowlist` ignores: only `allow_from` gets in, also after pairings made under
/// `pairing`).
pub fn decide(access: &Access, msg: &InboundMessage, approved: bool) -> Decision {
    let in_group = msg.is_group.then_some(msg.mentions_bot);
    decide_for(access, &msg.sender, in_group, approved)
}

/// [`decide`] for `sender` writing in a DM (`in_group` is `None`) or in a group, mentioning
/// the bot or not.
fn decide_for(
    access: &Access,
    sender: &Sender,
    in_group: Option<bool>,
    approved: bool,
) -> Decision {
    let approved = approved && access.dm_policy != DmPolicy::Allowlist;
    let known = approved || listed(access, sender);
    if let Some(mentions_bot) = in_group {
        let sender_ok = known || access.dm_policy == DmPolicy::Open;
        return match access.group_policy {
            GroupPolicy::Disabled => Decision::Ignore,
            _ if !sender_ok => Decision::Ignore,
            GroupPolicy::Mention if !mentions_bot => Decision::Ignore,
            _ => Decision::Allow,
        };
    }
    match access.dm_policy {
        DmPolicy::Open => Decision::Allow,
        _ if known => Decision::Allow,
        DmPolicy::Pairing => Decision::Pair,
        DmPolicy::Allowlist => Decision::Ignore,
    }
}

/// Someone whose message made a job (through the `cron` tool), stored with it: the job
/// fires only while they could still write to its chat, so revoking a pairing or taking a
/// name out of `allow_from` also stops the reminders that person set.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Setter {
    pub channel: String,
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub username: Option<String>,
    /// Set from a group chat (`group_policy` applies, a mention is assumed).
    #[serde(default)]
    pub group: bool,
}

impl std::fmt::Display for Setter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.username {
            Some(name) => write!(
                f,
                "@{} ({} {})",
                name.trim_start_matches('@'),
                self.channel,
                self.id
            ),
            None => write!(f, "{} user {}", self.channel, self.id),
        }
    }
}

impl Setter {
    /// Whether `other` is the same person (their name may have changed since).
    pub fn same_person(&self, other: &Setter) -> bool {
        self.channel == other.channel && self.id == other.id
    }

    /// Add them to `all` unless they are there already.
    pub fn add_to(self, all: &mut Vec<Setter>) {
        if !all.iter().any(|a| a.same_person(&self)) {
            all.push(self);
        }
    }

    /// The sender of a user message.
    pub fn of(msg: &InboundMessage) -> Self {
        Self {
            channel: msg.key.channel.clone(),
            id: msg.sender.id.clone(),
            username: msg.sender.username.clone(),
            group: msg.is_group,
        }
    }

    /// Whether they are an owner of their channel (listed in its `allow_from`, which names
    /// owners); on the terminal (`cli`), always.
    pub fn is_owner(&self, config: &Config) -> bool {
        let Some(access) = config.access_for(&self.channel) else {
            return self.channel == "cli";
        };
        let sender = Sender {
            id: self.id.clone(),
            username: self.username.clone(),
            display_name: String::new(),
            is_owner: false,
        };
        is_owner(&access, &sender)
    }

    /// Whether the rules in force would still let them in, as if they wrote now (addressing
    /// the bot in a group). Channels without access rules (`api`, `cli`) always do.
    pub fn admitted(&self, config: &Config, store: &dyn Store) -> Result<bool, StoreError> {
        let Some(access) = config.access_for(&self.channel) else {
            return Ok(true);
        };
        let sender = Sender {
            id: self.id.clone(),
            username: self.username.clone(),
            display_name: String::new(),
            is_owner: false,
        };
        let approved = pairing::is_approved(store, &self.channel, &self.id)?;
        let in_group = self.group.then_some(true);
        Ok(decide_for(&access, &sender, in_group, approved) == Decision::Allow)
    }
}

/// Who a turn over `msgs` acts for: the senders of its user messages, and whoever set the
/// jobs whose runs it answers (carried in a run's `set_by` metadata), so a reminder that
/// sets another passes its setters on.
pub fn setters(msgs: &[InboundMessage]) -> Vec<Setter> {
    let mut all: Vec<Setter> = Vec::new();
    for msg in msgs {
        let found = match &msg.origin {
            Origin::User => vec![Setter::of(msg)],
            Origin::System(_) => msg
                .metadata
                .get(SET_BY)
                .and_then(|v| serde_json::from_value(v.clone()).ok())
                .unwrap_or_default(),
        };
        for s in found {
            s.add_to(&mut all);
        }
    }
    all
}

/// The metadata key of a job run's setters.
pub const SET_BY: &str = "set_by";

#[cfg(test)]
mod tests {
    use super::*;
    use switchboard_channel::Sender;

    fn msg(id: &str, username: Option<&str>, group: bool, mention: bool) -> InboundMessage {
        let mut m = InboundMessage::text(
            "t:1",
            "telegram:1".parse().unwrap(),
            Sender {
                id: id.into(),
                username: username.map(String::from),
                display_name: "X".into(),
                is_owner: false,
            },
            "hi",
        );
        m.is_group = group;
        m.mentions_bot = mention;
        m
    }

    fn access(dm: DmPolicy, allow: &[&str], group: GroupPolicy) -> Access {
        Access {
            dm_policy: dm,
            allow_from: allow.iter().map(|s| s.to_string()).collect(),
            group_policy: group,
        }
    }

    #[test]
    fn owners_are_those_named_not_those_let_in_by_a_star() {
        let both = access(DmPolicy::Open, &["1001", "*"], GroupPolicy::Mention);
        let owner = msg("1001", None, false, false).sender;
        let other = msg("2002", Some("bob"), false, false).sender;
        assert!(names_an_owner(&both) && is_owner(&both, &owner));
        assert!(listed(&both, &other) && !is_owner(&both, &other));
        let star = access(DmPolicy::Open, &["*"], GroupPolicy::Mention);
        assert!(!names_an_owner(&star) && !is_owner(&star, &owner));
    }

    #[test]
    fn dm_policies() {
        let pairing = access(DmPolicy::Pairing, &["42", "@alice"], GroupPolicy::Mention);
        assert_eq!(
            decide(&pairing, &msg("42", None, false, false), false),
            Decision::Allow
        );
        assert_eq!(
            decide(&pairing, &msg("7", Some("Alice"), false, false), false),
            Decision::Allow
        );
        assert_eq!(
            decide(&pairing, &msg("7", Some("bob"), false, false), false),
            Decision::Pair
        );
        assert_eq!(
            decide(&pairing, &msg("7", Some("bob"), false, false), true),
            Decision::Allow
        );
        let allow = access(DmPolicy::Allowlist, &["alice"], GroupPolicy::Mention);
        assert_eq!(
            decide(&allow, &msg("7", Some("bob"), false, false), false),
            Decision::Ignore
        );
        assert_eq!(
            decide(&allow, &msg("7", Some("alice"), false, false), false),
            Decision::Allow
        );
        // Only `allow_from`: a pairing approved before the switch to `allowlist` no longer
        // gets in, in a DM or a group.
        assert_eq!(
            decide(&allow, &msg("7", Some("bob"), false, false), true),
            Decision::Ignore
        );
        assert_eq!(
            decide(&allow, &msg("7", Some("bob"), true, true), true),
            Decision::Ignore
        );
        let open = access(DmPolicy::Open, &[], GroupPolicy::Mention);
        assert_eq!(
            decide(&open, &msg("7", None, false, false), false),
            Decision::Allow
        );
        let star = access(DmPolicy::Allowlist, &["*"], GroupPolicy::Mention);
        assert_eq!(
            decide(&star, &msg("7", None, false, false), false),
            Decision::Allow
        );
    }

    #[test]
    fn an_id_entry_is_never_matched_by_a_username() {
        let a = access(
            DmPolicy::Allowlist,
            &["80351110224678912", "U0123ABCD", "@4242", "carol"],
            GroupPolicy::Mention,
        );
        // Someone who named themselves after the owner's id is not the owner.
        assert!(!listed(
            &a,
            &msg("666", Some("80351110224678912"), false, false).sender
        ));
        assert!(!listed(
            &a,
            &msg("U0666", Some("u0123abcd"), false, false).sender
        ));
        assert!(listed(
            &a,
            &msg("80351110224678912", Some("x"), false, false).sender
        ));
        assert!(listed(&a, &msg("U0123ABCD", None, false, false).sender));
        // Written as a name, a name of digits is one; names match whatever their case.
        assert!(listed(&a, &msg("7", Some("4242"), false, false).sender));
        assert!(listed(&a, &msg("7", Some("@Carol"), false, false).sender));
        assert!(!listed(&a, &msg("7", Some("dave"), false, false).sender));
    }

    #[test]
    fn group_policies_never_pair() {
        let a = access(DmPolicy::Pairing, &["42"], GroupPolicy::Mention);
        assert_eq!(
            decide(&a, &msg("42", None, true, false), false),
            Decision::Ignore
        );
        assert_eq!(
            decide(&a, &msg("42", None, true, true), false),
            Decision::Allow
        );
        assert_eq!(
            decide(&a, &msg("7", None, true, true), false),
            Decision::Ignore
        );
        let open = access(DmPolicy::Pairing, &["42"], GroupPolicy::Open);
        assert_eq!(
            decide(&open, &msg("42", None, true, false), false),
            Decision::Allow
        );
        let off = access(DmPolicy::Open, &["*"], GroupPolicy::Disabled);
        assert_eq!(
            decide(&off, &msg("42", None, true, true), false),
            Decision::Ignore
        );
    }

    #[test]
    fn a_setter_is_held_to_the_rules_in_force_and_a_run_passes_its_setters_on() {
        let dir = tempfile::tempdir().unwrap();
        let store = crate::store::SledStore::open(dir.path()).unwrap();
        let mut config = Config::default();
        let bob = |group| Setter {
            channel: "telegram".into(),
            id: "7".into(),
            username: Some("bob".into()),
            group,
        };
        // Unknown under `pairing`: not admitted, in a DM or a group.
        assert!(!bob(false).admitted(&config, &store).unwrap());
        assert!(!bob(true).admitted(&config, &store).unwrap());
        config.channels.telegram.allow_from = vec!["@bob".into()];
        assert!(bob(false).admitted(&config, &store).unwrap());
        assert!(bob(true).admitted(&config, &store).unwrap());
        // Groups switched off: a job set in one stops; one set in a DM goes on.
        config.channels.telegram.group_policy = GroupPolicy::Disabled;
        assert!(!bob(true).admitted(&config, &store).unwrap());
        assert!(bob(false).admitted(&config, &store).unwrap());
        // No access rules (the API, the terminal): always.
        let api = Setter {
            channel: "api".into(),
            ..bob(false)
        };
        assert!(api.admitted(&Config::default(), &store).unwrap());

        // A turn acts for its user messages' senders (each once) and a run's setters.
        let mut from_bob = msg("7", Some("bob"), false, false);
        from_bob.key = "telegram:7".parse().unwrap();
        let mut run = InboundMessage::text(
            "cron:j1:0",
            from_bob.key.clone(),
            from_bob.sender.clone(),
            "x",
        );
        run.origin = Origin::System(switchboard_channel::SystemOrigin::Cron {
            job_id: "j1".into(),
        });
        let carol = Setter {
            id: "9".into(),
            username: None,
            ..bob(true)
        };
        run.metadata
            .insert(SET_BY.into(), serde_json::to_value([&carol]).unwrap());
        let got = setters(&[from_bob.clone(), from_bob, run]);
        assert_eq!(got, [bob(false), carol]);
        assert_eq!(got[1].to_string(), "telegram user 9");
    }
}
