//! placeholder
pub mod agent;
pub mod backoff;
pub mod bus;
pub mod config;
pub mod llm;
pub mod metrics;
pub mod scheduler;
pub mod store;
