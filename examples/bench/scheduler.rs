//! Scheduler figures: memory with 100 000 stored jobs, lateness of 1 000 jobs due at once.

use std::path::Path;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use switchboard::scheduler::{CatchUp, Delivery, Job, Schedule};
use switchboard::store::{Batch, SledStore, Store};
use switchboard_fakes::llm::FakeLlm;

use crate::NO_CHANNELS;
use crate::gateway::{rss_mb, start_gateway_in};

/// A scheduled job for the benchmark's store.
pub(crate) fn bench_job(n: usize, schedule: Schedule, next_run: DateTime<Utc>) -> Job {
    Job {
        id: format!("b{n}"),
        key: format!("api:chat{}", n % 1000).parse().expect("key"),
        message: format!("reminder number {n}: water the plants"),
        schedule,
        tz: "Europe/Berlin".into(),
        created_by: "bench".into(),
        created_at: Utc::now(),
        enabled: true,
        next_run: Some(next_run),
        runs: Vec::new(),
        delivery: Delivery::Agent,
        catch_up: CatchUp::Once,
        model: None,
        set_by: Vec::new(),
    }
}

/// Write jobs straight into a store in `dir/data` (the gateway is not running yet).
pub(crate) async fn write_jobs(dir: &Path, jobs: impl Iterator<Item = Job>) {
    let store = SledStore::open(&dir.join("data")).expect("store");
    let mut batch = Batch::default();
    for j in jobs {
        switchboard::scheduler::stage_job(&mut batch, &j).expect("job");
        if batch.ops.len() >= 10_000 {
            store.apply(std::mem::take(&mut batch)).expect("write");
        }
    }
    store.apply(batch).expect("write");
    store.flush().await.expect("flush");
}

/// Scheduler figures: memory with 100 000 jobs, lateness of 1 000 jobs due at once.
pub(crate) async fn scheduler(llm: &FakeLlm, idle_none: f64) {
    let dir = tempfile::tempdir().expect("tempdir");
    let now = Utc::now();
    write_jobs(
        dir.path(),
        (0..100_000).map(|n| {
            let anchor = now + chrono::Duration::seconds(3600 + n as i64);
            bench_job(
                n,
                Schedule::Every {
                    every_ms: 86_400_000,
                    anchor,
                },
                anchor,
            )
        }),
    )
    .await;
    let extra = format!(
        "{NO_CHANNELS}{}",
        std::env::var("BENCH_SCHED_CONFIG").unwrap_or_default()
    );
    let (gw, _) = start_gateway_in(dir, llm, &extra, &[]).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let rss = rss_mb(gw.child.id());
    println!(
        "100 000 cron jobs:        idle RSS {rss:.1} MB (+{:.1} MB over no jobs)",
        rss - idle_none
    );
    drop(gw);

    let dir = tempfile::tempdir().expect("tempdir");
    let due = Utc::now() + chrono::Duration::seconds(4);
    write_jobs(
        dir.path(),
        (0..1000).map(|n| bench_job(n, Schedule::At { at: due }, due)),
    )
    .await;
    let (gw, _) = start_gateway_in(dir, llm, NO_CHANNELS, &[]).await;
    let http = reqwest::Client::new();
    let started = Instant::now();
    let text = loop {
        let text = http
            .get(format!("{}/metrics", gw.base))
            .send()
            .await
            .expect("metrics")
            .text()
            .await
            .expect("metrics text");
        if text.contains("switchboard_cron_lateness_seconds_count 1000")
            || started.elapsed() > Duration::from_secs(30)
        {
            break text;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    // The smallest histogram bucket holding 99 % of the runs.
    let p99 = text
        .lines()
        .filter_map(|l| l.strip_prefix("switchboard_cron_lateness_seconds_bucket{le=\""))
        .filter_map(|l| l.split_once("\"} "))
        .find(|(_, n)| n.trim().parse::<f64>().unwrap_or(0.0) >= 990.0)
        .map(|(le, _)| le.to_string())
        .unwrap_or_else(|| "?".into());
    println!("1 000 jobs due at once:   fire lateness p99 <= {p99} s (histogram bucket)");
    drop(gw);
}
