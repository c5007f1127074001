//! Threads the bot hears in.
//!
//! - Whether it takes part in one: asked of `conversations.replies` once per thread and
//!   remembered only when Slack lists the thread. A lookup that fails — a refusal such as
//!   `thread_not_found` or `missing_scope`, a 5xx, a rate limit, a timeout — is remembered
//!   as a failure, not as an answer: the thread's next message asks again, and one that
//!   keeps failing is asked at most once per [`Failures::backoff`].
//! - What was said in it before a message: the root and the last few replies, with who
//!   wrote them ([`render`]), given to the model as the message's `reply_to_text` (as
//!   Telegram and Discord give the message replied to) the first time this run takes in a
//!   message of that thread — so a mention in someone else's thread, or a reply under one of
//!   the bot's own posts, does not reach a model that has never seen the thread.

use std::time::{Duration, Instant};

use tracing::{debug, warn};

use crate::recent::Ts;
use crate::web::{self, BotIdentity, ThreadMessage, WebError};
use crate::{Shared, inbound};

/// A thread: `(channel, root ts)`.
pub(crate) type ThreadId = (String, String);

/// The wait after the second failure in a row before a thread is asked again; it doubles
/// with each further failure, up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_secs(5);
/// The longest wait between two lookups of a thread that keeps failing.
const MAX_BACKOFF: Duration = Duration::from_secs(300);

/// Messages of a thread shown as a message's context: the root and the replies just before
/// the message.
const CONTEXT_MESSAGES: usize = 10;
/// Characters of one message shown at most.
const CONTEXT_MESSAGE_CHARS: usize = 500;
/// Characters of the whole context at most (the oldest replies shown go first; the root
/// stays).
const CONTEXT_CHARS: usize = 3000;

/// A thread's context for one message.
pub(crate) struct Context {
    /// The thread, noted as given once the message got in.
    pub thread: ThreadId,
    /// What the model is shown; `None` when nothing came before the message.
    pub text: Option<String>,
}

/// Lookups of one thread that failed in a row, and when the last did.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Failures {
    count: u32,
    last: Instant,
}

impl Failures {
    /// How long after the last failure the thread may be asked again: not at all after the
    /// first (the next message asks), then 5 s, 10 s, 20 s… up to 5 minutes.
    fn backoff(&self) -> Duration {
        match self.count {
            0 | 1 => Duration::ZERO,
            n => FIRST_BACKOFF
                .saturating_mul(1 << (n - 2).min(16))
                .min(MAX_BACKOFF),
        }
    }

    fn may_ask(&self, now: Instant) -> bool {
        now >= self.last + self.backoff()
    }

    fn after(previous: Option<Failures>, now: Instant) -> Failures {
        Failures {
            count: previous.map_or(0, |f| f.count).saturating_add(1),
            last: now,
        }
    }
}

impl Shared {
    /// Read thread `id` (`conversations.replies`) by `until`. `None` when it failed, ran late
    /// or failed lately (see [`Failures`]); the failure is noted, never taken for an answer.
    pub(crate) async fn read_thread(
        &self,
        id: &ThreadId,
        until: tokio::time::Instant,
    ) -> Option<web::Thread> {
        let failed = self.memory().thread_failures.get(id).copied();
        if failed.is_some_and(|f| !f.may_ask(Instant::now())) {
            debug!(channel = %id.0, thread = %id.1, "slack thread lookup failed lately; not asked yet");
            return None;
        }
        let (channel, root) = id;
        let error = match tokio::time::timeout_at(until, self.web.thread(channel, root)).await {
            Ok(Ok(thread)) => {
                if failed.is_some() {
                    self.memory().thread_failures.remove(id);
                }
                return Some(thread);
            }
            Ok(Err(WebError::Api(code))) if code == "missing_scope" => {
                if !std::mem::replace(&mut self.memory().said_missing_scope, true) {
                    warn!(%channel, "slack conversations.replies refused (missing_scope): \
                    replies in threads the bot took part in before a restart are not \
                    recognised, and messages in threads come without what was said before \
                    them; add the channels:history, groups:history, im:history and \
                    mpim:history scopes and reinstall the app");
                }
                code
            }
            Ok(Err(e)) => e.to_string(),
            Err(_) => "no answer in time".to_string(),
        };
        debug!(%channel, thread = %root, %error, "slack conversations.replies failed; asked \
            again by a later message of the thread");
        let mut mem = self.memory();
        let next = Failures::after(mem.thread_failures.get(id).copied(), Instant::now());
        mem.thread_failures.insert(id.clone(), next);
        None
    }

