//! The [`Scheduler`]: the job API used by the gateway, the admin API, the CLI and the `cron`
//! tool. Every change is durable (flushed) before it returns; the firing loop lives in
//! [`super::fire`].

use std::sync::{Arc, Mutex};

use switchboard_channel::ChatKey;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::clock::Clock;
use super::index::Index;
use super::job::{Job, NewJob};
use super::schedule::{Schedule, ScheduleError, next_after, parse_tz};
use crate::bus::Bus;
use crate::config::Config;
use crate::metrics::Metrics;
use crate::store::{Store, StoreError, Tree};

/// Longest message a job may carry.
const MAX_MESSAGE_CHARS: usize = 4_000;

/// Cron jobs and reminders: stored durably, fired on time through the bus.
pub struct Scheduler {
    pub(super) store: Arc<dyn Store>,
    /// `None` in the offline CLI: jobs can be managed, not fired.
    pub(super) bus: Option<Arc<Bus>>,
    pub(super) config: Arc<Config>,
    pub(super) metrics: Arc<Metrics>,
    pub(super) clock: Arc<dyn Clock>,
    /// Enabled jobs by due time. Short critical sections only.
    pub(super) index: Mutex<Index>,
    /// Wakes the firing loop when jobs change.
    pub(super) wake: Notify,
    /// Serialises read-modify-write of stored jobs (the API and the firing loop), so a job
    /// removed or added meanwhile is never overwritten by a stale copy.
    pub(super) writes: tokio::sync::Mutex<()>,
    /// Where background deliveries are spawned once started.
    pub(super) tracker: Mutex<Option<TaskTracker>>,
}

impl From<StoreError> for ScheduleError {
    fn from(e: StoreError) -> Self {
        ScheduleError::Store(e.to_string())
    }
}

impl Scheduler {
    /// A scheduler over `store`. Give it the bus in the gateway, `None` in the offline CLI.
    pub fn new(
        store: Arc<dyn Store>,
        bus: Option<Arc<Bus>>,
        config: Arc<Config>,
        metrics: Arc<Metrics>,
        clock: Arc<dyn Clock>,
    ) -> Arc<Self> {
        Arc::new(Self {
            store,
            bus,
            config,
            metrics,
            clock,
            index: Mutex::new(Index::default()),
            wake: Notify::new(),
            writes: tokio::sync::Mutex::new(()),
            tracker: Mutex::new(None),
        })
    }

    /// Start the firing loop on `tracker` (no-op with `cron.enabled = false` or without a
    /// bus). Missed one-shot jobs fire right away; missed recurring jobs follow their
    /// `catch_up`.
    pub fn start(self: &Arc<Self>, shutdown: CancellationToken, tracker: &TaskTracker) {
        if !self.config.cron.enabled {
            tracing::info!("cron is disabled (cron.enabled = false): jobs will not fire");
            return;
        }
        if self.bus.is_none() {
            tracing::warn!("scheduler started without a bus: jobs will not fire");
            return;
        }
        *self.tracker.lock().unwrap_or_else(|p| p.into_inner()) = Some(tracker.clone());
        let me = self.clone();
        tracker.spawn(async move { me.run(shutdown).await });
    }

    /// Rebuild the in-memory index from the store (the loop does this when it starts);
    /// returns the number of armed jobs.
    pub fn reload(&self) -> Result<usize, StoreError> {
        // Streamed, so 100 000 jobs are never all in memory at once.
        // Only the fields the index needs are decoded.
        #[derive(serde::Deserialize)]
        struct Armed {
            id: String,
            enabled: bool,
            next_run: Option<chrono::DateTime<chrono::Utc>>,
        }
        let mut armed_jobs = Vec::new();
        self.store.for_each(Tree::Cron, &[], &mut |k, v| {
            match serde_json::from_slice::<Armed>(v) {
                Ok(a) => {
                    let due = a
                        .next_run
                        .filter(|_| a.enabled)
                        .map(|t| t.timestamp_millis());
                    armed_jobs.push((a.id, due));
                }
                Err(e) => tracing::error!(id = %String::from_utf8_lossy(k), "skipping job: {e}"),
            }
            true
        })?;
        let mut index = self.index.lock().unwrap_or_else(|p| p.into_inner());
        index.clear();
        for (id, at) in armed_jobs {
            index.set(&id, at);
        }
        Ok(index.len())
    }

