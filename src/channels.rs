//! Starting the platform adapters that are enabled and have credentials, each in its own
//! task: one failing never stops the others.

use std::sync::Arc;

use switchboard_channel::{Channel, InboundSender};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::bus::ChannelRegistry;
use crate::gateway::Shared;

/// Register `ch` and run it until shutdown; a fatal error leaves it down with a reason.
#[allow(dead_code)]
fn launch(
    shared: &Arc<Shared>,
    registry: &ChannelRegistry,
    ch: Arc<dyn Channel>,
    shutdown: &CancellationToken,
    tracker: &TaskTracker,
) {
    let name = ch.name().to_string();
    registry
        .write()
        .unwrap_or_else(|p| p.into_inner())
        .insert(name.clone(), ch.clone());
    shared.health.set(&name, false, "connecting");
    let inbound = InboundSender::new(shared.sink.clone());
    let stop = shutdown.child_token();
    let health = shared.health.clone();
    tracker.spawn(async move {
        match ch.run(inbound, stop).await {
            Ok(()) => tracing::info!(channel = %name, "stopped"),
            Err(e) => {
                tracing::error!(channel = %name, "channel is down: {e}");
                health.set(&name, false, &e.to_string());
            }
        }
    });
}

/// Start every enabled channel whose credentials are set, logging why others are not.
pub fn start_all(
    shared: &Arc<Shared>,
    registry: &ChannelRegistry,
    shutdown: &CancellationToken,
    tracker: &TaskTracker,
) {
    let _ = (shared, registry, shutdown, tracker);
    tracing::info!("channel adapters: none built into this binary");
}
