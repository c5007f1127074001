//! Standard crontab expressions translated for the `cron` crate, evaluated in local time.
//!
//! The `cron` crate wants 6 or 7 fields with seconds first, numbers weekdays 1–7 from Sunday
//! (Quartz), ANDs day-of-month with day-of-week, and silently drops local times that fall in
//! a daylight-saving gap. Users write 5-field crontab (weekday 0–7, Sunday = 0 or 7, OR of the
//! two day fields) and expect a skipped local time to run at the next valid instant. So the
//! weekday field is expanded here into names, a restricted day-of-month *and* weekday become
//! two schedules, and the schedule is walked in naive local time (as if it were UTC) and
//! mapped to the real timezone afterwards.

use std::str::FromStr;

use chrono::offset::LocalResult;
use chrono::{DateTime, NaiveDateTime, TimeZone, Timelike, Utc};
use chrono_tz::Tz;

const DAY_NAMES: [&str; 7] = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"];
/// Longest daylight-saving gap searched for the next valid local time (Samoa skipped a day).
const MAX_GAP_MINUTES: i64 = 48 * 60;
/// Candidates tried before giving up (only ambiguous local times make us skip candidates).
const MAX_CANDIDATES: usize = 10_000;

/// A compiled crontab expression: one or two `cron` crate schedules whose union is meant.
#[derive(Debug, Clone)]
pub struct CronExpr {
    schedules: Vec<cron::Schedule>,
}

/// Why an expression is not valid, in words for the person who wrote it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CronSyntax(pub String);

