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
//! newer live events are held (`hold`: left unacknowledged, Slack sends them again; at most
//! [`LIVE_HOLD`], then they go through and the fetched ones follow). A catch-up that cannot
//! be had in full (a page that keeps failing, a bus that keeps refusing) publishes nothing
//! more and is tried again from the same point (`recent`'s unfinished mark), with backoff,
//! until it succeeds — also after a restart. Not caught up on: replies in threads the bot
//! had no part in whose root is older than the gap (a mention there is missed, unless Slack
//! redelivers it), conversations quiet for a day, edits and deletions. A page Slack refuses
//! for good (`missing_scope`, `not_in_channel`) is said in the log, once per missing scope,
//! and not asked again this run.

use std::collections::{BTreeMap, HashSet};
use std::future::Future;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use serde_json::{Value, json};
use switchboard_channel::SendError;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::hold::Holds;
use crate::queue::{Job, Queue};
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
/// Reply pages read per thread (oldest first).
const MAX_THREAD_PAGES: usize = 10;
/// Retries of one page over a rate limit or a passing fault (5xx, network).
const RETRIES: u32 = 3;
/// Longest `Retry-After` waited for before giving the conversation up.
const MAX_WAIT: Duration = Duration::from_secs(60);
/// Longest time a conversation's live events are held (left unacknowledged) for its
/// catch-up, from the first one held: Slack retries an event after about 1 and 5 minutes,
/// so the retry of every event held gets in.
pub(crate) const LIVE_HOLD: Duration = Duration::from_secs(30);
/// A conversation whose catch-up failed is tried again after `catch_up_backoff` × this,
/// doubling up to [`MAX_RETRY_WAIT`].
const RETRY_FACTOR: u32 = 30;
const MAX_RETRY_WAIT: Duration = Duration::from_secs(15 * 60);
/// How often the state file is written while something changed.
const SAVE_EVERY: Duration = Duration::from_secs(5);

/// What the catch-ups share with intake.
#[derive(Default)]
pub(crate) struct State {
    pub recent: Recent,
    pub holds: Holds,
    /// The conversations waiting for their catch-up.
    pub queue: Queue,
    /// The history scopes Slack said the token lacks: said once, not asked again this run.
    refused: Mutex<HashSet<&'static str>>,
}

/// Plan a catch-up: the conversations to ask, each held from now on. Call where no live
/// event of them can slip in before (the `hello`, before intake opens).
pub(crate) fn plan(sh: &Shared) -> Vec<Job> {
    let state = &sh.catch_up;
    state
        .recent
        .new_session(Instant::now())
        .into_iter()
        .map(|gap| {
            let place = Some(state.holds.reserve(&gap.channel));
            Job {
                gap,
                place,
                attempt: 0,
            }
        })
        .collect()
}

/// Run a planned catch-up in the background, until done or `shutdown`.
pub(crate) fn start(sh: Arc<Shared>, todo: Vec<Job>, shutdown: CancellationToken) {
    if todo.is_empty() {
        return;
    }
    info!(
        conversations = todo.len(),
        "slack: connection back; fetching what was sent meanwhile"
    );
    for job in todo {
        sh.catch_up.queue.push(job);
    }
    spawn_workers(&sh, &shutdown);
}

/// Workers for the jobs waiting, [`PARALLEL`] at most.
fn spawn_workers(sh: &Arc<Shared>, shutdown: &CancellationToken) {
    for _ in 0..sh.catch_up.queue.len() {
        if !sh.catch_up.queue.add_worker(PARALLEL) {
            break;
        }
        tokio::spawn(worker(sh.clone(), shutdown.clone()));
    }
}

/// Run jobs from the queue until it is empty or `shutdown`.
async fn worker(sh: Arc<Shared>, shutdown: CancellationToken) {
    while let Some(job) = sh.catch_up.queue.next() {
        tokio::select! {
            _ = run(&sh, job, &shutdown) => {}
            // What is left is fetched after the next start (the unfinished marks).
            _ = shutdown.cancelled() => {
                sh.catch_up.queue.quit();
                return;
            }
        }
    }
}

/// One conversation's catch-up; a failed one is tried again later.
async fn run(sh: &Arc<Shared>, job: Job, shutdown: &CancellationToken) {
    let _done = match job.place {
        Some(place) => Some(place.wait().await),
        None => None,
    };
    match conversation(sh, &job.gap).await {
        Outcome::Done => sh.catch_up.recent.finished(&job.gap),
        Outcome::Refused => {}
        Outcome::Failed => retry_later(sh, job.gap.channel, job.attempt + 1, shutdown),
    }
}