    /// The context of the message `ts` in `thread` (see [`Context`]), unless this run gave
    /// that thread's already: from `read` (the thread as this message's lookup read it) or,
    /// when `ask` (the message is addressed to the bot), from `conversations.replies` by
    /// `until`. `None` when there is none to give, or Slack could not say (the thread's
    /// next message tries again); the message goes in all the same.
    pub(crate) async fn thread_context(
        &self,
        me: &BotIdentity,
        thread: Option<ThreadId>,
        ts: &str,
        read: Option<web::Thread>,
        ask: bool,
        until: tokio::time::Instant,
    ) -> Option<Context> {
        let thread = thread.filter(|t| !self.memory().context_given.contains(t))?;
        let read = match read {
            Some(read) => read,
            None if ask => self.read_thread(&thread, until).await?,
            None => return None,
        };
        let mem = self.memory();
        let name = |user: &str| {
            let names = mem.users.get(&user.to_string()).cloned().flatten();
            names.map(|n| n.display_name)
        };
        let text = render(&read, ts, me, name);
        Some(Context { thread, text })
    }

    /// Is it a thread the bot takes part in? What this run saw is in `threads`; a thread
    /// from before a restart is not, and a reply's `parent_user_id` (when Slack sends one)
    /// names only the root's author (a person, when someone started the thread by
    /// mentioning the bot). So `conversations.replies` is asked: the bot posted the root, is
    /// among those who replied, or posted one of the first messages. Slack's answer, either
    /// way, is kept in `threads`; a lookup that fails or runs late (it and the user lookup
    /// end by `until` together) counts as someone else's thread for this message only.
    /// Returns the thread when it was read, for [`Shared::thread_context`].
    pub(crate) async fn learn_thread(
        &self,
        me: &BotIdentity,
        thread: ThreadId,
        until: tokio::time::Instant,
    ) -> Option<web::Thread> {
        if self.memory().threads.contains(&thread) {
            return None;
        }
        let read = self.read_thread(&thread, until).await?;
        let mine = read.messages.iter().any(|m| by_me(m, me))
            || read
                .messages
                .first()
                .is_some_and(|root| root.reply_users.contains(&me.user_id));
        self.memory().threads.insert(thread, mine);
        Some(read)
    }
}

fn by_me(m: &ThreadMessage, me: &BotIdentity) -> bool {
    m.user.as_deref() == Some(me.user_id.as_str()) || (m.bot_id.is_some() && m.bot_id == me.bot_id)
}

/// The thread as the model is shown it before the message `ts`: a line saying what it is,
/// the root, then the replies before `ts` — the last [`CONTEXT_MESSAGES`]` - 1` of those
/// read, fewer when they would run past [`CONTEXT_CHARS`] — each as `who: text` on one line
/// (`you` for the bot; a person's name when `name` knows it, else their `<@U…>` mention).
/// `None` when the thread holds nothing before `ts`.
pub(crate) fn render(
    read: &web::Thread,
    ts: &str,
    me: &BotIdentity,
    name: impl Fn(&str) -> Option<String>,
) -> Option<String> {
    let this = Ts::new(ts);
    let (root, replies) = read.messages.split_first()?;
    if Ts::new(root.ts.as_str()) >= this {
        return None;
    }
    let earlier: Vec<&ThreadMessage> = replies
        .iter()
        .filter(|m| Ts::new(m.ts.as_str()) < this)
        .collect();
    let who = |m: &ThreadMessage| {
        if by_me(m, me) {
            "you".to_string()
        } else if let Some(u) = &m.user {
            name(u).unwrap_or_else(|| format!("<@{u}>"))
        } else {
            m.username.clone().unwrap_or_else(|| "a bot".into())
        }
    };
    let root_line = format!("{} (started the thread): {}", who(root), said(root));
    let from = earlier.len().saturating_sub(CONTEXT_MESSAGES - 1);
    let mut lines: Vec<String> = earlier[from..]
        .iter()
        .map(|m| format!("{}: {}", who(m), said(m)))
        .collect();
    let compose = |lines: &[String]| {
        let mut notes = vec!["oldest first".to_string()];
        match earlier.len() - lines.len() {
            0 => {}
            1 => notes.push("1 earlier reply left out".into()),
            n => notes.push(format!("{n} earlier replies left out")),
        }
        if read.has_more {
            let n = read.messages.len();
            notes.push(format!("only its first {n} messages were read"));
        }
        let mut out = format!(
            "Earlier in this Slack thread ({}):\n{root_line}",
            notes.join("; ")
        );
        for l in lines {
            out.push('\n');
            out.push_str(l);
        }
        out
    };
    let mut out = compose(&lines);
    while !lines.is_empty() && out.chars().count() > CONTEXT_CHARS {
        lines.remove(0);
        out = compose(&lines);
    }
    Some(out)
}