    /// Validate and store a new job; it is durable and armed when this returns.
    pub async fn add(&self, new: NewJob) -> Result<Job, ScheduleError> {
        let message = new.message.trim();
        if message.is_empty() {
            return Err(ScheduleError::EmptyMessage);
        }
        if message.chars().count() > MAX_MESSAGE_CHARS {
            return Err(ScheduleError::MessageTooLong(MAX_MESSAGE_CHARS));
        }
        let tz_name = new
            .tz
            .as_deref()
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .unwrap_or(&self.config.gateway.timezone);
        let tz = parse_tz(tz_name)?;
        let now = self.clock.now();
        let schedule = Schedule::parse(&new.schedule, tz, now)?;
        let next_run = next_after(&schedule, tz, now);
        let job = Job {
            id: format!("j{}", base36(self.store.next_id()?)),
            key: new.key,
            message: message.to_string(),
            schedule,
            tz: tz.name().to_string(),
            created_by: new.created_by,
            created_at: now,
            enabled: next_run.is_some(),
            next_run,
            runs: Vec::new(),
            delivery: new.delivery,
            catch_up: new.catch_up,
            model: new.model.filter(|m| !m.trim().is_empty()),
        };
        {
            let _w = self.writes.lock().await;
            self.store
                .put(Tree::Cron, &Job::store_key(&job.id), &job.to_bytes()?)?;
        }
        self.store.flush().await?;
        self.arm(&job);
        tracing::info!(id = %job.id, key = %job.key, next = ?job.next_run, "cron job added");
        Ok(job)
    }

    /// Jobs of one chat (or all), soonest first; finished jobs last.
    pub fn list(&self, key: Option<&ChatKey>) -> Vec<Job> {
        let entries = match self.store.scan(Tree::Cron, &[]) {
            Ok(e) => e,
            Err(e) => {
                tracing::error!("cannot read cron jobs: {e}");
                return Vec::new();
            }
        };
        let mut jobs: Vec<Job> = entries
            .iter()
            .filter_map(|(_, v)| Job::from_bytes(v).ok())
            .filter(|j| key.is_none_or(|k| &j.key == k))
            .collect();
        jobs.sort_by(|a, b| {
            (armed(a).is_none(), armed(a), &a.id).cmp(&(armed(b).is_none(), armed(b), &b.id))
        });
        jobs
    }

    /// One job by id.
    pub fn get(&self, id: &str) -> Result<Option<Job>, ScheduleError> {
        match self.store.get(Tree::Cron, &Job::store_key(id))? {
            None => Ok(None),
            Some(v) => Ok(Some(Job::from_bytes(&v)?)),
        }
    }

    /// Delete a job; returns what was removed.
    pub async fn remove(&self, id: &str) -> Result<Job, ScheduleError> {
        let job = {
            let _w = self.writes.lock().await;
            let job = self
                .get(id)?
                .ok_or_else(|| ScheduleError::NotFound(id.to_string()))?;
            self.store.delete(Tree::Cron, &Job::store_key(id))?;
            job
        };
        self.store.flush().await?;
        self.index
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .set(id, None);
        self.wake.notify_one();
        tracing::info!(id, "cron job removed");
        Ok(job)
    }

    /// Fire a job now, outside its schedule (which stays as it is).
    pub async fn run_now(&self, id: &str) -> Result<(), ScheduleError> {
        if self.bus.is_none() {
            return Err(ScheduleError::NotRunning);
        }
        let job = self
            .get(id)?
            .ok_or_else(|| ScheduleError::NotFound(id.to_string()))?;
        self.fire_now(job).await
    }

    /// The `/reminders` answer: this chat's jobs with their next run in the job's timezone.
    pub fn reminders_text(&self, key: &ChatKey) -> String {
        let jobs: Vec<Job> = self
            .list(Some(key))
            .into_iter()
            .filter(|j| armed(j).is_some())
            .collect();
        if jobs.is_empty() {
            return "No reminders in this chat.".to_string();
        }
        let mut out = format!("Reminders in this chat ({}):", jobs.len());
        for job in jobs {
            out.push_str("\n• ");
            out.push_str(&job.summary());
        }
        out
    }

    /// Number of jobs armed in memory (for `/status` and tests).
    pub fn armed_jobs(&self) -> usize {
        self.index.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// Put a job's due time in the index and wake the loop.
    pub(super) fn arm(&self, job: &Job) {
        self.index
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .set(&job.id, armed(job));
        self.wake.notify_one();
    }
}

/// The due time a job is armed with, in unix milliseconds.
pub(super) fn armed(job: &Job) -> Option<i64> {
    job.next_run
        .filter(|_| job.enabled)
        .map(|t| t.timestamp_millis())
}

fn base36(mut n: u64) -> String {
    const DIGITS: &[u8; 36] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let mut out = Vec::new();
    loop {
        out.push(DIGITS[(n % 36) as usize]);
        n /= 36;
        if n == 0 {
            break;
        }
    }
    out.reverse();
    String::from_utf8(out).unwrap_or_default()
}
