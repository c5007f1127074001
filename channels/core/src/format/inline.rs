//! Inline markdown: code spans, links, bare URLs, emphasis, strikethrough.
//!
//! One left-to-right pass. Code spans, links and URLs are taken whole as soon as they are
//! seen (so their content is never emphasis); `*`, `_` and `~~` runs go on a stack of open
//! frames and are matched by the CommonMark flanking rules, made stricter in one place: a
//! run between two letters or digits neither opens nor closes, so `snake_case_name` and
//! `2*3*4` stay literal; next to Chinese, Japanese or Korean letters a `*` or `~` run may
//! (no spaces between words there: `这是**重要**的`). Unmatched markers come back as
//! literal text.

/// An inline node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Inline {
    /// Literal text, backslash escapes resolved.
    Text(String),
    /// A code span's content.
    Code(String),
    /// `[text](url)` (and `![alt](url)`).
    Link { text: Vec<Inline>, url: String },
    /// A bare URL (`https://…`, `www.…`, `<https://…>`).
    Url(String),
    /// `**strong**` or `__strong__`.
    Strong(Vec<Inline>),
    /// `*emphasis*` or `_emphasis_`.
    Emph(Vec<Inline>),
    /// `~~strikethrough~~`.
    Strike(Vec<Inline>),
}

/// Longest link text or URL looked for; keeps pathological input (thousands of `[`) linear.
const MAX_LINK_SCAN: usize = 1000;

/// Parse inline markdown.
pub(crate) fn parse(text: &str) -> Vec<Inline> {
    let chars: Vec<char> = text.chars().collect();
    parse_chars(&chars, true)
}

fn parse_chars(chars: &[char], links: bool) -> Vec<Inline> {
    let mut b = Builder::default();
    scan(chars, links, &mut b, usize::MAX);
    b.finish()
}

/// The emphasis runs and code span that are open at char `cut` of `chars` and closed after
/// it, outermost first, as (marker, count): what a cut there must close before it and
/// reopen after it so both sides keep their formatting. `None` when the cut falls inside a
/// link, a URL, an escape or a marker run, which cannot be closed and reopened.
pub(crate) fn open_across(chars: &[char], cut: usize) -> Option<Vec<(char, usize)>> {
    let mut b = Builder {
        probe: Some(Probe::default()),
        ..Builder::default()
    };
    if !scan(chars, true, &mut b, cut) {
        return None;
    }
    b.finish_frames();
    let probe = b.probe.unwrap_or_default();
    let mut open: Vec<(char, usize)> = probe
        .at
        .as_deref()
        .unwrap_or_default()
        .iter()
        .map(|&(id, ch)| {
            let used = probe.used.iter().filter(|u| u.0 == id).map(|u| u.1).sum();
            (ch, used)
        })
        .filter(|&(_, used)| used > 0)
        .collect();
    open.extend(probe.code.map(|n| ('`', n)));
    Some(open)
}

/// Parse `chars` into `b`. With a `cut` inside `chars`, `b.probe` notes the frames open
/// there; returns false when a token other than a code span straddles it.
fn scan(chars: &[char], links: bool, b: &mut Builder, cut: usize) -> bool {
    let ends = chars.iter().rposition(|&c| c == ')').and_then(|paren| {
        let bracket = chars[..paren].iter().rposition(|&c| c == ']')?;
        Some((bracket, paren))
    });
    let mut i = 0;
    while i < chars.len() {
        if i >= cut {
            b.note_open();
        }
        let (start, c) = (i, chars[i]);
        let mut code = None;
        match c {
            '\\' if chars.get(i + 1).is_some_and(|n| n.is_ascii_punctuation()) => {
                b.text.push(chars[i + 1]);
                i += 2;
            }
            '`' => {
                let n = run_len(chars, i, '`');
                if let Some(end) = find_code_end(chars, i + n, n) {
                    b.node(Inline::Code(code_content(&chars[i + n..end])));
                    i = end + n;
                    code = Some(n);
                } else {
                    b.text.extend(&chars[i..i + n]);
                    i += n;
                }
            }
            '[' | '!' if links => {
                let at = if c == '!' { i + 1 } else { i };
                match (chars.get(at) == Some(&'['))
                    .then(|| link_at(chars, at, ends))
                    .flatten()
                {
                    Some((text, url, end)) => {
                        b.node(Inline::Link {
                            text: parse_chars(text, false),
                            url,
                        });
                        i = end;
                    }
                    None => {
                        b.text.push(c);
                        i += 1;
                    }
                }
            }
            '<' => match autolink(chars, i) {
                Some((url, end)) => {
                    b.node(Inline::Url(url));
                    i = end;
                }
                None => {
                    b.text.push(c);
                    i += 1;
                }
            },
            'h' | 'H' | 'w' | 'W' if i == 0 || !chars[i - 1].is_alphanumeric() => {
                match bare_url(chars, i) {
                    Some(end) => {
                        b.node(Inline::Url(chars[i..end].iter().collect()));
                        i = end;
                    }
                    None => {
                        b.text.push(c);
                        i += 1;
                    }
                }
            }
            '*' | '_' | '~' => {
                let n = run_len(chars, i, c);
                let before = i.checked_sub(1).map(|p| chars[p]);
                let after = chars.get(i + n).copied();
                let (open, close) = flanking(c, before, after);
                b.delim(c, n, open, close);
                i += n;
            }
            _ => {
                b.text.push(c);
                i += 1;
            }
        }
        if start < cut && cut < i {
            // Only a cut in a code span's content can close and reopen it.
            if code.is_none_or(|n| cut < start + n || cut + n > i) {
                return false;
            }
            b.note_open();
            if let Some(p) = &mut b.probe {
                p.code = code;
            }
        }
    }
    true
}

