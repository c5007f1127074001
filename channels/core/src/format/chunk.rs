//! Splitting markdown at a platform's length limit.
//!
//! Greedy: each chunk is as long as the limit allows, cut at the best break in reach —
//! a paragraph break (blank line, or the edge of a code fence), else a line break, else a
//! word boundary, else anywhere that does not split a character or an emoji sequence. A
//! break in the first 30 % of the room is only taken when nothing better exists further on.
//! A code fence cut across chunks is closed at the end of one and reopened, with the same
//! fence line, at the start of the next; those added lines count toward the limit. So is
//! bold, italics, strikethrough or a code span cut across chunks in a paragraph or a list
//! item: `**` (or `_`, `~~`, `` ` ``) closes it at the cut and opens it again after.

use super::block::{self, Kind, fence_closes, fence_open};
use super::inline;

/// What a source line is, for cutting purposes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Line {
    Text,
    Blank,
    /// Opens fence `n`.
    Open(usize),
    /// Inside fence `n`.
    Body(usize),
    /// Closes fence `n`.
    Close(usize),
}

/// How a fence is reopened and closed when a cut falls inside it.
struct Fence {
    reopen: Vec<char>,
    close: Vec<char>,
}

/// Where a cut would fall.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum At {
    /// Outside any fence.
    Outside,
    /// Inside fence `n`: close it here, reopen it in the next chunk.
    Inside(usize),
    /// Not allowed (it would split a fence line or leave an empty code block).
    Invalid,
}

/// Break quality, best first.
const PARAGRAPH: usize = 0;
const LINE: usize = 1;
const WORD: usize = 2;
const HARD: usize = 3;

/// How a platform counts a message's length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Count {
    Chars,
    /// UTF-16 code units (Telegram): an emoji counts two.
    Utf16,
}

impl Count {
    fn of(self, c: char) -> usize {
        match self {
            Count::Chars => 1,
            Count::Utf16 => c.len_utf16(),
        }
    }
}

/// Split `text` into chunks of at most `max` characters, or UTF-16 units (see
/// [`super::chunk_markdown`]).
pub(super) fn chunk(text: &str, max: usize, count: Count) -> Vec<String> {
    let max = max.max(1);
    if text.trim().is_empty() {
        return Vec::new();
    }
    if text.chars().map(|c| count.of(c)).sum::<usize>() <= max {
        return vec![text.to_string()];
    }
    Chunker::new(text, max, count).run()
}

struct Chunker {
    chars: Vec<char>,
    /// Char index where each line starts.
    starts: Vec<usize>,
    kinds: Vec<Line>,
    fences: Vec<Fence>,
    /// `nonws_end[c]`: one past the last non-whitespace char before `c` (0 if none).
    nonws_end: Vec<usize>,
    /// Per line: the chars `[from, to)` of the paragraph or list item text it is in.
    spans: Vec<Option<(usize, usize)>>,
    /// `units[c]`: the length of the chars before `c`, as the platform counts it.
    units: Vec<usize>,
    max: usize,
}

impl Chunker {
    fn new(text: &str, max: usize, count: Count) -> Self {
        let chars: Vec<char> = text.chars().collect();
        let mut starts = Vec::new();
        let mut kinds = Vec::new();
        let mut fences: Vec<Fence> = Vec::new();
        // The fence we are in: its index, its opening, and how deep in quotes it is.
        let mut open = None;
        let mut pos = 0;
        for raw in text.split('\n') {
            starts.push(pos);
            pos += raw.chars().count() + 1;
            let line = raw.trim_end_matches('\r');
            let (prefix, content) = quote_prefix(line);
            let depth = prefix.matches('>').count();
            // A fence in a quote ends with the quote.
            if open.as_ref().is_some_and(|&(_, _, d)| d > 0 && d != depth) {
                open = None;
            }
            kinds.push(match open {
                Some((f, ref o, d)) if fence_closes(if d > 0 { content } else { line }, o) => {
                    open = None;
                    Line::Close(f)
                }
                Some((f, _, _)) => Line::Body(f),
                None => match fence_open(content) {
                    Some(o) => {
                        let f = fences.len();
                        fences.push(fence_for(line, prefix, o.marker, o.len, o.indent, max));
                        open = Some((f, o, depth));
                        Line::Open(f)
                    }
                    None if line.trim().is_empty() => Line::Blank,
                    None => Line::Text,
                },
            });
        }
        let mut nonws_end = Vec::with_capacity(chars.len() + 1);
        let mut last = 0;
        nonws_end.push(0);
        for (i, c) in chars.iter().enumerate() {
            if !c.is_whitespace() {
                last = i + 1;
            }
            nonws_end.push(last);
        }
        let spans = inline_runs(text, &starts, chars.len());
        let mut units = Vec::with_capacity(chars.len() + 1);
        units.push(0);
        for &c in &chars {
            units.push(units[units.len() - 1] + count.of(c));
        }
        Self {
            chars,
            starts,
            kinds,
            fences,
            nonws_end,
            spans,
            units,
            max,
        }
    }

