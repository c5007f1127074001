//! The firing engine on the real store and bus, under tokio's paused clock: jobs fire on
//! time as `System(Cron)` messages for their chat, replies reach the chat, jobs survive
//! restarts, missed runs follow their catch-up policy.

mod scheduler_support;

use std::time::Duration;

use chrono::{Datelike, Timelike, Weekday};
use scheduler_support::{Rig, at, key};
use switchboard::config::Config;
use switchboard::scheduler::{CatchUp, Delivery, NewJob, Outcome, ScheduleSpec};
use switchboard_channel::{Origin, SystemOrigin};

const HOUR: Duration = Duration::from_secs(3600);

fn job(spec: ScheduleSpec, message: &str) -> NewJob {
    NewJob::new(key(), message, spec, "cli")
}

/// The ids of the test chat's jobs, as `/reminders` lists them.
fn listed_ids(rig: &Rig) -> Vec<String> {
    rig.scheduler
        .list(Some(&key()))
        .into_iter()
        .map(|j| j.id)
        .collect()
}

#[tokio::test(start_paused = true)]
async fn with_cron_disabled_a_job_is_refused_not_stored_to_never_fire() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = Config::default();
    config.cron.enabled = false;
    let rig = Rig::start(dir.path(), at("2026-03-01T12:00:00Z"), config).await;
    let e = rig
        .scheduler
        .add(job(ScheduleSpec::At("in 10m".into()), "call mum"))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("cron.enabled = false"), "{e}");
    assert!(listed_ids(&rig).is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_reminder_fires_at_its_time_as_system_cron_and_the_reply_reaches_the_chat() {
    let dir = tempfile::tempdir().unwrap();
    let rig = Rig::start(dir.path(), at("2026-03-01T12:00:00Z"), Config::default()).await;
    let j = rig
        .add(job(ScheduleSpec::At("in 10m".into()), "call mum"))
        .await;
    assert_eq!(j.next_run, Some(at("2026-03-01T12:10:00Z")));

    assert!(
        rig.handler.wait_for(1, 2 * HOUR).await,
        "the reminder fired"
    );
    let (msg, seen_at) = rig.handler.received().remove(0);
    let due_ms = at("2026-03-01T12:10:00Z").timestamp_millis();
    assert_eq!(msg.id, format!("cron:{}:{due_ms}", j.id));
    assert_eq!(msg.key, key());
    assert_eq!(msg.text, "call mum");
    assert_eq!(
        msg.origin,
        Origin::System(SystemOrigin::Cron {
            job_id: j.id.clone()
        })
    );
    // Not early, and not late by more than a tick of the paused clock.
    assert!(seen_at >= at("2026-03-01T12:10:00Z"), "{seen_at}");
    assert!(seen_at < at("2026-03-01T12:10:01Z"), "{seen_at}");

    rig.channel.wait_for(1, HOUR).await;
    let sent = rig.channel.sent();
    assert_eq!(sent[0].key, key());
    assert_eq!(sent[0].text, "echo: call mum");

    // One-shot: disabled after its run, which is in the history.
    let stored = rig.scheduler.get(&j.id).unwrap().unwrap();
    assert!(!stored.enabled);
    assert_eq!(stored.next_run, None);
    assert_eq!(stored.runs.len(), 1);
    assert_eq!(stored.runs[0].outcome, Outcome::Ok);
    assert_eq!(stored.runs[0].due, at("2026-03-01T12:10:00Z"));
    assert_eq!(
        rig.metrics
            .cron_runs
            .load(std::sync::atomic::Ordering::Relaxed),
        1
    );
    assert!(!rig.handler.wait_for(2, 5 * HOUR).await, "fired only once");
    rig.stop().await;
}

#[tokio::test(start_paused = true)]
async fn absolute_and_recurring_jobs_fire_on_schedule() {
    let dir = tempfile::tempdir().unwrap();
    let rig = Rig::start(dir.path(), at("2026-03-01T12:00:00Z"), Config::default()).await;
    let every = rig
        .add(job(ScheduleSpec::Every("20m".into()), "stretch"))
        .await;
    let mut new = job(ScheduleSpec::At("2026-03-01 14:05".into()), "meeting");
    new.tz = Some("Europe/Berlin".into());
    let once = rig.add(new).await;
    assert_eq!(once.next_run, Some(at("2026-03-01T13:05:00Z")));

    assert!(rig.handler.wait_for(4, 2 * HOUR).await);
    let got: Vec<(String, chrono::DateTime<chrono::Utc>)> = rig
        .handler
        .received()
        .into_iter()
        .take(4)
        .map(|(m, t)| (m.text, t))
        .collect();
    assert_eq!(
        got.iter().map(|(m, _)| m.as_str()).collect::<Vec<_>>(),
        ["stretch", "stretch", "stretch", "meeting"]
    );
    for (i, expect) in ["12:20", "12:40", "13:00", "13:05"].iter().enumerate() {
        assert_eq!(got[i].1.format("%H:%M").to_string(), *expect, "run {i}");
    }
    let stored = rig.scheduler.get(&every.id).unwrap().unwrap();
    assert!(stored.enabled);
    assert!(stored.next_run.unwrap() > at("2026-03-01T13:05:00Z"));
    assert_eq!(stored.runs.len(), 3);
    rig.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_weekday_cron_job_in_a_timezone_fires_on_monday_morning_local_time() {
    let dir = tempfile::tempdir().unwrap();
    // Wednesday 2026-03-04.
    let rig = Rig::start(dir.path(), at("2026-03-04T12:00:00Z"), Config::default()).await;
    let mut new = job(ScheduleSpec::Cron("0 9 * * 1".into()), "weekly review");
    new.tz = Some("America/New_York".into());
    rig.add(new).await;
    assert!(rig.handler.wait_for(2, 24 * 15 * HOUR).await);
    for (_, seen) in rig.handler.received().into_iter().take(2) {
        let local = seen.with_timezone(&chrono_tz::America::New_York);
        assert_eq!(local.weekday(), Weekday::Mon, "{local}");
        assert_eq!((local.hour(), local.minute()), (9, 0), "{local}");
    }
    // The first Monday is 2026-03-09 (EDT starts 2026-03-08): 13:00Z.
    assert_eq!(
        rig.handler.received()[0]
            .1
            .format("%Y-%m-%d %H:%M")
            .to_string(),
        "2026-03-09 13:00"
    );
    rig.stop().await;
}

#[tokio::test(start_paused = true)]
async fn direct_delivery_sends_the_text_without_a_turn() {
    let dir = tempfile::tempdir().unwrap();
    let rig = Rig::start(dir.path(), at("2026-03-01T12:00:00Z"), Config::default()).await;
    let mut new = job(ScheduleSpec::At("in 5m".into()), "Stand-up in 5 minutes");
    new.delivery = Delivery::Direct;
    let j = rig.add(new).await;
    rig.channel.wait_for(1, HOUR).await;
    assert_eq!(rig.channel.sent()[0].text, "Stand-up in 5 minutes");
    assert_eq!(rig.handler.count(), 0, "no turn, no LLM call");
    let stored = rig.scheduler.get(&j.id).unwrap().unwrap();
    assert!(!stored.enabled);
    assert_eq!(stored.runs[0].outcome, Outcome::Ok);
    rig.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_due_time_inside_a_millisecond_fires_once() {
    let dir = tempfile::tempdir().unwrap();
    let rig = Rig::start(
        dir.path(),
        at("2026-03-01T12:00:00.000100Z"),
        Config::default(),
    )
    .await;
    for (spec, text) in [
        (
            ScheduleSpec::At("2026-03-01T12:05:00.000700Z".into()),
            "once",
        ),
        (ScheduleSpec::Every("10m".into()), "every"),
    ] {
        let mut new = job(spec, text);
        new.delivery = Delivery::Direct;
        rig.add(new).await;
    }
    // 12:05 and 12:10: one send each, and the first job once.
    rig.channel.wait_for(2, HOUR).await;
    tokio::time::sleep(Duration::from_secs(60)).await;
    let texts: Vec<String> = rig.channel.sent().into_iter().map(|m| m.text).collect();
    assert_eq!(texts, ["once", "every"]);
    rig.stop().await;
}

#[tokio::test(start_paused = true)]
async fn removed_jobs_do_not_fire_and_run_now_fires_without_touching_the_schedule() {
    let dir = tempfile::tempdir().unwrap();
    let rig = Rig::start(dir.path(), at("2026-03-01T12:00:00Z"), Config::default()).await;
    let gone = rig
        .add(job(ScheduleSpec::At("in 10m".into()), "gone"))
        .await;
    let kept = rig.add(job(ScheduleSpec::At("in 1h".into()), "kept")).await;
    assert_eq!(rig.scheduler.remove(&gone.id).await.unwrap().id, gone.id);
    assert!(rig.scheduler.remove(&gone.id).await.is_err());
    assert!(rig.scheduler.get(&gone.id).unwrap().is_none());

    rig.scheduler.run_now(&kept.id).await.unwrap();
    assert!(rig.handler.wait_for(1, Duration::from_secs(1)).await);
    let (first, _) = rig.handler.received().remove(0);
    assert_eq!(first.text, "kept");
    assert!(
        first.id.starts_with(&format!("cron:{}:now:", kept.id)),
        "{}",
        first.id
    );
    let stored = rig.scheduler.get(&kept.id).unwrap().unwrap();
    assert_eq!(stored.next_run, kept.next_run);
    assert!(stored.enabled);

    assert!(rig.handler.wait_for(2, 2 * HOUR).await);
    let texts: Vec<String> = rig
        .handler
        .received()
        .into_iter()
        .map(|(m, _)| m.text)
        .collect();
    assert_eq!(texts, ["kept", "kept"], "the removed job never fired");
    rig.stop().await;
}

#[tokio::test(start_paused = true)]
async fn jobs_survive_a_restart_and_fire_after_it() {
    let dir = tempfile::tempdir().unwrap();
    let rig = Rig::start(dir.path(), at("2026-03-01T12:00:00Z"), Config::default()).await;
    let j = rig
        .add(job(ScheduleSpec::At("in 2h".into()), "later"))
        .await;
    let c = rig
        .add(job(ScheduleSpec::Cron("0 * * * *".into()), "hourly"))
        .await;
    rig.stop().await;

    // Back 30 minutes later, before anything was due.
    let rig = Rig::start(dir.path(), at("2026-03-01T12:30:00Z"), Config::default()).await;
    let listed = listed_ids(&rig);
    assert_eq!(listed, [c.id.clone(), j.id.clone()], "soonest first");
    // 13:00 hourly, then at 14:00 both jobs (in either order).
    assert!(rig.handler.wait_for(3, 2 * HOUR).await);
    let got: Vec<(String, String)> = rig
        .handler
        .received()
        .into_iter()
        .map(|(m, t)| (m.text, t.format("%H:%M").to_string()))
        .collect();
    assert_eq!(got[0], ("hourly".into(), "13:00".into()));
    assert!(got.contains(&("later".into(), "14:00".into())), "{got:?}");
    rig.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_one_shot_missed_during_downtime_fires_once_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let rig = Rig::start(dir.path(), at("2026-03-01T12:00:00Z"), Config::default()).await;
    let mut new = job(ScheduleSpec::At("in 10m".into()), "missed");
    new.tz = Some("Europe/Berlin".into());
    let j = rig.add(new).await;
    rig.stop().await;

    let rig = Rig::start(dir.path(), at("2026-03-01T15:00:00Z"), Config::default()).await;
    assert!(
        rig.handler.wait_for(1, Duration::from_secs(5)).await,
        "fires at start"
    );
    let (msg, seen) = rig.handler.received().remove(0);
    // Late: the model is told when it was due, in the job's timezone.
    assert_eq!(
        msg.text,
        "missed\n\n(was due 13:10 today, Sun 1 Mar, in Europe/Berlin)"
    );
    assert!(seen < at("2026-03-01T15:00:05Z"));
    assert!(!rig.handler.wait_for(2, 3 * HOUR).await, "and only once");
    let stored = rig.scheduler.get(&j.id).unwrap().unwrap();
    assert!(!stored.enabled);
    assert_eq!(stored.runs.len(), 1);
    rig.stop().await;

    // Another restart does not bring it back.
    let rig = Rig::start(dir.path(), at("2026-03-01T19:00:00Z"), Config::default()).await;
    assert!(!rig.handler.wait_for(1, HOUR).await);
    rig.stop().await;
}

async fn downtime(catch_up: CatchUp) -> (Vec<(String, String)>, Vec<Outcome>) {
    let dir = tempfile::tempdir().unwrap();
    let rig = Rig::start(dir.path(), at("2026-03-01T12:00:00Z"), Config::default()).await;
    let mut new = job(ScheduleSpec::Every("1h".into()), "hourly check");
    new.catch_up = catch_up;
    let j = rig.add(new).await;
    rig.stop().await;
    // Down from 12:00 to 17:30: runs due 13:00 … 17:00 were missed.
    let rig = Rig::start(dir.path(), at("2026-03-01T17:30:00Z"), Config::default()).await;
    let _ = rig
        .handler
        .wait_for(2, 45 * 60 * Duration::from_secs(1))
        .await;
    let got = rig
        .handler
        .received()
        .into_iter()
        .map(|(m, t)| {
            (
                m.id.rsplit(':').next().unwrap_or("").to_string(),
                t.format("%H:%M").to_string(),
            )
        })
        .collect();
    let outcomes = rig
        .scheduler
        .get(&j.id)
        .unwrap()
        .unwrap()
        .runs
        .iter()
        .map(|r| r.outcome)
        .collect();
    rig.stop().await;
    (got, outcomes)
}

#[tokio::test(start_paused = true)]
async fn a_recurring_job_fires_once_for_a_missed_window_with_catch_up_once() {
    let (got, outcomes) = downtime(CatchUp::Once).await;
    let due_13 = at("2026-03-01T13:00:00Z").timestamp_millis().to_string();
    let due_18 = at("2026-03-01T18:00:00Z").timestamp_millis().to_string();
    // Once at start for the whole window (the earliest missed due time), then on schedule.
    assert_eq!(
        got,
        vec![(due_13, "17:30".into()), (due_18, "18:00".into())]
    );
    assert_eq!(outcomes, [Outcome::Ok, Outcome::Ok]);
}

#[tokio::test(start_paused = true)]
async fn a_missed_run_is_not_caught_up_when_the_next_is_less_than_a_quarter_period_away() {
    let dir = tempfile::tempdir().unwrap();
    let rig = Rig::start(dir.path(), at("2026-11-20T07:00:00Z"), Config::default()).await;
    let mut new = job(ScheduleSpec::Cron("0 9 * * *".into()), "standup");
    new.tz = Some("Europe/Berlin".into());
    let j = rig.add(new).await;
    rig.stop().await;
    // Down from Friday 08:00 to Monday 08:59:50 (Berlin): three runs missed, the next in 10 s.
    let rig = Rig::start(dir.path(), at("2026-11-23T07:59:50Z"), Config::default()).await;
    assert!(rig.handler.wait_for(1, HOUR).await);
    assert!(!rig.handler.wait_for(2, 2 * HOUR).await, "fired once");
    let (msg, seen) = rig.handler.received().remove(0);
    assert_eq!(
        seen,
        at("2026-11-23T08:00:00Z"),
        "at 09:00, not at start-up"
    );
    assert_eq!(msg.text, "standup", "on time: no note");
    let runs = rig.scheduler.get(&j.id).unwrap().unwrap().runs;
    let got: Vec<(Outcome, _)> = runs.iter().map(|r| (r.outcome, r.due)).collect();
    assert_eq!(
        got,
        [
            (Outcome::Skipped, at("2026-11-20T08:00:00Z")),
            (Outcome::Ok, at("2026-11-23T08:00:00Z"))
        ]
    );
    assert!(
        runs[0]
            .error
            .as_deref()
            .unwrap()
            .contains("the next run is soon")
    );
    rig.stop().await;

    // Back at 21:30 instead, 11.5 h before the next run: the missed one is caught up (a
    // daily medicine reminder still comes that day), and the model is told it is late.
    let rig = Rig::start(dir.path(), at("2026-11-24T20:30:00Z"), Config::default()).await;
    assert!(rig.handler.wait_for(1, Duration::from_secs(5)).await);
    let (msg, _) = rig.handler.received().remove(0);
    assert_eq!(
        msg.text,
        "standup\n\n(was due 09:00 today, Tue 24 Nov, in Europe/Berlin)"
    );
    rig.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_recurring_job_skips_a_missed_window_with_catch_up_skip() {
    let (got, outcomes) = downtime(CatchUp::Skip).await;
    let due_18 = at("2026-03-01T18:00:00Z").timestamp_millis().to_string();
    assert_eq!(got, vec![(due_18, "18:00".into())], "nothing at start");
    assert_eq!(outcomes, [Outcome::Skipped, Outcome::Ok]);
}

#[tokio::test(start_paused = true)]
async fn jobs_added_while_others_fire_are_never_lost() {
    let dir = tempfile::tempdir().unwrap();
    let rig = Rig::start(dir.path(), at("2026-03-01T12:00:00Z"), Config::default()).await;
    let ticker = rig.add(job(ScheduleSpec::Every("1s".into()), "tick")).await;
    let mut added = Vec::new();
    for i in 0..20 {
        tokio::time::sleep(Duration::from_millis(700)).await;
        let j = rig
            .add(job(ScheduleSpec::At("in 1h".into()), &format!("added {i}")))
            .await;
        added.push(j.id);
    }
    rig.stop().await;
    let rig = Rig::start(dir.path(), at("2026-03-01T12:00:20Z"), Config::default()).await;
    let ids: Vec<String> = rig.scheduler.list(None).into_iter().map(|j| j.id).collect();
    for id in &added {
        assert!(ids.contains(id), "{id} was lost");
    }
    let t = rig.scheduler.get(&ticker.id).unwrap().unwrap();
    assert!(
        t.runs.len() >= 10,
        "the ticker kept firing: {}",
        t.runs.len()
    );
    rig.stop().await;
}

#[tokio::test(start_paused = true)]
async fn reminders_lists_this_chats_jobs_in_their_timezone() {
    let dir = tempfile::tempdir().unwrap();
    let rig = Rig::start(dir.path(), at("2026-03-01T12:00:00Z"), Config::default()).await;
    assert_eq!(
        rig.scheduler.reminders_text(&key()),
        "No reminders in this chat."
    );
    let mut new = job(ScheduleSpec::At("tomorrow 09:00".into()), "call mum");
    new.tz = Some("Europe/Berlin".into());
    let j = rig.add(new).await;
    let mut other = job(ScheduleSpec::Every("1h".into()), "not here");
    other.key = "test:other".parse().unwrap();
    rig.add(other).await;
    let text = rig.scheduler.reminders_text(&key());
    assert!(text.starts_with("Reminders in this chat (1):"), "{text}");
    assert!(text.contains(&j.id), "{text}");
    assert!(text.contains("next 2026-03-02 09:00 CET"), "{text}");
    assert!(text.contains("call mum"), "{text}");
    assert!(!text.contains("not here"), "{text}");
    rig.stop().await;
}

#[tokio::test(start_paused = true)]
async fn jobs_stored_before_the_indexes_existed_are_indexed_at_start_and_fire() {
    use switchboard::scheduler::{Job, Schedule};
    use switchboard::store::{SledStore, Store, Tree};
    let dir = tempfile::tempdir().unwrap();
    let due = at("2026-03-01T12:10:00Z");
    {
        // Written the way an older gateway stored jobs: the job alone, no index entries.
        let store = SledStore::open(dir.path()).unwrap();
        let old = Job {
            id: "jold".into(),
            key: key(),
            message: "from an older store".into(),
            schedule: Schedule::At { at: due },
            tz: "UTC".into(),
            created_by: "cli".into(),
            created_at: at("2026-03-01T11:00:00Z"),
            enabled: true,
            next_run: Some(due),
            runs: Vec::new(),
            delivery: Delivery::Agent,
            catch_up: CatchUp::Once,
            model: None,
            set_by: Vec::new(),
        };
        let mut b = switchboard::store::Batch::default();
        b.put(Tree::Cron, Job::store_key(&old.id), old.to_bytes().unwrap());
        store.commit(b).await.unwrap();
    }
    let rig = Rig::start(dir.path(), at("2026-03-01T12:00:00Z"), Config::default()).await;
    assert!(rig.handler.wait_for(1, HOUR).await, "the old job fires");
    let (msg, seen) = rig.handler.received().remove(0);
    assert_eq!(msg.text, "from an older store");
    assert_eq!(seen, due);
    let listed = listed_ids(&rig);
    assert_eq!(listed, ["jold"], "found through the chat index");
    assert!(!rig.handler.wait_for(2, 2 * HOUR).await, "and only once");
    rig.stop().await;
}

/// A recurring job for a chat no running channel serves (switched off, no token) skips its
/// runs, saying why: no model call each time, no pile of replies sent at once when the
/// channel comes back. A one-shot reminder there still runs; its reply waits for the channel.
#[tokio::test(start_paused = true)]
async fn a_recurring_job_skips_runs_while_its_channel_is_not_running() {
    let dir = tempfile::tempdir().unwrap();
    let rig = Rig::start(dir.path(), at("2026-03-01T12:00:00Z"), Config::default()).await;
    let off: switchboard_channel::ChatKey = "discord:99".parse().unwrap();
    let every = rig
        .add(NewJob::new(
            off.clone(),
            "stretch",
            ScheduleSpec::Every("20m".into()),
            "cli",
        ))
        .await;
    let once = rig
        .add(NewJob::new(
            off.clone(),
            "call mum",
            ScheduleSpec::At("in 30m".into()),
            "cli",
        ))
        .await;
    assert!(rig.handler.wait_for(1, HOUR).await);
    assert!(
        !rig.handler.wait_for(2, HOUR).await,
        "only the one-shot ran"
    );
    let (msg, _) = rig.handler.received().remove(0);
    assert_eq!((msg.key, msg.text.as_str()), (off, "call mum"));
    let every = rig.scheduler.get(&every.id).unwrap().unwrap();
    assert!(every.runs.len() >= 4, "{every:?}");
    for run in &every.runs {
        assert_eq!(run.outcome, Outcome::Skipped);
        assert_eq!(
            run.error.as_deref(),
            Some("the discord channel is not running")
        );
    }
    assert!(every.enabled, "kept on its schedule");
    let once = rig.scheduler.get(&once.id).unwrap().unwrap();
    assert_eq!(once.runs[0].outcome, Outcome::Ok);
    rig.stop().await;
}

/// A finished one-time reminder stays listed with its run for a week; the next job added
/// in its chat after that clears it away (and keeps the younger ones).
#[tokio::test(start_paused = true)]
async fn finished_reminders_are_cleared_a_week_after_their_run() {
    const DAY: Duration = Duration::from_secs(86_400);
    let dir = tempfile::tempdir().unwrap();
    let rig = Rig::start(dir.path(), at("2026-11-20T07:00:00Z"), Config::default()).await;
    let old = rig.add(job(ScheduleSpec::At("in 1m".into()), "bins")).await;
    assert!(rig.handler.wait_for(1, HOUR).await);
    tokio::time::sleep(6 * DAY).await;
    let young = rig.add(job(ScheduleSpec::At("in 1m".into()), "milk")).await;
    assert!(rig.handler.wait_for(2, HOUR).await);
    assert_eq!(listed_ids(&rig).len(), 2, "both finished, both kept");
    tokio::time::sleep(2 * DAY).await;
    let next = rig.add(job(ScheduleSpec::At("in 1h".into()), "call")).await;
    let mut ids = listed_ids(&rig);
    ids.sort();
    let mut want = vec![young.id, next.id];
    want.sort();
    assert_eq!(ids, want);
    assert!(
        rig.scheduler.get(&old.id).unwrap().is_none(),
        "gone from the store"
    );
    rig.stop().await;
}

/// A chat where no job is added again loses its finished reminders to the daily sweep.
#[tokio::test(start_paused = true)]
async fn the_daily_sweep_clears_finished_reminders_no_new_job_would() {
    let dir = tempfile::tempdir().unwrap();
    let rig = Rig::start(dir.path(), at("2026-11-20T07:00:00Z"), Config::default()).await;
    let old = rig.add(job(ScheduleSpec::At("in 1m".into()), "bins")).await;
    let later = rig.add(job(ScheduleSpec::At("in 3d".into()), "milk")).await;
    assert!(rig.handler.wait_for(1, HOUR).await);
    let now = |d: i64| at("2026-11-20T07:00:00Z") + chrono::TimeDelta::days(d);
    assert_eq!(
        rig.scheduler.clear_finished(now(7)).await.unwrap(),
        0,
        "a week: kept"
    );
    assert_eq!(rig.scheduler.clear_finished(now(8)).await.unwrap(), 1);
    assert!(
        rig.scheduler.get(&old.id).unwrap().is_none(),
        "gone from the store"
    );
    assert_eq!(
        listed_ids(&rig),
        vec![later.id],
        "the one still to come stays"
    );
    rig.stop().await;
}
