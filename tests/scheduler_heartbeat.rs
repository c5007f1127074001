//! The heartbeat: actionable-content and `HEARTBEAT_OK` tables, active hours, and what
//! reaches the bus (nothing without actionable content or outside active hours; one
//! `System(Heartbeat)` message to the last active chat otherwise).

mod scheduler_support;

use std::sync::Arc;
use std::time::Duration;

use scheduler_support::{Rig, at, key};
use switchboard::config::{Config, DurationStr};
use switchboard::scheduler::heartbeat::in_active_hours;
use switchboard::scheduler::{
    Beat, Heartbeat, TokioClock, is_actionable, suppress_reply, without_token,
};
use switchboard::store::Tree;
use switchboard_channel::{InboundMessage, Origin, Sender, SystemOrigin};
use tokio::sync::Notify;

#[test]
fn actionable_content_table() {
    let cases: &[(&str, bool)] = &[
        ("", false),
        ("\n\n   \n", false),
        ("# Heartbeat", false),
        ("# Heartbeat\n\n## Today\n", false),
        ("<!-- check the inbox every morning -->", false),
        ("# Tasks\n<!--\n- water the plants\n-->\n", false),
        ("- [ ]", false),
        ("# Tasks\n- [ ]\n* [ ]\n+ [x]\n-\n1. [ ]\n", false),
        ("- water the plants", true),
        ("# Tasks\n- [ ] water the plants", true),
        ("# Tasks\n\nRemind me about the dentist.", true),
        ("## Daily\n* check the build", true),
        ("1. call the bank", true),
        ("#hashtag is text, not a heading", true),
        ("<!-- comment --> but this is text", true),
        ("Heartbeat\n=========\n\nToday\n-----\n", false),
        ("# Tasks\n\n---\n\n* * *\n___\n", false),
        ("Heartbeat\n=========\nwater the plants", true),
        // A list item over a rule is an item, not a heading.
        ("# Heartbeat\n- Water the plants\n---\n", true),
        ("# Tasks\n1. Call mom\n---\n## Later", true),
        // A byte-order mark (Notepad's UTF-8) is not content.
        ("\u{feff}# Heartbeat\n", false),
        ("\u{feff}<!-- nothing yet -->\n", false),
        ("\u{feff}- water the plants", true),
        // Ticked items are done; quoted lines are read as they would be unquoted.
        ("# Done\n- [x] Paid rent\n* [X] called the bank\n", false),
        ("- [x] Paid rent\n- [ ] book the dentist", true),
        (">\n> # Notes\n> - [ ]\n", false),
        ("> remember the milk", true),
    ];
    for (md, expect) in cases {
        assert_eq!(is_actionable(md), *expect, "{md:?}");
    }
}

#[test]
fn heartbeat_ok_suppression_table() {
    let long = format!("{} HEARTBEAT_OK", "x".repeat(300));
    let cases: &[(&str, bool)] = &[
        ("HEARTBEAT_OK", true),
        ("  HEARTBEAT_OK\n", true),
        ("**HEARTBEAT_OK**", true),
        ("HEARTBEAT_OK — nothing to do right now.", true),
        ("All quiet today. HEARTBEAT_OK", true),
        ("All quiet today. HEARTBEAT_OK.", true),
        ("\"HEARTBEAT_OK\"", true),
        ("`HEARTBEAT_OK`", true),
        ("Don't forget: the dentist is at 15:00.", false),
        ("The word HEARTBEAT_OK in the middle does not count", false),
        (long.as_str(), false),
        ("", false),
    ];
    for (reply, expect) in cases {
        assert_eq!(suppress_reply(reply), *expect, "{reply:?}");
    }
}

#[test]
fn a_delivered_heartbeat_reply_loses_the_token_at_its_ends() {
    let rent = format!("Rent is due tomorrow. {}", "Pay it! ".repeat(40));
    let cases = [
        (format!("{rent} HEARTBEAT_OK"), rent.trim_end().to_string()),
        (
            format!("{rent}\n\n**HEARTBEAT_OK**"),
            rent.trim_end().to_string(),
        ),
        (
            format!("HEARTBEAT_OK — {rent}"),
            rent.trim_end().to_string(),
        ),
        (
            "The word HEARTBEAT_OK in the middle stays".to_string(),
            "The word HEARTBEAT_OK in the middle stays".to_string(),
        ),
        (
            "**Rent** is due.".to_string(),
            "**Rent** is due.".to_string(),
        ),
    ];
    for (reply, expect) in cases {
        assert!(!suppress_reply(&reply), "{reply:?}");
        assert_eq!(without_token(&reply), expect, "{reply:?}");
    }
}

