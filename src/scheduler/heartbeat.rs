//! The heartbeat: periodic `System(Heartbeat)` turns when `HEARTBEAT.md` has something to do.
//!
//! Every `heartbeat.interval`, inside `heartbeat.active_hours` (in `gateway.timezone`), if
//! `<workspace>/HEARTBEAT.md` has actionable content and the target chat has no turn running
//! or waiting, one message carrying the file goes to the target, where the agent composes
//! it in the context of that chat (its history and summary, as for a cron job). Without
//! actionable content nothing is published, so an idle gateway makes no LLM call.

use std::sync::Arc;
use std::time::Duration;

use chrono::Timelike;
use switchboard_channel::{ChatKey, InboundMessage, Origin, Sender, SystemOrigin};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::clock::Clock;
use crate::bus::Bus;
use crate::config::Config;
use crate::store::{Store, Tree};

/// The file the heartbeat reads, in the workspace.
pub const HEARTBEAT_FILE: &str = "HEARTBEAT.md";
/// Most of `HEARTBEAT.md` read, in bytes.
const MAX_READ: u64 = 256 * 1024;

/// What a heartbeat reply says when there is nothing to do.
const TOKEN: &str = "HEARTBEAT_OK";

/// Marks a model puts around the token: emphasis, code, quotes, punctuation, spaces.
fn around_token(c: char) -> bool {
    matches!(
        c,
        '*' | '_' | '`' | '.' | '!' | '"' | '\'' | '“' | '”' | '‘' | '’'
    ) || c.is_whitespace()
}

/// A heartbeat reply that only says "nothing to do" is not delivered: `HEARTBEAT_OK` alone,
/// or at the start or end of a reply of at most 300 characters. Markdown emphasis or code
/// marks, quotes and trailing punctuation around the token do not count.
pub fn suppress_reply(text: &str) -> bool {
    let t = text.trim();
    let s = t.trim_matches(around_token);
    s == TOKEN || t.chars().count() <= 300 && (s.starts_with(TOKEN) || s.ends_with(TOKEN))
}

/// A heartbeat reply that is delivered (it has more to say) without the token at its start
/// or end: that is for the gateway, not for the user.
pub fn without_token(text: &str) -> String {
    let mut t = text.trim();
    if let Some(rest) = t.trim_start_matches(around_token).strip_prefix(TOKEN) {
        t = rest.trim_start_matches(|c: char| around_token(c) || matches!(c, '—' | '-' | ':'));
    }
    if let Some(rest) = t.trim_end_matches(around_token).strip_suffix(TOKEN) {
        t = rest.trim_end_matches(|c: char| {
            matches!(c, '*' | '_' | '`' | '—' | '-' | ':' | '"') || c.is_whitespace()
        });
    }
    t.to_string()
}

/// Whether `HEARTBEAT.md` asks for anything. Blank lines, headings (`#` or underlined),
/// rules (`---`), HTML comments, empty list or checkbox items (`- [ ]` with nothing after
/// it) and ticked ones (`- [x] paid rent`: done) are not actionable, also quoted (`> …`);
/// any other line (a bullet item, text under a heading) is.
pub fn is_actionable(markdown: &str) -> bool {
    // Some editors (Notepad) start a UTF-8 file with a byte-order mark: not content.
    let markdown = markdown.strip_prefix('\u{feff}').unwrap_or(markdown);
    let mut rest = markdown;
    let mut text = String::with_capacity(markdown.len());
    // Drop HTML comments, including multi-line and unterminated ones.
    while let Some(start) = rest.find("<!--") {
        text.push_str(&rest[..start]);
        match rest[start + 4..].find("-->") {
            Some(end) => rest = &rest[start + 4 + end + 3..],
            None => rest = "",
        }
    }
    text.push_str(rest);
    let lines: Vec<&str> = text
        .lines()
        .map(|l| {
            l.trim_start_matches(|c: char| c == '>' || c.is_whitespace())
                .trim_end()
        })
        .collect();
    lines.iter().enumerate().any(|(i, line)| {
        // `Title` over `=====` or `-----` is a heading too; a list item over `---` is an
        // item and a rule.
        let underlined = !is_item(line) && lines.get(i + 1).is_some_and(|next| is_underline(next));
        !(line.is_empty()
            || is_heading(line)
            || is_empty_item(line)
            || is_rule(line)
            || is_underline(line)
            || underlined)
    })
}

