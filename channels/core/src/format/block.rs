//! Block-level markdown: code fences, headings, list items, quotes, tables, rules, paragraphs.
//!
//! Parsing is line based and forgiving, tuned to what language models write rather than to
//! the full CommonMark grammar: a fence may be indented (inside a list), a table is a header
//! with a delimiter row or a run of `| … |` lines, and a paragraph runs until a blank line or
//! the start of another block. Every block keeps its raw source lines, so a renderer can pass
//! a block through untouched.

/// An opening code fence line: ```` ```lang ```` or `~~~lang`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FenceOpen<'a> {
    /// The fence character, `` ` `` or `~`.
    pub marker: char,
    /// How many fence characters opened it (a closing fence needs at least as many).
    pub len: usize,
    /// Leading spaces before the fence, stripped from the code lines.
    pub indent: usize,
    /// First word of the info string (`rust` in ```` ```rust title="x" ````), maybe empty.
    pub lang: &'a str,
}

/// Recognise an opening fence line.
pub(crate) fn fence_open(line: &str) -> Option<FenceOpen<'_>> {
    let rest = line.trim_start_matches([' ', '\t']);
    let indent = line.len() - rest.len();
    let marker = rest.chars().next()?;
    if marker != '`' && marker != '~' {
        return None;
    }
    let len = rest.chars().take_while(|&c| c == marker).count();
    if len < 3 {
        return None;
    }
    // The marker characters are ASCII, so `len` is also a byte offset.
    let info = rest[len..].trim();
    if marker == '`' && info.contains('`') {
        return None; // ```` ```foo``` ```` is inline code, not a fence
    }
    let lang = info.split_whitespace().next().unwrap_or("");
    Some(FenceOpen {
        marker,
        len,
        indent,
        lang,
    })
}

/// Whether `line` closes the fence `open`.
pub(crate) fn fence_closes(line: &str, open: &FenceOpen<'_>) -> bool {
    let t = line.trim();
    let n = t.chars().take_while(|&c| c == open.marker).count();
    n >= open.len && n == t.len()
}

/// What a run of source lines is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Kind<'a> {
    /// An empty or whitespace-only line.
    Blank,
    /// A fenced code block; `code` has the fence's indentation stripped.
    Fence { lang: &'a str, code: Vec<&'a str> },
    /// `# Heading` of any level, without the `#`s.
    Heading(&'a str),
    /// A list item: `ordered` is `Some("3.")` for numbered items, `None` for bullets.
    Item {
        indent: &'a str,
        ordered: Option<&'a str>,
        text: &'a str,
    },
    /// Consecutive `>` lines with the `>` (and one space) removed.
    Quote(String),
    /// Table rows as written, delimiter row included.
    Table(Vec<&'a str>),
    /// `---`, `***`, `___`.
    Rule,
    /// Consecutive text lines.
    Paragraph(Vec<&'a str>),
}

/// One block and its raw source lines.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Block<'a> {
    pub kind: Kind<'a>,
    pub raw: Vec<&'a str>,
}

/// Split markdown into blocks. Joining every block's `raw` lines with `\n` gives `text` back.
pub(crate) fn parse(text: &str) -> Vec<Block<'_>> {
    let lines: Vec<&str> = text.split('\n').collect();
    let mut blocks = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let start = i;
        let line = lines[i].trim_end_matches('\r');
        let kind = if let Some(open) = fence_open(line) {
            i += 1;
            let mut code = Vec::new();
            while i < lines.len() {
                let l = lines[i].trim_end_matches('\r');
                i += 1;
                if fence_closes(l, &open) {
                    break;
                }
                code.push(strip_indent(l, open.indent));
            }
            Kind::Fence {
                lang: open.lang,
                code,
            }
        } else if line.trim().is_empty() {
            i += 1;
            Kind::Blank
        } else if let Some(text) = heading(line) {
            i += 1;
            Kind::Heading(text)
        } else if is_rule(line) {
            i += 1;
            Kind::Rule
        } else if let Some((indent, ordered, text)) = list_item(line) {
            i += 1;
            Kind::Item {
                indent,
                ordered,
                text,
            }
        } else if quote_body(line).is_some() {
            let mut inner = Vec::new();
            while let Some(body) = lines.get(i).and_then(|l| quote_body(l)) {
                inner.push(body);
                i += 1;
            }
            Kind::Quote(inner.join("\n"))
        } else if table_starts(&lines, i) {
            let mut rows = Vec::new();
            while let Some(l) = lines.get(i).map(|l| l.trim_end_matches('\r')) {
                if l.trim().is_empty() || !l.contains('|') {
                    break;
                }
                rows.push(l);
                i += 1;
            }
            Kind::Table(rows)
        } else {
            let mut para = vec![line];
            i += 1;
            while let Some(l) = lines.get(i).map(|l| l.trim_end_matches('\r')) {
                if l.trim().is_empty() || starts_block(&lines, i) {
                    break;
                }
                para.push(l);
                i += 1;
            }
            Kind::Paragraph(para)
        };
        blocks.push(Block {
            kind,
            raw: lines[start..i].to_vec(),
        });
    }
    blocks
}

