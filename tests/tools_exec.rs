//! `exec` through the tool registry (the one place arguments are checked and failures become
//! results): the gateway's secrets stay out of reach, output is capped, a timeout ends
//! everything the command started, and wrapped destructive commands are refused.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use switchboard::agent::tool::{ToolContext, ToolError};
use switchboard::agent::tools::{Registry, exec::Exec};

fn ctx(dir: &std::path::Path) -> ToolContext {
    ToolContext {
        sender_is_owner: true,
        ..ToolContext::new("test:1".parse().unwrap(), dir)
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
    let reg = Registry::new(vec![Arc::new(Exec::default())]);
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

/// A command holds no capability, run by root too (`CAP_DAC_OVERRIDE` would read any file),
/// none can be regained at exec, and from Landlock ABI 6 it cannot signal the gateway
/// (`kill $PPID`).
#[cfg(target_os = "linux")]
#[tokio::test]
async fn commands_hold_no_capability_and_cannot_signal_the_gateway() {
    use switchboard::agent::tools::exec::sandbox::abi;
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
    let held = "0000000000000000";
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

/// No disk is readable or writable through `/dev` (root's commands could read the data dir
/// and `/root/.ssh` off the raw blocks, and write them); the devices commands use still work.
#[cfg(target_os = "linux")]
#[tokio::test]
async fn disks_are_out_of_reach_and_the_usual_devices_work() {
    use std::os::unix::fs::FileTypeExt;
    let dir = tempfile::tempdir().unwrap();
    let out = exec(
        dir.path(),
        json!({"command": "head -c 4 /dev/urandom | wc -c; head -c 3 /dev/zero | wc -c; \
                           echo gone > /dev/null && echo null; echo err > /dev/stderr; \
                           ls /dev | grep -qx null && echo listed"}),
    )
    .await
    .unwrap();
    assert_eq!(
        out,
        "exit code: 0\nstdout:\n4\n3\nnull\nlisted\n\nstderr:\nerr\n"
    );
    // This machine's disks (`/dev/vda`, `/dev/sda`, `/dev/loop0`…), named in a file: the
    // deny list refuses writes to such names, the sandbox is what is tested here.
    let disks: Vec<String> = std::fs::read_dir("/dev")
        .unwrap()
        .flatten()
        .filter(|e| std::fs::metadata(e.path()).is_ok_and(|m| m.file_type().is_block_device()))
        .map(|e| e.path().display().to_string())
        .take(8)
        .collect();
    if disks.is_empty() {
        eprintln!("no block device under /dev here: only the usual devices were checked");
        return;
    }
    std::fs::write(dir.path().join("disks"), disks.join("\n")).unwrap();
    // Opened for writing, nothing written (`: >>`): harmless should the sandbox fail.
    let out = exec(
        dir.path(),
        json!({"command": "for d in $(cat disks); do \
                             head -c 512 \"$d\" > /dev/null 2>&1 && echo \"read $d\"; \
                             ( : >> \"$d\" ) 2>/dev/null && echo \"opened $d\"; \
                           done; echo checked"}),
    )
    .await
    .unwrap();
    if switchboard::agent::tools::exec::sandbox::abi() >= 1 {
        assert_eq!(out, "exit code: 0\nstdout:\nchecked\n", "{disks:?}");
    } else {
        eprintln!("no Landlock on this kernel: disks are not confined ({out})");
    }
}

/// What root alone may read is refused to a root gateway's commands: a file another user
/// keeps to themselves (`CAP_DAC_OVERRIDE` read it), and the files of `/etc` others may not
/// read, such as `/etc/shadow` (0640 root:shadow: root reads it as its owner, capability or
/// not) or a service's 0600 environment file.
#[cfg(target_os = "linux")]
#[tokio::test]
async fn files_only_root_may_read_are_refused_to_its_commands() {
    use std::os::unix::fs::PermissionsExt;
    if !rustix::process::geteuid().is_root() {
        eprintln!("not root: these files are out of this user's reach anyway");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let workspace = dir.path().join("workspace");
    std::fs::create_dir(&workspace).unwrap();
    // In /var/tmp, where commands may read and write; owned by nobody, for their eyes only.
    let scratch = tempfile::tempdir_in("/var/tmp").unwrap();
    let theirs = scratch.path().join("theirs.txt");
    std::fs::write(&theirs, "nobody-secret\n").unwrap();
    std::fs::set_permissions(&theirs, PermissionsExt::from_mode(0o600)).unwrap();
    std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).unwrap();
    // A root-owned 0600 file in /etc, removed when the test ends.
    struct Remove(std::path::PathBuf);
    impl Drop for Remove {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }
    let etc = Remove(format!("/etc/switchboard-test-{}.env", std::process::id()).into());
    std::fs::write(&etc.0, "ROOT_ONLY=etc-secret\n").unwrap();
    std::fs::set_permissions(&etc.0, PermissionsExt::from_mode(0o600)).unwrap();
    let shadow = std::path::Path::new("/etc/shadow").exists();
    let command = format!(
        "cat {} {} {} 2>&1; head -c 10 /etc/passwd; echo",
        theirs.display(),
        etc.0.display(),
        if shadow { "/etc/shadow" } else { "" }
    );
    let out = exec(&workspace, json!({ "command": command }))
        .await
        .unwrap();
    assert!(!out.contains("nobody-secret"), "{out}");
    // The system's files others may read stay readable.
    assert!(out.contains("root:x:0:0"), "{out}");
    if switchboard::agent::tools::exec::sandbox::abi() >= 1 {
        assert!(!out.contains("etc-secret"), "{out}");
        assert!(!out.contains("root:$") && !out.contains("root:*:"), "{out}");
        let refused = 2 + usize::from(shadow);
        assert_eq!(out.matches("Permission denied").count(), refused, "{out}");
    } else {
        eprintln!("no Landlock on this kernel: root reads its own files in /etc");
    }
}

/// A root gateway whose workspace another user owns runs its commands as that user: they
/// can write there without `CAP_DAC_OVERRIDE`.
#[cfg(target_os = "linux")]
#[tokio::test]
async fn a_root_gateway_runs_commands_as_the_owner_of_its_workspace() {
    use std::os::unix::fs::MetadataExt;
    if !rustix::process::geteuid().is_root() {
        eprintln!("not root: commands run as the gateway's own user");
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), PermissionsExt::from_mode(0o755)).unwrap();
    let workspace = dir.path().join("workspace");
    std::fs::create_dir(&workspace).unwrap();
    std::os::unix::fs::chown(&workspace, Some(65534), Some(65534)).unwrap();
    let out = exec(
        &workspace,
        json!({"command": "id -u; id -G; echo x > made"}),
    )
    .await
    .unwrap();
    assert_eq!(out, "exit code: 0\nstdout:\n65534\n65534\n");
    assert_eq!(
        std::fs::metadata(workspace.join("made")).unwrap().uid(),
        65534
    );
}

/// Nothing a command starts outlives the call: not what it leaves in the background, nor
/// what daemonizes (a double fork, `nohup`) or leaves its process group and session
/// (`setsid`). Gone, and reaped, when the call returns; and one that keeps the output open
/// does not hold the call up.
#[cfg(target_os = "linux")]
#[tokio::test]
async fn nothing_a_command_starts_outlives_the_call() {
    let dir = tempfile::tempdir().unwrap();
    let command = "sleep 300 >/dev/null 2>&1 & echo $! > p1; \
                   (sleep 300 >/dev/null 2>&1 & echo $! > p2); \
                   nohup sh -c 'echo $$ > p3; while :; do sleep 1; done' >/dev/null 2>&1 & \
                   setsid sh -c 'echo $$ > p4; exec sleep 300' >/dev/null 2>&1 & \
                   setsid -f sh -c 'echo $$ > p5; exec sleep 300' >/dev/null 2>&1; \
                   while [ ! -s p3 ] || [ ! -s p4 ] || [ ! -s p5 ]; do sleep 0.05; done; echo started";
    let out = exec(dir.path(), json!({ "command": command }))
        .await
        .unwrap();
    assert!(out.contains("started"), "{out}");
    let gone = |p: &str| {
        let pid = std::fs::read_to_string(dir.path().join(p)).unwrap();
        let pid = pid.trim();
        assert!(
            !std::path::Path::new(&format!("/proc/{pid}")).exists(),
            "{p} ({pid}) outlived the call"
        );
    };
    for p in ["p1", "p2", "p3", "p4", "p5"] {
        gone(p);
    }
    let started = Instant::now();
    let out = exec(dir.path(), json!({"command": "sleep 300 & echo $! > p6"}))
        .await
        .unwrap();
    assert_eq!(out, "exit code: 0");
    assert!(started.elapsed() < Duration::from_secs(5));
    gone("p6");
}

/// Commands run within limits: processes (relative to what the user runs), file size,
/// core dumps; and the out-of-memory killer picks them before the gateway.
#[cfg(target_os = "linux")]
#[tokio::test]
async fn commands_run_within_resource_limits() {
    use switchboard::agent::tools::exec::limits::{EXTRA_TASKS, MAX_FILE_BYTES};
    let dir = tempfile::tempdir().unwrap();
    let out = exec(
        dir.path(),
        json!({"command": "cat /proc/self/limits /proc/self/oom_score_adj"}),
    )
    .await
    .unwrap();
    let limit = |name: &str| -> (String, String) {
        let line = out.lines().find(|l| l.starts_with(name)).unwrap();
        let mut v = line[name.len()..].split_whitespace();
        (v.next().unwrap().into(), v.next().unwrap().into())
    };
    let file = MAX_FILE_BYTES.to_string();
    assert_eq!(limit("Max file size"), (file.clone(), file), "{out}");
    assert_eq!(
        limit("Max core file size"),
        ("0".into(), "0".into()),
        "{out}"
    );
    let (soft, hard) = limit("Max processes");
    assert_eq!(soft, hard, "{out}");
    let tasks: u64 = soft.parse().unwrap();
    assert!(tasks > EXTRA_TASKS && tasks < 100_000, "{out}");
    assert_ne!(limit("Max data size").0, "unlimited", "{out}");
    assert!(out.trim_end().ends_with("\n1000"), "{out}");
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
    let args = json!({
        "command": "setsid sh -c 'echo $$ > pid; exec sleep 60' & \
                    while [ ! -s pid ]; do sleep 0.05; done; sh -c 'sleep 60' & wait",
        "timeout_secs": 1
    });
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
            let reg = Registry::new(vec![Arc::new(Exec::default())]);
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

/// A data dir in a system folder commands may read (`/opt/switchboard/data`; here
/// `/var/tmp`, which tests can write) is out of their reach all the same: that folder is
/// left out of the sandbox, while the others stay.
#[tokio::test]
async fn a_data_dir_inside_a_system_folder_is_out_of_the_commands_reach() {
    let dir = tempfile::tempdir().unwrap();
    let data = tempfile::tempdir_in("/var/tmp").unwrap();
    std::fs::write(data.path().join("admin.token"), "data-dir-secret\n").unwrap();
    let command = format!(
        "cat {}/admin.token 2>&1; head -c 10 /etc/passwd; echo",
        data.path().display()
    );
    let reg = Registry::new(vec![Arc::new(Exec::new(data.path()))]);
    let args = json!({ "command": command }).to_string();
    let out = reg
        .call("exec", &args, &ctx(dir.path()), Duration::from_secs(10))
        .await
        .unwrap();
    assert!(out.contains("root:x:0:0"), "{out}");
    if switchboard::agent::tools::exec::sandbox::abi() >= 1 {
        assert!(!out.contains("data-dir-secret"), "{out}");
    } else {
        eprintln!("no Landlock on this kernel: the data dir is not confined ({out})");
    }
}
