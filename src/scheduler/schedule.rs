//! Schedules: parsing and validating `at`, `every` and `cron` input, and computing the next
//! run in a timezone. Bad input is a [`ScheduleError`] whose message says what to write.

use std::time::Duration;

use chrono::offset::LocalResult;
use chrono::{DateTime, NaiveDate, NaiveDateTime, NaiveTime, SubsecRound, TimeZone, Utc};
use chrono_tz::Tz;
use serde::{Deserialize, Serialize};

use super::crontab::{CronExpr, first_valid_after_gap};

/// What a user asked for, before validation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ScheduleSpec {
    /// Once: RFC 3339, `in 10m`, `2026-11-22 09:00`, `tomorrow 09:00` or `09:00`.
    At(String),
    /// Repeatedly, every duration (`30s`, `1h30m`), at least 1 s.
    Every(String),
    /// Crontab: 5 fields, 6 with seconds first, or `@daily`-style shorthands.
    Cron(String),
}

/// A validated schedule, as stored with its job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Schedule {
    /// Once, at this instant.
    At { at: DateTime<Utc> },
    /// Every `every_ms` milliseconds, in phase with `anchor` (the first run).
    Every {
        every_ms: u64,
        anchor: DateTime<Utc>,
    },
    /// A crontab expression as the user wrote it, evaluated in the job's timezone.
    Cron { expr: String },
}

/// Why a schedule (or a scheduler request) cannot be used. Messages are for the user.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScheduleError {
    #[error(
        "the schedule is empty: give `at` (like \"in 10m\" or \"2026-11-22 09:00\"), \
         `every` (like \"30m\") or `cron` (like \"0 9 * * MON-FRI\")"
    )]
    Empty,
    #[error("give exactly one of `at`, `every` or `cron`")]
    Ambiguous,
    #[error("the reminder message is empty: say what should happen")]
    EmptyMessage,
    #[error("the reminder message is too long: at most {0} characters")]
    MessageTooLong(usize),
    #[error(
        "cannot read {0:?} as a time: use RFC 3339 (\"2026-11-22T09:00:00+01:00\"), a relative \
         time (\"in 10m\", \"in 2h\"), or a local time (\"2026-11-22 09:00\", \"tomorrow 09:00\")"
    )]
    BadTime(String),
    #[error("cannot read {0:?} as a time: {1}")]
    BadRelative(String, String),
    #[error("{at} is in the past (it is now {now}): give a future time")]
    InPast { at: String, now: String },
    #[error("`every`: {0}")]
    BadDuration(String),
    #[error("`every` must be at least 1s, got {0:?}")]
    TooShort(String),
    #[error(
        "invalid cron expression {expr:?}: {reason}; write 5 fields (minute hour day month \
         weekday) like \"0 9 * * MON-FRI\" or \"30 8 1 * *\", or 6 with seconds first"
    )]
    BadCron { expr: String, reason: String },
    #[error("the cron expression {0:?} never fires")]
    Never(String),
    /// A schedule that runs more often than the limit (in seconds) of who set it.
    #[error("{}", too_frequent(.0, *.1))]
    TooFrequent(String, u64),
    #[error(
        "this chat already has {0} active jobs, the most that may be set here: remove one \
         first (action \"list\" shows their ids), or ask the owner to set it"
    )]
    TooManyJobs(usize),
    #[error(
        "job {id} ran less than {} ago, and a job run for someone other than the owner runs at \
         most once {}: run it again in {wait_secs}s",
        span(*.floor_secs, "a minute", ""),
        span(*.floor_secs, "a minute", "every ")
    )]
    RanRecently {
        id: String,
        wait_secs: u64,
        floor_secs: u64,
    },
    #[error(
        "this turn comes from a job's run or a sub-agent's result, and a job set from there \
         first runs {0}s from now at the earliest: give a later time"
    )]
    TooSoon(u64),
    #[error("unknown timezone {tz:?}{hint}: use an IANA name like \"Europe/Berlin\"")]
    UnknownTimezone { tz: String, hint: String },
    #[error(
        "unknown channel `{channel}` in `{key}`: a key is <channel>:<chat id> with a channel \
         of {known}"
    )]
    UnknownChannel {
        channel: String,
        key: String,
        known: String,
    },
    /// A chat id its channel never gives (`telegram:@alice`).
    #[error("{0}")]
    BadKey(String),
    #[error("no job with id {0:?}")]
    NotFound(String),
    #[error("the gateway is stopping: run the job again once it is back")]
    Stopping,
    #[error("the scheduler is disabled (cron.enabled = false)")]
    Disabled,
    #[error("the scheduler could not store the job: {0}")]
    Store(String),
}

/// `minute` for a floor of a minute or more, else the floor in seconds after `lead`
/// (`every 30s`).
fn span(floor_secs: u64, minute: &str, lead: &str) -> String {
    if floor_secs >= 60 {
        minute.to_string()
    } else {
        format!("{lead}{floor_secs}s")
    }
}

