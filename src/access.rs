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
        e == "*"
            || e == msg.sender.id
            || username.is_some_and(|u| u.eq_ignore_ascii_case(e.trim_start_matches('@')))
    })
}

/// Decide for a user message; `approved` says whether the sender was approved by pairing.
pub fn decide(access: &Access, msg: &InboundMessage, approved: bool) -> Decision {
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
