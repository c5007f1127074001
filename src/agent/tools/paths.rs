//! Workspace confinement: a path is allowed when its real path (symlinks resolved,
//! compared by components) lies inside the real path of the workspace.

use std::path::{Component, Path, PathBuf};

use crate::agent::tool::{ToolContext, ToolError};

/// Resolve `path` (relative to the workspace) and refuse it when it escapes the workspace
/// while `agent.restrict_to_workspace` is on. The file itself need not exist yet.
pub fn resolve(ctx: &ToolContext, path: &str) -> Result<PathBuf, ToolError> {
    let raw = Path::new(path);
    let joined = if raw.is_absolute() {
        raw.to_path_buf()
    } else {
        ctx.workspace.join(raw)
    };
    if !ctx.restrict_to_workspace {
        return Ok(joined);
    }
    let root = ctx.workspace.canonicalize().map_err(|e| {
        ToolError::Failed(format!(
            "workspace {} is not usable: {e}",
            ctx.workspace.display()
        ))
    })?;
    // Canonicalize the longest existing ancestor (this resolves every symlink in it), then
    // re-attach the part that does not exist yet, which may not climb with `..`.
    let mut existing = joined.as_path();
    let mut rest: Vec<&std::ffi::OsStr> = Vec::new();
    let real = loop {
        match existing.canonicalize() {
            Ok(p) => break p,
            Err(_) => {
                // It exists but does not resolve: a symlink to nowhere (or a loop). Writing
                // through it would create its target wherever that is.
                if existing.symlink_metadata().is_ok() {
                    return Err(ToolError::Refused(format!(
                        "{path}: a symlink that does not resolve"
                    )));
                }
                let Some(parent) = existing.parent() else {
                    return Err(ToolError::Failed(format!("{path}: no such path")));
                };
                match existing.components().next_back() {
                    Some(Component::Normal(name)) => rest.push(name),
                    _ => return Err(refused(path)),
                }
                existing = parent;
            }
        }
    };
    let mut full = real;
    for name in rest.into_iter().rev() {
        full.push(name);
    }
    if full.starts_with(&root) {
        Ok(full)
    } else {
        Err(refused(path))
    }
}

/// Create the folders above `real` (from [`resolve`]) that are missing. With
/// `agent.restrict_to_workspace`, one at a time from the workspace's folder, each made
/// (`mkdirat`) and opened (`openat`, `O_NOFOLLOW`) by its name in the one before: a folder
/// on the way swapped for a link after [`resolve`] looked (by a command `exec` left
/// running) is refused, never followed, so no folder is made outside the workspace.
pub fn make_parents(ctx: &ToolContext, path: &str, real: &Path) -> Result<(), ToolError> {
    use rustix::fs::{AtFlags, FileType, Mode, OFlags};
    use rustix::io::Errno;
    let Some(parent) = real.parent() else {
        return Ok(());
    };
    let failed = |e: std::io::Error| ToolError::Failed(format!("{path}: {e}"));
    if !ctx.restrict_to_workspace {
        return std::fs::create_dir_all(parent).map_err(failed);
    }
    // What `mkdir -p` by path refuses: made one at a time, the folders could go deeper than
    // any path the system opens (thousands of them, for nothing).
    if parent.as_os_str().len() >= libc::PATH_MAX as usize {
        return Err(failed(Errno::NAMETOOLONG.into()));
    }
    let root = ctx.workspace.canonicalize().map_err(failed)?;
    let rel = parent.strip_prefix(&root).map_err(|_| refused(path))?;
    let folder = OFlags::DIRECTORY | OFlags::RDONLY | OFlags::CLOEXEC;
    let mut dir = rustix::fs::open(&root, folder, Mode::empty()).map_err(|e| failed(e.into()))?;
    let mut walked = PathBuf::new();
    for part in rel.components() {
        let Component::Normal(name) = part else {
            return Err(refused(path));
        };
        walked.push(name);
        let open = || rustix::fs::openat(&dir, name, folder | OFlags::NOFOLLOW, Mode::empty());
        let opened = match open() {
            Err(Errno::NOENT) => {
                match rustix::fs::mkdirat(&dir, name, Mode::from_raw_mode(0o777)) {
                    Ok(()) | Err(Errno::EXIST) => open(),
                    Err(e) => Err(e),
                }
            }
            opened => opened,
        };
        let err = match opened {
            Ok(next) => {
                dir = next;
                continue;
            }
            Err(e) => e,
        };
        let shown = walked.display();
        return Err(
            match rustix::fs::statat(&dir, name, AtFlags::SYMLINK_NOFOLLOW) {
                Ok(st) if FileType::from_raw_mode(st.st_mode) == FileType::Symlink => {
                    ToolError::Refused(format!(
                        "{path}: {shown} is a link (made while the folders were created), \
                         not followed: it may lead outside the workspace"
                    ))
                }
                Ok(st) if FileType::from_raw_mode(st.st_mode) != FileType::Directory => {
                    ToolError::Failed(format!("{path}: {shown} is not a folder"))
                }
                _ => failed(err.into()),
            },
        );
    }
    Ok(())
}

