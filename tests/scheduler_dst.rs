//! Cron jobs through clock changes, on the real engine under tokio's paused clock. Daylight
//! saving: when clocks go back, a wildcard job runs in both copies of the repeated hour and a
//! fixed-time job once; when they go forward, a fixed-time job in the gap runs once when it
//! ends. A system clock set ahead and put right: recurring jobs keep their schedule, in the
//! same run and after a restart.

mod scheduler_support;

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use scheduler_support::{Rig, at, key};
use switchboard::config::Config;
use switchboard::scheduler::{NewJob, ScheduleSpec, TokioClock};

const HOUR: Duration = Duration::from_secs(3600);
const MINUTE: Duration = Duration::from_secs(60);
const BERLIN: chrono_tz::Tz = chrono_tz::Europe::Berlin;

fn berlin_job(expr: &str, message: &str) -> NewJob {
    let mut new = NewJob::new(key(), message, ScheduleSpec::Cron(expr.into()), "cli");
    new.tz = Some("Europe/Berlin".into());
    new
}

/// What fired and when, in Berlin time, sorted (jobs due together fire in either order).
fn fired(rig: &Rig, n: usize) -> Vec<(String, String)> {
    let mut got: Vec<(DateTime<Utc>, String)> = rig
        .handler
        .received()
        .into_iter()
        .take(n)
        .map(|(m, seen)| (seen, m.text))
        .collect();
    got.sort();
    got.into_iter()
        .map(|(seen, text)| {
            let local = seen.with_timezone(&BERLIN).format("%H:%M %Z").to_string();
            (text, local)
        })
        .collect()
}

fn pairs(want: &[(&str, &str)]) -> Vec<(String, String)> {
    want.iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect()
}

