//! The gateway connection's life cycle: preflight (token, gateway URL), a serenity client
//! per attempt (on its own thread, see `client`), a watchdog that restarts a client gone quiet
//! or stuck, backoff, and prompt shutdown.
//!
//! serenity reconnects and resumes on its own after an I/O error, but a shard runner that
//! hits any other websocket error (an EOF without a close frame, for one) ends silently and
//! the bot goes deaf. The watchdog notices: no dispatch and no heartbeat ACK (seen as a
//! change of the runner's latency) for `stall_timeout` → the client is shut down and a new
//! one started with backoff. A runner left `Connecting` (its RESUME could not connect) is
//! spinning over a dead socket (see `client`): the watchdog stops it at once and starts a
//! new session, and what was sent meanwhile is fetched (`backfill`).

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime};

use serenity::all::{ClientBuilder, GatewayError, GatewayIntents, HttpBuilder};
use serenity::cache::Settings as CacheSettings;
use serenity::gateway::ConnectionStage;
use switchboard_channel::{ChannelError, InboundSender, redact};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::DiscordConfig;
use crate::backfill::Recent;
use crate::client::ClientThread;
use crate::handler::{Activity, Handler, HandlerState, NAME};
use crate::memory::Memory;
use crate::rest::{Rest, RestError};

const BACKOFF_MIN: Duration = Duration::from_secs(1);
const BACKOFF_MAX: Duration = Duration::from_secs(60);
/// A runner `Connecting` this long is the spinning one (a live connect shows as `Handshake`
/// or later by the time the manager hears of it).
const STUCK_CONNECTING: Duration = Duration::from_secs(2);
/// The watchdog looks at least this often.
const CHECK_MAX: Duration = Duration::from_secs(1);
/// The state file (see `backfill`) is written at most this often.
const SAVE_EVERY: Duration = Duration::from_secs(5);

/// How one client's life ended.
enum Outcome {
    Shutdown,
    Unauthorized(String),
    /// Discord refuses this bot's setup, so no retry can work (and each costs one of the
    /// 1 000 IDENTIFYs a day, past which Discord resets the token).
    Refused(String),
    Restart {
        reason: String,
        was_ready: bool,
    },
}

/// Keep the gateway connection up until `shutdown`.
pub(crate) async fn run(
    cfg: &DiscordConfig,
    rest: &Rest,
    memory: &Arc<Memory>,
    inbound: InboundSender,
    shutdown: CancellationToken,
) -> Result<(), ChannelError> {
    let recent = Arc::new(match &cfg.state_file {
        Some(path) => Recent::load(
            path,
            std::time::Instant::now(),
            SystemTime::now(),
            &memory.followed,
        ),
        None => Recent::default(),
    });
    let res = keep_up(cfg, rest, memory, inbound, shutdown, &recent).await;
    save_state(cfg.state_file.as_deref(), &recent, memory).await;
    res
}

/// Write what `recent` and the followed threads hold to the state file, off the runtime's
/// threads.
async fn save_state(path: Option<&Path>, recent: &Arc<Recent>, memory: &Arc<Memory>) {
    // Most ticks have nothing to write: no blocking-pool thread for them.
    let Some(path) = path.filter(|_| recent.changed() || memory.followed.changed()) else {
        return;
    };
    let (recent, memory, path) = (recent.clone(), memory.clone(), path.to_path_buf());
    let _ = tokio::task::spawn_blocking(move || {
        let (now, wall) = (std::time::Instant::now(), SystemTime::now());
        recent.save(&path, now, wall, &memory.followed);
    })
    .await;
}

async fn keep_up(
    cfg: &DiscordConfig,
    rest: &Rest,
    memory: &Arc<Memory>,
    inbound: InboundSender,
    shutdown: CancellationToken,
    recent: &Arc<Recent>,
) -> Result<(), ChannelError> {
    let mut backoff = BACKOFF_MIN;
    loop {
        // A slow or unreachable API must not hold up a shutdown.
        let checked = tokio::select! {
            _ = shutdown.cancelled() => {
                inbound.set_connected(NAME, false, "stopped");
                return Ok(());
            }
            checked = preflight(cfg, rest) => checked,
        };
        let outcome = match checked {
            Ok(bot_id) => {
                let state = HandlerState::new(
                    inbound.clone(),
                    bot_id,
                    recent.clone(),
                    memory.clone(),
                    rest.clone(),
                    tokio::runtime::Handle::current(),
                    shutdown.clone(),
                );
                run_client(cfg, Arc::new(state), &shutdown).await
            }
            Err(RestError::Unauthorized) => Outcome::Unauthorized(
                "discord: the bot token was refused (HTTP 401 on /users/@me); check token_env"
                    .into(),
            ),
            Err(e) => Outcome::Restart {
                reason: format!("discord: preflight failed: {e}"),
                was_ready: false,
            },
        };
        match outcome {
            Outcome::Shutdown => {
                inbound.set_connected(NAME, false, "stopped");
                return Ok(());
            }
            Outcome::Unauthorized(why) => {
                tracing::error!("{why}");
                inbound.set_connected(NAME, false, "bot token refused");
                return Err(ChannelError::Unauthorized(why));
            }
            Outcome::Refused(why) => {
                tracing::error!("{why}");
                inbound.set_connected(NAME, false, &why);
                return Err(ChannelError::Other(why));
            }
            Outcome::Restart { reason, was_ready } => {
                // Logged and served by `/readyz`; serenity's errors quote what servers said.
                let reason = redact(&reason);
                if was_ready {
                    backoff = BACKOFF_MIN;
                }
                tracing::error!(retry_in = ?backoff, "{reason}");
                inbound.set_connected(NAME, false, &reason);
                tokio::select! {
                    _ = shutdown.cancelled() => {
                        inbound.set_connected(NAME, false, "stopped");
                        return Ok(());
                    }
                    _ = tokio::time::sleep(backoff) => {}
                }
                backoff = (backoff * 2).min(BACKOFF_MAX);
            }
        }
    }
}

