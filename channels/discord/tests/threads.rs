//! Threads and forum posts against the fake Discord: a thread opened for the bot (a forum
//! post, or a thread started from a message asking it) is followed once it answered there
//! (its messages address the bot without a mention, also after a restart), one answer in
//! someone else's thread follows nothing, and a forum post's title reaches the model with
//! the first message the bot gets of it.

mod common;

use std::sync::Arc;

use switchboard_channel::{Channel, ChatKey, InboundMessage, InboundSender, OutboundMessage};
use switchboard_discord::DiscordChannel;
use switchboard_fakes::discord::{Author, Denial, FakeChannel, IncomingMessage};
use tokio_util::sync::CancellationToken;

const TEXT: u64 = 111;
const THREAD: u64 = 222;
const PRIVATE: u64 = 223;
const LOCKED: u64 = 224;
const BUSY: u64 = 225;
const FORUM: u64 = 444;

fn alice() -> Author {
    Author::user(42, "alice")
}

fn key(channel: u64) -> ChatKey {
    ChatKey::new("discord", channel.to_string())
}

fn by_text<'a>(msgs: &'a [InboundMessage], text: &str) -> &'a InboundMessage {
    msgs.iter()
        .find(|m| m.text == text)
        .unwrap_or_else(|| panic!("{text:?} not published: {msgs:#?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn once_the_bot_posted_in_a_thread_follow_ups_there_address_it_without_a_mention() {
    let h = common::start().await;
    h.rec.wait_for_connected("ready").await;
    h.fake
        .push_thread_create(FakeChannel::thread(THREAD, TEXT, "bug triage"));
    h.fake
        .push_thread_create(FakeChannel::private_thread(PRIVATE, TEXT, "just us"));
    h.fake
        .push_thread_create(FakeChannel::thread(LOCKED, TEXT, "read only"));
    h.fake
        .push_thread_create(FakeChannel::thread(BUSY, TEXT, "the team's chat"));
    h.fake
        .push_message_create(IncomingMessage::guild(THREAD, alice(), "before the bot"));
    for (channel, text) in [
        (THREAD, "what about the first bug?"),
        (PRIVATE, "psst"),
        (TEXT, "hello"),
        (LOCKED, "anyone?"),
        (BUSY, "quick question"),
    ] {
        h.fake
            .push_message_create(IncomingMessage::guild_mention(channel, alice(), text));
    }
    let msgs = h.rec.wait_for_msgs(6).await;
    assert!(!by_text(&msgs, "before the bot").mentions_bot);
    // The bot answers in both threads as threads opened for it (its answer replies to the
    // thread's first message, whose id is the thread's), and in the channel; in the busy
    // thread it answers one mention among others' talk; its answer in the locked thread is
    // refused (no Send Messages in Threads), so it has not posted there.
    for channel in [THREAD, PRIVATE] {
        let mut reply = OutboundMessage::new(key(channel), "an answer");
        reply.reply_to = Some(channel.to_string());
        h.channel.send(&reply).await.expect("reply posted");
    }
    let asked = by_text(&msgs, "quick question")
        .id
        .rsplit(':')
        .next()
        .unwrap()
        .to_string();
    let mut reply = OutboundMessage::new(key(BUSY), "an answer");
    reply.reply_to = Some(asked);
    h.channel.send(&reply).await.expect("reply posted");
    let reply = OutboundMessage::new(key(TEXT), "an answer");
    h.channel.send(&reply).await.expect("reply posted");
    h.fake.deny(LOCKED, Denial::MissingPermissions);
    let refused = h
        .channel
        .send(&OutboundMessage::new(key(LOCKED), "x"))
        .await;
    assert!(refused.is_err(), "{refused:?}");
    for (channel, text) in [
        (THREAD, "and what about the second bug?"),
        (PRIVATE, "and then?"),
        (TEXT, "talking among ourselves"),
        (LOCKED, "still nobody?"),
        (BUSY, "lunch at noon, everyone?"),
    ] {
        h.fake
            .push_message_create(IncomingMessage::guild(channel, alice(), text));
    }
    let msgs = h.rec.wait_for_msgs(11).await;
    let second = by_text(&msgs, "and what about the second bug?");
    assert!(second.is_group && second.mentions_bot, "{second:?}");
    assert_eq!(second.key, key(THREAD));
    assert!(
        by_text(&msgs, "and then?").mentions_bot,
        "a private thread too"
    );
    assert!(
        !by_text(&msgs, "talking among ourselves").mentions_bot,
        "a channel is not a thread: mentions only, as before"
    );
    assert!(
        !by_text(&msgs, "still nobody?").mentions_bot,
        "a refused answer is no part taken"
    );
    assert!(
        !by_text(&msgs, "lunch at noon, everyone?").mentions_bot,
        "one answer in someone's busy thread does not make all its talk the bot's"
    );
    // The threads were known from THREAD_CREATE; only the plain channel was looked up.
    let reads = h.fake.channel_reads();
    assert!(
        [THREAD, PRIVATE, LOCKED, BUSY]
            .iter()
            .all(|t| !reads.contains(t)),
        "{reads:?}"
    );
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_threads_the_bot_takes_part_in_survive_a_restart_through_the_state_file() {
    let fake = common::fake().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let state = dir.path().join("discord-recent.json");
    let start = |rec: Arc<common::Recorder>, state_file: Option<std::path::PathBuf>| {
        let mut cfg = common::config(&fake, common::TOKEN);
        cfg.state_file = state_file;
        let channel = Arc::new(DiscordChannel::new(cfg).expect("channel"));
        let shutdown = CancellationToken::new();
        let (c, s) = (channel.clone(), shutdown.clone());
        let run = tokio::spawn(async move { c.run(InboundSender::new(rec), s).await });
        (channel, shutdown, run)
    };
    let stop = |shutdown: CancellationToken, run: tokio::task::JoinHandle<_>| async move {
        shutdown.cancel();
        let stopped = tokio::time::timeout(common::WAIT, run).await;
        assert!(matches!(stopped, Ok(Ok(Ok(())))), "{stopped:?}");
    };

    let first = common::Recorder::new();
    let (channel, shutdown, run) = start(first.clone(), Some(state.clone()));
    first.wait_for_connected("ready").await;
    fake.push_thread_create(FakeChannel::thread(THREAD, TEXT, "bug triage"));
    fake.push_message_create(IncomingMessage::guild_mention(
        THREAD,
        alice(),
        "first bug?",
    ));
    first.wait_for_msgs(1).await;
    let mut reply = OutboundMessage::new(key(THREAD), "it is fixed");
    reply.reply_to = Some(THREAD.to_string()); // the thread's first message
    channel.send(&reply).await.expect("reply posted");
    stop(shutdown, run).await;

    // After a restart the thread is still followed: no mention needed.
    let second = common::Recorder::new();
    let (_channel, shutdown, run) = start(second.clone(), Some(state.clone()));
    second.wait_for_connected("ready").await;
    fake.push_message_create(IncomingMessage::guild(THREAD, alice(), "and the second?"));
    let msgs = second.wait_for_msgs(1).await;
    assert_eq!(msgs[0].text, "and the second?");
    assert!(msgs[0].mentions_bot, "{:?}", msgs[0]);
    stop(shutdown, run).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forum_posts_title_goes_with_its_first_message_and_not_again() {
    let h = common::start().await;
    h.rec.wait_for_connected("ready").await;
    h.fake.add_channel(FakeChannel::forum(FORUM, "help"));
    let post = h.fake.push_forum_post(
        FORUM,
        "how do I X",
        IncomingMessage::guild_mention(0, alice(), "I tried Y and it failed"),
    );
    let msgs = h.rec.wait_for_msgs(1).await;
    let first = &msgs[0];
    assert_eq!(first.key, key(post), "the post is its own chat");
    assert_eq!(first.id, format!("discord:msg:{post}"));
    assert_eq!(
        first.text,
        "(forum post titled \"how do I X\")\nI tried Y and it failed"
    );
    assert_eq!(first.metadata["forum_post_title"], "how do I X");
    assert!(first.mentions_bot);

    // Answered: later messages of the post need neither the title nor a mention.
    let mut reply = OutboundMessage::new(key(post), "do Z");
    reply.reply_to = Some(post.to_string()); // the post's first message
    h.channel.send(&reply).await.expect("reply posted");
    h.fake
        .push_message_create(IncomingMessage::guild(post, alice(), "thanks, and W?"));
    let msgs = h.rec.wait_for_msgs(2).await;
    assert_eq!(msgs[1].text, "thanks, and W?");
    assert!(msgs[1].mentions_bot);
    assert!(msgs[1].metadata.get("forum_post_title").is_none());
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mention_in_a_forum_post_the_bot_never_saw_brings_its_title_from_rest() {
    let h = common::start().await;
    h.rec.wait_for_connected("ready").await;
    h.fake.add_channel(FakeChannel::forum(FORUM, "help"));
    // Opened while the bot was away (no THREAD_CREATE, no starter message for it).
    let post = h.fake.add_unseen_forum_post(
        FORUM,
        "printer on fire",
        IncomingMessage::guild(0, Author::user(43, "bob"), "it smokes"),
    );
    h.fake
        .add_channel(FakeChannel::thread(THREAD, TEXT, "side chat"));
    h.fake.push_message_create(IncomingMessage::guild_mention(
        post,
        alice(),
        "can you help here?",
    ));
    h.fake
        .push_message_create(IncomingMessage::guild_mention(THREAD, alice(), "and here?"));
    let msgs = h.rec.wait_for_msgs(2).await;
    let in_post = msgs.iter().find(|m| m.key == key(post)).expect("post");
    assert_eq!(
        in_post.text,
        "(forum post titled \"printer on fire\")\ncan you help here?"
    );
    let in_thread = msgs.iter().find(|m| m.key == key(THREAD)).expect("thread");
    assert_eq!(
        in_thread.text, "and here?",
        "a plain thread has no post title"
    );
    let reads = h.fake.channel_reads();
    assert!(
        reads.contains(&post) && reads.contains(&FORUM) && reads.contains(&TEXT),
        "{reads:?}"
    );
    h.stop().await;
}
