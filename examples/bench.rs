//! The benchmark: runs the release gateway binary against local fakes and prints figures.
//!
//! `cargo run --release --example bench` (builds `target/release/switchboard` when missing).
//! Figures: start-up to `/readyz` 200, idle RSS, end-to-end API-channel messages/s over
//! 1 000 concurrent chats (durability on, zero-latency LLM), overhead per message p50/p99
//! at 100 messages/s, RSS after 10 000 distinct chats and once their workers are gone.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use switchboard::scheduler::{CatchUp, Delivery, Job, Schedule};
use switchboard::store::{Batch, SledStore, Store};
use switchboard_fakes::discord::FakeDiscord;
use switchboard_fakes::llm::FakeLlm;
use switchboard_fakes::slack::{self as fake_slack, APP_TOKEN, BOT_TOKEN, FakeSlack};
use switchboard_fakes::telegram::{FakeTelegram, TgUser};

const DISCORD_TOKEN: &str = "bench-discord-token-0123456789";
const SLACK_SECRET: &str = "bench-signing-secret";
const NO_CHANNELS: &str = "[channels.telegram]\nenabled = false\n[channels.discord]\nenabled = false\n[channels.slack]\nenabled = false\n";

fn binary() -> PathBuf {
    let exe = std::env::current_exe().expect("current exe");
    // target/<profile>/examples/bench → target/<profile>/switchboard
    let bin = exe
        .parent()
        .and_then(Path::parent)
        .expect("target dir")
        .join("switchboard");
    if !bin.exists() {
        eprintln!("building the gateway binary…");
        let ok = Command::new(env!("CARGO"))
            .args(["build", "--release", "--bin", "switchboard"])
            .status()
            .expect("cargo build");
        assert!(ok.success(), "cargo build failed");
    }
    bin
}

fn rss_mb(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|kb| kb.parse::<f64>().ok())
        .map_or(f64::NAN, |kb| kb / 1024.0)
}