/// What to do about a gateway close that no retry can mend, or `None` for the others.
fn refused_setup(e: &GatewayError) -> Option<String> {
    let what = match e {
        GatewayError::DisallowedGatewayIntents => {
            "discord: the gateway refused the MESSAGE CONTENT intent (close code 4014): in the \
             Developer Portal, Bot → Privileged Gateway Intents, turn on Message Content Intent, \
             then restart switchboard"
        }
        GatewayError::InvalidGatewayIntents => {
            "discord: the gateway refused the intents asked for (close code 4013)"
        }
        GatewayError::InvalidShardData | GatewayError::OverloadedShard => {
            "discord: the gateway refused the shard (close code 4010/4011): the bot is in too \
             many servers for one shard"
        }
        _ => return None,
    };
    Some(what.to_string())
}

/// Check the token, and with a custom `api_url` that its gateway discovery answers (serenity
/// would otherwise connect to the real Discord gateway without a word).
async fn preflight(cfg: &DiscordConfig, rest: &Rest) -> Result<u64, RestError> {
    let (bot_id, name) = rest.current_user().await?;
    if !cfg.is_discord() {
        let url = rest.gateway_url().await.map_err(|e| {
            RestError::Decode(format!("GET {}/api/v10/gateway failed ({e})", cfg.api_url))
        })?;
        tracing::info!(bot = %name, gateway = %url, "discord: using a custom api_url");
    }
    Ok(bot_id)
}

async fn run_client(
    cfg: &DiscordConfig,
    state: Arc<HandlerState>,
    shutdown: &CancellationToken,
) -> Outcome {
    let token = state.rest.token();
    let http = if cfg.is_discord() {
        HttpBuilder::new(token).build()
    } else {
        // The proxy is ignored while serenity's own rate limiter is on.
        HttpBuilder::new(token)
            .proxy(cfg.api_url.trim_end_matches('/'))
            .ratelimiter_disabled(true)
            .build()
    };
    let intents = GatewayIntents::GUILD_MESSAGES
        | GatewayIntents::DIRECT_MESSAGES
        | GatewayIntents::MESSAGE_CONTENT
        | GatewayIntents::GUILDS;
    let mut cache = CacheSettings::default();
    cache.cache_users = false;
    cache.max_messages = 0;
    let builder = ClientBuilder::new_with_http(http, intents)
        .cache_settings(cache)
        .event_handler(Handler(state.clone()))
        .raw_event_handler(Activity(state.clone()));
    let mut client = match ClientThread::start(builder).await {
        Ok(c) => c,
        Err(reason) => {
            return Outcome::Restart {
                reason,
                was_ready: false,
            };
        }
    };
    let check_every = (cfg.stall_timeout / 4).clamp(Duration::from_millis(100), CHECK_MAX);
    let mut tick = tokio::time::interval(check_every);
    let mut last_latency = None;
    let mut connecting_since: Option<Instant> = None;
    let mut saved_at = Instant::now();
    state.touch();
    let outcome = loop {
        tokio::select! {
            _ = shutdown.cancelled() => break Outcome::Shutdown,
            res = client.ended() => {
                let was_ready = state.ready_seen.load(Ordering::Relaxed);
                break match res {
                    Some(Err(serenity::Error::Gateway(GatewayError::InvalidAuthentication))) => {
                        Outcome::Unauthorized("discord: the gateway refused the bot token (close code 4004)".into())
                    }
                    Some(Err(serenity::Error::Gateway(e))) if refused_setup(&e).is_some() => {
                        Outcome::Refused(refused_setup(&e).unwrap_or_default())
                    }
                    Some(Err(e)) => Outcome::Restart { reason: format!("discord: client stopped: {e}"), was_ready },
                    Some(Ok(())) => Outcome::Restart { reason: "discord: client stopped".into(), was_ready },
                    None => Outcome::Restart { reason: "discord: the client thread ended".into(), was_ready },
                };
            }
            _ = tick.tick() => {
                if saved_at.elapsed() >= SAVE_EVERY {
                    save_state(cfg.state_file.as_deref(), &state.recent, &state.memory).await;
                    saved_at = Instant::now();
                }
                let runner = client.runner().await;
                let latency = runner.as_ref().and_then(|r| r.latency);
                if latency != last_latency {
                    last_latency = latency;
                    state.touch();
                }
                let connecting = runner.is_some_and(|r| r.stage == ConnectionStage::Connecting);
                let since = match (connecting, connecting_since) {
                    (false, _) => None,
                    (true, None) => Some(Instant::now()),
                    (true, Some(t)) => Some(t),
                };
                connecting_since = since;
                if since.is_some_and(|t| t.elapsed() >= STUCK_CONNECTING) {
                    break Outcome::Restart {
                        reason: "discord: the connection dropped and could not be resumed; starting a new session".into(),
                        was_ready: state.ready_seen.load(Ordering::Relaxed),
                    };
                }
                let idle = state.idle();
                if idle > cfg.stall_timeout {
                    break Outcome::Restart {
                        reason: format!("discord: no gateway event or heartbeat ACK for {idle:?}; restarting the client"),
                        was_ready: state.ready_seen.load(Ordering::Relaxed),
                    };
                }
            }
        }
    };
    // A shutdown says goodbye to Discord; a client being replaced is just dropped.
    client.stop(matches!(outcome, Outcome::Shutdown)).await;
    outcome
}
