//! Fake llm server (being written).
