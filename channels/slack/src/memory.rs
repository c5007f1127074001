//! Small bounded memories the adapter keeps between intake and replies.
//!
//! - the threads the bot takes part in or started with a top-level post (so replies there
//!   count as addressed to it), the threads `conversations.replies` said are not, and those
//!   whose lookup failed lately;
//! - the threads whose context (what was said before) the model was given this run;
//! - the last published message per chat key (the one `typing` puts 👀 on);
//! - the messages already given 👀 (at most one reaction per message);
//! - how many chunks of a partly delivered reply went out (so a retry never resends them);
//! - users' names from `users.info`.
//!
//! Each memory is a [`Bounded`] map of at most [`Bounded::DEFAULT_CAP`] entries; the oldest
//! go first. Lost on restart, which only costs a `conversations.replies` lookup or a 👀.

use switchboard_channel::Bounded;

/// What the adapter remembers, behind one mutex (never held across `.await`).
#[derive(Debug, Default)]
pub(crate) struct Memory {
    /// `(channel, thread root ts)` → whether the bot takes part in that thread (`false`:
    /// looked up, someone else's, so not asked again).
    pub threads: Bounded<(String, String), bool>,
    /// Threads whose `conversations.replies` failed (asked again later, see `threads`).
    pub thread_failures: Bounded<(String, String), crate::threads::Failures>,
    /// Threads whose context went with a message that got in (given once a run).
    pub context_given: Bounded<(String, String), ()>,
    /// A `missing_scope` from `conversations.replies` was logged (once a run).
    pub said_missing_scope: bool,
    /// Chat key → `(channel, ts)` of the last published message.
    pub last_message: Bounded<String, (String, String)>,
    /// `channel:ts` of messages that got 👀.
    pub reacted: Bounded<String, ()>,
    /// `OutboundMessage::progress_key` → chunks already delivered.
    pub delivered_chunks: Bounded<u64, usize>,
    /// User id → names from `users.info` (`None`: looked up, unknown).
    pub users: Bounded<String, Option<crate::web::UserNames>>,
    /// User ids being looked up right now; the receiver tells waiters when it is over.
    pub users_pending: Bounded<String, tokio::sync::watch::Receiver<()>>,
}