/// A setext heading's underline: `===` or `---` (at least two).
fn is_underline(line: &str) -> bool {
    line.len() >= 2 && (line.chars().all(|c| c == '=') || line.chars().all(|c| c == '-'))
}

/// A thematic break: `---`, `***`, `___` (spaces allowed between).
fn is_rule(line: &str) -> bool {
    let marks: Vec<char> = line.chars().filter(|c| !c.is_whitespace()).collect();
    marks.len() >= 3 && matches!(marks[0], '-' | '*' | '_') && marks.iter().all(|c| *c == marks[0])
}

fn is_heading(line: &str) -> bool {
    let rest = line.trim_start_matches('#');
    rest.len() < line.len() && (rest.is_empty() || rest.starts_with(char::is_whitespace))
}

/// `-`, `* [ ]`, `1. [ ]`: a list marker with at most an empty checkbox; or a ticked item
/// (`+ [x] paid rent`), which is done.
fn is_empty_item(line: &str) -> bool {
    item_text(line).is_some_and(|rest| {
        rest.is_empty()
            || matches!(rest, "[ ]" | "[]")
            || rest.starts_with("[x]")
            || rest.starts_with("[X]")
    })
}

/// Whether `line` is a list item (`- x`, `* x`, `+ x`, `1. x`, `1) x`).
fn is_item(line: &str) -> bool {
    item_text(line).is_some()
}

/// What follows a list item's marker, trimmed; `None` when `line` is no list item.
fn item_text(line: &str) -> Option<&str> {
    let rest = if let Some(r) = line.strip_prefix(['-', '*', '+']) {
        r
    } else {
        let digits = line.len() - line.trim_start_matches(|c: char| c.is_ascii_digit()).len();
        match line[digits..].strip_prefix(['.', ')']) {
            Some(r) if digits > 0 => r,
            _ => return None,
        }
    };
    Some(rest.trim())
}

/// Whether minute-of-day `now` lies in `"HH:MM-HH:MM"` (which may cross midnight). An empty
/// or unreadable setting means always.
pub fn in_active_hours(active_hours: &str, now_minutes: u32) -> bool {
    let Some((start, end)) = crate::config::parse_active_hours(active_hours) else {
        return true;
    };
    match start.cmp(&end) {
        std::cmp::Ordering::Equal => true,
        std::cmp::Ordering::Less => start <= now_minutes && now_minutes < end,
        std::cmp::Ordering::Greater => now_minutes >= start || now_minutes < end,
    }
}

/// What one heartbeat tick did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Beat {
    /// A `System(Heartbeat)` message went to this chat.
    Published(ChatKey),
    OutsideActiveHours,
    /// `HEARTBEAT.md` is missing or has nothing actionable: no message, no LLM call.
    NotActionable,
    /// `target = "last"` and no chat has been active yet.
    NoTarget,
    /// The target chat has a turn running or waiting; try at the next tick.
    Busy(ChatKey),
    Failed(String),
}

/// How long after start the first tick comes: an interval after the last tick of an earlier
/// run (at once when that is past), or a full interval without one. Never more than an
/// interval: a tick stored ahead of the clock (set back since, a store from another
/// machine) must not hold the heartbeat off for that long.
fn first_tick(last: Option<Duration>, now: Duration, every: Duration) -> Duration {
    match last {
        Some(last) => (last + every).saturating_sub(now).min(every),
        None => every,
    }
}

/// `Tree::Meta` key of the chat the heartbeat's `last` target names: written by each turn
/// that counts (see `agent::turn`), moved with its chat.
pub const LAST_ACTIVE: &[u8] = b"last_active";

/// `Tree::Meta` key of the last tick's wall-clock time (ms since the epoch, big-endian u64).
const LAST_TICK: &[u8] = b"heartbeat_last_tick";

/// The heartbeat producer.
pub struct Heartbeat {
    store: Arc<dyn Store>,
    bus: Arc<Bus>,
    config: Arc<Config>,
    clock: Arc<dyn Clock>,
    model: Option<String>,
}

impl Heartbeat {
    pub fn new(
        store: Arc<dyn Store>,
        bus: Arc<Bus>,
        config: Arc<Config>,
        clock: Arc<dyn Clock>,
    ) -> Self {
        Self {
            store,
            bus,
            config,
            clock,
            model: None,
        }
    }

    /// The model heartbeat turns use instead of `llm.model` (`metadata.model`).
    pub fn with_model(mut self, model: Option<String>) -> Self {
        self.model = model.filter(|m| !m.trim().is_empty());
        self
    }

