//! After crashes, which resumed message a crash is counted against: once counted, a
//! message's turns run one at a time, so the one that keeps killing the gateway is given up
//! and the messages that were merely running beside it are answered.

use std::sync::Arc;
use std::sync::atomic::Ordering::SeqCst;
use std::time::Duration;

mod common;

use common::bus::{DiesOnP, bus_on, leave_in_inbox, stop_bus};
use common::message;
use switchboard::bus::MAX_RESUMES;
use switchboard::store::{SledStore, Store, Tree};
use switchboard_channel::ChatKey;

const WAIT: Duration = Duration::from_secs(20);

#[tokio::test]
async fn messages_running_beside_the_one_that_kills_the_gateway_are_answered() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = Arc::new(SledStore::open(dir.path()).unwrap());
    // A crash already found all five running (each counted once): `p` is what kills the
    // gateway, the four others were slow turns beside it.
    let mut left = vec![message("p-1", &ChatKey::new("test", "p"), "crash me")];
    for i in 0..4 {
        let key = ChatKey::new("test", format!("slow{i}"));
        left.push(message(&format!("s-{i}"), &key, &format!("slow {i}")));
    }
    for m in &mut left {
        m.metadata.insert("resumes".into(), 1.into());
        leave_in_inbox(&*store, m);
    }
    let handler = Arc::new(DiesOnP::default());
    handler.hold_others.store(true, SeqCst);
    // p runs (alone among them) at each start until it is given up: counts 2..=MAX_RESUMES.
    let runs = MAX_RESUMES as usize - 1;
    for run in 0..runs {
        let (bus, shutdown, tracker) = bus_on(&store, 8, handler.clone());
        bus.replay().await.unwrap();
        handler
            .wait(WAIT, "p's turn", |h| h.p_starts.load(SeqCst) == run + 1)
            .await;
        assert_eq!(
            handler.others_running.load(SeqCst),
            0,
            "a counted message ran beside p in run {run}"
        );
        // The gateway dies: no clean stop is noted.
        stop_bus(shutdown, tracker).await;
    }
    // The next start gives p up; the others run and, quick this time, are answered.
    handler.hold_others.store(false, SeqCst);
    let (bus, shutdown, tracker) = bus_on(&store, 8, handler.clone());
    bus.replay().await.unwrap();
    handler
        .wait(WAIT, "the other four answered", |h| {
            h.answered.lock().unwrap().len() == 4
        })
        .await;
    assert_eq!(handler.p_starts.load(SeqCst), runs);
    stop_bus(shutdown, tracker).await;
    let told: Vec<String> = store
        .scan(Tree::Outbox, &[])
        .unwrap()
        .iter()
        .map(|(_, v)| String::from_utf8_lossy(v).into_owned())
        .collect();
    assert_eq!(told.len(), 1, "only p's sender is told: {told:?}");
    assert!(
        told[0].contains("could not handle") && told[0].contains("\"test:p\""),
        "{told:?}"
    );
    assert!(store.scan(Tree::Inbox, &[]).unwrap().is_empty());
}
