//! Benchmark-style checks, on the real clock: memory for 100 000 scheduled jobs, and the
//! lateness when 1 000 jobs fall due at the same instant. Figures are printed (run with
//! `--nocapture`); the assertions are loose so a busy machine does not fail them.

mod scheduler_support;

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use scheduler_support::{EchoHandler, RecordingChannel};
use switchboard::bus::{Bus, ChannelRegistry};
use switchboard::config::Config;
use switchboard::metrics::Metrics;
use switchboard::scheduler::{CatchUp, Clock, Delivery, Job, Schedule, Scheduler, SystemClock};
use switchboard::store::{Batch, SledStore, Store, Tree};
use switchboard_channel::Channel;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|n| n.parse().ok())
        })
        .unwrap_or(0)
}

fn job(n: usize, schedule: Schedule, next_run: DateTime<Utc>, now: DateTime<Utc>) -> Job {
    Job {
        id: format!("b{n}"),
        key: format!("test:chat{}", n % 1000).parse().unwrap(),
        message: format!("reminder number {n}: water the plants"),
        schedule,
        tz: "Europe/Berlin".into(),
        created_by: "cli".into(),
        created_at: now,
        enabled: true,
        next_run: Some(next_run),
        runs: Vec::new(),
        delivery: Delivery::Agent,
        catch_up: CatchUp::Once,
        model: None,
    }
}

