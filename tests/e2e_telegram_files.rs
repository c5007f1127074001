//! Files end to end, the real binary against the fake Bot API: intake only leaves a
//! message's files on it and the chat's worker has them fetched before its turn, so a slow
//! download holds up no other chat, the files of messages joined into one turn come down
//! together, and a stop during a download loses nothing.

mod common;

use std::time::Duration;

use common::telegram::{Tg, WAIT, spawn};
use switchboard_fakes::llm::Reply;
use switchboard_fakes::telegram::TgUser;

const ANN: i64 = 5001;
const BOB: i64 = 5002;

/// `user` sends a 200 KB document that takes 20 s to come down; once its download began:
/// the update's id.
async fn slow_document(t: &Tg, user: &TgUser) -> i64 {
    t.tg.set_file_rate(10_000);
    let file = t.tg.add_file("big.pdf", vec![5u8; 200_000]);
    let doc = t.tg.document(
        ANN,
        user,
        &file,
        "big.pdf",
        "application/pdf",
        Some("read this"),
    );
    let uid = t.tg.push_update(doc);
    t.tg.wait_for_requests("getFile", 1, WAIT)
        .await
        .expect("the download began");
    uid
}

/// The paths of the documents a turn's text names (`[attachment: Document <path>]`).
fn documents(text: &str) -> Vec<&str> {
    text.lines()
        .filter_map(|l| l.strip_prefix("[attachment: Document "))
        .map(|l| l.trim_end_matches(']'))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_download_holds_up_no_other_chat_and_joined_files_come_down_together() {
    let t = Tg::start("dm_policy = \"open\"").await;
    let (ann, bob) = (TgUser::new(ANN, "ann"), TgUser::new(BOB, "bob"));
    // Ann's first turn takes 3 s; her two files arrive meanwhile and wait, joined, for the
    // next turn.
    t.llm
        .push(Reply::text("first answer").with_delay(Duration::from_secs(3)));
    t.tg.push_update(t.tg.dm_text(&ann, "hello"));
    t.llm.wait_for_requests(1, WAIT).await.expect("first turn");
    // 10 s each on this link.
    t.tg.set_file_rate(10_000);
    let body = |b: u8| vec![b; 100_000];
    for (name, b) in [("a.pdf", 1u8), ("b.pdf", 2)] {
        let file = t.tg.add_file(name, body(b));
        let doc =
            t.tg.document(ANN, &ann, &file, name, "application/pdf", Some(name));
        t.tg.push_update(doc);
    }
    t.tg.wait_for_requests("getFile", 1, WAIT)
        .await
        .expect("the first download began");
    t.tg.wait_for_requests("getFile", 2, Duration::from_secs(5))
        .await
        .expect("the second download began while the first came down");
    // Bob is answered while Ann's files are still coming down.
    t.tg.push_update(t.tg.dm_text(&bob, "quick question"));
    let sent = t
        .sent_until("bob's answer", |s| s.iter().any(|m| m.chat_id == BOB))
        .await;
    let ann_sent = sent.iter().filter(|m| m.chat_id == ANN).count();
    assert_eq!(
        ann_sent, 1,
        "only ann's first answer before bob's: {sent:?}"
    );
    // Ann's second turn has both files, in order.
    t.sent_until("ann's second answer", |s| {
        s.iter().filter(|m| m.chat_id == ANN).count() == 2
    })
    .await;
    let reqs = t.llm.requests();
    assert_eq!(reqs.len(), 3, "hello, bob's, one turn for both files");
    let text = reqs[2].last_user_text();
    let (a, b) = (text.find("a.pdf"), text.find("b.pdf"));
    assert!(a.is_some() && a < b, "{text}");
    let inbox = t.env.dir.path().join("workspace").join("inbox");
    let paths = documents(&text);
    assert_eq!(paths.len(), 2, "{text}");
    for (path, b) in paths.iter().zip([1u8, 2]) {
        assert!(std::path::Path::new(path).starts_with(&inbox), "{path}");
        assert_eq!(std::fs::read(path).expect("downloaded"), body(b));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_during_a_download_is_quick_and_the_file_comes_down_after_the_restart() {
    let mut t = Tg::start("dm_policy = \"open\"").await;
    let ann = TgUser::new(ANN, "ann");
    let uid = slow_document(&t, &ann).await;
    assert!(
        t.tg.wait_for_offset_confirmed(uid, WAIT).await,
        "confirmed before its file came down"
    );
    t.gw.sigterm();
    let (status, took) = t.gw.wait_exit(WAIT);
    assert!(status.success());
    assert!(took < Duration::from_secs(5), "{took:?}");
    assert_eq!(t.llm.request_count(), 0);
    assert!(t.tg.sent().is_empty());

    // The message waited in the inbox; its file comes down again, whole.
    t.tg.clear_file_rate();
    t.gw = spawn(&t.env, &t.tg);
    t.sent_until("the answer after the restart", |s| !s.is_empty())
        .await;
    let reqs = t.llm.wait_for_requests(1, WAIT).await.expect("the turn");
    assert_eq!(reqs.len(), 1);
    let text = reqs[0].last_user_text();
    assert!(text.starts_with("read this"), "{text}");
    let path = *documents(&text)
        .first()
        .unwrap_or_else(|| panic!("no attachment: {text}"));
    assert_eq!(std::fs::read(path).expect("downloaded"), vec![5u8; 200_000]);
    let inbox = t.env.dir.path().join("workspace").join("inbox");
    let names: Vec<String> = std::fs::read_dir(&inbox)
        .expect("inbox")
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names.len(), 1, "no part file left behind: {names:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_during_a_download_stops_that_message() {
    let t = Tg::start("dm_policy = \"open\"").await;
    let ann = TgUser::new(ANN, "ann");
    slow_document(&t, &ann).await;
    t.tg.push_update(t.tg.dm_text(&ann, "/stop"));
    let sent = t.wait_sent(1).await;
    assert_eq!(sent[0].text, "Stopped.");
    // The chat is free at once: the next message is answered well before the file could
    // have come down, and the stopped one never reached the model.
    t.tg.push_update(t.tg.dm_text(&ann, "never mind"));
    let sent = t.wait_sent(2).await;
    assert!(sent[1].text.contains("never mind"), "{sent:?}");
    let reqs = t.llm.requests();
    assert_eq!(reqs.len(), 1, "{reqs:?}");
    // Dropped, not kept in the chat's history either.
    assert!(!reqs[0].body.to_string().contains("read this"), "{reqs:?}");
}
