//! What a member's turn may do with the file tools ([`crate::agent::member`]): read and
//! write in the member's own folder (`members/<channel>-<id>/`); read `shared/` (what the
//! owner puts there for everyone), `skills/`, the instructions every prompt holds anyway,
//! and of the inbox only the files sent in its own chat (it holds every chat's). Nothing
//! else: the rest is the owner's (their notes, the memory file with what is kept for them,
//! the heartbeat's tasks, other members' folders), and what they write there could be
//! what their commands and tasks run or read.

use std::path::{Component, Path, PathBuf};

use crate::agent::tool::{ToolContext, ToolError};

/// Whether `name` (at the workspace's top) is one of the assistant's own files: read into
/// every chat's prompt, or the heartbeat's tasks.
fn own_file(name: &str) -> bool {
    use crate::agent::prompt::BOOTSTRAP_FILES;
    use crate::agent::tools::memory::MEMORY_FILE;
    use crate::scheduler::heartbeat::HEARTBEAT_FILE;
    BOOTSTRAP_FILES
        .iter()
        .chain([&MEMORY_FILE, &HEARTBEAT_FILE])
        .any(|f| f.eq_ignore_ascii_case(name))
}

/// The folder the owner puts what members may read in, at the workspace's top.
pub const SHARED_DIR: &str = "shared";

/// The assistant's own files a member's turn may not even read: the memory file (it holds
/// notes kept for the owner; the `memory` tool shows a member the rest) and the heartbeat's
/// tasks.
fn private_file(name: &str) -> bool {
    use crate::agent::tools::memory::MEMORY_FILE;
    use crate::scheduler::heartbeat::HEARTBEAT_FILE;
    [MEMORY_FILE, HEARTBEAT_FILE]
        .iter()
        .any(|f| f.eq_ignore_ascii_case(name))
}

/// What a file tool does with a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Use {
    Read,
    Write,
    List,
}

/// Refuse `real` (resolved from `path`) for `used` when the turn is a member's and the
/// path is out of a member's reach. A member's file tools stay in the workspace even where
/// the owner let theirs out (`agent.restrict_to_workspace = false`).
pub fn check(ctx: &ToolContext, path: &str, real: &Path, used: Use) -> Result<(), ToolError> {
    // The notes kept for the owner are opened in their direct chats only: not by the
    // owner's own turns elsewhere either (a member's are refused all of it below).
    if !ctx.owner_only && ctx.member.is_none() && memory_file(ctx, real) {
        return Err(ToolError::Refused(format!(
            "{path} holds notes kept for the owner's direct chats; here, the memory tool's \
             recall finds what this chat may see"
        )));
    }
    let Some(member) = &ctx.member else {
        return Ok(());
    };
    let Some(rel) = in_workspace(ctx, real) else {
        return Err(ToolError::Refused(format!(
            "{path} is outside the workspace, where only the owner's file tools may go"
        )));
    };
    let parts: Vec<String> = rel
        .components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n.to_string_lossy().into_owned()),
            _ => None,
        })
        .collect();
    let first = parts.first().map(String::as_str).unwrap_or_default();
    let own = member
        .folder
        .as_deref()
        .map(|f| f.split('/').collect::<Vec<_>>());
    let mine = own
        .as_ref()
        .is_some_and(|f| parts.len() >= f.len() && parts.iter().zip(f).all(|(p, f)| p == f));
    if mine && (used != Use::Write || parts.len() > own.as_ref().map_or(0, Vec::len)) {
        return Ok(());
    }
    if used == Use::Write {
        // Their own folder, nothing else: a file written anywhere else could be what the
        // owner's commands or tasks run or read (a `json.py` Python imports from there).
        let why = if own_file(first) || first.eq_ignore_ascii_case("skills") {
            "is one of the assistant's own files (its instructions, memory, heartbeat tasks \
             or skills), which only the owner may change"
        } else if first == crate::agent::member::MEMBERS_DIR && !mine {
            "is another member's folder"
        } else {
            "is the owner's part of the workspace"
        };
        let instead = match &member.folder {
            Some(f) => format!("; write in {f}/ instead"),
            None => "; this turn acts for several people, who may write nowhere".to_string(),
        };
        return Err(ToolError::Refused(format!("{path} {why}{instead}")));
    }
    if first != "inbox" {
        let readable = first == SHARED_DIR
            || first.eq_ignore_ascii_case("skills")
            || (parts.len() == 1 && own_file(first) && !private_file(first));
        if readable {
            return Ok(());
        }
        let theirs = match &member.folder {
            Some(f) => format!("their own folder ({f}/), "),
            None => String::new(),
        };
        return Err(ToolError::Refused(format!(
            "{path} is the owner's: a member's turn opens only {theirs}{SHARED_DIR}/ (what the \
             owner shares), skills/, the assistant's instructions and the files sent in this chat"
        )));
    }
    let sent_here = |p: &Path| member.files.iter().any(|f| same_file(f, p));
    if parts.len() > 1 && used != Use::List && sent_here(real) {
        return Ok(());
    }
    let names: Vec<String> = member
        .files
        .iter()
        .filter_map(|f| display_in(ctx, f))
        .collect();
    let listed = match names.as_slice() {
        [] => "none was sent in this chat".to_string(),
        names => format!("this chat's: {}", names.join(", ")),
    };
    Err(ToolError::Refused(format!(
        "{path}: the inbox holds the files sent in every chat; only this chat's can be \
         opened here ({listed})"
    )))
}

