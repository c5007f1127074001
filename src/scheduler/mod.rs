//! Producers that act on their own: cron jobs and reminders, and the heartbeat.
//! They publish `System` messages onto the bus; they never call the agent.
//!
//! - [`schedule`]: `at` / `every` / `cron` input, validation, next run in a timezone
//!   ([`crontab`] translates crontab for the `cron` crate and handles daylight saving).
//! - [`job`]: the stored job and its run history (`Tree::Cron`, JSON).
//! - [`engine`]: the [`Scheduler`] API (add, list, remove, run now, `/reminders`);
//!   `fire` is its loop, sleeping until the earliest due job of the due index, which lives
//!   in the store (`Tree::CronIndex`) beside a by-chat index, written with each job.
//! - [`tool`]: the agent's `cron` tool.
//! - [`heartbeat`]: periodic `System(Heartbeat)` turns driven by `HEARTBEAT.md`.
//! - [`clock`]: wall-clock access, replaceable by a clock that follows tokio's paused time.

pub mod clock;
pub mod crontab;
#[cfg(test)]
mod dst_tests;
pub mod engine;
mod fire;
pub mod heartbeat;
mod index;
pub mod job;
pub mod schedule;
pub mod tool;

pub use clock::{Clock, SystemClock, TokioClock};
pub use engine::{Limits, Scheduler};
pub use heartbeat::{Beat, Heartbeat, is_actionable, suppress_reply, without_token};
pub use job::{CatchUp, Delivery, Job, NewJob, Outcome, Run};
pub use schedule::{Schedule, ScheduleError, ScheduleSpec, local, next_after, parse_tz};
pub use tool::CronTool;

/// Add to `batch` the writes that store a new `job` with its index entries, for bulk
/// imports straight into a store (a gateway's own writes go through [`Scheduler`]).
pub fn stage_job(
    batch: &mut crate::store::Batch,
    job: &Job,
) -> Result<(), crate::store::StoreError> {
    index::write(batch, None, Some(job))?;
    index::mark_built(batch);
    Ok(())
}