    fn run(&self) -> Vec<String> {
        let n = self.chars.len();
        let mut chunks = Vec::new();
        let mut s = self.skip(0);
        // Markers reopening what the last cut closed.
        let mut reopen = Vec::new();
        while s < n && self.nonws_end[n] > s {
            let header = match self.header(s) {
                [] => std::mem::take(&mut reopen),
                fence => fence.to_vec(),
            };
            if self
                .cut_len(s, n, header.len())
                .is_some_and(|l| l <= self.max)
            {
                chunks.push(self.piece(s, n, &header, &[]));
                break;
            }
            match self.cut(s, header.len()) {
                Some((c, close, open)) => {
                    chunks.push(self.piece(s, c, &header, &close));
                    reopen = open;
                    s = self.skip(c);
                }
                None => {
                    // Nothing valid fits (a limit smaller than a fence line): cut raw.
                    let c = self.reach(s, self.max).max(s + 1);
                    let piece: String = self.chars[s..c].iter().collect();
                    if !piece.trim().is_empty() {
                        chunks.push(piece);
                    }
                    s = c;
                }
            }
        }
        chunks
    }

    /// The cut for a chunk starting at `s`, with the markers that close what is open there
    /// and those that reopen it, counted toward the limit. A cut inside a link or URL, or
    /// whose markers do not fit or would run into a marker beside the cut (and so read
    /// differently), gives way to an earlier break as good, three times at most; else the
    /// first cut is made as it is.
    fn cut(&self, s: usize, header: usize) -> Option<(usize, Vec<char>, Vec<char>)> {
        let first = self.choose(s, header)?;
        let (mut c, mut room) = (first, 0);
        for _ in 0..4 {
            // A marker run beside the cut of the same character as the one added there
            // would join it, and read differently.
            let is = |i: usize, m: Option<&char>| m.is_some_and(|m| self.chars.get(i) == Some(m));
            let joins = |open: &[char]| {
                is(self.nonws_end[c] - 1, open.last()) || is(self.skip(c), open.last())
            };
            match self.open_at(c) {
                Some(open) if open.is_empty() => return Some((c, open, Vec::new())),
                Some(open) if !joins(&open) => {
                    let close: Vec<char> = open.iter().rev().copied().collect();
                    let len = self.cut_len(s, c, header);
                    if len.is_some_and(|l| l + close.len() <= self.max) {
                        return Some((c, close, open));
                    }
                    room = room.max(close.len());
                }
                _ => room = (self.max.saturating_sub(header) + 1).saturating_sub(self.len(s, c)),
            }
            match self.choose(s, header + room) {
                Some(next) if self.rank(next) <= self.rank(first) => c = next,
                _ => break,
            }
        }
        Some((first, Vec::new(), Vec::new()))
    }

    /// The emphasis and code markers open across a cut at `c`, outermost first: none when
    /// the cut is not in a paragraph's or list item's text, `None` when it is inside a link,
    /// a URL or a marker run.
    fn open_at(&self, c: usize) -> Option<Vec<char>> {
        let Some((from, to)) = self.spans[self.line_of(c)].filter(|&(f, t)| f < c && c < t) else {
            return Some(Vec::new());
        };
        let open = inline::open_across(&self.chars[from..to], c - from)?;
        Some(
            open.iter()
                .flat_map(|&(marker, n)| std::iter::repeat_n(marker, n))
                .collect(),
        )
    }

