//! Schedule parsing and next-run computation: `at`, `every`, 5- and 6-field cron with
//! timezones, Monday means Monday, daylight-saving gaps and repeats, and the messages of bad
//! input.

use chrono::{DateTime, Datelike, Timelike, Utc, Weekday};
use chrono_tz::Tz;
use switchboard::scheduler::{Schedule, ScheduleError, ScheduleSpec, next_after, parse_tz};

fn t(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
}

const BERLIN: Tz = chrono_tz::Europe::Berlin;

fn first(spec: ScheduleSpec, tz: Tz, now: DateTime<Utc>) -> DateTime<Utc> {
    let s = Schedule::parse(&spec, tz, now).unwrap();
    next_after(&s, tz, now).unwrap()
}

fn runs(expr: &str, tz: Tz, from: DateTime<Utc>, n: usize) -> Vec<DateTime<Utc>> {
    let s = Schedule::parse(&ScheduleSpec::Cron(expr.into()), tz, from).unwrap();
    let mut out = Vec::new();
    let mut after = from;
    for _ in 0..n {
        after = next_after(&s, tz, after).unwrap();
        out.push(after);
    }
    out
}

fn err(spec: ScheduleSpec, tz: &str) -> String {
    let now = t("2026-03-01T12:00:00Z");
    match parse_tz(tz).and_then(|tz| Schedule::parse(&spec, tz, now)) {
        Ok(s) => panic!("{spec:?} parsed as {s:?}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn at_relative() {
    let now = t("2026-03-01T12:00:00Z");
    let at = |s: &str| first(ScheduleSpec::At(s.into()), BERLIN, now);
    assert_eq!(at("in 10m"), t("2026-03-01T12:10:00Z"));
    assert_eq!(at("in 2h"), t("2026-03-01T14:00:00Z"));
    assert_eq!(at("in 2 hours"), t("2026-03-01T14:00:00Z"));
    assert_eq!(at("in 1h30m"), t("2026-03-01T13:30:00Z"));
    assert_eq!(at("In 90 seconds"), t("2026-03-01T12:01:30Z"));
    assert_eq!(at("in 1 hour and 5 Minutes"), t("2026-03-01T13:05:00Z"));
    assert_eq!(at("in 1h, 30m"), t("2026-03-01T13:30:00Z"));
}

#[test]
fn at_absolute_and_local() {
    let now = t("2026-03-01T12:00:00Z");
    let at = |s: &str, tz: Tz| first(ScheduleSpec::At(s.into()), tz, now);
    assert_eq!(
        at("2026-11-22T09:00:00+01:00", BERLIN),
        t("2026-11-22T08:00:00Z")
    );
    assert_eq!(
        at("2026-11-22T09:00:00Z", BERLIN),
        t("2026-11-22T09:00:00Z")
    );
    // With an offset but no seconds, as models write it.
    for s in [
        "2026-11-22T09:00+01:00",
        "2026-11-22 09:00+01:00",
        "2026-11-22T09:00+0100",
    ] {
        assert_eq!(at(s, chrono_tz::UTC), t("2026-11-22T08:00:00Z"), "{s}");
    }
    assert_eq!(at("2026-11-22T09:00Z", BERLIN), t("2026-11-22T09:00:00Z"));
    // Local times are read in the job's timezone (CET in November, CEST in July).
    assert_eq!(at("2026-11-22 09:00", BERLIN), t("2026-11-22T08:00:00Z"));
    assert_eq!(at("2026-07-01 09:00", BERLIN), t("2026-07-01T07:00:00Z"));
    assert_eq!(
        at("2026-11-22 09:00", chrono_tz::UTC),
        t("2026-11-22T09:00:00Z")
    );
    assert_eq!(at("tomorrow 09:00", BERLIN), t("2026-03-02T08:00:00Z"));
    assert_eq!(at("today 18:30", BERLIN), t("2026-03-01T17:30:00Z"));
    // A bare time is its next occurrence: 14:00 Berlin is 13:00Z (ahead), 09:00 is tomorrow.
    assert_eq!(at("14:00", BERLIN), t("2026-03-01T13:00:00Z"));
    assert_eq!(at("09:00", BERLIN), t("2026-03-02T08:00:00Z"));
    // One-shot: nothing after it has passed.
    let s = Schedule::parse(&ScheduleSpec::At("in 10m".into()), BERLIN, now).unwrap();
    assert!(!s.is_recurring());
    assert_eq!(next_after(&s, BERLIN, t("2026-03-01T12:10:00Z")), None);
}

#[test]
fn at_in_a_dst_gap_runs_at_the_end_of_the_gap() {
    let now = t("2026-03-01T12:00:00Z");
    // 02:30 does not exist in Berlin on 2026-03-29; 03:00 CEST (01:00Z) is the next instant.
    let got = first(ScheduleSpec::At("2026-03-29 02:30".into()), BERLIN, now);
    assert_eq!(got, t("2026-03-29T01:00:00Z"));
    // 02:30 occurs twice on 2026-10-25: the first one (CEST) is meant.
    let got = first(ScheduleSpec::At("2026-10-25 02:30".into()), BERLIN, now);
    assert_eq!(got, t("2026-10-25T00:30:00Z"));
}

#[test]
fn every_keeps_its_phase() {
    let now = t("2026-03-01T12:00:00Z");
    let s = Schedule::parse(&ScheduleSpec::Every("30m".into()), BERLIN, now).unwrap();
    assert!(s.is_recurring());
    assert_eq!(next_after(&s, BERLIN, now), Some(t("2026-03-01T12:30:00Z")));
    assert_eq!(
        next_after(&s, BERLIN, t("2026-03-01T12:30:00Z")),
        Some(t("2026-03-01T13:00:00Z"))
    );
    // Late by 7 minutes: the next run stays on the :00/:30 grid.
    assert_eq!(
        next_after(&s, BERLIN, t("2026-03-01T13:07:00Z")),
        Some(t("2026-03-01T13:30:00Z"))
    );
    let s = Schedule::parse(&ScheduleSpec::Every("1s".into()), BERLIN, now).unwrap();
    assert_eq!(next_after(&s, BERLIN, now), Some(t("2026-03-01T12:00:01Z")));
    let s = Schedule::parse(&ScheduleSpec::Every("2 hours".into()), BERLIN, now).unwrap();
    assert_eq!(next_after(&s, BERLIN, now), Some(t("2026-03-01T14:00:00Z")));
    // "1M" is no minute: a model meaning a month would get a reminder a minute.
    let e = Schedule::parse(&ScheduleSpec::Every("1M".into()), BERLIN, now).unwrap_err();
    assert!(e.to_string().contains("minutes or months"), "{e}");
    let e = Schedule::parse(&ScheduleSpec::At("in 1M".into()), BERLIN, now).unwrap_err();
    assert!(e.to_string().contains("minutes or months"), "{e}");
    let s = Schedule::parse(&ScheduleSpec::At("in 1m".into()), BERLIN, now).unwrap();
    assert_eq!(next_after(&s, BERLIN, now), Some(t("2026-03-01T12:01:00Z")));
}

#[test]
fn five_field_cron_in_timezones() {
    let from = t("2026-03-04T12:00:00Z"); // a Wednesday
    assert_eq!(
        runs("0 9 * * *", BERLIN, from, 2),
        vec![t("2026-03-05T08:00:00Z"), t("2026-03-06T08:00:00Z")]
    );
    assert_eq!(
        runs("0 9 * * *", chrono_tz::America::New_York, from, 1),
        vec![t("2026-03-04T14:00:00Z")]
    );
    // Summer time in both places.
    assert_eq!(
        runs("0 9 * * *", BERLIN, t("2026-07-01T12:00:00Z"), 1),
        vec![t("2026-07-02T07:00:00Z")]
    );
    assert_eq!(
        runs("*/15 * * * *", chrono_tz::UTC, from, 3),
        vec![
            t("2026-03-04T12:15:00Z"),
            t("2026-03-04T12:30:00Z"),
            t("2026-03-04T12:45:00Z")
        ]
    );
    assert_eq!(
        runs("30 8 1 JAN *", chrono_tz::UTC, from, 1),
        vec![t("2027-01-01T08:30:00Z")]
    );
    assert_eq!(
        runs("@daily", chrono_tz::UTC, from, 1),
        vec![t("2026-03-05T00:00:00Z")]
    );
}

#[test]
fn six_field_cron_has_seconds_first() {
    let from = t("2026-03-04T12:00:00Z");
    assert_eq!(
        runs("30 0 9 * * MON-FRI", BERLIN, from, 2),
        vec![t("2026-03-05T08:00:30Z"), t("2026-03-06T08:00:30Z")]
    );
    assert_eq!(
        runs("*/10 * * * * *", chrono_tz::UTC, from, 2),
        vec![t("2026-03-04T12:00:10Z"), t("2026-03-04T12:00:20Z")]
    );
}

#[test]
fn monday_means_monday() {
    let from = t("2026-03-04T12:00:00Z");
    for expr in ["0 9 * * 1", "0 9 * * MON", "0 9 * * mon", "0 0 9 * * 1"] {
        for r in runs(expr, BERLIN, from, 4) {
            let local = r.with_timezone(&BERLIN);
            assert_eq!(local.weekday(), Weekday::Mon, "{expr}: {local}");
            assert_eq!((local.hour(), local.minute()), (9, 0), "{expr}");
        }
    }
    assert_eq!(
        runs("0 9 * * 1", BERLIN, from, 1),
        vec![t("2026-03-09T08:00:00Z")]
    );
    for expr in ["0 9 * * 0", "0 9 * * 7", "0 9 * * SUN"] {
        for r in runs(expr, BERLIN, from, 3) {
            assert_eq!(r.with_timezone(&BERLIN).weekday(), Weekday::Sun, "{expr}");
        }
    }
    for r in runs("0 9 * * MON-FRI", BERLIN, from, 15) {
        let wd = r.with_timezone(&BERLIN).weekday();
        assert!(!matches!(wd, Weekday::Sat | Weekday::Sun), "{wd}");
    }
    let wd: Vec<Weekday> = runs("0 9 * * 1-5", BERLIN, from, 5)
        .iter()
        .map(|r| r.with_timezone(&BERLIN).weekday())
        .collect();
    assert_eq!(
        wd,
        [
            Weekday::Thu,
            Weekday::Fri,
            Weekday::Mon,
            Weekday::Tue,
            Weekday::Wed
        ]
    );
    let wd: Vec<Weekday> = runs("0 9 * * 5-7", BERLIN, from, 3)
        .iter()
        .map(|r| r.with_timezone(&BERLIN).weekday())
        .collect();
    assert_eq!(wd, [Weekday::Fri, Weekday::Sat, Weekday::Sun]);
}

#[test]
fn day_of_month_or_weekday_like_crontab() {
    // crontab: both day fields restricted means either matches (the 1st, or any Monday).
    let got = runs("0 9 1 * 1", chrono_tz::UTC, t("2026-03-25T12:00:00Z"), 3);
    assert_eq!(
        got,
        vec![
            t("2026-03-30T09:00:00Z"),
            t("2026-04-01T09:00:00Z"),
            t("2026-04-06T09:00:00Z")
        ]
    );
    // A day field starting with `*` does not count as restricted: both must match (odd
    // days of the month that are Mondays).
    let got = runs("0 9 */2 * 1", chrono_tz::UTC, t("2026-03-25T12:00:00Z"), 2);
    assert_eq!(
        got,
        vec![t("2026-04-13T09:00:00Z"), t("2026-04-27T09:00:00Z")]
    );
}

#[test]
fn dst_spring_forward_runs_once_at_the_next_valid_instant() {
    // Europe/Berlin 2026-03-29: 02:00 CET jumps to 03:00 CEST; 02:30 does not exist.
    let got = runs("30 2 * * *", BERLIN, t("2026-03-28T12:00:00Z"), 3);
    assert_eq!(
        got,
        vec![
            t("2026-03-29T01:00:00Z"), // 03:00 CEST, once
            t("2026-03-30T00:30:00Z"), // 02:30 CEST
            t("2026-03-31T00:30:00Z"),
        ]
    );
    // A wildcard job has no runs inside the gap (Vixie cron): 03:00 is its own next slot.
    let got = runs("*/20 * * * *", BERLIN, t("2026-03-29T00:30:00Z"), 4);
    assert_eq!(
        got,
        vec![
            t("2026-03-29T00:40:00Z"), // 01:40 CET
            t("2026-03-29T01:00:00Z"), // 03:00 CEST (02:00, 02:20, 02:40 do not exist)
            t("2026-03-29T01:20:00Z"),
            t("2026-03-29T01:40:00Z"),
        ]
    );
}

#[test]
fn dst_fall_back_runs_a_repeated_time_once() {
    // Europe/Berlin 2026-10-25: 03:00 CEST goes back to 02:00 CET; 02:30 happens twice.
    let got = runs("30 2 * * *", BERLIN, t("2026-10-24T12:00:00Z"), 3);
    assert_eq!(
        got,
        vec![
            t("2026-10-25T00:30:00Z"), // 02:30 CEST, the first one only
            t("2026-10-26T01:30:00Z"), // 02:30 CET the next day
            t("2026-10-27T01:30:00Z"),
        ]
    );
}

#[test]
fn invalid_inputs_say_what_to_do() {
    let e = err(ScheduleSpec::Cron("".into()), "UTC");
    assert!(e.contains("the schedule is empty"), "{e}");
    let e = err(ScheduleSpec::At("  ".into()), "UTC");
    assert!(e.contains("the schedule is empty"), "{e}");
    let e = err(ScheduleSpec::Cron("* * *".into()), "UTC");
    assert!(
        e.contains("invalid cron expression") && e.contains("expected 5 fields"),
        "{e}"
    );
    let e = err(ScheduleSpec::Cron("61 * * * *".into()), "UTC");
    assert!(e.contains("invalid cron expression \"61 * * * *\""), "{e}");
    let e = err(ScheduleSpec::Cron("0 9 * * 8".into()), "UTC");
    assert!(e.contains("8 is not a weekday"), "{e}");
    let e = err(ScheduleSpec::Cron("0 9 * * MOON".into()), "UTC");
    assert!(e.contains("\"MOON\" is not a weekday"), "{e}");
    let e = err(ScheduleSpec::Cron("0 0 30 2 *".into()), "UTC");
    assert!(e.contains("never fires"), "{e}");
    let e = err(ScheduleSpec::Cron("0 9 * * *".into()), "Europe/Berlinn");
    assert_eq!(
        e,
        "unknown timezone \"Europe/Berlinn\" (did you mean \"Europe/Berlin\"?): use an IANA name like \"Europe/Berlin\""
    );
    let e = err(ScheduleSpec::Cron("0 9 * * *".into()), "Mars/Olympus");
    assert!(
        e.starts_with("unknown timezone \"Mars/Olympus\": use an IANA name"),
        "{e}"
    );
    let e = err(ScheduleSpec::Every("500ms".into()), "UTC");
    assert_eq!(e, "`every` must be at least 1s, got \"500ms\"");
    let e = err(ScheduleSpec::Every("0s".into()), "UTC");
    assert!(e.contains("at least 1s"), "{e}");
    let e = err(ScheduleSpec::Every("often".into()), "UTC");
    assert!(e.contains("expected a duration like"), "{e}");
    // The error quotes what was written, not a rewritten form of it.
    let e = err(ScheduleSpec::Every("an hour".into()), "UTC");
    assert!(e.ends_with("got \"an hour\""), "{e}");
    let e = err(ScheduleSpec::At("2020-01-01T00:00:00Z".into()), "UTC");
    assert!(e.contains("is in the past"), "{e}");
    let e = err(ScheduleSpec::At("2026-03-01 12:59".into()), "Europe/Berlin");
    assert!(
        e.contains("2026-03-01 12:59 CET is in the past (it is now 2026-03-01 13:00 CET)"),
        "{e}"
    );
    let e = err(ScheduleSpec::At("next blue moon".into()), "UTC");
    assert!(
        e.contains("cannot read \"next blue moon\" as a time") && e.contains("in 10m"),
        "{e}"
    );
    assert!(matches!(
        Schedule::parse(
            &ScheduleSpec::Every("1ms".into()),
            chrono_tz::UTC,
            t("2026-03-01T12:00:00Z")
        ),
        Err(ScheduleError::TooShort(_))
    ));
}
