//! Who may reach the agent: `dm_policy`, `allow_from` and `group_policy` (DESIGN §7),
//! applied to every channel in one place before a message is stored.

use switchboard_channel::InboundMessage;

use crate::config::{Access, DmPolicy, GroupPolicy};

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
pub fn listed(access: &Access, msg: &InboundMessage) -> bool {
    let username = msg
        .sender
        .username
        .as_deref()
        .map(|u| u.trim_start_matches('@'));
    access.allow_from.iter().any(|entry| {
        let e = entry.trim();
        let by_name = |u: &str| match e.strip_prefix('@') {
            Some(name) => u.eq_ignore_ascii_case(name),
            None => !id_like(e) && u.eq_ignore_ascii_case(e),
        };
        e == "*" || e == msg.sender.id || username.is_some_and(by_name)
    })
}

/// Whether the rules name an owner: someone listed in `allow_from`, which `*` (everyone)
/// turns off.
pub fn names_an_owner(access: &Access) -> bool {
    !access.allow_from.is_empty() && !access.allow_from.iter().any(|a| a.trim() == "*")
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
    let approved = approved && access.dm_policy != DmPolicy::Allowlist;
    let known = approved || listed(access, msg);
    if msg.is_group {
        let sender_ok = known || access.dm_policy == DmPolicy::Open;
        return match access.group_policy {
            GroupPolicy::Disabled => Decision::Ignore,
            _ if !sender_ok => Decision::Ignore,
            GroupPolicy::Mention if !msg.mentions_bot => Decision::Ignore,
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
            &msg("666", Some("80351110224678912"), false, false)
        ));
        assert!(!listed(&a, &msg("U0666", Some("u0123abcd"), false, false)));
        assert!(listed(
            &a,
            &msg("80351110224678912", Some("x"), false, false)
        ));
        assert!(listed(&a, &msg("U0123ABCD", None, false, false)));
        // Written as a name, a name of digits is one; names match whatever their case.
        assert!(listed(&a, &msg("7", Some("4242"), false, false)));
        assert!(listed(&a, &msg("7", Some("@Carol"), false, false)));
        assert!(!listed(&a, &msg("7", Some("dave"), false, false)));
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
}
