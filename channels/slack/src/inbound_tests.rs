//! Unit tests of the event rules.

use serde_json::{Value, json};

use super::*;
use switchboard_channel::AttachmentKind;

fn me() -> BotIdentity {
    BotIdentity::test()
}

fn cb(event: Value) -> Value {
    json!({"type": "event_callback", "event_id": "Ev1", "team_id": "T1", "event": event})
}

fn publish(event: Value, threads: bool) -> Converted {
    match convert(&cb(event), &me(), threads, |_, _| false) {
        Intake::Publish(c) => *c,
        Intake::Ignore(why) => panic!("ignored: {why}"),
    }
}

fn ignored(event: Value) -> &'static str {
    match convert(&cb(event), &me(), true, |_, _| false) {
        Intake::Publish(c) => panic!("published {:?}", c.msg),
        Intake::Ignore(why) => why,
    }
}

#[test]
fn app_mention_starts_a_thread_keyed_by_its_ts() {
    let c = publish(
        json!({"type": "app_mention", "user": "U1", "channel": "C1",
               "text": "<@UBOT> hello there", "ts": "100.1"}),
        true,
    );
    assert_eq!(c.msg.id, "slack:msg:C1:100.1");
    assert_eq!(c.msg.key.to_string(), "slack:C1:100.1");
    assert_eq!(c.msg.text, "hello there");
    assert!(c.msg.mentions_bot && c.msg.is_group);
    assert_eq!(c.msg.metadata["message_id"], "100.1");
    assert_eq!(c.msg.metadata["channel_type"], "channel");
    assert_eq!(c.joined_thread, Some(("C1".into(), "100.1".into())));
}

#[test]
fn without_threads_a_channel_is_one_key() {
    let c = publish(
        json!({"type": "app_mention", "user": "U1", "channel": "C1",
               "text": "<@UBOT> hi", "ts": "100.1", "thread_ts": "99.0"}),
        false,
    );
    assert_eq!(c.msg.key.to_string(), "slack:C1");
    assert_eq!(c.msg.reply_to.as_deref(), Some("99.0"));
}

#[test]
fn dm_is_keyed_by_channel_and_not_a_group() {
    let c = publish(
        json!({"type": "message", "channel_type": "im", "user": "U1", "channel": "D1",
               "text": "hi", "ts": "5.5"}),
        true,
    );
    assert_eq!(c.msg.key.to_string(), "slack:D1");
    assert!(!c.msg.is_group && !c.msg.mentions_bot);
    assert_eq!(c.joined_thread, None);
}

#[test]
fn thread_reply_in_a_bot_thread_mentions_the_bot() {
    let ev = json!({"type": "message", "channel_type": "channel", "user": "U1", "channel": "C1",
                    "text": "and then?", "ts": "101.0", "thread_ts": "100.1"});
    let c = match convert(&cb(ev.clone()), &me(), true, |c, t| {
        c == "C1" && t == "100.1"
    }) {
        Intake::Publish(c) => *c,
        Intake::Ignore(w) => panic!("{w}"),
    };
    assert_eq!(c.msg.key.to_string(), "slack:C1:100.1");
    assert!(c.msg.mentions_bot);
    let other = publish(ev.clone(), true);
    assert!(!other.msg.mentions_bot, "not the bot's thread");
    // Without threads (replies go to the channel), a thread reply needs a mention.
    let c = match convert(&cb(ev), &me(), false, |_, _| true) {
        Intake::Publish(c) => *c,
        Intake::Ignore(w) => panic!("{w}"),
    };
    assert!(!c.msg.mentions_bot);
}

#[test]
fn subtypes_bots_and_own_messages_are_ignored() {
    let base = json!({"type": "message", "channel_type": "channel", "user": "U1",
                      "channel": "C1", "text": "x", "ts": "1.0"});
    for sub in [
        "message_changed",
        "message_deleted",
        "bot_message",
        "channel_join",
    ] {
        let mut e = base.clone();
        e["subtype"] = json!(sub);
        ignored(e);
    }
    let mut b = base.clone();
    b["bot_id"] = json!("BOTHER");
    assert_eq!(ignored(b), "bot message");
    let mut own = base.clone();
    own["user"] = json!("UBOT");
    assert_eq!(ignored(own), "own message");
    let mut share = base.clone();
    share["subtype"] = json!("file_share");
    publish(share, true);
}