/// How [`open`] opens a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    Read,
    /// Create or truncate, then write.
    Write,
    /// A folder, to list.
    Folder,
}

/// Open `real` (from [`resolve`]) so that no link on the way leads out of the workspace.
/// [`resolve`] checks the path, but a folder on it could be swapped for a symlink to
/// elsewhere before the open (a command left running by `exec` can do that in a loop).
/// With `agent.restrict_to_workspace`, Linux's `openat2(RESOLVE_BENEATH)` from the
/// workspace's folder refuses such a path as the file is opened; a kernel without it
/// (before 5.6) opens by path.
pub fn open(
    ctx: &ToolContext,
    path: &str,
    real: &Path,
    access: Access,
) -> Result<std::fs::File, ToolError> {
    #[cfg(target_os = "linux")]
    if ctx.restrict_to_workspace && openat2_works() {
        match beneath(&ctx.workspace, real, access) {
            Ok(file) => return Ok(file),
            // No openat2 (Linux before 5.6, or a container that filters it).
            Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => {}
            Err(e) if matches!(e.raw_os_error(), Some(libc::EXDEV | libc::ELOOP)) => {
                return Err(refused(path));
            }
            Err(e) => return Err(ToolError::Failed(format!("{path}: {e}"))),
        }
    }
    let opened = match access {
        Access::Read | Access::Folder => std::fs::File::open(real),
        Access::Write => std::fs::File::create(real),
    };
    opened.map_err(|e| ToolError::Failed(format!("{path}: {e}")))
}

/// Whether this system lets the gateway call `openat2` (asked once): Linux before 5.6 has
/// none (ENOSYS), and a container's seccomp filter may refuse it (EPERM, Docker before
/// 20.10), which must not make every file tool fail.
#[cfg(target_os = "linux")]
fn openat2_works() -> bool {
    static WORKS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *WORKS.get_or_init(
        || match beneath(Path::new("/"), Path::new("/"), Access::Folder) {
            Ok(_) => true,
            Err(e) => {
                tracing::warn!(
                    "file tools: openat2 is not available ({e}); a folder swapped for a link while \
                 a tool runs is not caught"
                );
                false
            }
        },
    )
}

/// `openat2` of `real` beneath the workspace's folder: `EXDEV` when the way there leaves it.
#[cfg(target_os = "linux")]
fn beneath(workspace: &Path, real: &Path, access: Access) -> std::io::Result<std::fs::File> {
    use std::os::fd::{AsRawFd, FromRawFd};
    use std::os::unix::ffi::OsStrExt;
    let root = workspace.canonicalize()?;
    let rel = real
        .strip_prefix(&root)
        .map_err(|_| std::io::Error::from_raw_os_error(libc::EXDEV))?;
    let rel = if rel.as_os_str().is_empty() {
        Path::new(".")
    } else {
        rel
    };
    let rel = std::ffi::CString::new(rel.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))?;
    let dir = std::fs::File::open(&root)?;
    // Non-blocking: a FIFO put there meanwhile must not hold the call (the caller checks
    // that it opened a regular file).
    let flags = libc::O_CLOEXEC
        | libc::O_NONBLOCK
        | match access {
            Access::Read => libc::O_RDONLY,
            Access::Folder => libc::O_RDONLY | libc::O_DIRECTORY,
            Access::Write => libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC,
        };
    #[allow(unsafe_code)]
    // SAFETY: `open_how` is three integers; all zero is its documented default.
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    how.flags = flags as u64;
    if access == Access::Write {
        how.mode = 0o666;
    }
    how.resolve = libc::RESOLVE_BENEATH | libc::RESOLVE_NO_MAGICLINKS;
    #[allow(unsafe_code)]
    // SAFETY: an open descriptor, a NUL-terminated path and `how` of the size given; the
    // kernel copies them.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            dir.as_raw_fd(),
            rel.as_ptr(),
            &how as *const libc::open_how,
            std::mem::size_of::<libc::open_how>(),
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    #[allow(unsafe_code)]
    // SAFETY: the kernel just returned this descriptor; nothing else owns it.
    Ok(unsafe { std::fs::File::from_raw_fd(fd as i32) })
}

