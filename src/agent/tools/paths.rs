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
