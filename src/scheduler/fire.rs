//! The firing loop: one task sleeps until the earliest due job (or until jobs change), hands
//! due jobs to the bus as `System(Cron)` messages, and re-arms or retires them.
//!
//! A fired message's id is `cron:<job_id>:<due_unix_ms>`: if the gateway dies after
//! publishing but before the job's new state is durable, the replayed run is dropped by the
//! bus as a duplicate.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use chrono::{DateTime, Datelike, Utc};
use futures_util::StreamExt;
use switchboard_channel::{InboundMessage, Origin, OutboundMessage, Sender, SystemOrigin};
use tokio_util::sync::CancellationToken;

use super::engine::{Scheduler, armed};
use super::index;
use super::job::{CatchUp, Delivery, Job, Outcome, Run};
use super::schedule::{ScheduleError, next_after};
use crate::bus::BusError;
use crate::chain::Chain;
use crate::store::Batch;

/// Longest single sleep, so a wall-clock jump (NTP, suspend) is noticed within a minute.
const MAX_SLEEP: Duration = Duration::from_secs(60);
/// The clock going back by more than this makes the jobs armed while it was ahead re-armed.
const CLOCK_BACK_MS: i64 = 60_000;
/// `Tree::Meta` key of the latest wall-clock time the scheduler read (ms since the epoch,
/// big-endian i64), noted at most once a minute.
const LATEST_SEEN: &[u8] = b"scheduler_latest_seen";
/// Wait before retrying a round whose writes the store refused.
const STORE_RETRY: Duration = Duration::from_secs(1);
/// Jobs taken from the index per round.
const ROUND: usize = 1024;
/// Direct deliveries recorded concurrently (their durable writes share fsyncs).
const CONCURRENCY: usize = 128;
/// A run later than this counts as missed: skipped with `catch_up = "skip"`, or caught up
/// with a note to the model that it is late.
const MISSED_GRACE: chrono::Duration = chrono::Duration::seconds(60);
/// A failed one-shot job is retried after this, up to [`MAX_ONE_SHOT_FAILURES`] times.
const RETRY_AFTER: chrono::Duration = chrono::Duration::seconds(60);
const MAX_ONE_SHOT_FAILURES: usize = 3;

/// The bus is shutting down: stop firing; what was not handed over fires at the next start.
struct Stop;

impl Scheduler {
    pub(super) async fn run(self: Arc<Self>, shutdown: CancellationToken) {
        match self.ensure_indexes().await {
            Ok(()) => tracing::info!("scheduler started"),
            Err(e) => tracing::error!("scheduler cannot read its jobs: {e}"),
        }
        // Whenever the clock is seen behind the latest time it read (also in an earlier run,
        // noted at most once a minute): re-arm the jobs armed while it was ahead.
        let mut latest = self.latest_noted();
        let mut noted = latest;
        loop {
            let now = self.clock.now().timestamp_millis();
            if latest.is_some_and(|l| now < l.saturating_sub(CLOCK_BACK_MS)) {
                if let Err(e) = self.rearm_if_ahead(self.clock.now()).await {
                    tracing::error!("cannot re-arm the cron jobs after the clock went back: {e}");
                }
                latest = Some(now);
                noted = None;
            }
            latest = latest.max(Some(now));
            if noted.is_none_or(|n| now.abs_diff(n) >= CLOCK_BACK_MS as u64) {
                self.note_latest(now);
                noted = Some(now);
            }
            let first = index::first(self.store.as_ref()).unwrap_or_else(|e| {
                tracing::error!("cannot read the cron index: {e}");
                None
            });
            let wait = match first {
                Some(due) if due <= now => {
                    match self.fire_due(now).await {
                        Err(Stop) => return,
                        Ok(true) => continue,
                        // The store refused the round's writes: do not spin on it.
                        Ok(false) => Some(STORE_RETRY),
                    }
                }
                Some(due) => Some(Duration::from_millis((due - now) as u64).min(MAX_SLEEP)),
                None => None,
            };
            tokio::select! {
                _ = shutdown.cancelled() => return,
                // Jobs changed: look again (notify_one keeps a permit, so none is missed).
                _ = self.wake.notified() => {}
                _ = sleep_or_forever(wait) => {}
            }
        }
    }

