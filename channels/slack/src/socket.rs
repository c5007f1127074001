//! Socket Mode: slack-morphism's sockets under our own supervision.
//!
//! slack-morphism's clients manager opens the sockets (`apps.connections.open` →
//! websocket, `socket_connections` of them) and reopens one on a `disconnect` message, a
//! closed or failed socket, or missing pongs; each socket's frames go to [`Frames`], which
//! publishes an envelope's event durably before answering its ack (none when publishing
//! failed: Slack redelivers), and keeps track of the open sockets (readiness, catch-up).
//!
//! Around it: a watchdog that rebuilds every socket when nothing at all has arrived for
//! `socket_idle_timeout`, and a prompt return on shutdown (slack-morphism's `serve()` is not
//! used: it installs its own signal handlers).

use std::sync::Arc;
use std::time::Duration;

use slack_morphism::listener::SlackClientEventsListenerEnvironment;
use slack_morphism::socket_mode::clients_manager::SlackSocketModeClientsManagerFactory;
use slack_morphism::{SlackApiToken, SlackApiTokenValue, SlackClientSocketModeConfig};
use switchboard_channel::ChannelError;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::Shared;
use crate::frames::Frames;
use crate::web::WebError;

/// Longest wait for the app token's check before the sockets are left to try on their own.
const CHECK_WAIT: Duration = Duration::from_secs(10);

/// Ask `apps.connections.open` with the app token before any socket opens: `Err` when Slack
/// refuses the token. Anything else (a 5xx, no answer in [`CHECK_WAIT`]) is left to the
/// sockets, which keep trying.
pub(crate) async fn check_app_token(sh: &Shared, app_token: &str) -> Result<(), WebError> {
    match tokio::time::timeout(CHECK_WAIT, sh.web.check_app_token(app_token)).await {
        Ok(Err(e)) if e.is_auth() => Err(e),
        Ok(Err(e)) => {
            warn!(error = %e, "slack apps.connections.open failed; will keep trying");
            Ok(())
        }
        Err(_) => {
            warn!("slack apps.connections.open did not answer in time; will keep trying");
            Ok(())
        }
        Ok(Ok(())) => Ok(()),
    }
}

/// Run Socket Mode until `shutdown` (the app token checked by [`check_app_token`]).
pub(crate) async fn run(
    sh: Arc<Shared>,
    app_token: &str,
    shutdown: CancellationToken,
) -> Result<(), ChannelError> {
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
        let env = Arc::new(SlackClientEventsListenerEnvironment::new(sh.web.client()));
        let manager = env
            .client
            .http_api
            .connector
            .new_clients_manager(env.clone());
        let frames = Frames::new(sh.clone(), shutdown.clone());
        frames.serve(&manager);
        if let Err(e) = manager
            .register_new_token(&sm_config, token.clone(), frames.clone())
            .await
        {
            warn!(error = %e, "slack socket mode: could not register the app token");
        }
        sh.touch();
        manager.start().await;
        info!("slack socket mode started");
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => {
                    frames.retire();
                    manager.shutdown().await;
                    return Ok(());
                }
                _ = tokio::time::sleep(check_every) => {
                    if sh.idle_for() >= cfg.socket_idle_timeout {
                        warn!(idle = ?sh.idle_for(), open = frames.open_count(),
                            "slack socket mode silent; reconnecting");
                        sh.set_connected(false, "socket mode silent; reconnecting");
                        frames.retire();
                        manager.shutdown().await;
                        break;
                    }
                }
            }
        }
    }
}
