//! Slack mrkdwn: `*bold*`, `_italic_`, `~strike~`, `` `code` ``, ```` ``` ```` blocks,
//! `<url|text>` links and `>` quotes, with `& < >` escaped everywhere else.

use super::block::{self, Kind};
use super::inline::{self, Inline};
use super::table;
// `& < >` are the only characters Slack requires escaped, as in Telegram's HTML.
use super::telegram::{escape, escape_char};

/// Render markdown as Slack mrkdwn.
pub(super) fn render(text: &str) -> String {
    let mut out = String::new();
    for (i, b) in block::parse(text).iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        match &b.kind {
            Kind::Blank => {}
            Kind::Fence { code, .. } => code_block(&code.join("\n"), &mut out),
            Kind::Heading(t) => {
                let mut inner = String::new();
                inline(&inline::parse(t), true, &mut inner);
                wrap(&mut out, "*", &inner);
            }
            Kind::Item {
                indent,
                ordered,
                text,
            } => {
                out.push_str(indent);
                escape(ordered.unwrap_or("•"), &mut out);
                out.push(' ');
                inline(&inline::parse(text), false, &mut out);
            }
            Kind::Quote(inner) => {
                let inner = render(inner);
                let lines: Vec<String> = inner
                    .split('\n')
                    .map(|l| {
                        if l.is_empty() {
                            ">".into()
                        } else {
                            format!("> {l}")
                        }
                    })
                    .collect();
                out.push_str(&lines.join("\n"));
            }
            Kind::Table(rows) => code_block(&table::layout(rows), &mut out),
            Kind::Rule => out.push_str("———"),
            Kind::Paragraph(lines) => inline(&inline::parse(&lines.join("\n")), false, &mut out),
        }
    }
    out
}

fn code_block(code: &str, out: &mut String) {
    if code.trim().is_empty() {
        return;
    }
    out.push_str("```\n");
    let mut ticks = 0;
    for c in code.chars() {
        // Slack ends a block at any ``` and has no escape: a zero-width space splits one.
        ticks = if c == '`' { ticks + 1 } else { 0 };
        if ticks == 3 {
            out.push('\u{200B}');
            ticks = 1;
        }
        escape_char(c, out);
    }
    out.push_str("\n```");
}

/// `marker` + content + `marker`, or the bare content when it is blank.
fn wrap(out: &mut String, marker: &str, inner: &str) {
    if inner.trim().is_empty() {
        out.push_str(inner);
    } else {
        out.push_str(marker);
        out.push_str(inner);
        out.push_str(marker);
    }
}

/// Inline nodes; inside bold (`in_bold`) nested bold markers are dropped, since Slack
/// cannot nest `*` in `*`.
fn inline(nodes: &[Inline], in_bold: bool, out: &mut String) {
    for n in nodes {
        let mut inner = String::new();
        match n {
            Inline::Text(t) => escape_text(t, out),
            Inline::Url(t) => escape(t, out),
            // Slack ends a code span at any backtick: one with a backtick shows as text.
            Inline::Code(t) if t.contains('`') => escape(t, out),
            Inline::Code(t) => {
                escape(t, &mut inner);
                wrap(out, "`", &inner);
            }
            Inline::Strong(c) if in_bold => inline(c, true, out),
            Inline::Strong(c) => {
                inline(c, true, &mut inner);
                wrap(out, "*", &inner);
            }
            Inline::Emph(c) => {
                inline(c, in_bold, &mut inner);
                wrap(out, "_", &inner);
            }
            Inline::Strike(c) => {
                inline(c, in_bold, &mut inner);
                wrap(out, "~", &inner);
            }
            Inline::Link { text, url } => link(text, url, out),
        }
    }
}

/// `<url|text>`; the label is plain text (Slack does not format inside links).
fn link(text: &[Inline], url: &str, out: &mut String) {
    let mut label = String::new();
    plain_nodes(text, &mut label);
    let lower = url.to_ascii_lowercase();
    let url = if lower.starts_with("www.") {
        format!("https://{url}")
    } else {
        url.to_string()
    };
    if !["http://", "https://", "mailto:"]
        .iter()
        .any(|p| lower.starts_with(p) || lower.starts_with("www."))
    {
        escape(&label, out);
        out.push_str(" (");
        escape(&url, out);
        out.push(')');
        return;
    }
    out.push('<');
    escape(&url.replace('|', "%7C"), out);
    if !label.trim().is_empty() && label != url {
        out.push('|');
        escape(&label, out);
    }
    out.push('>');
}

fn plain_nodes(nodes: &[Inline], out: &mut String) {
    for n in nodes {
        match n {
            Inline::Text(t) | Inline::Code(t) | Inline::Url(t) => out.push_str(t),
            Inline::Strong(c) | Inline::Emph(c) | Inline::Strike(c) => plain_nodes(c, out),
            Inline::Link { text, .. } => plain_nodes(text, out),
        }
    }
}

/// [`escape`] text, letting a user or channel mention through as Slack writes it (`<@U1>`,
/// `<#C1|general>`): the model writes them back from the messages it read. Broadcasts
/// (`<!here>`, `<!channel>`) are escaped like any other text.
fn escape_text(text: &str, out: &mut String) {
    let mut rest = text;
    while let Some(at) = rest.find('<') {
        escape(&rest[..at], out);
        let token = rest[at..].find('>').map(|end| &rest[at..=at + end]);
        match token.filter(|t| is_mention(t)) {
            Some(t) => {
                out.push_str(t);
                rest = &rest[at + t.len()..];
            }
            None => {
                out.push_str("&lt;");
                rest = &rest[at + 1..];
            }
        }
    }
    escape(rest, out);
}

/// `<@U0123ABCD>`, `<@W…>`, `<#C0123ABCD>` or `<#C0123ABCD|name>`.
fn is_mention(token: &str) -> bool {
    let Some(inner) = token.strip_prefix('<').and_then(|t| t.strip_suffix('>')) else {
        return false;
    };
    let (id, name) = match inner.split_once('|') {
        Some((id, name)) => (id, Some(name)),
        None => (inner, None),
    };
    let id_ok = |id: &str, first: &[char]| {
        id.len() >= 3
            && id.starts_with(first)
            && id
                .chars()
                .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit())
    };
    match (id.strip_prefix('@'), id.strip_prefix('#')) {
        (Some(user), _) => name.is_none() && id_ok(user, &['U', 'W']),
        (_, Some(channel)) => id_ok(channel, &['C', 'G']) && !name.is_some_and(|n| n.contains('<')),
        _ => false,
    }
}
