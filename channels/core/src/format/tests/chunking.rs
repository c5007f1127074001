//! Chunking cases: limits, break preferences, fences, multibyte text.

use super::props::{assert_chunks_ok, fences_balanced};
use crate::format::chunk_markdown;

fn len(s: &str) -> usize {
    s.chars().count()
}

/// `n` paragraphs of `words` words each.
fn paragraphs(n: usize, words: usize) -> String {
    (0..n)
        .map(|p| {
            let w: Vec<String> = (0..words).map(|i| format!("w{p}x{i}")).collect();
            format!("{}.", w.join(" "))
        })
        .collect::<Vec<_>>()
        .join("\n\n")
}

#[test]
fn text_within_limit_is_one_unchanged_chunk() {
    let text = "  **hi**\n\n```rs\nx\n```\n";
    assert_eq!(chunk_markdown(text, 4096), vec![text.to_string()]);
    assert_eq!(chunk_markdown(text, len(text)), vec![text.to_string()]);
}

#[test]
fn blank_text_gives_no_chunks() {
    assert!(chunk_markdown("", 10).is_empty());
    assert!(chunk_markdown(" \n\n\t ", 2).is_empty());
}

#[test]
fn ten_thousand_chars_at_4096_cut_at_paragraphs() {
    let text = paragraphs(40, 40); // ~10 000 chars, ~250 per paragraph
    assert!(len(&text) > 10_000, "{}", len(&text));
    let chunks = chunk_markdown(&text, 4096);
    assert_eq!(chunks.len(), 3);
    assert_chunks_ok(&text, &chunks, 4096);
    for c in &chunks {
        assert!(
            c.ends_with('.'),
            "chunk does not end at a paragraph: {:?}",
            &c[c.len() - 20..]
        );
        assert!(c.starts_with('w'));
        assert!(len(c) > 4096 / 2);
    }
}

#[test]
fn five_thousand_chars_of_lines_at_2000_cut_at_lines() {
    let lines: Vec<String> = (0..102)
        .map(|i| format!("line {i:03} {}", "x".repeat(40)))
        .collect();
    let text = lines.join("\n");
    assert!(len(&text) >= 5000);
    let chunks = chunk_markdown(&text, 2000);
    assert_eq!(chunks.len(), 3);
    assert_chunks_ok(&text, &chunks, 2000);
    for c in &chunks {
        for l in c.lines() {
            assert!(lines.contains(&l.to_string()), "line cut apart: {l:?}");
        }
    }
}

#[test]
fn long_code_fence_is_closed_and_reopened_with_its_language() {
    let code: Vec<String> = (0..200)
        .map(|i| format!("    let v{i:03} = compute({i}); // <x>"))
        .collect();
    let text = format!(
        "Here is the code:\n\n```python\n{}\n```\n\nDone.",
        code.join("\n")
    );
    assert!(len(&text) > 6000);
    let chunks = chunk_markdown(&text, 2000);
    assert!(chunks.len() >= 4, "{}", chunks.len());
    assert_chunks_ok(&text, &chunks, 2000);
    for (i, c) in chunks.iter().enumerate() {
        assert!(fences_balanced(c), "chunk {i} unbalanced:\n{c}");
        if i > 0 && i < chunks.len() - 1 {
            assert!(
                c.starts_with("```python\n"),
                "chunk {i} not reopened: {:?}",
                &c[..30]
            );
        }
        if i < chunks.len() - 1 && c.contains("let v") {
            assert!(c.ends_with("\n```"), "chunk {i} not closed");
        }
        // Code lines are never cut apart (every line break in the code is a better break).
        for l in c.lines().filter(|l| l.contains("let v")) {
            assert!(code.contains(&l.to_string()), "code line cut: {l:?}");
        }
    }
}

#[test]
fn code_fence_is_not_left_empty_at_a_cut() {
    // The intro fills most of the room: the fence must move whole to the next chunk rather
    // than leave "```rs\n```" behind.
    let text = format!("{}\n```rs\nfn a() {{}}\n```", "word ".repeat(15).trim_end());
    let chunks = chunk_markdown(&text, 90);
    assert_chunks_ok(&text, &chunks, 90);
    assert_eq!(chunks.len(), 2);
    assert_eq!(chunks[1], "```rs\nfn a() {}\n```");
}

#[test]
fn single_five_thousand_char_word_is_cut_hard() {
    let text = "a".repeat(5000);
    let chunks = chunk_markdown(&text, 2000);
    let lens: Vec<usize> = chunks.iter().map(|c| len(c)).collect();
    assert_eq!(lens, vec![2000, 2000, 1000]);
    assert_eq!(chunks.concat(), text);
}

