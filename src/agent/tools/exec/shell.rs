//! Just enough shell reading for the deny list: quoting removed, the line cut into simple
//! commands, and wrappers (`sudo`, `env`, `bash -c`, `then`…) looked through to the
//! commands they run. It errs towards seeing a command where the shell might not.

/// Shells: `sh -c 'rm -rf /'` runs its argument; `curl … | sh` runs what it is fed.
pub(super) const SHELLS: [&str; 9] = [
    "sh", "bash", "zsh", "dash", "ksh", "mksh", "ash", "fish", "busybox",
];

/// Commands (and shell keywords) that run the rest of their words as a command.
const WRAPPERS: [&str; 31] = [
    "sudo",
    "doas",
    "pkexec",
    "run0",
    "env",
    "nohup",
    "time",
    "nice",
    "ionice",
    "exec",
    "command",
    "builtin",
    "eval",
    "xargs",
    "timeout",
    "stdbuf",
    "setsid",
    "watch",
    "unbuffer",
    "strace",
    "nsenter",
    "unshare",
    "systemd-run",
    "toybox",
    "then",
    "do",
    "else",
    "if",
    "while",
    "until",
    "!",
];

/// Wrappers whose first plain word is their own (a root, a lock file, a CPU mask, a user).
const WRAPPERS_WITH_ARG: [&str; 5] = ["chroot", "flock", "taskset", "chrt", "su"];

/// Two readings of a line with the quoting removed (`r''m`, `"rm"`, `r\m`, `$'rm'` all read
/// `rm`; a backslash-newline joins lines; `${NAME}` reads `$NAME`). In the first, quoted
/// separators still cut the line (a quoted text may be a script: `sh -c 'ls; reboot'`); in
/// the second they are spaces (it may be one argument: `find / '(' -name x ')' -delete`).
pub(super) fn readings(line: &str) -> [String; 2] {
    [flatten(line, false), flatten(line, true)]
}

fn flatten(line: &str, literal_quoted: bool) -> String {
    let chars: Vec<char> = line.chars().collect();
    let mut out = String::with_capacity(line.len());
    let mut quote: Option<char> = None;
    let mut i = 0;
    while i < chars.len() {
        let (c, next) = (chars[i], chars.get(i + 1).copied());
        i += 1;
        match (c, next) {
            ('\\', Some('\n')) => i += 1,
            ('\\', Some(n)) if quote != Some('\'') => {
                i += 1;
                out.push(if literal_quoted && is_separator(n) {
                    ' '
                } else {
                    n
                });
            }
            ('\'' | '"', _) if quote.is_none() => quote = Some(c),
            (q, _) if quote == Some(q) => quote = None,
            ('$', Some('\'' | '"')) if quote.is_none() => {}
            ('$', Some('{')) => {
                // `${HOME}` → `$HOME`, so the braces do not cut the word.
                let name: String = chars[i + 1..]
                    .iter()
                    .take_while(|c| c.is_ascii_alphanumeric() || **c == '_')
                    .collect();
                out.push('$');
                if !name.is_empty() && chars.get(i + 1 + name.len()) == Some(&'}') {
                    out.push_str(&name);
                    i += name.len() + 2;
                }
            }
            _ if quote.is_some() && literal_quoted && is_separator(c) => out.push(' '),
            _ => out.push(c),
        }
    }
    out
}

fn is_separator(c: char) -> bool {
    matches!(
        c,
        ';' | '&' | '|' | '\n' | '`' | '(' | ')' | '{' | '}' | '<' | '>'
    )
}

/// One simple command of a line, as text, and whether its input comes from a pipe.
pub(super) struct Segment {
    pub text: String,
    pub after_pipe: bool,
}

/// The simple commands of a flattened line: cut at `;`, `&&`, `||`, `|`, `&`, newlines,
/// `$(`, backticks, parentheses and braces.
pub(super) fn segments(line: &str) -> Vec<Segment> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut after_pipe = false;
    let chars: Vec<char> = line.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        let prev = i.checked_sub(1).map(|p| chars[p]);
        let split = match (c, next) {
            // `>|` is a redirection (clobber), `>&`/`&>` too: not separators.
            ('|', _) if prev == Some('>') => None,
            ('&', _) if prev == Some('>') || next == Some('>') => None,
            ('|', Some('|')) | ('&', Some('&')) => Some((2, false)),
            ('$', Some('(')) => Some((2, false)),
            ('|', _) => Some((1, true)),
            (';' | '&' | '\n' | '`' | '(' | ')' | '{' | '}', _) => Some((1, false)),
            _ => None,
        };
        match split {
            Some((n, pipe)) => {
                out.push(Segment {
                    text: std::mem::take(&mut cur),
                    after_pipe,
                });
                after_pipe = pipe;
                i += n;
            }
            None => {
                cur.push(c);
                i += 1;
            }
        }
    }
    out.push(Segment {
        text: cur,
        after_pipe,
    });
    out.retain(|s| !s.text.trim().is_empty());
    out
}

