//! The start-up replay against new messages: nothing new is taken before the last run's
//! unfinished messages are queued, so they run first and once.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use switchboard::bus::{Bus, Interrupted, TurnHandler, TurnInput, TurnOutput};
use switchboard::store::{SledStore, Store, Tree};
use switchboard_channel::{ChatKey, InboundMessage, Published, Sender};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// Records the texts of each turn, in order.
#[derive(Default)]
struct Recorder {
    texts: Mutex<Vec<String>>,
    turned: tokio::sync::Notify,
}

#[async_trait]
impl TurnHandler for Recorder {
    async fn handle(&self, turn: TurnInput) -> Result<TurnOutput, Interrupted> {
        let mut texts = self.texts.lock().unwrap();
        texts.extend(turn.messages.iter().map(|m| m.text.clone()));
        self.turned.notify_one();
        Ok(TurnOutput::default())
    }
}

fn message(id: &str, text: &str) -> InboundMessage {
    let mut m = InboundMessage::text(
        id,
        ChatKey::new("test", "kitchen"),
        Sender {
            id: "u".into(),
            username: None,
            display_name: "U".into(),
            is_owner: false,
        },
        text,
    );
    m.metadata
        .insert("join".into(), serde_json::Value::Bool(false));
    m
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn new_messages_wait_for_the_replay_of_unfinished_ones() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = Arc::new(SledStore::open(dir.path()).unwrap());
    // The last run stored this message and stopped before its turn ended.
    let old = message("old-1", "left unfinished");
    store
        .put(
            Tree::Inbox,
            &store.next_id().unwrap().to_be_bytes(),
            &serde_json::to_vec(&old).unwrap(),
        )
        .unwrap();
    let (shutdown, tracker) = (CancellationToken::new(), TaskTracker::new());
    let bus = Bus::new(
        store.clone(),
        Default::default(),
        4,
        Default::default(),
        shutdown.clone(),
        tracker.clone(),
    );
    let recorder = Arc::new(Recorder::default());
    bus.set_handler(recorder.clone());
    // As the gateway starts: intake held, then channels (a new message), then the replay.
    bus.hold_intake_until_replayed();
    let mut new = tokio::spawn({
        let bus = bus.clone();
        async move { bus.publish(message("new-1", "just arrived")).await }
    });
    let early = tokio::time::timeout(Duration::from_millis(300), &mut new).await;
    assert!(early.is_err(), "taken before the replay: {early:?}");
    assert_eq!(bus.replay().await.unwrap(), 1);
    assert_eq!(new.await.unwrap().unwrap(), Published::Accepted);
    while recorder.texts.lock().unwrap().len() < 2 {
        tokio::time::timeout(Duration::from_secs(10), recorder.turned.notified())
            .await
            .expect("the turns ran");
    }
    assert_eq!(
        *recorder.texts.lock().unwrap(),
        ["left unfinished", "just arrived"]
    );
    shutdown.cancel();
    tracker.close();
    tracker.wait().await;
}
