//! Text from elsewhere printed to the owner's terminal: a stranger's display name, a chat's
//! messages, a job's message, a skill's description, the model's reply. A terminal acts on
//! the control characters in it: `Eve\e[2J\e]0;owned\a` clears the screen and retitles the
//! window, and `\r`, a new line or a cursor move overwrites or forges lines, enough to
//! disguise which pairing code belongs to whom. So they are shown as escapes (`\u{1b}`).

use std::borrow::Cow;
use std::fmt::Write as _;

/// Whether `c` is shown as an escape: the C0 controls, DEL and the C1 controls (ESC among
/// them), and the bidirectional formatting characters, which reorder what follows them on
/// the line (`U+202E` shows `(123)` as `(321)`).
fn hidden(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{061c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}'
        )
}

fn escape(s: &str, esc: impl Fn(char) -> bool) -> Cow<'_, str> {
    if !s.chars().any(&esc) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 16);
    for c in s.chars() {
        if esc(c) {
            let _ = write!(out, "{}", c.escape_unicode());
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// `s` for one field of a line (a name, an id, a key): every such character escaped, new
/// lines and tabs too, so that it cannot start a line of its own.
pub fn field(s: &str) -> Cow<'_, str> {
    escape(s, hidden)
}

/// `s` as text of several lines (a message, a reply, a whole line of output): the same,
/// with new lines and tabs kept.
pub fn text(s: &str) -> Cow<'_, str> {
    escape(s, |c| hidden(c) && !matches!(c, '\n' | '\t'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_shown_not_obeyed() {
        let name = "Eve\u{1b}[2J\u{1b}]0;owned\u{7}\u{1b}[31mRED";
        assert_eq!(
            field(name),
            "Eve\\u{1b}[2J\\u{1b}]0;owned\\u{7}\\u{1b}[31mRED"
        );
        let cron = "hello\u{1b}[2J\u{1b}[1A\rFAKE LINE\n\tnext";
        assert_eq!(
            field(cron),
            "hello\\u{1b}[2J\\u{1b}[1A\\u{d}FAKE LINE\\u{a}\\u{9}next"
        );
        assert_eq!(
            text(cron),
            "hello\\u{1b}[2J\\u{1b}[1A\\u{d}FAKE LINE\n\tnext"
        );
        // DEL, a C1 control (CSI), a right-to-left override.
        assert_eq!(
            field("a\u{7f}b\u{9b}c\u{202e}d"),
            "a\\u{7f}b\\u{9b}c\\u{202e}d"
        );
        assert!(matches!(field("Zoë 🦀 (123)"), Cow::Borrowed(_)));
    }
}
