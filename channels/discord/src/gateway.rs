//! The gateway connection's life cycle: preflight (token, gateway URL), a serenity client
//! per attempt, a watchdog that restarts a client gone quiet, backoff, and prompt shutdown.
//!
//! serenity reconnects and resumes on its own after an I/O error, but a shard runner that
//! hits any other websocket error (an EOF without a close frame, for one) ends silently and
//! the bot goes deaf. The watchdog notices: no dispatch and no heartbeat ACK (seen as a
//! change of the runner's latency) for `stall_timeout` → the client is shut down and a new
//! one started with backoff.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serenity::all::{
    ClientBuilder, Context, EventHandler, GatewayError, GatewayIntents, HttpBuilder, Message,
    RawEventHandler, Ready, ResumedEvent, ShardStageUpdateEvent,
};
use serenity::cache::Settings as CacheSettings;
use serenity::gateway::ConnectionStage;
use serenity::model::event::Event;
use serenity::model::id::{RoleId, UserId};
use switchboard_channel::{ChannelError, InboundSender, redact};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::DiscordConfig;
use crate::intake;
use crate::order::Order;
use crate::rest::{Rest, RestError};

const NAME: &str = "discord";
const BACKOFF_MIN: Duration = Duration::from_secs(1);
const BACKOFF_MAX: Duration = Duration::from_secs(60);
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// What the event handlers share with the watchdog.
struct HandlerState {
    inbound: InboundSender,
    /// Publish order per channel, taken from the shard runner (handlers run concurrently).
    order: Order,
    bot_id: AtomicU64,
    last_activity: Mutex<Instant>,
    ready_seen: AtomicBool,
}

impl HandlerState {
    fn touch(&self) {
        *self.last_activity.lock().unwrap_or_else(|e| e.into_inner()) = Instant::now();
    }

    fn idle(&self) -> Duration {
        self.last_activity
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .elapsed()
    }

    fn bot_id(&self) -> UserId {
        UserId::new(self.bot_id.load(Ordering::Relaxed).max(1))
    }
}

struct Handler(Arc<HandlerState>);

#[serenity::async_trait]
impl EventHandler for Handler {
    async fn ready(&self, ctx: Context, ready: Ready) {
        // A new session means a new shard runner: hook it before its messages are handled.
        self.0.order.attach(&ctx.shard);
        self.0.bot_id.store(ready.user.id.get(), Ordering::Relaxed);
        self.0.ready_seen.store(true, Ordering::Relaxed);
        self.0.touch();
        tracing::info!(bot = %ready.user.name, "discord: connected (READY)");
        self.0.inbound.set_connected(NAME, true, "ready");
    }

    async fn resume(&self, _ctx: Context, _: ResumedEvent) {
        self.0.touch();
        tracing::info!("discord: session resumed");
        self.0.inbound.set_connected(NAME, true, "resumed");
    }

    async fn shard_stage_update(&self, _ctx: Context, ev: ShardStageUpdateEvent) {
        if ev.new != ConnectionStage::Connected {
            let detail = format!("gateway {}", ev.new);
            self.0.inbound.set_connected(NAME, false, &detail);
        }
    }

    async fn message(&self, ctx: Context, msg: Message) {
        self.0.touch();
        // Held until published (retries included), so a later message of the channel, whose
        // handler may well have started first, cannot overtake this one.
        let _turn = self.0.order.turn(msg.channel_id, msg.id).await;
        let bot_id = self.0.bot_id();
        if !intake::wanted(&msg, bot_id) {
            return;
        }
        let bot_role = msg.guild_id.and_then(|g| bot_role(&ctx, g, bot_id));
        let inbound = intake::to_inbound(&msg, bot_id, bot_role);
        publish(&self.0.inbound, inbound).await;
    }
}

/// The bot's managed role in a guild, when the cache knows the guild.
fn bot_role(ctx: &Context, guild: serenity::model::id::GuildId, bot_id: UserId) -> Option<RoleId> {
    let g = ctx.cache.guild(guild)?;
    g.roles
        .values()
        .find(|r| r.tags.bot_id == Some(bot_id))
        .map(|r| r.id)
}

