//! Several Socket Mode connections at once (`socket_connections`): all of them open, and an
//! event Slack sends on any one of them is published once and acknowledged. (Memory with
//! the sockets open is measured by the benchmark, not here.)

mod common;

use common::{socket_config, start};
use switchboard_fakes::slack::{FakeSlack, events};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_sockets_open_and_an_event_on_either_is_published_once() {
    let fake = FakeSlack::start().await;
    let mut cfg = socket_config(&fake);
    cfg.socket_connections = 2;
    let run = start(cfg);
    fake.wait_for_connections(2).await;
    run.sink.wait_for_connected(true).await;
    assert_eq!(fake.open_sockets(), 2);

    // Sent on the newest socket; then Slack sends it again (unacknowledged ones are
    // redelivered), as it may on the other connection.
    let pushed = fake
        .push_event(events::dm("D1", "U1", "over two sockets", "1.0"))
        .await;
    fake.wait_for_ack(&pushed.envelope_id).await;
    let again = fake
        .push_event_with_id(
            &pushed.event_id,
            events::dm("D1", "U1", "over two sockets", "1.0"),
        )
        .await;
    fake.wait_for_ack(&again.envelope_id).await;
    let got = run.sink.published();
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0].id, format!("slack:event:{}", pushed.event_id));
    assert_eq!(got[0].text, "over two sockets");
    assert_eq!(fake.open_sockets(), 2, "a socket closed");
    run.stop().await.unwrap();
}
