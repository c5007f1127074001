//! Shared files against the fake Slack: intake (which Slack's ack waits for) only leaves
//! them on the message; the gateway has them downloaded with the bot token into the inbox
//! before the turn, within the size limit and the time limit; the token never follows a
//! redirect to another host; strangers' files are not fetched.

mod common;

use std::path::Path;
use std::time::Duration;

use common::{events_config, socket_config, start};
use switchboard_channel::{Channel, InboundMessage};
use switchboard_fakes::slack::{BOT_TOKEN, FakeSlack, events};

const SECRET: &str = "8f742231b10e8888abcd99yyyzzz85a5";

fn file_share(user: &str, files: &[(&str, &str, u64, &str)]) -> serde_json::Value {
    let ev = events::with_files(events::dm("D1", user, "what is in this?", "9.1"), files);
    events::with_subtype(ev, "file_share")
}

/// The one message published, its files fetched as the gateway does before its turn.
async fn fetched(run: &common::Running) -> InboundMessage {
    let mut m = run.sink.published().pop().expect("published");
    run.channel.fetch_files(&mut m).await;
    m
}

/// Deliver `ev` through the Events API endpoint, signed; the HTTP status.
async fn deliver(run: &common::Running, id: &str, ev: serde_json::Value) -> u16 {
    let body = events::event_callback_body(id, ev);
    let hdrs = events::signed_headers(SECRET, &events::now_timestamp(), &body);
    let (status, _, _) = run
        .channel
        .handle_events_request(&hdrs, body.as_bytes())
        .await;
    status
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
async fn shared_files_are_downloaded_with_the_bot_token_before_the_turn() {
    let fake = FakeSlack::start().await;
    let inbox = tempfile::tempdir().unwrap();
    let run = start(socket_config(&fake).with_inbox_dir(inbox.path()));
    fake.wait_for_connections(1).await;
    let url = fake.add_file("T0-F1/report.pdf", "application/pdf", b"%PDF-1.7 quarterly");

    let p = fake
        .push_event(file_share(
            "U1",
            &[("report.pdf", "application/pdf", 18, &url)],
        ))
        .await;
    fake.wait_for_ack(&p.envelope_id).await;
    assert_eq!(run.sink.published().len(), 1);
    assert!(fake.file_gets().is_empty(), "intake downloads nothing");
    let m = &fetched(&run).await;
    assert_eq!(m.text, "what is in this?");
    assert!(!m.metadata.contains_key("pending_files"), "fetched once");
    assert_eq!(m.attachments.len(), 1, "{:?}", m.attachments);
    let a = &m.attachments[0];
    assert_eq!(a.name.as_deref(), Some("report.pdf"));
    assert_eq!(a.size, 18);
    let path = Path::new(&a.location);
    assert_eq!(path.parent(), Some(inbox.path()));
    assert_eq!(std::fs::read(path).unwrap(), b"%PDF-1.7 quarterly");
    assert_eq!(listing(inbox.path()).len(), 1, "no .part file left");
    let gets = fake.file_gets();
    assert_eq!(gets.len(), 1);
    assert_eq!(gets[0].path, "T0-F1/report.pdf");
    assert_eq!(
        gets[0].authorization.as_deref(),
        Some(format!("Bearer {BOT_TOKEN}").as_str())
    );
    run.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_file_never_delays_the_ack_and_past_its_time_limit_is_noted() {
    let fake = FakeSlack::start().await;
    let inbox = tempfile::tempdir().unwrap();
    let mut cfg = socket_config(&fake).with_inbox_dir(inbox.path());
    cfg.file_download_timeout = Duration::from_millis(300);
    let run = start(cfg);
    fake.wait_for_connections(1).await;
    let slow = fake.add_slow_file("T0-F2/big.mov", "video/mp4", b"x", Duration::from_secs(60));

    let p = fake
        .push_event(file_share("U1", &[("big.mov", "video/mp4", 1, &slow)]))
        .await;
    // Slack redelivers after 3 s without an ack.
    assert!(
        fake.wait_for_ack_within(&p.envelope_id, Duration::from_secs(3))
            .await,
        "not acked within Slack's 3 s"
    );
    assert_eq!(run.sink.published()[0].text, "what is in this?");
    let m = &fetched(&run).await;
    assert!(m.attachments.is_empty());
    assert!(
        m.text.starts_with("what is in this?\n\n[file big.mov")
            && m.text.contains("not done in time")
            && m.text.contains(&slow),
        "{}",
        m.text
    );
    assert!(!m.text.contains(BOT_TOKEN));
    assert!(
        listing(inbox.path()).is_empty(),
        "{:?}",
        listing(inbox.path())
    );
    run.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redirect_to_another_host_does_not_carry_the_token() {
    let fake = FakeSlack::start().await;
    let cdn = FakeSlack::start().await;
    let inbox = tempfile::tempdir().unwrap();
    let run = start(events_config(&fake, SECRET).with_inbox_dir(inbox.path()));
    run.sink.wait_for_connected(true).await;
    let signed = cdn.add_public_file("signed/a.png", "image/png", b"PNG");
    let private = cdn.add_file("private/b.png", "image/png", b"PNG");
    let a = fake.add_file_redirect("T0-F3/a.png", &signed);
    let b = fake.add_file_redirect("T0-F4/b.png", &private);

    let ev = file_share(
        "U1",
        &[("a.png", "image/png", 3, &a), ("b.png", "image/png", 3, &b)],
    );
    assert_eq!(deliver(&run, "EvF3", ev).await, 200);
    let m = &fetched(&run).await;
    assert_eq!(m.attachments.len(), 1, "{m:?}");
    assert_eq!(std::fs::read(&m.attachments[0].location).unwrap(), b"PNG");
    // The other host wanted a token it never got: Slack's sign-in page is no file.
    assert!(
        m.text.contains("[file b.png") && m.text.contains("web page"),
        "{}",
        m.text
    );
    assert!(fake.file_gets().iter().all(|g| g.authorization.is_some()));
    let cdn_gets = cdn.file_gets();
    assert_eq!(cdn_gets.len(), 2);
    assert!(
        cdn_gets.iter().all(|g| g.authorization.is_none()),
        "{cdn_gets:?}"
    );
    run.stop().await.unwrap();
}

/// An external file (a shared Google Drive document) names a URL on another host: it is
/// never asked for with the bot token, and the message says why it did not come.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_url_off_slack_is_not_sent_the_token() {
    let fake = FakeSlack::start().await;
    let elsewhere = FakeSlack::start().await;
    let inbox = tempfile::tempdir().unwrap();
    let run = start(events_config(&fake, SECRET).with_inbox_dir(inbox.path()));
    run.sink.wait_for_connected(true).await;
    let url = elsewhere.add_public_file("doc/plan.pdf", "application/pdf", b"PDF");
    let ev = file_share("U1", &[("plan.pdf", "application/pdf", 3, &url)]);
    assert_eq!(deliver(&run, "EvF9", ev).await, 200);
    let m = &fetched(&run).await;
    assert!(m.attachments.is_empty(), "{m:?}");
    assert!(
        m.text.contains("[file plan.pdf") && m.text.contains("not a Slack file URL"),
        "{}",
        m.text
    );
    assert!(elsewhere.file_gets().is_empty(), "nothing was asked of it");
    run.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn too_large_files_and_strangers_files_are_not_kept() {
    let fake = FakeSlack::start().await;
    let inbox = tempfile::tempdir().unwrap();
    let mut cfg = socket_config(&fake).with_inbox_dir(inbox.path());
    cfg.max_file_bytes = 10;
    let run = start(cfg);
    run.sink.allow_only(&["U1"]);
    fake.wait_for_connections(1).await;
    // Socket Mode gives no size: the download itself stops at the limit.
    let big = fake.add_file("T0-F5/big.bin", "application/octet-stream", &[7u8; 64]);

    let p = fake
        .push_event(file_share(
            "U1",
            &[("big.bin", "application/octet-stream", 64, &big)],
        ))
        .await;
    fake.wait_for_ack(&p.envelope_id).await;
    let m = &fetched(&run).await;
    assert!(m.attachments.is_empty());
    assert!(
        m.text.contains("[file big.bin") && m.text.contains("larger than the 10 bytes limit"),
        "{}",
        m.text
    );
    assert!(
        listing(inbox.path()).is_empty(),
        "{:?}",
        listing(inbox.path())
    );

    let gets = fake.file_gets().len();
    let p = fake
        .push_event(file_share(
            "U9",
            &[("big.bin", "application/octet-stream", 64, &big)],
        ))
        .await;
    fake.wait_for_ack(&p.envelope_id).await;
    assert_eq!(run.sink.ignored().len(), 1);
    assert_eq!(
        fake.file_gets().len(),
        gets,
        "a stranger's file was fetched"
    );
    run.stop().await.unwrap();
}