    /// The latest wall-clock time (ms) an earlier run noted.
    fn latest_noted(&self) -> Option<i64> {
        let raw = self
            .store
            .get(crate::store::Tree::Meta, LATEST_SEEN)
            .ok()??;
        Some(i64::from_be_bytes(raw.as_slice().try_into().ok()?))
    }

    fn note_latest(&self, now_ms: i64) {
        if let Err(e) = self
            .store
            .put(crate::store::Tree::Meta, LATEST_SEEN, &now_ms.to_be_bytes())
        {
            tracing::warn!("scheduler: cannot note the time: {e}");
        }
    }

    /// Fire everything due at `now_ms` (one round). Holding the job lock, it reads the due
    /// jobs, hands the agent-delivered ones' messages to the bus in one durable write, then
    /// records their runs, re-arms them and drops stale index entries in one more; no job can
    /// change in between, so none is read twice. Direct deliveries follow, each recorded with
    /// its reply. Returns whether the round's writes were stored.
    async fn fire_due(&self, now_ms: i64) -> Result<bool, Stop> {
        let due = match index::due(self.store.as_ref(), now_ms, ROUND) {
            Ok(due) => due,
            Err(e) => {
                tracing::error!("cannot read the cron index: {e}");
                return Ok(false);
            }
        };
        let now = self.clock.now();
        let mut direct = Vec::new();
        let mut stop = false;
        let stored = {
            let _w = self.writes.lock().await;
            let mut batch = Batch::default();
            let mut runs = Vec::new();
            let mut publish = Vec::new();
            for (due_ms, id) in due {
                match self.prepare(&id, due_ms, now) {
                    Prepared::Stale => index::forget_due(&mut batch, due_ms, &id),
                    Prepared::Skipped(job, due, run) => runs.push((job, due, run)),
                    Prepared::Agent(job, due) => publish.push((job, due)),
                    Prepared::Direct(job, due) => direct.push((job, due)),
                }
            }
            if !publish.is_empty() {
                let msgs = publish
                    .iter()
                    .map(|(job, due)| {
                        let id = format!("cron:{}:{}", job.id, due.timestamp_millis());
                        inbound(job, id, Some(*due), now)
                    })
                    .collect();
                let error = match &self.bus {
                    None => Some("the gateway is not running".to_string()),
                    Some(bus) => match bus.publish_many(msgs).await {
                        Ok(_) => None,
                        Err(BusError::ShuttingDown) => {
                            stop = true;
                            None
                        }
                        Err(e) => Some(e.to_string()),
                    },
                };
                if !stop {
                    // Fired: the messages are durably on the bus now.
                    let fired = self.clock.now();
                    for (job, due) in publish {
                        self.metrics
                            .cron_lateness
                            .observe((fired - due).to_std().unwrap_or_default());
                        let run = self.run_record(fired, due, error.clone());
                        runs.push((job, due, run));
                    }
                }
            }
            for (old, due, run) in runs {
                let job = settle(old.clone(), due, run);
                if let Err(e) = index::write(&mut batch, Some(&old), Some(&job)) {
                    tracing::error!(id = %job.id, "cannot encode cron job: {e}");
                }
            }
            match self.store.commit(batch).await {
                Ok(_) => true,
                Err(e) => {
                    tracing::error!("cannot store cron job states: {e}");
                    false
                }
            }
        };
        let _: Vec<()> = futures_util::stream::iter(direct)
            .map(|(job, due)| async move {
                let now = self.clock.now();
                self.metrics
                    .cron_lateness
                    .observe((now - due).to_std().unwrap_or_default());
                self.fire_direct(job, due, now).await
            })
            .buffer_unordered(CONCURRENCY)
            .collect()
            .await;
        if stop {
            return Err(Stop);
        }
        Ok(stored)
    }

