//! The heartbeat: periodic `System(Heartbeat)` turns when `HEARTBEAT.md` has something to do.

/// A heartbeat reply that only says "nothing to do" is not delivered: `HEARTBEAT_OK` alone,
/// or at the start or end of a reply of at most 300 characters.
pub fn suppress_reply(text: &str) -> bool {
    let t = text.trim();
    t == "HEARTBEAT_OK"
        || (t.chars().count() <= 300
            && (t.starts_with("HEARTBEAT_OK") || t.ends_with("HEARTBEAT_OK")))
}
