//! Exponential backoff with ±20 % jitter, shared by every retry loop.

use std::time::Duration;

/// `base · 2^(attempt-1)`, capped at `max`, with ±20 % jitter. `attempt` starts at 1.
pub fn delay(attempt: u32, base: Duration, max: Duration) -> Duration {
    let exp = base.saturating_mul(1u32 << attempt.saturating_sub(1).min(20));
    let capped = exp.min(max);
    let jitter: f64 = rand::random_range(0.8..1.2);
    capped.mul_f64(jitter)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_with_jitter_and_caps() {
        for attempt in 1..=4 {
            let d = delay(attempt, Duration::from_secs(2), Duration::from_secs(600));
            let nominal = 2.0 * 2f64.powi(attempt as i32 - 1);
            let s = d.as_secs_f64();
            assert!(
                s >= nominal * 0.8 - 1e-9 && s <= nominal * 1.2 + 1e-9,
                "{attempt}: {s}"
            );
        }
        assert!(
            delay(30, Duration::from_secs(2), Duration::from_secs(60)) <= Duration::from_secs(72)
        );
    }
}
