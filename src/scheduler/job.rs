//! The stored job: what to say, to which chat, when, and how its last runs went. Jobs live in
//! `Tree::Cron` as JSON, keyed by id.

use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use serde::{Deserialize, Serialize};
use switchboard_channel::ChatKey;

use super::schedule::{Schedule, ScheduleSpec, local, next_after};
use crate::access::Setter;
use crate::store::StoreError;

/// Runs kept per job.
pub const MAX_RUNS: usize = 20;

/// How a due job reaches its chat.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Delivery {
    /// A `System(Cron)` message on the bus: the agent composes the reply (default).
    #[default]
    Agent,
    /// The message text is sent to the chat as is, without an LLM call.
    Direct,
}

/// What a recurring job does about runs missed while the gateway was down.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CatchUp {
    /// Fire once for the whole missed window, then keep the schedule (default).
    #[default]
    Once,
    /// Do not fire for missed runs; wait for the next one.
    Skip,
}

/// How one run went.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Handed to the bus (or recorded for direct delivery).
    Ok,
    /// Could not be handed over; `error` says why.
    Failed,
    /// Not run: missed while the gateway was down (and the job says `catch_up = "skip"`, or
    /// its next run is near), or someone who set it no longer has access.
    Skipped,
}

/// One run of a job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Run {
    /// When it fired.
    pub at: DateTime<Utc>,
    /// When it was due (`at − due` is the lateness).
    pub due: DateTime<Utc>,
    pub outcome: Outcome,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl Run {
    /// A run due at `due` that was not made, and why.
    pub fn skipped(at: DateTime<Utc>, due: DateTime<Utc>, why: impl Into<String>) -> Self {
        Self {
            at,
            due,
            outcome: Outcome::Skipped,
            error: Some(why.into()),
        }
    }
}

/// A scheduled job, as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Job {
    /// Short, never reused (`j3k9`).
    pub id: String,
    /// The chat it belongs to.
    pub key: ChatKey,
    /// What the agent is asked to do (or, with `Delivery::Direct`, the text sent).
    pub message: String,
    pub schedule: Schedule,
    /// IANA timezone the schedule is read in.
    pub tz: String,
    /// Who made it: `cli`, `api`, or `chat:<key>` (the `cron` tool).
    pub created_by: String,
    pub created_at: DateTime<Utc>,
    /// Disabled jobs never fire (one-shot jobs are disabled after their run).
    pub enabled: bool,
    /// The next due time while enabled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_run: Option<DateTime<Utc>>,
    /// The last [`MAX_RUNS`] runs, oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub runs: Vec<Run>,
    #[serde(default)]
    pub delivery: Delivery,
    #[serde(default)]
    pub catch_up: CatchUp,
    /// The LLM model for this job's turns, instead of `llm.model`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// The people whose messages made it (the `cron` tool): it fires only while they all
    /// still have access. Empty for the owner's CLI and admin API.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub set_by: Vec<Setter>,
}

/// A job to create: what [`super::Scheduler::add`] validates.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NewJob {
    pub key: ChatKey,
    pub message: String,
    pub schedule: ScheduleSpec,
    /// IANA timezone; `gateway.timezone` when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tz: Option<String>,
    pub created_by: String,
    #[serde(default)]
    pub delivery: Delivery,
    #[serde(default)]
    pub catch_up: CatchUp,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub set_by: Vec<Setter>,
}

impl NewJob {
    /// A job with the default delivery (agent) and catch-up (once).
    pub fn new(
        key: ChatKey,
        message: impl Into<String>,
        schedule: ScheduleSpec,
        created_by: &str,
    ) -> Self {
        Self {
            key,
            message: message.into(),
            schedule,
            tz: None,
            created_by: created_by.to_string(),
            delivery: Delivery::Agent,
            catch_up: CatchUp::Once,
            model: None,
            set_by: Vec::new(),
        }
    }
}

impl Job {
    /// The job's timezone (UTC if the stored name no longer parses).
    pub fn tz(&self) -> Tz {
        self.tz.parse().unwrap_or(chrono_tz::UTC)
    }

    /// The store key of a job id.
    pub fn store_key(id: &str) -> Vec<u8> {
        id.as_bytes().to_vec()
    }

    pub fn to_bytes(&self) -> Result<Vec<u8>, StoreError> {
        serde_json::to_vec(self).map_err(|e| StoreError::Backend(format!("cannot encode job: {e}")))
    }

    pub fn from_bytes(bytes: &[u8]) -> Result<Self, StoreError> {
        serde_json::from_slice(bytes)
            .map_err(|e| StoreError::Backend(format!("corrupt cron job: {e}")))
    }

    /// Append a run, keeping the last [`MAX_RUNS`].
    pub fn record(&mut self, run: Run) {
        self.runs.push(run);
        if self.runs.len() > MAX_RUNS {
            let extra = self.runs.len() - MAX_RUNS;
            self.runs.drain(..extra);
        }
    }

    /// Re-arm after the run due at `due` and handled at `now`: the next run strictly after
    /// both (so a late run never fires twice for one window), or disabled when none is left.
    pub fn rearm(&mut self, due: DateTime<Utc>, now: DateTime<Utc>) {
        self.next_run = next_after(&self.schedule, self.tz(), due.max(now));
        if self.next_run.is_none() {
            self.enabled = false;
        }
    }

    /// Whether the job will not fire again (a one-shot job after its run): it stays stored
    /// with its runs (`cron list` shows it) for [`super::engine::FINISHED_KEPT`], but
    /// `/reminders` and the `cron` tool no longer show it.
    pub fn is_finished(&self) -> bool {
        !self.enabled || self.next_run.is_none()
    }

    /// Finished for longer than [`super::engine::FINISHED_KEPT`] at `now`: due to be cleared.
    pub fn stale(&self, now: DateTime<Utc>) -> bool {
        self.is_finished() && now - self.last_activity() > super::engine::FINISHED_KEPT
    }

    /// When the job last ran, or was made.
    pub fn last_activity(&self) -> DateTime<Utc> {
        self.runs.last().map_or(self.created_at, |r| r.at)
    }

    /// One line for `/reminders` and listings: id, schedule, next run in the job's timezone.
    pub fn summary(&self) -> String {
        let tz = self.tz();
        let next = match (self.enabled, self.next_run) {
            (true, Some(t)) => format!("next {}", local(&t, tz)),
            _ => "finished".to_string(),
        };
        let mut message: String = self.message.chars().take(80).collect();
        if message.len() < self.message.len() {
            message.push('…');
        }
        format!(
            "{} — {}, {} — {}",
            self.id,
            self.schedule.describe(tz),
            next,
            message
        )
    }
}
