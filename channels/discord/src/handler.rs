//! serenity's event handlers: READY and RESUMED (connection reports), `MESSAGE_CREATE` (in
//! gateway order per channel, through intake, published on the gateway's runtime), and the
//! raw handler that tells the watchdog the connection is alive.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serenity::all::{
    Context, EventHandler, Message, RawEventHandler, Ready, ResumedEvent, ShardStageUpdateEvent,
};
use serenity::gateway::ConnectionStage;
use serenity::model::event::Event;
use serenity::model::id::{GuildId, RoleId, UserId};
use switchboard_channel::{InboundMessage, InboundSender};
use tokio::runtime::Handle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::backfill::{self, Recent};
use crate::intake;
use crate::memory::Memory;
use crate::mentions::Names;
use crate::order::Order;
use crate::places::{self, Places};
use crate::rest::Rest;

pub(crate) const NAME: &str = "discord";

/// What one client's event handlers share with the watchdog.
pub(crate) struct HandlerState {
    inbound: InboundSender,
    /// Publish order per channel, taken from the shard runner (handlers run concurrently).
    order: Order,
    bot_id: AtomicU64,
    last_activity: Mutex<Instant>,
    pub(crate) ready_seen: AtomicBool,
    /// What was handled per channel, across clients: caught up on after a new session.
    pub(crate) recent: Arc<Recent>,
    /// Shared with `send`: channels, followed threads.
    pub(crate) memory: Arc<Memory>,
    pub(crate) rest: Rest,
    /// The gateway's runtime: the bus spawns tasks, which belong there and not on the
    /// client's own thread (see `client`).
    main: Handle,
    /// The adapter's shutdown: a catch-up under way stops with it.
    pub(crate) shutdown: CancellationToken,
}

impl HandlerState {
    pub(crate) fn new(
        inbound: InboundSender,
        bot_id: u64,
        recent: Arc<Recent>,
        memory: Arc<Memory>,
        rest: Rest,
        main: Handle,
        shutdown: CancellationToken,
    ) -> Self {
        Self {
            inbound,
            order: Order::default(),
            bot_id: AtomicU64::new(bot_id),
            last_activity: Mutex::new(Instant::now()),
            ready_seen: AtomicBool::new(false),
            recent,
            memory,
            rest,
            main,
            shutdown,
        }
    }

    pub(crate) fn touch(&self) {
        *self.last_activity.lock().unwrap_or_else(|e| e.into_inner()) = Instant::now();
    }

    pub(crate) fn idle(&self) -> Duration {
        self.last_activity
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .elapsed()
    }

    fn bot_id(&self) -> UserId {
        UserId::new(self.bot_id.load(Ordering::Relaxed).max(1))
    }

    /// Publish `msg` if it is wanted, and note it handled. The caller holds its channel's
    /// turn, so everything before it in the channel is handled too.
    pub(crate) async fn handle(&self, ctx: &Context, msg: &Message) {
        let bot_id = self.bot_id();
        if intake::wanted(msg, bot_id) {
            let bot_role = msg.guild_id.and_then(|g| bot_role(ctx, g, bot_id));
            let addressed = intake::addresses_bot(msg, bot_id, bot_role);
            let situation = places::situate(&self.memory, ctx, &self.rest, msg, addressed).await;
            let names = self.names(ctx, msg);
            let inbound = intake::to_inbound(msg, bot_id, bot_role, &names, &situation);
            let sender = self.inbound.clone();
            // A client torn down meanwhile drops this wait, not the publish; the message is
            // then not noted handled and is fetched again after the next session (the bus
            // drops the copy).
            let _ = self
                .main
                .spawn(async move { publish(&sender, inbound).await })
                .await;
        }
        self.recent.handled(
            msg.channel_id,
            msg.id,
            msg.guild_id,
            std::time::Instant::now(),
        );
    }

    /// The names of the users, roles and channels `msg` mentions, as far as known.
    fn names(&self, ctx: &Context, msg: &Message) -> Names {
        let referenced = msg.referenced_message.as_deref();
        let snapshots = &msg.message_snapshots;
        let mut names = Names::of_users(
            msg.mentions
                .iter()
                .chain(referenced.into_iter().flat_map(|r| &r.mentions))
                .chain(snapshots.iter().flat_map(|s| &s.mentions)),
        )
        .with_me(self.bot_id().get());
        let texts = std::iter::once(msg.content.as_str())
            .chain(referenced.map(|r| r.content.as_str()))
            .chain(snapshots.iter().map(|s| s.content.as_str()));
        let guild = msg.guild_id;
        names.look_up(
            texts,
            |role| places::role_name(ctx, guild, RoleId::new(role.max(1))),
            |channel| {
                let id = serenity::model::id::ChannelId::new(channel.max(1));
                self.memory.places.name(ctx, guild, id)
            },
        );
        names
    }
}

pub(crate) struct Handler(pub(crate) Arc<HandlerState>);

#[serenity::async_trait]
impl EventHandler for Handler {
    async fn ready(&self, ctx: Context, ready: Ready) {
        // A new session means a new shard runner: hook it before its messages are handled.
        self.0.order.attach(&ctx.shard);
        Places::attach(&self.0.memory, &ctx.shard);
        self.0.bot_id.store(ready.user.id.get(), Ordering::Relaxed);
        self.0.ready_seen.store(true, Ordering::Relaxed);
        self.0.touch();
        tracing::info!(bot = %ready.user.name, "discord: connected (READY)");
        self.0.inbound.set_connected(NAME, true, "ready");
        // Not the first session: what was sent while none was up never comes by the gateway.
        let gap = self.0.recent.new_session(std::time::Instant::now());
        if !gap.is_empty() {
            // Places taken now, so the channels' next gateway messages wait for the old ones.
            let todo = gap
                .into_iter()
                .map(|(channel, last)| (channel, last, self.0.order.reserve(channel)))
                .collect();
            self.0
                .main
                .spawn(backfill::catch_up(self.0.clone(), ctx, todo));
        }
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
        // A catch-up ahead of it in the line may have fetched it already (it was sent after
        // the new session began, before the fetch): once is enough.
        if self.0.recent.has_handled(msg.channel_id, msg.id) {
            tracing::debug!(id = %msg.id, "discord: already handled by a catch-up");
            return;
        }
        self.0.handle(&ctx, &msg).await;
    }
}

/// The bot's managed role in a guild, when the cache knows the guild.
fn bot_role(ctx: &Context, guild: GuildId, bot_id: UserId) -> Option<RoleId> {
    let g = ctx.cache.guild(guild)?;
    g.roles
        .values()
        .find(|r| r.tags.bot_id == Some(bot_id))
        .map(|r| r.id)
}

/// Publish with a few retries: the gateway does not redeliver, so a failed publish is retried
/// here before the message is given up (and logged).
async fn publish(inbound: &InboundSender, msg: InboundMessage) {
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

pub(crate) struct Activity(pub(crate) Arc<HandlerState>);

#[serenity::async_trait]
impl RawEventHandler for Activity {
    async fn raw_event(&self, _ctx: Context, _ev: Event) {
        self.0.touch();
    }
}
