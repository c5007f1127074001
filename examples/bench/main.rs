//! The benchmark: runs the release gateway binary against local fakes and prints figures.
//!
//! `cargo run --release --example bench` (builds `target/release/switchboard` when missing).
//! Figures: start-up to `/readyz` 200, idle RSS, end-to-end API-channel messages/s over
//! 1 000 concurrent chats (durability on, zero-latency LLM), overhead per message p50/p99
//! at 100 messages/s, RSS after 10 000 distinct chats and once their workers are gone, and
//! again after 10 000 more (memory must not grow with the chats ever seen); then the
//! channels ([`channels`]) and the scheduler ([`scheduler`]).
//!
//! - [`gateway`]: starting the gateway binary, its RSS.
//! - [`probes`]: paced load, the machine's noise, the gateway's journal syncs, the disk.

mod channels;
mod gateway;
mod probes;
mod scheduler;

use std::time::{Duration, Instant};

use switchboard_fakes::llm::FakeLlm;

use gateway::{one, pct, rss_mb, start_gateway, start_gateway_in};
use probes::{Window, at_rate, disk_fdatasync};

pub(crate) const NO_CHANNELS: &str = "[channels.telegram]\nenabled = false\n[channels.discord]\nenabled = false\n[channels.slack]\nenabled = false\n";

#[tokio::main]
async fn main() {
    // Build (or check) the gateway before anything is timed.
    gateway::binary();
    let llm = FakeLlm::start().await;
    llm.set_recording(false);
    if std::env::var("BENCH_ONLY").as_deref() == Ok("scheduler") {
        let (gw, _) = start_gateway(&llm, NO_CHANNELS, &[]).await;
        tokio::time::sleep(Duration::from_secs(1)).await;
        let idle = rss_mb(gw.child.id());
        drop(gw);
        scheduler::scheduler(&llm, idle).await;
        return;
    }
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(2048)
        .build()
        .unwrap();

    // 1. Start-up and idle memory, no channels.
    let mut readies = Vec::new();
    for _ in 0..5 {
        let (gw, ready) = start_gateway(&llm, NO_CHANNELS, &[]).await;
        readies.push(ready);
        drop(gw);
    }
    readies.sort();
    let (gw, _) = start_gateway(&llm, NO_CHANNELS, &[]).await;
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
    // 4. Memory per 10 000 chats, twice over (20 000 distinct chats in all): the second
    // round shows whether memory grows with the number of chats ever seen. BENCH_CHATS
    // changes the 10 000 (100 shows the cost of the first burst alone).
    let chats = env_number("BENCH_CHATS").unwrap_or(10_000) as usize;
    for round in 0..2 {
        let label = format!("RSS after {} chats:", (round + 1) * chats);
        let mut tasks = Vec::new();
        for c in 0..chats {
            let (http, base) = (http.clone(), gw.base.clone());
            tasks.push(tokio::spawn(async move {
                one(&http, &base, &format!("many{round}-{c}"), "hi").await;
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
        // The gateway gives freed heap back once it has been idle for a second.
        tokio::time::sleep(Duration::from_secs(3)).await;
        let settled = rss_mb(gw.child.id());
        println!(
            "{label:<26}{after:.1} MB right after, {settled:.1} MB 3 s later (idle was {idle:.1} MB)"
        );
    }
    // The clients' connections close; the gateway trims again 5 s after it went quiet.
    drop(http);
    tokio::time::sleep(Duration::from_secs(3)).await;
    println!("RSS once clients left:    {:.1} MB", rss_mb(gw.child.id()));
    // Settled: the LLM client's idle connections have closed (within 60 s) and the gateway
    // has trimmed its heap the last time (100 s after it went quiet). BENCH_SETTLE=0 skips.
    let settle = env_number("BENCH_SETTLE").unwrap_or(105);
    if settle > 0 {
        tokio::time::sleep(Duration::from_secs(settle)).await;
        println!(
            "RSS {settle} s later:          {:.1} MB (idle was {idle:.1} MB)",
            rss_mb(gw.child.id())
        );
    }
    // Keep the gateway up for inspection (gdb, pmap…): BENCH_HOLD=<seconds>.
    if let Some(secs) = env_number("BENCH_HOLD") {
        println!("holding gateway pid {} for {secs} s", gw.child.id());
        tokio::time::sleep(Duration::from_secs(secs)).await;
    }
    // What the chats' data costs by itself: a new gateway on the same store, idle. The
    // difference to the figure above is what the bursts left behind.
    let (gw, _) = start_gateway_in(gw.stop(), &llm, NO_CHANNELS, &[]).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    println!(
        "restarted on that data:   {:.1} MB idle",
        rss_mb(gw.child.id())
    );
    drop(gw);
    if only_memory {
        return;
    }
    let http = reqwest::Client::new();
    channels::channels(&llm, &http, idle).await;
    scheduler::scheduler(&llm, idle).await;
}

/// 1 000 requests at 100 per second from 100 chats; prints the round trip's p50/p99.
async fn paced(http: &reqwest::Client, base: &str, skip: bool, label: &str) {
    if skip {
        return;
    }
    let window = Window::open(http, base).await;
    let lat = at_rate(1000, Duration::from_millis(10), |i| {
        let (http, base) = (http.clone(), base.to_string());
        async move { one(&http, &base, &format!("paced{}", i % 100), "how are you?").await }
    })
    .await;
    let how = format!("({label}; HTTP round trip incl. durable writes)");
    window.close("overhead at 100 msg/s:", &lat, &how).await;
}

/// A number from the environment (`BENCH_CHATS`, `BENCH_SETTLE`, `BENCH_HOLD`).
fn env_number(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|s| s.parse().ok())
}
