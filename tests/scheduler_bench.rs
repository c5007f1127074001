//! Benchmark-style checks, on the real clock: memory for 100 000 scheduled jobs, and the
//! lateness when 1 000 jobs fall due at the same instant. Figures are printed (run with
//! `--nocapture`); the assertions are loose so a busy machine does not fail them.

mod scheduler_support;

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use scheduler_support::{EchoHandler, RecordingChannel, key};
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
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = Arc::new(SledStore::open(dir.path()).unwrap());
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let metrics = Arc::new(Metrics::default());
    let config = Arc::new(Config::default());
    let scheduler = Scheduler::new(
        store.clone(),
        None,
        config.clone(),
        metrics.clone(),
        clock.clone(),
    );
    assert_eq!(scheduler.reload().unwrap(), 0);
    let idle = rss_kib();
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
    let stored = rss_kib();
    let t = Instant::now();
    assert_eq!(scheduler.reload().unwrap(), 100_000);
    let load_time = t.elapsed();
    let indexed = rss_kib();
    let t = Instant::now();
    let extra = scheduler.list(Some(&key())).len();
    let list_time = t.elapsed();
    println!(
        "100k jobs: RSS idle {} MiB; +{:.1} MiB after writing them to the store, +{:.1} MiB for \
         the in-memory index (total +{:.1} MiB); index built in {load_time:?}; a full-scan \
         list took {list_time:?} ({extra} matched)",
        idle / 1024,
        (stored.saturating_sub(idle)) as f64 / 1024.0,
        (indexed.saturating_sub(stored)) as f64 / 1024.0,
        (indexed.saturating_sub(idle)) as f64 / 1024.0,
    );
    assert!(
        indexed.saturating_sub(stored) < 30 * 1024,
        "index under 30 MiB"
    );
    drop(scheduler);
    drop(store);

    // --- 1 000 jobs due at the same instant: lateness ---
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = Arc::new(SledStore::open(dir.path()).unwrap());
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
    insert(
        &store,
        (0..1000).map(|n| job(n, Schedule::At { at: due }, due, now)),
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
        .map(|(_, at)| (*at - due).to_std().unwrap_or_default())
        .collect();
    fired.sort();
    received.sort();
    println!(
        "1000 jobs due at one instant: fire lateness p50 {:?} p99 {:?} max {:?} ({} runs \
         recorded); accepted-and-in-a-turn lateness p50 {:?} p99 {:?} max {:?}",
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
