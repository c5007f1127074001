//! Property-style tests over generated markdown: chunk limits, balanced fences, preserved
//! content, well-formed Telegram HTML, rendered messages within the platform limit.

use crate::format::{chunk_markdown, render, render_chunks, visible_len};
use crate::{Capabilities, Dialect};

/// Deterministic xorshift, so a failure is reproducible from its seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len())]
    }
}

const WORDS: &[&str] = &[
    "hello",
    "world",
    "snake_case_name",
    "2*3*4",
    "a<b",
    "x&y",
    "**bold**",
    "*it*",
    "_it_",
    "~~gone~~",
    "`code <t>`",
    "**open",
    "close**",
    "_",
    "*",
    "~~",
    "über",
    "日本語",
    "😀",
    "👨\u{200D}👩\u{200D}👧",
    "https://x.io/a_b*c*",
    "[link](https://x.io/q?a=1&b=\"2\")",
    "[rel](./a_b.md)",
    "<https://y.io>",
    "\\*esc\\*",
    "#tag",
    "__dunder__",
    "e\u{301}",
    "***mix***",
    "**a _b_ c**",
    ">",
    "&amp;",
    "</b>",
];

const LANGS: &[&str] = &["", "rust", "python", "sh"];

/// A random markdown document of roughly `size` characters.
fn document(rng: &mut Rng, size: usize) -> String {
    let mut out = String::new();
    while out.chars().count() < size {
        match rng.below(10) {
            0 => {
                let lang = rng.pick(LANGS);
                out.push_str(&format!("```{lang}\n"));
                for _ in 0..rng.below(12) + 1 {
                    for _ in 0..rng.below(8) {
                        out.push_str(rng.pick(WORDS));
                        out.push(' ');
                    }
                    out.push('\n');
                }
                out.push_str("```\n");
            }
            1 => out.push_str(&format!(
                "{} {}\n",
                "#".repeat(rng.below(3) + 1),
                rng.pick(WORDS)
            )),
            2 => {
                for i in 0..rng.below(4) + 1 {
                    let marker = if rng.below(2) == 0 {
                        "-".to_string()
                    } else {
                        format!("{}.", i + 1)
                    };
                    let indent = "  ".repeat(rng.below(2));
                    out.push_str(&format!(
                        "{indent}{marker} {} {}\n",
                        rng.pick(WORDS),
                        rng.pick(WORDS)
                    ));
                }
            }
            3 => out.push_str(&format!("> {} {}\n", rng.pick(WORDS), rng.pick(WORDS))),
            4 => {
                out.push_str("| a | b |\n|---|---|\n");
                for _ in 0..rng.below(3) + 1 {
                    out.push_str(&format!("| {} | {} |\n", rng.pick(WORDS), rng.pick(WORDS)));
                }
            }
            5 => out.push('\n'),
            6 => {
                // Sometimes without a newline, so a following ``` is not at a line start.
                out.push_str(&"z".repeat(rng.below(120)));
                if rng.below(2) == 0 {
                    out.push('\n');
                }
            }
            _ => {
                for _ in 0..rng.below(30) + 1 {
                    out.push_str(rng.pick(WORDS));
                    out.push(if rng.below(8) == 0 { '\n' } else { ' ' });
                }
                out.push('\n');
            }
        }
    }
    out
}

/// Whether every fence opened in `chunk` is closed in it (CommonMark: inside a fence, only
/// a line of at least as many backticks closes it; ```` ```rust ```` there is code).
pub(super) fn fences_balanced(chunk: &str) -> bool {
    let mut open: Option<usize> = None;
    for line in chunk.lines() {
        let t = line.trim();
        let ticks = t.chars().take_while(|&c| c == '`').count();
        match open {
            Some(n) if ticks >= n && ticks == t.len() => open = None,
            None if ticks >= 3 => open = Some(ticks),
            _ => {}
        }
    }
    open.is_none()
}

/// Text without fence lines, whitespace or inline markers (a cut closes and reopens a span
/// it falls in): what chunking must preserve.
fn content(text: &str) -> String {
    text.lines()
        .filter(|l| !l.trim_start().starts_with("```"))
        .flat_map(|l| l.chars())
        .filter(|c| !c.is_whitespace() && !matches!(c, '*' | '_' | '~' | '`'))
        .collect()
}

