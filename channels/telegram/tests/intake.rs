//! Intake against the fake Bot API: mapping of each kind of update, confirmation only after
//! publish, skipped updates, files, and the polling faults (409, stall, wrong token).

mod common;

use std::time::Duration;

use common::{Harness, WAIT};
use serde_json::json;
use switchboard_channel::{AttachmentKind, ChannelError};
use switchboard_fakes::telegram::TgUser;

fn ann() -> TgUser {
    TgUser::new(5001, "ann").named("Ann", Some("Lee"))
}

#[tokio::test]
async fn startup_registers_commands_and_polls_for_messages() {
    let h = Harness::start().await;
    let polls = h
        .fake
        .wait_for_requests("getUpdates", 1, WAIT)
        .await
        .expect("polls");
    assert_eq!(polls[0]["allowed_updates"], json!(["message"]));
    assert_eq!(h.fake.requests("getMe").len(), 1);
    assert_eq!(h.fake.requests("deleteWebhook").len(), 1);
    let cmds = h.fake.requests("setMyCommands");
    let names: Vec<&str> = cmds[0]["commands"]
        .as_array()
        .expect("commands")
        .iter()
        .map(|c| c["command"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["new", "stop", "status", "reminders", "help"]);
    assert!(
        cmds[0]["commands"]
            .as_array()
            .unwrap()
            .iter()
            .all(|c| !c["description"].as_str().unwrap().is_empty())
    );
    assert_eq!(
        h.sink.connected_events().first(),
        Some(&(true, "polling".to_string()))
    );
}

#[tokio::test]
async fn dm_text_is_published_then_confirmed() {
    let h = Harness::start().await;
    let uid = h.fake.push_update(h.fake.dm_text(&ann(), "hello there"));
    let m = h.sink.wait_published(1).await.remove(0);
    assert_eq!(m.id, format!("telegram:update:{uid}"));
    assert_eq!(m.key.to_string(), "telegram:5001");
    assert_eq!(m.sender.id, "5001");
    assert_eq!(m.sender.username.as_deref(), Some("ann"));
    assert_eq!(m.sender.display_name, "Ann Lee");
    assert_eq!(m.text, "hello there");
    assert!(!m.is_group && !m.mentions_bot);
    assert!(
        m.metadata["message_id"]
            .as_str()
            .is_some_and(|s| s.parse::<i64>().is_ok())
    );
    assert_eq!(m.metadata["chat_type"], json!("private"));
    assert!(h.fake.wait_for_offset_confirmed(uid, WAIT).await);
    assert!(h.fake.pending_updates().is_empty());
}

#[tokio::test]
async fn group_messages_say_whether_the_bot_is_addressed() {
    let h = Harness::start().await;
    let g = -100_200;
    let f = &h.fake;
    f.push_update(f.group_text(g, &ann(), "just chatting"));
    f.push_update(f.group_mention(g, &ann(), "what's the time?"));
    f.push_update(f.group_text_mention(g, &ann(), "summarise please"));
    f.push_update(f.group_reply_to_bot(g, &ann(), "and then?", 77, "Once upon a time"));
    let p = h.sink.wait_published(4).await;
    let flags: Vec<bool> = p.iter().map(|m| m.mentions_bot).collect();
    assert_eq!(flags, [false, true, true, true]);
    assert!(
        p.iter()
            .all(|m| m.is_group && m.key.to_string() == "telegram:-100200")
    );
    assert_eq!(p[0].text, "just chatting");
    assert_eq!(p[1].text, "what's the time?", "leading @mention removed");
    assert_eq!(
        p[2].text, "summarise please",
        "leading text_mention removed"
    );
    assert_eq!(p[3].reply_to.as_deref(), Some("77"));
    assert_eq!(p[3].metadata["reply_to_text"], json!("Once upon a time"));
    assert_eq!(p[0].metadata["chat_type"], json!("supergroup"));
    assert_eq!(p[0].metadata["chat_title"], json!("Test group"));
}

/// A group that becomes a supergroup: the old group gets a service message naming the new
/// id, the new one a message naming the old. Either reports the move (before the new
/// group's messages are published), so its conversation and reminders follow.
#[tokio::test]
async fn a_group_that_became_a_supergroup_reports_the_move() {
    let h = Harness::start().await;
    let admin = json!({"id": 7, "is_bot": false, "first_name": "Ann"});
    h.fake.push_update(json!({"message": {
        "chat": {"id": -555, "type": "group", "title": "Family"},
        "from": admin, "migrate_to_chat_id": -100_555_i64}}));
    h.fake.push_update(json!({"message": {
        "chat": {"id": -100_555_i64, "type": "supergroup", "title": "Family"},
        "from": admin, "migrate_from_chat_id": -555}}));
    h.fake
        .push_update(h.fake.group_mention(-100_555, &ann(), "still there?"));
    let p = h.sink.wait_published(1).await;
    assert_eq!(p[0].key.to_string(), "telegram:-100555");
    let moved = ("telegram:-555".to_string(), "telegram:-100555".to_string());
    assert_eq!(h.sink.moves(), [moved.clone(), moved]);
}

#[tokio::test]
async fn forum_topic_messages_get_a_topic_key() {
    let h = Harness::start().await;
    h.fake
        .push_update(h.fake.topic_text(-100_300, 42, &ann(), "in the topic"));
    let m = h.sink.wait_published(1).await.remove(0);
    assert_eq!(m.key.to_string(), "telegram:-100300:topic:42");
    assert_eq!(m.reply_to, None, "the topic's root message is not a reply");
    assert!(!m.mentions_bot);
}

#[tokio::test]
async fn photo_is_downloaded_into_the_inbox_before_the_turn_with_its_caption() {
    let h = Harness::start().await;
    let bytes: Vec<u8> = (0..5000u32).map(|i| (i % 251) as u8).collect();
    let file = h.fake.add_file("cat.jpg", bytes.clone());
    h.fake
        .push_update(h.fake.photo(5001, &ann(), &file, Some("look at this")));
    let group_file = h.fake.add_file("dog.jpg", vec![1u8; 10]);
    h.fake.push_update(
        h.fake
            .group_photo_mention(-100_400, &ann(), &group_file, "and this"),
    );
    let p = h.sink.wait_published(2).await;
    assert!(
        h.fake.requests("getFile").is_empty(),
        "intake fetches nothing"
    );
    assert!(p.iter().all(|m| m.attachments.is_empty()));
    let p = h.fetched(p).await;
    let m = &p[0];
    assert_eq!(m.text, "look at this");
    assert_eq!(m.attachments.len(), 1);
    assert!(!m.metadata.contains_key("pending_files"), "fetched once");
    let a = &m.attachments[0];
    assert_eq!(a.kind, AttachmentKind::Image);
    assert_eq!(a.size, 5000);
    let path = std::path::Path::new(&a.location);
    assert!(path.starts_with(h.inbox.path().join("inbox")), "{path:?}");
    assert_eq!(std::fs::read(path).expect("downloaded"), bytes);
    assert!(p[1].mentions_bot, "a caption mention addresses the bot");
    assert_eq!(p[1].text, "and this");
    assert_eq!(p[1].attachments.len(), 1);
}

/// An album is one message per photo, and only the first carries the caption: when that
/// caption mentions the bot, the other photos (in the same poll or a later one) are
/// addressed too, so a group that only mentions reach gets the whole album. Another album
/// stays unaddressed.
#[tokio::test]
async fn the_photos_of_an_album_whose_caption_mentions_the_bot_are_all_addressed() {
    let h = Harness::start().await;
    let (g, f) = (-100_500, &h.fake);
    let in_album = |mut u: serde_json::Value, album: &str| {
        u["message"]["media_group_id"] = json!(album);
        u
    };
    let file = |n: &str| f.add_file(n, vec![1u8; 10]);
    f.push_update(in_album(
        f.group_photo_mention(g, &ann(), &file("1.jpg"), "compare these"),
        "A1",
    ));
    f.push_update(in_album(f.photo(g, &ann(), &file("2.jpg"), None), "A1"));
    let first = h.sink.wait_published(2).await;
    f.push_update(in_album(f.photo(g, &ann(), &file("3.jpg"), None), "A1"));
    f.push_update(in_album(f.photo(g, &ann(), &file("4.jpg"), None), "B2"));
    let p = h.sink.wait_published(4).await;
    assert_eq!(first.len(), 2);
    let flags: Vec<bool> = p.iter().map(|m| m.mentions_bot).collect();
    assert_eq!(flags, [true, true, true, false]);
    assert_eq!(p[1].metadata["media_group_id"], json!("A1"));
}

#[tokio::test]
async fn a_file_on_a_slow_link_is_downloaded_whole() {
    let h = Harness::start().await;
    // 18 s to come down: longer than an API call may take (17 s at least), well within
    // the 120 s a download may.
    let bytes: Vec<u8> = (0..180_000u32).map(|i| (i % 251) as u8).collect();
    h.fake.set_file_rate(10_000);
    let file = h.fake.add_file("lecture.pdf", bytes.clone());
    h.fake.push_update(h.fake.document(
        5001,
        &ann(),
        &file,
        "lecture.pdf",
        "application/pdf",
        Some("summarise this"),
    ));
    let published = h.sink.wait_published(1).await;
    let m = h.fetched(published).await.remove(0);
    assert_eq!(m.text, "summarise this");
    assert_eq!(m.attachments.len(), 1, "{}", m.text);
    let path = &m.attachments[0].location;
    assert_eq!(std::fs::read(path).expect("downloaded"), bytes);
}

#[tokio::test]
async fn a_slow_file_holds_up_neither_its_confirmation_nor_the_next_message() {
    let h = Harness::start().await;
    // 20 s to come down.
    h.fake.set_file_rate(10_000);
    let file = h.fake.add_file("big.pdf", vec![5u8; 200_000]);
    h.fake.push_update(h.fake.document(
        5001,
        &ann(),
        &file,
        "big.pdf",
        "application/pdf",
        Some("read this"),
    ));
    let p = h.sink.wait_published(1).await;
    let uid = h.fake.push_update(h.fake.dm_text(&ann(), "and hello"));
    let p2 = h.sink.wait_published(2).await;
    assert_eq!(p2[1].text, "and hello");
    assert!(h.fake.wait_for_offset_confirmed(uid, WAIT).await);
    assert!(h.fake.requests("getFile").is_empty());
    assert!(p[0].metadata.contains_key("pending_files"));
}

#[tokio::test]
async fn files_come_down_several_at_once_and_keep_their_order() {
    let bytes = |b: u8| vec![b; 50_000];
    let h = Harness::start().await;
    // 5 s each on this link.
    h.fake.set_file_rate(10_000);
    for (name, b) in [("a.pdf", 1u8), ("b.pdf", 2)] {
        let file = h.fake.add_file(name, bytes(b));
        let doc = h
            .fake
            .document(5001, &ann(), &file, name, "application/pdf", Some(name));
        h.fake.push_update(doc);
    }
    let published = h.sink.wait_published(2).await;
    let fetching = h.fetched(published);
    tokio::pin!(fetching);
    // The second file is asked for while the first is still coming down.
    tokio::select! {
        _ = &mut fetching => panic!("both came down before the second was asked for"),
        r = h.fake.wait_for_requests("getFile", 2, Duration::from_secs(3)) => {
            r.expect("both downloads began");
        }
    }
    let p = tokio::time::timeout(Duration::from_secs(60), fetching)
        .await
        .expect("fetched");
    assert_eq!([p[0].text.as_str(), p[1].text.as_str()], ["a.pdf", "b.pdf"]);
    for (m, b) in p.iter().zip([1u8, 2]) {
        let path = &m.attachments[0].location;
        assert_eq!(std::fs::read(path).expect("downloaded"), bytes(b));
    }
}

#[tokio::test]
async fn oversized_file_is_not_downloaded_and_noted() {
    let h = Harness::start_with(|_| {}, |c| c.max_file_bytes = 100).await;
    let file = h.fake.add_file("big.pdf", vec![0u8; 1000]);
    let doc = h.fake.document(
        5001,
        &ann(),
        &file,
        "big.pdf",
        "application/pdf",
        Some("read it"),
    );
    h.fake.push_update(doc);
    let published = h.sink.wait_published(1).await;
    let m = h.fetched(published).await.remove(0);
    assert!(m.attachments.is_empty());
    assert!(m.text.starts_with("read it"));
    assert!(
        m.text.contains("document big.pdf") && m.text.contains("not downloaded"),
        "{}",
        m.text
    );
    assert!(
        h.fake.requests("getFile").is_empty(),
        "no download attempted"
    );
    let inbox = h.inbox.path().join("inbox");
    assert!(!inbox.exists() || std::fs::read_dir(inbox).unwrap().next().is_none());
}

#[tokio::test]
async fn odd_updates_are_skipped_and_confirmed_then_the_next_message_flows() {
    let h = Harness::start().await;
    let f = &h.fake;
    f.push_update(f.edited_message(&ann(), "edited"));
    f.push_update(f.sticker(&ann()));
    f.push_update(f.channel_post(-100_500, "news"));
    f.push_update(f.callback_query(&ann(), "button"));
    f.push_update(f.my_chat_member(-100_600, &ann()));
    f.push_update(json!({"brand_new_update_kind": {"whatever": [1, 2, 3]}}));
    let long = "x".repeat(100_000);
    let big = f.push_update(f.dm_text(&ann(), &long));
    let last = f.push_update(f.dm_text(&ann(), "still here?"));
    let p = h.sink.wait_published(2).await;
    assert_eq!(p.len(), 2, "only the two real messages: {p:?}");
    assert_eq!(p[0].id, format!("telegram:update:{big}"));
    assert_eq!(
        p[0].text.len(),
        100_000,
        "the adapter passes long texts on; the gateway cuts"
    );
    assert_eq!(p[1].text, "still here?");
    assert!(f.wait_for_offset_confirmed(last, WAIT).await);
    assert!(f.pending_updates().is_empty());
}

#[tokio::test]
async fn failed_publish_leaves_the_update_unconfirmed_until_it_succeeds() {
    let h = Harness::start_with(|_| {}, |_| {}).await;
    h.sink.fail_next(2);
    let uid = h.fake.push_update(h.fake.dm_text(&ann(), "keep me"));
    let second = h.fake.push_update(h.fake.dm_text(&ann(), "and me"));
    let p = h.sink.wait_published(2).await;
    let id = format!("telegram:update:{uid}");
    assert_eq!(p[0].id, id);
    assert_eq!(p[1].id, format!("telegram:update:{second}"));
    assert_eq!(h.sink.attempts().iter().filter(|a| **a == id).count(), 3);
    // While it failed, every poll asked for the same update again.
    let offsets: Vec<i64> = h
        .fake
        .requests("getUpdates")
        .iter()
        .filter_map(|r| r["offset"].as_i64())
        .collect();
    assert!(offsets.windows(2).all(|w| w[0] <= w[1]), "{offsets:?}");
    assert!(
        offsets.iter().filter(|o| **o <= uid).count() >= 3,
        "{offsets:?}"
    );
    assert!(h.fake.wait_for_offset_confirmed(second, WAIT).await);
}

#[tokio::test]
async fn conflict_is_retried_with_backoff_then_recovers() {
    let h = Harness::start_with(|f| f.conflict_polls(3), |_| {}).await;
    h.fake
        .push_update(h.fake.dm_text(&ann(), "after the conflict"));
    let m = h.sink.wait_published(1).await.remove(0);
    assert_eq!(m.text, "after the conflict");
    let events = h.sink.connected_events();
    assert!(
        events.iter().any(|(up, d)| !up && d.contains("409")),
        "{events:?}"
    );
    assert_eq!(events.last().map(|e| e.0), Some(true), "{events:?}");
    // 3 conflicts, then the poll that got the message: no hot loop.
    let polls = h.fake.requests("getUpdates").len();
    assert!((4..=6).contains(&polls), "{polls} polls");
}

#[tokio::test]
async fn stalled_poll_is_abandoned_by_the_watchdog() {
    let h = Harness::start_with(
        |f| f.stall_polls(1),
        |c| c.watchdog_margin = Duration::from_millis(300),
    )
    .await;
    let started = tokio::time::Instant::now();
    h.fake.push_update(h.fake.dm_text(&ann(), "are you alive?"));
    let m = h.sink.wait_published(1).await.remove(0);
    assert_eq!(m.text, "are you alive?");
    // Poll timeout 1 s + margin 0.3 s, then a fresh poll.
    assert!(
        started.elapsed() >= Duration::from_millis(1200),
        "{:?}",
        started.elapsed()
    );
    assert!(h.sink.connected_events().iter().any(|(up, _)| !up));
}

#[tokio::test]
async fn wrong_token_stops_the_channel_with_unauthorized() {
    let mut h = Harness::start_with(|_| {}, |c| c.token = "999:WRONG-secret".into()).await;
    let err = h.stop_result().await;
    match err {
        Err(ChannelError::Unauthorized(msg)) => assert!(!msg.contains("WRONG-secret"), "{msg}"),
        other => panic!("expected Unauthorized, got {other:?}"),
    }
    assert!(h.fake.requests("getUpdates").is_empty());
    assert!(h.sink.connected_events().iter().all(|(up, _)| !up));
}

#[tokio::test]
async fn shutdown_confirms_what_was_published() {
    let mut h = Harness::start().await;
    let uid = h.fake.push_update(h.fake.dm_text(&ann(), "last words"));
    h.sink.wait_published(1).await;
    h.stop().await.expect("clean stop");
    assert!(h.fake.wait_for_offset_confirmed(uid, WAIT).await);
    assert_eq!(
        h.sink.connected_events().last(),
        Some(&(false, "stopped".to_string()))
    );
}