/// Whether `real` is the workspace's memory file.
fn memory_file(ctx: &ToolContext, real: &Path) -> bool {
    use crate::agent::tools::memory::MEMORY_FILE;
    in_workspace(ctx, real).is_some_and(|rel| {
        rel.to_str()
            .is_some_and(|r| r.eq_ignore_ascii_case(MEMORY_FILE))
    })
}

/// `real` relative to the workspace's real path, when it is in there.
fn in_workspace(ctx: &ToolContext, real: &Path) -> Option<PathBuf> {
    let root = ctx.workspace.canonicalize().ok()?;
    let real = canonical(real);
    real.strip_prefix(&root).ok().map(Path::to_path_buf)
}

/// `p` with links resolved as far as it exists, the rest as written, and every `..`
/// taken (`x/../HEARTBEAT.md` with no `x` yet is `HEARTBEAT.md`, as the write that makes `x`
/// would find it).
fn canonical(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::ParentDir => {
                out = out.canonicalize().unwrap_or(out);
                out.pop();
            }
            Component::CurDir => {}
            c => out.push(c),
        }
    }
    // The longest part that exists, resolved; the names after it as written. (A loop, not
    // a recursion: a path thousands of folders deep must not overflow the stack.)
    let mut names = Vec::new();
    let mut base = out.as_path();
    loop {
        if let Ok(mut real) = base.canonicalize() {
            real.extend(names.iter().rev());
            return real;
        }
        match (base.parent(), base.file_name()) {
            (Some(parent), Some(name)) => {
                names.push(name);
                base = parent;
            }
            _ => return out.clone(),
        }
    }
}

fn same_file(a: &Path, b: &Path) -> bool {
    canonical(a) == canonical(b)
}

