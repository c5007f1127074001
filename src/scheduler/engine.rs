//! The [`Scheduler`]: the job API used by the gateway, the admin API, the CLI and the `cron`
//! tool. Every change is durable (flushed) before it returns; the firing loop lives in
//! [`super::fire`].

use std::sync::{Arc, Mutex};

use switchboard_channel::ChatKey;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::clock::Clock;
use super::index;
use super::job::{Job, NewJob, Outcome};
use super::schedule::{Schedule, ScheduleError, next_after, parse_tz};
use crate::bus::Bus;
use crate::chain::Chain;
use crate::config::Config;
use crate::metrics::Metrics;
use crate::store::{Batch, Store, StoreError, Tree};

/// Runs in a row whose replies the platform refused that stop a job.
pub const REFUSED_RUNS: usize = 3;
/// How a run's error starts when the platform refused its reply.
const REFUSED: &str = "the platform refused the reply: ";

/// Longest message a job may carry.
const MAX_MESSAGE_CHARS: usize = 4_000;
/// How long a finished job (a one-shot reminder after its run) stays listed with its runs:
/// the next job added in its chat after that clears it away, or else the daily sweep
/// ([`Scheduler::clear_finished`]).
pub const FINISHED_KEPT: chrono::Duration = chrono::Duration::days(7);

/// Limits on jobs set or run by someone other than the owner (through the `cron` tool):
/// without them one chat member could have the gateway call the model every second, or
/// pile up jobs without end. Such a job runs at most once a minute (every 30 s when set
/// through the HTTP API), by its schedule or by `cron run`. The owner, the CLI and the admin
/// API are not limited. (A turn a job's run or a
/// sub-agent's result started is never the owner's.)
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Enabled jobs a chat may hold for a new one to be accepted.
    pub max_jobs_per_chat: usize,
    /// Least time between two runs of a job: a schedule that runs more often is refused
    /// when it is set, and [`Scheduler::run_from`] refuses a run sooner after the last.
    pub min_interval: std::time::Duration,
    /// Least time from now to a new job's first run.
    pub min_lead: std::time::Duration,
}

impl Limits {
    /// What a chat member who is not the owner may set and run.
    pub const MEMBER: Limits = Limits {
        max_jobs_per_chat: 20,
        min_interval: std::time::Duration::from_secs(60),
        min_lead: std::time::Duration::ZERO,
    };
    /// For a job set from a turn a job's run or a sub-agent's result started: its first
    /// run a minute away at the least, or each run could set the next one a second later.
    pub const CHAINED: Limits = Limits {
        min_lead: std::time::Duration::from_secs(60),
        ..Limits::MEMBER
    };
    /// For a caller of the HTTP API, which may call the model as often as it likes by
    /// itself while it is connected: jobs as often as every 30 s (DESIGN's `every = "30s"`),
    /// not more, as a job goes on after its caller left.
    pub const API: Limits = Limits {
        min_interval: std::time::Duration::from_secs(30),
        ..Limits::MEMBER
    };
}

/// Cron jobs and reminders: stored durably, fired on time through the bus.
pub struct Scheduler {
    pub(super) store: Arc<dyn Store>,
    /// `None` in the offline CLI: jobs can be managed, not fired.
    pub(super) bus: Option<Arc<Bus>>,
    pub(super) config: Arc<Config>,
    pub(super) metrics: Arc<Metrics>,
    pub(super) clock: Arc<dyn Clock>,
    /// Wakes the firing loop when jobs change.
    pub(super) wake: Notify,
    /// Serialises the runs asked for within [`Limits`], so two cannot both pass the check.
    pub(super) limited_runs: tokio::sync::Mutex<()>,
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

/// How far back a clock may be put and a recurring job still go on after its last run (not
/// repeat the runs made while the clock was ahead).
const CLOCK_SLIP: chrono::Duration = chrono::Duration::hours(1);

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
            wake: Notify::new(),
            limited_runs: tokio::sync::Mutex::new(()),
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

    /// Make sure the job indexes exist (built once from the jobs of an older store).
    pub(super) async fn ensure_indexes(&self) -> Result<(), StoreError> {
        let _w = self.writes.lock().await;
        if index::ensure(self.store.as_ref()).await? {
            tracing::info!("cron job indexes built");
        }
        Ok(())
    }