struct Gateway {
    child: Child,
    base: String,
    _dir: tempfile::TempDir,
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn start_gateway(llm: &FakeLlm, extra: &str, envs: &[(&str, String)]) -> (Gateway, Duration) {
    start_gateway_in(tempfile::tempdir().expect("tempdir"), llm, extra, envs).await
}

async fn start_gateway_in(
    dir: tempfile::TempDir,
    llm: &FakeLlm,
    extra: &str,
    envs: &[(&str, String)],
) -> (Gateway, Duration) {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let config = format!(
        "[gateway]\nhttp_listen = \"127.0.0.1:{port}\"\nmax_concurrent_turns = 64\n\
         [llm]\nbase_url = \"{}\"\nmax_retries = 0\n\
         [heartbeat]\nenabled = false\n{extra}\n",
        llm.base_url()
    );
    std::fs::write(dir.path().join("config.toml"), config).unwrap();
    let base = format!("http://127.0.0.1:{port}");
    let http = reqwest::Client::new();
    let started = Instant::now();
    let mut cmd = Command::new(binary());
    cmd.arg("--config")
        .arg(dir.path().join("config.toml"))
        .arg("run")
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit());
    for (k, v) in envs {
        cmd.env(k, v);
    }
    // Extra variables for experiments, e.g. BENCH_GATEWAY_ENV="MALLOC_ARENA_MAX=2".
    if let Ok(extra) = std::env::var("BENCH_GATEWAY_ENV") {
        for kv in extra.split_whitespace() {
            if let Some((k, v)) = kv.split_once('=') {
                cmd.env(k, v);
            }
        }
    }
    let child = cmd.spawn().expect("spawn gateway");
    loop {
        if let Ok(r) = http.get(format!("{base}/readyz")).send().await {
            if r.status() == 200 {
                break;
            }
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "gateway never became ready"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let ready = started.elapsed();
    (
        Gateway {
            child,
            base,
            _dir: dir,
        },
        ready,
    )
}

async fn one(http: &reqwest::Client, base: &str, user: &str, text: &str) -> Duration {
    let t = Instant::now();
    let r = http
        .post(format!("{base}/v1/chat/completions"))
        .json(&serde_json::json!({"model": "x", "user": user, "messages": [{"role": "user", "content": text}]}))
        .send()
        .await
        .expect("request");
    assert!(r.status().is_success(), "status {}", r.status());
    let _ = r.bytes().await;
    t.elapsed()
}

fn pct(sorted: &[Duration], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i].as_secs_f64() * 1000.0
}

#[tokio::main]
async fn main() {
    let llm = FakeLlm::start().await;
    llm.set_recording(false);
    if std::env::var("BENCH_ONLY").as_deref() == Ok("scheduler") {
        let (gw, _) = start_gateway(&llm, NO_CHANNELS, &[]).await;
        tokio::time::sleep(Duration::from_secs(1)).await;
        let idle = rss_mb(gw.child.id());
        drop(gw);
        scheduler(&llm, idle).await;
        return;
    }
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(2048)
        .build()
        .unwrap();

    // 1. Start-up and idle memory, no channels.
    let no_channels = "[channels.telegram]\nenabled = false\n[channels.discord]\nenabled = false\n[channels.slack]\nenabled = false\n";
    let mut readies = Vec::new();
    for _ in 0..5 {
        let (gw, ready) = start_gateway(&llm, no_channels, &[]).await;
        readies.push(ready);
        drop(gw);
    }
    readies.sort();
    let (gw, _) = start_gateway(&llm, no_channels, &[]).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let idle = rss_mb(gw.child.id());
    println!(
        "start-up to ready:        {:.1} ms (median of 5; min {:.1} ms)",
        pct(&readies, 0.5),
        readies[0].as_secs_f64() * 1000.0
    );
    println!("idle RSS (no channels):   {idle:.1} MB");

    let only_memory = std::env::var("BENCH_ONLY").as_deref() == Ok("memory");
    let only_throughput = std::env::var("BENCH_ONLY").as_deref() == Ok("throughput");
    // 2. Throughput: 1 000 concurrent chats, 10 messages each, durability on (after the
    // steady overhead measurement).
    for i in 0..1000 {
        if only_memory {
            break;
        }
        one(&http, &gw.base, &format!("warm{i}"), "warm up").await;
    }
    // 2a. Overhead per message at 100 messages/s in steady state (zero-latency LLM: the
    // round trip is overhead). Each message waits for two fdatasyncs (intake, reply), so
    // the disk's own latency comes first, for reference.
    if !only_memory {
        let (p50, p99) = disk_fdatasync();
        println!(
            "disk fdatasync (2 KB):    p50 {p50:.2} ms, p99 {p99:.2} ms (this machine's floor per durable write)"
        );
    }
    paced(&http, &gw.base, only_memory, "steady").await;
    let per_chat = if only_memory { 0 } else { 10 };
    let started = Instant::now();
    let mut tasks = Vec::new();
    for c in 0..1000 {
        let http = http.clone();
        let base = gw.base.clone();
        tasks.push(tokio::spawn(async move {
            for m in 0..per_chat {
                one(&http, &base, &format!("chat{c}"), &format!("message {m}")).await;
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let secs = started.elapsed().as_secs_f64();
    println!(
        "throughput:               {:.0} messages/s (1 000 chats x {per_chat}, end to end)",
        1000.0 * per_chat as f64 / secs
    );

    // 3. Overhead per message at 100 messages/s, once more right after the burst.
    paced(&http, &gw.base, only_memory, "after a burst").await;

    if only_throughput {
        return;
    }
    // 4. Memory per 10 000 chats.
    let mut tasks = Vec::new();
    for c in 0..10_000 {
        let (http, base) = (http.clone(), gw.base.clone());
        tasks.push(tokio::spawn(async move {
            one(&http, &base, &format!("many{c}"), "hi").await;
        }));
        // 100 chats in flight at a time: many chats, each sending once.
        if tasks.len() >= 100 {
            for t in tasks.drain(..) {
                t.await.unwrap();
            }
            if only_memory && (c + 1) % 2000 == 0 {
                println!("  after {} chats: {:.1} MB", c + 1, rss_mb(gw.child.id()));
            }
        }
    }
    for t in tasks {
        t.await.unwrap();
    }
    let after = rss_mb(gw.child.id());
    tokio::time::sleep(Duration::from_secs(3)).await;
    let settled = rss_mb(gw.child.id());
    println!(
        "RSS after 10 000 chats:   {after:.1} MB right after, {settled:.1} MB 3 s later (idle was {idle:.1} MB)"
    );
    drop(http);
    tokio::time::sleep(Duration::from_secs(1)).await;
    println!("RSS once clients left:    {:.1} MB", rss_mb(gw.child.id()));
    // Keep the gateway up for inspection (gdb, pmap…): BENCH_HOLD=<seconds>.
    if let Some(secs) = std::env::var("BENCH_HOLD")
        .ok()
        .and_then(|s| s.parse().ok())
    {
        println!("holding gateway pid {} for {secs} s", gw.child.id());
        tokio::time::sleep(Duration::from_secs(secs)).await;
    }
    drop(gw);
    if only_memory {
        return;
    }
    let http = reqwest::Client::new();
    channels(&llm, &http, idle).await;
    scheduler(&llm, idle).await;
}

/// A scheduled job for the benchmark's store.
fn bench_job(n: usize, schedule: Schedule, next_run: DateTime<Utc>) -> Job {
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
    }
}

/// Write jobs straight into a store in `dir/data` (the gateway is not running yet).
async fn write_jobs(dir: &Path, jobs: impl Iterator<Item = Job>) {
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
async fn scheduler(llm: &FakeLlm, idle_none: f64) {
    let no_channels = "[channels.telegram]\nenabled = false\n[channels.discord]\nenabled = false\n[channels.slack]\nenabled = false\n";
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
        "{no_channels}{}",
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
    let (gw, _) = start_gateway_in(dir, llm, no_channels, &[]).await;
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

/// Figures with the platform channels connected to their fakes.
async fn channels(llm: &FakeLlm, http: &reqwest::Client, idle_none: f64) {
    let tg = FakeTelegram::start().await;
    let dc = FakeDiscord::start(DISCORD_TOKEN).await;
    let sl = FakeSlack::start().await;
    let off = |name: &str| format!("[channels.{name}]\nenabled = false\n");
    let tg_on = format!(
        "[channels.telegram]\nenabled = true\napi_url = \"{}\"\npacing = false\ndm_policy = \"open\"\n",
        tg.url()
    );
    let dc_on = format!(
        "[channels.discord]\nenabled = true\napi_url = \"{}\"\ndm_policy = \"open\"\n",
        dc.base_url
    );
    let sl_on = format!(
        "[channels.slack]\nenabled = true\napi_url = \"{}\"\ndm_policy = \"open\"\n",
        sl.api_url()
    );
    let envs = vec![
        ("TELEGRAM_BOT_TOKEN", tg.token().to_string()),
        ("DISCORD_BOT_TOKEN", DISCORD_TOKEN.to_string()),
        ("SLACK_BOT_TOKEN", BOT_TOKEN.to_string()),
        ("SLACK_APP_TOKEN", APP_TOKEN.to_string()),
        ("SLACK_SIGNING_SECRET", SLACK_SECRET.to_string()),
    ];
    for (name, cfg) in [
        (
            "telegram",
            format!("{tg_on}{}{}", off("discord"), off("slack")),
        ),
        (
            "discord",
            format!("{}{dc_on}{}", off("telegram"), off("slack")),
        ),
        (
            "slack",
            format!("{}{}{sl_on}", off("telegram"), off("discord")),
        ),
        ("all three", format!("{tg_on}{dc_on}{sl_on}")),
    ] {
        let (gw, ready) = start_gateway(llm, &cfg, &envs).await;
        tokio::time::sleep(Duration::from_secs(1)).await;
        let rss = rss_mb(gw.child.id());
        println!(
            "{name:<10} connected:   ready in {:.1} ms, idle RSS {rss:.1} MB (+{:.1} MB over no channels)",
            ready.as_secs_f64() * 1000.0,
            rss - idle_none
        );
    }

    // Telegram throughput: 1 000 chats x 5 messages through getUpdates → sendMessage.
    let cfg = format!("{tg_on}{}{}", off("discord"), off("slack"));
    let (gw, _) = start_gateway(llm, &cfg, &envs).await;
    let before = tg.sent().len();
    let users: Vec<TgUser> = (0..1000)
        .map(|i| TgUser::new(100_000 + i, &format!("user{i}")))
        .collect();
    let started = Instant::now();
    for round in 0..5 {
        for u in &users {
            tg.push_update(tg.dm_text(u, &format!("message {round}")));
        }
    }
    let total = 5000;
    tg.wait_for_sent(before + total, Duration::from_secs(120))
        .await
        .expect("all Telegram replies sent");
    let secs = started.elapsed().as_secs_f64();
    println!(
        "telegram throughput:      {:.0} messages/s (1 000 chats x 5, update to sendMessage)",
        total as f64 / secs
    );
    drop(gw);

    // Slack Events API: POST /slack/events at 200 events/s.
    let cfg = format!("{}{}{sl_on}", off("telegram"), off("discord"));
    let slack_env: Vec<(&str, String)> = vec![
        ("SLACK_BOT_TOKEN", BOT_TOKEN.to_string()),
        ("SLACK_SIGNING_SECRET", SLACK_SECRET.to_string()),
    ];
    let (gw, _) = start_gateway(llm, &cfg, &slack_env).await;
    let lat = Arc::new(std::sync::Mutex::new(Vec::new()));
    let syncs = store_syncs(http, &gw.base).await;
    let jitter = Jitter::start();
    let mut ticker = tokio::time::interval(Duration::from_millis(5));
    let mut tasks = Vec::new();
    for i in 0..1000 {
        ticker.tick().await;
        let (http, base, lat) = (http.clone(), gw.base.clone(), lat.clone());
        tasks.push(tokio::spawn(async move {
            let event = fake_slack::events::dm(
                &format!("D{}", i % 50),
                "U123",
                "hello",
                &format!("1700000000.{i:06}"),
            );
            let body = fake_slack::events::event_callback_body(&format!("EvBench{i}"), event);
            let ts = fake_slack::events::now_timestamp();
            let sig = fake_slack::events::sign(SLACK_SECRET, &ts, &body);
            let t = Instant::now();
            let r = http
                .post(format!("{base}/slack/events"))
                .header("content-type", "application/json")
                .header("x-slack-request-timestamp", ts)
                .header("x-slack-signature", sig)
                .body(body)
                .send()
                .await
                .expect("post");
            assert_eq!(r.status(), 200);
            lat.lock().unwrap().push(t.elapsed());
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let late = jitter.stop();
    let mut lat = lat.lock().unwrap().clone();
    lat.sort();
    println!(
        "slack /slack/events:      p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms at 200 events/s",
        pct(&lat, 0.5),
        pct(&lat, 0.99),
        pct(&lat, 1.0)
    );
    println!("{}", Jitter::line(&late));
    println!("{}", syncs_line(&syncs, &store_syncs(http, &gw.base).await));
    drop(gw);
}

/// 1 000 requests at 100 per second from 100 chats; prints the round trip's p50/p99.
async fn paced(http: &reqwest::Client, base: &str, skip: bool, label: &str) {
    if skip {
        return;
    }
    let lat = Arc::new(std::sync::Mutex::new(Vec::new()));
    let syncs = store_syncs(http, base).await;
    let jitter = Jitter::start();
    let mut ticker = tokio::time::interval(Duration::from_millis(10));
    let mut tasks = Vec::new();
    for i in 0..1000 {
        ticker.tick().await;
        let (http, base, lat) = (http.clone(), base.to_string(), lat.clone());
        tasks.push(tokio::spawn(async move {
            let d = one(&http, &base, &format!("paced{}", i % 100), "how are you?").await;
            lat.lock().unwrap().push(d);
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let late = jitter.stop();
    let mut lat = lat.lock().unwrap().clone();
    lat.sort();
    println!(
        "overhead at 100 msg/s:    p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms ({label}; HTTP round trip incl. durable writes)",
        pct(&lat, 0.5),
        pct(&lat, 0.99),
        pct(&lat, 1.0)
    );
    println!("{}", Jitter::line(&late));
    println!("{}", syncs_line(&syncs, &store_syncs(http, base).await));
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
/// of the machine (other tenants, the host) that every latency figure above includes.
struct Jitter {
    stop: Arc<std::sync::atomic::AtomicBool>,
    thread: std::thread::JoinHandle<Vec<Duration>>,
}

impl Jitter {
    fn start() -> Self {
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut late = Vec::new();
            while !flag.load(std::sync::atomic::Ordering::Relaxed) {
                let t = Instant::now();
                std::thread::sleep(Duration::from_millis(1));
                late.push(t.elapsed().saturating_sub(Duration::from_millis(1)));
            }
            late
        });
        Self { stop, thread }
    }

    fn line(late: &[Duration]) -> String {
        format!(
            "  machine noise meanwhile: a 1 ms sleep woke late by p99 {:.2} ms, max {:.2} ms",
            pct(late, 0.99),
            pct(late, 1.0)
        )
    }

    /// Sorted wake-up delays.
    fn stop(self) -> Vec<Duration> {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let mut late = self.thread.join().expect("jitter thread");
        late.sort();
        late
    }
}

/// p50/p99 of appending 2 KB and `fdatasync`, 200 times 5 ms apart, in a temporary file on
/// the disk the gateways' data directories live on.
fn disk_fdatasync() -> (f64, f64) {
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