/// Queue `channel` again after a backoff, from its unfinished mark (without holding its
/// live events: they already went ahead of the missed messages).
fn retry_later(sh: &Arc<Shared>, channel: String, attempt: u32, shutdown: &CancellationToken) {
    let base = sh.cfg.catch_up_backoff * RETRY_FACTOR;
    let wait = base
        .saturating_mul(1 << attempt.saturating_sub(1).min(16))
        .min(MAX_RETRY_WAIT);
    warn!(%channel, retry_in = ?wait, "slack: the messages sent while disconnected could not \
        all be fetched and published; trying again later");
    let (sh, shutdown) = (sh.clone(), shutdown.clone());
    tokio::spawn(async move {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(wait) => {}
        }
        let state = &sh.catch_up;
        // Done meanwhile by a later catch-up, or already waiting for one.
        let Some(gap) = state.recent.unfinished(&channel) else {
            return;
        };
        if state.queue.waiting(&channel) {
            return;
        }
        state.queue.push(Job {
            gap,
            place: None,
            attempt,
        });
        spawn_workers(&sh, &shutdown);
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

/// How a conversation's catch-up ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    /// Everything fetched was taken in.
    Done,
    /// Slack refuses it for good (missing scope, the bot left): not tried again this run.
    Refused,
    /// A page could not be had, or the bus refused a message: tried again later.
    Failed,
}

/// Catch up on one conversation. Nothing is published unless every page was had, so a
/// retry publishes the missed messages in order.
async fn conversation(sh: &Arc<Shared>, gap: &Gap) -> Outcome {
    let channel = gap.channel.as_str();
    if sh.catch_up.refused().contains(scope(gap)) {
        debug!(%channel, "slack: not catching up (no history scope)");
        return Outcome::Refused;
    }
    let mut found: BTreeMap<Ts, Value> = BTreeMap::new();
    let mut threads = gap.threads.clone();
    let mut cursor: Option<String> = None;
    for page_no in 1..=MAX_PAGES {
        let page = fetch(sh, gap, || {
            sh.web
                .history_after(channel, gap.last.as_str(), cursor.as_deref())
        })
        .await;
        let page = match page {
            Ok(page) => page,
            Err(outcome) => return outcome,
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
        match thread(sh, gap, &root, &oldest, &mut found).await {
            Outcome::Failed => return Outcome::Failed,
            // A thread Slack will not show (deleted): the others still count.
            Outcome::Refused | Outcome::Done => {}
        }
    }
    if found.is_empty() {
        return Outcome::Done;
    }
    info!(%channel, messages = found.len(), "slack: messages sent while disconnected");
    for (ts, m) in found {
        let callback = as_event(gap, &ts, m);
        if !take_in(sh, &callback).await {
            return Outcome::Failed;
        }
    }
    Outcome::Done
}

/// The replies of thread `root` after `oldest`, every page (oldest first), into `found`.
async fn thread(
    sh: &Arc<Shared>,
    gap: &Gap,
    root: &Ts,
    oldest: &Ts,
    found: &mut BTreeMap<Ts, Value>,
) -> Outcome {
    let channel = gap.channel.as_str();
    let mut cursor: Option<String> = None;
    for _ in 0..MAX_THREAD_PAGES {
        let page = fetch(sh, gap, || {
            sh.web
                .replies_after(channel, root.as_str(), oldest.as_str(), cursor.as_deref())
        })
        .await;
        let page = match page {
            Ok(page) => page,
            Err(outcome) => return outcome,
        };
        for m in page.messages.iter() {
            if let Some(ts) = ts_of(m).filter(|ts| ts > oldest && ts != root) {
                found.entry(ts).or_insert_with(|| m.clone());
            }
        }
        cursor = page.next_cursor().map(str::to_string);
        if !page.has_more || cursor.is_none() {
            return Outcome::Done;
        }
    }
    let most = MAX_THREAD_PAGES * crate::web::CATCH_UP_PAGE;
    warn!(%channel, thread = root.as_str(), "slack: more than {most} replies came in a thread \
        while disconnected; the newest are not answered");
    Outcome::Done
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
            Err(IntakeError::NotRunning(_)) => return false,
            Err(e) => {
                warn!(error = %e, attempt, "slack: publishing a message sent while disconnected");
                tokio::time::sleep(Duration::from_millis(200 << attempt)).await;
            }
        }
    }
    warn!(
        "slack: the bus refused a message sent while disconnected 5 times; it and the \
        conversation's later fetched messages wait for the next try"
    );
    false
}

/// One page, tried again [`RETRIES`] times over a rate limit (after its `Retry-After`) or a
/// passing fault; `Err` when it cannot be had (said in the log).
async fn fetch<F, Fut>(sh: &Shared, gap: &Gap, mut call: F) -> Result<Page, Outcome>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Page, WebError>>,
{
    let mut backoff = sh.cfg.catch_up_backoff;
    let mut retry = 0;
    loop {
        let err = match call().await {
            Ok(page) => return Ok(page),
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
            _ => return Err(sh.catch_up.refused_page(gap, &err)),
        }
    }
}

impl State {
    fn refused(&self) -> std::sync::MutexGuard<'_, HashSet<&'static str>> {
        self.refused.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Say why a page of `gap` could not be had, and whether to try again: a missing scope
    /// is said once, a conversation the bot left is forgotten.
    fn refused_page(&self, gap: &Gap, err: &WebError) -> Outcome {
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
                Outcome::Refused
            }
            WebError::Api(code) if code == "not_in_channel" || code == "channel_not_found" => {
                info!(%channel, %code, "slack: no catch-up of a conversation the bot left");
                self.recent.forget(channel);
                Outcome::Refused
            }
            WebError::Api(code) if code == "thread_not_found" => {
                debug!(%channel, "slack: a thread to catch up on is gone");
                Outcome::Refused
            }
            e => {
                warn!(%channel, error = %e, "slack: could not fetch the messages sent while \
                    disconnected; tried again later");
                Outcome::Failed
            }
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
