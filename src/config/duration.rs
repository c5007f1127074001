//! Human durations in config values: `"500ms"`, `"30s"`, `"30m"`, `"1h"`, `"1h30m"`, `"2d"`.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A duration written as a string in the config file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct DurationStr(pub Duration);

impl DurationStr {
    pub const fn secs(s: u64) -> Self {
        Self(Duration::from_secs(s))
    }

    pub fn get(self) -> Duration {
        self.0
    }
}

/// Parse `"30s"`, `"1h30m"`, `"500ms"`, `"2d"`, `"1w"`, also written with spaces and words
/// (`"1h 30m"`, `"10 minutes"`, `"2 hours"`). A bare number is refused: the unit matters.
/// So is `"M"` (minutes or months?) and a month (no fixed length).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    if s.is_empty() {
        return Err(
            "expected a duration like \"30s\", \"10m\" or \"1h\", got an empty string".into(),
        );
    }
    let bad = || format!("expected a duration like \"30s\", \"10m\" or \"1h\", got {s:?}");
    let mut total = Duration::ZERO;
    let mut rest = s;
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?;
        if digits == 0 {
            return Err(bad());
        }
        let n: u64 = rest[..digits].parse().map_err(|_| bad())?;
        // Spaces may part a number from its unit and one part from the next (`1h 30m`).
        rest = rest[digits..].trim_start();
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c.is_whitespace())
            .unwrap_or(rest.len());
        let unit = &rest[..unit_len];
        rest = rest[unit_len..].trim_start();
        let lower = unit.to_ascii_lowercase();
        if unit == "M" || matches!(lower.as_str(), "mo" | "mon" | "month" | "months") {
            // A model asking for "every 1M" would get a reminder a minute, not a month.
            return Err(format!(
                "{s:?}: \"{unit}\" could be minutes or months; write \"m\" or \"min\" for \
                 minutes (a month is no fixed duration: use a cron schedule such as \"0 9 1 * *\")"
            ));
        }
        let part = match lower.as_str() {
            "ms" => Duration::from_millis(n),
            "s" | "sec" | "secs" | "second" | "seconds" => Duration::from_secs(n),
            "m" | "min" | "mins" | "minute" | "minutes" => {
                Duration::from_secs(n.checked_mul(60).ok_or_else(bad)?)
            }
            "h" | "hr" | "hrs" | "hour" | "hours" => {
                Duration::from_secs(n.checked_mul(3600).ok_or_else(bad)?)
            }
            "d" | "day" | "days" => Duration::from_secs(n.checked_mul(86_400).ok_or_else(bad)?),
            "w" | "wk" | "week" | "weeks" => {
                Duration::from_secs(n.checked_mul(604_800).ok_or_else(bad)?)
            }
            _ => return Err(bad()),
        };
        total = total.checked_add(part).ok_or_else(bad)?;
    }
    Ok(total)
}

impl fmt::Display for DurationStr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let d = self.0;
        if d.subsec_millis() != 0 || d.as_secs() == 0 {
            write!(f, "{}ms", d.as_millis())
        } else if d.as_secs() % 3600 == 0 {
            write!(f, "{}h", d.as_secs() / 3600)
        } else if d.as_secs() % 60 == 0 {
            write!(f, "{}m", d.as_secs() / 60)
        } else {
            write!(f, "{}s", d.as_secs())
        }
    }
}

impl Serialize for DurationStr {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for DurationStr {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = DurationStr;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a duration string like \"30s\"")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<DurationStr, E> {
                parse_duration(v).map(DurationStr).map_err(E::custom)
            }
        }
        d.deserialize_str(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn months_are_refused_and_weeks_taken() {
        for s in ["1M", "2 months", "1mo"] {
            let e = parse_duration(s).unwrap_err();
            assert!(
                e.contains("minutes or months") && e.contains("cron"),
                "{s}: {e}"
            );
        }
        assert_eq!(parse_duration("1m").unwrap(), Duration::from_secs(60));
        assert_eq!(
            parse_duration("2w").unwrap(),
            Duration::from_secs(1_209_600)
        );
        assert_eq!(
            parse_duration("1 week").unwrap(),
            Duration::from_secs(604_800)
        );
    }

    #[test]
    fn parses_units_and_compounds() {
        assert_eq!(parse_duration("30s").unwrap(), Duration::from_secs(30));
        assert_eq!(parse_duration("30m").unwrap(), Duration::from_secs(1800));
        assert_eq!(parse_duration("1h30m").unwrap(), Duration::from_secs(5400));
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("2d").unwrap(), Duration::from_secs(172_800));
        // Written with spaces, as the `cron` tool and CLI take them.
        assert_eq!(parse_duration("30 s").unwrap(), Duration::from_secs(30));
        assert_eq!(
            parse_duration(" 1h 30m ").unwrap(),
            Duration::from_secs(5400)
        );
        assert_eq!(
            parse_duration("2 Hours 5 minutes").unwrap(),
            Duration::from_secs(7500)
        );
    }

    #[test]
    fn refuses_garbage_with_a_hint() {
        for bad in [
            "", "30", "abc", "10x", "m5", "-5s", "3 0s", "30 s s", "1 h30",
        ] {
            let e = parse_duration(bad).unwrap_err();
            assert!(e.contains("expected a duration"), "{bad}: {e}");
        }
    }

    #[test]
    fn display_round_trips() {
        for s in ["30s", "30m", "1h", "500ms"] {
            let d = DurationStr(parse_duration(s).unwrap());
            assert_eq!(d.to_string(), s);
        }
    }
}
