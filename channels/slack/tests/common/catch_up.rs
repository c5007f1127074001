//! Helpers of the catch-up tests: ids, the history calls made, and a connection gap.

use std::time::Duration;

use serde_json::{Map, Value};
use switchboard_channel::InboundMessage;
use switchboard_fakes::slack::FakeSlack;

use super::Running;

pub fn id(channel: &str, ts: &str) -> String {
    format!("slack:msg:{channel}:{ts}")
}

pub fn ids(msgs: &[InboundMessage]) -> Vec<String> {
    msgs.iter().map(|m| m.id.clone()).collect()
}

/// The ids published for `channel`, in publish order.
pub fn ids_in(msgs: &[InboundMessage], channel: &str) -> Vec<String> {
    let prefix = format!("slack:msg:{channel}:");
    ids(msgs)
        .into_iter()
        .filter(|i| i.starts_with(&prefix))
        .collect()
}

pub fn param<'a>(p: &'a Map<String, Value>, k: &str) -> &'a str {
    p.get(k).and_then(Value::as_str).unwrap_or("")
}

/// `(channel, oldest, inclusive, limit)` of each `conversations.history` call, sorted.
pub fn history_reads(fake: &FakeSlack) -> Vec<(String, String, String, String)> {
    let mut reads: Vec<_> = fake
        .calls_of("conversations.history")
        .iter()
        .map(|p| {
            let get = |k| param(p, k).to_string();
            (
                get("channel"),
                get("oldest"),
                get("inclusive"),
                get("limit"),
            )
        })
        .collect();
    reads.sort();
    reads
}

/// Push `event` live and wait for its ack.
pub async fn live(fake: &FakeSlack, event: Value) {
    let p = fake.push_event(event).await;
    fake.wait_for_ack(&p.envelope_id).await;
}

/// Push `event` live while its conversation is being caught up: it is held (no ack), and
/// Slack sends it again until it is taken in, after the catch-up.
pub async fn live_held(fake: &FakeSlack, event: Value) {
    let p = fake.push_event(event).await;
    for _ in 0..40 {
        if fake
            .wait_for_ack_within(&p.envelope_id, Duration::from_millis(250))
            .await
        {
            return;
        }
        fake.redeliver_unacked().await;
    }
    panic!("{} never acknowledged", p.envelope_id);
}

/// Lose every socket and keep them down (the network is out) until [`back`].
pub async fn all_sockets_down(fake: &FakeSlack, run: &Running) {
    fake.refuse_sockets(true);
    fake.drop_sockets();
    fake.wait_for_refused_sockets(1).await;
    run.sink
        .wait("the channel reported down", |s| {
            s.connected_log().last() == Some(&false)
        })
        .await;
}

/// Let sockets in again and wait until `n` connections were made in all.
pub async fn back(fake: &FakeSlack, n: usize) {
    fake.refuse_sockets(false);
    fake.wait_for_connections(n).await;
}
