//! The `cron` tool: the agent adds, lists, removes and runs reminders and cron jobs. Jobs
//! target the current chat; only the owner may see or touch other chats' jobs, and jobs set
//! or run by anyone else are held to [`Limits::MEMBER`] ([`Limits::CHAINED`] from a turn a
//! job's run or a sub-agent's result started). No turn may run a job whose run led to it.

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{Value, json};
use switchboard_channel::ChatKey;

use super::engine::{Limits, Scheduler};
use super::job::{CatchUp, Delivery, Job, NewJob};
use super::schedule::{ScheduleError, ScheduleSpec, local};
use crate::agent::tool::{Tool, ToolContext, ToolError};

/// The `cron` tool over a [`Scheduler`].
pub struct CronTool {
    scheduler: Arc<Scheduler>,
}

impl CronTool {
    pub fn new(scheduler: Arc<Scheduler>) -> Self {
        Self { scheduler }
    }
}

fn arg<'a>(args: &'a Value, name: &str) -> Option<&'a str> {
    args.get(name)
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|s| !s.is_empty())
}

fn job_json(job: &Job) -> Value {
    let tz = job.tz();
    json!({
        "id": job.id,
        "key": job.key.to_string(),
        "message": job.message,
        "schedule": job.schedule.describe(tz),
        "next_run": job.next_run.filter(|_| job.enabled).map(|t| local(&t, tz)),
        "enabled": job.enabled,
        "delivery": job.delivery,
    })
}

/// What the caller may set and run: the owner anything; a turn that a job's run or a
/// sub-agent's result led to sets jobs a minute ahead at the earliest; a caller of the HTTP
/// API (which may call the model as often as it likes by itself while connected) jobs as
/// often as every 30 s; other chat members at most once a minute. All but the owner hold
/// 20 jobs a chat at most.
fn limits(ctx: &ToolContext) -> Option<Limits> {
    if ctx.sender_is_owner {
        None
    } else if !ctx.chain.is_empty() {
        Some(Limits::CHAINED)
    } else if ctx.key.channel == "api" {
        Some(Limits::API)
    } else {
        Some(Limits::MEMBER)
    }
}

fn failed(e: ScheduleError) -> ToolError {
    if matches!(
        e,
        ScheduleError::TooFrequent(..)
            | ScheduleError::TooManyJobs(_)
            | ScheduleError::RanRecently { .. }
            | ScheduleError::TooSoon(_)
    ) {
        ToolError::Refused(e.to_string())
    } else if e.is_user_error() {
        ToolError::InvalidArguments(e.to_string())
    } else {
        ToolError::Failed(e.to_string())
    }
}

impl CronTool {
    /// The target chat: the current one, or (owner only) the `key` argument.
    fn target(&self, args: &Value, ctx: &ToolContext) -> Result<ChatKey, ToolError> {
        match arg(args, "key") {
            None => Ok(ctx.key.clone()),
            Some(k) => {
                let key: ChatKey = k.parse().map_err(|e: switchboard_channel::ParseKeyError| {
                    ToolError::InvalidArguments(e.to_string())
                })?;
                if key != ctx.key && !ctx.sender_is_owner {
                    return Err(ToolError::Refused(
                        "only the owner can see or set the jobs of another chat".into(),
                    ));
                }
                Ok(key)
            }
        }
    }

    /// A job the caller may touch; others' jobs look absent (their ids are not confirmed).
    fn visible_job(&self, args: &Value, ctx: &ToolContext) -> Result<Job, ToolError> {
        let id = arg(args, "id")
            .ok_or_else(|| ToolError::InvalidArguments("missing required id".into()))?;
        match self.scheduler.get(id).map_err(failed)? {
            Some(job) if ctx.sender_is_owner || job.key.room() == ctx.key.room() => Ok(job),
            _ => Err(ToolError::Failed(format!(
                "no job with id {id:?} in this chat (use action \"list\" to see the ids)"
            ))),
        }
    }

    async fn add(&self, args: &Value, ctx: &ToolContext) -> Result<String, ToolError> {
        let message = arg(args, "message")
            .ok_or_else(|| ToolError::InvalidArguments("missing required message".into()))?;
        let specs: Vec<ScheduleSpec> = [
            arg(args, "at").map(|s| ScheduleSpec::At(s.into())),
            arg(args, "every").map(|s| ScheduleSpec::Every(s.into())),
            arg(args, "cron").map(|s| ScheduleSpec::Cron(s.into())),
        ]
        .into_iter()
        .flatten()
        .collect();
        let spec = match <[ScheduleSpec; 1]>::try_from(specs) {
            Ok([spec]) => spec,
            Err(v) if v.is_empty() => return Err(failed(ScheduleError::Empty)),
            Err(_) => return Err(failed(ScheduleError::Ambiguous)),
        };
        let key = self.target(args, ctx)?;
        let unpushed = crate::channels::answers_only(&key);
        let mut new = NewJob::new(key, message, spec, &format!("chat:{}", ctx.key));
        new.set_by = ctx.set_by.clone();
        new.tz = arg(args, "tz").map(String::from);
        new.delivery = match arg(args, "delivery") {
            Some("direct") => Delivery::Direct,
            _ => Delivery::Agent,
        };
        new.catch_up = match arg(args, "catch_up") {
            Some("skip") => CatchUp::Skip,
            _ => CatchUp::Once,
        };
        let added = match limits(ctx) {
            None => self.scheduler.add(new).await,
            Some(limits) => self.scheduler.add_limited(new, limits).await,
        };
        let job = added.map_err(failed)?;
        let mut result = json!({"added": job_json(&job)});
        if unpushed {
            result["note"] = json!(
                "this chat only gets answers to its own requests: when the job runs, its \
                 reminder is kept in this chat's history for the next request, not pushed; \
                 tell the user so"
            );
        }
        Ok(result.to_string())
    }