#[test]
fn multibyte_text_is_cut_at_char_and_emoji_boundaries() {
    let unit = "ü€😀中👨\u{200D}👩\u{200D}👧🇩🇪e\u{301}"; // family (ZWJ), flag, e + combining acute
    let text = unit.repeat(300);
    for limit in [7, 20, 101] {
        let chunks = chunk_markdown(&text, limit);
        assert_eq!(chunks.concat(), text, "limit {limit}");
        for c in &chunks {
            assert!(len(c) <= limit);
            assert!(!c.starts_with('\u{200D}') && !c.ends_with('\u{200D}'));
            assert!(!c.starts_with('\u{301}'), "combining mark split off");
            let flags = c
                .chars()
                .filter(|c| ('\u{1F1E6}'..='\u{1F1FF}').contains(c))
                .count();
            assert_eq!(flags % 2, 0, "flag split: {c}");
        }
    }
}

#[test]
fn tiny_limit_still_balances_fences() {
    let text = "Intro text here.\n\n```rust\nfn main() {\n    println!(\"hello world\");\n}\n```\n\n- item one\n- item two";
    for limit in 20..40 {
        let chunks = chunk_markdown(text, limit);
        assert_chunks_ok(text, &chunks, limit);
        for c in &chunks {
            assert!(fences_balanced(c), "limit {limit}: {c:?}");
        }
    }
}

#[test]
fn word_breaks_are_preferred_over_hard_cuts() {
    let text = "alpha beta gamma delta epsilon zeta eta theta iota kappa";
    let chunks = chunk_markdown(text, 20);
    assert_chunks_ok(text, &chunks, 20);
    for c in &chunks {
        for w in c.split(' ') {
            assert!(text.split(' ').any(|t| t == w), "word cut: {w:?}");
        }
    }
}

#[test]
fn nested_list_indentation_survives_a_cut() {
    let text = format!("{}\n\n  - nested item", "x ".repeat(30).trim_end());
    let chunks = chunk_markdown(&text, 60);
    assert_eq!(chunks.last().map(String::as_str), Some("  - nested item"));
}

#[test]
fn a_code_fence_in_a_quote_is_closed_and_reopened_in_the_quote() {
    let code: Vec<String> = (0..30)
        .map(|i| format!("> x_{i:02} = a*b*c  # **not bold** {i}"))
        .collect();
    let text = format!("Look:\n\n> ```python\n{}\n> ```\n\nDone.", code.join("\n"));
    let chunks = chunk_markdown(&text, 600);
    assert!(chunks.len() >= 2, "{chunks:#?}");
    let unquote = |s: &str| -> String {
        s.lines()
            .map(|l| l.strip_prefix("> ").unwrap_or(l))
            .collect::<Vec<_>>()
            .join("\n")
    };
    let unquoted: Vec<String> = chunks.iter().map(|c| unquote(c)).collect();
    assert_chunks_ok(&unquote(&text), &unquoted, 600);
    for (i, c) in chunks.iter().enumerate() {
        assert!(len(c) <= 600, "chunk {i}");
        assert!(fences_balanced(&unquote(c)), "chunk {i} unbalanced:\n{c}");
        if c.contains("x_") {
            assert!(
                c.starts_with("> ```python\n") || i == 0,
                "chunk {i} not reopened in the quote:\n{c}"
            );
            // Rendered, its code is code: no bold in it, as in the source.
            let html = crate::format::render(c, crate::Dialect::TelegramHtml);
            assert!(html.contains("<pre>") && !html.contains("<b>"), "{html}");
        }
    }
}

#[test]
fn bold_and_code_cut_across_chunks_are_closed_and_reopened() {
    let text = "Note: **one two three four five six** and `a b c d e f g h`";
    assert_eq!(
        chunk_markdown(text, 26),
        vec![
            "Note: **one two three**",
            "**four five six** and `a`",
            "`b c d e f g h`"
        ]
    );
    assert_eq!(
        chunk_markdown("`alpha beta gamma delta`", 14),
        vec!["`alpha beta`", "`gamma delta`"]
    );
    // Beside a code span: a backtick does not join a `**`.
    let chunks = chunk_markdown("**bold with `code inside it` yes**", 14);
    let plain = |t: &str| crate::format::render(t, crate::Dialect::Plain);
    let shown: Vec<String> = chunks.iter().map(|c| plain(c)).collect();
    assert_eq!(
        shown.join(" "),
        "bold with code inside it yes",
        "{chunks:?}"
    );
    // In a list item too, nested, and the markers count toward the limit.
    let chunks = chunk_markdown("- **a *b c* d**", 11);
    assert_eq!(chunks, vec!["- **a *b***", "***c* d**"]);
    assert!(chunks.iter().all(|c| len(c) <= 11));
}
