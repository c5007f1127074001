//! The agent loop shared by every channel: commands, session, prompt, steering, the tool
//! loop, and the reply.
//!
//! - [`turn`]: one turn from inbound messages to replies and store writes.
//! - [`run`]: the tool loop (also used by sub-agents).
//! - [`context`]: token estimates, the context budget, compaction summaries.
//! - [`prompt`]: the system prompt (stable prefix + dynamic suffix).
//! - [`steering`]: ephemeral per-channel and per-situation guidance.
//! - [`session`]: stored conversation history per chat.
//! - [`skills`]: `SKILL.md` loading, gating and `skills list`.
//! - [`tool`] and [`tools`]: the tool interface, registry and built-in tools.
//! - [`publisher`]: the agent's way back onto the bus (sub-agent results, `message`).
//! - [`commands`]: `/new`, `/status`, `/help` and extra commands, answered without the LLM.

pub mod commands;
pub mod context;
pub mod member;
pub mod prompt;
pub mod publisher;
pub mod resume;
pub mod run;
pub mod session;
pub mod skills;
pub mod steering;
pub mod tool;
pub mod tools;
mod turn;

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use async_trait::async_trait;
use switchboard_channel::{ChatKey, InboundMessage, OutboundKind, OutboundMessage};
use tokio_util::sync::CancellationToken;

use crate::bus::{Interrupted, TurnHandler, TurnInput, TurnOutput};
use crate::config::Config;
use crate::llm::{DeltaSink, LlmProvider};
use crate::metrics::Metrics;
use crate::store::Store;

pub use publisher::Publisher;
pub use skills::{SkillInfo, list_skills};
use tool::Tool;
use tools::Registry;
use tools::spawn::Subagents;

/// Streams a turn's text to whoever waits for it (the API channel), by inbound id.
pub trait StreamRegistry: Send + Sync + 'static {
    fn sink_for(&self, inbound_id: &str) -> Option<DeltaSink>;
    /// The turn for `inbound_id` was stopped and will send no reply: whoever waits for one
    /// (an API request) is told so now.
    fn stopped(&self, _inbound_id: &str) {}
    /// The turn for `inbound_id` ended with nothing to say (its tools did the work, or the
    /// model chose silence after them): whoever waits for a reply gets an empty one now.
    fn silent(&self, _inbound_id: &str, _usage: switchboard_channel::TokenUsage) {}
}

/// An extra chat command answered without the LLM (`/reminders`).
pub type CommandFn = Arc<dyn Fn(&ChatKey) -> String + Send + Sync>;

/// The agent: turns inbound messages into replies.
pub struct Agent {
    config: Arc<Config>,
    store: Arc<dyn Store>,
    llm: Arc<dyn LlmProvider>,
    metrics: Arc<Metrics>,
    streams: Option<Arc<dyn StreamRegistry>>,
    status: CommandFn,
    extra_tools: Vec<Arc<dyn Tool>>,
    commands: HashMap<String, CommandFn>,
    publisher: Option<Arc<dyn Publisher>>,
    shutdown: Option<CancellationToken>,
    /// Where sub-agents run, so a stopping gateway waits for their results to be stored.
    tasks: tokio_util::task::TaskTracker,
    /// Built on first use, once every builder method has run.
    subagents: OnceLock<Arc<Subagents>>,
    /// Extra addresses `web_fetch` may reach (tests).
    fetch_allow: Option<std::net::SocketAddr>,
    /// Skills as last loaded, reloaded when older than [`SKILLS_TTL`] (so edits to SKILL.md
    /// files show up quickly without rescanning folders on every turn).
    skills_cache: std::sync::Mutex<Option<(std::time::Instant, Arc<Vec<skills::Skill>>)>>,
    /// The turn registry built for the skills list it holds; rebuilt when the skills are
    /// reloaded, so tools, HTTP clients and schemas are not rebuilt on every turn.
    registry_cache: std::sync::Mutex<Option<RegistryFor>>,
    /// Told of cron jobs whose run's reply the platform refused (the scheduler's count).
    refused_jobs: Option<RefusedFn>,
}