    /// The best cut for a chunk starting at `s`.
    fn choose(&self, s: usize, header: usize) -> Option<usize> {
        let room = self.max.saturating_sub(header);
        let hi = (self.chars.len() - 1).min(self.reach(s, room));
        let min_len = room * 3 / 10;
        let mut best = [None; 4];
        for c in (s + 1..=hi).rev() {
            if self.len(s, c) < min_len && best.iter().any(Option::is_some) {
                break;
            }
            let Some(rank) = self.rank(c) else { continue };
            if best[rank].is_some() || self.cut_len(s, c, header).is_none_or(|l| l > self.max) {
                continue;
            }
            best[rank] = Some(c);
            if rank == PARAGRAPH && self.len(s, c) >= min_len {
                break;
            }
        }
        best.iter()
            .flatten()
            .find(|&&c| self.len(s, c) >= min_len)
            .or_else(|| best.iter().flatten().next())
            .copied()
    }

    /// How good a break a cut at `c` is, or `None` if `c` is no break at all.
    fn rank(&self, c: usize) -> Option<usize> {
        let l = self.line_of(c);
        if self.starts[l] == c {
            let para = matches!(self.kinds[l], Line::Blank | Line::Open(_))
                || matches!(self.kinds[l - 1], Line::Blank | Line::Close(_));
            return Some(if para { PARAGRAPH } else { LINE });
        }
        let (prev, cur) = (self.chars[c - 1], self.chars[c]);
        if cur == '\n' || cur == '\r' {
            None
        } else if (cur == ' ' || cur == '\t') && !prev.is_whitespace() {
            Some(WORD)
        } else {
            self.grapheme_boundary(c).then_some(HARD)
        }
    }

    /// Whether `c` is between two user-perceived characters (best effort, no tables).
    fn grapheme_boundary(&self, c: usize) -> bool {
        let (prev, cur) = (self.chars[c - 1], self.chars[c]);
        if extends(cur) || prev == '\u{200D}' {
            return false;
        }
        if regional(prev) && regional(cur) {
            let run = self.chars[..c]
                .iter()
                .rev()
                .take_while(|&&x| regional(x))
                .count();
            return run % 2 == 0;
        }
        true
    }

    /// Length of the chunk `[s, c)`: header, content without trailing whitespace, closing
    /// fence. `None` when the cut is invalid or leaves nothing but whitespace.
    fn cut_len(&self, s: usize, c: usize, header: usize) -> Option<usize> {
        let end = self.nonws_end[c];
        if end <= s {
            return None;
        }
        let close = match self.at(c) {
            At::Invalid => return None,
            At::Outside => 0,
            At::Inside(f) => self.fences[f].close.len(),
        };
        Some(header + self.len(s, end) + close)
    }

    /// The chunk `[s, c)` as text, `close` after it.
    fn piece(&self, s: usize, c: usize, header: &[char], close: &[char]) -> String {
        let end = self.nonws_end[c].max(s);
        let mut out: String = header.iter().collect();
        out.extend(&self.chars[s..end]);
        out.extend(close);
        if let At::Inside(f) = self.at(c) {
            out.extend(&self.fences[f].close);
        }
        out
    }

    /// The fence line that reopens the fence a chunk starting at `s` begins inside.
    fn header(&self, s: usize) -> &[char] {
        match self.at(s) {
            At::Inside(f) => &self.fences[f].reopen,
            _ => &[],
        }
    }

    /// Where the next chunk starts after a cut at `c`: break whitespace and blank lines
    /// skipped, but code indentation and the indentation of a line kept.
    fn skip(&self, c: usize) -> usize {
        let n = self.chars.len();
        let mut p = c;
        let line_start = c < n && self.starts[self.line_of(c)] == c;
        if let At::Inside(_) = self.at(c) {
            if !line_start {
                while p < n && matches!(self.chars[p], ' ' | '\t') {
                    p += 1;
                }
            }
            return p;
        }
        while p < n && self.chars[p].is_whitespace() {
            p += 1;
        }
        if p < n {
            let ls = self.starts[self.line_of(p)];
            if ls >= c && ls < p {
                p = ls; // keep the indentation (a nested list item)
            }
        }
        p
    }

    /// The length of the chars `[s, c)` as the platform counts it.
    fn len(&self, s: usize, c: usize) -> usize {
        self.units[c] - self.units[s]
    }

    /// The furthest `c` with `[s, c)` within `room`.
    fn reach(&self, s: usize, room: usize) -> usize {
        let limit = self.units[s] + room;
        self.units.partition_point(|&u| u <= limit) - 1
    }

