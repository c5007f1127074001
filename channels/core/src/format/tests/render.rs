//! Tables of cases per dialect: input markdown → exact output.

use crate::Dialect;
use crate::format::render;

fn check(dialect: Dialect, cases: &[(&str, &str)]) {
    let mut failures = Vec::new();
    for (input, want) in cases {
        let got = render(input, dialect);
        if got != *want {
            failures.push(format!("{input:?}\n   want {want:?}\n    got {got:?}"));
        }
    }
    assert!(
        failures.is_empty(),
        "{dialect:?}: {} case(s) failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn telegram_html() {
    check(
        Dialect::TelegramHtml,
        &[
            ("hello", "hello"),
            ("**bold** and __bold__", "<b>bold</b> and <b>bold</b>"),
            ("*it* and _it_", "<i>it</i> and <i>it</i>"),
            ("~~gone~~", "<s>gone</s>"),
            ("***both***", "<i><b>both</b></i>"),
            ("**bold _and it_**", "<b>bold <i>and it</i></b>"),
            ("`code`", "<code>code</code>"),
            (
                "`<tag> **x** & y`",
                "<code>&lt;tag&gt; **x** &amp; y</code>",
            ),
            ("a < b && c > d", "a &lt; b &amp;&amp; c &gt; d"),
            ("<b>not a tag</b>", "&lt;b&gt;not a tag&lt;/b&gt;"),
            ("snake_case_words stay", "snake_case_words stay"),
            ("2*3*4 = 24", "2*3*4 = 24"),
            ("a * b * c", "a * b * c"),
            // No spaces between words in Chinese and Japanese.
            (
                "这是一个**非常重要**的问题。",
                "这是一个<b>非常重要</b>的问题。",
            ),
            ("**日本語**のテキスト", "<b>日本語</b>のテキスト"),
            (
                "中文*斜体*中文 ~~删除~~了",
                "中文<i>斜体</i>中文 <s>删除</s>了",
            ),
            // But never `_` inside a word, nor between other scripts' letters.
            ("文件名_草稿_最终.docx", "文件名_草稿_最终.docx"),
            ("файл_2024_отчёт.pdf x*у*z", "файл_2024_отчёт.pdf x*у*z"),
            ("**bold without end", "**bold without end"),
            ("**bold _nested** end_", "<b>bold _nested</b> end_"),
            ("_unclosed *mixed_ tail*", "<i>unclosed *mixed</i> tail*"),
            (
                "[docs](https://x.io/a_b*c*?q=1&r=\"2\")",
                "<a href=\"https://x.io/a_b*c*?q=1&amp;r=&quot;2&quot;\">docs</a>",
            ),
            (
                "[**bold** link](https://x.io)",
                "<a href=\"https://x.io\"><b>bold</b> link</a>",
            ),
            ("see https://x.io/a_b_c*d*e", "see https://x.io/a_b_c*d*e"),
            ("**https://x.io/a_b**", "<b>https://x.io/a_b</b>"),
            ("[rel](./file.md)", "rel (./file.md)"),
            ("[site](www.x.io)", "<a href=\"https://www.x.io\">site</a>"),
            ("# Title", "<b>Title</b>"),
            ("### Sub *it* ###", "<b>Sub <i>it</i></b>"),
            ("#hashtag", "#hashtag"),
            ("- one\n* two\n+ three", "• one\n• two\n• three"),
            ("- a\n  - nested", "• a\n  • nested"),
            ("1. first\n2. second", "1. first\n2. second"),
            (
                "> quoted **b**\n> more",
                "<blockquote>quoted <b>b</b>\nmore</blockquote>",
            ),
            ("> a\n>> b", "<blockquote>a\nb</blockquote>"),
            (
                "```rust\nfn main() { a < b && **c** }\n```",
                "<pre><code class=\"language-rust\">fn main() { a &lt; b &amp;&amp; **c** }</code></pre>",
            ),
            ("```\"><b>x\ny\n```", "<pre>y</pre>"),
            ("```\nunclosed <x>", "<pre>unclosed &lt;x&gt;</pre>"),
            ("```\n```", ""),
            ("```rust\n```", ""),
            (
                "| a | b |\n|---|---|\n| 1 & 2 | **x** |",
                "<pre>a     | b\n------+--\n1 &amp; 2 | x</pre>",
            ),
            ("para one\n\npara two", "para one\n\npara two"),
            ("line\nbreak", "line\nbreak"),
            ("---", "———"),
            (r"\*not italic\*", "*not italic*"),
            ("**", "**"),
            ("<https://x.io/a_b>", "https://x.io/a_b"),
        ],
    );
}

#[test]
fn slack_mrkdwn() {
    check(
        Dialect::SlackMrkdwn,
        &[
            ("**bold**", "*bold*"),
            ("*it* and _it_", "_it_ and _it_"),
            ("~~s~~", "~s~"),
            ("**bold _it_**", "*bold _it_*"),
            ("`a < b`", "`a &lt; b`"),
            ("a & b <c>", "a &amp; b &lt;c&gt;"),
            (
                "[docs](https://x.io/a?b=1&c=2)",
                "<https://x.io/a?b=1&amp;c=2|docs>",
            ),
            ("[a **b**](https://x.io/p|q)", "<https://x.io/p%7Cq|a b>"),
            ("[https://x.io](https://x.io)", "<https://x.io>"),
            (
                "bare https://x.io/a_b*c* here",
                "bare https://x.io/a_b*c* here",
            ),
            ("snake_case_words", "snake_case_words"),
            ("# Head **bold**", "*Head bold*"),
            ("- a\n  * b", "• a\n  • b"),
            ("1) one", "1) one"),
            (
                "```python\nif a < b: **x**\n```",
                "```\nif a &lt; b: **x**\n```",
            ),
            ("> quote\n> two", "> quote\n> two"),
            (
                "| a | b |\n| - | - |\n| 1 | 2 |",
                "```\na | b\n--+--\n1 | 2\n```",
            ),
            ("**unbalanced", "**unbalanced"),
            // Slack has no escape for backticks: a ``` inside a block is split by a
            // zero-width space, and a code span holding one shows as text.
            (
                "````md\n```sh\nls\n```\n````",
                "```\n``\u{200B}`sh\nls\n``\u{200B}`\n```",
            ),
            ("`` a`b ``", "a`b"),
            // Mentions the model writes back pass; broadcasts and look-alikes do not.
            (
                "ask <@U0BOB0001> in <#C0123ABCD|general>",
                "ask <@U0BOB0001> in <#C0123ABCD|general>",
            ),
            (
                "<!here> <@bob> <@U1 x>",
                "&lt;!here&gt; &lt;@bob&gt; &lt;@U1 x&gt;",
            ),
            ("`<@U0BOB0001>`", "`&lt;@U0BOB0001&gt;`"),
        ],
    );
}

#[test]
fn markdown_passes_through_except_tables() {
    let text = "# T\n\n**b** _i_ `c`\n\n```rs\nx\n```\n- item\n> q\n";
    assert_eq!(render(text, Dialect::Markdown), text);
    check(
        Dialect::Markdown,
        &[
            (
                "before\n| a | bb |\n|---|---|\n| 1 | 2 |\nafter",
                "before\n```\na | bb\n--+---\n1 | 2\n```\nafter",
            ),
            (
                "```\n| a | b |\n| 1 | 2 |\n```",
                "```\n| a | b |\n| 1 | 2 |\n```",
            ),
        ],
    );
}

#[test]
fn plain_text() {
    check(
        Dialect::Plain,
        &[
            ("**b** _i_ ~~s~~ `c`", "b i s c"),
            ("[text](https://x.io)", "text (https://x.io)"),
            ("<https://x.io>", "https://x.io"),
            ("## Heading", "Heading"),
            ("```sh\nls -la\n```", "ls -la"),
            ("- a\n1. b", "• a\n1. b"),
            ("> q", "> q"),
            ("a < b & c", "a < b & c"),
            ("snake_case", "snake_case"),
        ],
    );
}

#[test]
fn pathological_markers_stay_literal() {
    for text in [
        "[".repeat(40_000),
        "[a](".repeat(5_000),
        "*a _b ".repeat(5_000),
    ] {
        assert_eq!(render(&text, Dialect::Plain), text);
        let html = render(&text, Dialect::TelegramHtml);
        assert!(!html.contains("<b>") && !html.contains("<a "));
    }
}