/// What is told of refused job replies: the jobs, and the platform's word.
pub type RefusedFn = Arc<dyn Fn(Vec<String>, String) + Send + Sync>;

/// A turn registry and the skills list it was built for.
type RegistryFor = (Arc<Vec<skills::Skill>>, Arc<Registry>);

/// How long a loaded skills list is reused.
const SKILLS_TTL: std::time::Duration = std::time::Duration::from_secs(5);

impl Agent {
    pub fn new(
        config: Arc<Config>,
        store: Arc<dyn Store>,
        llm: Arc<dyn LlmProvider>,
        metrics: Arc<Metrics>,
    ) -> Self {
        Self {
            config,
            store,
            llm,
            metrics,
            streams: None,
            status: Arc::new(|_| String::new()),
            extra_tools: Vec::new(),
            commands: HashMap::new(),
            publisher: None,
            shutdown: None,
            tasks: Default::default(),
            subagents: OnceLock::new(),
            fetch_allow: None,
            skills_cache: std::sync::Mutex::new(None),
            registry_cache: std::sync::Mutex::new(None),
            refused_jobs: None,
        }
    }

    /// Who is told when the reply to a cron job's run was refused for good.
    pub fn with_refused_jobs(mut self, f: RefusedFn) -> Self {
        self.refused_jobs = Some(f);
        self
    }

    /// The skills, from the cache while it is fresh.
    fn skills(&self) -> Arc<Vec<skills::Skill>> {
        let mut cache = self.skills_cache.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((at, skills)) = cache.as_ref() {
            if at.elapsed() < SKILLS_TTL {
                return skills.clone();
            }
        }
        let loaded = skills::load_skills(&self.config);
        // Unchanged skills keep their `Arc`, and with it the turn registry built for them.
        let skills = match cache.take() {
            Some((_, old)) if *old == loaded => old,
            _ => Arc::new(loaded),
        };
        *cache = Some((std::time::Instant::now(), skills.clone()));
        skills
    }

    /// Stream replies to waiting API requests.
    pub fn with_streams(mut self, streams: Arc<dyn StreamRegistry>) -> Self {
        self.streams = Some(streams);
        self
    }

    /// Extra `/status` lines about the chat (queue depth…), supplied by the gateway.
    pub fn with_status(mut self, status: CommandFn) -> Self {
        self.status = status;
        self
    }

    /// Extra tools (the scheduler's `cron`); a tool with a built-in's name replaces it.
    pub fn with_tools(mut self, tools: Vec<Arc<dyn Tool>>) -> Self {
        self.extra_tools.extend(tools);
        self
    }

    /// An extra chat command, `name` without the slash (`reminders`).
    pub fn with_command(mut self, name: &str, f: CommandFn) -> Self {
        self.commands
            .insert(name.trim_start_matches('/').to_string(), f);
        self
    }

    /// The way back onto the bus; enables the `message` and `spawn` tools.
    pub fn with_publisher(mut self, publisher: Arc<dyn Publisher>) -> Self {
        self.publisher = Some(publisher);
        self
    }

    /// The token interrupting turns at shutdown (once their grace is over): a turn
    /// cancelled by it keeps its progress and returns `Err(Interrupted)` (it goes on at the
    /// next start); one cancelled by `/stop` finishes with what it did. Without it every
    /// cancellation counts as shutdown. Sub-agents stop with it too.
    pub fn with_shutdown(mut self, shutdown: CancellationToken) -> Self {
        self.shutdown = Some(shutdown);
        self
    }

    /// Run sub-agents on `tasks` (the gateway's, which its stop waits for).
    pub fn with_tasks(mut self, tasks: tokio_util::task::TaskTracker) -> Self {
        self.tasks = tasks;
        self
    }

    /// Let `web_fetch` reach this otherwise refused address (tests with a local server).
    pub fn with_fetch_allowed(mut self, addr: std::net::SocketAddr) -> Self {
        self.fetch_allow = Some(addr);
        self
    }

