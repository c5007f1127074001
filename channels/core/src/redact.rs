//! Keeping secrets out of text: whoever holds a secret [`register`]s it, and text built from
//! something outside our control (an error from a client crate, a server's answer, a tool's
//! output) passes through [`redact`] before it reaches a log, a health reason, an error or a
//! reply.
//!
//! The list is process-wide on purpose: the log writer, `/readyz` and every adapter must
//! know every secret, whichever part of the process read it.

use std::borrow::Cow;
use std::sync::RwLock;

/// What a secret is replaced with.
pub const REDACTED: &str = "[redacted]";

/// Shorter values are not treated as secrets: no real token is this short, and blotting
/// out a common word everywhere would garble the logs.
const MIN_LEN: usize = 8;

static SECRETS: RwLock<Vec<String>> = RwLock::new(Vec::new());

/// Remember `secret` (surrounding whitespace ignored) so [`redact`] hides it from now on.
pub fn register(secret: &str) {
    let secret = secret.trim();
    if secret.len() < MIN_LEN {
        return;
    }
    let mut all = SECRETS.write().unwrap_or_else(|p| p.into_inner());
    if !all.iter().any(|s| s == secret) {
        all.push(secret.to_string());
        // Longest first, so a secret that contains another is hidden whole.
        all.sort_by_key(|s| std::cmp::Reverse(s.len()));
    }
}

/// `text` with every registered secret replaced by [`REDACTED`]; borrowed when it held none.
pub fn redact(text: &str) -> Cow<'_, str> {
    let all = SECRETS.read().unwrap_or_else(|p| p.into_inner());
    let mut out = Cow::Borrowed(text);
    for s in all.iter() {
        if out.contains(s.as_str()) {
            out = Cow::Owned(out.replace(s.as_str(), REDACTED));
        }
    }
    out
}

/// Where to cut `text` at byte `at` at the latest so that no part of a registered secret is
/// left before the cut (a secret that spans `at` goes whole); on a character boundary.
pub fn safe_cut(text: &str, at: usize) -> usize {
    let all = SECRETS.read().unwrap_or_else(|p| p.into_inner());
    let bytes = text.as_bytes();
    let mut cut = at.min(text.len());
    loop {
        let before = cut;
        for s in all.iter() {
            let from = cut.saturating_sub(s.len() - 1);
            let to = (cut + s.len() - 1).min(bytes.len());
            let spans = bytes[from..to]
                .windows(s.len())
                .position(|w| w == s.as_bytes());
            if let Some(i) = spans {
                cut = from + i;
            }
        }
        if cut == before {
            break;
        }
    }
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    cut
}

/// [`redact`] for a `String` the caller owns: no copy when nothing matched.
pub fn redact_owned(text: String) -> String {
    match redact(&text) {
        Cow::Borrowed(_) => text,
        Cow::Owned(cleaned) => cleaned,
    }
}

/// Redacts text that arrives in pieces (a streamed answer), for pieces to go out as they
/// come: a secret split across pieces is hidden whole. Text that may be the start of a
/// secret (a proper prefix of one at the end of what came) is held back until the next
/// piece shows what it is.
#[derive(Debug, Default)]
pub struct StreamRedactor {
    /// Text come but not let out yet.
    held: String,
}

impl StreamRedactor {
    /// Take `piece`; the redacted text that may go out now (empty while all is held).
    pub fn push(&mut self, piece: &str) -> String {
        self.held.push_str(piece);
        let start = held_from(&self.held);
        // A whole secret across that point goes whole, with what is held.
        let cut = safe_cut(&self.held, start);
        let out = redact(&self.held[..cut]).into_owned();
        self.held.drain(..cut);
        out
    }

    /// The text held back, unredacted: at most a secret and the start of another. Once no
    /// more comes, [`redact`] it to let it out, or drop it if the text was cut off.
    pub fn held(&self) -> &str {
        &self.held
    }
}

/// Where the end of `text` may be the start of a registered secret (`text.len()` if not).
fn held_from(text: &str) -> usize {
    let all = SECRETS.read().unwrap_or_else(|p| p.into_inner());
    // Sorted longest first: a proper prefix is shorter than the longest.
    let longest = all.first().map_or(0, String::len);
    let bytes = text.as_bytes();
    (text.len().saturating_sub(longest.saturating_sub(1))..text.len())
        .filter(|&i| text.is_char_boundary(i))
        .find(|&i| {
            let tail = &bytes[i..];
            all.iter()
                .any(|s| s.len() > tail.len() && s.as_bytes().starts_with(tail))
        })
        .unwrap_or(text.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cut_never_leaves_part_of_a_secret() {
        register("cut-secret-0123456789");
        let text = "ab cut-secret-0123456789 é cut-secret-0123456789";
        assert_eq!(safe_cut(text, 2), 2);
        assert_eq!(safe_cut(text, 3), 3, "right before one");
        assert_eq!(safe_cut(text, 10), 3, "inside one: before it");
        assert_eq!(safe_cut(text, 24), 24, "right after one");
        assert_eq!(safe_cut(text, 26), 25, "inside `é`: a char boundary");
        assert_eq!(safe_cut(text, 40), 28);
        assert_eq!(safe_cut(text, 999), text.len());
    }

    #[test]
    fn registered_secrets_are_hidden_wherever_they_appear() {
        register("  123456:redact-unit-test-token\n");
        register("short");
        let text =
            "GET /bot123456:redact-unit-test-token/GetMe (123456:redact-unit-test-token) short";
        assert_eq!(redact(text), "GET /bot[redacted]/GetMe ([redacted]) short");
        assert!(matches!(redact("nothing secret here"), Cow::Borrowed(_)));
    }

    #[test]
    fn a_secret_containing_another_is_hidden_whole() {
        register("inner-secret-value");
        register("Bot inner-secret-value-and-more");
        assert_eq!(
            redact("auth: Bot inner-secret-value-and-more; inner-secret-value"),
            "auth: [redacted]; [redacted]"
        );
    }

    #[test]
    fn a_secret_split_across_pieces_is_hidden_whole() {
        register("sk-stream-secret-0123456789");
        let mut r = StreamRedactor::default();
        let text = "Here: sk-stream-secret-0123456789 and sk-stream-secret-0123456789, done sk";
        let mut out = String::new();
        for piece in text.as_bytes().chunks(4) {
            let sent = r.push(std::str::from_utf8(piece).unwrap());
            assert!(!sent.contains("0123"), "{sent}");
            out.push_str(&sent);
        }
        assert_eq!(out, "Here: [redacted] and [redacted], done ");
        assert_eq!(r.held(), "sk", "the start of a secret waits");
        // Text that is not a secret goes at once, whole.
        assert_eq!(r.push("y is blue"), "sky is blue");
        assert_eq!(r.held(), "");
        assert_eq!(r.push("é sk-stream-"), "é ");
        assert_eq!(r.push("secret-012345"), "");
        assert_eq!(
            redact(r.held()),
            "sk-stream-secret-012345",
            "cut off: not one"
        );
        assert_eq!(r.push("6789."), "[redacted].");
    }
}