#[test]
fn active_hours_table() {
    let m = |h: u32, min: u32| h * 60 + min;
    assert!(in_active_hours("", m(3, 0)));
    assert!(in_active_hours("08:00-22:00", m(8, 0)));
    assert!(in_active_hours("08:00-22:00", m(21, 59)));
    assert!(!in_active_hours("08:00-22:00", m(22, 0)));
    assert!(!in_active_hours("08:00-22:00", m(7, 59)));
    // Across midnight.
    assert!(in_active_hours("22:00-06:00", m(23, 30)));
    assert!(in_active_hours("22:00-06:00", m(2, 0)));
    assert!(!in_active_hours("22:00-06:00", m(12, 0)));
    assert!(in_active_hours("00:00-24:00", m(23, 59)));
}

fn config(workspace: &std::path::Path, active_hours: &str) -> Config {
    let mut c = Config::default();
    c.gateway.workspace = workspace.to_path_buf();
    c.gateway.timezone = "Europe/Berlin".into();
    c.heartbeat.active_hours = active_hours.into();
    c.heartbeat.interval = DurationStr::secs(30 * 60);
    c
}

fn heartbeat(rig: &Rig, model: Option<&str>) -> Heartbeat {
    Heartbeat::new(
        rig.store.clone(),
        rig.bus.clone(),
        rig.config.clone(),
        rig.clock.clone(),
    )
    .with_model(model.map(String::from))
}

fn mark_active(rig: &Rig) {
    rig.store
        .put(Tree::Meta, b"last_active", key().to_string().as_bytes())
        .unwrap();
}

#[tokio::test(start_paused = true)]
async fn an_actionable_file_goes_to_the_last_active_chat() {
    let dir = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(
        ws.path().join("HEARTBEAT.md"),
        "# Tasks\n- remind me to drink water\n",
    )
    .unwrap();
    // 10:00 in Berlin (09:00Z), inside 08:00-22:00.
    let rig = Rig::start(
        dir.path(),
        at("2026-03-02T09:00:00Z"),
        config(ws.path(), "08:00-22:00"),
    )
    .await;
    let hb = heartbeat(&rig, Some("cheap-model"));
    assert_eq!(hb.beat().await, Beat::NoTarget, "no chat active yet");
    // An API chat recorded as the last one (by an older version) is no target either.
    rig.store
        .put(Tree::Meta, b"last_active", b"api:alice")
        .unwrap();
    assert_eq!(
        hb.beat().await,
        Beat::NoTarget,
        "an API chat cannot be reached"
    );
    // Nor a chat of a channel that is not running (switched off, or no token).
    rig.store
        .put(Tree::Meta, b"last_active", b"discord:123")
        .unwrap();
    assert_eq!(hb.beat().await, Beat::NoTarget, "discord is not running");
    mark_active(&rig);
    assert_eq!(hb.beat().await, Beat::Published(key()));

    assert!(rig.handler.wait_for(1, Duration::from_secs(10)).await);
    let (msg, _) = rig.handler.received().remove(0);
    assert_eq!(msg.key, key());
    assert_eq!(msg.origin, Origin::System(SystemOrigin::Heartbeat));
    assert_eq!(msg.text, "# Tasks\n- remind me to drink water\n");
    assert_eq!(
        msg.metadata.get("model").and_then(|v| v.as_str()),
        Some("cheap-model")
    );
    // The (stub) agent's reply is delivered to the chat.
    rig.channel.wait_for(1, Duration::from_secs(10)).await;
    assert!(rig.channel.sent()[0].text.contains("drink water"));
    rig.stop().await;
}

#[tokio::test(start_paused = true)]
async fn nothing_is_published_without_actionable_content_or_outside_active_hours() {
    let dir = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    // 23:30 in Berlin: outside 08:00-22:00.
    let rig = Rig::start(
        dir.path(),
        at("2026-03-02T22:30:00Z"),
        config(ws.path(), "08:00-22:00"),
    )
    .await;
    mark_active(&rig);
    let hb = heartbeat(&rig, None);
    assert_eq!(hb.beat().await, Beat::OutsideActiveHours);
    drop(hb); // it holds the store; the restart below reopens it
    rig.stop().await;

    let rig = Rig::start(
        dir.path(),
        at("2026-03-02T09:00:00Z"),
        config(ws.path(), "08:00-22:00"),
    )
    .await;
    let hb = heartbeat(&rig, None);
    assert_eq!(
        hb.beat().await,
        Beat::NotActionable,
        "no HEARTBEAT.md at all"
    );
    std::fs::write(
        ws.path().join("HEARTBEAT.md"),
        "# Heartbeat\n<!-- add tasks here -->\n- [ ]\n",
    )
    .unwrap();
    assert_eq!(hb.beat().await, Beat::NotActionable);
    assert!(
        !rig.handler.wait_for(1, Duration::from_secs(60)).await,
        "no turn, so no LLM call"
    );
    assert!(rig.channel.sent().is_empty());
    rig.stop().await;
}