    fn line_of(&self, c: usize) -> usize {
        self.starts.partition_point(|&s| s <= c).saturating_sub(1)
    }

    /// What a cut at `c` would fall into.
    fn at(&self, c: usize) -> At {
        if c >= self.chars.len() {
            return match self.kinds.last() {
                Some(Line::Open(f) | Line::Body(f)) => At::Inside(*f),
                _ => At::Outside,
            };
        }
        let l = self.line_of(c);
        let line_start = self.starts[l] == c;
        match self.kinds[l] {
            Line::Text | Line::Blank => At::Outside,
            Line::Open(_) if line_start => At::Outside,
            Line::Open(_) | Line::Close(_) => At::Invalid,
            Line::Body(f) if line_start && l > 0 && self.kinds[l - 1] == Line::Open(f) => {
                At::Invalid // the chunk would end with an empty code block
            }
            Line::Body(f) => At::Inside(f),
        }
    }
}

/// Per line of `text`, the chars `[from, to)` of the inline text it belongs to, as the
/// renderers parse it: a whole paragraph, or a list item's text after its marker. Other
/// lines (headings, quotes, tables, fences) are `None`: a cut there is left as it is.
fn inline_runs(text: &str, starts: &[usize], len: usize) -> Vec<Option<(usize, usize)>> {
    let mut runs = vec![None; starts.len()];
    let mut l = 0;
    for b in block::parse(text) {
        let lines = b.raw.len();
        let end = starts.get(l + lines).map_or(len, |&next| next - 1);
        let run = match b.kind {
            Kind::Paragraph(_) => Some((starts[l], end)),
            Kind::Item { text: item, .. } => {
                let line = b.raw[0];
                let at = item.as_ptr() as usize - line.as_ptr() as usize;
                let from = starts[l] + line[..at].chars().count();
                Some((from, from + item.chars().count()))
            }
            _ => None,
        };
        runs[l..l + lines].fill(run);
        l += lines;
    }
    runs
}

/// Reopen/close lines for a fence (in a quote: with its `> ` markers): the original fence
/// line if it fits next to some content, else the bare marker. (When not even that fits,
/// the chunker falls back to raw cuts.)
fn fence_for(
    line: &str,
    quote: &str,
    marker: char,
    len: usize,
    indent: usize,
    max: usize,
) -> Fence {
    let bare: String = std::iter::repeat_n(marker, len).collect();
    let full_open: Vec<char> = format!("{}\n", line.trim_end()).chars().collect();
    let full_close: Vec<char> = format!("\n{quote}{}{bare}", " ".repeat(indent))
        .chars()
        .collect();
    if full_open.len() + full_close.len() < max {
        return Fence {
            reopen: full_open,
            close: full_close,
        };
    }
    Fence {
        reopen: format!("{quote}{bare}\n").chars().collect(),
        close: format!("\n{quote}{bare}").chars().collect(),
    }
}

/// A line's blockquote markers (`> `, `>> `, `> > `; each after at most three spaces, as
/// markdown reads them) and what follows them.
fn quote_prefix(line: &str) -> (&str, &str) {
    let b = line.as_bytes();
    let (mut i, mut end) = (0, 0);
    loop {
        let mut j = i;
        while j < b.len() && b[j] == b' ' && j - i < 3 {
            j += 1;
        }
        if b.get(j) != Some(&b'>') {
            break;
        }
        j += 1;
        if b.get(j) == Some(&b' ') {
            j += 1;
        }
        (i, end) = (j, j);
    }
    line.split_at(end)
}

/// Characters that attach to the one before (combining marks, variation selectors,
/// emoji modifiers, tags).
fn extends(c: char) -> bool {
    matches!(c as u32,
        0x0300..=0x036F | 0x0483..=0x0489 | 0x0591..=0x05BD | 0x0610..=0x061A
        | 0x064B..=0x065F | 0x0900..=0x0903 | 0x093A..=0x094F | 0x1AB0..=0x1AFF
        | 0x1DC0..=0x1DFF | 0x200C..=0x200D | 0x20D0..=0x20FF | 0xFE00..=0xFE0F
        | 0xFE20..=0xFE2F | 0x1F3FB..=0x1F3FF | 0xE0020..=0xE007F | 0xE0100..=0xE01EF)
}

fn regional(c: char) -> bool {
    matches!(c as u32, 0x1F1E6..=0x1F1FF)
}
