//! Markdown dialect (Discord, the API channel): the text passes through as written, except
//! tables, which Discord does not render: they become aligned text in a code block.

use super::block::{self, Kind};
use super::table;

/// Render markdown for a markdown platform.
pub(super) fn render(text: &str) -> String {
    let mut out: Vec<String> = Vec::new();
    for b in block::parse(text) {
        match &b.kind {
            Kind::Table(rows) => out.push(format!("```\n{}\n```", table::layout(rows))),
            _ => out.push(b.raw.join("\n")),
        }
    }
    out.join("\n")
}