    /// Decide what to do with one due job, from its stored copy (the API may have changed or
    /// removed it since it was armed).
    fn prepare(&self, id: &str, due_ms: i64, now: DateTime<Utc>) -> Prepared {
        let job = match self.get(id) {
            Ok(Some(job)) => job,
            Ok(None) => return Prepared::Stale,
            Err(e) => {
                // Unreadable: never fires again rather than failing every round.
                tracing::error!(id, "cannot read cron job: {e}");
                return Prepared::Stale;
            }
        };
        if armed(&job) != Some(due_ms) {
            return Prepared::Stale;
        }
        let Some(due) = DateTime::from_timestamp_millis(due_ms) else {
            return Prepared::Stale;
        };
        if let Some(why) = skip_missed(&job, due, now) {
            tracing::info!(
                id,
                "skipping a run missed while the gateway was down: {why}"
            );
            return Prepared::Skipped(job, due, Run::skipped(now, due, why));
        }
        if let Some(run) = self.refused(&job, due, now) {
            return Prepared::Skipped(job, due, run);
        }
        // A chat no running channel serves (turned off, no token, or not built): a recurring
        // job skips its runs rather than compose a message each time that would wait for the
        // channel, all sent at once when it comes back. A one-shot reminder still runs: its
        // reply waits for the channel.
        let served = |b: &Arc<crate::bus::Bus>| b.outbox().has_channel(&job.key.channel);
        if job.schedule.is_recurring() && !self.bus.as_ref().is_some_and(served) {
            let why = format!("the {} channel is not running", job.key.channel);
            tracing::info!(id, "skipping a run: {why}");
            return Prepared::Skipped(job, due, Run::skipped(now, due, why));
        }
        match job.delivery {
            Delivery::Agent => Prepared::Agent(job, due),
            Delivery::Direct => Prepared::Direct(job, due),
        }
    }

    /// The run to record instead of firing when someone who set `job` no longer has access
    /// (their pairing was revoked, `allow_from` or a policy changed): skipped, so a
    /// recurring job fires again if they get access back (a one-shot job is done). A store
    /// that cannot tell fails the run (a one-shot job is retried).
    fn refused(&self, job: &Job, due: DateTime<Utc>, now: DateTime<Utc>) -> Option<Run> {
        for setter in &job.set_by {
            match setter.admitted(&self.config, self.store.as_ref()) {
                Ok(true) => {}
                Ok(false) => {
                    let error = format!("{setter}, who set it, no longer has access");
                    tracing::info!(id = %job.id, "not firing: {error}");
                    return Some(Run::skipped(now, due, error));
                }
                Err(e) => {
                    tracing::error!(id = %job.id, "not firing: cannot check access: {e}");
                    let error = format!("cannot check access: {e}");
                    return Some(self.run_record(now, due, Some(error)));
                }
            }
        }
        None
    }

    /// Hand a job's message to the bus; `Ok(Some(error))` when that failed for a reason
    /// other than shutdown.
    async fn publish(
        &self,
        job: &Job,
        message_id: String,
        now: DateTime<Utc>,
        chain: &Chain,
    ) -> Result<Option<String>, Stop> {
        let mut msg = inbound(job, message_id, None, now);
        chain.stamp(&mut msg);
        let Some(bus) = &self.bus else {
            // No gateway (the CLI on the store): the next one's start-up runs it.
            return Ok(crate::bus::publish_offline(self.store.as_ref(), msg)
                .await
                .err()
                .map(|e| e.to_string()));
        };
        match bus.publish(msg).await {
            Ok(_) => Ok(None),
            Err(BusError::ShuttingDown) => Err(Stop),
            Err(e) => Ok(Some(e.to_string())),
        }
    }

    /// Record the reply with the job's new state in one atomic write (so it is sent exactly
    /// once), then deliver it.
    async fn fire_direct(&self, job: Job, due: DateTime<Utc>, now: DateTime<Utc>) {
        let Some(bus) = &self.bus else {
            return;
        };
        let _w = self.writes.lock().await;
        let old = match self.get(&job.id) {
            Ok(Some(j)) if armed(&j) == armed(&job) => j,
            _ => return,
        };
        let reply = OutboundMessage::new(job.key.clone(), job.message.clone());
        let mut batch = Batch::default();
        let fresh = settle(old.clone(), due, self.run_record(now, due, None));
        if let Err(e) = index::write(&mut batch, Some(&old), Some(&fresh)) {
            tracing::error!("cannot encode cron job: {e}");
        }
        match bus.outbox().record(vec![reply], batch).await {
            Ok(entries) => {
                let bus = bus.clone();
                let tracker = self
                    .tracker
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .clone();
                let deliver = async move { bus.outbox().deliver(entries).await };
                match tracker {
                    Some(t) => drop(t.spawn(deliver)),
                    None => drop(tokio::spawn(deliver)),
                }
            }
            Err(e) => {
                // Nothing was written: record the failed run instead.
                let failed = settle(
                    old.clone(),
                    due,
                    self.run_record(now, due, Some(e.to_string())),
                );
                let mut batch = Batch::default();
                let written = index::write(&mut batch, Some(&old), Some(&failed));
                if let Err(e) = match written {
                    Ok(()) => self.store.commit(batch).await.map(|_| ()),
                    Err(e) => Err(e),
                } {
                    tracing::error!(id = %old.id, "cannot store the cron job's failed run: {e}");
                }
            }
        }
    }