    /// Tick every `heartbeat.interval` until shutdown (no-op when disabled).
    pub fn start(self, shutdown: CancellationToken, tracker: &TaskTracker) {
        if !self.config.heartbeat.enabled {
            return;
        }
        tracker.spawn(async move { self.run(shutdown).await });
    }

    async fn run(self, shutdown: CancellationToken) {
        let every = self
            .config
            .heartbeat
            .interval
            .get()
            .max(Duration::from_secs(1));
        // The schedule goes on from the last tick of an earlier run: with restarts more
        // often than the interval (a nightly reboot, a daily one), it would never beat.
        let first = first_tick(self.last_tick(), self.since_epoch(), every);
        let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + first, every);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = ticks.tick() => {
                    let now = self.since_epoch().as_millis() as u64;
                    if let Err(e) = self.store.put(Tree::Meta, LAST_TICK, &now.to_be_bytes()) {
                        tracing::warn!("heartbeat: cannot note its tick: {e}");
                    }
                    let beat = self.beat().await;
                    tracing::debug!(?beat, "heartbeat");
                }
            }
        }
    }

    /// The wall clock, as time since the Unix epoch.
    fn since_epoch(&self) -> Duration {
        Duration::from_millis(self.clock.now().timestamp_millis().max(0) as u64)
    }

    /// When an earlier run last ticked (since the Unix epoch).
    fn last_tick(&self) -> Option<Duration> {
        let raw = self.store.get(Tree::Meta, LAST_TICK).ok()??;
        let ms = u64::from_be_bytes(raw.as_slice().try_into().ok()?);
        Some(Duration::from_millis(ms))
    }

    /// One tick: check hours, the file and the target, then publish at most one message.
    pub async fn beat(&self) -> Beat {
        let hb = &self.config.heartbeat;
        let now = self.clock.now();
        let local = now.with_timezone(&self.config.gateway.tz());
        if !in_active_hours(&hb.active_hours, local.hour() * 60 + local.minute()) {
            return Beat::OutsideActiveHours;
        }
        let ws = &self.config.gateway.workspace;
        // Not through a link out of the workspace (see `crate::confine`).
        let content = match crate::confine::read(ws, &ws.join(HEARTBEAT_FILE), MAX_READ, false) {
            Some(c) if is_actionable(&c) => c,
            _ => return Beat::NotActionable,
        };
        let key = match self.target() {
            Some(k) => k,
            None => return Beat::NoTarget,
        };
        // One heartbeat at a time, and never on top of a conversation in progress.
        if self.bus.is_running(&key) || self.bus.queued_for(&key) > 0 {
            return Beat::Busy(key);
        }
        let mut msg = InboundMessage::text(
            format!("heartbeat:{}", now.timestamp_millis()),
            key.clone(),
            Sender {
                id: "heartbeat".into(),
                username: None,
                display_name: "Heartbeat".into(),
                is_owner: false,
            },
            content,
        );
        msg.received_at = now;
        msg.origin = Origin::System(SystemOrigin::Heartbeat);
        if let Some(model) = &self.model {
            msg.metadata.insert("model".into(), model.clone().into());
        }
        match self.bus.publish(msg).await {
            Ok(_) => Beat::Published(key),
            Err(e) => Beat::Failed(e.to_string()),
        }
    }

    fn target(&self) -> Option<ChatKey> {
        let target = self.config.heartbeat.target.trim();
        let key: ChatKey = if target == "last" {
            let raw = self.store.get(Tree::Meta, LAST_ACTIVE).ok()??;
            let key: ChatKey = String::from_utf8(raw).ok()?.parse().ok()?;
            // Recorded by an older version: a beat there would reach nobody.
            (!crate::channels::answers_only(&key)).then_some(key)?
        } else {
            target.parse().ok()?
        };
        // No channel of that name runs (turned off, no token): nobody would read the beat.
        self.bus.outbox().has_channel(&key.channel).then_some(key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_tick_goes_on_from_the_last_and_never_waits_past_an_interval() {
        let (m, every) = (
            |n: u64| Duration::from_secs(60 * n),
            Duration::from_secs(1800),
        );
        assert_eq!(first_tick(None, m(1000), every), every);
        assert_eq!(first_tick(Some(m(990)), m(1000), every), m(20));
        assert_eq!(first_tick(Some(m(100)), m(1000), every), Duration::ZERO);
        // A tick a month ahead of the clock.
        assert_eq!(first_tick(Some(m(1000 + 43_200)), m(1000), every), every);
    }
}
