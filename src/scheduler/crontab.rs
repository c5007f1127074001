//! Standard crontab expressions translated for the `cron` crate, evaluated in local time.
//!
//! The `cron` crate wants 6 or 7 fields with seconds first, numbers weekdays 1–7 from Sunday
//! (Quartz), and ANDs day-of-month with day-of-week. Users write 5-field crontab (weekday
//! 0–7, Sunday = 0 or 7, OR of the two day fields). So the weekday field is expanded here
//! into names, and a restricted day-of-month *and* weekday become two schedules. The
//! schedule is walked in naive local time (as if it were UTC) and each local time is mapped
//! to the real timezone afterwards.
//!
//! Daylight saving follows Vixie cron (what crontab users expect), by kind of job:
//! - A *wildcard* job has a seconds, minute or hour field starting with `*`, like
//!   `*/15 * * * *`, `0 * * * *` or `@hourly`. It runs at the real instants whose local time
//!   matches: in both copies of an hour repeated when clocks go back (they are distinct
//!   instants), and not at all in an hour skipped when they go forward.
//! - A *fixed-time* job, like `30 2 * * *` or `0 1-3 * * *`, runs once for each of its
//!   times: a repeated time at its first occurrence only, and a skipped time once, at the
//!   first instant after the gap (03:00 when 02:00–02:59 is skipped).

use std::str::FromStr;

use chrono::offset::LocalResult;
use chrono::{DateTime, NaiveDateTime, Offset, TimeZone, Timelike, Utc};
use chrono_tz::Tz;
use cron::TimeUnitSpec;

const DAY_NAMES: [&str; 7] = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"];
/// Longest daylight-saving gap searched for the next valid local time (Samoa skipped a day).
const MAX_GAP_MINUTES: i64 = 48 * 60;
/// Candidates tried before giving up (only local times already passed or skipped make us
/// go on to the next one).
const MAX_CANDIDATES: usize = 10_000;
/// Hours searched ahead for clocks going back: UTC offsets span 26 hours (−12 to +14).
const MAX_FOLD_HOURS: i64 = 26;

/// A compiled crontab expression: one or two `cron` crate schedules whose union is meant.
#[derive(Debug, Clone)]
pub struct CronExpr {
    schedules: Vec<cron::Schedule>,
    /// Whether the seconds, minute or hour field starts with `*` (see the module doc).
    wildcard: bool,
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
        if let Some(why) = unsupported(fields[3], fields[5]) {
            return Err(CronSyntax(why));
        }
        // As in Vixie cron, only a field's first character decides (`*/15` is a wildcard,
        // `0-59` is not); the seconds field counts only when the user wrote one.
        let wildcard = fields[..3].iter().any(|f| f.starts_with('*'));
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
                let translated = v.join(" ");
                cron::Schedule::from_str(&translated)
                    .map_err(|e| CronSyntax(describe_cron_error(&e.to_string(), &translated)))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self {
            schedules,
            wildcard,
        })
    }

    /// The shortest time in seconds between two seconds of a minute the expression names,
    /// around the minute's end too (60 when it names one: every 5-field expression).
    pub fn shortest_second_gap(&self) -> u32 {
        let gap = |s: &cron::Schedule| {
            let secs: Vec<u32> = s.seconds().iter().collect();
            let wrap = secs
                .first()
                .zip(secs.last())
                .map_or(60, |(first, last)| 60 - last + first);
            secs.windows(2).map(|w| w[1] - w[0]).fold(wrap, u32::min)
        };
        self.schedules.iter().map(gap).min().unwrap_or(60)
    }

    /// The first run strictly after `after`, in `tz`, by the daylight-saving rules of the
    /// module doc.
    pub fn next_after(&self, tz: Tz, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        // Candidates come in local-time order, which is real-time order except inside a
        // repeated hour: there every first occurrence comes before every second one. So the
        // first candidate with a single or first occurrence ahead is the answer, unless an
        // earlier candidate's second occurrence (kept in `second`) comes sooner.
        let mut cursor = Utc.from_utc_datetime(&earliest_local_after(tz, after));
        let mut second: Option<DateTime<Utc>> = None;
        for _ in 0..MAX_CANDIDATES {
            let Some(candidate) = self
                .schedules
                .iter()
                .filter_map(|s| s.after(&cursor).next())
                .min()
            else {
                break;
            };
            cursor = candidate;
            let (first, repeat) = self.instants(tz, candidate.naive_utc());
            if let Some(t) = first.filter(|t| *t > after) {
                return Some(second.map_or(t, |s| s.min(t)));
            }
            if let Some(t) = repeat.filter(|t| *t > after) {
                second = Some(second.map_or(t, |s| s.min(t)));
            }
        }
        second
    }

    /// The real instants at which a matching local time runs: its only or first occurrence,
    /// and its second occurrence when clocks go back (wildcard jobs only).
    fn instants(
        &self,
        tz: Tz,
        naive: NaiveDateTime,
    ) -> (Option<DateTime<Utc>>, Option<DateTime<Utc>>) {
        let utc = |t: DateTime<Tz>| t.with_timezone(&Utc);
        match tz.from_local_datetime(&naive) {
            LocalResult::Single(t) => (Some(utc(t)), None),
            LocalResult::Ambiguous(a, b) if self.wildcard => (Some(utc(a)), Some(utc(b))),
            LocalResult::Ambiguous(a, _) => (Some(utc(a)), None),
            LocalResult::None if self.wildcard => (None, None),
            LocalResult::None => (first_valid_after_gap(tz, naive), None),
        }
    }
}