/// A chat's file as the model names it: relative to the workspace.
fn display_in(ctx: &ToolContext, f: &Path) -> Option<String> {
    let rel = in_workspace(ctx, f)?;
    Some(rel.display().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::tool::Member;

    fn ctx(ws: &Path, member: Option<Member>) -> ToolContext {
        ToolContext {
            member,
            ..ToolContext::new("telegram:6006".parse().unwrap(), ws)
        }
    }

    #[test]
    fn a_member_opens_this_chats_files_and_reads_but_never_writes_the_assistants_own() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path();
        std::fs::create_dir_all(ws.join("inbox")).unwrap();
        for f in ["inbox/mine.pdf", "inbox/theirs.pdf", "SOUL.md"] {
            std::fs::write(ws.join(f), "x").unwrap();
        }
        let sam = Member {
            name: "Sam".into(),
            folder: Some("members/telegram-6".into()),
            files: vec![ws.join("inbox/mine.pdf")],
        };
        let member = ctx(ws, Some(sam));
        let check = |c: &ToolContext, p: &str, u: Use| check(c, p, &ws.join(p), u);
        assert!(check(&member, "inbox/mine.pdf", Use::Read).is_ok());
        let other = check(&member, "inbox/theirs.pdf", Use::Read).unwrap_err();
        assert!(
            other.to_string().contains("this chat's: inbox/mine.pdf"),
            "{other}"
        );
        assert!(check(&member, "inbox", Use::List).is_err());
        assert!(check(&member, "inbox/mine.pdf", Use::Write).is_err());
        // Reads: their folder, shared/, skills/, the instructions; nothing else.
        for p in [
            "SOUL.md",
            "shared/menu.md",
            "skills/x/SKILL.md",
            "members/telegram-6/a",
        ] {
            assert!(check(&member, p, Use::Read).is_ok(), "{p}");
        }
        assert!(check(&member, "members/telegram-6", Use::List).is_ok());
        assert!(check(&member, "MEMORY.md", Use::Read).is_err());
        for p in [
            "heartbeat.md",
            "notes/health.md",
            "members/telegram-7/diary",
        ] {
            let e = check(&member, p, Use::Read).unwrap_err().to_string();
            assert!(
                e.contains("opens only their own folder (members/telegram-6/), shared/"),
                "{e}"
            );
        }
        assert!(check(&member, ".", Use::List).is_err());
        // A path thousands of folders deep is refused, not a stack overflow.
        let deep = "a/".repeat(20_000) + "x";
        assert!(check(&member, &deep, Use::Read).is_err());
        let e = check(&member, "members/telegram-7/x", Use::Write).unwrap_err();
        assert!(e.to_string().contains("is another member's folder"), "{e}");
        for p in [
            "SOUL.md",
            "memory.md",
            "MEMORY.md/x",
            "skills/new/SKILL.md",
            "json.py",
            "notes/todo.md",
            "members/telegram-7/x",
            "members/telegram-6",
        ] {
            assert!(check(&member, p, Use::Write).is_err(), "{p}");
        }
        assert!(check(&member, "members/telegram-6/notes/soul.md", Use::Write).is_ok());
        let e = check(&member, "notes/todo.md", Use::Write).unwrap_err();
        assert!(
            e.to_string()
                .contains("write in members/telegram-6/ instead"),
            "{e}"
        );
        // Where the owner let file tools out of the workspace, a member's stay in, and a
        // `..` through a folder not made yet still names the file it lands on.
        let free = ToolContext {
            restrict_to_workspace: false,
            ..member.clone()
        };
        assert!(check(&free, "x/../HEARTBEAT.md", Use::Write).is_err());
        assert!(check(&free, "x/../../outside.txt", Use::Read).is_err());
        assert!(check(&free, "members/telegram-6/x/../notes.txt", Use::Write).is_ok());
        // The owner's turn in a group: all but the notes kept for their direct chats.
        std::fs::write(
            ws.join("MEMORY.md"),
            "- door code 7788 (2026-11-25, owner only)",
        )
        .unwrap();
        let in_group = ctx(ws, None);
        let e = check(&in_group, "MEMORY.md", Use::Read).unwrap_err();
        assert!(
            e.to_string().contains("kept for the owner's direct chats"),
            "{e}"
        );
        assert!(check(&in_group, "./memory.md", Use::Read).is_err());
        // In their direct chat: everything.
        let owner = ToolContext {
            owner_only: true,
            ..ctx(ws, None)
        };
        assert!(check(&owner, "MEMORY.md", Use::Read).is_ok());
        assert!(check(&owner, "inbox/theirs.pdf", Use::Read).is_ok());
        assert!(check(&owner, "SOUL.md", Use::Write).is_ok());
    }
}
