//! Skills: folders with a `SKILL.md` (front matter `name`, `description`, `always`,
//! `requires` with `bins` and `env`), loaded from `gateway.skills_dirs` and
//! `<workspace>/skills`; a workspace skill replaces a bundled one of the same name.
//! A skill whose requirements are missing is listed as unavailable and not offered.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::config::Config;

/// Most of a `SKILL.md` read, in bytes.
const MAX_SKILL_BYTES: u64 = 256 * 1024;

/// Where a skill came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SkillSource {
    /// One of `gateway.skills_dirs`.
    Bundled,
    /// `<workspace>/skills`.
    Workspace,
}

/// A loaded skill.
#[derive(Debug, Clone, PartialEq)]
pub struct Skill {
    pub name: String,
    pub description: String,
    /// Inline the body in the system prompt instead of listing it.
    pub always: bool,
    /// Binaries that must be on `PATH`.
    pub requires_bins: Vec<String>,
    /// Environment variables that must be set.
    pub requires_env: Vec<String>,
    /// The instructions after the front matter.
    pub body: String,
    /// The skill's folder.
    pub dir: PathBuf,
    pub source: SkillSource,
    /// Requirements not met (`bin:ffmpeg`, `env:BRAVE_API_KEY`).
    pub missing: Vec<String>,
}

impl Skill {
    /// All requirements are met.
    pub fn available(&self) -> bool {
        self.missing.is_empty()
    }
}

/// A skill as `switchboard skills list` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkillInfo {
    pub name: String,
    pub description: String,
    /// `bundled` or `workspace`.
    pub source: String,
    pub path: PathBuf,
    pub always: bool,
    pub available: bool,
    /// Missing requirements, empty when available.
    pub missing: Vec<String>,
}

/// Every skill with its status, sorted by name (for `switchboard skills list`).
pub fn list_skills(config: &Config) -> Vec<SkillInfo> {
    load_skills(config)
        .into_iter()
        .map(|s| SkillInfo {
            available: s.available(),
            name: s.name,
            description: s.description,
            source: match s.source {
                SkillSource::Bundled => "bundled".into(),
                SkillSource::Workspace => "workspace".into(),
            },
            path: s.dir,
            always: s.always,
            missing: s.missing,
        })
        .collect()
}

/// Load all skills; workspace skills win over bundled ones by name. Sorted by name.
pub fn load_skills(config: &Config) -> Vec<Skill> {
    let mut by_name: BTreeMap<String, Skill> = BTreeMap::new();
    // Bundled skills' folders are the owner's, out of the agent's reach: their links are
    // followed (within the folder itself, as a skill dir linked from elsewhere is).
    for dir in &config.gateway.skills_dirs {
        for s in load_dir(dir, dir, SkillSource::Bundled) {
            by_name.entry(s.name.clone()).or_insert(s);
        }
    }
    // The workspace's can be changed with `exec`: nothing is read through a link out of
    // the workspace.
    let ws = &config.gateway.workspace;
    for s in load_dir(&ws.join("skills"), ws, SkillSource::Workspace) {
        by_name.insert(s.name.clone(), s);
    }
    by_name.into_values().collect()
}

/// The skills in `dir`, each `SKILL.md` read only if its real path is inside `root`.
fn load_dir(dir: &Path, root: &Path, source: SkillSource) -> Vec<Skill> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut dirs: Vec<PathBuf> = rd
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .collect();
    dirs.sort();
    dirs.into_iter()
        .filter_map(|d| {
            // Through `crate::confine`: a regular file (a FIFO would block the turn that
            // reads it), inside `root`.
            let file = d.join("SKILL.md");
            let root = match source {
                SkillSource::Workspace => root.to_path_buf(),
                // A bundled skill folder may be a link to the owner's own checkout.
                SkillSource::Bundled => d.canonicalize().ok()?,
            };
            let text = crate::confine::read(&root, &file, MAX_SKILL_BYTES, false)?;
            match parse(&text, &d, source) {
                Some(s) => Some(s),
                None => {
                    tracing::warn!(dir = %d.display(), "SKILL.md has no usable front matter; skipped");
                    None
                }
            }
        })
        .collect()
}

/// Values of a front-matter list: `[a, b]`, `a, b`, or following `- a` lines.
fn list_value(inline: &str) -> Vec<String> {
    inline
        .trim()
        .trim_start_matches('[')
        .trim_end_matches(']')
        .split(',')
        .map(|s| unquote(s).to_string())
        .filter(|s| !s.is_empty())
        .collect()
}

fn unquote(s: &str) -> &str {
    s.trim().trim_matches('"').trim_matches('\'').trim()
}