/// Whether line `i` starts something other than a paragraph continuation.
fn starts_block(lines: &[&str], i: usize) -> bool {
    let line = lines[i].trim_end_matches('\r');
    fence_open(line).is_some()
        || heading(line).is_some()
        || is_rule(line)
        || list_item(line).is_some()
        || quote_body(line).is_some()
        || table_starts(lines, i)
}

/// Remove up to `n` leading spaces.
fn strip_indent(line: &str, n: usize) -> &str {
    let spaces = line.bytes().take(n).take_while(|&b| b == b' ').count();
    &line[spaces..]
}

/// `# Heading ##` → `Heading`.
pub(crate) fn heading(line: &str) -> Option<&str> {
    let s = line.trim_start();
    let hashes = s.bytes().take_while(|&b| b == b'#').count();
    if !(1..=6).contains(&hashes) {
        return None;
    }
    let rest = &s[hashes..];
    if !rest.is_empty() && !rest.starts_with([' ', '\t']) {
        return None; // `#hashtag`
    }
    let rest = rest.trim();
    let unclosed = rest.trim_end_matches('#');
    if unclosed.is_empty() {
        Some("")
    } else if unclosed.ends_with([' ', '\t']) {
        Some(unclosed.trim_end())
    } else {
        Some(rest)
    }
}

/// `---`, `***`, `___`, also spaced (`- - -`).
fn is_rule(line: &str) -> bool {
    let s: String = line.chars().filter(|c| !c.is_whitespace()).collect();
    s.len() >= 3 && ['-', '*', '_'].iter().any(|&m| s.chars().all(|c| c == m))
}

/// `  - text`, `* text`, `+ text`, `12. text`, `3) text` → (indent, ordered marker, text).
pub(crate) fn list_item(line: &str) -> Option<(&str, Option<&str>, &str)> {
    let body = line.trim_start_matches([' ', '\t']);
    let indent = &line[..line.len() - body.len()];
    let bytes = body.as_bytes();
    let first = *bytes.first()?;
    let marker_end = if matches!(first, b'-' | b'*' | b'+') {
        1
    } else {
        let digits = bytes.iter().take_while(|b| b.is_ascii_digit()).count();
        if !(1..=9).contains(&digits) || !matches!(bytes.get(digits), Some(b'.' | b')')) {
            return None;
        }
        digits + 1
    };
    if !matches!(bytes.get(marker_end), Some(b' ' | b'\t')) {
        return None;
    }
    let text = body[marker_end..].trim();
    if text.is_empty() {
        return None;
    }
    let ordered = (marker_end > 1).then(|| &body[..marker_end]);
    Some((indent, ordered, text))
}

/// `> text` → `text`.
fn quote_body(line: &str) -> Option<&str> {
    let line = line.trim_end_matches('\r');
    let rest = line.trim_start_matches([' ', '\t']).strip_prefix('>')?;
    Some(rest.strip_prefix(' ').unwrap_or(rest))
}

/// A table starts at `i`: a row followed by a delimiter row, or two `| … |` rows.
fn table_starts(lines: &[&str], i: usize) -> bool {
    let Some(next) = lines.get(i + 1).map(|l| l.trim_end_matches('\r')) else {
        return false;
    };
    let line = lines[i].trim_end_matches('\r');
    (line.contains('|') && is_delimiter_row(next)) || (is_pipe_row(line) && is_pipe_row(next))
}

fn is_pipe_row(line: &str) -> bool {
    let t = line.trim();
    t.len() >= 2 && t.starts_with('|') && t.ends_with('|')
}

/// `|---|:--:|`, `--- | ---`.
pub(crate) fn is_delimiter_row(line: &str) -> bool {
    let t = line.trim();
    if !t.contains('|') || !t.contains('-') {
        return false;
    }
    let t = t.strip_prefix('|').unwrap_or(t);
    let t = t.strip_suffix('|').unwrap_or(t);
    t.split('|').all(|cell| {
        let c = cell.trim();
        let c = c.strip_prefix(':').unwrap_or(c);
        let c = c.strip_suffix(':').unwrap_or(c);
        !c.is_empty() && c.chars().all(|ch| ch == '-')
    })
}
