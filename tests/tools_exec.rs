//! `exec` through the tool registry (the one place arguments are checked and failures become
//! results): the gateway's secrets stay out of reach, output is capped, a timeout ends
//! everything the command started, and wrapped destructive commands are refused.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use switchboard::agent::tool::{ToolContext, ToolError};
use switchboard::agent::tools::{Registry, exec::Exec};
use tokio_util::sync::CancellationToken;

fn ctx(dir: &std::path::Path) -> ToolContext {
    ToolContext {
        key: "test:1".parse().unwrap(),
        sender_is_owner: true,
        workspace: dir.to_path_buf(),
        restrict_to_workspace: true,
        cancel: CancellationToken::new(),
        set_by: Vec::new(),
    }
}

async fn exec(dir: &std::path::Path, args: serde_json::Value) -> Result<String, ToolError> {
    exec_within(dir, args, Duration::from_secs(10)).await
}

/// `exec` with `agent.tool_timeout` = `limit`.
async fn exec_within(
    dir: &std::path::Path,
    args: serde_json::Value,
    limit: Duration,
) -> Result<String, ToolError> {
    let reg = Registry::new(vec![Arc::new(Exec)]);
    reg.call("exec", &args.to_string(), &ctx(dir), limit).await
}

/// Waits (bounded) until the process whose pid is in `pid_file` is gone or a zombie.
async fn assert_ends(pid_file: &std::path::Path) {
    let pid = std::fs::read_to_string(pid_file).unwrap();
    let stat = format!("/proc/{}/stat", pid.trim());
    // SIGKILL is delivered at once, but the zombie may take a moment to be reaped.
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::fs::read_to_string(&stat).is_ok_and(|s| !s.contains(") Z")) {
        assert!(Instant::now() < deadline, "the background sleep still runs");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn the_configured_tool_timeout_caps_the_commands_own() {
    let dir = tempfile::tempdir().unwrap();
    for args in [
        json!({"command": "sleep 60 & echo $! > pid; wait"}),
        json!({"command": "sleep 60 & echo $! > pid; wait", "timeout_secs": 300}),
    ] {
        // Each round's own pid: a round that never wrote one must not check the last one's.
        let _ = std::fs::remove_file(dir.path().join("pid"));
        let started = Instant::now();
        let r = exec_within(dir.path(), args, Duration::from_secs(1)).await;
        assert_eq!(r, Err(ToolError::Failed("exec timed out after 1s".into())));
        assert!(started.elapsed() < Duration::from_secs(5));
        assert_ends(&dir.path().join("pid")).await;
    }
}

#[cfg(target_os = "linux")]
#[tokio::test]
async fn the_gateway_environment_cannot_be_read_through_proc() {
    let dir = tempfile::tempdir().unwrap();
    // cargo sets CARGO_MANIFEST_DIR for the test process: a stand-in for a gateway secret.
    let secret = std::env::var("CARGO_MANIFEST_DIR").unwrap();
    // `env*`, not `environ`: the deny list names the usual spelling, the protection does
    // not depend on it.
    let command = "cat /proc/$PPID/env* | tr '\\0' '\\n'";
    let out = exec(dir.path(), json!({ "command": command }))
        .await
        .unwrap();
    // What protects it: the gateway's process is not dumpable, so its /proc files need
    // CAP_SYS_PTRACE, which a command never has (as root, it starts without capabilities).
    assert!(
        !out.contains(&secret),
        "the command read the gateway's environment: {out}"
    );
    assert_eq!(
        rustix::process::dumpable_behavior().unwrap(),
        rustix::process::DumpableBehavior::NotDumpable
    );
    let refused = exec(dir.path(), json!({"command": "cat /proc/$PPID/environ"})).await;
    assert!(
        matches!(&refused, Err(ToolError::Refused(r)) if r.contains("environment")),
        "{refused:?}"
    );
}

/// A command holds no capability (a root gateway's keep only reaching files another user
/// owns), none can be regained at exec, and from Landlock ABI 6 it cannot signal the
/// gateway (`kill $PPID`).
#[cfg(target_os = "linux")]
#[tokio::test]
async fn commands_hold_no_capability_and_cannot_signal_the_gateway() {
    use switchboard::agent::tools::exec::sandbox::{ROOT_KEEPS, abi};
    let dir = tempfile::tempdir().unwrap();
    let out = exec(
        dir.path(),
        json!({"command": "grep -E '^(Cap(Inh|Prm|Eff|Bnd|Amb)|NoNewPrivs)' /proc/self/status"}),
    )
    .await
    .unwrap();
    let field = |name: &str| {
        let line = out.lines().find(|l| l.starts_with(name));
        let value = line.and_then(|l| l.split_whitespace().nth(1));
        value
            .unwrap_or_else(|| panic!("no {name} in {out}"))
            .to_string()
    };
    let root = rustix::process::geteuid().is_root();
    let held = format!("{:016x}", if root { ROOT_KEEPS } else { 0 });
    for name in ["CapPrm:", "CapEff:"] {
        assert_eq!(field(name), held, "{out}");
    }
    assert_eq!(field("CapAmb:"), "0000000000000000", "{out}");
    assert_eq!(field("NoNewPrivs:"), "1", "{out}");
    // Cutting the bounding set takes CAP_SETPCAP (a hardened root may lack it).
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let ours = status.lines().find(|l| l.starts_with("CapEff:")).unwrap();
    let setpcap =
        u64::from_str_radix(ours.split_whitespace().nth(1).unwrap(), 16).unwrap() & (1 << 8);
    if root && setpcap != 0 {
        assert_eq!(field("CapBnd:"), held, "{out}");
    }
    let out = exec(
        dir.path(),
        json!({"command": "kill -0 $PPID 2>/dev/null && echo signalled || echo refused"}),
    )
    .await
    .unwrap();
    if abi() >= 6 {
        assert!(out.contains("refused"), "{out}");
    } else {
        eprintln!("Landlock ABI {} (< 6): signals are not scoped here", abi());
    }
}

/// A descriptor the gateway inherited without close-on-exec (from whatever started it) does
/// not reach the command.
#[cfg(target_os = "linux")]
#[tokio::test]
async fn descriptors_the_gateway_inherited_do_not_reach_commands() {
    use std::os::fd::AsRawFd;
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("secret");
    std::fs::write(&secret, "inherited").unwrap();
    let file = std::fs::File::open(&secret).unwrap();
    let fd = file.as_raw_fd();
    // Clear close-on-exec, as on a descriptor handed down by a parent process.
    rustix::io::fcntl_setfd(&file, rustix::io::FdFlags::empty()).unwrap();
    let out = exec(
        dir.path(),
        json!({"command": format!("cat <&{fd} 2>&1; echo; ls /proc/self/fd")}),
    )
    .await
    .unwrap();
    assert!(!out.contains("inherited"), "{out}");
    drop(file);
}

#[tokio::test]
async fn output_is_capped_and_counted() {
    let dir = tempfile::tempdir().unwrap();
    let out = exec(
        dir.path(),
        json!({"command": "head -c 1000000 /dev/zero | tr '\\0' x"}),
    )
    .await
    .unwrap();
    assert!(out.len() < 20_000, "{} bytes came back", out.len());
    assert!(
        out.contains("[… output cut: 1000000 bytes in all]"),
        "{out:.200}"
    );
}

#[tokio::test]
async fn a_timeout_ends_the_whole_process_group() {
    let dir = tempfile::tempdir().unwrap();
    let args =
        json!({"command": "sleep 60 & echo $! > pid; sh -c 'sleep 60' & wait", "timeout_secs": 1});
    let r = exec(dir.path(), args).await;
    assert_eq!(
        r,
        Err(ToolError::Failed(
            "command timed out after 1s (killed)".into()
        ))
    );
    assert_ends(&dir.path().join("pid")).await;
}

#[tokio::test]
async fn commands_run_in_the_workspace_and_wrapped_destruction_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.txt"), "x").unwrap();
    let out = exec(dir.path(), json!({"command": "pwd; rm a.txt && ls"}))
        .await
        .unwrap();
    let real = dir.path().canonicalize().unwrap();
    assert_eq!(out, format!("exit code: 0\nstdout:\n{}\n", real.display()));
    // Harmless should the deny list ever let one through: nothing here exists or runs.
    for command in [
        "bash -lc 'rm -rf /switchboard-no-such-dir'",
        "sudo -u root rm -rf /switchboard-no-such-dir",
        "if false; then reboot; fi",
        "rm -rf \\\n  $SWITCHBOARD_UNSET/switchboard-no-such-dir",
        "echo x >> /dev/sd-switchboard/none",
    ] {
        let r = exec(dir.path(), json!({ "command": command })).await;
        assert!(
            matches!(&r, Err(ToolError::Refused(m)) if m.starts_with("command not allowed: ")),
            "{command:?}: {r:?}"
        );
    }
}

#[tokio::test]
async fn commands_cannot_reach_beside_the_workspace() {
    let root = tempfile::tempdir().unwrap();
    let (workspace, data) = (root.path().join("workspace"), root.path().join("data"));
    std::fs::create_dir_all(&workspace).unwrap();
    std::fs::create_dir_all(&data).unwrap();
    std::fs::write(data.join("admin.token"), "the-admin-token\n").unwrap();
    let run = |restrict: bool, command: &str| {
        let mut c = ctx(&workspace);
        c.restrict_to_workspace = restrict;
        let args = json!({"command": command}).to_string();
        async move {
            let reg = Registry::new(vec![Arc::new(Exec)]);
            reg.call("exec", &args, &c, Duration::from_secs(10))
                .await
                .unwrap()
        }
    };
    // The workspace and the system's folders work as before.
    let out = run(
        true,
        "echo note > note.txt && cat note.txt && ls /usr/bin | head -1",
    )
    .await;
    assert!(out.starts_with("exit code: 0\nstdout:\nnote\n"), "{out}");
    let out = run(true, "cat ../data/admin.token; echo x > ../escaped.txt").await;
    if switchboard::agent::tools::exec::sandbox::abi() >= 1 {
        assert!(!out.contains("the-admin-token"), "{out}");
        assert!(out.contains("Permission denied"), "{out}");
        assert!(!root.path().join("escaped.txt").exists());
    } else {
        // No Landlock on this kernel: unconfined (the gateway's log says so).
        assert!(out.contains("the-admin-token"), "{out}");
    }
    // Without the restriction, commands reach what the gateway's user can.
    let out = run(false, "cat ../data/admin.token").await;
    assert!(out.contains("the-admin-token"), "{out}");
}

#[tokio::test]
async fn the_output_cut_never_leaves_half_a_secret() {
    const SECRET: &str = "exec-secret-ABCDEFGHIJ0123456789";
    switchboard_channel::redact::register(SECRET);
    let dir = tempfile::tempdir().unwrap();
    // The secret back to back, far past the cap: wherever the cut falls, it falls in one
    // (two offsets, so that it cannot fall between two both times).
    for offset in [1, 2] {
        let command = format!(
            "head -c {offset} /dev/zero | tr '\\0' x; yes {SECRET} | head -n 2000 | tr -d '\\n'"
        );
        let out = exec(dir.path(), json!({ "command": command }))
            .await
            .unwrap();
        assert!(out.contains("[… output cut:"), "{out:.200}");
        assert!(out.contains("[redacted]"), "{out:.200}");
        assert!(!out.contains("exec-sec"), "offset {offset}: {out}");
    }
}
