//! Starting the platform adapters that are enabled and have credentials, each in its own
//! task: one failing never stops the others.

use std::sync::Arc;

use switchboard_channel::{Channel, InboundSender};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::bus::ChannelRegistry;
use crate::gateway::Shared;

/// The channels this build serves, by the name their chat keys start with: the HTTP API,
/// the terminal, and each adapter compiled in (whether or not the config enables it now).
pub fn built_in() -> Vec<&'static str> {
    let mut names = vec!["api", "cli"];
    #[cfg(feature = "discord")]
    names.push("discord");
    #[cfg(feature = "slack")]
    names.push("slack");
    #[cfg(feature = "telegram")]
    names.push("telegram");
    names
}

/// Chats of the HTTP API and the terminal get the answers to their own requests and
/// nothing else: no reminder, heartbeat or `message` can reach them unasked.
pub fn answers_only(key: &switchboard_channel::ChatKey) -> bool {
    matches!(key.channel.as_str(), "api" | "cli")
}

/// Whether the config switches `channel` off (`channels.<name>.enabled = false`).
pub fn switched_off(config: &crate::config::Config, channel: &str) -> bool {
    let c = &config.channels;
    match channel {
        "telegram" => !c.telegram.enabled,
        "discord" => !c.discord.enabled,
        "slack" => !c.slack.enabled,
        _ => false,
    }
}

/// Register `ch` and run it until shutdown; a fatal error leaves it down with a reason.
#[cfg_attr(
    not(any(feature = "telegram", feature = "discord", feature = "slack")),
    allow(dead_code)
)]
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
    tracing::info!(channel = %name, "starting");
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

/// An enabled channel whose adapter could not be built: logged, and `/readyz` names it.
#[cfg_attr(
    not(any(feature = "telegram", feature = "discord", feature = "slack")),
    allow(dead_code)
)]
fn cannot_start(shared: &Shared, name: &str, e: &dyn std::fmt::Display) {
    tracing::error!(channel = name, "cannot start: {e}");
    shared
        .health
        .set(name, false, &format!("cannot start: {e}"));
}

/// Start every enabled channel whose credentials are set, logging why others are not.
pub fn start_all(
    shared: &Arc<Shared>,
    registry: &ChannelRegistry,
    shutdown: &CancellationToken,
    tracker: &TaskTracker,
) {
    let off = |name: &str, why: String| tracing::info!(channel = name, "not started: {why}");
    #[cfg(any(feature = "telegram", feature = "discord", feature = "slack"))]
    let (c, secret) = (&shared.config.channels, crate::config::secret);

    #[cfg(feature = "telegram")]
    {
        let t = &c.telegram;
        match (t.enabled, secret(&t.token_env)) {
            (false, _) => off("telegram", "disabled in the config".into()),
            (true, None) => off("telegram", format!("${} is not set", t.token_env)),
            (true, Some(token)) => {
                let inbox = shared.config.gateway.workspace.join("inbox");
                let mut cfg =
                    switchboard_telegram::TelegramConfig::new(token, t.api_url.clone(), inbox);
                cfg.pacing = t.pacing;
                cfg.max_message_len = t.max_message_len;
                match switchboard_telegram::TelegramChannel::new(cfg) {
                    Ok(ch) => launch(shared, registry, Arc::new(ch), shutdown, tracker),
                    Err(e) => cannot_start(shared, "telegram", &e),
                }
            }
        }
    }
    #[cfg(not(feature = "telegram"))]
    off(
        "telegram",
        "this binary was built without the `telegram` feature".into(),
    );

    #[cfg(feature = "discord")]
    {
        let d = &c.discord;
        match (d.enabled, secret(&d.token_env)) {
            (false, _) => off("discord", "disabled in the config".into()),
            (true, None) => off("discord", format!("${} is not set", d.token_env)),
            (true, Some(token)) => {
                let mut cfg = switchboard_discord::DiscordConfig::new(token, d.api_url.clone());
                cfg.inbox_dir = Some(shared.config.gateway.workspace.join("inbox"));
                cfg.state_file = Some(shared.config.gateway.data_dir.join("discord-recent.json"));
                cfg.max_message_len = d.max_message_len;
                match switchboard_discord::DiscordChannel::new(cfg) {
                    Ok(ch) => launch(shared, registry, Arc::new(ch), shutdown, tracker),
                    Err(e) => cannot_start(shared, "discord", &e),
                }
            }
        }
    }
    #[cfg(not(feature = "discord"))]
    off(
        "discord",
        "this binary was built without the `discord` feature".into(),
    );

    #[cfg(feature = "slack")]
    {
        let s = &c.slack;
        match (
            s.enabled,
            s.missing_credentials(shared.config.gateway.http_addr().is_some()),
        ) {
            (false, _) => off("slack", "disabled in the config".into()),
            (true, Some(why)) => off("slack", why),
            (true, None) => {
                // Set: `missing_credentials` checked it.
                let token = secret(&s.bot_token_env).unwrap_or_default();
                let mut cfg = switchboard_slack::SlackConfig::new(token);
                cfg.app_token = secret(&s.app_token_env);
                cfg.signing_secret = secret(&s.signing_secret_env);
                cfg.api_url = s.api_url.clone();
                cfg.reply_in_thread = s.reply_in_thread;
                cfg.max_message_len = s.max_message_len;
                cfg.inbox_dir = Some(shared.config.gateway.workspace.join("inbox"));
                cfg.state_file = Some(shared.config.gateway.data_dir.join("slack-recent.json"));
                match switchboard_slack::SlackChannel::new(cfg) {
                    Ok(ch) => {
                        let ch = Arc::new(ch);
                        let _ = shared.slack.set(ch.clone());
                        launch(shared, registry, ch, shutdown, tracker);
                    }
                    Err(e) => cannot_start(shared, "slack", &e),
                }
            }
        }
    }
    #[cfg(not(feature = "slack"))]
    off(
        "slack",
        "this binary was built without the `slack` feature".into(),
    );
    let _ = (shared, registry, shutdown, tracker);
}
