//! What the latency phases measure with: load at a fixed rate, and a window over it that
//! also records the machine's scheduling noise and the gateway's own journal syncs.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::gateway::pct;

/// Run `n` requests, one every `every`, each in its own task; their durations, sorted.
pub(crate) async fn at_rate<F, Fut>(n: usize, every: Duration, request: F) -> Vec<Duration>
where
    F: Fn(usize) -> Fut,
    Fut: Future<Output = Duration> + Send + 'static,
{
    let mut ticker = tokio::time::interval(every);
    let mut tasks = Vec::with_capacity(n);
    for i in 0..n {
        ticker.tick().await;
        tasks.push(tokio::spawn(request(i)));
    }
    let mut lat = Vec::with_capacity(n);
    for t in tasks {
        lat.push(t.await.expect("request task"));
    }
    lat.sort();
    lat
}

/// A latency phase against one gateway: opened before the load, closed after it.
pub(crate) struct Window<'a> {
    http: &'a reqwest::Client,
    base: &'a str,
    syncs: Vec<(f64, u64)>,
    jitter: Jitter,
}

impl<'a> Window<'a> {
    pub(crate) async fn open(http: &'a reqwest::Client, base: &'a str) -> Self {
        let syncs = store_syncs(http, base).await;
        Self {
            http,
            base,
            syncs,
            jitter: Jitter::start(),
        }
    }

    /// Print `what`'s p50/p99/max from the sorted `lat`, then the machine's noise and the
    /// gateway's journal syncs over the same seconds.
    pub(crate) async fn close(self, what: &str, lat: &[Duration], how: &str) {
        let late = self.jitter.stop();
        println!(
            "{what:<26}p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms {how}",
            pct(lat, 0.5),
            pct(lat, 0.99),
            pct(lat, 1.0)
        );
        println!(
            "  machine noise meanwhile: a 1 ms sleep woke late by p99 {:.2} ms, max {:.2} ms",
            pct(&late, 0.99),
            pct(&late, 1.0)
        );
        let after = store_syncs(self.http, self.base).await;
        println!("{}", syncs_line(&self.syncs, &after));
    }
}

/// The gateway's `switchboard_store_sync_seconds` histogram: (upper bound, cumulative count).
async fn store_syncs(http: &reqwest::Client, base: &str) -> Vec<(f64, u64)> {
    let text = http
        .get(format!("{base}/metrics"))
        .send()
        .await
        .expect("metrics")
        .text()
        .await
        .expect("metrics text");
    text.lines()
        .filter_map(|l| l.strip_prefix("switchboard_store_sync_seconds_bucket{le=\""))
        .filter_map(|l| {
            let (le, n) = l.split_once("\"} ")?;
            let le = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().ok()?
            };
            Some((le, n.parse().ok()?))
        })
        .collect()
}

/// The gateway's own durable journal writes between two snapshots: the bucket holding the
/// p99 and the highest non-empty bucket.
fn syncs_line(before: &[(f64, u64)], after: &[(f64, u64)]) -> String {
    let delta: Vec<(f64, u64)> = after
        .iter()
        .zip(before)
        .map(|((le, a), (_, b))| (*le, a - b))
        .collect();
    let total = delta.last().map_or(0, |d| d.1);
    let bound = |n: u64| {
        let le = delta
            .iter()
            .find(|d| d.1 >= n)
            .map_or(f64::INFINITY, |d| d.0);
        if le.is_finite() {
            format!("<= {} ms", le * 1000.0)
        } else {
            "> 30 s".into()
        }
    };
    format!(
        "  the gateway's journal syncs meanwhile: {total}, p99 {}, max {}",
        bound((total * 99).div_ceil(100)),
        bound(total)
    )
}

/// A thread that sleeps 1 ms at a time and records how late it wakes: the scheduling noise
/// of the machine (other tenants, the host) that every latency figure includes.
struct Jitter {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<Vec<Duration>>,
}

impl Jitter {
    fn start() -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut late = Vec::new();
            while !flag.load(Ordering::Relaxed) {
                let t = Instant::now();
                std::thread::sleep(Duration::from_millis(1));
                late.push(t.elapsed().saturating_sub(Duration::from_millis(1)));
            }
            late
        });
        Self { stop, thread }
    }

    /// Sorted wake-up delays.
    fn stop(self) -> Vec<Duration> {
        self.stop.store(true, Ordering::Relaxed);
        let mut late = self.thread.join().expect("jitter thread");
        late.sort();
        late
    }
}

/// p50/p99 of appending 2 KB and `fdatasync`, 200 times 5 ms apart, in a temporary file on
/// the disk the gateways' data directories live on.
pub(crate) fn disk_fdatasync() -> (f64, f64) {
    use std::io::Write;
    let dir = tempfile::tempdir().expect("tempdir");
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.path().join("probe"))
        .expect("probe file");
    let mut lat = Vec::new();
    for _ in 0..200 {
        let t = Instant::now();
        f.write_all(&[0u8; 2048]).expect("write");
        f.sync_data().expect("fdatasync");
        lat.push(t.elapsed());
        std::thread::sleep(Duration::from_millis(5));
    }
    lat.sort();
    (pct(&lat, 0.5), pct(&lat, 0.99))
}