    /// Re-arm from `now` (see [`CLOCK_SLIP`]) the recurring jobs armed from a later time: the clock
    /// was ahead and has been put back, and they would otherwise wait for it to catch up (a
    /// day, after a clock a day ahead). A job armed normally is untouched: no run of its
    /// schedule falls between `now` and its next run. Returns how many were re-armed.
    pub(super) async fn rearm_if_ahead(
        &self,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Result<usize, StoreError> {
        let _w = self.writes.lock().await;
        let mut batch = Batch::default();
        let mut rearmed = 0;
        for old in self.list(None) {
            if !old.enabled || matches!(old.schedule, Schedule::At { .. }) {
                continue;
            }
            let (Some(next), Some(mut fresh)) =
                (old.next_run, next_after(&old.schedule, old.tz(), now))
            else {
                continue;
            };
            // A clock put back a little (NTP stepping a fast clock back minutes): the runs
            // made meanwhile stand, and the job goes on after the last of them rather than
            // making them again. Put back by more, it goes on from now.
            let last_due = old.runs.last().map(|r| r.due);
            if let Some(due) = last_due.filter(|d| fresh <= *d && *d - now <= CLOCK_SLIP) {
                match next_after(&old.schedule, old.tz(), due) {
                    Some(after) => fresh = after,
                    None => continue,
                }
            }
            if fresh >= next {
                continue;
            }
            tracing::warn!(id = %old.id, was = %next, now = %fresh,
                "cron job armed from a clock that was ahead; armed again");
            let new = Job {
                next_run: Some(fresh),
                ..old.clone()
            };
            index::write(&mut batch, Some(&old), None)?;
            index::write(&mut batch, None, Some(&new))?;
            rearmed += 1;
        }
        if rearmed > 0 {
            self.store.commit(batch).await?;
        }
        Ok(rearmed)
    }

    /// A job for a chat no channel serves would cost a model call at every run and keep
    /// its reply for ever: its key must name a channel of this build (or one registered on
    /// the bus, like the tests' own).
    fn check_channel(&self, key: &ChatKey) -> Result<(), ScheduleError> {
        // `api:` and `cli:` chats are served too: there a run's reply is not pushed (they
        // get only the answers to their requests) but kept in the chat's history, where the
        // next request finds it.
        let known = crate::channels::built_in();
        let registered = |b: &Arc<Bus>| b.outbox().has_channel(&key.channel);
        if known.contains(&key.channel.as_str()) || self.bus.as_ref().is_some_and(registered) {
            return crate::channels::check_chat_id(key).map_err(ScheduleError::BadKey);
        }
        Err(ScheduleError::UnknownChannel {
            channel: key.channel.clone(),
            key: key.to_string(),
            known: known.join(", "),
        })
    }

    /// Validate and store a new job; it is durable and armed when this returns.
    pub async fn add(&self, new: NewJob) -> Result<Job, ScheduleError> {
        self.add_with(new, None).await
    }

    /// [`Self::add`] within `limits` (a job set by someone other than the owner).
    pub async fn add_limited(&self, new: NewJob, limits: Limits) -> Result<Job, ScheduleError> {
        self.add_with(new, Some(limits)).await
    }

    async fn add_with(&self, new: NewJob, limits: Option<Limits>) -> Result<Job, ScheduleError> {
        // A job added now would never fire: say so rather than store it.
        if !self.config.cron.enabled {
            return Err(ScheduleError::Disabled);
        }
        self.check_channel(&new.key)?;
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
        let floor = limits.map_or(std::time::Duration::ZERO, |l| l.min_interval);
        if schedule.shortest_gap().is_some_and(|gap| gap < floor) {
            return Err(ScheduleError::TooFrequent(
                schedule.describe(tz),
                floor.as_secs(),
            ));
        }
        let next_run = next_after(&schedule, tz, now);
        let lead = limits.map_or(std::time::Duration::ZERO, |l| l.min_lead);
        if next_run.is_some_and(|t| (t - now).to_std().unwrap_or_default() < lead) {
            return Err(ScheduleError::TooSoon(lead.as_secs()));
        }
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
            set_by: new.set_by,
        };
        {
            let _w = self.writes.lock().await;
            // Counted under the lock, so two adds at once cannot both take the last place.
            let (enabled, stale) = self.census(&job.key, now)?;
            if let Some(limits) = limits {
                if enabled >= limits.max_jobs_per_chat {
                    return Err(ScheduleError::TooManyJobs(enabled));
                }
            }
            let mut batch = Batch::default();
            for old in &stale {
                index::write(&mut batch, Some(old), None)?;
            }
            index::write(&mut batch, None, Some(&job))?;
            self.store.commit(batch).await?;
        }
        self.wake.notify_one();
        let next = job
            .next_run
            .map_or_else(|| "never".into(), |t| t.to_rfc3339());
        tracing::info!(id = %job.id, key = %job.key, %next, "cron job added");
        Ok(job)
    }

