//! File tools confined to the workspace: `read_file`, `write_file`, `edit_file`, `list_dir`.

use std::os::fd::AsRawFd;
use std::path::Path;

use async_trait::async_trait;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::member_files::{self, Use};
use super::paths::{Access, display, make_parents, open, resolve};
use crate::agent::tool::{Tool, ToolContext, ToolError};

/// Largest file `read_file` returns whole, in bytes.
const MAX_READ: u64 = 256 * 1024;
/// Largest file `edit_file` loads, in bytes.
const MAX_EDIT: u64 = 4 * 1024 * 1024;
/// Most entries `list_dir` shows.
const MAX_ENTRIES: usize = 500;

fn arg<'a>(args: &'a Value, name: &str) -> &'a str {
    args[name].as_str().unwrap_or_default()
}

fn io_err(path: &str, e: std::io::Error) -> ToolError {
    ToolError::Failed(format!("{path}: {e}"))
}

/// Refuse what is not a regular file before opening it: opening a FIFO blocks until a
/// writer comes (a stuck thread, even after the call's timeout), and a device such as
/// `/dev/zero` reports no size and never ends.
fn regular(path: &str, meta: &std::fs::Metadata) -> Result<(), ToolError> {
    if meta.is_dir() {
        Err(ToolError::Failed(format!(
            "{path} is a folder; use list_dir"
        )))
    } else if !meta.is_file() {
        Err(ToolError::Failed(format!("{path} is not a regular file")))
    } else {
        Ok(())
    }
}

/// The bytes of the regular file at `real`, when it has at most `limit` of them.
async fn read_limited(
    ctx: &ToolContext,
    path: &str,
    real: &Path,
    limit: u64,
) -> Result<Vec<u8>, ToolError> {
    let meta = tokio::fs::metadata(real)
        .await
        .map_err(|e| io_err(path, e))?;
    regular(path, &meta)?;
    let too_big = |len: u64| {
        ToolError::Failed(format!(
            "{path} is {len} bytes; the limit is {limit} (read parts with exec: head, tail, sed -n)"
        ))
    };
    if meta.len() > limit {
        return Err(too_big(meta.len()));
    }
    let file = tokio::fs::File::from_std(open(ctx, path, real, Access::Read)?);
    // What was opened may not be what was looked at (swapped meanwhile).
    regular(path, &file.metadata().await.map_err(|e| io_err(path, e))?)?;
    // It may have grown since (a log being written): never read past the limit.
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    file.take(limit + 1)
        .read_to_end(&mut bytes)
        .await
        .map_err(|e| io_err(path, e))?;
    if bytes.len() as u64 > limit {
        return Err(too_big(bytes.len() as u64));
    }
    Ok(bytes)
}

/// Replace the contents of the file at `real` (created when missing) with `content`.
async fn write(ctx: &ToolContext, path: &str, real: &Path, content: &str) -> Result<(), ToolError> {
    let mut file = tokio::fs::File::from_std(open(ctx, path, real, Access::Write)?);
    regular(path, &file.metadata().await.map_err(|e| io_err(path, e))?)?;
    file.write_all(content.as_bytes())
        .await
        .map_err(|e| io_err(path, e))?;
    file.flush().await.map_err(|e| io_err(path, e))
}

/// `read_file`: a text file of the workspace.
pub struct ReadFile;

#[async_trait]
impl Tool for ReadFile {
    fn name(&self) -> &'static str {
        "read_file"
    }
    fn description(&self) -> &'static str {
        "Read a text file from the workspace."
    }
    fn schema(&self) -> Value {
        json!({"type": "object", "required": ["path"],
               "properties": {"path": {"type": "string", "description": "Path relative to the workspace", "minLength": 1}}})
    }
    fn read_only(&self) -> bool {
        true
    }
    async fn call(&self, args: Value, ctx: &ToolContext) -> Result<String, ToolError> {
        let path = arg(&args, "path");
        let real = resolve(ctx, path)?;
        member_files::check(ctx, path, &real, Use::Read)?;
        let bytes = read_limited(ctx, path, &real, MAX_READ).await?;
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }
}

/// `write_file`: create or replace a file, creating parent folders.
pub struct WriteFile;

