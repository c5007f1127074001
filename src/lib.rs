//! switchboard: one AI assistant across Telegram, Discord, Slack and an HTTP API.
//!
//! Data flows one way through these modules:
//! - [`channels`] starts the platform adapters (crates under `channels/`), which publish
//!   `InboundMessage`s through [`gateway::GatewaySink`] ([`access`] policy, [`pairing`]).
//! - [`bus`] stores each message durably in the [`store`], dedups it, and runs one turn at a
//!   time per chat key, in parallel across keys.
//! - [`agent`] turns messages into replies with an [`llm`] provider and tools.
//! - Replies go back through the bus's durable outbox to the channel that owns the key.
//! - [`scheduler`] (cron jobs, heartbeat) publishes `System` messages onto the bus.
//! - [`chain`] follows turns that started turns (job runs, sub-agent results), so they stop.
//! - [`http`] serves health, readiness, [`metrics`], the OpenAI-compatible `api` channel,
//!   the Slack Events API and the loopback admin API used by the [`cli`].
//! - [`config`] loads and validates `config.toml`; [`gateway`] wires it all together.
//! - [`memory`] gives freed heap back to the system when the bus goes idle.

pub mod access;
pub mod agent;
pub mod backoff;
pub mod bus;
pub mod chain;
pub mod channels;
pub mod cli;
pub mod config;
pub mod confine;
pub mod gateway;
pub mod http;
pub mod llm;
pub mod memory;
pub mod metrics;
pub mod pairing;
pub mod scheduler;
pub mod store;

pub use config::Config;
pub use gateway::{StartOptions, run, start};
