//! Messages sent while the gateway had no connection to Slack.
//!
//! Slack retries an event it could not deliver only a few times over a few minutes; what was
//! sent while every socket was down (or the gateway stopped) for longer never comes. So when
//! the connection is back — the first socket's `hello` after none was open, the start of a
//! run in Socket Mode, and the start of a run for the Events API — each conversation heard
//! from in the last 24 h (the 200 most recently active, see `recent`) is asked what came
//! after the last message handled there:
//! - `conversations.history` with `oldest=<last ts>`, `inclusive=false`: its top-level
//!   messages and thread broadcasts (up to [`MAX_PAGES`] pages of 100);
//! - `conversations.replies` with `oldest` for the threads the bot takes part in there (it
//!   was mentioned in them or answered them), and for the new top-level messages that got
//!   replies meanwhile ([`MAX_THREADS`] threads at most).
//!
//! The messages go, oldest first, through intake exactly as live events do (same rules, same
//! message id, so one Slack also redelivers is published once), while the conversation's
//! newer live events wait (`hold`). Not caught up on: replies in threads the bot had no part
//! in whose root is older than the gap (a mention there is missed), conversations quiet for
//! a day, edits and deletions. A page Slack refuses for good (`missing_scope`,
//! `not_in_channel`) is said in the log, once per missing scope, and not asked again.

use std::collections::{BTreeMap, HashSet};
use std::future::Future;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use futures_util::StreamExt;
use serde_json::{Value, json};
use switchboard_channel::SendError;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::hold::{Holds, Reserved};
use crate::recent::{Gap, Recent, Ts};
use crate::web::{Page, WebError};
use crate::{IntakeError, Shared};

/// Conversations fetched at once.
const PARALLEL: usize = 4;
/// History pages read per conversation (newest first): more is a flood nobody expects
/// answered in full.
const MAX_PAGES: usize = 3;
/// Threads read per conversation.
const MAX_THREADS: usize = 10;
/// Retries of one page over a rate limit or a passing fault (5xx, network).
const RETRIES: u32 = 3;
/// Longest `Retry-After` waited for before giving the conversation up.
const MAX_WAIT: Duration = Duration::from_secs(60);
/// How long a live event waits for its conversation's catch-up before it is left
/// unacknowledged (Slack sends it again). Well under the 30 s after which slack-morphism
/// takes a socket that reads nothing (no pongs) for dead.
pub(crate) const LIVE_HOLD: Duration = Duration::from_secs(10);
/// How often the state file is written while something changed.
const SAVE_EVERY: Duration = Duration::from_secs(5);

/// What the catch-ups share with intake.
#[derive(Default)]
pub(crate) struct State {
    pub recent: Recent,
    pub holds: Holds,
    /// The history scopes Slack said the token lacks: said once, not asked again this run.
    refused: Mutex<HashSet<&'static str>>,
}

/// Plan a catch-up: the conversations to ask, each held from now on. Call where no live
/// event of them can slip in before (the `hello`, before intake opens).
pub(crate) fn plan(sh: &Shared) -> Vec<(Gap, Reserved)> {
    let state = &sh.catch_up;
    state
        .recent
        .new_session(Instant::now())
        .into_iter()
        .map(|gap| {
            let place = state.holds.reserve(&gap.channel);
            (gap, place)
        })
        .collect()
}

/// Run a planned catch-up in the background, until done or `shutdown`.
pub(crate) fn start(sh: Arc<Shared>, todo: Vec<(Gap, Reserved)>, shutdown: CancellationToken) {
    if todo.is_empty() {
        return;
    }
    info!(
        conversations = todo.len(),
        "slack: connection back; fetching what was sent meanwhile"
    );
    tokio::spawn(async move {
        let all = futures_util::stream::iter(todo).for_each_concurrent(PARALLEL, |(gap, place)| {
            let sh = sh.clone();
            async move {
                let _done = place.wait().await;
                conversation(&sh, gap).await;
            }
        });
        tokio::select! {
            _ = all => {}
            // What is left is fetched after the next start (the state file).
            _ = shutdown.cancelled() => {}
        }
    });
}

/// The history scope a conversation needs.
fn scope(gap: &Gap) -> &'static str {
    match gap.kind.as_deref() {
        Some("im") => "im:history",
        Some("mpim") => "mpim:history",
        Some("group") => "groups:history",
        Some(_) => "channels:history",
        None if gap.channel.starts_with('D') => "im:history",
        None if gap.channel.starts_with('G') => "groups:history",
        None => "channels:history",
    }
}

fn ts_of(m: &Value) -> Option<Ts> {
    m.get("ts").and_then(Value::as_str).map(Ts::new)
}