    /// The jobs of a chat with its threads or topics (read through the chat index): how
    /// many are enabled (a new Slack thread is a new key, and must not open a new
    /// allowance; the jobs of someone who lost access do not fire, and leave their places
    /// free), and the finished ones done with for [`FINISHED_KEPT`], which adding a job
    /// there clears away.
    fn census(
        &self,
        key: &ChatKey,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Result<(usize, Vec<Job>), ScheduleError> {
        let (mut enabled, mut stale) = (0, Vec::new());
        for id in index::of_room(self.store.as_ref(), &key.room())? {
            match self.get(&id)? {
                Some(j) if !j.is_finished() => {
                    let store = self.store.as_ref();
                    let setters_in = j.set_by.iter().all(|s| {
                        // A store that cannot tell: counted (the cap holds).
                        s.admitted(&self.config, store).unwrap_or(true)
                    });
                    if setters_in {
                        enabled += 1;
                    }
                }
                Some(j) if j.stale(now) => stale.push(j),
                _ => {}
            }
        }
        Ok((enabled, stale))
    }

    /// Remove every job finished for longer than [`FINISHED_KEPT`] at `now` (the gateway
    /// calls it daily: a chat where no job is added again would keep them for ever). The
    /// number removed.
    pub async fn clear_finished(
        &self,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Result<usize, ScheduleError> {
        let ids: Vec<String> = self
            .list(None)
            .into_iter()
            .filter(|j| j.stale(now))
            .map(|j| j.id)
            .collect();
        let _w = self.writes.lock().await;
        let mut batch = Batch::default();
        let mut removed = 0;
        for id in ids {
            // Read again under the lock: run or changed meanwhile, it stays.
            if let Some(j) = self.get(&id)?.filter(|j| j.stale(now)) {
                index::write(&mut batch, Some(&j), None)?;
                removed += 1;
            }
        }
        if removed > 0 {
            self.store.commit(batch).await?;
        }
        Ok(removed)
    }

    /// The platform refused for good the reply to the last run of job `id` (`why`): noted
    /// on that run, and after [`REFUSED_RUNS`] such runs in a row the job stops, rather
    /// than call the model for a chat that takes nothing (a member who left, a channel the
    /// bot was removed from).
    pub async fn note_refused(&self, id: &str, why: &str) -> Result<(), ScheduleError> {
        let _w = self.writes.lock().await;
        let Some(old) = self.get(id)? else {
            return Ok(());
        };
        let mut job = old.clone();
        let Some(last) = job.runs.last_mut() else {
            return Ok(());
        };
        last.outcome = Outcome::Failed;
        last.error = Some(format!("{REFUSED}{why}"));
        let refused = job
            .runs
            .iter()
            .rev()
            .take_while(|r| r.error.as_deref().is_some_and(|e| e.starts_with(REFUSED)))
            .count();
        if refused >= REFUSED_RUNS && !job.is_finished() {
            job.enabled = false;
            job.next_run = None;
            tracing::error!(id, key = %job.key,
                "cron job stopped: its chat refused the replies of its last {refused} runs \
                 ({why}); add it again once the bot can post there");
        }
        let mut batch = Batch::default();
        index::write(&mut batch, Some(&old), None)?;
        index::write(&mut batch, None, Some(&job))?;
        self.store.commit(batch).await?;
        Ok(())
    }

    /// Jobs of one chat (or all), soonest first; finished jobs last.
    pub fn list(&self, key: Option<&ChatKey>) -> Vec<Job> {
        self.list_by(key, index::of_chat)
    }

    /// Jobs of the chat `key` is part of, with all its threads or topics
    /// ([`ChatKey::room`]): what `/reminders` and the `cron` tool show a member, so a
    /// reminder set in one Slack thread can be found and removed from another.
    pub fn list_room(&self, key: &ChatKey) -> Vec<Job> {
        self.list_by(Some(&key.room()), index::of_room)
    }

    fn list_by(
        &self,
        key: Option<&ChatKey>,
        ids_of: fn(&dyn Store, &ChatKey) -> Result<Vec<String>, StoreError>,
    ) -> Vec<Job> {
        let mut jobs = Vec::new();
        let read = match key {
            // Through the chat index: only this chat's jobs are read.
            Some(key) => ids_of(self.store.as_ref(), key).map(|ids| {
                jobs.extend(ids.iter().filter_map(|id| self.get(id).ok().flatten()));
            }),
            None => self.store.for_each(Tree::Cron, &[], &mut |_, v| {
                jobs.extend(Job::from_bytes(v).ok());
                true
            }),
        };
        if let Err(e) = read {
            tracing::error!("cannot read cron jobs: {e}");
        }
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
            let mut batch = Batch::default();
            index::write(&mut batch, Some(&job), None)?;
            self.store.commit(batch).await?;
            job
        };
        self.wake.notify_one();
        tracing::info!(id, "cron job removed");
        Ok(job)
    }

    /// Fire a job now, outside its schedule (which stays as it is). Without a gateway
    /// (the CLI on the store), the run is queued for the next gateway's start.
    pub async fn run_now(&self, id: &str) -> Result<(), ScheduleError> {
        self.run_from(id, &Chain::default(), None, &[]).await
    }

    /// [`Self::run_now`] asked for by a turn that `chain` led to (the `cron` tool), which
    /// the run's turn carries on; within `limits` (not the owner), refused while the job ran
    /// (by its schedule or so) less than [`Limits::min_interval`] ago. The run acts for
    /// `asked_by` too (a member asking for the owner's job does not get the owner's powers
    /// for its turn).
    pub async fn run_from(
        &self,
        id: &str,
        chain: &Chain,
        limits: Option<Limits>,
        asked_by: &[crate::access::Setter],
    ) -> Result<(), ScheduleError> {
        let _one = match limits {
            Some(_) => Some(self.limited_runs.lock().await),
            None => None,
        };
        let mut job = self
            .get(id)?
            .ok_or_else(|| ScheduleError::NotFound(id.to_string()))?;
        for s in asked_by {
            s.clone().add_to(&mut job.set_by);
        }
        if let Some(limits) = limits {
            let last = job
                .runs
                .iter()
                .filter(|r| r.outcome != Outcome::Skipped)
                .map(|r| r.at)
                .max();
            let since = last.map(|at| (self.clock.now() - at).to_std().unwrap_or_default());
            if let Some(since) = since.filter(|s| *s < limits.min_interval) {
                let wait = (limits.min_interval - since).as_secs().max(1);
                return Err(ScheduleError::RanRecently {
                    id: id.to_string(),
                    wait_secs: wait,
                    floor_secs: limits.min_interval.as_secs(),
                });
            }
        }
        self.fire_now(job, chain).await
    }

    /// Move the jobs of chat `from` to chat `to` (the chat got a new key for good); returns
    /// how many moved. Their schedules and runs stay as they are.
    pub async fn rekey(&self, from: &ChatKey, to: &ChatKey) -> Result<usize, ScheduleError> {
        let _w = self.writes.lock().await;
        let mut batch = Batch::default();
        let mut moved = 0;
        for id in index::of_chat(self.store.as_ref(), from)? {
            let Some(old) = self.get(&id)? else {
                continue;
            };
            let new = Job {
                key: to.clone(),
                ..old.clone()
            };
            // Out of the old chat's index, into the new one's (the due entry is rewritten
            // as it was).
            index::write(&mut batch, Some(&old), None)?;
            index::write(&mut batch, None, Some(&new))?;
            moved += 1;
        }
        self.store.commit(batch).await?;
        Ok(moved)
    }

    /// The `/reminders` answer: this chat's jobs with their next run in the job's timezone.
    pub fn reminders_text(&self, key: &ChatKey) -> String {
        let jobs: Vec<Job> = self
            .list_room(key)
            .into_iter()
            .filter(|j| !j.is_finished())
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
