//! Idle memory: RSS of this test process before and after the adapter connects over Socket
//! Mode (two sockets) and sits idle. Printed for the benchmark notes; asserted loosely.

mod common;

use common::{socket_config, start};
use switchboard_fakes::slack::FakeSlack;

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_adapter_adds_little_memory() {
    let fake = FakeSlack::start().await;
    // Warm the fake and the allocator up with a first adapter, then measure a second one.
    let warm = start(socket_config(&fake));
    fake.wait_for_connections(1).await;
    warm.stop().await.unwrap();
    let before = rss_kib();
    let mut cfg = socket_config(&fake);
    cfg.socket_connections = 2;
    let run = start(cfg);
    fake.wait_for_connections(3).await;
    run.sink.wait_for_connected(true).await;
    let after = rss_kib();
    let added = after.saturating_sub(before);
    println!("slack adapter idle: RSS {before} KiB -> {after} KiB (+{added} KiB)");
    assert!(added < 20 * 1024, "+{added} KiB");
    run.stop().await.unwrap();
}
