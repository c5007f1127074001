//! Attached files against the fake Discord and its CDN: intake only leaves them on the
//! message; fetched before the turn, they come down into the inbox without the bot token,
//! within the size limit, each under its own name; a file that does not come is noted.

mod common;

use std::path::Path;

use switchboard_channel::{Channel, InboundMessage};
use switchboard_fakes::discord::{Author, IncomingMessage};

const CHAN: u64 = 111;

fn alice() -> Author {
    Author::user(42, "alice")
}

/// The one message published with `files`, its files fetched as before its turn.
async fn fetched(h: &common::Harness, files: Vec<serde_json::Value>) -> InboundMessage {
    let mut m = IncomingMessage::dm(CHAN, alice(), "what is in these?");
    m.attachments = files;
    h.fake.push_message_create(m);
    let mut msgs = h.rec.wait_for_msgs(1).await;
    assert!(msgs[0].attachments.is_empty(), "intake downloads nothing");
    assert!(h.fake.file_gets().is_empty(), "intake downloads nothing");
    h.channel.fetch_files(&mut msgs[0]).await;
    msgs.remove(0)
}

/// Names of the files in `dir`, sorted.
fn listing(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attached_files_come_down_into_the_inbox_without_the_token() {
    let inbox = tempfile::tempdir().unwrap();
    let dir = inbox.path().to_path_buf();
    let h = common::start_with(|c| c.inbox_dir = Some(dir)).await;
    let cat = b"PNG cat".to_vec();
    let notes = b"%PDF-1.7 notes".to_vec();
    let other_cat = b"PNG another cat".to_vec();
    let files = vec![
        h.fake.add_attachment(9, "cat.png", &cat, "image/png"),
        h.fake
            .add_attachment(10, "my notes (v2).pdf", &notes, "application/pdf"),
        // Same name as the first: kept apart.
        h.fake
            .add_attachment(11, "cat.png", &other_cat, "image/png"),
    ];
    let m = fetched(&h, files).await;
    assert_eq!(m.text, "what is in these?");
    assert!(!m.metadata.contains_key("pending_files"), "fetched once");
    assert_eq!(m.attachments.len(), 3, "{m:?}");
    for (a, bytes) in m.attachments.iter().zip([&cat, &notes, &other_cat]) {
        let path = Path::new(&a.location);
        assert_eq!(path.parent(), Some(inbox.path()), "{path:?}");
        assert_eq!(&std::fs::read(path).unwrap(), bytes);
        assert_eq!(a.size, bytes.len() as u64);
    }
    assert_eq!(m.attachments[1].name.as_deref(), Some("my notes (v2).pdf"));
    assert!(
        m.attachments[1].location.ends_with("-1-my_notes__v2_.pdf"),
        "{}",
        m.attachments[1].location
    );
    assert_eq!(
        listing(inbox.path()).len(),
        3,
        "{:?}",
        listing(inbox.path())
    );
    let gets = h.fake.file_gets();
    assert_eq!(gets.len(), 3);
    assert!(gets.iter().all(|g| g.authorization.is_none()), "{gets:?}");
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_too_large_or_gone_is_noted_with_its_url() {
    let inbox = tempfile::tempdir().unwrap();
    let dir = inbox.path().to_path_buf();
    let h = common::start_with(|c| {
        c.inbox_dir = Some(dir);
        c.max_file_bytes = 10;
    })
    .await;
    let big = h
        .fake
        .add_attachment(12, "big.bin", &[7u8; 64], "application/octet-stream");
    let mut gone = h.fake.add_attachment(13, "gone.txt", b"x", "text/plain");
    gone["url"] = format!("{}/attachments/1/99/gone.txt", h.fake.base_url).into();
    let m = fetched(&h, vec![big, gone]).await;
    assert!(m.attachments.is_empty(), "{m:?}");
    assert!(
        m.text.starts_with("what is in these?\n\n[file big.bin (64 bytes) not downloaded: larger than the 10 bytes limit; http"),
        "{}",
        m.text
    );
    assert!(
        m.text.contains(
            "[file gone.txt (1 bytes) not downloaded: download failed: http status 404; http"
        ),
        "{}",
        m.text
    );
    assert!(!m.text.contains(common::TOKEN));
    assert_eq!(
        h.fake.file_gets().len(),
        1,
        "the large one is not asked for"
    );
    assert!(
        listing(inbox.path()).is_empty(),
        "{:?}",
        listing(inbox.path())
    );
    h.stop().await;
}
