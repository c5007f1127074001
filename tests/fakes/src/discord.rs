//! Fake discord server (being written).
