//! Several Socket Mode connections at once (`socket_connections`): both open, and still open
//! after events came over the newest; an event Slack sends twice goes to the gateway twice
//! with the same id (the gateway drops the second), both times acknowledged; losing one of
//! them leaves the channel up (`/readyz`), losing both does not. (Memory with the sockets
//! open is measured by the benchmark, not here.)

mod common;

use common::{socket_config, start};
use switchboard_fakes::slack::{FakeSlack, events};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_sockets_open_and_a_redelivered_event_keeps_its_id() {
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
    // Published twice under one id: the sink, like the gateway, keeps one.
    assert_eq!(
        run.sink.attempts.load(std::sync::atomic::Ordering::SeqCst),
        2
    );
    let got = run.sink.published();
    assert_eq!(got.len(), 1, "{got:?}");
    assert!(got[0].id.starts_with("slack:msg:"), "{}", got[0].id);
    assert_eq!(got[0].text, "over two sockets");
    assert_eq!(fake.open_sockets(), 2, "a socket closed");
    run.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn losing_one_of_two_sockets_keeps_the_channel_up() {
    let fake = FakeSlack::start().await;
    let mut cfg = socket_config(&fake);
    cfg.socket_connections = 2;
    let run = start(cfg);
    fake.wait_for_connections(2).await;
    // Each `hello` is reported: both sockets are open for the adapter too.
    run.sink
        .wait("two hellos", |s| s.connected_log() == [true, true])
        .await;

    // One socket drops; the other keeps carrying events while the first is reopened.
    fake.drop_oldest_socket();
    let pushed = fake
        .push_event(events::dm("D1", "U1", "still reachable", "1.0"))
        .await;
    fake.wait_for_ack(&pushed.envelope_id).await;
    fake.wait_for_connections(3).await;
    assert_eq!(run.sink.published().len(), 1);
    assert!(
        !run.sink.connected_log().contains(&false),
        "reported down with a socket open: {:?}",
        run.sink.connected.lock().unwrap()
    );

    // Both lost: down until one is back.
    fake.refuse_sockets(true);
    fake.drop_sockets();
    run.sink.wait_for_connected(false).await;
    fake.refuse_sockets(false);
    run.sink.wait_for_connected(true).await;
    run.stop().await.unwrap();
}
