//! Starting the platform adapters that are enabled and have credentials, each in its own
//! task: one failing never stops the others.

use std::sync::Arc;

use switchboard_channel::{Channel, InboundSender};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::bus::ChannelRegistry;
use crate::gateway::Shared;

/// The chat platforms, whatever this build serves: where strangers can write to the bot
/// (pairing, `allow_from`, owners).
pub const PLATFORMS: [&str; 3] = ["telegram", "discord", "slack"];

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

/// Whether `key` names a group chat, where its form tells (each adapter knows its keys: a
/// Telegram group's id is negative, a Slack DM's starts with `D`); the API and the terminal
/// are one person's. `None` where the key cannot tell (Discord's channel ids).
pub fn key_is_group(key: &switchboard_channel::ChatKey) -> Option<bool> {
    match key.channel.as_str() {
        #[cfg(feature = "telegram")]
        "telegram" => switchboard_telegram::is_group_key(key),
        #[cfg(feature = "slack")]
        "slack" => switchboard_slack::is_group_key(key),
        "api" | "cli" => Some(false),
        _ => None,
    }
}

/// Whether `key`'s chat id has the form its channel's ids take (a Telegram chat is a
/// number, a Discord channel a snowflake, a Slack conversation an id or a name with an
/// optional thread `ts`): a job or heartbeat aimed at `telegram:@alice` would call the model
/// at each run for a reply the platform refuses. `Err` says what a key looks like. Channels
/// of other names, or not built in, pass.
pub fn check_chat_id(key: &switchboard_channel::ChatKey) -> Result<(), String> {
    // Each adapter knows its keys: what its sending parses.
    let (ok, form) = match key.channel.as_str() {
        #[cfg(feature = "telegram")]
        "telegram" => (
            switchboard_telegram::is_chat_key(key),
            "telegram:<chat id>, a number like telegram:123456789 (a group's is negative; \
             a topic adds :topic:<n>); a @username is not a chat id",
        ),
        #[cfg(feature = "discord")]
        "discord" => (
            switchboard_discord::is_channel_key(key),
            "discord:<channel id>, a number like discord:112233445566778899",
        ),
        #[cfg(feature = "slack")]
        "slack" => (
            switchboard_slack::is_conversation_key(key),
            "slack:<conversation id or name> like slack:C0123ABCD (a thread adds \
             :<thread ts>, like slack:C0123ABCD:1700000000.000100)",
        ),
        _ => return Ok(()),
    };
    if ok {
        Ok(())
    } else {
        Err(format!(
            "`{key}` is not a chat of {}: a key is {form}",
            key.channel
        ))
    }
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
                // Named in messages about a refused token (never the token).
                cfg.bot_token_env = s.bot_token_env.clone();
                cfg.app_token_env = s.app_token_env.clone();
                cfg.signing_secret = secret(&s.signing_secret_env);
                cfg.api_url = s.api_url.clone();
                cfg.reply_in_thread = s.reply_in_thread;
                let (ids, names): (Vec<&str>, Vec<&str>) = s
                    .allow_from
                    .iter()
                    .map(|e| e.trim())
                    .filter(|e| *e != "*")
                    .partition(|e| crate::access::id_like(e));
                cfg.names_decide_access = !names.is_empty();
                cfg.ids_let_in = ids.into_iter().map(str::to_string).collect();
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

#[cfg(all(test, feature = "telegram", feature = "discord", feature = "slack"))]
mod tests {
    use super::check_chat_id;

    #[test]
    fn chat_ids_of_each_channel_take_its_form() {
        let check = |k: &str| check_chat_id(&k.parse().unwrap());
        for good in [
            "telegram:123456",
            "telegram:-1001234567890",
            "telegram:-1001234567890:topic:7",
            "discord:987654321",
            "slack:C0123ABC",
            "slack:D0DM00001",
            "slack:G0MPIM001",
            "slack:C0123ABC:1700000000.000100",
            "slack:D0DM00001:1700000000.000100",
            "slack:general",
            "slack:#general",
            "api:alice",
            "cli:local",
            "test:anything",
        ] {
            assert_eq!(check(good), Ok(()), "{good}");
        }
        for bad in [
            "telegram:@alice",
            "telegram:abc",
            "telegram:1:topic:x",
            "discord:general",
            "discord:-5",
            "slack:two words",
            "slack:C0123ABC:latest",
            "slack:C0123ABC:",
        ] {
            let e = check(bad).unwrap_err();
            assert!(e.starts_with(&format!("`{bad}` is not a chat of ")), "{e}");
        }
        assert_eq!(
            check("telegram:@alice").unwrap_err(),
            "`telegram:@alice` is not a chat of telegram: a key is telegram:<chat id>, a number \
             like telegram:123456789 (a group's is negative; a topic adds :topic:<n>); a \
             @username is not a chat id"
        );
    }
}