/// The chunk invariants: within the limit, not blank, content preserved in order.
pub(super) fn assert_chunks_ok(text: &str, chunks: &[String], limit: usize) {
    for (i, c) in chunks.iter().enumerate() {
        let n = c.chars().count();
        assert!(n <= limit, "chunk {i} has {n} chars > {limit}:\n{c}");
        assert!(!c.trim().is_empty(), "chunk {i} is blank");
    }
    let joined: String = chunks.iter().map(|c| content(c)).collect();
    assert_eq!(joined, content(text), "content changed (limit {limit})");
}

/// Check Telegram HTML: allowed tags only, properly nested and closed, no raw `<`, `>`, or
/// stray `&` in text.
pub(super) fn assert_telegram_html(html: &str) {
    let mut stack: Vec<String> = Vec::new();
    let mut rest = html;
    while let Some(c) = rest.chars().next() {
        match c {
            '<' => {
                let end = rest
                    .find('>')
                    .unwrap_or_else(|| panic!("unclosed tag in {html:?}"));
                let tag = &rest[1..end];
                if let Some(name) = tag.strip_prefix('/') {
                    let open = stack
                        .pop()
                        .unwrap_or_else(|| panic!("stray </{name}> in {html:?}"));
                    assert_eq!(open, name, "misnested in {html:?}");
                } else {
                    let name = tag.split(' ').next().unwrap_or("");
                    assert!(
                        ["b", "i", "s", "u", "code", "pre", "a", "blockquote"].contains(&name),
                        "tag <{tag}> in {html:?}"
                    );
                    if name == "a" {
                        let href = tag
                            .strip_prefix("a href=\"")
                            .and_then(|h| h.strip_suffix('"'));
                        let href = href.unwrap_or_else(|| panic!("bad <{tag}>"));
                        assert!(
                            !href.contains('"') && !href.contains('<'),
                            "bad href {href:?}"
                        );
                    }
                    stack.push(name.to_string());
                }
                rest = &rest[end + 1..];
            }
            '&' => {
                let ok = ["&amp;", "&lt;", "&gt;", "&quot;"]
                    .iter()
                    .any(|e| rest.starts_with(e));
                assert!(ok, "stray & in {html:?}");
                rest = &rest[1..];
            }
            '>' => panic!("raw > in {html:?}"),
            _ => rest = &rest[c.len_utf8()..],
        }
    }
    assert!(stack.is_empty(), "unclosed {stack:?} in {html:?}");
}

/// 300 seeded cases: a text `make` writes of 50 to 1 550 characters, a limit of 20 to 320,
/// and its chunks, checked against [`assert_chunks_ok`].
fn chunked_cases(make: fn(&mut Rng, usize) -> String) -> Vec<(u64, String, usize, Vec<String>)> {
    (1..=300u64)
        .map(|seed| {
            let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
            let size = 50 + rng.below(1500);
            let text = make(&mut rng, size);
            let limit = 20 + rng.below(300);
            let chunks = chunk_markdown(&text, limit);
            assert_chunks_ok(&text, &chunks, limit);
            (seed, text, limit, chunks)
        })
        .collect()
}

#[test]
fn generated_documents_chunk_and_render_within_limits() {
    for (seed, text, limit, chunks) in chunked_cases(document) {
        for (i, c) in chunks.iter().enumerate() {
            if !fences_balanced(c) {
                let prev = i.checked_sub(1).map_or("", |p| chunks[p].as_str());
                panic!(
                    "seed {seed}, limit {limit}, chunk {i} unbalanced:\n{c}\n--- previous:\n{prev}\n--- text:\n{text}"
                );
            }
            assert_telegram_html(&render(c, Dialect::TelegramHtml));
        }
        assert_telegram_html(&render(&text, Dialect::TelegramHtml));
        for dialect in [
            Dialect::TelegramHtml,
            Dialect::SlackMrkdwn,
            Dialect::Markdown,
            Dialect::Plain,
        ] {
            let caps = Capabilities {
                edits: false,
                typing: false,
                threads: false,
                max_message_len: limit,
                dialect,
            };
            for m in render_chunks(&text, caps) {
                let n = visible_len(&m, dialect);
                assert!(n <= limit, "seed {seed} {dialect:?}: {n} > {limit}:\n{m}");
                assert!(!m.trim().is_empty());
                if dialect == Dialect::TelegramHtml {
                    assert_telegram_html(&m);
                }
            }
        }
    }
}

