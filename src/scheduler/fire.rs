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
use super::job::{CatchUp, Delivery, Job, Outcome, Run};
use super::schedule::ScheduleError;
use crate::bus::BusError;
use crate::store::{Batch, Tree};

/// Longest single sleep, so a wall-clock jump (NTP, suspend) is noticed within a minute.
const MAX_SLEEP: Duration = Duration::from_secs(60);
/// Jobs taken from the index per round.
const ROUND: usize = 1024;
/// Jobs handed to the bus concurrently (their durable writes share fsyncs).
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
        match self.reload() {
            Ok(n) => tracing::info!(jobs = n, "scheduler started"),
            Err(e) => tracing::error!("scheduler cannot read its jobs: {e}"),
        }
        loop {
            let now = self.clock.now().timestamp_millis();
            let first = self.index.lock().unwrap_or_else(|p| p.into_inner()).first();
            let wait = match first {
                Some(due) if due <= now => {
                    if self.fire_due(now).await.is_err() {
                        return;
                    }
                    continue;
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

    /// Fire everything due at `now_ms` (one round), then record the runs and re-arm the jobs
    /// in one write, made durable with one flush.
    async fn fire_due(&self, now_ms: i64) -> Result<(), Stop> {
        let due = self
            .index
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .pop_due(now_ms, ROUND);
        let results: Vec<Result<Option<Pending>, Stop>> = futures_util::stream::iter(due)
            .map(|(due_ms, id)| async move { self.fire_one(&id, due_ms).await })
            .buffer_unordered(CONCURRENCY)
            .collect()
            .await;
        let stop = results.iter().any(Result::is_err);
        let pending: Vec<Pending> = results
            .into_iter()
            .filter_map(|r| r.ok().flatten())
            .collect();
        self.commit(pending).await;
        if let Err(e) = self.store.flush().await {
            tracing::error!("cannot make cron job states durable: {e}");
        }
        if stop {
            return Err(Stop);
        }
        Ok(())
    }

    /// Fire one job; returns the run to record (direct delivery records its own).
    async fn fire_one(&self, id: &str, due_ms: i64) -> Result<Option<Pending>, Stop> {
        // Always the stored copy: the API may have changed or removed it since it was armed.
        let job = match self.get(id) {
            Ok(Some(job)) => job,
            Ok(None) => return Ok(None),
            Err(e) => {
                tracing::error!(id, "cannot read cron job: {e}");
                return Ok(None);
            }
        };
        if armed(&job) != Some(due_ms) {
            self.arm(&job);
            return Ok(None);
        }
        let Some(due) = DateTime::from_timestamp_millis(due_ms) else {
            return Ok(None);
        };
        let now = self.clock.now();
        if job.schedule.is_recurring() && job.catch_up == CatchUp::Skip && now - due > MISSED_GRACE
        {
            tracing::info!(id, "skipping a run missed while the gateway was down");
            let run = Run {
                at: now,
                due,
                outcome: Outcome::Skipped,
                error: Some("missed while the gateway was down".into()),
            };
            return Ok(Some(Pending {
                id: job.id,
                due,
                run,
            }));
        }
        self.metrics
            .cron_lateness
            .observe((now - due).to_std().unwrap_or_default());
        let message_id = format!("cron:{id}:{due_ms}");
        let run = match job.delivery {
            Delivery::Agent => self.publish(&job, message_id, now).await,
            Delivery::Direct => {
                // Recorded with the job's new state in one atomic write: sent exactly once.
                self.fire_direct(job, due, now).await;
                return Ok(None);
            }
        };
        let error = run?;
        let run = self.run_record(now, due, error);
        Ok(Some(Pending {
            id: job.id,
            due,
            run,
        }))
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
            let mut fresh = match self.get(&job.id) {
                Ok(Some(j)) if armed(&j) == armed(&job) => j,
                _ => return,
            };
            fresh.record(self.run_record(now, due, None));
            fresh.rearm(due, now);
            let mut batch = Batch::default();
            match fresh.to_bytes() {
                Ok(bytes) => batch.put(Tree::Cron, Job::store_key(&fresh.id), bytes),
                Err(e) => tracing::error!("cannot encode cron job: {e}"),
            }
            bus.outbox()
                .record(vec![reply], batch)
                .await
                .map(|e| (e, fresh))
        };
        match recorded {
            Ok((entries, fresh)) => {
                self.arm(&fresh);
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
            if let Some(mut fresh) = self.get(&job.id)? {
                fresh.record(run);
                self.store
                    .put(Tree::Cron, &Job::store_key(&job.id), &fresh.to_bytes()?)?;
            }
        }
        self.store.flush().await?;
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

    /// Record runs and re-arm their jobs in one write (durable at the round's flush). A job
    /// removed meanwhile stays removed; one re-scheduled meanwhile keeps its new time.
    async fn commit(&self, pending: Vec<Pending>) {
        if pending.is_empty() {
            return;
        }
        let mut batch = Batch::default();
        let mut jobs = Vec::with_capacity(pending.len());
        {
            let _w = self.writes.lock().await;
            for Pending { id, due, run } in pending {
                let Ok(Some(mut job)) = self.get(&id) else {
                    continue;
                };
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
                match job.to_bytes() {
                    Ok(bytes) => batch.put(Tree::Cron, Job::store_key(&id), bytes),
                    Err(e) => tracing::error!(id, "cannot encode cron job: {e}"),
                }
                jobs.push(job);
            }
            if let Err(e) = self.store.apply(batch) {
                tracing::error!("cannot store cron job states: {e}");
            }
        }
        let mut index = self.index.lock().unwrap_or_else(|p| p.into_inner());
        for job in &jobs {
            index.set(&job.id, armed(job));
        }
        drop(index);
        self.wake.notify_one();
    }
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
