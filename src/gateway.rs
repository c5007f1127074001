//! Wiring: opens the store, builds the bus, the agent and the channels, serves HTTP, and
//! shuts everything down in order.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use switchboard_channel::{Channel, ChatKey, InboundMessage, InboundSender, OutboundMessage};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::agent::Agent;
use crate::bus::{Bus, ChannelRegistry};
use crate::config::{Config, Loaded};
use crate::http::api::ApiChannel;
use crate::llm::LlmProvider;
use crate::metrics::Metrics;
use crate::store::{SledStore, Store, StoreError};

mod sink;
pub use sink::GatewaySink;

/// How long shutdown waits for running work before giving up on it (it stays in the inbox).
const DRAIN_TIMEOUT: Duration = Duration::from_secs(8);
/// How long turns running at shutdown may go on to finish (their replies sent) before they
/// are interrupted, keeping what they did for the next start (within [`DRAIN_TIMEOUT`]).
pub const TURN_GRACE: Duration = Duration::from_secs(5);

/// Why the gateway could not start.
#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    #[error(transparent)]
    Store(#[from] StoreError),
    // Not `source`: the message carries it, and a chain printed with `{:#}` would say it
    // twice.
    #[error("gateway.http_listen: cannot listen on {addr}: {cause}")]
    Listen { addr: String, cause: std::io::Error },
    #[error("{0}")]
    Setup(String),
}

/// Connection state of each enabled channel, for `/readyz`.
#[derive(Default)]
pub struct Health {
    channels: Mutex<BTreeMap<String, (bool, String)>>,
}

impl Health {
    /// `detail` is served over HTTP: secrets are blotted out of it, whatever error it came from.
    pub fn set(&self, channel: &str, connected: bool, detail: &str) {
        let detail = switchboard_channel::redact(detail).into_owned();
        self.channels
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(channel.to_string(), (connected, detail));
    }

    /// Channels that are not connected, with why.
    pub fn not_ready(&self) -> BTreeMap<String, String> {
        self.channels
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .filter(|(_, (up, _))| !up)
            .map(|(k, (_, d))| (k.clone(), d.clone()))
            .collect()
    }
}

/// Everything the running gateway shares with its HTTP handlers and the CLI.
pub struct Shared {
    pub config: Arc<Config>,
    pub store: Arc<dyn Store>,
    pub bus: Arc<Bus>,
    pub health: Arc<Health>,
    pub metrics: Arc<Metrics>,
    pub api: Arc<ApiChannel>,
    /// The terminal's channel (`cli:local`), used by `switchboard chat`.
    pub cli: Arc<ApiChannel>,
    pub sink: Arc<GatewaySink>,
    /// Cron jobs and reminders.
    pub scheduler: Arc<crate::scheduler::Scheduler>,
    #[cfg(feature = "slack")]
    pub slack: std::sync::OnceLock<Arc<switchboard_slack::SlackChannel>>,
}

impl Shared {
    /// Ask the agent from the terminal (`cli:local`) and wait for the reply text.
    pub async fn ask_cli(&self, text: &str, timeout: Duration) -> Result<String, String> {
        self.ask_cli_until(text, timeout, &CancellationToken::new())
            .await
    }

    /// [`Self::ask_cli`], given up as by `/stop` when `stop` is cancelled (see
    /// [`crate::http::api::ApiChannel::ask_until`]).
    pub async fn ask_cli_until(
        &self,
        text: &str,
        timeout: Duration,
        stop: &CancellationToken,
    ) -> Result<String, String> {
        let id = format!("cli:msg:{:016x}", rand::random::<u64>());
        let sender = switchboard_channel::Sender {
            id: "local".into(),
            username: None,
            display_name: "owner (terminal)".into(),
            is_owner: true,
        };
        let mut msg = InboundMessage::text(id, ChatKey::new("cli", "local"), sender, text);
        msg.metadata
            .insert("join".into(), serde_json::Value::Bool(false));
        self.cli
            .ask_until(&self.bus, msg, timeout, stop)
            .await
            .map(|r| r.text)
    }
}

/// What to start besides the bus and the agent.
#[derive(Clone)]
pub struct StartOptions {
    /// Start the platform channels that are enabled and have credentials.
    pub channels: bool,
    /// Serve `gateway.http_listen` and the admin API.
    pub http: bool,
    /// Channels to register as well (the CLI's `cli` channel).
    pub extra_channels: Vec<Arc<dyn Channel>>,
    /// Use this LLM instead of the configured one (tests).
    pub llm: Option<Arc<dyn LlmProvider>>,
    /// Run the producers (cron, heartbeat) and resume the inbox and outbox the last run left.
    /// The terminal `chat` without a running gateway turns this off: what the platform chats
    /// are owed waits for `run`, where their channels are.
    pub background: bool,
    /// How long turns running at shutdown may take to finish ([`TURN_GRACE`]).
    pub turn_grace: Duration,
}