/// Prose as a model writes it: paragraphs and list items with bold, italic, struck, code
/// and linked runs of several words, sometimes nested.
fn prose(rng: &mut Rng, size: usize) -> String {
    const PLAIN: &[&str] = &[
        "the",
        "quick",
        "fox",
        "über",
        "日本語",
        "it's",
        "end.",
        "(see)",
    ];
    let mut out = String::new();
    while out.chars().count() < size {
        if rng.below(4) == 0 {
            out.push_str("- ");
        }
        for _ in 0..rng.below(40) + 5 {
            let words: Vec<&str> = (0..rng.below(5) + 1).map(|_| rng.pick(PLAIN)).collect();
            let run = words.join(" ");
            out.push_str(&match rng.below(9) {
                0 => format!("**{run}**"),
                1 => format!("*{run}*"),
                2 => format!("_{run}_"),
                3 => format!("~~{run}~~"),
                4 => format!("`{run}`"),
                5 => format!("**{} *{run}* {}**", rng.pick(PLAIN), rng.pick(PLAIN)),
                _ => run,
            });
            out.push(if rng.below(10) == 0 { '\n' } else { ' ' });
        }
        out.push_str(if rng.below(2) == 0 { "\n\n" } else { "\n" });
    }
    out
}

/// The visible text of `md` without whitespace.
fn visible(md: &str) -> String {
    render(md, Dialect::Plain)
        .chars()
        .filter(|c| !c.is_whitespace())
        .collect()
}

#[test]
fn spans_cut_across_chunks_are_closed_and_reopened() {
    for (seed, text, limit, chunks) in chunked_cases(prose) {
        let shown: String = chunks.iter().map(|c| visible(c)).collect();
        assert_eq!(
            shown,
            visible(&text),
            "seed {seed}, limit {limit}:\n{chunks:#?}"
        );
    }
}

#[test]
fn slack_escapes_that_lengthen_a_chunk_are_resplit() {
    let text = "a<b&c> ".repeat(500);
    let caps = Capabilities {
        edits: false,
        typing: false,
        threads: false,
        max_message_len: 1000,
        dialect: Dialect::SlackMrkdwn,
    };
    let messages = render_chunks(&text, caps);
    assert!(messages.len() >= 5);
    for m in &messages {
        assert!(m.chars().count() <= 1000, "{}", m.chars().count());
        assert!(m.starts_with("a&lt;b&amp;c&gt;"));
    }
    let total: usize = messages
        .iter()
        .map(|m| m.matches("a&lt;b&amp;c&gt;").count())
        .sum();
    assert_eq!(total, 500);
}

#[test]
fn telegram_limit_counts_visible_text_not_tags() {
    let text = "**bold** & more ".repeat(200); // 3 200 source chars
    let caps = Capabilities {
        edits: false,
        typing: false,
        threads: false,
        max_message_len: 4096,
        dialect: Dialect::TelegramHtml,
    };
    let messages = render_chunks(&text, caps);
    assert_eq!(messages.len(), 1, "markup must not count toward the limit");
    assert!(
        messages[0].chars().count() > 4096,
        "escapes and tags are longer than the text"
    );
    assert_eq!(visible_len("<b>a</b> &amp; 😀", Dialect::TelegramHtml), 6);
}

#[test]
fn telegram_chunks_count_utf16_units_so_emoji_text_takes_no_extra_message() {
    let text = "ab😀 ".repeat(1100); // 4 400 chars, 5 500 UTF-16 units
    let caps = Capabilities {
        edits: false,
        typing: false,
        threads: false,
        max_message_len: 4096,
        dialect: Dialect::TelegramHtml,
    };
    let messages = render_chunks(&text, caps);
    assert_eq!(
        messages.len(),
        2,
        "5 500 units fit in two messages of 4 096"
    );
    for m in &messages {
        assert!(visible_len(m, Dialect::TelegramHtml) <= 4096);
    }
    assert_eq!(messages.concat().matches("ab😀").count(), 1100);
    // A chunk counted in units holds fewer emoji than one counted in characters.
    let units = crate::format::chunk_markdown_utf16(&text, 4096);
    assert_eq!(units.len(), 2);
    assert!(units[0].encode_utf16().count() <= 4096 && units[0].chars().count() < 4096);
}