fn too_frequent(schedule: &str, floor: u64) -> String {
    if floor >= 60 {
        format!(
            "{schedule} runs more than once a minute, and a job set by someone other than the \
             owner runs at most once a minute: use every \"1m\" or more, or 5-field cron like \
             \"*/5 * * * *\""
        )
    } else {
        format!(
            "{schedule} runs more often than every {floor}s, the most often a job set through \
             the HTTP API may run: use every \"{floor}s\" or more"
        )
    }
}

impl ScheduleError {
    /// Whether the request was at fault (bad input, unknown id) rather than the gateway.
    pub fn is_user_error(&self) -> bool {
        !matches!(self, ScheduleError::Store(_) | ScheduleError::Stopping)
    }
}

/// Parse an IANA timezone; an unknown name gets the closest known one as a hint.
pub fn parse_tz(name: &str) -> Result<Tz, ScheduleError> {
    let name = name.trim();
    name.parse::<Tz>().map_err(|_| {
        let hint = closest_tz(name)
            .map(|s| format!(" (did you mean {s:?}?)"))
            .unwrap_or_default();
        ScheduleError::UnknownTimezone {
            tz: name.to_string(),
            hint,
        }
    })
}

fn closest_tz(word: &str) -> Option<&'static str> {
    crate::config::closest(word, chrono_tz::TZ_VARIANTS.iter().map(|t| t.name()))
}

impl Schedule {
    /// Validate user input in `tz` at `now`. Nothing is stored here.
    pub fn parse(spec: &ScheduleSpec, tz: Tz, now: DateTime<Utc>) -> Result<Self, ScheduleError> {
        let schedule = match spec {
            // In whole milliseconds, as the due index keeps times: a due time between two
            // of them would be due again when fired early in its millisecond.
            ScheduleSpec::At(s) => Schedule::At {
                at: parse_at(s, tz, now)?.trunc_subsecs(3),
            },
            ScheduleSpec::Every(s) => {
                let every = parse_every(s)?;
                let every_ms = u64::try_from(every.as_millis()).unwrap_or(u64::MAX);
                let anchor = now
                    .trunc_subsecs(3)
                    .checked_add_signed(chrono::Duration::milliseconds(
                        i64::try_from(every_ms).unwrap_or(i64::MAX),
                    ))
                    .ok_or_else(|| ScheduleError::TooShort(s.clone()))?;
                Schedule::Every { every_ms, anchor }
            }
            ScheduleSpec::Cron(s) => {
                let expr = s.trim();
                if expr.is_empty() {
                    return Err(ScheduleError::Empty);
                }
                let compiled = compile_cron(expr)?;
                if compiled.next_after(tz, now).is_none() {
                    return Err(ScheduleError::Never(expr.to_string()));
                }
                Schedule::Cron {
                    expr: expr.to_string(),
                }
            }
        };
        Ok(schedule)
    }

    /// Whether the job runs more than once.
    pub fn is_recurring(&self) -> bool {
        !matches!(self, Schedule::At { .. })
    }

    /// The shortest time between two runs: `None` for a one-shot job; a minute at the
    /// least for a 5-field crontab.
    pub fn shortest_gap(&self) -> Option<Duration> {
        match self {
            Schedule::At { .. } => None,
            Schedule::Every { every_ms, .. } => Some(Duration::from_millis(*every_ms)),
            Schedule::Cron { expr } => compile_cron(expr)
                .ok()
                .map(|c| Duration::from_secs(c.shortest_second_gap().into())),
        }
    }

    /// A short description for people and the model (`every 30m`, `cron "0 9 * * 1"`).
    pub fn describe(&self, tz: Tz) -> String {
        match self {
            Schedule::At { at } => format!("once at {}", local(at, tz)),
            Schedule::Every { every_ms, .. } => format!(
                "every {}",
                crate::config::DurationStr(Duration::from_millis(*every_ms))
            ),
            Schedule::Cron { expr } => format!("cron \"{expr}\" ({tz})"),
        }
    }
}

/// The first run strictly after `after`, or `None` when the schedule has no more runs.
pub fn next_after(schedule: &Schedule, tz: Tz, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
    match schedule {
        Schedule::At { at } => (*at > after).then_some(*at),
        Schedule::Every { every_ms, anchor } => {
            // In phase with the anchor, also before it: that is only asked when the clock
            // was ahead when the job was made, and has been put back.
            let every = i64::try_from(*every_ms).ok().filter(|n| *n > 0)?;
            let elapsed = (after - *anchor).num_milliseconds();
            let steps = elapsed.div_euclid(every) + 1;
            anchor.checked_add_signed(chrono::Duration::milliseconds(steps.checked_mul(every)?))
        }
        Schedule::Cron { expr } => compile_cron(expr).ok()?.next_after(tz, after),
    }
}

/// A time shown in `tz`, like `2026-11-22 09:00 CET`.
pub fn local(t: &DateTime<Utc>, tz: Tz) -> String {
    t.with_timezone(&tz).format("%Y-%m-%d %H:%M %Z").to_string()
}

fn compile_cron(expr: &str) -> Result<CronExpr, ScheduleError> {
    CronExpr::parse(expr).map_err(|e| ScheduleError::BadCron {
        expr: expr.to_string(),
        reason: e.0,
    })
}

