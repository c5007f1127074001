//! Fake platform and LLM servers on 127.0.0.1 for switchboard's tests and benchmark.
//!
//! Each fake speaks the real wire format closely enough that the real client crate
//! (teloxide, serenity, slack-morphism, switchboard's own LLM client) cannot tell the
//! difference, records what crossed the wire, and offers bounded waits for tests.
//!
//! - [`llm`]: OpenAI Chat Completions and Anthropic Messages, scripted, with injected faults.
//! - [`telegram`]: the Bot API (long polling `getUpdates`, `sendMessage`, files…).
//! - [`discord`]: REST under `/api/v10` and the websocket gateway.
//! - [`slack`]: the Web API, Socket Mode websocket, and an Events API client.

pub mod discord;
pub mod llm;
pub mod slack;
pub mod telegram;
