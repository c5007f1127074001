//! Cron jobs through daylight-saving changes, on the real engine under tokio's paused clock:
//! when clocks go back, a wildcard job runs in both copies of the repeated hour and a
//! fixed-time job once; when they go forward, a fixed-time job in the gap runs once when it
//! ends.

mod scheduler_support;

use std::time::Duration;

use chrono::{DateTime, Utc};
use scheduler_support::{Rig, at, key};
use switchboard::config::Config;
use switchboard::scheduler::{NewJob, ScheduleSpec};

const HOUR: Duration = Duration::from_secs(3600);
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