fn run_len(chars: &[char], i: usize, c: char) -> usize {
    chars[i..].iter().take_while(|&&x| x == c).count()
}

/// The start of the closing run of exactly `n` backticks, searching from `from`.
fn find_code_end(chars: &[char], from: usize, n: usize) -> Option<usize> {
    let mut j = from;
    while j < chars.len() {
        if chars[j] == '`' {
            let m = run_len(chars, j, '`');
            if m == n {
                return Some(j);
            }
            j += m;
        } else {
            j += 1;
        }
    }
    None
}

/// CommonMark code span content: newlines become spaces, one padding space is stripped.
fn code_content(chars: &[char]) -> String {
    let s: String = chars
        .iter()
        .map(|&c| if c == '\n' { ' ' } else { c })
        .collect();
    if s.len() >= 2 && s.starts_with(' ') && s.ends_with(' ') && !s.trim().is_empty() {
        s[1..s.len() - 1].to_string()
    } else {
        s
    }
}

fn is_punct(c: char) -> bool {
    c.is_ascii_punctuation() || (!c.is_alphanumeric() && !c.is_whitespace())
}

/// (can open, can close) for a run of `marker` between `before` and `after`.
fn flanking(marker: char, before: Option<char>, after: Option<char>) -> (bool, bool) {
    let ws = |c: Option<char>| c.is_none_or(char::is_whitespace);
    let punct = |c: Option<char>| c.is_some_and(is_punct);
    let left = !ws(after) && (!punct(after) || ws(before) || punct(before));
    let right = !ws(before) && (!punct(before) || ws(after) || punct(after));
    // Stricter than CommonMark for `*`: never between letters or digits, so arithmetic
    // and `file_name_v2` stay literal; but next to Chinese, Japanese or Korean, written
    // without spaces between words, `*` and `~` may (`_` never inside a word, as in
    // CommonMark).
    let inside_words = marker != '_' && (cjk(before) || cjk(after));
    (
        left && (!right || punct(before) || inside_words),
        right && (!left || punct(after) || inside_words),
    )
}

/// Whether `c` is a Chinese, Japanese or Korean letter (Han, kana, Hangul).
fn cjk(c: Option<char>) -> bool {
    c.is_some_and(|c| {
        matches!(c as u32,
            0x1100..=0x11FF | 0x3040..=0x30FF | 0x3130..=0x318F | 0x31F0..=0x31FF
            | 0x3400..=0x4DBF | 0x4E00..=0x9FFF | 0xAC00..=0xD7AF | 0xF900..=0xFAFF
            | 0xFF66..=0xFF9F | 0x20000..=0x2FA1F)
    })
}

