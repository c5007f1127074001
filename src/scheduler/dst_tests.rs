//! Daylight-saving transitions for every schedule kind: crontab jobs follow Vixie cron's
//! rules (see [`super::crontab`]), `every` and `at` are real durations and instants.
//!
//! Transitions used: Europe/Berlin 2026-03-29 (02:00 CET → 03:00 CEST) and 2026-10-25
//! (03:00 CEST → 02:00 CET); America/New_York 2026-03-08 (02:00 EST → 03:00 EDT) and
//! 2026-11-01 (02:00 EDT → 01:00 EST).

use chrono::{DateTime, Utc};
use chrono_tz::Tz;

use super::crontab::CronExpr;
use super::schedule::{Schedule, ScheduleSpec, next_after};

const BERLIN: Tz = chrono_tz::Europe::Berlin;
const NEW_YORK: Tz = chrono_tz::America::New_York;

fn t(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
}

/// Local times (`HH:MM ZONE`) of the runs strictly after `from` up to `until` (inclusive).
fn runs(expr: &str, tz: Tz, from: &str, until: &str) -> Vec<String> {
    let cron = CronExpr::parse(expr).unwrap();
    let until = t(until);
    let mut out = Vec::new();
    let mut after = t(from);
    while let Some(next) = cron.next_after(tz, after).filter(|n| *n <= until) {
        assert!(next > after, "{expr}: {next} is not after {after}");
        out.push(next.with_timezone(&tz).format("%H:%M %Z").to_string());
        after = next;
    }
    out
}

fn next(expr: &str, tz: Tz, after: &str) -> DateTime<Utc> {
    CronExpr::parse(expr)
        .unwrap()
        .next_after(tz, t(after))
        .unwrap()
}

#[test]
fn fall_back_wildcard_jobs_fire_in_both_repeated_hours() {
    // 02:00–02:59 happens twice in Berlin: once in CEST, then again in CET.
    let got = runs(
        "*/15 * * * *",
        BERLIN,
        "2026-10-24T23:40:00Z",
        "2026-10-25T02:15:00Z",
    );
    let want = [
        "01:45 CEST",
        "02:00 CEST",
        "02:15 CEST",
        "02:30 CEST",
        "02:45 CEST",
        "02:00 CET",
        "02:15 CET",
        "02:30 CET",
        "02:45 CET",
        "03:00 CET",
        "03:15 CET",
    ];
    assert_eq!(got, want);
    // Hourly: 01:00 happens twice in New York.
    let got = runs(
        "0 * * * *",
        NEW_YORK,
        "2026-11-01T03:30:00Z",
        "2026-11-01T07:00:00Z",
    );
    assert_eq!(got, ["00:00 EDT", "01:00 EDT", "01:00 EST", "02:00 EST"]);
    assert_eq!(
        runs(
            "@hourly",
            NEW_YORK,
            "2026-11-01T04:30:00Z",
            "2026-11-01T06:30:00Z"
        ),
        ["01:00 EDT", "01:00 EST"]
    );
    // A starred minute makes a job a wildcard job even with a fixed hour (Vixie cron).
    assert_eq!(
        runs(
            "*/30 2 * * *",
            BERLIN,
            "2026-10-24T12:00:00Z",
            "2026-10-25T12:00:00Z"
        ),
        ["02:00 CEST", "02:30 CEST", "02:00 CET", "02:30 CET"]
    );
    // Seconds count too in the 6-field form.
    assert_eq!(
        runs(
            "0 */30 * * * *",
            BERLIN,
            "2026-10-25T00:15:00Z",
            "2026-10-25T01:45:00Z"
        ),
        ["02:30 CEST", "02:00 CET", "02:30 CET"]
    );
}

#[test]
fn fall_back_next_run_from_inside_either_repeated_hour() {
    // From the first 02:10 (CEST), the next is 02:15 CEST, not a second-hour time.
    assert_eq!(
        next("*/15 * * * *", BERLIN, "2026-10-25T00:10:00Z"),
        t("2026-10-25T00:15:00Z")
    );
    // From the last slot of the first hour, the repeat comes next.
    assert_eq!(
        next("*/15 * * * *", BERLIN, "2026-10-25T00:45:00Z"),
        t("2026-10-25T01:00:00Z")
    );
    // From the second 02:10 (CET), the next is 02:15 CET.
    assert_eq!(
        next("*/15 * * * *", BERLIN, "2026-10-25T01:10:00Z"),
        t("2026-10-25T01:15:00Z")
    );
    // Every second, across the moment the clocks go back.
    assert_eq!(
        next("* * * * * *", BERLIN, "2026-10-25T00:59:59Z"),
        t("2026-10-25T01:00:00Z")
    );
}