impl Default for StartOptions {
    fn default() -> Self {
        Self {
            channels: true,
            http: true,
            extra_channels: Vec::new(),
            llm: None,
            background: true,
            turn_grace: TURN_GRACE,
        }
    }
}

/// A started gateway.
pub struct Running {
    pub shared: Arc<Shared>,
    /// Where the public HTTP server listens, when it does.
    pub http_addr: Option<std::net::SocketAddr>,
    /// Where the admin API listens, when it does.
    pub admin_addr: Option<std::net::SocketAddr>,
    shutdown: CancellationToken,
    /// Interrupts the turns (and sub-agents) still running once their grace is over.
    interrupt: CancellationToken,
    /// The sub-agents, given the same grace as turns.
    subagents: TaskTracker,
    turn_grace: Duration,
    tracker: TaskTracker,
    data_dir: PathBuf,
}

/// Start the gateway; it runs until `shutdown` is cancelled and [`Running::stopped`] is awaited.
pub async fn start(
    loaded: &Loaded,
    opts: StartOptions,
    shutdown: CancellationToken,
) -> Result<Running, GatewayError> {
    let started = Instant::now();
    let config = Arc::new(loaded.config.clone());
    let data_dir = config.gateway.data_dir.clone();
    std::fs::create_dir_all(&config.gateway.workspace).map_err(|e| {
        GatewayError::Setup(format!(
            "cannot create the workspace {}: {e}",
            config.gateway.workspace.display()
        ))
    })?;
    let metrics = Arc::new(Metrics::default());
    let store: Arc<dyn Store> =
        Arc::new(SledStore::open_with(&data_dir, metrics.store_sync.clone())?);
    let tracker = TaskTracker::new();
    let health = Arc::new(Health::default());
    let channels: ChannelRegistry = Default::default();
    let interrupt = CancellationToken::new();
    let subagents = TaskTracker::new();
    let bus = Bus::with_turn_grace(
        store.clone(),
        channels.clone(),
        config.gateway.max_concurrent_turns,
        metrics.clone(),
        (shutdown.clone(), interrupt.clone()),
        tracker.clone(),
    );
    // Before any intake: the first prune also files the seen ids of an older store by day,
    // and dedup only looks them up there.
    {
        let bus = bus.clone();
        tokio::task::spawn_blocking(move || prune(&bus, &|| false))
            .await
            .map_err(|e| GatewayError::Setup(e.to_string()))??;
    }
    bus.set_owners_named(config.names_owners());
    let api = Arc::new(ApiChannel::default().keeping_answers(store.clone()));
    let cli = Arc::new(ApiChannel::named("cli"));
    let clock: Arc<dyn crate::scheduler::Clock> = Arc::new(crate::scheduler::SystemClock);
    let scheduler = crate::scheduler::Scheduler::new(
        store.clone(),
        Some(bus.clone()),
        config.clone(),
        metrics.clone(),
        clock.clone(),
    );
    let sink = Arc::new(GatewaySink {
        config: config.clone(),
        bus: bus.clone(),
        health: health.clone(),
        metrics: metrics.clone(),
        scheduler: scheduler.clone(),
    });
    let shared = Arc::new(Shared {
        config: config.clone(),
        store: store.clone(),
        bus: bus.clone(),
        health: health.clone(),
        metrics: metrics.clone(),
        api: api.clone(),
        cli: cli.clone(),
        sink: sink.clone(),
        scheduler: scheduler.clone(),
        #[cfg(feature = "slack")]
        slack: std::sync::OnceLock::new(),
    });

    let llm = match opts.llm.clone() {
        Some(l) => l,
        None => {
            let env = &config.llm.api_key_env;
            if !env.is_empty() && crate::config::secret(env).is_none() {
                // Easy to miss under systemd or sudo, which start with another environment:
                // a hosted provider then refuses every turn.
                tracing::warn!(
                    "llm: ${env} is not set, so requests go out without an API key (fine for a \
                     local server such as Ollama; a hosted provider will refuse them)"
                );
            }
            crate::llm::from_config(&config.llm)
                .map_err(|e| GatewayError::Setup(format!("llm: {e}")))?
        }
    };
    let status_bus = bus.clone();
    let agent = Agent::new(config.clone(), store.clone(), llm, metrics.clone())
        .with_streams(api.clone())
        .with_shutdown(interrupt.clone())
        .with_tasks(subagents.clone())
        .with_tools(vec![Arc::new(crate::scheduler::CronTool::new(
            scheduler.clone(),
        ))])
        .with_command("reminders", {
            let scheduler = scheduler.clone();
            Arc::new(move |key: &ChatKey| scheduler.reminders_text(key))
        })
        .with_publisher(Arc::new(BusPublisher { bus: bus.clone() }))
        .with_refused_jobs({
            let (scheduler, tracker) = (scheduler.clone(), tracker.clone());
            Arc::new(move |jobs: Vec<String>, why: String| {
                let scheduler = scheduler.clone();
                tracker.spawn(async move {
                    for id in jobs {
                        if let Err(e) = scheduler.note_refused(&id, &why).await {
                            tracing::warn!(%id, "cannot note a refused reply on the job: {e}");
                        }
                    }
                });
            })
        })
        .with_status(Arc::new(move |key: &ChatKey| {
            let now = if status_bus.is_running(key) {
                "Now: answering a message here (/stop stops it)\n"
            } else {
                ""
            };
            format!(
                "{now}Queue: {} waiting\nActive chats: {}",
                status_bus.queued_for(key),
                status_bus.active_chats()
            )
        }));
    bus.set_handler(Arc::new(agent));

    {
        let mut reg = channels.write().unwrap_or_else(|p| p.into_inner());
        reg.insert("api".into(), api.clone());
        reg.insert("cli".into(), cli.clone());
        for ch in &opts.extra_channels {
            reg.insert(ch.name().to_string(), ch.clone());
        }
    }
    if opts.background {
        // Nothing new runs before the last run's unfinished messages are queued (below).
        bus.hold_intake_until_replayed();
    }
    if opts.channels {
        crate::channels::start_all(&shared, &channels, &shutdown, &tracker);
    }
    let (http_addr, admin_addr) = if opts.http {
        // The API reads its token per request; the redactor knows it from the start.
        let _ = crate::config::secret("SWITCHBOARD_API_TOKEN");
        let http_addr = match config.gateway.http_addr() {
            Some(addr) => {
                Some(crate::http::serve(shared.clone(), addr, shutdown.clone(), &tracker).await?)
            }
            None => None,
        };
        let admin =
            crate::http::admin::serve(shared.clone(), &data_dir, shutdown.clone(), &tracker)
                .await?;
        (http_addr, Some(admin))
    } else {
        (None, None)
    };

    if opts.background {
        scheduler.start(shutdown.child_token(), &tracker);
        if config.heartbeat.enabled {
            let model = Some(config.heartbeat.model.clone()).filter(|m| !m.trim().is_empty());
            crate::scheduler::Heartbeat::new(store.clone(), bus.clone(), config.clone(), clock)
                .with_model(model)
                .start(shutdown.child_token(), &tracker);
        }
        let replayed = bus
            .replay()
            .await
            .map_err(|e| GatewayError::Setup(e.to_string()))?;
        if replayed > 0 {
            tracing::info!("resuming {replayed} message(s) left unfinished by the last run");
        }
    }
    // After a burst, once every chat's worker is gone for a moment, hand the memory the
    // burst freed back to the system.
    tracker.spawn(crate::memory::trim_when_idle(
        bus.clone(),
        metrics.clone(),
        shutdown.clone(),
    ));
    let prune_bus = bus.clone();
    let prune_stop = shutdown.clone();
    let inbox = config.gateway.workspace.join("inbox");
    let jobs = scheduler.clone();
    // Tidying goes on in the background: once at start (a gateway restarted more often
    // than hourly still tidies), then hourly, the daily part every 24th hour.
    tracker.spawn(async move {
        for hour in 0u64.. {
            if hour > 0 {
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_secs(3600)) => {}
                    _ = prune_stop.cancelled() => break,
                }
            }
            let (bus, stop, inbox) = (prune_bus.clone(), prune_stop.clone(), inbox.clone());
            let daily = hour % 24 == 0;
            if daily {
                match jobs.clear_finished(chrono::Utc::now()).await {
                    Ok(0) => {}
                    Ok(n) => tracing::info!("cleared {n} reminder(s) finished over a week ago"),
                    Err(e) => tracing::warn!("clearing finished reminders failed: {e}"),
                }
            }
            let pruned = move || {
                let stop = || stop.is_cancelled();
                // At start, the seen ids and kept answers were pruned before intake.
                if hour > 0 {
                    prune(&bus, &stop)?;
                }
                tidy(&bus, &inbox, daily, &stop)
            };
            match tokio::task::spawn_blocking(pruned).await {
                Ok(Ok(_)) => {}
                Ok(Err(e)) => tracing::warn!("pruning old ids, answers and files failed: {e}"),
                Err(e) => tracing::warn!("pruning old ids, answers and files failed: {e}"),
            }
        }
    });
    tracing::info!(
        elapsed_ms = started.elapsed().as_millis() as u64,
        http = %http_addr.map_or_else(|| "off".to_string(), |a| a.to_string()),
        "switchboard ready"
    );
    Ok(Running {
        shared,
        http_addr,
        admin_addr,
        shutdown,
        interrupt,
        subagents,
        turn_grace: opts.turn_grace,
        tracker,
        data_dir,
    })
}