#[tokio::test(start_paused = true)]
async fn the_loop_ticks_only_inside_active_hours_and_skips_a_busy_chat() {
    let dir = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("HEARTBEAT.md"), "- check the calendar\n").unwrap();
    // 21:00 Berlin (20:00Z); active until 22:00: ticks at 21:30 and 22:00 → only 21:30 counts.
    let start = at("2026-03-02T20:00:00Z");
    let gate = Arc::new(Notify::new());
    let clock = Arc::new(TokioClock::starting_at(start));
    let rig = Rig::start_with(
        dir.path(),
        clock,
        config(ws.path(), "08:00-22:00"),
        Some(gate.clone()),
    )
    .await;
    mark_active(&rig);
    heartbeat(&rig, None).start(rig.shutdown.clone(), &rig.tracker);
    assert!(rig.handler.wait_for(1, Duration::from_secs(3 * 3600)).await);
    let (msg, seen) = rig.handler.received().remove(0);
    assert_eq!(msg.origin, Origin::System(SystemOrigin::Heartbeat));
    assert_eq!(seen, at("2026-03-02T20:30:00Z"));
    // While that turn runs (the gate is closed), a user message waits; later ticks are outside
    // the active hours anyway: nothing else arrives in the next 8 hours.
    gate.notify_one();
    assert!(!rig.handler.wait_for(2, Duration::from_secs(8 * 3600)).await);
    rig.stop().await;

    // A busy chat is skipped: a user turn is running when the heartbeat comes.
    let gate = Arc::new(Notify::new());
    let clock = Arc::new(TokioClock::starting_at(at("2026-03-03T09:00:00Z")));
    let rig = Rig::start_with(dir.path(), clock, config(ws.path(), ""), Some(gate.clone())).await;
    let user = InboundMessage::text("test:1", key(), Sender::default(), "hello");
    rig.bus.publish(user).await.unwrap();
    assert!(rig.handler.wait_for(1, Duration::from_secs(10)).await);
    assert!(rig.bus.is_running(&key()));
    assert_eq!(heartbeat(&rig, None).beat().await, Beat::Busy(key()));
    gate.notify_one();
    rig.stop().await;
}

/// The interval goes on across restarts: a gateway restarted more often than the interval
/// (a nightly reboot with a daily heartbeat) still beats.
#[tokio::test(start_paused = true)]
async fn the_schedule_goes_on_from_the_last_tick_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("HEARTBEAT.md"), "- check the calendar\n").unwrap();
    let start = |now: &str| {
        let clock = Arc::new(TokioClock::starting_at(at(now)));
        Rig::start_with(dir.path(), clock, config(ws.path(), ""), None)
    };
    let rig = start("2026-03-02T09:00:00Z").await;
    mark_active(&rig);
    heartbeat(&rig, None).start(rig.shutdown.clone(), &rig.tracker);
    assert!(rig.handler.wait_for(1, Duration::from_secs(3600)).await);
    assert_eq!(rig.handler.received()[0].1, at("2026-03-02T09:30:00Z"));
    rig.stop().await;

    // Back at 09:45: the next beat is at 10:00, half an hour after the last, not at 10:15.
    let rig = start("2026-03-02T09:45:00Z").await;
    heartbeat(&rig, None).start(rig.shutdown.clone(), &rig.tracker);
    assert!(rig.handler.wait_for(1, Duration::from_secs(3600)).await);
    assert_eq!(rig.handler.received()[0].1, at("2026-03-02T10:00:00Z"));
    rig.stop().await;

    // Back after a long time: the beat overdue comes at once.
    let rig = start("2026-03-03T09:00:00Z").await;
    heartbeat(&rig, None).start(rig.shutdown.clone(), &rig.tracker);
    assert!(rig.handler.wait_for(1, Duration::from_secs(3600)).await);
    assert_eq!(rig.handler.received()[0].1, at("2026-03-03T09:00:00Z"));
    rig.stop().await;
}
