//! Telegram's HTML subset (`parse_mode=HTML`): `b i s code pre a blockquote`, with `& < >`
//! escaped everywhere else. The output is built from a tree, so tags always nest and close;
//! a tag with nothing inside is left out (Telegram rejects empty entities).

use super::block::{self, Kind};
use super::inline::{self, Inline};
use super::table;

/// Render markdown as Telegram HTML.
pub(super) fn render(text: &str) -> String {
    let mut out = String::new();
    blocks(text, false, &mut out);
    out
}

fn blocks(text: &str, in_quote: bool, out: &mut String) {
    for (i, b) in block::parse(text).iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        match &b.kind {
            Kind::Blank => {}
            Kind::Fence { code, lang } => wrap(out, "pre", |o| {
                // Telegram shows the language and highlights the code (an empty block is
                // left out whole: Telegram refuses empty entities).
                let blank = code.iter().all(|l| l.trim().is_empty());
                match language(lang).filter(|_| !blank) {
                    Some(lang) => {
                        o.push_str("<code class=\"language-");
                        o.push_str(lang);
                        o.push_str("\">");
                        escape(&code.join("\n"), o);
                        o.push_str("</code>");
                    }
                    None => escape(&code.join("\n"), o),
                }
            }),
            Kind::Heading(t) => wrap(out, "b", |o| inline(&inline::parse(t), o)),
            Kind::Item {
                indent,
                ordered,
                text,
            } => {
                escape(indent, out);
                escape(ordered.unwrap_or("•"), out);
                out.push(' ');
                inline(&inline::parse(text), out);
            }
            // Telegram does not nest blockquotes: an inner quote is rendered flat.
            Kind::Quote(inner) if in_quote => blocks(inner, true, out),
            Kind::Quote(inner) => wrap(out, "blockquote", |o| blocks(inner, true, o)),
            Kind::Table(rows) => wrap(out, "pre", |o| escape(&table::layout(rows), o)),
            Kind::Rule => out.push_str("———"),
            Kind::Paragraph(lines) => inline(&inline::parse(&lines.join("\n")), out),
        }
    }
}

/// A fence's language as a class name can carry it (`python`, `c++`, `objective-c`);
/// `None` for none or anything else.
fn language(lang: &str) -> Option<&str> {
    let lang = lang.split_whitespace().next()?;
    let ok = |c: char| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '_' | '#' | '.');
    (lang.len() <= 32 && lang.chars().all(ok)).then_some(lang)
}

/// `<tag>` + content + `</tag>`, or nothing when the content is blank.
fn wrap(out: &mut String, tag: &str, content: impl FnOnce(&mut String)) {
    let mut inner = String::new();
    content(&mut inner);
    if inner.trim().is_empty() {
        out.push_str(&inner);
        return;
    }
    out.push('<');
    out.push_str(tag);
    out.push('>');
    out.push_str(&inner);
    out.push_str("</");
    out.push_str(tag);
    out.push('>');
}

fn inline(nodes: &[Inline], out: &mut String) {
    for n in nodes {
        match n {
            Inline::Text(t) | Inline::Url(t) => escape(t, out),
            Inline::Code(t) => wrap(out, "code", |o| escape(t, o)),
            Inline::Strong(c) => wrap(out, "b", |o| inline(c, o)),
            Inline::Emph(c) => wrap(out, "i", |o| inline(c, o)),
            Inline::Strike(c) => wrap(out, "s", |o| inline(c, o)),
            Inline::Link { text, url } => link(text, url, out),
        }
    }
}

/// `<a href="url">text</a>` for URLs Telegram accepts; otherwise `text (url)`.
fn link(text: &[Inline], url: &str, out: &mut String) {
    let mut label = String::new();
    inline(text, &mut label);
    let lower = url.to_ascii_lowercase();
    let href = if ["http://", "https://", "tg://", "mailto:"]
        .iter()
        .any(|p| lower.starts_with(p))
    {
        url.to_string()
    } else if lower.starts_with("www.") {
        format!("https://{url}")
    } else {
        out.push_str(&label);
        out.push_str(" (");
        escape(url, out);
        out.push(')');
        return;
    };
    if label.trim().is_empty() {
        escape(url, &mut label);
    }
    out.push_str("<a href=\"");
    for c in href.chars() {
        match c {
            '"' => out.push_str("&quot;"),
            _ => escape_char(c, out),
        }
    }
    out.push_str("\">");
    out.push_str(&label);
    out.push_str("</a>");
}

/// Escape `& < >`.
pub(super) fn escape(text: &str, out: &mut String) {
    text.chars().for_each(|c| escape_char(c, out));
}

pub(super) fn escape_char(c: char, out: &mut String) {
    match c {
        '&' => out.push_str("&amp;"),
        '<' => out.push_str("&lt;"),
        '>' => out.push_str("&gt;"),
        _ => out.push(c),
    }
}