/// `[text](url "title")` at `i` → (text, url, index after `)`).
/// `ends` is where the last `]` before the last `)` is, and that `)`: a link needs both
/// further on, so `[[[[…` fails fast.
fn link_at(
    chars: &[char],
    i: usize,
    ends: Option<(usize, usize)>,
) -> Option<(&[char], String, usize)> {
    let (last_bracket, last_paren) = ends?;
    if last_bracket < i {
        return None;
    }
    let mut depth = 0usize;
    let mut j = i;
    let limit = (last_bracket + 1).min(i + MAX_LINK_SCAN);
    let close = loop {
        if j >= limit {
            return None;
        }
        match chars[j] {
            '\\' => j += 1,
            '`' => {
                let n = run_len(chars, j, '`');
                j = find_code_end(chars, j + n, n).map_or(j + n, |e| e + n);
                continue;
            }
            '[' => depth += 1,
            ']' => {
                depth -= 1;
                if depth == 0 {
                    break j;
                }
            }
            _ => {}
        }
        j += 1;
    };
    if chars.get(close + 1) != Some(&'(') {
        return None;
    }
    let mut k = close + 2;
    while chars.get(k).is_some_and(|c| *c == ' ') {
        k += 1;
    }
    let mut url = String::new();
    if chars.get(k) == Some(&'<') {
        k += 1;
        while let Some(&c) = chars.get(k) {
            k += 1;
            if c == '>' {
                break;
            }
            if c == '\n' || k > close + MAX_LINK_SCAN || k > last_paren {
                return None;
            }
            url.push(c);
        }
    } else {
        let mut parens = 0usize;
        while let Some(&c) = chars.get(k) {
            if c.is_whitespace() || (c == ')' && parens == 0) || k > close + MAX_LINK_SCAN {
                break;
            }
            if c == '(' {
                parens += 1;
            } else if c == ')' {
                parens -= 1;
            }
            url.push(c);
            k += 1;
        }
    }
    // Optional title, then `)`.
    while chars.get(k).is_some_and(|c| *c == ' ') {
        k += 1;
    }
    if let Some(&q @ ('"' | '\'')) = chars.get(k) {
        k += 1;
        while chars.get(k).is_some_and(|&c| c != q) {
            k += 1;
        }
        k += 1;
        while chars.get(k).is_some_and(|c| *c == ' ') {
            k += 1;
        }
    }
    if url.is_empty() || chars.get(k) != Some(&')') {
        return None;
    }
    Some((&chars[i + 1..close], url, k + 1))
}

/// `<https://…>` at `i` → (url, index after `>`).
fn autolink(chars: &[char], i: usize) -> Option<(String, usize)> {
    let end = chars[i + 1..]
        .iter()
        .take(MAX_LINK_SCAN)
        .position(|&c| c == '>' || c == '<' || c.is_whitespace())
        .map(|p| p + i + 1)?;
    if chars[end] != '>' {
        return None;
    }
    let url: String = chars[i + 1..end].iter().collect();
    let lower = url.to_ascii_lowercase();
    ["http://", "https://", "mailto:"]
        .iter()
        .any(|p| lower.starts_with(p) && lower.len() > p.len())
        .then_some((url, end + 1))
}

/// A bare URL starting at `i` → its end. Trailing punctuation and unbalanced `)` are left
/// out, so `(see https://x.y/a_b).` and `**https://x.y**` work.
fn bare_url(chars: &[char], i: usize) -> Option<usize> {
    let head: String = chars[i..]
        .iter()
        .take(8)
        .collect::<String>()
        .to_ascii_lowercase();
    let prefix = ["https://", "http://", "www."]
        .iter()
        .find(|p| head.starts_with(*p))?
        .len();
    let mut end = i + prefix;
    while end < chars.len() && !chars[end].is_whitespace() && !matches!(chars[end], '<' | '>' | '`')
    {
        end += 1;
    }
    loop {
        let last = chars[end - 1];
        if matches!(
            last,
            '.' | ',' | ';' | ':' | '!' | '?' | '\'' | '"' | '*' | '_' | '~'
        ) {
            end -= 1;
        } else if last == ')' {
            let opens = chars[i..end].iter().filter(|&&c| c == '(').count();
            let closes = chars[i..end].iter().filter(|&&c| c == ')').count();
            if closes > opens {
                end -= 1;
            } else {
                break;
            }
        } else {
            break;
        }
        if end <= i + prefix {
            return None;
        }
    }
    (end > i + prefix).then_some(end)
}

/// An emphasis marker run waiting for its closer.
struct Frame {
    ch: char,
    len: usize,
    children: Vec<Inline>,
    /// Numbered in opening order, for [`Probe`].
    id: usize,
}