fn refused(path: &str) -> ToolError {
    ToolError::Refused(format!("{path} is outside the workspace"))
}

/// `path` shown relative to the workspace when it is inside it.
pub fn display(ctx: &ToolContext, path: &Path) -> String {
    let root = ctx
        .workspace
        .canonicalize()
        .unwrap_or_else(|_| ctx.workspace.clone());
    path.strip_prefix(&root)
        .unwrap_or(path)
        .display()
        .to_string()
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;
    use std::io::Read;

    fn confined(ws: &Path) -> ToolContext {
        ToolContext::new("test:1".parse().unwrap(), ws)
    }

    /// `write_file race/b8/c/f.txt` while a command swaps `race` between a folder and a
    /// link out: [`resolve`] saw the folder, the link is there when the folders are made.
    /// None is made outside; with the folder back, they are made inside.
    #[test]
    fn folders_are_not_made_through_a_link_swapped_in_after_the_check() {
        let root = tempfile::tempdir().unwrap();
        let (ws, outside) = (root.path().join("ws"), root.path().join("outside"));
        std::fs::create_dir_all(ws.join("race")).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        let ctx = confined(&ws);
        let path = "race/b8/c/f.txt";
        let real = resolve(&ctx, path).unwrap();
        std::fs::rename(ws.join("race"), ws.join("race.old")).unwrap();
        std::os::unix::fs::symlink(&outside, ws.join("race")).unwrap();
        let got = make_parents(&ctx, path, &real);
        assert!(
            matches!(&got, Err(ToolError::Refused(m)) if m.contains("race is a link")),
            "{got:?}"
        );
        assert_eq!(
            std::fs::read_dir(&outside).unwrap().count(),
            0,
            "made outside"
        );
        std::fs::remove_file(ws.join("race")).unwrap();
        std::fs::rename(ws.join("race.old"), ws.join("race")).unwrap();
        make_parents(&ctx, path, &real).unwrap();
        assert!(ws.join("race/b8/c").is_dir());
        std::fs::write(ws.join("race/b8/file"), "").unwrap();
        let in_a_file = resolve(&ctx, "race/b8/file/g/f.txt").unwrap();
        let got = make_parents(&ctx, "race/b8/file/g/f.txt", &in_a_file);
        assert!(
            matches!(&got, Err(ToolError::Failed(m)) if m.contains("race/b8/file is not a folder")),
            "{got:?}"
        );
    }

    /// A folder checked by [`resolve`] and then swapped for a link out of the workspace
    /// before the open: the open refuses, for reading and for writing.
    #[test]
    fn a_folder_swapped_for_a_link_after_the_check_is_not_followed() {
        let root = tempfile::tempdir().unwrap();
        let (ws, outside) = (root.path().join("ws"), root.path().join("outside"));
        std::fs::create_dir_all(ws.join("d")).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(ws.join("d/f.txt"), "inside").unwrap();
        std::fs::write(outside.join("f.txt"), "outside").unwrap();
        let ctx = confined(&ws);
        let (read, new) = (
            resolve(&ctx, "d/f.txt").unwrap(),
            resolve(&ctx, "d/new.txt").unwrap(),
        );
        let mut text = String::new();
        open(&ctx, "d/f.txt", &read, Access::Read)
            .unwrap()
            .read_to_string(&mut text)
            .unwrap();
        assert_eq!(text, "inside");

        std::fs::rename(ws.join("d"), ws.join("d.old")).unwrap();
        std::os::unix::fs::symlink(&outside, ws.join("d")).unwrap();
        let refused = |r: Result<std::fs::File, ToolError>| matches!(r, Err(ToolError::Refused(m)) if m.contains("outside the workspace"));
        assert!(refused(open(&ctx, "d/f.txt", &read, Access::Read)));
        assert!(refused(open(&ctx, "d/new.txt", &new, Access::Write)));
        let folder = resolve(&ctx, "d.old").unwrap().with_file_name("d");
        assert!(refused(open(&ctx, "d", &folder, Access::Folder)));
        assert!(!outside.join("new.txt").exists());
        // Without the restriction, paths are opened as they are.
        let free = ToolContext {
            restrict_to_workspace: false,
            ..ctx
        };
        assert!(open(&free, "d/f.txt", &read, Access::Read).is_ok());
    }
}
