//! The file tools through the tool registry: confinement by real path, and reads that are
//! bounded (no FIFO that blocks forever, no device that never ends, no gigabyte loaded).

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use switchboard::agent::tool::{ToolContext, ToolError};
use switchboard::agent::tools::Registry;
use switchboard::agent::tools::files::{EditFile, ListDir, ReadFile, WriteFile};
use switchboard::agent::tools::memory::Memory;

struct Ws {
    /// Holds `workspace/` and, beside it, files the tools must not reach.
    dir: tempfile::TempDir,
    restrict: bool,
}

impl Ws {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("workspace")).unwrap();
        std::fs::write(dir.path().join("secret.txt"), "top secret").unwrap();
        Ws {
            dir,
            restrict: true,
        }
    }

    fn root(&self) -> std::path::PathBuf {
        self.dir.path().join("workspace")
    }

    async fn call(&self, tool: &str, args: Value) -> Result<String, ToolError> {
        let reg = Registry::new(vec![
            Arc::new(ReadFile),
            Arc::new(WriteFile),
            Arc::new(EditFile),
            Arc::new(ListDir),
            Arc::new(Memory::default()),
        ]);
        let ctx = ToolContext {
            sender_is_owner: true,
            restrict_to_workspace: self.restrict,
            ..ToolContext::new("test:1".parse().unwrap(), self.root())
        };
        reg.call(tool, &args.to_string(), &ctx, Duration::from_secs(5))
            .await
    }
}

fn mkfifo(path: &Path) {
    let ok = std::process::Command::new("mkfifo")
        .arg(path)
        .status()
        .unwrap()
        .success();
    assert!(ok, "mkfifo {}", path.display());
}

/// Open one end of a FIFO on a thread of its own, so a tool thread stuck opening the other
/// end (the defect) is released and the runtime can shut down; when nothing is stuck the
/// two releasers open each other.
fn release(fifo: &Path, write: bool) {
    let fifo = fifo.to_path_buf();
    std::thread::spawn(move || {
        let _ = std::fs::OpenOptions::new()
            .read(!write)
            .write(write)
            .open(fifo);
    });
}

fn refused_outside(r: &Result<String, ToolError>) -> bool {
    matches!(r, Err(ToolError::Refused(m)) if m.contains("outside the workspace"))
}

#[tokio::test]
async fn special_files_are_refused_before_they_are_opened() {
    let ws = Ws::new();
    let fifo = ws.root().join("pipe");
    mkfifo(&fifo);
    // Each would block in open() until the registry's timeout, leaving a thread stuck.
    let mut results = Vec::new();
    for (tool, args) in [
        ("read_file", json!({"path": "pipe"})),
        (
            "edit_file",
            json!({"path": "pipe", "old_text": "a", "new_text": "b"}),
        ),
        ("write_file", json!({"path": "pipe", "content": "x"})),
    ] {
        results.push((tool, ws.call(tool, args).await));
    }
    release(&fifo, true);
    release(&fifo, false);
    for (tool, r) in results {
        assert_eq!(
            r,
            Err(ToolError::Failed("pipe is not a regular file".into())),
            "{tool}"
        );
    }
}

#[tokio::test]
async fn a_device_that_never_ends_is_not_read_without_confinement() {
    let mut ws = Ws::new();
    ws.restrict = false;
    let r = ws.call("read_file", json!({"path": "/dev/zero"})).await;
    assert_eq!(
        r,
        Err(ToolError::Failed("/dev/zero is not a regular file".into()))
    );
}

#[tokio::test]
async fn huge_files_are_not_loaded() {
    let ws = Ws::new();
    // Sparse: 64 MiB long, nothing on disk.
    let big = std::fs::File::create(ws.root().join("big.log")).unwrap();
    big.set_len(64 << 20).unwrap();
    for (tool, args) in [
        ("read_file", json!({"path": "big.log"})),
        (
            "edit_file",
            json!({"path": "big.log", "old_text": "a", "new_text": "b"}),
        ),
    ] {
        let r = ws.call(tool, args).await;
        assert!(
            matches!(&r, Err(ToolError::Failed(m)) if m.starts_with("big.log is 67108864 bytes; the limit is")),
            "{tool}: {r:?}"
        );
    }
}