async fn insert(store: &Arc<dyn Store>, jobs: impl Iterator<Item = Job>) {
    let mut batch = Batch::default();
    for j in jobs {
        batch.put(Tree::Cron, Job::store_key(&j.id), j.to_bytes().unwrap());
        if batch.ops.len() >= 10_000 {
            store.apply(std::mem::take(&mut batch)).unwrap();
        }
    }
    store.apply(batch).unwrap();
    store.flush().await.unwrap();
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn benchmark_100k_jobs_in_memory_and_1000_due_at_once() {
    // --- 100 000 jobs: memory above idle ---
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let metrics = Arc::new(Metrics::default());
    let config = Arc::new(Config::default());
    let dir = tempfile::tempdir().unwrap();
    let baseline = rss_kib();
    {
        let store: Arc<dyn Store> = Arc::new(SledStore::open(dir.path()).unwrap());
        let now = clock.now();
        insert(
            &store,
            (0..100_000).map(|n| {
                let anchor = now + chrono::Duration::seconds(3600 + n as i64);
                job(
                    n,
                    Schedule::Every {
                        every_ms: 86_400_000,
                        anchor,
                    },
                    anchor,
                    now,
                )
            }),
        )
        .await;
    }
    let written = rss_kib();
    // A restart with 100 000 jobs in the store, measured in a fresh process (this one keeps
    // the heap of the writing phase): idle with the store open, then with the index built.
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "reopen_100k_jobs_child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("SCHED_BENCH_DIR", dir.path())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find_map(|l| l.find("100k jobs: (fresh").map(|i| &l[i..]))
        .unwrap_or("child printed nothing");
    println!(
        "{line}; writing them took this process from {:.1} to {:.1} MiB",
        baseline as f64 / 1024.0,
        written as f64 / 1024.0
    );
    assert!(out.status.success(), "{text}");

    // --- 1 000 jobs due at the same instant: lateness ---
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = Arc::new(SledStore::open(dir.path()).unwrap());
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let channel = Arc::new(RecordingChannel::default());
    let registry: ChannelRegistry = Arc::new(RwLock::new(HashMap::from([(
        "test".to_string(),
        channel.clone() as Arc<dyn Channel>,
    )])));
    let shutdown = CancellationToken::new();
    let tracker = TaskTracker::new();
    let bus = Bus::new(
        store.clone(),
        registry,
        64,
        metrics.clone(),
        shutdown.clone(),
        tracker.clone(),
    );
    let handler = Arc::new(EchoHandler::new(clock.clone()));
    bus.set_handler(handler.clone());
    let now = clock.now();
    let due = now + chrono::Duration::seconds(2);
    let spread = std::env::var("SCHED_BENCH_SPREAD").is_ok();
    // All at one instant (the worst case), or spread over one second.
    let due_of = |n: usize| due + chrono::Duration::milliseconds(if spread { n as i64 } else { 0 });
    insert(
        &store,
        (0..1000).map(|n| job(n, Schedule::At { at: due_of(n) }, due_of(n), now)),
    )
    .await;
    let scheduler = Scheduler::new(
        store.clone(),
        Some(bus.clone()),
        config,
        metrics.clone(),
        clock.clone(),
    );
    scheduler.start(shutdown.clone(), &tracker);
    assert!(
        handler.wait_for(1000, Duration::from_secs(120)).await,
        "all 1000 fired"
    );
    // Stopping lets the firing round finish recording its runs.
    shutdown.cancel();
    tracker.close();
    tokio::time::timeout(Duration::from_secs(30), tracker.wait())
        .await
        .unwrap();

    let mut fired: Vec<Duration> = scheduler
        .list(None)
        .iter()
        .filter_map(|j| j.runs.first())
        .map(|r| (r.at - r.due).to_std().unwrap_or_default())
        .collect();
    let mut received: Vec<Duration> = handler
        .received()
        .iter()
        .map(|(m, at)| {
            let due_ms: i64 =
                m.id.rsplit(':')
                    .next()
                    .and_then(|d| d.parse().ok())
                    .unwrap_or(0);
            (*at - DateTime::from_timestamp_millis(due_ms).unwrap_or(due))
                .to_std()
                .unwrap_or_default()
        })
        .collect();
    fired.sort();
    received.sort();
    println!(
        "1000 jobs due {}: fire lateness p50 {:?} p99 {:?} max {:?} ({} runs \
         recorded); accepted-and-in-a-turn lateness p50 {:?} p99 {:?} max {:?}",
        if spread {
            "spread over one second"
        } else {
            "at one instant"
        },
        percentile(&fired, 0.5),
        percentile(&fired, 0.99),
        fired.last().copied().unwrap_or_default(),
        fired.len(),
        percentile(&received, 0.5),
        percentile(&received, 0.99),
        received.last().copied().unwrap_or_default(),
    );
    assert_eq!(fired.len(), 1000);
    assert!(percentile(&fired, 0.99) < Duration::from_secs(5));
}

/// The child half of the memory benchmark (does nothing unless `SCHED_BENCH_DIR` is set).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reopen_100k_jobs_child() {
    let Ok(dir) = std::env::var("SCHED_BENCH_DIR") else {
        return;
    };
    let before = rss_kib();
    let store: Arc<dyn Store> = Arc::new(SledStore::open(std::path::Path::new(&dir)).unwrap());
    let idle = rss_kib();
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let scheduler = Scheduler::new(
        store.clone(),
        None,
        Arc::new(Config::default()),
        Arc::new(Metrics::default()),
        clock,
    );
    let t = Instant::now();
    assert_eq!(scheduler.reload().unwrap(), 100_000);
    let load_time = t.elapsed();
    let indexed = rss_kib();
    let t = Instant::now();
    let listed = scheduler.list(None).len();
    let list_time = t.elapsed();
    let listed_rss = rss_kib();
    let mib = |a: u64, b: u64| b.saturating_sub(a) as f64 / 1024.0;
    println!(
        "100k jobs: (fresh process): RSS {:.1} MiB before opening the store, {:.1} MiB idle with \
         it open; index built in {load_time:?}: +{:.1} MiB above idle; a full list ({listed} \
         jobs) took {list_time:?}, RSS then +{:.1} MiB above idle",
        before as f64 / 1024.0,
        idle as f64 / 1024.0,
        mib(idle, indexed),
        mib(idle, listed_rss),
    );
}