    /// The current chat's active jobs, another chat's (owner, `key`), or every chat's
    /// (owner, `key: "*"`). Finished one-shot jobs stay stored but are not listed.
    fn list(&self, args: &Value, ctx: &ToolContext) -> Result<String, ToolError> {
        let jobs = match arg(args, "key") {
            Some("*") if ctx.sender_is_owner => self.scheduler.list(None),
            Some("*") => {
                return Err(ToolError::Refused(
                    "only the owner can list every chat's jobs".into(),
                ));
            }
            // With its threads or topics (see `visible_job`).
            _ => self.scheduler.list_room(&self.target(args, ctx)?),
        };
        let jobs: Vec<Value> = jobs
            .iter()
            .filter(|j| !j.is_finished())
            .map(job_json)
            .collect();
        Ok(json!({"jobs": jobs}).to_string())
    }
}

#[async_trait]
impl Tool for CronTool {
    fn name(&self) -> &'static str {
        "cron"
    }

    fn description(&self) -> &'static str {
        "Schedule reminders and recurring jobs for this chat. action=add with message and one of \
         at (\"in 10m\", \"tomorrow 09:00\", RFC 3339), every (\"30m\") or cron (\"0 9 * * MON-FRI\"), \
         optional tz (IANA); action=list shows this chat's active jobs (the owner: key \"*\" for \
         every chat's); action=remove or run with id. Unless the owner asks, a job runs at \
         most once a minute (every 30s for an API caller), and a chat holds at most 20. When \
         a job fires you get its message and write the reminder."
    }

    fn schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "action": {"type": "string", "enum": ["add", "list", "remove", "run"]},
                "message": {"type": "string", "description": "add: what to do or say when the job fires"},
                "at": {"type": "string", "description": "add, once: RFC 3339, \"in 10m\", \"2026-11-22 09:00\" or \"tomorrow 09:00\" (in tz)"},
                "every": {"type": "string", "description": "add, repeating: a duration like \"30m\" or \"1h\" (at least 1m, 30s for an API caller; 1s when the owner asks)"},
                "cron": {"type": "string", "description": "add, repeating: crontab \"min hour day month weekday\", Sunday = 0 or 7"},
                "tz": {"type": "string", "description": "add: IANA timezone like \"Europe/Berlin\" (default: the gateway's)"},
                "delivery": {"type": "string", "enum": ["agent", "direct"], "description": "add: \"direct\" sends the message text as is, without you"},
                "catch_up": {"type": "string", "enum": ["once", "skip"], "description": "add: runs missed while offline fire once (default) or are skipped"},
                "id": {"type": "string", "description": "remove/run: the job id"},
                "key": {"type": "string", "description": "owner only: another chat's key (default: this chat); for list, \"*\" lists every chat's jobs"}
            },
            "required": ["action"],
            // A misspelt argument (`timezone` for `tz`) is refused, not silently ignored.
            "additionalProperties": false
        })
    }

    async fn call(&self, args: Value, ctx: &ToolContext) -> Result<String, ToolError> {
        match arg(&args, "action") {
            Some("add") => self.add(&args, ctx).await,
            Some("list") => self.list(&args, ctx),
            Some("remove") => {
                let job = self.visible_job(&args, ctx)?;
                // A member removes what they set, not the owner's or another member's.
                let theirs = job
                    .set_by
                    .iter()
                    .any(|s| ctx.set_by.iter().any(|t| t.same_person(s)));
                if ctx.member.is_some() && !theirs {
                    return Err(ToolError::Refused(format!(
                        "job {} was set by someone else: only they or the owner may remove it",
                        job.id
                    )));
                }
                self.scheduler.remove(&job.id).await.map_err(failed)?;
                Ok(json!({"removed": job.id}).to_string())
            }
            Some("run") => {
                let job = self.visible_job(&args, ctx)?;
                // For everyone: a job's run cannot run that job again, directly or through
                // other jobs' runs (it would go on for ever, a model call each time).
                if let Some(why) = ctx.chain.refuses_run(&job.id) {
                    return Err(ToolError::Refused(why));
                }
                self.scheduler
                    .run_from(&job.id, &ctx.chain, limits(ctx), &ctx.set_by)
                    .await
                    .map_err(failed)?;
                Ok(json!({"ran": job.id}).to_string())
            }
            Some(other) => Err(ToolError::InvalidArguments(format!(
                "unknown action {other:?}: use add, list, remove or run"
            ))),
            None => Err(ToolError::InvalidArguments(
                "missing required action".into(),
            )),
        }
    }
}