#[tokio::test(start_paused = true)]
async fn when_clocks_go_back_a_wildcard_job_runs_in_both_hours_and_a_fixed_one_once() {
    let dir = tempfile::tempdir().unwrap();
    // 2026-10-25 02:20 CEST; at 03:00 CEST the clocks go back to 02:00 CET.
    let rig = Rig::start(dir.path(), at("2026-10-25T00:20:00Z"), Config::default()).await;
    rig.add(berlin_job("*/15 * * * *", "quarter")).await;
    let daily = rig.add(berlin_job("30 2 * * *", "daily")).await;

    // Up to 03:00 CET: 7 quarters and one daily.
    assert!(
        rig.handler.wait_for(8, 2 * HOUR).await,
        "{:?}",
        fired(&rig, 8)
    );
    let want = [
        ("daily", "02:30 CEST"),
        ("quarter", "02:30 CEST"),
        ("quarter", "02:45 CEST"),
        ("quarter", "02:00 CET"),
        ("quarter", "02:15 CET"),
        ("quarter", "02:30 CET"),
        ("quarter", "02:45 CET"),
        ("quarter", "03:00 CET"),
    ];
    assert_eq!(fired(&rig, 8), pairs(&want));
    let stored = rig.scheduler.get(&daily.id).unwrap().unwrap();
    assert_eq!(stored.runs.len(), 1);
    assert_eq!(stored.next_run, Some(at("2026-10-26T01:30:00Z")));
    rig.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_fixed_time_run_caught_up_in_the_repeated_hour_is_not_repeated() {
    let dir = tempfile::tempdir().unwrap();
    let rig = Rig::start(dir.path(), at("2026-10-25T00:20:00Z"), Config::default()).await;
    let daily = rig.add(berlin_job("30 2 * * *", "daily")).await;
    assert_eq!(daily.next_run, Some(at("2026-10-25T00:30:00Z")));
    rig.stop().await;

    // Down over the first 02:30, back at 02:10 CET: the missed run fires once now, and the
    // second 02:30 is not another run.
    let rig = Rig::start(dir.path(), at("2026-10-25T01:10:00Z"), Config::default()).await;
    assert!(rig.handler.wait_for(1, HOUR).await);
    assert!(
        !rig.handler.wait_for(2, 2 * HOUR).await,
        "{:?}",
        fired(&rig, 2)
    );
    let stored = rig.scheduler.get(&daily.id).unwrap().unwrap();
    assert_eq!(stored.runs.len(), 1);
    assert_eq!(stored.next_run, Some(at("2026-10-26T01:30:00Z")));
    rig.stop().await;
}

#[tokio::test(start_paused = true)]
async fn when_clocks_go_forward_a_fixed_time_in_the_gap_runs_once_when_it_ends() {
    let dir = tempfile::tempdir().unwrap();
    // 2026-03-29 01:00 CET; at 02:00 CET the clocks go forward to 03:00 CEST.
    let rig = Rig::start(dir.path(), at("2026-03-29T00:00:00Z"), Config::default()).await;
    rig.add(berlin_job("30 2 * * *", "daily")).await;
    rig.add(berlin_job("10 * * * *", "hourly")).await;

    assert!(
        rig.handler.wait_for(3, 2 * HOUR).await,
        "{:?}",
        fired(&rig, 3)
    );
    let want = [
        ("hourly", "01:10 CET"),
        ("daily", "03:00 CEST"),
        ("hourly", "03:10 CEST"),
    ];
    assert_eq!(fired(&rig, 3), pairs(&want));
    rig.stop().await;
}

/// The tokio-following clock, plus an offset a test can change: a system clock set wrong
/// and put right.
struct JumpingClock {
    base: TokioClock,
    offset: std::sync::Mutex<chrono::Duration>,
}

impl switchboard::scheduler::Clock for JumpingClock {
    fn now(&self) -> chrono::DateTime<chrono::Utc> {
        self.base.now() + *self.offset.lock().unwrap()
    }
}

/// A clock reading `start` plus `offset` (changeable), following tokio's.
fn jumping(start: &str, offset: chrono::Duration) -> Arc<JumpingClock> {
    Arc::new(JumpingClock {
        base: TokioClock::starting_at(at(start)),
        offset: std::sync::Mutex::new(offset),
    })
}

/// An every-minute job for the test chat, set from the CLI.
fn every_minute() -> NewJob {
    NewJob::new(key(), "stretch", ScheduleSpec::Every("1m".into()), "cli")
}

#[tokio::test(start_paused = true)]
async fn a_clock_a_day_ahead_and_put_back_does_not_hold_recurring_jobs_for_a_day() {
    let dir = tempfile::tempdir().unwrap();
    let clock = jumping("2026-03-01T12:00:00Z", chrono::Duration::zero());
    let rig = Rig::start_with(dir.path(), clock.clone(), Config::default(), None).await;
    let j = rig.add(every_minute()).await;
    // The clock jumps a day ahead: the job fires at the wrong time and is armed from it.
    *clock.offset.lock().unwrap() = chrono::Duration::days(1);
    assert!(rig.handler.wait_for(1, 5 * MINUTE).await, "fired once");
    let armed = rig.scheduler.get(&j.id).unwrap().unwrap().next_run.unwrap();
    assert!(armed > at("2026-03-02T12:00:00Z"), "{armed}");
    // Put right: the job runs on its minute again, not a day later.
    *clock.offset.lock().unwrap() = chrono::Duration::zero();
    let fired = rig.handler.count();
    assert!(
        rig.handler.wait_for(fired + 2, 5 * MINUTE).await,
        "the job waits for the clock to catch up: next run {:?}",
        rig.scheduler.get(&j.id).unwrap().unwrap().next_run
    );
    let next = rig.scheduler.get(&j.id).unwrap().unwrap().next_run.unwrap();
    assert!(next < at("2026-03-01T13:00:00Z"), "{next}");
    rig.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_clock_put_back_while_the_gateway_was_stopped_does_not_hold_recurring_jobs() {
    let dir = tempfile::tempdir().unwrap();
    let ahead = jumping("2026-03-02T12:00:00Z", chrono::Duration::zero());
    let rig = Rig::start_with(dir.path(), ahead, Config::default(), None).await;
    let j = rig.add(every_minute()).await;
    assert!(rig.handler.wait_for(2, 5 * MINUTE).await, "fired");
    rig.stop().await;
    // Started again with the clock put right, a day back.
    let right = Arc::new(TokioClock::starting_at(at("2026-03-01T12:00:00Z")));
    let rig = Rig::start_with(dir.path(), right, Config::default(), None).await;
    assert!(
        rig.handler.wait_for(2, 5 * MINUTE).await,
        "the job waits for the clock to catch up: next run {:?}",
        rig.scheduler.get(&j.id).unwrap().unwrap().next_run
    );
    rig.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_fast_clock_stepped_back_a_few_minutes_does_not_repeat_a_run() {
    let dir = tempfile::tempdir().unwrap();
    // Five minutes fast: the daily job runs at what the clock calls 09:00.
    let clock = jumping("2026-03-01T08:50:00Z", chrono::Duration::minutes(5));
    let rig = Rig::start_with(dir.path(), clock.clone(), Config::default(), None).await;
    // Sent as is (no turn, so nothing downstream would drop a second copy).
    let mut new = NewJob::new(
        key(),
        "standup",
        ScheduleSpec::Cron("0 9 * * *".into()),
        "cli",
    );
    new.delivery = switchboard::scheduler::Delivery::Direct;
    let j = rig.add(new).await;
    rig.channel.wait_for(1, HOUR).await;
    // NTP steps it back: 08:55 again. Today's 09:00 ran; tomorrow's is next.
    *clock.offset.lock().unwrap() = chrono::Duration::zero();
    tokio::time::sleep(2 * HOUR).await;
    assert_eq!(rig.channel.sent().len(), 1, "{:?}", rig.channel.sent());
    let job = rig.scheduler.get(&j.id).unwrap().unwrap();
    assert_eq!(job.next_run, Some(at("2026-03-02T09:00:00Z")));
    assert_eq!(job.runs.len(), 1, "{:?}", job.runs);
    rig.stop().await;
}
