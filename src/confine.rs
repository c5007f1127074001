//! Opening files in folders the agent's tools can change (the workspace, its skills), for
//! the gateway's own reads and writes (`MEMORY.md`, the prompt's files, `HEARTBEAT.md`,
//! `SKILL.md`), without being led out of the folder.
//!
//! `exec` and the file tools can make links. The gateway reading through one would put what
//! the sandbox keeps from them into the prompt or a tool's answer: `ln -s /proc/self/environ
//! MEMORY.md` shows the gateway's own environment (every token), `ln -s ../data/admin.token
//! USER.md` the admin token, `ln -s ~/.ssh/id_ed25519 MEMORY.md` a key. So a file is used
//! only when its real path is inside the folder, it is a regular file (a FIFO would block),
//! and it has one name (a hard link can point anywhere on the same disk). It is opened
//! without following a final link, so a link swapped in after the check fails.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// A file used by the gateway, confined to its folder.
#[derive(Debug)]
pub struct Confined {
    pub file: File,
    pub len: u64,
}

fn refused(why: &str) -> io::Error {
    io::Error::new(io::ErrorKind::PermissionDenied, why.to_string())
}

/// `root`'s real path, and `path`'s, which must be inside it.
fn real_inside(root: &Path, path: &Path) -> io::Result<(PathBuf, PathBuf)> {
    let root = root.canonicalize()?;
    let real = path.canonicalize()?;
    if real.starts_with(&root) {
        Ok((root, real))
    } else {
        Err(refused("it leads out of its folder"))
    }
}

/// Where the open `file` really is must be inside `root` (a real path) too: a folder on
/// the way swapped for a link between the check and the open (`O_NOFOLLOW` guards the last
/// name only) is caught here.
fn still_inside(file: &File, root: &Path) -> io::Result<()> {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        let at = std::fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd()))?;
        if !at.starts_with(root) {
            return Err(refused("it leads out of its folder"));
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (file, root);
    Ok(())
}

fn checked(file: File, root: &Path) -> io::Result<Confined> {
    still_inside(&file, root)?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(refused("it is not a regular file"));
    }
    if meta.nlink() > 1 {
        return Err(refused("it has several names (a hard link)"));
    }
    Ok(Confined {
        len: meta.len(),
        file,
    })
}

/// Open `path` (inside `root`) for reading.
pub fn open(root: &Path, path: &Path) -> io::Result<Confined> {
    let (root, real) = real_inside(root, path)?;
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(real)?;
    checked(file, &root)
}

/// Open `path` (inside `root`) for appending, creating it when missing.
pub fn append(root: &Path, path: &Path) -> io::Result<Confined> {
    let (root, target) = match real_inside(root, path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            // Missing (or a link to nothing): created by its name in a folder inside root;
            // `O_NOFOLLOW` refuses a dangling link.
            let parent = path.parent().ok_or_else(|| refused("it has no folder"))?;
            let name = path.file_name().ok_or_else(|| refused("it has no name"))?;
            let (root, folder) = real_inside(root, parent)?;
            (root, folder.join(name))
        }
        found => found?,
    };
    let file = OpenOptions::new()
        .append(true)
        .create(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(target)?;
    checked(file, &root)
}

/// Up to `max` bytes of `path` (inside `root`) as text, from its start or, with
/// `keep_end`, its end. `None` when missing or refused (a refusal is logged).
pub fn read(root: &Path, path: &Path, max: u64, keep_end: bool) -> Option<String> {
    let mut c = match open(root, path) {
        Ok(c) => c,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return None,
        Err(e) => {
            tracing::warn!(path = %path.display(), "not read: {e}");
            return None;
        }
    };
    if keep_end && c.len > max {
        c.file.seek(SeekFrom::End(-(max as i64))).ok()?;
    }
    let mut bytes = Vec::new();
    c.file.take(max).read_to_end(&mut bytes).ok()?;
    Some(String::from_utf8_lossy(&bytes).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::unix::fs::symlink;

    #[test]
    fn only_regular_files_inside_the_folder_with_one_name() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("ws");
        std::fs::create_dir_all(ws.join("notes")).unwrap();
        let secret = dir.path().join("secret.txt");
        std::fs::write(&secret, "TOKEN=abc").unwrap();
        std::fs::write(ws.join("notes/memory.md"), "- likes tea").unwrap();
        let read = |name: &str| read(&ws, &ws.join(name), 1024, false);

        symlink(&secret, ws.join("out.md")).unwrap();
        assert_eq!(read("out.md"), None, "a link out of the folder");
        symlink("/proc/self/environ", ws.join("env.md")).unwrap();
        assert_eq!(read("env.md"), None);
        symlink("notes/memory.md", ws.join("in.md")).unwrap();
        assert_eq!(read("in.md").as_deref(), Some("- likes tea"));
        std::fs::hard_link(&secret, ws.join("hard.md")).unwrap();
        assert_eq!(read("hard.md"), None, "a hard link");
        let made = std::process::Command::new("mkfifo")
            .arg(ws.join("fifo.md"))
            .status()
            .unwrap();
        assert!(made.success());
        assert_eq!(read("fifo.md"), None, "a FIFO, without blocking");
        assert_eq!(read("missing.md"), None);

        // Appending: created when missing, refused through a link out or a dangling one.
        append(&ws, &ws.join("new.md"))
            .unwrap()
            .file
            .write_all(b"x")
            .unwrap();
        assert_eq!(read("new.md").as_deref(), Some("x"));
        assert!(append(&ws, &ws.join("out.md")).is_err());
        symlink(dir.path().join("nowhere.md"), ws.join("dangling.md")).unwrap();
        assert!(append(&ws, &ws.join("dangling.md")).is_err());
        assert!(!dir.path().join("nowhere.md").exists());
        assert_eq!(std::fs::read_to_string(&secret).unwrap(), "TOKEN=abc");
    }

    #[test]
    fn a_file_opened_outside_the_folder_is_refused_after_the_open() {
        // What a folder swapped for a link between the check and the open leads to.
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("ws");
        std::fs::create_dir(&ws).unwrap();
        std::fs::write(dir.path().join("outside.md"), "secret").unwrap();
        let outside = File::open(dir.path().join("outside.md")).unwrap();
        let ws = ws.canonicalize().unwrap();
        assert!(checked(outside, &ws).is_err());
        std::fs::write(ws.join("inside.md"), "fine").unwrap();
        let inside = File::open(ws.join("inside.md")).unwrap();
        assert_eq!(checked(inside, &ws).unwrap().len, 4);
    }

    #[test]
    fn the_end_of_a_long_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("MEMORY.md");
        std::fs::write(&path, "0123456789").unwrap();
        assert_eq!(read(dir.path(), &path, 4, true).as_deref(), Some("6789"));
        assert_eq!(read(dir.path(), &path, 4, false).as_deref(), Some("0123"));
    }
}