impl Running {
    /// Wait for shutdown, drain running work (bounded), flush the store.
    pub async fn stopped(self) {
        self.shutdown.cancelled().await;
        tracing::info!("shutting down");
        let deadline = tokio::time::Instant::now() + DRAIN_TIMEOUT;
        self.tracker.close();
        self.subagents.close();
        // Intake has stopped and no turn starts; the running ones may finish, so their
        // replies go out now and what their tools did is not done twice. Sub-agents too:
        // their results are kept for the next start.
        let settled = async {
            self.shared.bus.turns_settled().await;
            self.subagents.wait().await;
        };
        if tokio::time::timeout(self.turn_grace, settled)
            .await
            .is_err()
        {
            tracing::info!(
                "turns still running after {:?} are interrupted; they resume at the next start",
                self.turn_grace
            );
        }
        self.interrupt.cancel();
        // Requests waiting for a reply would hold the HTTP server's drain past the deadline.
        self.shared.api.close_waiters();
        self.shared.cli.close_waiters();
        let stopped = async {
            self.subagents.wait().await;
            self.tracker.wait().await;
        };
        if tokio::time::timeout_at(deadline, stopped).await.is_err() {
            tracing::warn!("some tasks did not stop in time; their messages stay in the inbox");
        } else if let Err(e) = self.shared.bus.note_clean_stop() {
            tracing::warn!("could not note the clean stop: {e}");
        }
        if let Err(e) = self.shared.store.checkpoint().await {
            tracing::error!("final flush failed: {e}");
        }
        self.shared.bus.release_handler();
        crate::http::admin::remove_files(&self.data_dir);
        tracing::info!("stopped");
    }