/// Publish with a few retries: the gateway does not redeliver, so a failed publish is retried
/// here before the message is given up (and logged).
async fn publish(inbound: &InboundSender, msg: switchboard_channel::InboundMessage) {
    for attempt in 0..5u32 {
        match inbound.publish(msg.clone()).await {
            Ok(p) => {
                tracing::debug!(id = %msg.id, outcome = ?p, "discord: published");
                return;
            }
            Err(e) => {
                tracing::warn!(id = %msg.id, error = %e, attempt, "discord: publish failed");
                tokio::time::sleep(Duration::from_millis(200 << attempt)).await;
            }
        }
    }
    tracing::error!(id = %msg.id, "discord: message dropped, the bus refused it 5 times");
}

struct Activity(Arc<HandlerState>);

#[serenity::async_trait]
impl RawEventHandler for Activity {
    async fn raw_event(&self, _ctx: Context, _ev: Event) {
        self.0.touch();
    }
}

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
    inbound: InboundSender,
    shutdown: CancellationToken,
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
            Ok(bot_id) => run_client(cfg, rest, &inbound, &shutdown, bot_id).await,
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
    rest: &Rest,
    inbound: &InboundSender,
    shutdown: &CancellationToken,
    bot_id: u64,
) -> Outcome {
    let http = if cfg.is_discord() {
        HttpBuilder::new(rest.token()).build()
    } else {
        // The proxy is ignored while serenity's own rate limiter is on.
        HttpBuilder::new(rest.token())
            .proxy(cfg.api_url.trim_end_matches('/'))
            .ratelimiter_disabled(true)
            .build()
    };
    let intents = GatewayIntents::GUILD_MESSAGES
        | GatewayIntents::DIRECT_MESSAGES
        | GatewayIntents::MESSAGE_CONTENT
        | GatewayIntents::GUILDS;
    let state = Arc::new(HandlerState {
        inbound: inbound.clone(),
        order: Order::default(),
        bot_id: AtomicU64::new(bot_id),
        last_activity: Mutex::new(Instant::now()),
        ready_seen: AtomicBool::new(false),
    });
    let mut cache = CacheSettings::default();
    cache.cache_users = false;
    cache.max_messages = 0;
    let built = ClientBuilder::new_with_http(http, intents)
        .cache_settings(cache)
        .event_handler(Handler(state.clone()))
        .raw_event_handler(Activity(state.clone()))
        .await;
    let mut client = match built {
        Ok(c) => c,
        Err(e) => {
            return Outcome::Restart {
                reason: format!("discord: client: {e}"),
                was_ready: false,
            };
        }
    };
    let manager = client.shard_manager.clone();
    let mut task = tokio::spawn(async move { client.start().await });
    let check_every = (cfg.stall_timeout / 4).max(Duration::from_millis(100));
    let mut tick = tokio::time::interval(check_every);
    let mut last_latency = None;
    state.touch();
    let outcome = loop {
        tokio::select! {
            _ = shutdown.cancelled() => break Outcome::Shutdown,
            res = &mut task => {
                let was_ready = state.ready_seen.load(Ordering::Relaxed);
                break match res {
                    Ok(Err(serenity::Error::Gateway(GatewayError::InvalidAuthentication))) => {
                        Outcome::Unauthorized("discord: the gateway refused the bot token (close code 4004)".into())
                    }
                    Ok(Err(serenity::Error::Gateway(e))) if refused_setup(&e).is_some() => {
                        Outcome::Refused(refused_setup(&e).unwrap_or_default())
                    }
                    Ok(Err(e)) => Outcome::Restart { reason: format!("discord: client stopped: {e}"), was_ready },
                    Ok(Ok(())) => Outcome::Restart { reason: "discord: client stopped".into(), was_ready },
                    Err(e) => Outcome::Restart { reason: format!("discord: client task failed: {e}"), was_ready },
                };
            }
            _ = tick.tick() => {
                let latency = manager.runners.lock().await.values().next().and_then(|r| r.latency);
                if latency != last_latency {
                    last_latency = latency;
                    state.touch();
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
    let _ = tokio::time::timeout(SHUTDOWN_GRACE, manager.shutdown_all()).await;
    if !task.is_finished()
        && tokio::time::timeout(SHUTDOWN_GRACE, &mut task)
            .await
            .is_err()
    {
        task.abort();
    }
    outcome
}