impl CronExpr {
    /// Compile 5-field crontab (`minute hour day month weekday`), 6 fields with seconds
    /// first, or a shorthand (`@hourly`, `@daily`, `@weekly`, `@monthly`, `@yearly`).
    pub fn parse(expr: &str) -> Result<Self, CronSyntax> {
        let expr = expr.trim();
        let expanded = match expr.to_ascii_lowercase().as_str() {
            "@hourly" => "0 * * * *",
            "@daily" | "@midnight" => "0 0 * * *",
            "@weekly" => "0 0 * * 0",
            "@monthly" => "0 0 1 * *",
            "@yearly" | "@annually" => "0 0 1 1 *",
            _ if expr.starts_with('@') => {
                return Err(CronSyntax(format!(
                    "unknown shorthand {expr:?} (known: @hourly, @daily, @weekly, @monthly, @yearly)"
                )));
            }
            _ => expr,
        };
        let mut fields: Vec<&str> = expanded.split_whitespace().collect();
        match fields.len() {
            5 => fields.insert(0, "0"),
            6 => {}
            n => {
                return Err(CronSyntax(format!(
                    "expected 5 fields (minute hour day-of-month month weekday) or 6 with \
                     seconds first, got {n}"
                )));
            }
        }
        let dow = expand_weekdays(fields[5])?;
        // As in Vixie cron: a day field starting with `*` (`*/2`) does not count as
        // restricted for the either-matches rule, so `*/2 * 1` is odd days that are Mondays.
        let starred = |f: &str| f.starts_with('*') || f == "?";
        let dom_restricted = !starred(fields[3]);
        let dow_restricted = !starred(fields[5]);
        let mut variants: Vec<[String; 6]> = Vec::new();
        let base = |dom: &str, dow: &str| {
            [
                fields[0].to_string(),
                fields[1].to_string(),
                fields[2].to_string(),
                dom.to_string(),
                fields[4].to_string(),
                dow.to_string(),
            ]
        };
        match &dow {
            // crontab: when both day fields are restricted, either one matching is enough.
            Some(days) if dom_restricted && dow_restricted => {
                variants.push(base(fields[3], "*"));
                variants.push(base("*", days));
            }
            // Otherwise both must match (one of them may allow every day).
            Some(days) => variants.push(base(fields[3], days)),
            None => variants.push(base(fields[3], "*")),
        }
        let schedules = variants
            .iter()
            .map(|v| {
                cron::Schedule::from_str(&v.join(" "))
                    .map_err(|e| CronSyntax(describe_cron_error(&e.to_string())))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self { schedules })
    }

    /// The first run strictly after `after`, in `tz`. A local time inside a daylight-saving
    /// gap runs once at the first valid instant after the gap; a local time that occurs twice
    /// runs once (at its first occurrence still ahead).
    pub fn next_after(&self, tz: Tz, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let mut cursor = Utc.from_utc_datetime(&after.with_timezone(&tz).naive_local());
        for _ in 0..MAX_CANDIDATES {
            let candidate = self
                .schedules
                .iter()
                .filter_map(|s| s.after(&cursor).next())
                .min()?;
            let naive = candidate.naive_utc();
            let instants: Vec<DateTime<Utc>> = match tz.from_local_datetime(&naive) {
                LocalResult::Single(t) => vec![t.with_timezone(&Utc)],
                LocalResult::Ambiguous(a, b) => vec![a.with_timezone(&Utc), b.with_timezone(&Utc)],
                LocalResult::None => first_valid_after_gap(tz, naive).into_iter().collect(),
            };
            if let Some(t) = instants.into_iter().find(|t| *t > after) {
                return Some(t);
            }
            cursor = candidate;
        }
        None
    }
}

/// The first instant whose local time is valid, at or after a local time inside a gap.
pub(crate) fn first_valid_after_gap(tz: Tz, naive: NaiveDateTime) -> Option<DateTime<Utc>> {
    let minute = naive.with_second(0)?.with_nanosecond(0)?;
    (1..=MAX_GAP_MINUTES).find_map(|m| {
        let t = minute + chrono::Duration::minutes(m);
        tz.from_local_datetime(&t)
            .earliest()
            .map(|x| x.with_timezone(&Utc))
    })
}

/// Expand a crontab weekday field into the `cron` crate's names, `None` for "every day".
fn expand_weekdays(field: &str) -> Result<Option<String>, CronSyntax> {
    if matches!(field, "*" | "?") {
        return Ok(None);
    }
    let bad = |why: String| CronSyntax(format!("weekday field {field:?}: {why}"));
    let mut days = [false; 7];
    for part in field.split(',') {
        let (range, step) = match part.split_once('/') {
            Some((r, s)) => {
                let step: usize = s
                    .parse()
                    .ok()
                    .filter(|n| *n > 0)
                    .ok_or_else(|| bad(format!("step {s:?} must be a positive number")))?;
                (r, step)
            }
            None => (part, 1),
        };
        let (from, to) = if matches!(range, "*" | "?") {
            (0, 6)
        } else if let Some((a, b)) = range.split_once('-') {
            (weekday(a).map_err(&bad)?, weekday(b).map_err(&bad)?)
        } else {
            let d = weekday(range).map_err(&bad)?;
            // `a/n` means from a to the end of the week.
            (d, if part.contains('/') { 6.max(d) } else { d })
        };
        // A range may wrap around the week end (`FRI-MON`); 7 is Sunday at the end of a week.
        let span = if to >= from { to - from } else { to + 7 - from };
        for i in (0..=span).step_by(step) {
            days[(from + i) % 7] = true;
        }
    }
    if days.iter().all(|d| *d) {
        return Ok(None);
    }
    let names: Vec<&str> = (0..7).filter(|i| days[*i]).map(|i| DAY_NAMES[i]).collect();
    Ok(Some(names.join(",")))
}

/// One weekday: 0–7 (0 and 7 are Sunday) or a three-letter English name (SUN is 0).
fn weekday(s: &str) -> Result<usize, String> {
    if let Ok(n) = s.parse::<usize>() {
        return match n {
            0..=7 => Ok(n),
            _ => Err(format!("{n} is not a weekday (0–7, Sunday is 0 or 7)")),
        };
    }
    DAY_NAMES
        .iter()
        .position(|d| d.eq_ignore_ascii_case(s))
        .ok_or_else(|| format!("{s:?} is not a weekday (use 0–7 or SUN, MON, … SAT)"))
}

fn describe_cron_error(e: &str) -> String {
    let e = e.trim();
    let e = e.strip_prefix("Invalid expression: ").unwrap_or(e);
    if e.is_empty() {
        "not a valid cron expression".into()
    } else {
        e.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weekday_numbers_follow_crontab() {
        assert_eq!(expand_weekdays("1").unwrap().as_deref(), Some("MON"));
        assert_eq!(expand_weekdays("0").unwrap().as_deref(), Some("SUN"));
        assert_eq!(expand_weekdays("7").unwrap().as_deref(), Some("SUN"));
        assert_eq!(
            expand_weekdays("1-5").unwrap().as_deref(),
            Some("MON,TUE,WED,THU,FRI")
        );
        assert_eq!(
            expand_weekdays("mon-fri").unwrap().as_deref(),
            Some("MON,TUE,WED,THU,FRI")
        );
        assert_eq!(
            expand_weekdays("5-7").unwrap().as_deref(),
            Some("SUN,FRI,SAT")
        );
        assert_eq!(
            expand_weekdays("FRI-MON").unwrap().as_deref(),
            Some("SUN,MON,FRI,SAT")
        );
        assert_eq!(
            expand_weekdays("1-5/2").unwrap().as_deref(),
            Some("MON,WED,FRI")
        );
        assert_eq!(
            expand_weekdays("*/2").unwrap().as_deref(),
            Some("SUN,TUE,THU,SAT")
        );
        assert_eq!(expand_weekdays("0-7").unwrap(), None);
        assert_eq!(expand_weekdays("*").unwrap(), None);
        assert!(expand_weekdays("8").is_err());
        assert!(expand_weekdays("MOO").is_err());
        assert!(expand_weekdays("1/0").is_err());
    }
}
