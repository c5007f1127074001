//! Markdown rendering for each platform dialect, and chunking at a platform's limit.
//!
//! The model writes markdown. [`chunk_markdown`] splits it into pieces that fit a platform's
//! limit (preferring paragraph, then line, then word boundaries, never leaving a code fence
//! unbalanced), [`render`] turns a piece into the platform's [`Dialect`], and
//! [`render_chunks`] does both for a channel's [`Capabilities`].
//!
//! Inside: [`block`] parses lines into blocks, [`inline`] parses emphasis, code and links,
//! and one module per dialect walks the result (`telegram`, `slack`, `markdown`, `plain`);
//! `table` lays out tables as aligned text for dialects that cannot show them.

mod block;
mod chunk;
mod inline;
mod markdown;
mod plain;
mod slack;
mod table;
mod telegram;

#[cfg(test)]
mod tests;

use crate::{Capabilities, Dialect};

/// Split markdown into chunks of at most `max_chars` characters (not bytes) each.
///
/// Cuts prefer paragraph breaks, then line breaks, then word boundaries, then any point
/// that does not split a character or an emoji sequence. A code fence cut across chunks is
/// closed at the end of one chunk and reopened (same fence line, language included) at the
/// start of the next; those lines count toward the limit. The whitespace at a cut is
/// dropped; no chunk is empty or whitespace-only, so a blank `text` gives no chunks. A text
/// within the limit comes back as one chunk, unchanged. A `max_chars` of 0 counts as 1.
pub fn chunk_markdown(text: &str, max_chars: usize) -> Vec<String> {
    chunk::chunk(text, max_chars, chunk::Count::Chars)
}

/// [`chunk_markdown`] counting UTF-16 code units, as Telegram does (an emoji counts two),
/// so emoji-heavy text is not cut into pieces that must be split again.
pub fn chunk_markdown_utf16(text: &str, max_units: usize) -> Vec<String> {
    chunk::chunk(text, max_units, chunk::Count::Utf16)
}

/// Chunk for `dialect`: in UTF-16 units for Telegram, characters for the others.
fn chunk_for(text: &str, max: usize, dialect: Dialect) -> Vec<String> {
    match dialect {
        Dialect::TelegramHtml => chunk_markdown_utf16(text, max),
        _ => chunk_markdown(text, max),
    }
}

/// Render markdown in a platform dialect.
///
/// - [`Dialect::TelegramHtml`]: Telegram's HTML subset, `& < >` escaped, tags always
///   balanced (unmatched markers stay literal text).
/// - [`Dialect::SlackMrkdwn`]: Slack mrkdwn, `& < >` escaped.
/// - [`Dialect::Markdown`]: the text as written, tables wrapped in a code block.
/// - [`Dialect::Plain`]: the visible text without markup.
pub fn render(text: &str, dialect: Dialect) -> String {
    match dialect {
        Dialect::Plain => plain::render(text),
        Dialect::Markdown => markdown::render(text),
        Dialect::TelegramHtml => telegram::render(text),
        Dialect::SlackMrkdwn => slack::render(text),
    }
}

/// Chunk `text` at `caps.max_message_len` and render each chunk in `caps.dialect`.
///
/// Every returned message fits the limit as the platform counts it ([`visible_len`]): a
/// chunk that grows past it when rendered (Slack escapes, a table laid out in a code block)
/// is split again. Blank chunks are left out.
pub fn render_chunks(text: &str, caps: Capabilities) -> Vec<String> {
    let max = caps.max_message_len.max(1);
    let mut out = Vec::new();
    for piece in chunk_for(text, max, caps.dialect) {
        fit(&piece, max, max, caps.dialect, &mut out);
    }
    out
}

/// Render `piece`; if it is too long, split it with a smaller limit and try again.
fn fit(piece: &str, limit: usize, max: usize, dialect: Dialect, out: &mut Vec<String>) {
    let rendered = render(piece, dialect);
    let len = visible_len(&rendered, dialect);
    if len <= max || limit <= 1 {
        if !rendered.trim().is_empty() {
            out.push(rendered);
        }
        return;
    }
    // Shrink in proportion to the overflow; always strictly, so this ends.
    let source = piece.chars().count().min(limit);
    let smaller = (source * max / len).clamp(1, limit - 1);
    for sub in chunk_for(piece, smaller, dialect) {
        fit(&sub, smaller, max, dialect, out);
    }
}

/// The length of a rendered message as its platform counts it against the limit.
///
/// Telegram counts the text after entity parsing (tags removed, `&amp;` one character) in
/// UTF-16 code units; the others count characters.
pub fn visible_len(rendered: &str, dialect: Dialect) -> usize {
    if dialect != Dialect::TelegramHtml {
        return rendered.chars().count();
    }
    let mut n = 0;
    let mut chars = rendered.chars();
    while let Some(c) = chars.next() {
        match c {
            '<' => {
                for t in chars.by_ref() {
                    if t == '>' {
                        break;
                    }
                }
            }
            '&' => {
                for t in chars.by_ref() {
                    if t == ';' {
                        break;
                    }
                }
                n += 1;
            }
            _ => n += c.len_utf16(),
        }
    }
    n
}
