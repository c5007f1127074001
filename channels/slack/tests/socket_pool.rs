//! Several Socket Mode connections at once (`socket_connections`): all of them open and stay
//! open while events flow, and an event Slack sends twice is published once, both times
//! acknowledged. (Memory with the sockets open is measured by the benchmark, not here.)

mod common;

use common::{socket_config, start};
use switchboard_fakes::slack::{FakeSlack, events};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_sockets_stay_open_and_a_redelivered_event_is_published_once() {
    let fake = FakeSlack::start().await;
    let mut cfg = socket_config(&fake);
    cfg.socket_connections = 2;
    let run = start(cfg);
    fake.wait_for_connections(2).await;
    run.sink.wait_for_connected(true).await;
    assert_eq!(fake.open_sockets(), 2);

    // Sent on the newest socket, then again with the same event id (as Slack retries).
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