#[tokio::test]
async fn escapes_by_dots_absolute_paths_and_symlinked_folders_are_refused() {
    let ws = Ws::new();
    let outside = ws.dir.path().join("outside");
    std::fs::create_dir(&outside).unwrap();
    std::fs::write(outside.join("notes.md"), "old").unwrap();
    std::os::unix::fs::symlink(&outside, ws.root().join("linked")).unwrap();
    std::fs::create_dir(ws.root().join("sub")).unwrap();
    let secret = ws.dir.path().join("secret.txt");
    for (tool, args) in [
        ("read_file", json!({"path": "../secret.txt"})),
        ("read_file", json!({"path": "sub/../../secret.txt"})),
        ("read_file", json!({"path": "nope/../../secret.txt"})),
        ("read_file", json!({"path": secret.to_str().unwrap()})),
        ("read_file", json!({"path": "linked/notes.md"})),
        ("list_dir", json!({"path": "linked"})),
        ("list_dir", json!({"path": "/"})),
        (
            "edit_file",
            json!({"path": "linked/notes.md", "old_text": "old", "new_text": "new"}),
        ),
        (
            "write_file",
            json!({"path": "linked/deeper/new.txt", "content": "x"}),
        ),
    ] {
        let r = ws.call(tool, args.clone()).await;
        assert!(refused_outside(&r), "{tool} {args}: {r:?}");
    }
    assert_eq!(
        std::fs::read_to_string(outside.join("notes.md")).unwrap(),
        "old"
    );
    assert!(!outside.join("deeper").exists());
    // The workspace's own absolute path is inside.
    let inside = ws.root().join("sub/ok.txt");
    let r = ws
        .call(
            "write_file",
            json!({"path": inside.to_str().unwrap(), "content": "fine"}),
        )
        .await;
    assert_eq!(r, Ok("wrote 4 bytes to sub/ok.txt".into()));
}

#[tokio::test]
async fn odd_paths_are_errors_not_panics() {
    let ws = Ws::new();
    let long = "a/".repeat(3000) + "x";
    let long_name = "n".repeat(300);
    for (tool, args) in [
        ("read_file", json!({"path": "bad\u{0}name"})),
        (
            "write_file",
            json!({"path": "bad\u{0}name", "content": "x"}),
        ),
        ("read_file", json!({"path": long})),
        ("write_file", json!({"path": long, "content": "x"})),
        ("read_file", json!({"path": long_name})),
        ("write_file", json!({"path": long_name, "content": "x"})),
        ("list_dir", json!({"path": "no/such/folder"})),
        ("read_file", json!({"path": "."})),
    ] {
        let r = ws.call(tool, args.clone()).await;
        assert!(matches!(r, Err(ToolError::Failed(_))), "{tool}: {r:?}");
    }
}

#[tokio::test]
async fn files_that_are_not_utf8_are_read_lossily_and_not_edited() {
    let ws = Ws::new();
    std::fs::write(ws.root().join("bin.dat"), b"ok \xff\xfe end").unwrap();
    let r = ws.call("read_file", json!({"path": "bin.dat"})).await;
    assert_eq!(r, Ok("ok \u{fffd}\u{fffd} end".into()));
    let r = ws
        .call(
            "edit_file",
            json!({"path": "bin.dat", "old_text": "ok", "new_text": "no"}),
        )
        .await;
    assert!(matches!(r, Err(ToolError::Failed(_))), "{r:?}");
    assert_eq!(
        std::fs::read(ws.root().join("bin.dat")).unwrap(),
        b"ok \xff\xfe end"
    );
}

#[tokio::test]
async fn memory_follows_no_link_out_of_the_workspace() {
    let ws = Ws::new();
    // As `exec` could make it: MEMORY.md is a link to a file beside the workspace.
    std::os::unix::fs::symlink(
        ws.dir.path().join("secret.txt"),
        ws.root().join("MEMORY.md"),
    )
    .unwrap();
    let recall = ws
        .call("memory", json!({"action": "recall", "query": "secret"}))
        .await
        .unwrap();
    assert!(!recall.contains("top secret"), "{recall}");
    let remember = ws
        .call("memory", json!({"action": "remember", "text": "likes tea"}))
        .await;
    assert!(remember.is_err(), "{remember:?}");
    assert_eq!(
        std::fs::read_to_string(ws.dir.path().join("secret.txt")).unwrap(),
        "top secret"
    );
    // A plain MEMORY.md works as ever.
    std::fs::remove_file(ws.root().join("MEMORY.md")).unwrap();
    ws.call("memory", json!({"action": "remember", "text": "likes tea"}))
        .await
        .unwrap();
    let recall = ws
        .call("memory", json!({"action": "recall", "query": "tea"}))
        .await
        .unwrap();
    assert!(recall.starts_with("- likes tea"), "{recall}");
}

#[tokio::test]
async fn remember_starts_a_new_line_after_a_file_that_does_not_end_one() {
    let ws = Ws::new();
    let memory = ws.root().join("MEMORY.md");
    std::fs::write(&memory, "# Memory\n\n- prefers short answers").unwrap();
    ws.call("memory", json!({"action": "remember", "text": "likes tea"}))
        .await
        .unwrap();
    ws.call("memory", json!({"action": "remember", "text": "has a cat"}))
        .await
        .unwrap();
    let text = std::fs::read_to_string(&memory).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 5, "{text}");
    assert_eq!(lines[2], "- prefers short answers");
    assert!(lines[3].starts_with("- likes tea ("), "{text}");
    assert!(lines[4].starts_with("- has a cat ("), "{text}");
    assert!(text.ends_with(")\n"), "{text}");
}