    /// An inbound sender publishing through the gateway's access policy (tests, CLI).
    pub fn inbound(&self) -> InboundSender {
        InboundSender::new(self.shared.sink.clone())
    }
}

/// Forget the seen ids and the API's kept answers past their retention (blocks on the store).
fn prune(bus: &Bus, stop: &dyn Fn() -> bool) -> Result<(), StoreError> {
    bus.prune_seen()?;
    crate::http::api::prune_answers(bus.store().as_ref(), stop)?;
    Ok(())
}

/// Remove the inbox's files past [`INBOX_KEPT`]; `daily`, also the Slack threads' idle
/// conversations. Blocks: run it off the async threads.
fn tidy(bus: &Bus, inbox: &Path, daily: bool, stop: &dyn Fn() -> bool) -> Result<(), StoreError> {
    let now = chrono::Utc::now();
    let before = (now - INBOX_KEPT).timestamp();
    match switchboard_channel::files::prune_inbox(inbox, before) {
        Ok(0) => {}
        Ok(n) => tracing::info!(
            "removed {n} file(s) sent more than {} days ago from the inbox",
            INBOX_KEPT.num_days()
        ),
        Err(e) => {
            tracing::warn!(inbox = %inbox.display(), "cannot clear old files from the inbox: {e}")
        }
    }
    if daily {
        let store = bus.store();
        let n = crate::agent::session::prune_idle_threads(store.as_ref(), now, stop)?;
        if n > 0 {
            tracing::info!("forgot {n} Slack thread conversation(s) idle for more than 30 days");
        }
    }
    Ok(())
}

/// How long the files a chat sent stay in the workspace's inbox.
const INBOX_KEPT: chrono::TimeDelta = chrono::TimeDelta::days(30);

/// Start and run until `shutdown`.
pub async fn run(loaded: &Loaded, shutdown: CancellationToken) -> Result<(), GatewayError> {
    let running = start(loaded, StartOptions::default(), shutdown).await?;
    running.stopped().await;
    Ok(())
}

/// What the agent's `message` and `spawn` tools publish through.
struct BusPublisher {
    bus: Arc<Bus>,
}

#[async_trait]
impl crate::agent::Publisher for BusPublisher {
    async fn publish(&self, msg: InboundMessage) -> Result<(), String> {
        self.bus
            .publish(msg)
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
    }

    async fn send(&self, msg: OutboundMessage) -> Result<crate::bus::Delivery, String> {
        let outcomes = self
            .bus
            .send_direct(vec![msg])
            .await
            .map_err(|e| e.to_string())?;
        Ok(outcomes
            .into_iter()
            .next()
            .unwrap_or(crate::bus::Delivery::Delivered))
    }

    fn known_key(&self, key: &ChatKey) -> bool {
        self.bus
            .store()
            .get(crate::store::Tree::Sessions, key.to_string().as_bytes())
            .ok()
            .flatten()
            .is_some()
    }
}