fn parse_every(s: &str) -> Result<Duration, ScheduleError> {
    if s.trim().is_empty() {
        return Err(ScheduleError::Empty);
    }
    let d = plain_duration(s).map_err(ScheduleError::BadDuration)?;
    if d < Duration::from_secs(1) {
        return Err(ScheduleError::TooShort(s.trim().to_string()));
    }
    Ok(d)
}

/// `10 minutes`, `2 hours and 30 min`, `1h, 30m`: what people type (`and` and commas are
/// passed over), read by the config's `parse_duration` (which refuses `1M`: minutes or
/// months?).
fn plain_duration(s: &str) -> Result<Duration, String> {
    let words: Vec<&str> = s
        .split_whitespace()
        .map(|w| w.trim_end_matches(','))
        .filter(|w| !w.is_empty() && !w.eq_ignore_ascii_case("and"))
        .collect();
    crate::config::parse_duration(&words.join(" "))
}

/// A time with its UTC offset: RFC 3339, or as models also write it, without seconds
/// (`2026-12-01T09:00+01:00`, `2026-12-01 09:00Z`).
fn with_offset(s: &str) -> Option<DateTime<chrono::FixedOffset>> {
    if let Ok(t) = DateTime::parse_from_rfc3339(s) {
        return Some(t);
    }
    let s = match s.strip_suffix(['Z', 'z']) {
        Some(utc) => format!("{utc}+00:00"),
        None => s.to_string(),
    };
    ["%Y-%m-%dT%H:%M%:z", "%Y-%m-%d %H:%M%:z", "%Y-%m-%dT%H:%M%z"]
        .iter()
        .find_map(|f| DateTime::parse_from_str(&s, f).ok())
}

fn parse_at(s: &str, tz: Tz, now: DateTime<Utc>) -> Result<DateTime<Utc>, ScheduleError> {
    let s = s.trim();
    if s.is_empty() {
        return Err(ScheduleError::Empty);
    }
    let bad = || ScheduleError::BadTime(s.to_string());
    let lower = s.to_ascii_lowercase();
    let at = if lower.starts_with("in ") {
        // As written: `in 1M` is no minute (see `plain_duration`).
        let d = plain_duration(&s[3..])
            .map_err(|why| ScheduleError::BadRelative(s.to_string(), why))?;
        let d = chrono::Duration::from_std(d).map_err(|_| bad())?;
        now.checked_add_signed(d).ok_or_else(bad)?
    } else if let Some(t) = with_offset(s) {
        t.with_timezone(&Utc)
    } else {
        let today = now.with_timezone(&tz).date_naive();
        let (date, time) = if let Some(rest) = lower.strip_prefix("tomorrow") {
            (
                today.succ_opt().ok_or_else(bad)?,
                parse_time(rest.trim()).ok_or_else(bad)?,
            )
        } else if let Some(rest) = lower.strip_prefix("today") {
            (today, parse_time(rest.trim()).ok_or_else(bad)?)
        } else if let Some(time) = parse_time(&lower) {
            // A bare time means its next occurrence.
            let date = if resolve_local(tz, today.and_time(time)).is_some_and(|t| t > now) {
                today
            } else {
                today.succ_opt().ok_or_else(bad)?
            };
            (date, time)
        } else {
            let naive = parse_local_datetime(&lower).ok_or_else(bad)?;
            (naive.date(), naive.time())
        };
        resolve_local(tz, date.and_time(time)).ok_or_else(bad)?
    };
    if at <= now {
        return Err(ScheduleError::InPast {
            at: local(&at, tz),
            now: local(&now, tz),
        });
    }
    Ok(at)
}

/// A local time in `tz`: the earlier of a repeated time, the end of a gap for a skipped one.
fn resolve_local(tz: Tz, naive: NaiveDateTime) -> Option<DateTime<Utc>> {
    match tz.from_local_datetime(&naive) {
        LocalResult::Single(t) => Some(t.with_timezone(&Utc)),
        LocalResult::Ambiguous(a, _) => Some(a.with_timezone(&Utc)),
        LocalResult::None => first_valid_after_gap(tz, naive),
    }
}

fn parse_time(s: &str) -> Option<NaiveTime> {
    let s = s.trim().trim_start_matches("at ").trim();
    ["%H:%M", "%H:%M:%S"]
        .iter()
        .find_map(|f| NaiveTime::parse_from_str(s, f).ok())
}

fn parse_local_datetime(s: &str) -> Option<NaiveDateTime> {
    for f in [
        "%Y-%m-%d %H:%M",
        "%Y-%m-%d %H:%M:%S",
        "%Y-%m-%dt%H:%M",
        "%Y-%m-%dt%H:%M:%S",
    ] {
        if let Ok(t) = NaiveDateTime::parse_from_str(s, f) {
            return Some(t);
        }
    }
    // A date alone means 09:00 that day: a reminder at midnight helps nobody.
    NaiveDate::parse_from_str(s, "%Y-%m-%d")
        .ok()
        .and_then(|d| d.and_hms_opt(9, 0, 0))
}