    /// `run_now`: fire outside the schedule; the run is recorded, the schedule untouched.
    /// Without a gateway the message (or a direct job's reply) is only stored, for the next
    /// gateway to run (or deliver) when it starts. The message carries `chain`, what led
    /// to the turn that asked for the run.
    pub(super) async fn fire_now(&self, job: Job, chain: &Chain) -> Result<(), ScheduleError> {
        let now = self.clock.now();
        let error = match job.delivery {
            Delivery::Agent => {
                let id = format!("cron:{}:now:{}", job.id, now.timestamp_millis());
                self.publish(&job, id, now, chain)
                    .await
                    .map_err(|_| ScheduleError::Stopping)?
            }
            Delivery::Direct => {
                let reply = OutboundMessage::new(job.key.clone(), job.message.clone());
                match &self.bus {
                    Some(bus) => bus.send_direct(vec![reply]).await.err(),
                    // No gateway: kept in the outbox for the next one to deliver.
                    None => crate::bus::record_replies(
                        self.store.as_ref(),
                        vec![reply],
                        Batch::default(),
                    )
                    .await
                    .err()
                    .map(Into::into),
                }
                .map(|e| e.to_string())
            }
        };
        let run = self.run_record(now, now, error.clone());
        {
            let _w = self.writes.lock().await;
            if let Some(old) = self.get(&job.id)? {
                let mut fresh = old.clone();
                fresh.record(run);
                let mut batch = Batch::default();
                index::write(&mut batch, Some(&old), Some(&fresh))?;
                self.store.commit(batch).await?;
            }
        }
        match error {
            None => Ok(()),
            Some(e) => Err(ScheduleError::Store(e)),
        }
    }

    fn run_record(&self, now: DateTime<Utc>, due: DateTime<Utc>, error: Option<String>) -> Run {
        self.metrics.cron_runs.fetch_add(1, Ordering::Relaxed);
        if error.is_some() {
            self.metrics.cron_failures.fetch_add(1, Ordering::Relaxed);
        }
        Run {
            at: now,
            due,
            outcome: if error.is_some() {
                Outcome::Failed
            } else {
                Outcome::Ok
            },
            error,
        }
    }
}

/// Why a missed run of a recurring `job` (due at `due`, handled at `now`) is not caught up:
/// the job says `catch_up = "skip"`, or its next regular run comes within a quarter of a
/// period (a daily 09:00 job back at 08:59:50 runs once, at 09:00, not twice in ten
/// seconds; back at 21:30, the morning's reminder still comes, late and saying so).
fn skip_missed(job: &Job, due: DateTime<Utc>, now: DateTime<Utc>) -> Option<&'static str> {
    if !job.schedule.is_recurring() || now - due <= MISSED_GRACE {
        return None;
    }
    if job.catch_up == CatchUp::Skip {
        return Some("missed while the gateway was down");
    }
    let tz = job.tz();
    let next = next_after(&job.schedule, tz, now)?;
    // The period as it stands now: from the next run to the one after it (a weekday job
    // on a Friday counts three days).
    let period = next_after(&job.schedule, tz, next)? - next;
    (next - now < period / 4).then_some("missed while the gateway was down; the next run is soon")
}

/// `job` after a run that was due at `due`: the run recorded and the job re-armed (a failed
/// one-shot is retried a few times first).
fn settle(mut job: Job, due: DateTime<Utc>, run: Run) -> Job {
    let now = run.at;
    let failed = run.outcome == Outcome::Failed;
    job.record(run);
    let failures = job
        .runs
        .iter()
        .rev()
        .take_while(|r| r.outcome == Outcome::Failed)
        .count();
    if failed && !job.schedule.is_recurring() && failures < MAX_ONE_SHOT_FAILURES {
        job.next_run = Some(now + RETRY_AFTER);
    } else {
        job.rearm(due, now);
    }
    job
}