    /// The built-in tools plus extras, without `spawn` and `message`.
    fn base_registry(&self, skills: &Arc<Vec<skills::Skill>>) -> Registry {
        let web_fetch = match self.fetch_allow {
            Some(a) => tools::web::WebFetch::allowing(a),
            None => tools::web::WebFetch::default(),
        };
        let mut list: Vec<Arc<dyn Tool>> = vec![
            Arc::new(tools::files::ReadFile),
            Arc::new(tools::files::WriteFile),
            Arc::new(tools::files::EditFile),
            Arc::new(tools::files::ListDir),
            Arc::new(tools::exec::Exec::new(&self.config.gateway.data_dir)),
            Arc::new(web_fetch),
            Arc::new(tools::memory::Memory {
                tz: Some(self.config.gateway.tz()),
            }),
            Arc::new(tools::read_skill::ReadSkill::new(skills.clone())),
        ];
        // Offered also without its key (it then says how to set one up); an empty
        // `agent.web_search_key_env` turns it off.
        if !self.config.agent.web_search_key_env.trim().is_empty() {
            list.push(Arc::new(tools::web::WebSearch::from_config(
                &self.config.agent,
            )));
        }
        list.extend(self.extra_tools.iter().cloned());
        Registry::new(list)
    }

    /// Every tool of a turn, reused while the skills list is the same.
    fn registry(&self, skills: &Arc<Vec<skills::Skill>>) -> Arc<Registry> {
        let mut cache = self
            .registry_cache
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if let Some((for_skills, reg)) = cache.as_ref() {
            if Arc::ptr_eq(for_skills, skills) {
                return reg.clone();
            }
        }
        let reg = Arc::new(self.build_registry(skills));
        *cache = Some((skills.clone(), reg.clone()));
        reg
    }

    fn build_registry(&self, skills: &Arc<Vec<skills::Skill>>) -> Registry {
        let mut reg = self.base_registry(skills);
        if let Some(publisher) = &self.publisher {
            reg.add(Arc::new(tools::message::Message::new(publisher.clone())));
            let subs = self.subagents.get_or_init(|| {
                Arc::new(Subagents::new(
                    self.config.clone(),
                    self.llm.clone(),
                    self.base_registry(skills),
                    publisher.clone(),
                    self.metrics.clone(),
                    (
                        self.shutdown.clone().unwrap_or_default(),
                        self.tasks.clone(),
                    ),
                ))
            });
            reg.add(Arc::new(tools::spawn::Spawn::new(subs.clone())));
        }
        reg
    }

    /// Stop the running sub-agents of `key` (`/stop`, `/new`); how many there were.
    pub(crate) fn stop_subagents(&self, key: &ChatKey) -> usize {
        self.subagents.get().map_or(0, |s| s.stop_chat(key))
    }

    /// A reply to `last`: `in_reply_to_inbound` is its id, `reply_to` its platform id.
    fn reply(
        last: &InboundMessage,
        text: impl Into<String>,
        kind: OutboundKind,
    ) -> OutboundMessage {
        let mut r = OutboundMessage::answering(last, text);
        r.kind = kind;
        r
    }
}

#[async_trait]
impl TurnHandler for Agent {
    async fn handle(&self, turn: TurnInput) -> Result<TurnOutput, Interrupted> {
        self.run_turn(turn).await
    }
    fn stop_background(&self, key: &ChatKey) -> bool {
        self.stop_subagents(key) > 0
    }
    fn stopped_before_start(&self, messages: &[InboundMessage]) {
        if let Some(streams) = &self.streams {
            for m in messages {
                streams.stopped(&m.id);
            }
        }
    }
    fn status(&self, key: &ChatKey) -> Option<String> {
        Some(commands::status(self, key))
    }
    fn job_replies_refused(&self, jobs: Vec<String>, why: String) {
        if let Some(f) = &self.refused_jobs {
            f(jobs, why);
        }
    }
}
