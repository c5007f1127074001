//! What the Socket Mode sockets bring, and which of them are open.
//!
//! slack-morphism's clients manager opens the sockets and reconnects them; [`Frames`] is the
//! listener it hands each socket's frames to (in place of slack-morphism's own, whose
//! callbacks do not say which socket a frame came on):
//! - `hello`: that socket is open. The channel counts as connected while at least one is;
//!   the first to open after none was (at start, or after all were lost) starts a catch-up
//!   of what was sent meanwhile (`catch_up`), planned before the socket's next frame is read.
//! - `events_api`: the envelope's `event_callback`, as Slack sent it, goes to intake; the ack
//!   is sent only when that returns `Ok` (published, duplicate, or ignored on purpose), so a
//!   failed publish, or an event held for its conversation's catch-up, leaves the envelope
//!   unacknowledged and Slack redelivers it. Intake never waits for a catch-up: slack-morphism
//!   reads the socket's next frame (and its pongs) only when this returns.
//! - `disconnect`, a closed or failed socket, missed pongs: that socket is closed and the
//!   manager opens a new one.
//! - other envelopes (interactivity, slash commands: not used) are acknowledged; a frame that
//!   is not JSON is logged.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};

use async_trait::async_trait;
use serde_json::{Value, json};
use slack_morphism::socket_mode::clients_manager::SlackSocketModeClientsManager;
use slack_morphism::{SlackSocketModeClientListener, SlackSocketModeWssClientId};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::web::short;
use crate::{Shared, catch_up};

type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// The listener of one clients manager's sockets.
pub(crate) struct Frames {
    sh: Arc<Shared>,
    /// The manager that restarts a closed socket (it owns the sockets, which own this).
    manager: OnceLock<Weak<dyn SlackSocketModeClientsManager + Send + Sync>>,
    /// Sockets that said `hello` and have not closed since.
    open: Mutex<HashSet<SlackSocketModeWssClientId>>,
    /// Catch-ups stop with the channel.
    shutdown: CancellationToken,
    /// The manager was shut down: a late report of its sockets must not touch readiness.
    retired: AtomicBool,
}

impl Frames {
    pub(crate) fn new(sh: Arc<Shared>, shutdown: CancellationToken) -> Arc<Self> {
        Arc::new(Self {
            sh,
            manager: OnceLock::new(),
            open: Mutex::new(HashSet::new()),
            shutdown,
            retired: AtomicBool::new(false),
        })
    }

    /// The manager this listener serves (set once it exists).
    pub(crate) fn serve(&self, manager: &Arc<dyn SlackSocketModeClientsManager + Send + Sync>) {
        let _ = self.manager.set(Arc::downgrade(manager));
    }

    /// The manager is being shut down: from now on its sockets report nothing.
    pub(crate) fn retire(&self) {
        self.retired.store(true, Ordering::Relaxed);
    }

    fn open(&self) -> MutexGuard<'_, HashSet<SlackSocketModeWssClientId>> {
        self.open.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sockets open now.
    pub(crate) fn open_count(&self) -> usize {
        self.open().len()
    }

    fn opened(&self, id: &SlackSocketModeWssClientId) {
        if self.retired.load(Ordering::Relaxed) {
            return;
        }
        let first = {
            let mut open = self.open();
            let first = open.is_empty();
            open.insert(id.clone());
            first
        };
        self.sh.set_connected(true, "socket mode connected");
        if first {
            // Planned here, before this socket's next frame is read: its live events of the
            // conversations caught up on wait for the fetched ones.
            let todo = catch_up::plan(&self.sh);
            catch_up::start(self.sh.clone(), todo, self.shutdown.clone());
        }
    }

    fn closed(&self, id: &SlackSocketModeWssClientId) {
        let left = {
            let mut open = self.open();
            if !open.remove(id) {
                return;
            }
            open.len()
        };
        info!(socket = %id.to_string(), open = left, "slack socket closed; reconnecting");
        if left == 0 && !self.retired.load(Ordering::Relaxed) {
            // The next `hello` says connected again.
            self.sh.set_connected(false, "socket mode reconnecting");
        }
    }

    async fn restart(&self, id: &SlackSocketModeWssClientId) {
        if let Some(m) = self.manager.get().and_then(Weak::upgrade) {
            m.restart_client(id).await;
        }
    }

    /// Publish, then answer the ack (`None`: no ack, Slack redelivers).
    async fn envelope(&self, frame: &Value, envelope_id: &str) -> Option<String> {
        let Some(payload) = frame.get("payload").filter(|p| p.is_object()) else {
            warn!(
                envelope = envelope_id,
                "slack events_api envelope without a payload"
            );
            return Some(ack(envelope_id));
        };
        match self.sh.intake(payload).await {
            Ok(()) => Some(ack(envelope_id)),
            // Slack sends it again later; the read loop goes on at once.
            Err(e @ (crate::IntakeError::CatchingUp | crate::IntakeError::NameUnknown)) => {
                debug!(error = %e, "slack event held; envelope left unacknowledged");
                None
            }
            Err(e) => {
                warn!(error = %e, "slack event not published; envelope left unacknowledged");
                None
            }
        }
    }
}

fn ack(envelope_id: &str) -> String {
    json!({ "envelope_id": envelope_id }).to_string()
}

#[async_trait]
impl SlackSocketModeClientListener for Frames {
    async fn on_message(&self, id: &SlackSocketModeWssClientId, body: String) -> Option<String> {
        self.sh.touch();
        let frame: Value = match serde_json::from_str(&body) {
            Ok(v) => v,
            Err(e) => {
                warn!(error = %e, frame = %short(&body), "slack socket mode: a frame that is not JSON");
                return None;
            }
        };
        let envelope_id = frame.get("envelope_id").and_then(Value::as_str);
        match (frame.get("type").and_then(Value::as_str), envelope_id) {
            (Some("hello"), _) => {
                self.opened(id);
                None
            }
            (Some("disconnect"), _) => {
                let reason = frame.get("reason").and_then(Value::as_str).unwrap_or("");
                debug!(socket = %id.to_string(), reason, "slack asked to reconnect");
                self.closed(id);
                self.restart(id).await;
                None
            }
            (Some("events_api"), Some(env)) => self.envelope(&frame, env).await,
            (kind, Some(env)) => {
                // Interactivity and slash commands are not used: acknowledged, not answered.
                debug!(
                    kind = kind.unwrap_or("?"),
                    "slack socket mode envelope ignored"
                );
                Some(ack(env))
            }
            (kind, None) => {
                warn!(
                    kind = kind.unwrap_or("?"),
                    "slack socket mode: an unknown frame"
                );
                None
            }
        }
    }

    async fn on_error(&self, error: BoxError) {
        // A failed read is followed by `on_disconnect`; the others (a binary frame…) leave
        // the socket open.
        warn!(error = %short(&error.to_string()), "slack socket mode error");
    }

    async fn on_disconnect(&self, id: &SlackSocketModeWssClientId) {
        self.closed(id);
        self.restart(id).await;
    }
}
