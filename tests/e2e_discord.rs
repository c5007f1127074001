//! End to end: the real `switchboard` binary with its Discord adapter (serenity) against the
//! fake Discord (REST + websocket gateway) and the fake LLM. Asserts what crossed the wire:
//! the fake's recorded message posts, gateway sessions, and the LLM's recorded requests.

mod common;

use std::time::Duration;

use common::platform::{self, env_with};
use common::{Env, GatewayProcess};
use switchboard_fakes::discord::{
    Author, BOT_USER_ID, FakeChannel, FakeDiscord, IncomingMessage, Recorded,
};
use switchboard_fakes::llm::{FakeLlm, Reply};

const WAIT: Duration = Duration::from_secs(15);
const TOKEN: &str = "e2e-discord-token-0123456789";
const GUILD_CHANNEL: u64 = 111_000_000_000_000_111;
const DM_CHANNEL: u64 = 222_000_000_000_000_222;
const FORUM_CHANNEL: u64 = 333_000_000_000_000_333;

/// The fakes and a running gateway with Discord on.
struct Dc {
    llm: FakeLlm,
    dc: FakeDiscord,
    env: Env,
    gw: GatewayProcess,
}

impl Dc {
    async fn start() -> Dc {
        let llm = FakeLlm::start().await;
        let dc = FakeDiscord::start(TOKEN).await;
        let table = format!(
            "[channels.discord]\nenabled = true\napi_url = \"{}\"\ndm_policy = \"open\"\n",
            dc.base_url
        );
        let env = env_with(&llm.base_url(), &table);
        let gw = spawn(&env);
        let t = Dc { llm, dc, env, gw };
        t.wait_sessions(1).await;
        t
    }

    async fn wait_sessions(&self, n: usize) {
        assert!(
            self.dc.wait_for_sessions(n, WAIT).await,
            "no Discord session #{n}; logs:\n{}",
            platform::logs(&self.env)
        );
    }

    async fn wait_posts(&self, n: usize) -> Vec<Recorded> {
        assert!(
            self.dc.wait_for_posts(n, WAIT).await,
            "expected {n} posts, got {:#?}\nlogs:\n{}",
            self.dc.posts(),
            platform::logs(&self.env)
        );
        self.dc.posts()
    }

    /// Wait until the posts contain `text` (a multi-part reply may take several posts).
    async fn wait_text(&self, text: &str) -> Vec<Recorded> {
        let mut n = 1;
        loop {
            let posts = self.wait_posts(n).await;
            if posts.iter().any(|p| p.content().contains(text)) {
                return posts;
            }
            n = posts.len() + 1;
        }
    }
}

fn spawn(env: &Env) -> GatewayProcess {
    platform::spawn_ready(env, &[("DISCORD_BOT_TOKEN", TOKEN)], WAIT)
}