/// Catch up on one conversation.
async fn conversation(sh: &Arc<Shared>, gap: Gap) {
    let channel = gap.channel.as_str();
    if sh.catch_up.refused().contains(scope(&gap)) {
        debug!(%channel, "slack: not catching up (no history scope)");
        return;
    }
    let mut found: BTreeMap<Ts, Value> = BTreeMap::new();
    let mut threads = gap.threads.clone();
    let mut cursor: Option<String> = None;
    for page_no in 1..=MAX_PAGES {
        let Some(page) = fetch(sh, &gap, || {
            sh.web
                .history_after(channel, gap.last.as_str(), cursor.as_deref())
        })
        .await
        else {
            if page_no == 1 {
                return;
            }
            warn!(%channel, "slack: only the newest messages sent while disconnected \
                could be fetched; the older ones are not answered");
            break;
        };
        for m in page.messages.iter() {
            let Some(ts) = ts_of(m).filter(|ts| *ts > gap.last) else {
                continue;
            };
            let replied = m.get("reply_count").and_then(Value::as_u64).unwrap_or(0) > 0;
            if replied && !threads.iter().any(|(root, _)| *root == ts) {
                threads.push((ts.clone(), ts.clone()));
            }
            found.insert(ts, m.clone());
        }
        cursor = page.next_cursor().map(str::to_string);
        if !page.has_more || cursor.is_none() {
            break;
        }
        if page_no == MAX_PAGES {
            let most = MAX_PAGES * crate::web::CATCH_UP_PAGE;
            warn!(%channel, "slack: more than {most} messages came while disconnected; \
                the oldest are not answered");
        }
    }
    threads.truncate(MAX_THREADS);
    for (root, oldest) in threads {
        let Some(page) = fetch(sh, &gap, || {
            sh.web
                .replies_after(channel, root.as_str(), oldest.as_str())
        })
        .await
        else {
            continue;
        };
        for m in page.messages {
            if let Some(ts) = ts_of(&m).filter(|ts| *ts > oldest && *ts != root) {
                found.entry(ts).or_insert(m);
            }
        }
    }
    if found.is_empty() {
        return;
    }
    info!(%channel, messages = found.len(), "slack: messages sent while disconnected");
    for (ts, m) in found {
        let callback = as_event(&gap, &ts, m);
        if !take_in(sh, &callback).await {
            // Not noted handled: fetched again at the next catch-up.
            return;
        }
    }
}

/// A fetched message as the `event_callback` a live one comes in.
fn as_event(gap: &Gap, ts: &Ts, mut m: Value) -> Value {
    m["channel"] = json!(gap.channel);
    if let Some(kind) = &gap.kind {
        m["channel_type"] = json!(kind);
    }
    if m.get("type").is_none() {
        m["type"] = json!("message");
    }
    json!({
        "type": "event_callback",
        "event_id": format!("catch-up:{}:{}", gap.channel, ts.as_str()),
        "event": m,
    })
}

/// Hand one fetched message to intake, retrying a failed publish (no one redelivers it).
async fn take_in(sh: &Arc<Shared>, callback: &Value) -> bool {
    for attempt in 0..5u32 {
        match sh.take_in(callback).await {
            Ok(()) => return true,
            Err(IntakeError::NotRunning) => return false,
            Err(e) => {
                warn!(error = %e, attempt, "slack: publishing a message sent while disconnected");
                tokio::time::sleep(Duration::from_millis(200 << attempt)).await;
            }
        }
    }
    warn!(
        "slack: the bus refused a message sent while disconnected 5 times; it and the \
        conversation's later fetched messages are not answered"
    );
    false
}

/// One page, tried again [`RETRIES`] times over a rate limit (after its `Retry-After`) or a
/// passing fault; `None` when it cannot be had (said in the log).
async fn fetch<F, Fut>(sh: &Shared, gap: &Gap, mut call: F) -> Option<Page>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Page, WebError>>,
{
    let mut backoff = Duration::from_secs(1);
    let mut retry = 0;
    loop {
        let err = match call().await {
            Ok(page) => return Some(page),
            Err(e) => e,
        };
        let wait = match err.to_send_error() {
            SendError::RetryAfter(d) => Some(d),
            SendError::Transient(_) => Some(backoff),
            SendError::Permanent(_) => None,
        };
        match wait {
            Some(d) if retry < RETRIES && d <= MAX_WAIT => {
                info!(channel = %gap.channel, error = %err, retry_in = ?d,
                    "slack: fetching the messages sent while disconnected");
                tokio::time::sleep(d).await;
                retry += 1;
                backoff *= 2;
            }
            _ => {
                sh.catch_up.refused_page(gap, &err);
                return None;
            }
        }
    }
}

impl State {
    fn refused(&self) -> std::sync::MutexGuard<'_, HashSet<&'static str>> {
        self.refused.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Say why `gap` could not be caught up on; a missing scope once, a conversation the
    /// bot left is forgotten.
    fn refused_page(&self, gap: &Gap, err: &WebError) {
        let channel = gap.channel.as_str();
        match err {
            WebError::Api(code) if code == "missing_scope" => {
                let scope = scope(gap);
                if self.refused().insert(scope) {
                    warn!(%channel, %scope, "slack: the bot token lacks the `{scope}` scope \
                        (missing_scope): messages sent while the gateway was disconnected are not \
                        answered in such conversations; add it under OAuth & Permissions and \
                        reinstall the app");
                }
            }
            WebError::Api(code) if code == "not_in_channel" || code == "channel_not_found" => {
                info!(%channel, %code, "slack: no catch-up of a conversation the bot left");
                self.recent.forget(channel);
            }
            e => warn!(%channel, error = %e, "slack: could not fetch the messages sent while \
                disconnected; they are not answered"),
        }
    }
}

/// Write the state file every few seconds while something changed, until `shutdown`; then
/// once more.
pub(crate) async fn keep_saved(sh: Arc<Shared>, path: PathBuf, shutdown: CancellationToken) {
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = tokio::time::sleep(SAVE_EVERY) => {}
        }
        if sh.catch_up.recent.changed() {
            save(&sh, &path).await;
        }
    }
    save(&sh, &path).await;
}

/// Write the state file now (off the runtime's threads) if anything changed.
async fn save(sh: &Arc<Shared>, path: &std::path::Path) {
    let (sh, path) = (sh.clone(), path.to_path_buf());
    let _ = tokio::task::spawn_blocking(move || {
        sh.catch_up
            .recent
            .save(&path, Instant::now(), SystemTime::now())
    })
    .await;
}
