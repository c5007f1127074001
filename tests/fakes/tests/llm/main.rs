//! Wire-level tests of the fake LLM: a real HTTP client (reqwest) against the fake, SSE
//! parsed by hand, reassembled text and tool-call arguments compared with the script.

mod anthropic;
mod faults;
mod openai;
mod parsers;
mod scripting;
mod support;
