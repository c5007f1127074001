//! Unit tests of the per-conversation catch-up state.

use super::*;

fn msg<'a>(channel: &'a str, ts: &str, thread: Option<&str>, bot_thread: bool) -> Handled<'a> {
    Handled {
        channel,
        kind: Some("channel"),
        ts: Ts::new(ts),
        thread: thread.map(Ts::new),
        bot_thread,
    }
}

#[test]
fn timestamps_compare_by_value_not_as_text() {
    let mut v: Vec<Ts> = ["10.1", "9.5", "9.25", "1700000000.000100", "9.250001"]
        .into_iter()
        .map(Ts::new)
        .collect();
    v.sort();
    let got: Vec<&str> = v.iter().map(Ts::as_str).collect();
    assert_eq!(
        got,
        ["9.25", "9.250001", "9.5", "10.1", "1700000000.000100"]
    );
    assert!(Ts::new("9.2") == Ts::new("9.2"));
    assert!(Ts::new("9.2") < Ts::new("9.200001"));
}

#[test]
fn the_first_session_has_no_gap_and_later_ones_get_each_recent_conversation() {
    let recent = Recent::default();
    let t0 = Instant::now();
    assert!(recent.new_session(t0).is_empty());
    recent.handled(msg("C1", "10.5", None, false), t0);
    recent.handled(msg("C1", "9.5", None, false), t0);
    // A reply in a thread the bot is in is tracked; one in another thread is not.
    recent.handled(msg("C1", "11.0", Some("10.5"), true), t0);
    recent.handled(msg("C1", "11.5", Some("7.0"), false), t0);
    recent.handled(msg("C1", "12.0", Some("10.5"), false), t0);
    let later = t0 + Duration::from_secs(1);
    recent.handled(
        Handled {
            kind: Some("im"),
            ..msg("D1", "3.0", None, false)
        },
        later,
    );
    let gap = recent.new_session(later);
    assert_eq!(
        gap,
        vec![
            Gap {
                channel: "D1".into(),
                kind: Some("im".into()),
                last: Ts::new("3.0"),
                threads: vec![],
                session: 2,
            },
            Gap {
                channel: "C1".into(),
                kind: Some("channel".into()),
                last: Ts::new("12.0"),
                threads: vec![(Ts::new("10.5"), Ts::new("12.0"))],
                session: 2,
            },
        ]
    );
}

#[test]
fn the_state_file_carries_recent_conversations_across_a_restart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("slack-recent.json");
    let (t0, w0) = (Instant::now(), SystemTime::now());
    let fresh = Recent::default();
    fresh.load(&path, t0, w0);
    assert!(fresh.new_session(t0).is_empty(), "no file");

    let recent = Recent::default();
    recent.new_session(t0);
    recent.handled(msg("C1", "10.0", Some("10.0"), true), t0);
    recent.save(&path, t0, w0);
    assert!(!recent.changed());

    let (t1, w1) = (
        t0 + Duration::from_secs(3600),
        w0 + Duration::from_secs(3600),
    );
    let back = Recent::default();
    back.load(&path, t1, w1);
    let gap = back.new_session(t1);
    assert_eq!(gap.len(), 1);
    assert_eq!(gap[0].last, Ts::new("10.0"));
    assert_eq!(gap[0].threads, vec![(Ts::new("10.0"), Ts::new("10.0"))]);
    // Only the first session after a load gets it for nothing.
    assert_eq!(back.new_session(t1).len(), 1, "still remembered");

    // Two days later: too old to answer.
    let old = Recent::default();
    old.load(&path, t1, w0 + MAX_AGE * 2);
    assert!(old.new_session(t1).is_empty());

    // A damaged file is nothing remembered.
    std::fs::write(&path, b"{not json").expect("write");
    let damaged = Recent::default();
    damaged.load(&path, t1, w1);
    assert!(damaged.new_session(t1).is_empty());
}

#[test]
fn quiet_conversations_are_forgotten_and_the_map_is_bounded() {
    let recent = Recent::default();
    let t0 = Instant::now();
    recent.new_session(t0);
    recent.handled(msg("C0", "1.0", None, false), t0);
    for c in 1..=MAX_CONVERSATIONS {
        recent.handled(msg(&format!("C{c}"), "1.0", None, false), t0 + MAX_AGE);
    }
    assert_eq!(recent.inner().conversations.len(), MAX_CONVERSATIONS);
    assert!(!recent.inner().conversations.contains_key("C0"));
    let gap = recent.new_session(t0 + MAX_AGE * 2 + Duration::from_secs(1));
    assert!(gap.is_empty(), "a day quiet: {gap:?}");
    recent.handled(msg("C1", "2.0", None, false), t0);
    recent.forget("C1");
    assert!(recent.inner().conversations.is_empty());
}

#[test]
fn an_unfinished_catch_up_starts_again_where_it_did_until_it_succeeds() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("slack-recent.json");
    let (t0, w0) = (Instant::now(), SystemTime::now());
    let recent = Recent::default();
    recent.new_session(t0);
    recent.handled(msg("C1", "10.0", Some("10.0"), true), t0);
    let gap = recent.new_session(t0).remove(0);
    assert_eq!(gap.last, Ts::new("10.0"));
    // Failed; live messages come meanwhile, in the conversation and in the thread.
    recent.handled(msg("C1", "12.0", None, false), t0);
    recent.handled(msg("C1", "12.5", Some("10.0"), false), t0);
    recent.handled(msg("C1", "13.0", Some("13.0"), true), t0);
    let again = recent.unfinished("C1").expect("unfinished");
    assert_eq!(again.last, Ts::new("10.0"), "live messages moved the mark");
    assert_eq!(again.threads, vec![(Ts::new("10.0"), Ts::new("10.0"))]);
    // The next session starts there too, with the thread joined since from its last.
    let next = recent.new_session(t0).remove(0);
    assert_eq!(next.last, Ts::new("10.0"));
    assert_eq!(
        next.threads,
        vec![
            (Ts::new("10.0"), Ts::new("10.0")),
            (Ts::new("13.0"), Ts::new("13.0"))
        ]
    );
    // The older catch-up succeeding does not clear the newer one's mark.
    recent.finished(&gap);
    assert!(recent.unfinished("C1").is_some());

    // Across a restart, and from a file written before the mark existed.
    recent.save(&path, t0, w0);
    let back = Recent::default();
    back.load(&path, t0, w0);
    let gap = back.new_session(t0).remove(0);
    assert_eq!(gap.last, Ts::new("10.0"));
    back.finished(&gap);
    assert!(back.unfinished("C1").is_none());
    assert_eq!(back.new_session(t0)[0].last, Ts::new("13.0"));
    let old = r#"{"conversations":[{"channel":"C2","last":"5.0","at_ms":AT}]}"#
        .replace("AT", &unix_ms(w0).to_string());
    std::fs::write(&path, old).expect("write");
    let older = Recent::default();
    older.load(&path, t0, w0);
    assert_eq!(older.new_session(t0)[0].last, Ts::new("5.0"));
}
