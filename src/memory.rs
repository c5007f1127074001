//! Giving freed heap memory back to the system once the gateway goes quiet.
//!
//! glibc's allocator keeps what a thread freed in that thread's arena and only returns the
//! top of an arena, so after a burst of chats the gateway's RSS would stay at its peak long
//! after the chats went quiet (measured by the benchmark: 10 000 chats left 30–32 MB, 27 MB
//! once trimmed; after the throughput runs 71–73 MB, 56 MB once trimmed, 36 MB once its
//! 1 000 HTTP clients had left and the heap was trimmed again). `malloc_trim(0)` walks every
//! arena and hands whole free pages back with `madvise`. It runs only while no chat has a
//! worker (see [`IDLE_TRIMS`]), so its arena locks (a few ms) do not land on running turns.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::bus::Bus;
use crate::metrics::Metrics;

/// When the gateway trims its heap, counted from the moment its last chat went quiet: soon,
/// then again while it stays quiet, because memory is also freed after the chats end:
/// HTTP clients that disconnect later (1 000 of them held ~20 MB), the LLM client's idle
/// connections, closed 30–60 s after their last turn (see `llm::openai::POOL_IDLE`).
pub const IDLE_TRIMS: [Duration; 4] = [
    Duration::from_secs(1),
    Duration::from_secs(5),
    Duration::from_secs(30),
    Duration::from_secs(100),
];

/// Return free heap pages to the operating system. A no-op where the allocator is not
/// glibc's (musl, other systems), whose allocators do not hold on to pages this way.
pub fn release_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[allow(unsafe_code)]
    // SAFETY: `malloc_trim` has no preconditions: it takes the allocator's own locks and
    // releases only pages that hold no live allocation. The workspace denies `unsafe`
    // everywhere else.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Each time the bus goes quiet, give the freed heap back at each of [`IDLE_TRIMS`] while
/// it stays quiet (each trim counted in `switchboard_heap_trims_total`); a chat that runs
/// meanwhile starts the schedule over once it ends. Ends with `shutdown`.
pub async fn trim_when_idle(bus: Arc<Bus>, metrics: Arc<Metrics>, shutdown: CancellationToken) {
    let mut quiet_again = false;
    loop {
        if !quiet_again {
            tokio::select! {
                _ = bus.became_idle() => {}
                _ = shutdown.cancelled() => return,
            }
        }
        quiet_again = false;
        let since = tokio::time::Instant::now();
        for mark in IDLE_TRIMS {
            tokio::select! {
                _ = tokio::time::sleep_until(since + mark) => {}
                // Busy and quiet again meanwhile: start over from now.
                _ = bus.became_idle() => {
                    quiet_again = true;
                    break;
                }
                _ = shutdown.cancelled() => return,
            }
            // A chat is running: wait until it ends.
            if bus.active_chats() > 0 {
                break;
            }
            release_free_memory();
            metrics.heap_trims.fetch_add(1, Ordering::Relaxed);
        }
    }
}
