//! Producers that act on their own: cron jobs and reminders, and the heartbeat.
//! They publish `System` messages onto the bus; they never call the agent.

pub mod heartbeat;
