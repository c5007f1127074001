//! The firing loop: one task sleeps until the earliest due job (or until jobs change), hands
//! due jobs to the bus as `System(Cron)` messages, and re-arms or retires them.
//!
//! A fired message's id is `cron:<job_id>:<due_unix_ms>`: if the gateway dies after
//! publishing but before the job's new state is durable, the replayed run is dropped by the
//! bus as a duplicate.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures_util::StreamExt;
use switchboard_channel::{InboundMessage, Origin, OutboundMessage, Sender, SystemOrigin};
use tokio_util::sync::CancellationToken;

use super::engine::{Scheduler, armed};
use super::index;
use super::job::{CatchUp, Delivery, Job, Outcome, Run};
use super::schedule::ScheduleError;
use crate::bus::BusError;
use crate::store::Batch;

/// Longest single sleep, so a wall-clock jump (NTP, suspend) is noticed within a minute.
const MAX_SLEEP: Duration = Duration::from_secs(60);
/// Wait before retrying a round whose writes the store refused.
const STORE_RETRY: Duration = Duration::from_secs(1);
/// Jobs taken from the index per round.
const ROUND: usize = 1024;
/// Direct deliveries recorded concurrently (their durable writes share fsyncs).
const CONCURRENCY: usize = 128;
/// A recurring run later than this counts as missed (for `catch_up = "skip"`).
const MISSED_GRACE: chrono::Duration = chrono::Duration::seconds(60);
/// A failed one-shot job is retried after this, up to [`MAX_ONE_SHOT_FAILURES`] times.
const RETRY_AFTER: chrono::Duration = chrono::Duration::seconds(60);
const MAX_ONE_SHOT_FAILURES: usize = 3;

/// The bus is shutting down: stop firing; what was not handed over fires at the next start.
struct Stop;