/// The last path component: `/bin/rm` and `./../../bin/rm` are `rm`.
pub(super) fn base(word: &str) -> &str {
    word.rsplit('/').next().unwrap_or(word)
}

pub(super) fn is_option(w: &str) -> bool {
    w.len() > 1 && w.starts_with('-')
}

/// `NAME=value`, a variable assignment before a command (or an `env` argument).
pub(super) fn is_assignment(w: &str) -> bool {
    w.split_once('=').is_some_and(|(name, _)| {
        !name.is_empty()
            && !name.starts_with(|c: char| c.is_ascii_digit())
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    })
}

/// A count or a duration (`nice 19`, `timeout 10`, `timeout 1.5m`).
fn is_number(w: &str) -> bool {
    let digits = w.trim_end_matches(['s', 'm', 'h', 'd']);
    !digits.is_empty() && digits.chars().all(|c| c.is_ascii_digit() || c == '.')
}

/// Every command the words of one segment may run: the segment itself and, through each
/// wrapper, the command it wraps (`sudo -u root rm …` yields `rm …` too).
pub(super) fn commands<'w, 'a>(words: &'w [&'a str]) -> Vec<&'w [&'a str]> {
    let mut seen = vec![false; words.len()];
    let mut out = Vec::new();
    visit(words, 0, &mut seen, &mut out);
    out
}

fn visit<'w, 'a>(
    words: &'w [&'a str],
    start: usize,
    seen: &mut [bool],
    out: &mut Vec<&'w [&'a str]>,
) {
    let start = (start..words.len())
        .find(|&i| !is_assignment(words[i]))
        .unwrap_or(words.len());
    // Each start is looked at once: wrappers of wrappers stay linear, not exponential.
    if start >= words.len() || std::mem::replace(&mut seen[start], true) {
        return;
    }
    out.push(&words[start..]);
    let name = base(words[start]);
    let mut own_arg = WRAPPERS_WITH_ARG.contains(&name);
    if !(own_arg || WRAPPERS.contains(&name) || SHELLS.contains(&name)) {
        return;
    }
    // The wrapped command starts past options, assignments and numbers; an option may
    // take the next word as its value (`sudo -u root rm`), so both readings are tried.
    let mut reach = vec![false; words.len() + 2];
    reach[start + 1] = true;
    for i in start + 1..words.len() {
        if !reach[i] {
            continue;
        }
        let w = words[i];
        if is_option(w) {
            reach[i + 1] = true;
            reach[i + 2] = true;
        } else if is_assignment(w) || is_number(w) {
            reach[i + 1] = true;
        } else {
            visit(words, i, seen, out);
            if std::mem::take(&mut own_arg) {
                reach[i + 1] = true;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cmds(line: &str) -> Vec<String> {
        let [flat, _] = readings(line);
        segments(&flat)
            .iter()
            .flat_map(|s| {
                let words: Vec<&str> = s.text.split_whitespace().collect();
                commands(&words)
                    .into_iter()
                    .map(|c| c.join(" "))
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    #[test]
    fn quoting_is_removed_and_line_continuations_joined() {
        let [cut, literal] = readings("r''m -rf \"${HOME}\" \\\n /x 'a;b' $'c' \\;");
        assert_eq!(cut, "rm -rf $HOME  /x a;b c ;");
        assert_eq!(literal, "rm -rf $HOME  /x a b c  ");
    }

    #[test]
    fn wrappers_are_looked_through() {
        assert!(cmds("sudo -u root rm -rf /").contains(&"rm -rf /".into()));
        assert!(cmds("timeout -s KILL 10 rm x").contains(&"rm x".into()));
        assert!(cmds("env -i A=1 bash -lc 'echo hi'").contains(&"echo hi".into()));
        assert!(cmds("if true; then reboot; fi").contains(&"reboot".into()));
        assert!(cmds("chroot /mnt rm x").contains(&"rm x".into()));
        // A plain command's arguments are not commands.
        assert_eq!(
            cmds("timeout 5 grep reboot log"),
            ["timeout 5 grep reboot log", "grep reboot log"]
        );
    }

    #[test]
    fn nested_wrappers_stay_cheap() {
        let line = "sudo -n ".repeat(1000) + "ls";
        assert!(cmds(&line).contains(&"ls".into()));
    }
}
