//! Fake telegram server (being written).