/// A lower bound of the local times shown after `after`: its own local time, or an earlier
/// one when clocks go back within the next hours and repeat local times already passed.
fn earliest_local_after(tz: Tz, after: DateTime<Utc>) -> NaiveDateTime {
    let hour = chrono::Duration::hours(1);
    (1..=MAX_FOLD_HOURS).fold(after.with_timezone(&tz).naive_local(), |earliest, h| {
        let sample = after.naive_utc() + chrono::Duration::hours(h);
        // An instant in the hour before `sample` shows at least `sample - 1h` in the offset
        // then (assuming clocks change at most once an hour).
        let offset = tz.offset_from_utc_datetime(&sample).fix();
        earliest.min(sample - hour + offset)
    })
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

/// Quartz extensions the `cron` crate reads differently or not at all, named plainly: its
/// own message would be about names in a field (`'L' specified`), not about what was meant.
fn unsupported(day_of_month: &str, weekday: &str) -> Option<String> {
    let has = |field: &str, c: char| field.contains(c) || field.contains(c.to_ascii_lowercase());
    if has(day_of_month, 'L') {
        return Some(
            "`L` (last day of the month) is not supported; use a day number such as 28-31 \
             with a check in the message, or an `at` job"
                .into(),
        );
    }
    if has(day_of_month, 'W') {
        return Some(
            "`W` (nearest weekday) is not supported; name the days of the month, or use an \
             `at` job"
                .into(),
        );
    }
    if weekday.contains('#') {
        return Some(
            "`#` (the nth weekday of the month, like MON#1) is not supported; use a day range \
             such as 1-7 with a check of the weekday in the message, or an `at` job"
                .into(),
        );
    }
    // No weekday name ends in L, so `5L` or `FRIL` means the last such weekday.
    let last = weekday
        .split([',', '-', '/'])
        .any(|part| part.ends_with(['L', 'l']));
    last.then(|| {
        "`L` (the last weekday of the month, like 5L) is not supported; use a day range such \
         as 25-31 with a check of the weekday in the message, or an `at` job"
            .into()
    })
}

/// The `cron` crate's message without its echo of the expression it parsed: that is the
/// 6-field translation made here, which the user never wrote.
fn describe_cron_error(e: &str, translated: &str) -> String {
    let e = e.trim();
    let e = e.strip_prefix("Invalid expression: ").unwrap_or(e);
    let lines: Vec<&str> = e.lines().map(str::trim).collect();
    // The echo is the expression over a line holding a caret under the fault.
    let start = lines.iter().position(|l| *l == "^").map_or(0, |i| i + 1);
    let reason: Vec<&str> = lines[start..]
        .iter()
        .copied()
        .filter(|l| !l.is_empty() && *l != translated)
        .collect();
    if reason.is_empty() {
        "not a valid cron expression".into()
    } else {
        // The crate says "Hours must be less than 23" of the largest value it allows.
        reason
            .join(" ")
            .replace(" must be less than ", " must be at most ")
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

    fn error(expr: &str) -> String {
        CronExpr::parse(expr).unwrap_err().0
    }

    #[test]
    fn quartz_extensions_are_named_as_unsupported() {
        for (expr, want) in [
            ("0 9 L * *", "`L` (last day of the month) is not supported"),
            (
                "0 0 9 L * *",
                "`L` (last day of the month) is not supported",
            ),
            ("0 9 15W * *", "`W` (nearest weekday) is not supported"),
            ("0 9 * * MON#1", "`#` (the nth weekday of the month"),
            ("0 9 * * 5L", "`L` (the last weekday of the month"),
            ("0 9 * * 1-5L", "`L` (the last weekday of the month"),
        ] {
            let e = error(expr);
            assert!(e.starts_with(want), "{expr}: {e}");
            assert!(e.contains("an `at` job"), "{expr}: {e}");
        }
        // Names that contain the letters still work.
        assert!(CronExpr::parse("0 9 * JUL WED").is_ok());
        assert!(CronExpr::parse("0 9 * * SUN,WED").is_ok());
    }

    #[test]
    fn errors_never_quote_the_translated_expression() {
        // What the `cron` crate parses is our 6-field form ("0 61 * * * *"): never shown.
        for (expr, translated, want) in [
            ("61 * * * *", "0 61 * * * *", "61"),
            ("* 25 * * *", "0 * 25 * * *", "25"),
            ("0 9 32 * *", "0 0 9 32 * *", "32"),
            ("0 9 * 13 *", "0 0 9 * 13 *", "13"),
            ("x 9 * * *", "0 x 9 * * *", ""),
            ("*/0 9 * * MON", "0 */0 9 * * MON", ""),
        ] {
            let e = error(expr);
            assert!(!e.contains(translated), "{expr}: {e}");
            assert!(!e.contains('^') && !e.contains('\n'), "{expr}: {e}");
            assert!(e.contains(want), "{expr}: {e}");
        }
        // The largest value allowed is named as such (23 is an hour).
        assert!(error("0 25 * * *").starts_with("Hours must be at most 23"));
        assert!(error("60 9 * * *").starts_with("Minutes must be at most 59"));
    }
}
