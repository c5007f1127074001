//! Where the data dir and the workspace may be, one against the other.
//!
//! With `agent.restrict_to_workspace` the agent's tools reach the workspace (and `exec` the
//! system's folders) but not what sits beside it. A data dir at or inside the workspace
//! would put the store (every chat's history) and `admin.token` within their reach: the
//! file tools keep `admin.token` out of an answer, but `exec base64 data/admin.token` does
//! not. That is refused.
//!
//! The other way round, a workspace inside the data dir (`/var/lib/switchboard/workspace`)
//! is a layout people use, and it exposes nothing: the tools still reach only the
//! workspace, not the store and `admin.token` beside it. Only the store's own folders
//! (`store/`, `journal/`) cannot hold the workspace.

use std::path::{Component, Path, PathBuf};

use super::{Config, ConfigError};

/// The data dir's folders that are the store's own (see `store::sled_store`).
const STORE_FOLDERS: [&str; 2] = ["store", "journal"];

/// Refuse a data dir at or inside the workspace, and a workspace in the store's folders,
/// when the agent is confined to the workspace. The paths are absolute (resolved against
/// the config file's folder); links in the part that exists are followed.
pub(super) fn check(c: &Config) -> Result<(), ConfigError> {
    for (key, path) in [
        ("gateway.data_dir", &c.gateway.data_dir),
        ("gateway.workspace", &c.gateway.workspace),
    ] {
        if path.exists() && !path.is_dir() {
            return Err(ConfigError::Invalid(format!(
                "{key}: {} is a file, not a folder",
                path.display()
            )));
        }
    }
    if !c.agent.restrict_to_workspace {
        return Ok(());
    }
    let (data, ws) = (real(&c.gateway.data_dir), real(&c.gateway.workspace));
    if data.starts_with(&ws) {
        let place = if data == ws {
            "is the workspace itself"
        } else {
            "is inside the workspace"
        };
        return Err(ConfigError::Invalid(format!(
            "gateway.data_dir: {} {place} (gateway.workspace, {}), where the agent's tools \
             and commands could read the store and the admin token; put the two side by \
             side, like data_dir = \"data\" and workspace = \"workspace\"",
            data.display(),
            ws.display()
        )));
    }
    if let Some(folder) = STORE_FOLDERS.iter().find(|f| ws.starts_with(data.join(f))) {
        return Err(ConfigError::Invalid(format!(
            "gateway.workspace: {} is in the store's own folder {folder}/ of the data dir \
             (gateway.data_dir, {}); put it beside it, like workspace = \"workspace\"",
            ws.display(),
            data.display()
        )));
    }
    Ok(())
}

/// `p` made absolute with every link in the part that exists resolved; the part that does
/// not exist yet is taken as written (`..` in it goes up a name).
fn real(p: &Path) -> PathBuf {
    let p = std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
    let mut cur = PathBuf::new();
    for part in p.components() {
        if part == Component::CurDir {
            continue;
        }
        let next = cur.join(part);
        cur = match next.canonicalize() {
            Ok(real) => real,
            Err(_) if part == Component::ParentDir => {
                cur.pop();
                cur
            }
            Err(_) => next,
        };
    }
    cur
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_part_that_exists_is_resolved_the_rest_taken_as_written() {
        let dir = tempfile::tempdir().unwrap();
        let top = dir.path().canonicalize().unwrap();
        std::fs::create_dir(top.join("ws")).unwrap();
        std::os::unix::fs::symlink(top.join("ws"), top.join("link")).unwrap();
        assert_eq!(real(&top.join("link/data")), top.join("ws/data"));
        assert_eq!(real(&top.join("new/../ws/./x/../y")), top.join("ws/y"));
        assert_eq!(real(&top.join("ws/..")), top);
    }
}