fn alice() -> Author {
    Author::user(501, "alice")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mentions_dms_and_replies_to_the_bot_are_answered_plain_guild_talk_is_not() {
    let t = Dc::start().await;
    t.dc.push_message_create(IncomingMessage::guild(
        GUILD_CHANNEL,
        alice(),
        "just talking",
    ));
    let trigger = t.dc.push_message_create(IncomingMessage::guild_mention(
        GUILD_CHANNEL,
        alice(),
        "hello bot",
    ));
    let posts = t.wait_posts(1).await;
    assert_eq!(posts[0].channel_id, GUILD_CHANNEL);
    assert_eq!(posts[0].content(), "echo: [alice] hello bot");
    assert_eq!(
        posts[0].body["message_reference"]["message_id"],
        trigger.to_string(),
        "replies to the trigger"
    );

    t.dc.push_message_create(IncomingMessage::dm(DM_CHANNEL, alice(), "a private word"));
    let posts = t.wait_posts(2).await;
    assert_eq!(posts[1].channel_id, DM_CHANNEL);
    assert_eq!(posts[1].content(), "echo: a private word");

    let bot_msg = posts[0].message_id;
    let trigger = t.dc.push_message_create(IncomingMessage::reply_to_bot(
        GUILD_CHANNEL,
        alice(),
        "and a follow-up",
        bot_msg,
    ));
    let posts = t.wait_posts(3).await;
    assert_eq!(posts[2].channel_id, GUILD_CHANNEL);
    assert!(
        posts[2].content().ends_with("and a follow-up"),
        "{}",
        posts[2].content()
    );
    assert_eq!(
        posts[2].body["message_reference"]["message_id"],
        trigger.to_string()
    );

    assert_eq!(t.dc.posts().len(), 3);
    let texts: Vec<String> = t
        .llm
        .requests()
        .iter()
        .map(|r| r.last_user_text())
        .collect();
    assert_eq!(texts.len(), 3, "{texts:?}");
    assert!(
        !texts.iter().any(|x| x.contains("just talking")),
        "{texts:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_replies_split_with_balanced_fences_and_everyone_never_pings() {
    let t = Dc::start().await;
    let code: Vec<String> = (0..110)
        .map(|i| format!("let v{i:03} = {i:03}; // {}", "x".repeat(24)))
        .collect();
    let reply = format!(
        "Here is the program you asked for.\n\n```rust\n{}\n```\n\nThat is all {}.",
        code.join("\n"),
        "y".repeat(100)
    );
    assert!(reply.chars().count() > 4_500, "{}", reply.chars().count());
    t.llm.push(Reply::text(reply));
    t.dc.push_message_create(IncomingMessage::guild_mention(
        GUILD_CHANNEL,
        alice(),
        "write code",
    ));
    let posts = t.wait_text("That is all").await;
    assert!(posts.len() >= 3, "{} posts", posts.len());
    for p in &posts {
        assert!(
            p.content().chars().count() <= 2000,
            "a post of {} characters",
            p.content().chars().count()
        );
        assert_eq!(
            p.content().matches("```").count() % 2,
            0,
            "unbalanced fence in {:?}",
            p.content()
        );
    }
    let lines: Vec<&str> = posts
        .iter()
        .flat_map(|p| p.content().lines())
        .filter(|l| l.starts_with("let v"))
        .collect();
    assert_eq!(
        lines,
        code.iter().map(String::as_str).collect::<Vec<_>>(),
        "every code line once, in order"
    );
    assert!(posts[0].content().starts_with("Here is the program"));
    assert!(posts.last().unwrap().content().contains("That is all"));
    let ids: Vec<u64> = posts.iter().map(|p| p.message_id).collect();
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:?}");

    let before = posts.len();
    t.llm
        .push(Reply::text("Attention @everyone and @here: lunch!"));
    t.dc.push_message_create(IncomingMessage::guild_mention(
        GUILD_CHANNEL,
        alice(),
        "announce lunch",
    ));
    let posts = t.wait_posts(before + 1).await;
    let p = &posts[before];
    assert!(p.content().contains("lunch"), "{}", p.content());
    let parse = p.body["allowed_mentions"]["parse"]
        .as_array()
        .cloned()
        .expect("allowed_mentions.parse is set");
    assert!(
        !parse.iter().any(|v| v == "everyone" || v == "roles"),
        "{}",
        p.body
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_websocket_reconnects_and_a_later_message_is_answered() {
    let t = Dc::start().await;
    t.dc.push_message_create(IncomingMessage::guild_mention(
        GUILD_CHANNEL,
        alice(),
        "before the drop",
    ));
    t.wait_posts(1).await;
    t.dc.drop_connection();
    t.wait_sessions(2).await;
    t.dc.push_message_create(IncomingMessage::guild_mention(
        GUILD_CHANNEL,
        alice(),
        "after the drop",
    ));
    let posts = t.wait_posts(2).await;
    assert_eq!(posts[1].content(), "echo: [alice] after the drop");
    assert!(t.dc.connections() >= 2);
    assert_eq!(t.llm.request_count(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_between_intake_and_reply_delivers_exactly_one_reply() {
    let mut t = Dc::start().await;
    t.llm
        .push(Reply::text("too late").with_delay(Duration::from_secs(120)));
    t.dc.push_message_create(IncomingMessage::guild_mention(
        GUILD_CHANNEL,
        alice(),
        "survive the crash",
    ));
    t.llm.wait_for_requests(1, WAIT).await.unwrap();
    t.gw.kill9();

    t.gw = spawn(&t.env);
    let posts = t.wait_text("survive the crash").await;
    t.gw.sigterm();
    assert!(t.gw.wait_exit(WAIT).0.success());
    assert_eq!(t.dc.posts().len(), 1, "{posts:?}");
    assert_eq!(posts[0].content(), "echo: [alice] survive the crash");
    let reqs = t.llm.requests();
    assert_eq!(reqs.len(), 2, "the killed turn and the resumed one");
    assert!(reqs[1].last_user_text().ends_with("survive the crash"));
    assert!(
        !platform::logs(&t.env).contains(TOKEN),
        "the bot token leaked into the log"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_attached_file_reaches_the_model_as_a_file_in_the_inbox() {
    let t = Dc::start().await;
    let mut m = IncomingMessage::dm(DM_CHANNEL, alice(), "what is this?");
    m.attachments
        .push(t.dc.add_attachment(77, "cat.png", b"PNG cat", "image/png"));
    t.dc.push_message_create(m);
    t.wait_posts(1).await;
    let text = t.llm.requests()[0].last_user_text();
    let path = text
        .lines()
        .find_map(|l| l.strip_prefix("[attachment: Image "))
        .map(|l| l.trim_end_matches(']'))
        .unwrap_or_else(|| panic!("no attachment: {text}"));
    let inbox = t.env.dir.path().join("workspace").join("inbox");
    assert!(std::path::Path::new(path).starts_with(&inbox), "{path}");
    assert_eq!(std::fs::read(path).expect("downloaded"), b"PNG cat");
    // (The test's LLM key variable is not set: the start-up said so.)
    assert!(
        platform::logs(&t.env).contains("llm: $SB_TEST_LLM_KEY is not set"),
        "{}",
        platform::logs(&t.env)
    );
    let gets = t.dc.file_gets();
    assert_eq!(gets.len(), 1);
    assert_eq!(
        gets[0].authorization, None,
        "the bot token stays with the API"
    );
}

/// A forward carries its message in `message_snapshots`, with no author: it reaches the
/// model marked as someone else's words, not as the sender's own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forwarded_message_reaches_the_model_marked_as_forwarded() {
    let t = Dc::start().await;
    let trigger = t.dc.push_message_create(IncomingMessage::dm_forward(
        DM_CHANNEL,
        alice(),
        "meeting moved to 3pm",
    ));
    let posts = t.wait_posts(1).await;
    assert_eq!(posts[0].channel_id, DM_CHANNEL);
    assert_eq!(
        t.llm.requests()[0].last_user_text(),
        "(forwarded message)\nmeeting moved to 3pm"
    );
    // Answered as a reply to the forward, not to the message forwarded (elsewhere).
    assert_eq!(
        posts[0].body["message_reference"]["message_id"],
        trigger.to_string()
    );
}

/// A mention of the bot mid-sentence addresses it, and the model reads its name there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mention_mid_sentence_reads_as_the_bots_name() {
    let t = Dc::start().await;
    let mut m = IncomingMessage::guild(
        GUILD_CHANNEL,
        alice(),
        &format!("hey <@{BOT_USER_ID}> what's up, <@!{BOT_USER_ID}>?"),
    );
    m.mentions.push(Author::this_bot());
    t.dc.push_message_create(m);
    t.wait_posts(1).await;
    assert_eq!(
        t.llm.requests()[0].last_user_text(),
        "[alice] hey @switchboard what's up, @switchboard?"
    );
}

/// In a forum post the model reads the post's title with its first message; once the bot
/// has answered there (a post is a thread), a follow-up needs no mention, while plain talk in
/// a channel still does (`group_policy = "mention"`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forum_posts_title_reaches_the_model_and_follow_ups_there_need_no_mention() {
    let t = Dc::start().await;
    t.dc.add_channel(FakeChannel::forum(FORUM_CHANNEL, "help"));
    let post = t.dc.push_forum_post(
        FORUM_CHANNEL,
        "how do I X",
        IncomingMessage::guild_mention(0, alice(), "I tried Y"),
    );
    let posts = t.wait_posts(1).await;
    assert_eq!(posts[0].channel_id, post, "answered in the post");
    assert_eq!(
        t.llm.requests()[0].last_user_text(),
        "[alice] (forum post titled \"how do I X\")\nI tried Y"
    );

    t.dc.push_message_create(IncomingMessage::guild(
        GUILD_CHANNEL,
        alice(),
        "chatting elsewhere",
    ));
    t.dc.push_message_create(IncomingMessage::guild(
        post,
        alice(),
        "and what about the second bug?",
    ));
    let posts = t.wait_posts(2).await;
    assert_eq!(posts[1].channel_id, post);
    assert_eq!(
        posts[1].content(),
        "echo: [alice] and what about the second bug?"
    );
    let texts: Vec<String> = t
        .llm
        .requests()
        .iter()
        .map(|r| r.last_user_text())
        .collect();
    assert_eq!(texts.len(), 2, "{texts:?}");
}