/// `v` without its ` # comment`: a `#` at its start or after white space, outside quotes
/// (a quote opens only where a value or list item can start, so "don't" is no quote).
fn strip_comment(v: &str) -> &str {
    let mut quote = None;
    let mut prev = ' ';
    for (i, c) in v.char_indices() {
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None if (c == '"' || c == '\'') && (prev.is_whitespace() || "[,".contains(prev)) => {
                quote = Some(c)
            }
            None if c == '#' && prev.is_whitespace() => return v[..i].trim_end(),
            None => {}
        }
        prev = c;
    }
    v
}

/// A YAML block scalar's style, from its indicator (`|`, `>`, with an optional chomping
/// or indentation indicator: `|-`, `>+`, `|2`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Block {
    /// `|`: lines kept as they are.
    Literal,
    /// `>`: lines joined by spaces, a blank line a line break.
    Folded,
}

fn block_style(v: &str) -> Option<Block> {
    let mut chars = v.trim().chars();
    let style = match chars.next()? {
        '|' => Block::Literal,
        '>' => Block::Folded,
        _ => return None,
    };
    chars
        .all(|c| c == '-' || c == '+' || c.is_ascii_digit())
        .then_some(style)
}

fn indent_of(line: &str) -> usize {
    line.len() - line.trim_start().len()
}

/// The text of a block scalar's `lines` (its indentation taken off), trimmed.
fn block_text(lines: &[&str], style: Block) -> String {
    let indent = lines
        .iter()
        .filter(|l| !l.trim().is_empty())
        .map(|l| indent_of(l))
        .min()
        .unwrap_or(0);
    let lines = lines
        .iter()
        .map(|l| l.get(indent..).unwrap_or("").trim_end());
    match style {
        Block::Literal => lines.collect::<Vec<_>>().join("\n").trim().to_string(),
        Block::Folded => {
            let mut out = String::new();
            for l in lines {
                if l.is_empty() {
                    out.push('\n');
                } else {
                    if !out.is_empty() && !out.ends_with('\n') {
                        out.push(' ');
                    }
                    out.push_str(l);
                }
            }
            out.trim().to_string()
        }
    }
}

/// Parse a `SKILL.md`: a small YAML subset in the front matter (scalars, one level of
/// nesting, `[a, b]` and `- a` lists, ` # comments`, `|` and `>` block scalars), then the
/// body.
pub fn parse(text: &str, dir: &Path, source: SkillSource) -> Option<Skill> {
    let text = text.trim_start_matches('\u{feff}');
    let rest = text.strip_prefix("---")?;
    let end = rest.find("\n---")?;
    let (front, body) = (&rest[..end], &rest[end + 4..]);
    let body = body.trim_start_matches(|c| c != '\n').trim().to_string();
    let mut fields: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut scalar: BTreeMap<String, String> = BTreeMap::new();
    let mut parent = String::new();
    let mut last_key = String::new();
    let lines: Vec<&str> = front.lines().collect();
    let mut next = 0;
    while let Some(&line) = lines.get(next) {
        next += 1;
        if line.trim().is_empty() || line.trim_start().starts_with('#') {
            continue;
        }
        let indented = line.starts_with(' ') || line.starts_with('\t');
        let t = line.trim();
        if let Some(item) = t.strip_prefix("- ") {
            fields
                .entry(last_key.clone())
                .or_default()
                .push(unquote(strip_comment(item)).to_string());
            continue;
        }
        let Some((k, v)) = t.split_once(':') else {
            continue;
        };
        let k = k.trim();
        let key = if indented && !parent.is_empty() {
            format!("{parent}.{k}")
        } else {
            k.to_string()
        };
        if !indented {
            parent = k.to_string();
        }
        last_key = key.clone();
        let v = strip_comment(v);
        if let Some(style) = block_style(v) {
            // Its text is every following line indented deeper than the key (or blank).
            let start = next;
            while lines
                .get(next)
                .is_some_and(|l| l.trim().is_empty() || indent_of(l) > indent_of(line))
            {
                next += 1;
            }
            scalar.insert(key, block_text(&lines[start..next], style));
            continue;
        }
        if !v.trim().is_empty() {
            scalar.insert(key.clone(), unquote(v).to_string());
            fields.entry(key).or_default().extend(list_value(v));
        }
    }
    let name = scalar.get("name").cloned().filter(|n| !n.is_empty())?;
    let list = |a: &str, b: &str| -> Vec<String> {
        let mut v = fields.get(a).cloned().unwrap_or_default();
        v.extend(fields.get(b).cloned().unwrap_or_default());
        v
    };
    let requires_bins = list("requires.bins", "requires_bins");
    let requires_env = list("requires.env", "requires_env");
    let mut missing: Vec<String> = requires_bins
        .iter()
        .filter(|b| !on_path(b))
        .map(|b| format!("bin:{b}"))
        .collect();
    missing.extend(
        requires_env
            .iter()
            .filter(|e| crate::config::secret(e).is_none())
            .map(|e| format!("env:{e}")),
    );
    Some(Skill {
        name,
        description: scalar.get("description").cloned().unwrap_or_default(),
        always: scalar
            .get("always")
            .is_some_and(|v| v == "true" || v == "yes"),
        requires_bins,
        requires_env,
        body,
        dir: dir.to_path_buf(),
        source,
        missing,
    })
}

