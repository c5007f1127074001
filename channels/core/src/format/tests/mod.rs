//! Tests for rendering and chunking.

mod chunking;
mod props;
mod render;
