//! Wall-clock access behind a trait, so timing tests run under tokio's paused clock.

use chrono::{DateTime, Utc};

/// Where the scheduler reads the current wall-clock time.
pub trait Clock: Send + Sync + 'static {
    fn now(&self) -> DateTime<Utc>;
}

/// The system clock (production).
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }
}

/// A wall clock that follows tokio's clock from a fixed start: `start + (Instant::now() −
/// start_instant)`. Under `#[tokio::test(start_paused = true)]` it moves only when tokio's
/// time does (`tokio::time::advance`, or auto-advance while the runtime is idle), so sleeps
/// computed from it end exactly when the clock says they should.
#[derive(Debug, Clone, Copy)]
pub struct TokioClock {
    start_wall: DateTime<Utc>,
    start: tokio::time::Instant,
}

impl TokioClock {
    /// A clock reading `start_wall` now.
    pub fn starting_at(start_wall: DateTime<Utc>) -> Self {
        Self {
            start_wall,
            start: tokio::time::Instant::now(),
        }
    }
}

impl Clock for TokioClock {
    fn now(&self) -> DateTime<Utc> {
        let elapsed = tokio::time::Instant::now().saturating_duration_since(self.start);
        self.start_wall + chrono::Duration::from_std(elapsed).unwrap_or(chrono::Duration::MAX)
    }
}