/// What a due job needs.
enum Prepared {
    /// Removed, disabled or re-scheduled since its due entry was read.
    Stale,
    /// A missed recurring run with `catch_up = "skip"`: the run to record.
    Skipped(Job, DateTime<Utc>, Run),
    Agent(Job, DateTime<Utc>),
    Direct(Job, DateTime<Utc>),
}

/// The `System(Cron)` message for a job's run due at `due` (`None`: run now, on request).
/// A run caught up late says when it was due, so the model does not word it as on time.
fn inbound(
    job: &Job,
    id: String,
    due: Option<DateTime<Utc>>,
    now: DateTime<Utc>,
) -> InboundMessage {
    let mut text = job.message.clone();
    if let Some(due) = due.filter(|d| now - *d > MISSED_GRACE) {
        text.push_str(&format!("\n\n{}", was_due(due, now, job.tz())));
    }
    let mut msg = InboundMessage::text(
        id,
        job.key.clone(),
        Sender {
            id: "cron".into(),
            username: None,
            display_name: "Scheduler".into(),
            is_owner: false,
        },
        text,
    );
    msg.received_at = now;
    // Set in a group: it goes to the group, and is worded for it.
    msg.is_group = job.set_by.iter().any(|s| s.group);
    msg.origin = Origin::System(SystemOrigin::Cron {
        job_id: job.id.clone(),
    });
    msg.metadata.insert("job_id".into(), job.id.clone().into());
    msg.metadata
        .insert("schedule".into(), job.schedule.describe(job.tz()).into());
    if let Some(model) = &job.model {
        msg.metadata.insert("model".into(), model.clone().into());
    }
    if !job.set_by.is_empty() {
        if let Ok(v) = serde_json::to_value(&job.set_by) {
            msg.metadata.insert(crate::access::SET_BY.into(), v);
        }
    }
    msg
}

/// `(was due 21:00 yesterday, Mon 23 Nov, in Europe/Berlin)`: when a late run was due, in
/// the job's timezone, in words a reminder can repeat.
fn was_due(due: DateTime<Utc>, now: DateTime<Utc>, tz: chrono_tz::Tz) -> String {
    let (due, now) = (due.with_timezone(&tz), now.with_timezone(&tz));
    let time = due.format("%H:%M");
    let date = if due.year() == now.year() {
        due.format("%a %-d %b").to_string()
    } else {
        due.format("%a %-d %b %Y").to_string()
    };
    let day = match (now.date_naive() - due.date_naive()).num_days() {
        0 => format!("{time} today, {date}"),
        1 => format!("{time} yesterday, {date}"),
        _ => format!("{time} on {date}"),
    };
    format!("(was due {day}, in {tz})")
}

async fn sleep_or_forever(d: Option<Duration>) {
    match d {
        Some(d) => tokio::time::sleep(d).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    #[test]
    fn a_late_run_says_when_it_was_due_in_words() {
        let berlin = chrono_tz::Europe::Berlin;
        let now = t("2026-11-24T07:30:00Z");
        for (due, want) in [
            (
                "2026-11-24T06:00:00Z",
                "(was due 07:00 today, Tue 24 Nov, in Europe/Berlin)",
            ),
            (
                "2026-11-23T20:00:00Z",
                "(was due 21:00 yesterday, Mon 23 Nov, in Europe/Berlin)",
            ),
            (
                "2026-11-20T08:00:00Z",
                "(was due 09:00 on Fri 20 Nov, in Europe/Berlin)",
            ),
            (
                "2025-12-31T22:30:00Z",
                "(was due 23:30 on Wed 31 Dec 2025, in Europe/Berlin)",
            ),
        ] {
            assert_eq!(was_due(t(due), now, berlin), want, "{due}");
        }
        // The day is the job's: 23:30 UTC on the 23rd is already the 24th in Berlin.
        assert_eq!(
            was_due(t("2026-11-23T23:30:00Z"), now, berlin),
            "(was due 00:30 today, Tue 24 Nov, in Europe/Berlin)"
        );
    }
}