/// Whether an executable named `bin` is on `PATH`.
fn on_path(bin: &str) -> bool {
    let Some(path) = std::env::var_os("PATH") else {
        return false;
    };
    std::env::split_paths(&path).any(|d| {
        let p = d.join(bin);
        p.is_file() && {
            use std::os::unix::fs::PermissionsExt;
            p.metadata()
                .map(|m| m.permissions().mode() & 0o111 != 0)
                .unwrap_or(false)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn front_matter_with_nested_and_inline_requirements() {
        let text = "---\nname: weather\ndescription: \"Forecasts\"\nalways: true\nrequires:\n  bins: [sh, definitely-not-a-bin-xyz]\n  env:\n    - SWITCHBOARD_TEST_UNSET_VAR\n---\n# Weather\nUse web_fetch.\n";
        let s = parse(text, Path::new("/x/weather"), SkillSource::Bundled).unwrap();
        assert_eq!(s.name, "weather");
        assert_eq!(s.description, "Forecasts");
        assert!(s.always);
        assert_eq!(s.requires_bins, vec!["sh", "definitely-not-a-bin-xyz"]);
        assert_eq!(s.requires_env, vec!["SWITCHBOARD_TEST_UNSET_VAR"]);
        assert_eq!(
            s.missing,
            vec![
                "bin:definitely-not-a-bin-xyz",
                "env:SWITCHBOARD_TEST_UNSET_VAR"
            ]
        );
        assert_eq!(s.body, "# Weather\nUse web_fetch.");
        assert!(parse("no front matter", Path::new("/x"), SkillSource::Bundled).is_none());
    }

    #[test]
    fn front_matter_comments_are_not_values() {
        // As the bundled skill-writing template shows a skill's front matter.
        let text = "---\nname: tides                  # lowercase, dashes; same as the folder\ndescription: \"When the user asks about #tides\" # the trigger\nalways: true                 # inline it\nrequires:\n  bins: [sh]              # on PATH\n  env:\n    - SWITCHBOARD_TEST_UNSET_VAR   # set it\n---\nBody # not a comment\n";
        let s = parse(text, Path::new("/x/tides"), SkillSource::Workspace).unwrap();
        assert_eq!(s.name, "tides");
        assert_eq!(s.description, "When the user asks about #tides");
        assert!(s.always);
        assert_eq!(s.requires_bins, ["sh"]);
        assert_eq!(s.requires_env, ["SWITCHBOARD_TEST_UNSET_VAR"]);
        assert_eq!(s.body, "Body # not a comment");
        // As in YAML, a `#` is a comment only after white space.
        let plain = "---\nname: x\ndescription: Don't mix C# and F#1 # a comment\n---\n";
        let s = parse(plain, Path::new("/x/x"), SkillSource::Workspace).unwrap();
        assert_eq!(s.description, "Don't mix C# and F#1");
    }

    #[test]
    fn front_matter_block_scalars_are_folded_or_kept() {
        let text = "---\nname: notes\ndescription: >-   # folded\n  Use when the user asks\n  about: notes, lists.\n\n  - Not a list item.\nalways: false\nusage: |\n  line one\n    indented: two\nrequires:\n  env: [SWITCHBOARD_TEST_UNSET_VAR]\n---\nBody\n";
        let s = parse(text, Path::new("/x/notes"), SkillSource::Workspace).unwrap();
        assert_eq!(
            s.description,
            "Use when the user asks about: notes, lists.\n- Not a list item."
        );
        assert!(!s.always);
        assert_eq!(s.requires_env, ["SWITCHBOARD_TEST_UNSET_VAR"]);
        assert_eq!(s.body, "Body");
        let literal = "---\nname: y\ndescription: |\n  first line\n  second line\n---\n";
        let s = parse(literal, Path::new("/x/y"), SkillSource::Workspace).unwrap();
        assert_eq!(s.description, "first line\nsecond line");
    }
}
