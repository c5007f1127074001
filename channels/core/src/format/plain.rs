//! Plain dialect: the visible text with the markup removed, for platforms that rejected
//! formatting (the adapter resends the reply as plain text).

use super::block::{self, Kind};
use super::inline::{self, Inline};
use super::table;

/// Render markdown as plain text.
pub(super) fn render(text: &str) -> String {
    let mut out = String::new();
    for (i, b) in block::parse(text).iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        match &b.kind {
            Kind::Blank => {}
            Kind::Fence { code, .. } => out.push_str(&code.join("\n")),
            Kind::Heading(t) => out.push_str(&inline_text(t)),
            Kind::Item {
                indent,
                ordered,
                text,
            } => {
                out.push_str(indent);
                out.push_str(ordered.unwrap_or("•"));
                out.push(' ');
                out.push_str(&inline_text(text));
            }
            Kind::Quote(inner) => {
                let inner = render(inner);
                let lines: Vec<String> = inner.lines().map(|l| format!("> {l}")).collect();
                out.push_str(&lines.join("\n"));
            }
            Kind::Table(rows) => out.push_str(&table::layout(rows)),
            Kind::Rule => out.push_str("———"),
            Kind::Paragraph(lines) => out.push_str(&inline_text(&lines.join("\n"))),
        }
    }
    out
}

/// Inline markdown → its visible text (`**b**` → `b`, `[t](u)` → `t (u)`).
pub(super) fn inline_text(text: &str) -> String {
    let mut out = String::new();
    nodes(&inline::parse(text), &mut out);
    out
}

fn nodes(list: &[Inline], out: &mut String) {
    for n in list {
        match n {
            Inline::Text(t) | Inline::Code(t) | Inline::Url(t) => out.push_str(t),
            Inline::Strong(c) | Inline::Emph(c) | Inline::Strike(c) => nodes(c, out),
            Inline::Link { text, url } => {
                let mut label = String::new();
                nodes(text, &mut label);
                if label.trim().is_empty() || label == *url {
                    out.push_str(url);
                } else {
                    out.push_str(&label);
                    out.push_str(" (");
                    out.push_str(url);
                    out.push(')');
                }
            }
        }
    }
}
