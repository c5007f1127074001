//! Who has the store open: `<data_dir>/store.holder` names the process holding the store's
//! lock (its pid, what it is and what to do about it), so that a process refused the lock
//! can say whom to close instead of guessing. Written once the lock is taken, removed when
//! the store is dropped; a file left by a process that died is ignored.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use serde::{Deserialize, Serialize};

const FILE: &str = "store.holder";

/// What this process says it is when it holds a store (see [`set_role`]).
static ROLE: OnceLock<(String, String)> = OnceLock::new();

/// Name what this process is (`gateway`, `switchboard chat`) and what another process
/// refused the store should do about it (`close it, …`), for the stores it opens from now
/// on. The first call wins.
pub fn set_role(role: &str, hint: &str) {
    let _ = ROLE.set((role.to_string(), hint.to_string()));
}

/// A process holding a store.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Holder {
    pub pid: u32,
    /// What it is: `gateway`, `switchboard chat`; empty when it did not say.
    pub role: String,
    /// What another process is to do about it (may be empty).
    pub hint: String,
}

/// The role of `switchboard run`; a command's is its name, `switchboard chat`.
pub const GATEWAY: &str = "gateway";

impl Holder {
    /// Whether a command holds the store (an open `switchboard chat` prompt), not a
    /// gateway, which serves the admin API.
    pub fn is_command(&self) -> bool {
        self.role.starts_with("switchboard ")
    }

    /// `a running gateway (pid 1234)`, `` `switchboard chat` (pid 1234) ``.
    pub fn who(&self) -> String {
        match self.role.as_str() {
            GATEWAY => format!("a running gateway (pid {})", self.pid),
            "" => format!("another switchboard process (pid {})", self.pid),
            role => format!("`{role}` (pid {})", self.pid),
        }
    }
}

fn path(dir: &Path) -> PathBuf {
    dir.join(FILE)
}

/// Record this process as the holder of the store in `dir` (it has just taken the lock).
pub(super) fn write(dir: &Path) {
    let (role, hint) = ROLE.get().cloned().unwrap_or_default();
    let me = Holder {
        pid: std::process::id(),
        role,
        hint,
    };
    let body = serde_json::to_vec(&me).unwrap_or_default();
    // Whole or not at all for a reader (a new file renamed over the old, which may be
    // another user's left behind).
    let part = dir.join(format!("{FILE}.{}", me.pid));
    let written = std::fs::write(&part, body).and_then(|()| std::fs::rename(&part, path(dir)));
    if let Err(e) = written {
        let _ = std::fs::remove_file(&part);
        tracing::debug!(dir = %dir.display(), "could not write {FILE}: {e}");
    }
}

/// Remove the record, if it is this process's (the store is being closed).
pub(super) fn remove(dir: &Path) {
    if read_any(dir).is_some_and(|h| h.pid == std::process::id()) {
        let _ = std::fs::remove_file(path(dir));
    }
}

fn read_any(dir: &Path) -> Option<Holder> {
    serde_json::from_slice(&std::fs::read(path(dir)).ok()?).ok()
}

/// The process holding the store in `dir`, if it said so and is still alive.
pub fn read(dir: &Path) -> Option<Holder> {
    read_any(dir).filter(|h| alive(h.pid))
}

/// Whether process `pid` exists (a pid reused since is taken for the holder: rare, and
/// only a message is at stake).
fn alive(pid: u32) -> bool {
    if cfg!(target_os = "linux") {
        Path::new("/proc").join(pid.to_string()).exists()
    } else {
        true
    }
}

/// The sentence for a store in `dir` whose lock another process holds.
pub(super) fn locked_message(dir: &Path) -> String {
    let dir_s = dir.display();
    match read(dir) {
        Some(h) if h.hint.is_empty() => format!("the store in {dir_s} is in use by {}", h.who()),
        Some(h) => format!("the store in {dir_s} is in use by {}; {}", h.who(), h.hint),
        None => format!(
            "the store in {dir_s} is in use by another process (a running gateway, or a \
             `switchboard chat` started without one)"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_holder_that_died_is_not_named() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(read(dir.path()), None);
        write(dir.path());
        assert_eq!(read(dir.path()).map(|h| h.pid), Some(std::process::id()));
        // A pid no process has (above the kernel's pid_max).
        let dead = Holder {
            pid: 99_999_999,
            role: "switchboard chat".into(),
            hint: String::new(),
        };
        std::fs::write(path(dir.path()), serde_json::to_vec(&dead).unwrap()).unwrap();
        assert_eq!(read(dir.path()), None);
        assert!(locked_message(dir.path()).contains("in use by another process"));
        // Not this process's record: left alone.
        remove(dir.path());
        assert!(path(dir.path()).exists());
    }
}