/// What [`open_across`] watches: the frames open at the cut, the markers each later used
/// to close, and a code span straddling the cut (its backtick count).
#[derive(Default)]
struct Probe {
    at: Option<Vec<(usize, char)>>,
    used: Vec<(usize, usize)>,
    code: Option<usize>,
}

/// Builds the node tree: `text` is pending literal text, `frames` the open markers.
#[derive(Default)]
struct Builder {
    root: Vec<Inline>,
    frames: Vec<Frame>,
    /// Open frames per marker (`*`, `_`, `~`), so a closer with nothing to match is O(1).
    open: [usize; 3],
    text: String,
    opened: usize,
    probe: Option<Probe>,
}

fn slot(ch: char) -> usize {
    match ch {
        '*' => 0,
        '_' => 1,
        _ => 2,
    }
}

impl Builder {
    /// Note the frames open now, the first time this is called (with a probe).
    fn note_open(&mut self) {
        if let Some(p) = self.probe.as_mut().filter(|p| p.at.is_none()) {
            p.at = Some(self.frames.iter().map(|f| (f.id, f.ch)).collect());
        }
    }

    fn target(&mut self) -> &mut Vec<Inline> {
        match self.frames.last_mut() {
            Some(f) => &mut f.children,
            None => &mut self.root,
        }
    }

    fn flush(&mut self) {
        if !self.text.is_empty() {
            let text = std::mem::take(&mut self.text);
            push_text(self.target(), &text);
        }
    }

    fn node(&mut self, node: Inline) {
        self.flush();
        self.target().push(node);
    }

    fn delim(&mut self, ch: char, mut len: usize, can_open: bool, can_close: bool) {
        self.flush();
        if can_close {
            while len > 0 && self.open[slot(ch)] > 0 {
                let Some(k) = self.frames.iter().rposition(|f| f.ch == ch) else {
                    break;
                };
                if ch == '~' && (len < 2 || self.frames[k].len < 2) {
                    break;
                }
                // Markers opened after the match cannot close any more: they become text.
                while self.frames.len() > k + 1 {
                    self.pop_literal();
                }
                let used = if ch == '~' || (len >= 2 && self.frames[k].len >= 2) {
                    2
                } else {
                    1
                };
                if let Some(p) = self.probe.as_mut().filter(|p| p.at.is_some()) {
                    p.used.push((self.frames[k].id, used));
                }
                let frame = &mut self.frames[k];
                let children = std::mem::take(&mut frame.children);
                frame.len -= used;
                let node = match (ch, used) {
                    ('~', _) => Inline::Strike(children),
                    (_, 2) => Inline::Strong(children),
                    _ => Inline::Emph(children),
                };
                if frame.len == 0 {
                    self.frames.pop();
                    self.open[slot(ch)] -= 1;
                    self.target().push(node);
                } else {
                    frame.children.push(node);
                }
                len -= used;
            }
        }
        if len == 0 {
            return;
        }
        if can_open && !(ch == '~' && len < 2) {
            self.frames.push(Frame {
                ch,
                len,
                children: Vec::new(),
                id: self.opened,
            });
            self.opened += 1;
            self.open[slot(ch)] += 1;
        } else {
            self.text.extend(std::iter::repeat_n(ch, len));
        }
    }

    /// Close the innermost frame without a match: its markers become literal text.
    fn pop_literal(&mut self) {
        if let Some(f) = self.frames.pop() {
            self.open[slot(f.ch)] -= 1;
            let marker: String = std::iter::repeat_n(f.ch, f.len).collect();
            let target = self.target();
            push_text(target, &marker);
            for child in f.children {
                match child {
                    Inline::Text(t) => push_text(target, &t),
                    other => target.push(other),
                }
            }
        }
    }

    fn finish(mut self) -> Vec<Inline> {
        self.finish_frames();
        self.root
    }

    fn finish_frames(&mut self) {
        self.flush();
        while !self.frames.is_empty() {
            self.pop_literal();
        }
    }
}

/// Append text, merging with a preceding text node.
fn push_text(target: &mut Vec<Inline>, text: &str) {
    if let Some(Inline::Text(last)) = target.last_mut() {
        last.push_str(text);
    } else {
        target.push(Inline::Text(text.to_string()));
    }
}