#[async_trait]
impl Tool for WriteFile {
    fn name(&self) -> &'static str {
        "write_file"
    }
    fn description(&self) -> &'static str {
        "Create or overwrite a file in the workspace (parent folders are created)."
    }
    fn schema(&self) -> Value {
        json!({"type": "object", "required": ["path", "content"],
               "properties": {"path": {"type": "string", "minLength": 1}, "content": {"type": "string"}}})
    }
    async fn call(&self, args: Value, ctx: &ToolContext) -> Result<String, ToolError> {
        let path = arg(&args, "path");
        let content = arg(&args, "content");
        let real = resolve(ctx, path)?;
        member_files::check(ctx, path, &real, Use::Write)?;
        make_parents(ctx, path, &real)?;
        // Re-check after creating folders: a folder may have been a symlink.
        let real = resolve(ctx, path)?;
        if let Ok(meta) = tokio::fs::metadata(&real).await {
            regular(path, &meta)?;
        }
        write(ctx, path, &real, content).await?;
        Ok(format!(
            "wrote {} bytes to {}",
            content.len(),
            display(ctx, &real)
        ))
    }
}

/// `edit_file`: replace one exact occurrence of a text.
pub struct EditFile;

#[async_trait]
impl Tool for EditFile {
    fn name(&self) -> &'static str {
        "edit_file"
    }
    fn description(&self) -> &'static str {
        "Replace old_text with new_text in a workspace file; old_text must occur exactly once."
    }
    fn schema(&self) -> Value {
        json!({"type": "object", "required": ["path", "old_text", "new_text"],
               "properties": {"path": {"type": "string", "minLength": 1},
                              "old_text": {"type": "string", "minLength": 1},
                              "new_text": {"type": "string"}}})
    }
    async fn call(&self, args: Value, ctx: &ToolContext) -> Result<String, ToolError> {
        let path = arg(&args, "path");
        let (old, new) = (arg(&args, "old_text"), arg(&args, "new_text"));
        let real = resolve(ctx, path)?;
        member_files::check(ctx, path, &real, Use::Write)?;
        let text = String::from_utf8(read_limited(ctx, path, &real, MAX_EDIT).await?)
            .map_err(|_| ToolError::Failed(format!("{path} is not UTF-8 text")))?;
        // Overlapping matches count too: `aa` occurs twice in `aaa`.
        let occurrences = text
            .char_indices()
            .filter(|(i, _)| text[*i..].starts_with(old))
            .count();
        match occurrences {
            0 => Err(ToolError::Failed(format!("old_text not found in {path}"))),
            1 => {
                let updated = text.replacen(old, new, 1);
                write(ctx, path, &real, &updated).await?;
                Ok(format!("edited {path}"))
            }
            n => Err(ToolError::Failed(format!(
                "old_text occurs {n} times in {path}; include more context so it matches once"
            ))),
        }
    }
}

/// `list_dir`: the entries of a workspace folder.
pub struct ListDir;

#[async_trait]
impl Tool for ListDir {
    fn name(&self) -> &'static str {
        "list_dir"
    }
    fn description(&self) -> &'static str {
        "List a workspace folder (folders end with /). Use \".\" for the workspace itself."
    }
    fn schema(&self) -> Value {
        json!({"type": "object", "required": ["path"], "properties": {"path": {"type": "string"}}})
    }
    fn read_only(&self) -> bool {
        true
    }
    async fn call(&self, args: Value, ctx: &ToolContext) -> Result<String, ToolError> {
        let path = match arg(&args, "path") {
            "" => ".",
            p => p,
        };
        let real = resolve(ctx, path)?;
        member_files::check(ctx, path, &real, Use::List)?;
        // Listed through the folder opened (see `paths::open`), where /proc shows it.
        let dir = open(ctx, path, &real, Access::Folder)?;
        let opened = Path::new("/proc/self/fd").join(dir.as_raw_fd().to_string());
        let listed = if opened.is_dir() { opened } else { real };
        let mut rd = tokio::fs::read_dir(&listed)
            .await
            .map_err(|e| io_err(path, e))?;
        let mut entries = Vec::new();
        while let Some(e) = rd.next_entry().await.map_err(|e| io_err(path, e))? {
            let name = e.file_name().to_string_lossy().into_owned();
            let meta = e.metadata().await.ok();
            entries.push(match meta {
                Some(m) if m.is_dir() => format!("{name}/"),
                Some(m) => format!("{name} ({} bytes)", m.len()),
                None => name,
            });
        }
        entries.sort();
        let total = entries.len();
        entries.truncate(MAX_ENTRIES);
        if entries.is_empty() {
            return Ok(format!("{path} is empty"));
        }
        let mut out = entries.join("\n");
        if total > MAX_ENTRIES {
            out.push_str(&format!("\n[… {total} entries in all]"));
        }
        Ok(out)
    }
}