#[test]
fn a_mention_as_message_and_as_app_mention_is_one_message() {
    // Slack sends both (channels, and where it does, DMs and group DMs), each with its own
    // event id: one message id, so the gateway keeps one.
    for ctype in ["channel", "im", "mpim"] {
        let channel = if ctype == "im" { "D1" } else { "C1" };
        let message = publish(
            json!({"type": "message", "channel_type": ctype, "user": "U1",
                   "channel": channel, "text": "<@UBOT> hi", "ts": "1.0"}),
            true,
        );
        let mention = publish(
            json!({"type": "app_mention", "user": "U1", "channel": channel,
                   "text": "<@UBOT> hi", "ts": "1.0"}),
            true,
        );
        assert_eq!(message.msg.id, mention.msg.id, "{ctype}");
        assert_eq!(message.msg.id, format!("slack:msg:{channel}:1.0"));
        assert_eq!(message.msg.text, mention.msg.text);
        assert!(message.msg.mentions_bot && mention.msg.mentions_bot);
    }
}

#[test]
fn files_are_listed_for_download() {
    let c = publish(
        json!({"type": "message", "subtype": "file_share", "channel_type": "im", "user": "U1",
               "channel": "D1", "text": "look", "ts": "1.0",
               "files": [{"id": "F1", "name": "cat.png", "mimetype": "image/png", "size": 1234,
                          "url_private": "https://files.slack.com/cat.png"},
                         {"id": "F2", "name": "a.pdf", "mimetype": "application/pdf",
                          "url_private": "https://files.slack.com/a.pdf"},
                         {"id": "F3", "name": "plan.key", "file_access": "check_file_info"}]}),
        true,
    );
    // A Slack Connect file has no link: named in the text, not dropped without a word.
    assert_eq!(
        c.msg.text,
        "look\n[file plan.key not downloaded: Slack gave no link to it (a file from another \
         organisation); ask for it to be shared here]"
    );
    // Attachments are local files only: the URLs wait for the download.
    assert!(c.msg.attachments.is_empty());
    assert_eq!(c.files.len(), 2);
    let a = &c.files[0];
    assert_eq!(a.kind, AttachmentKind::Image);
    assert_eq!(a.name.as_deref(), Some("cat.png"));
    assert_eq!(a.mime.as_deref(), Some("image/png"));
    assert_eq!(a.size, 1234);
    assert_eq!(a.url, "https://files.slack.com/cat.png");
    assert_eq!(c.files[1].kind, AttachmentKind::Document);
}

#[test]
fn other_event_types_and_edited_mentions_are_ignored() {
    ignored(json!({"type": "reaction_added", "user": "U1"}));
    ignored(
        json!({"type": "app_mention", "user": "U1", "channel": "C1", "text": "<@UBOT> x",
                   "ts": "1.0", "edited": {"user": "U1", "ts": "2.0"}}),
    );
}

#[test]
fn slack_markup_reaches_the_model_as_plain_text() {
    let c = publish(
        json!({"type": "app_mention", "user": "U1", "channel": "C1", "ts": "1.0",
               "text": "<@UBOT> is a &lt; b &amp;&amp; c &gt; d? ask <@U0BOB0001> in \
                        <#C0123ABCD|general>, see <https://x.io/a?b=1&amp;c=2|the docs> \
                        or <https://x.io> <mailto:a@b.io|a@b.io> <!here>"}),
        true,
    );
    assert_eq!(
        c.msg.text,
        "is a < b && c > d? ask <@U0BOB0001> in #general, see the docs \
         (https://x.io/a?b=1&c=2) or https://x.io a@b.io @here"
    );
    assert_eq!(plain_text("a < b"), "a < b", "a lone < is kept");
}