/// A message's text on one line, at most [`CONTEXT_MESSAGE_CHARS`], with its files counted.
fn said(m: &ThreadMessage) -> String {
    let plain = inbound::plain_text(&m.text);
    let mut text = plain.split_whitespace().collect::<Vec<_>>().join(" ");
    if text.chars().count() > CONTEXT_MESSAGE_CHARS {
        text = text.chars().take(CONTEXT_MESSAGE_CHARS - 1).collect();
        text.push('…');
    }
    let files = match m.files.len() {
        0 => String::new(),
        1 => "a file".into(),
        n => format!("{n} files"),
    };
    match (text.is_empty(), files.is_empty()) {
        (true, true) => "(nothing)".into(),
        (true, false) => format!("(shared {files})"),
        (false, true) => text,
        (false, false) => format!("{text} (with {files})"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn me() -> BotIdentity {
        BotIdentity::test()
    }

    fn msg(ts: &str, user: &str, text: &str) -> ThreadMessage {
        ThreadMessage {
            user: Some(user.into()),
            ts: ts.into(),
            text: text.into(),
            ..Default::default()
        }
    }

    fn thread(messages: Vec<ThreadMessage>) -> web::Thread {
        web::Thread {
            messages,
            has_more: false,
        }
    }

    fn names(u: &str) -> Option<String> {
        (u == "U2").then(|| "Bob".to_string())
    }

    #[test]
    fn the_root_and_the_replies_before_the_message_with_who_wrote_them() {
        let t = thread(vec![
            msg(
                "10.0",
                "U1",
                "Proposal: move\n\nstandup to <https://x.io|10am>",
            ),
            msg("10.1", "U2", "+1"),
            msg("10.2", "UBOT", "Noted."),
            msg("10.4", "U3", "posted after the message"),
        ]);
        let text = render(&t, "10.3", &me(), names).expect("a context");
        assert_eq!(
            text,
            "Earlier in this Slack thread (oldest first):\n\
             <@U1> (started the thread): Proposal: move standup to 10am (https://x.io)\n\
             Bob: +1\n\
             you: Noted."
        );
        assert_eq!(render(&t, "10.0", &me(), names), None, "the root itself");
        let only_root = render(&t, "10.05", &me(), names).expect("the root");
        assert!(
            only_root
                .ends_with("(started the thread): Proposal: move standup to 10am (https://x.io)")
        );
    }

    #[test]
    fn at_most_ten_messages_and_a_few_thousand_characters() {
        let mut messages = vec![msg("1.0", "U1", "the question")];
        for i in 1..=30 {
            messages.push(msg(&format!("1.{i:02}"), "U2", &format!("reply {i}")));
        }
        let t = thread(messages);
        let text = render(&t, "2.0", &me(), |_| None).expect("a context");
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 1 + CONTEXT_MESSAGES, "{text}");
        assert!(lines[0].contains("21 earlier replies left out"), "{text}");
        assert_eq!(lines[2], "<@U2>: reply 22");
        assert_eq!(lines[10], "<@U2>: reply 30");

        let long = "word ".repeat(400);
        let mut messages = vec![msg("1.0", "U1", &long)];
        for i in 1..=9 {
            messages.push(msg(&format!("1.{i}"), "U2", &long));
        }
        let mut t = thread(messages);
        t.has_more = true;
        let text = render(&t, "2.0", &me(), |_| None).expect("a context");
        assert!(text.chars().count() <= CONTEXT_CHARS, "{}", text.len());
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[1].starts_with("<@U1> (started the thread): word"));
        assert!(lines[1].ends_with('…') && lines[1].chars().count() < 600);
        assert!(
            lines[0].contains("earlier replies left out")
                && lines[0].contains("only its first 10 messages were read"),
            "{}",
            lines[0]
        );
        assert_eq!(
            lines.len(),
            6,
            "the heading, the root and 4 replies of 500 characters"
        );
    }

    #[test]
    fn a_failing_thread_is_asked_again_at_once_then_less_and_less_often() {
        let t0 = Instant::now();
        let first = Failures::after(None, t0);
        assert!(first.may_ask(t0), "the next message asks again");
        let second = Failures::after(Some(first), t0);
        assert!(!second.may_ask(t0 + Duration::from_secs(4)));
        assert!(second.may_ask(t0 + Duration::from_secs(5)));
        let third = Failures::after(Some(second), t0);
        assert_eq!(third.backoff(), Duration::from_secs(10));
        let mut many = third;
        for _ in 0..100 {
            many = Failures::after(Some(many), t0);
        }
        assert_eq!(many.backoff(), MAX_BACKOFF, "bounded");
    }
}