impl Scheduler {
    pub(super) async fn run(self: Arc<Self>, shutdown: CancellationToken) {
        match self.reload().await {
            Ok(()) => tracing::info!("scheduler started"),
            Err(e) => tracing::error!("scheduler cannot read its jobs: {e}"),
        }
        loop {
            let now = self.clock.now().timestamp_millis();
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

    /// Fire everything due at `now_ms` (one round): the agent-delivered jobs' messages go
    /// to the bus in one durable write, then their runs are recorded and the jobs re-armed
    /// in one more write; direct deliveries are recorded with their own state.
    /// Returns whether the round's writes were stored.
    async fn fire_due(&self, now_ms: i64) -> Result<bool, Stop> {
        let due = match index::due(self.store.as_ref(), now_ms, ROUND) {
            Ok(due) => due,
            Err(e) => {
                tracing::error!("cannot read the cron index: {e}");
                return Ok(false);
            }
        };
        let mut pending = Vec::new();
        let mut stale = Vec::new();
        let mut publish = Vec::new();
        let mut direct = Vec::new();
        let now = self.clock.now();
        for (due_ms, id) in due {
            match self.prepare(&id, due_ms, now) {
                Prepared::Stale => stale.push((due_ms, id)),
                Prepared::Skipped(p) => pending.push(p),
                Prepared::Agent(job, due) => publish.push((job, due)),
                Prepared::Direct(job, due) => direct.push((job, due)),
            }
        }
        let mut stop = false;
        if !publish.is_empty() {
            let msgs = publish
                .iter()
                .map(|(job, due)| {
                    inbound(
                        job,
                        format!("cron:{}:{}", job.id, due.timestamp_millis()),
                        now,
                    )
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
                    pending.push(Pending {
                        id: job.id,
                        due,
                        run,
                    });
                }
            }
        }
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
        let stored = self.forget_stale(stale).await && self.commit(pending).await;
        if stop {
            return Err(Stop);
        }
        Ok(stored)
    }

    /// Drop due entries whose job was removed or re-scheduled since they were read.
    async fn forget_stale(&self, stale: Vec<(i64, String)>) -> bool {
        if stale.is_empty() {
            return true;
        }
        let _w = self.writes.lock().await;
        let mut batch = Batch::default();
        for (due_ms, id) in stale {
            match self.get(&id) {
                Ok(Some(job)) if armed(&job) == Some(due_ms) => {}
                _ => index::forget_due(&mut batch, due_ms, &id),
            }
        }
        match self.store.commit(batch).await {
            Ok(_) => true,
            Err(e) => {
                tracing::error!("cannot update the cron index: {e}");
                false
            }
        }
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
        if job.schedule.is_recurring() && job.catch_up == CatchUp::Skip && now - due > MISSED_GRACE
        {
            tracing::info!(id, "skipping a run missed while the gateway was down");
            let run = Run {
                at: now,
                due,
                outcome: Outcome::Skipped,
                error: Some("missed while the gateway was down".into()),
            };
            return Prepared::Skipped(Pending {
                id: job.id,
                due,
                run,
            });
        }
        match job.delivery {
            Delivery::Agent => Prepared::Agent(job, due),
            Delivery::Direct => Prepared::Direct(job, due),
        }
    }

    /// Hand a job's message to the bus; `Ok(Some(error))` when that failed for a reason
    /// other than shutdown.
    async fn publish(
        &self,
        job: &Job,
        message_id: String,
        now: DateTime<Utc>,
    ) -> Result<Option<String>, Stop> {
        let Some(bus) = &self.bus else {
            return Ok(Some("the gateway is not running".into()));
        };
        match bus.publish(inbound(job, message_id, now)).await {
            Ok(_) => Ok(None),
            Err(BusError::ShuttingDown) => Err(Stop),
            Err(e) => Ok(Some(e.to_string())),
        }
    }

    async fn fire_direct(&self, job: Job, due: DateTime<Utc>, now: DateTime<Utc>) {
        let Some(bus) = &self.bus else {
            return;
        };
        let reply = OutboundMessage::new(job.key.clone(), job.message.clone());
        let recorded = {
            let _w = self.writes.lock().await;
            let old = match self.get(&job.id) {
                Ok(Some(j)) if armed(&j) == armed(&job) => j,
                _ => return,
            };
            let mut fresh = old.clone();
            fresh.record(self.run_record(now, due, None));
            fresh.rearm(due, now);
            let mut batch = Batch::default();
            if let Err(e) = index::write(&mut batch, Some(&old), Some(&fresh)) {
                tracing::error!("cannot encode cron job: {e}");
            }
            bus.outbox()
                .record(vec![reply], batch)
                .await
                .map(|e| (e, fresh))
        };
        match recorded {
            Ok((entries, _)) => {
                self.wake.notify_one();
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
                let run = self.run_record(now, due, Some(e.to_string()));
                self.commit(vec![Pending {
                    id: job.id,
                    due,
                    run,
                }])
                .await;
            }
        }
    }

    /// `run_now`: fire outside the schedule; the run is recorded, the schedule untouched.
    pub(super) async fn fire_now(&self, job: Job) -> Result<(), ScheduleError> {
        let now = self.clock.now();
        let error = match job.delivery {
            Delivery::Agent => {
                let id = format!("cron:{}:now:{}", job.id, now.timestamp_millis());
                self.publish(&job, id, now)
                    .await
                    .map_err(|_| ScheduleError::NotRunning)?
            }
            Delivery::Direct => {
                let bus = self.bus.as_ref().ok_or(ScheduleError::NotRunning)?;
                let reply = OutboundMessage::new(job.key.clone(), job.message.clone());
                bus.send_direct(vec![reply])
                    .await
                    .err()
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

    /// Record runs and re-arm their jobs in one durable write. A job removed meanwhile
    /// stays removed; one re-scheduled meanwhile keeps its new time. Returns whether the
    /// write was stored.
    async fn commit(&self, pending: Vec<Pending>) -> bool {
        if pending.is_empty() {
            return true;
        }
        let mut batch = Batch::default();
        {
            let _w = self.writes.lock().await;
            for Pending { id, due, run } in pending {
                let Ok(Some(old)) = self.get(&id) else {
                    continue;
                };
                let mut job = old.clone();
                let now = run.at;
                let failed = run.outcome == Outcome::Failed;
                // The index keeps milliseconds; stored times may carry nanoseconds.
                let unchanged =
                    job.next_run.map(|t| t.timestamp_millis()) == Some(due.timestamp_millis());
                job.record(run);
                if unchanged {
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
                }
                if let Err(e) = index::write(&mut batch, Some(&old), Some(&job)) {
                    tracing::error!(id, "cannot encode cron job: {e}");
                }
            }
            if let Err(e) = self.store.commit(batch).await {
                tracing::error!("cannot store cron job states: {e}");
                return false;
            }
        }
        self.wake.notify_one();
        true
    }
}

/// What a due job needs.
enum Prepared {
    /// Removed, disabled or re-scheduled since its due entry was read.
    Stale,
    /// A missed recurring run with `catch_up = "skip"`.
    Skipped(Pending),
    Agent(Job, DateTime<Utc>),
    Direct(Job, DateTime<Utc>),
}

/// A run to record once the round is over.
struct Pending {
    id: String,
    due: DateTime<Utc>,
    run: Run,
}

/// The `System(Cron)` message for a job.
fn inbound(job: &Job, id: String, now: DateTime<Utc>) -> InboundMessage {
    let mut msg = InboundMessage::text(
        id,
        job.key.clone(),
        Sender {
            id: "cron".into(),
            username: None,
            display_name: "Scheduler".into(),
            is_owner: false,
        },
        job.message.clone(),
    );
    msg.received_at = now;
    msg.origin = Origin::System(SystemOrigin::Cron {
        job_id: job.id.clone(),
    });
    msg.metadata.insert("job_id".into(), job.id.clone().into());
    msg.metadata
        .insert("schedule".into(), job.schedule.describe(job.tz()).into());
    if let Some(model) = &job.model {
        msg.metadata.insert("model".into(), model.clone().into());
    }
    msg
}

async fn sleep_or_forever(d: Option<Duration>) {
    match d {
        Some(d) => tokio::time::sleep(d).await,
        None => std::future::pending().await,
    }
}
