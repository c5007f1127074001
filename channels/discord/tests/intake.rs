//! Intake against the fake Discord: what real serenity receives is published faithfully.

mod common;

use switchboard_channel::{AttachmentKind, Channel};
use switchboard_fakes::discord::{
    Author, BOT_ROLE_ID, BOT_USER_ID, GUILD_ID, HELPER_ROLE_ID, IncomingMessage, attachment,
};

const CHAN: u64 = 111;
const THREAD: u64 = 222;
const DM: u64 = 333;

fn alice() -> Author {
    Author::user(42, "alice").with_global_name("Alice A.")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn identify_asks_for_the_needed_intents_and_reports_connected() {
    let h = common::start().await;
    let ids = h.fake.identifies();
    // GUILDS | GUILD_MESSAGES | DIRECT_MESSAGES | MESSAGE_CONTENT
    assert_eq!(ids[0]["intents"], 1 | (1 << 9) | (1 << 12) | (1 << 15));
    assert_eq!(ids[0]["token"], format!("Bot {}", common::TOKEN));
    let rec = h.rec.clone();
    // READY is handled right after it was sent; give the handler a bounded moment.
    rec.wait_for_connected("ready").await;
    h.stop().await;
    assert_eq!(rec.connected_reports().last().map(|r| r.0), Some(false));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guild_mention_dm_reply_and_plain_messages_are_published_faithfully() {
    let h = common::start().await;
    let m1 =
        h.fake
            .push_message_create(IncomingMessage::guild_mention(CHAN, alice(), "what's up?"));
    let m2 = h
        .fake
        .push_message_create(IncomingMessage::guild(CHAN, alice(), "just chatting"));
    let m3 = h.fake.push_message_create(IncomingMessage::dm(
        DM,
        Author::user(43, "bob"),
        "hi in private",
    ));
    let m4 = h.fake.push_message_create(IncomingMessage::reply_to_bot(
        THREAD,
        alice(),
        "and then?",
        777,
    ));
    let msgs = h.rec.wait_for_msgs(4).await;
    let by_id = |id: u64| {
        msgs.iter()
            .find(|m| m.id == format!("discord:msg:{id}"))
            .unwrap_or_else(|| panic!("message {id} not published: {msgs:?}"))
            .clone()
    };

    let a = by_id(m1);
    assert_eq!(a.key.to_string(), format!("discord:{CHAN}"));
    assert!(a.is_group && a.mentions_bot);
    assert_eq!(a.text, "what's up?");
    assert_eq!(a.sender.id, "42");
    assert_eq!(a.sender.username.as_deref(), Some("alice"));
    assert_eq!(a.sender.display_name, "Alice A.");
    assert_eq!(a.metadata["message_id"], m1.to_string());
    assert_eq!(a.metadata["guild_id"], GUILD_ID.to_string());
    assert_eq!(a.reply_to, None);

    let b = by_id(m2);
    assert!(b.is_group && !b.mentions_bot);
    assert_eq!(b.text, "just chatting");

    let c = by_id(m3);
    assert!(!c.is_group);
    assert_eq!(c.key.to_string(), format!("discord:{DM}"));
    assert_eq!(c.sender.display_name, "bob");
    assert!(c.metadata.get("guild_id").is_none());

    let d = by_id(m4);
    assert!(d.mentions_bot, "a reply to the bot addresses it");
    assert_eq!(
        d.key.to_string(),
        format!("discord:{THREAD}"),
        "a thread is its own chat"
    );
    assert_eq!(d.reply_to.as_deref(), Some("777"));
    assert_eq!(d.metadata["reply_to_text"], "earlier answer");
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn own_other_bot_and_empty_messages_are_not_published() {
    let h = common::start().await;
    h.fake.push_message_create(IncomingMessage::guild(
        CHAN,
        Author::this_bot(),
        "my own echo",
    ));
    h.fake.push_message_create(IncomingMessage::guild_mention(
        CHAN,
        Author::bot(55, "otherbot"),
        "hey bot",
    ));
    // A sticker alone: no text, no file.
    h.fake
        .push_message_create(IncomingMessage::guild(CHAN, alice(), ""));
    let last = h
        .fake
        .push_message_create(IncomingMessage::guild(CHAN, alice(), "human here"));
    let msgs = h.rec.wait_for_msgs(1).await;
    // The human's message was dispatched last; give earlier handlers no excuse by waiting
    // for it, then check nothing else arrived.
    assert_eq!(msgs.len(), 1, "{msgs:?}");
    assert_eq!(msgs[0].id, format!("discord:msg:{last}"));
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attachments_and_role_mentions_of_the_bot() {
    let h = common::start().await;
    h.fake.push_guild_create(CHAN);
    let mut m = IncomingMessage::guild(CHAN, alice(), &format!("<@&{BOT_ROLE_ID}> look at this"));
    m.mention_roles.push(BOT_ROLE_ID);
    m.attachments
        .push(attachment(9, "cat.png", 1234, Some("image/png")));
    m.attachments
        .push(attachment(10, "notes.pdf", 99, Some("application/pdf")));
    let id = h.fake.push_message_create(m);
    let mut msgs = h.rec.wait_for_msgs(1).await;
    assert!(msgs[0].attachments.is_empty(), "left for the turn");
    // Without an inbox folder, the files are handed on as their URLs.
    h.channel.fetch_files(&mut msgs[0]).await;
    let got = &msgs[0];
    assert_eq!(got.id, format!("discord:msg:{id}"));
    assert!(got.mentions_bot, "role mention of the bot's managed role");
    assert_eq!(got.text, "look at this");
    assert_eq!(got.attachments.len(), 2);
    assert_eq!(got.attachments[0].kind, AttachmentKind::Image);
    assert_eq!(got.attachments[0].name.as_deref(), Some("cat.png"));
    assert_eq!(got.attachments[0].size, 1234);
    assert_eq!(got.attachments[0].mime.as_deref(), Some("image/png"));
    assert!(got.attachments[0].location.ends_with("/9/cat.png"));
    assert_eq!(got.attachments[1].kind, AttachmentKind::Document);
    assert_ne!(BOT_USER_ID, 0);
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_peoples_mentions_roles_and_channels_read_as_names() {
    let h = common::start().await;
    h.fake.push_guild_create(CHAN);
    let mut m = IncomingMessage::guild_mention(
        CHAN,
        alice(),
        &format!(
            "ask <@43> or <@!44>, or <@&{HELPER_ROLE_ID}> in <#{CHAN}>; not <@45>, <@&7>, <#8>"
        ),
    );
    m.mentions.push(Author::user(43, "bob"));
    m.mentions
        .push(Author::user(44, "carol").with_global_name("Carol C."));
    m.mention_roles.push(HELPER_ROLE_ID);
    // Replying to a message that mentions someone: the quote reads the same way.
    m.reply_to = Some((5, Author::user(43, "bob"), "ping <@44>".into()));
    h.fake.push_message_create(m);
    let msgs = h.rec.wait_for_msgs(1).await;
    assert_eq!(
        msgs[0].text,
        "ask @bob (<@43>) or @carol (<@44>), or @helpers in #general; not <@45>, <@&7>, <#8>"
    );
    assert_eq!(msgs[0].metadata["reply_to_text"], "ping @carol (<@44>)");
    h.stop().await;
}

/// Texts published on chat `chan`, in publish order.
fn texts_of(msgs: &[switchboard_channel::InboundMessage], chan: u64) -> Vec<String> {
    let key = format!("discord:{chan}");
    msgs.iter()
        .filter(|m| m.key.to_string() == key)
        .map(|m| m.text.clone())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn back_to_back_messages_of_a_channel_are_published_in_gateway_order() {
    // serenity runs every event's handler in its own task; a burst of MESSAGE_CREATEs read
    // together is handled in a scrambled order unless the adapter restores it.
    const ROUNDS: usize = 5;
    const BURST: usize = 50;
    let h = common::start().await;
    // The adapter hooks serenity's shard runner while handling READY; messages read in the
    // same burst as READY, before that, are not ordered.
    h.rec.wait_for_connected("ready").await;
    for round in 0..ROUNDS {
        let mut sent_chan = Vec::new();
        let mut sent_dm = Vec::new();
        for i in 0..BURST {
            let text = format!("r{round} m{i}");
            h.fake
                .push_message_create(IncomingMessage::guild(CHAN, alice(), &text));
            sent_chan.push(text);
            if i % 5 == 0 {
                let text = format!("r{round} dm{i}");
                h.fake
                    .push_message_create(IncomingMessage::dm(DM, Author::user(43, "bob"), &text));
                sent_dm.push(text);
            }
        }
        let total = (round + 1) * (BURST + BURST / 5);
        let msgs = h.rec.wait_for_msgs(total).await;
        let prefix = format!("r{round} ");
        let this_round = |chan| {
            texts_of(&msgs, chan)
                .into_iter()
                .filter(|t| t.starts_with(&prefix))
                .collect::<Vec<_>>()
        };
        assert_eq!(this_round(CHAN), sent_chan, "round {round}, channel {CHAN}");
        assert_eq!(this_round(DM), sent_dm, "round {round}, DM");
    }
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_publish_is_not_overtaken_by_later_messages_of_its_channel() {
    let h = common::start().await;
    h.rec.wait_for_connected("ready").await;
    h.rec.fail_publishes_of("first", 2);
    for text in ["first", "second", "third"] {
        h.fake
            .push_message_create(IncomingMessage::guild(CHAN, alice(), text));
    }
    // Another chat is not held up by the retries.
    h.fake.push_message_create(IncomingMessage::dm(
        DM,
        Author::user(43, "bob"),
        "elsewhere",
    ));
    let msgs = h.rec.wait_for_msgs(4).await;
    assert_eq!(texts_of(&msgs, CHAN), ["first", "second", "third"]);
    assert_eq!(
        msgs[0].text, "elsewhere",
        "the DM did not wait for the retried channel: {msgs:?}"
    );
    h.stop().await;
}
