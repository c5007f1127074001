//! Where replies go when the key is not a channel the bot may post in: a user id (what people
//! copy for `allow_from`) is answered in that user's DM; an id that is nothing is refused for
//! good; a channel where the bot lacks a permission is explained in the log, once.

mod common;

use std::io::Write;
use std::sync::{Arc, Mutex};

use switchboard_channel::{Channel, ChatKey, OutboundMessage, SendError};
use switchboard_discord::DiscordChannel;
use switchboard_fakes::discord::{Author, Denial, FakeChannel, FakeDiscord, Refusal};

const ALICE: u64 = 420_000_000_000_000_042;

fn key(id: u64) -> ChatKey {
    ChatKey::new("discord", id.to_string())
}

/// A channel pointed at the fake; `send` and `typing` need no gateway connection.
async fn setup() -> (FakeDiscord, DiscordChannel) {
    let fake = common::fake().await;
    let ch = DiscordChannel::new(common::config(&fake, common::TOKEN)).expect("channel");
    (fake, ch)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_id_as_the_key_is_answered_in_their_dm() {
    let (fake, ch) = setup().await;
    fake.add_user(Author::user(ALICE, "alice"));
    let receipt = ch
        .send(&OutboundMessage::new(key(ALICE), "your reminder"))
        .await
        .expect("delivered in the DM");
    let dm = fake.dm_channel_of(ALICE).expect("a DM channel was opened");
    let posts = fake.posts();
    assert_eq!(posts.len(), 1, "{posts:?}");
    assert_eq!(
        (posts[0].channel_id, posts[0].content()),
        (dm, "your reminder")
    );
    assert_eq!(receipt.message_ids, vec![posts[0].message_id.to_string()]);
    let unknown = Refusal {
        channel_id: ALICE,
        status: 404,
        code: 10003,
    };
    assert_eq!(fake.refused_posts(), vec![unknown.clone()]);
    assert_eq!(fake.dm_opens(), vec![ALICE]);

    // Remembered: the next reply and the typing indicator go straight to the DM.
    ch.send(&OutboundMessage::new(key(ALICE), "and another"))
        .await
        .expect("delivered");
    ch.typing(&key(ALICE)).await.expect("typing");
    let posts = fake.posts();
    assert_eq!(posts.len(), 2);
    assert_eq!(posts[1].channel_id, dm);
    assert_eq!(fake.refused_posts(), vec![unknown]);
    assert_eq!(fake.dm_opens(), vec![ALICE]);
    assert_eq!(fake.typing_calls(), vec![dm]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_id_that_is_neither_a_channel_nor_a_user_is_refused_for_good() {
    let (fake, ch) = setup().await;
    fake.add_missing(77);
    let r = ch.send(&OutboundMessage::new(key(77), "hello?")).await;
    match r {
        Err(SendError::Permanent(e)) => {
            assert!(
                e.contains("Unknown Channel") && e.contains("no user"),
                "{e}"
            )
        }
        other => panic!("expected a permanent refusal, got {other:?}"),
    }
    assert_eq!(fake.dm_opens(), vec![77]);
    assert!(fake.posts().is_empty());
}

/// What the adapter logs, as text.
#[derive(Clone, Default)]
struct Logs(Arc<Mutex<Vec<u8>>>);

impl Logs {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }

    /// The lines that explain a refused post.
    fn explanations(&self) -> Vec<String> {
        self.text()
            .lines()
            .filter(|l| l.contains("ERROR") && l.contains("Discord refused a post"))
            .map(str::to_string)
            .collect()
    }
}

impl Write for Logs {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Logs {
    type Writer = Logs;

    fn make_writer(&'a self) -> Logs {
        self.clone()
    }
}

// One thread: the adapter's log lines are all written where the subscriber is set.
#[tokio::test(flavor = "current_thread")]
async fn a_post_refused_for_a_permission_says_once_per_channel_what_to_grant() {
    let logs = Logs::default();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(logs.clone())
        .with_max_level(tracing::Level::INFO)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);
    let (fake, ch) = setup().await;
    fake.deny(111, Denial::MissingPermissions);
    fake.deny(112, Denial::MissingAccess);
    fake.add_channel(FakeChannel::thread(113, 111, "triage"));
    fake.deny(113, Denial::MissingPermissions);

    let refused = |r: Result<_, SendError>| matches!(r, Err(SendError::Permanent(_)));
    for _ in 0..3 {
        assert!(refused(
            ch.send(&OutboundMessage::new(key(111), "hi")).await
        ));
    }
    assert!(refused(
        ch.send(&OutboundMessage::new(key(112), "hi")).await
    ));
    let mut reply = OutboundMessage::new(key(113), "hi");
    reply.reply_to = Some("5555".into());
    assert!(refused(ch.send(&reply).await));
    let codes: Vec<(u64, u64)> = fake
        .refused_posts()
        .iter()
        .map(|r| (r.channel_id, r.code))
        .collect();
    assert_eq!(
        codes,
        [
            (111, 50013),
            (111, 50013),
            (111, 50013),
            (112, 50001),
            (113, 50013)
        ]
    );

    let told = logs.explanations();
    assert_eq!(told.len(), 3, "once per channel: {told:#?}");
    assert!(
        told[0].contains("channel #channel-111 (111)") && told[0].contains("\"Send Messages\""),
        "{}",
        told[0]
    );
    assert!(
        told[1].contains("channel 112") && told[1].contains("\"View Channel\""),
        "{}",
        told[1]
    );
    assert!(
        told[2].contains("thread \"triage\" (113)")
            && told[2].contains("\"Send Messages in Threads\"")
            && told[2].contains("\"Read Message History\""),
        "{}",
        told[2]
    );

    // Granted, then taken away again: said again.
    fake.allow(111);
    ch.send(&OutboundMessage::new(key(111), "hi"))
        .await
        .expect("posted");
    fake.deny(111, Denial::MissingPermissions);
    assert!(refused(
        ch.send(&OutboundMessage::new(key(111), "hi")).await
    ));
    assert_eq!(logs.explanations().len(), 4);
    assert!(!logs.text().contains(common::TOKEN), "the token was logged");
}
