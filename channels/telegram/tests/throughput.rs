//! Throughput through the fake Bot API (pacing off): intake of many chats' messages and
//! concurrent sends. Figures are printed; the floors are loose so a busy machine passes.

mod common;

use std::sync::Arc;
use std::time::Instant;

use common::Harness;
use switchboard_channel::{Channel, OutboundMessage};
use switchboard_fakes::telegram::TgUser;

const N: usize = 3000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thousands_of_messages_per_second_in_and_out() {
    let h = Harness::start().await;
    let users: Vec<TgUser> = (0..1000).map(|i| TgUser::new(10_000 + i, "u")).collect();
    let t0 = Instant::now();
    let mut last = 0;
    for i in 0..N {
        last = h
            .fake
            .push_update(h.fake.dm_text(&users[i % users.len()], "ping"));
    }
    let published = h.sink.wait_published(N).await;
    let intake = N as f64 / t0.elapsed().as_secs_f64();
    assert_eq!(published.len(), N);
    assert!(h.fake.wait_for_offset_confirmed(last, common::WAIT).await);

    let t1 = Instant::now();
    let channel: Arc<_> = h.channel.clone();
    let tasks: Vec<_> = published
        .iter()
        .map(|m| {
            let channel = channel.clone();
            let reply = OutboundMessage::new(m.key.clone(), "pong");
            tokio::spawn(async move { channel.send(&reply).await })
        })
        .collect();
    for t in tasks {
        t.await.expect("task").expect("sent");
    }
    let out = N as f64 / t1.elapsed().as_secs_f64();
    assert_eq!(h.fake.sent().len(), N);
    println!("telegram via fake: intake {intake:.0} msg/s, send {out:.0} msg/s");
    assert!(
        intake > 100.0 && out > 100.0,
        "intake {intake:.0}/s, send {out:.0}/s"
    );
}

#[tokio::test]
async fn first_poll_follows_start_quickly() {
    let t0 = Instant::now();
    let h = Harness::start().await;
    h.fake
        .wait_for_requests("getUpdates", 1, common::WAIT)
        .await
        .expect("polling");
    let took = t0.elapsed();
    println!("telegram via fake: start-up to first getUpdates {took:?}");
    assert!(took.as_millis() < 1000, "{took:?}");
}
