//! Fake slack server (being written).