#[test]
fn fall_back_fixed_time_jobs_fire_once_at_the_first_occurrence() {
    let got = runs(
        "30 2 * * *",
        BERLIN,
        "2026-10-24T12:00:00Z",
        "2026-10-26T12:00:00Z",
    );
    assert_eq!(got, ["02:30 CEST", "02:30 CET"]); // the second is 2026-10-26's
    // Asked from inside the repeated hour (a late run, a restart), the second 02:30 is not a
    // new run: the first one has passed, so the next is tomorrow's.
    assert_eq!(
        next("30 2 * * *", BERLIN, "2026-10-25T01:10:00Z"),
        t("2026-10-26T01:30:00Z")
    );
    assert_eq!(
        next("30 2 * * *", BERLIN, "2026-10-25T00:40:00Z"),
        t("2026-10-26T01:30:00Z")
    );
    // A list of hours is not a wildcard: 02:00 runs once.
    assert_eq!(
        runs(
            "0 1-3 * * *",
            BERLIN,
            "2026-10-24T22:00:00Z",
            "2026-10-25T03:00:00Z"
        ),
        ["01:00 CEST", "02:00 CEST", "03:00 CET"]
    );
    assert_eq!(
        runs(
            "30 1 * * *",
            NEW_YORK,
            "2026-11-01T00:00:00Z",
            "2026-11-02T12:00:00Z"
        ),
        ["01:30 EDT", "01:30 EST"] // the second is 2026-11-02's
    );
    assert_eq!(
        next("30 1 * * *", NEW_YORK, "2026-11-01T06:10:00Z"),
        t("2026-11-02T06:30:00Z")
    );
}

#[test]
fn spring_forward_wildcard_jobs_have_no_runs_in_the_gap() {
    // 02:05 does not exist: the hourly job goes from 01:05 CET to 03:05 CEST, nothing at 03:00.
    let got = runs(
        "5 * * * *",
        BERLIN,
        "2026-03-28T23:30:00Z",
        "2026-03-29T02:30:00Z",
    );
    assert_eq!(got, ["01:05 CET", "03:05 CEST", "04:05 CEST"]);
    let got = runs(
        "*/20 * * * *",
        NEW_YORK,
        "2026-03-08T06:30:00Z",
        "2026-03-08T07:30:00Z",
    );
    assert_eq!(got, ["01:40 EST", "03:00 EDT", "03:20 EDT"]);
    // Every 10 minutes of the 2 o'clock hour: that hour does not exist on the day.
    let got = runs(
        "*/10 2 * * *",
        BERLIN,
        "2026-03-28T12:00:00Z",
        "2026-03-30T12:00:00Z",
    );
    assert_eq!(got.len(), 6, "{got:?}");
    assert!(
        got.iter()
            .all(|l| l.starts_with("02:") && l.ends_with("CEST"))
    );
    assert_eq!(
        next("*/10 2 * * *", BERLIN, "2026-03-28T12:00:00Z"),
        t("2026-03-30T00:00:00Z")
    );
}

#[test]
fn spring_forward_fixed_time_jobs_run_once_when_the_gap_ends() {
    let got = runs(
        "30 2 * * *",
        BERLIN,
        "2026-03-28T12:00:00Z",
        "2026-03-30T12:00:00Z",
    );
    assert_eq!(got, ["03:00 CEST", "02:30 CEST"]);
    // Two skipped times collapse into one run, and a 03:00 run is not doubled.
    let got = runs(
        "0,30 2,3 * * *",
        BERLIN,
        "2026-03-28T23:00:00Z",
        "2026-03-29T02:00:00Z",
    );
    assert_eq!(got, ["03:00 CEST", "03:30 CEST"]);
    assert_eq!(
        next("30 2 * * *", NEW_YORK, "2026-03-08T06:00:00Z"),
        t("2026-03-08T07:00:00Z") // 03:00 EDT
    );
}

#[test]
fn every_and_at_are_real_durations_and_instants() {
    let tz = BERLIN;
    let now = t("2026-10-24T23:30:00Z"); // 01:30 CEST
    let every = Schedule::parse(&ScheduleSpec::Every("30m".into()), tz, now).unwrap();
    let mut after = now;
    let mut got = Vec::new();
    for _ in 0..5 {
        after = next_after(&every, tz, after).unwrap();
        got.push(after);
    }
    // Every 30 real minutes, through the repeated hour.
    let want: Vec<_> = (1..=5)
        .map(|i| now + chrono::Duration::minutes(30 * i))
        .collect();
    assert_eq!(got, want);
    let now = t("2026-03-29T00:30:00Z"); // 01:30 CET
    let every = Schedule::parse(&ScheduleSpec::Every("1h".into()), tz, now).unwrap();
    assert_eq!(next_after(&every, tz, now), Some(t("2026-03-29T01:30:00Z"))); // 03:30 CEST
    assert_eq!(
        next_after(&every, tz, t("2026-03-29T01:30:00Z")),
        Some(t("2026-03-29T02:30:00Z"))
    );
    // `at` is one instant: an RFC 3339 time is what it says, a relative one counts real time.
    let at = Schedule::parse(
        &ScheduleSpec::At("2026-10-25T02:30:00+01:00".into()),
        tz,
        now,
    )
    .unwrap();
    assert_eq!(
        next_after(&at, tz, t("2026-10-25T00:45:00Z")),
        Some(t("2026-10-25T01:30:00Z"))
    );
    let now = t("2026-10-25T00:50:00Z"); // 02:50 CEST
    let at = Schedule::parse(&ScheduleSpec::At("in 30m".into()), tz, now).unwrap();
    assert_eq!(next_after(&at, tz, now), Some(t("2026-10-25T01:20:00Z"))); // 02:20 CET
}
