//! Socket Mode: slack-morphism's listener under our own supervision.
//!
//! slack-morphism opens the sockets (`apps.connections.open` → websocket), reconnects on a
//! `disconnect` message, a closed or failed socket, or missing pongs, and sends the ack of
//! an `events_api` envelope only after our push callback returns `Ok` — or when the error
//! handler answers with a success status. Our callback publishes durably first and returns
//! an error when publishing failed; the error handler then answers 500, so the envelope is
//! **not** acknowledged and Slack redelivers it.
//!
//! Around it: a watchdog that rebuilds every socket when nothing at all has arrived for
//! `socket_idle_timeout`, `set_connected` on `hello` and on a lost socket, and a prompt
//! return on shutdown (`serve()` is not used: it installs its own signal handlers).

use std::sync::Arc;
use std::time::Duration;

use slack_morphism::errors::SlackClientError;
use slack_morphism::events::SlackPushEventCallback;
use slack_morphism::listener::{SlackClientEventsListenerEnvironment, SlackClientEventsUserState};
use slack_morphism::{
    SlackApiToken, SlackApiTokenValue, SlackClient, SlackClientSocketModeConfig,
    SlackClientSocketModeListener, SlackSocketModeListenerCallbacks, UserCallbackResult,
};
use switchboard_channel::ChannelError;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::web::{Connector, short};
use crate::{IntakeError, Shared};

type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

async fn shared_of(state: &SlackClientEventsUserState) -> Option<Arc<Shared>> {
    let guard = state.read().await;
    guard.get_user_state::<Arc<Shared>>().cloned()
}

/// On `hello`: the socket is up. (slack-morphism does not export the hello event's type,
/// so this takes the fields it needs after a closure receives the event.)
async fn on_hello(state: SlackClientEventsUserState) {
    if let Some(sh) = shared_of(&state).await {
        sh.touch();
        sh.set_connected(true, "socket mode connected");
    }
}

/// Publish before returning: slack-morphism acks only after this returns `Ok`.
async fn on_push(
    ev: SlackPushEventCallback,
    _client: Arc<SlackClient<Connector>>,
    state: SlackClientEventsUserState,
) -> UserCallbackResult<()> {
    let Some(sh) = shared_of(&state).await else {
        return Err(Box::new(IntakeError::NotRunning));
    };
    sh.touch();
    // Back to JSON, so Socket Mode and the Events API share one set of rules.
    let value = serde_json::to_value(&ev)?;
    sh.intake(&value).await.map_err(|e| Box::new(e) as BoxError)
}

/// Called by slack-morphism for callback errors (its answer decides the ack) and for socket
/// errors (answer ignored). Never a success status: a failed publish must not be acked.
fn on_error(
    err: BoxError,
    _client: Arc<SlackClient<Connector>>,
    state: SlackClientEventsUserState,
) -> http::StatusCode {
    if let Some(e) = err.downcast_ref::<IntakeError>() {
        warn!(error = %e, "slack event not published; envelope left unacknowledged");
    } else if socket_lost(&err) {
        warn!(error = %short(&err.to_string()), "slack socket lost; reconnecting");
        // The next `hello` says connected again.
        if let Ok(guard) = state.try_read() {
            if let Some(sh) = guard.get_user_state::<Arc<Shared>>() {
                sh.set_connected(false, "socket mode reconnecting");
            }
        }
    } else {
        // A frame that did not parse, a binary frame…: the socket itself is still up.
        warn!(error = %short(&err.to_string()), "slack socket mode error");
    }
    http::StatusCode::INTERNAL_SERVER_ERROR
}

/// Whether a socket error means the socket is gone. slack-morphism (2.31) reports a failed
/// read as a `SocketModeProtocolError` "Slack WSS error: …" and then reconnects; its other
/// errors (unparsable or binary frames, callback errors) leave the socket open.
fn socket_lost(err: &BoxError) -> bool {
    match err.downcast_ref::<SlackClientError>() {
        Some(SlackClientError::SocketModeProtocolError(e)) => {
            e.message.starts_with("Slack WSS error")
        }
        _ => false,
    }
}

/// Run Socket Mode until `shutdown`.
pub(crate) async fn run(
    sh: Arc<Shared>,
    app_token: &str,
    shutdown: CancellationToken,
) -> Result<(), ChannelError> {
    match sh.web.check_app_token(app_token).await {
        Err(e) if e.is_auth() => {
            sh.set_connected(false, "app token refused");
            return Err(ChannelError::Unauthorized(format!(
                "slack app token refused by apps.connections.open: {e}"
            )));
        }
        Err(e) => warn!(error = %e, "slack apps.connections.open failed; will keep trying"),
        Ok(()) => {}
    }
    let token = SlackApiToken::new(SlackApiTokenValue(app_token.to_string()));
    let cfg = &sh.cfg;
    let ping = cfg.socket_ping_interval.as_secs().max(1);
    let sm_config = SlackClientSocketModeConfig::new()
        .with_max_connections_count(cfg.socket_connections.max(1))
        .with_initial_backoff_in_seconds(1)
        .with_reconnect_timeout_in_seconds(cfg.socket_reconnect_delay.as_secs().max(1))
        .with_ping_interval_in_seconds(ping)
        .with_ping_failure_threshold_times(3);
    let check_every =
        (cfg.socket_idle_timeout / 4).clamp(Duration::from_millis(50), Duration::from_secs(60));
    loop {
        let env = Arc::new(
            SlackClientEventsListenerEnvironment::new(sh.web.client())
                .with_error_handler(on_error)
                .with_user_state(sh.clone()),
        );
        let callbacks = SlackSocketModeListenerCallbacks::new()
            .with_hello_events(|_hello, _client, state| on_hello(state))
            .with_push_events(on_push);
        let listener = SlackClientSocketModeListener::new(&sm_config, env, callbacks);
        if let Err(e) = listener.listen_for(&token).await {
            warn!(error = %e, "slack socket mode: could not register the app token");
        }
        sh.touch();
        listener.start().await;
        info!("slack socket mode started");
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => {
                    listener.shutdown().await;
                    return Ok(());
                }
                _ = tokio::time::sleep(check_every) => {
                    if sh.idle_for() >= cfg.socket_idle_timeout {
                        warn!(idle = ?sh.idle_for(), "slack socket mode silent; reconnecting");
                        sh.set_connected(false, "socket mode silent; reconnecting");
                        listener.shutdown().await;
                        break;
                    }
                }
            }
        }
    }
}
