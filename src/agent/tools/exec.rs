//! `exec`: run a shell command in the workspace, with a timeout, an output cap, an
//! environment without the gateway's secrets, a deny list for destructive commands,
//! resource limits, nothing left running after the call, and (with
//! `agent.restrict_to_workspace`) a Landlock sandbox without capabilities.
//!
//! - [`shell`]: just enough shell reading to see the commands of a line.
//! - [`deny`]: the deny list.
//! - [`sandbox`]: the Landlock rules and the capabilities given up.
//! - [`limits`]: processes, file size, memory.
//! - [`supervise`]: the process that ends all a command started.

mod deny;
#[cfg(target_os = "linux")]
pub mod limits;
#[cfg(target_os = "linux")]
pub mod sandbox;
mod shell;
#[cfg(target_os = "linux")]
mod supervise;

use std::process::Stdio;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Value, json};
use tokio::io::AsyncReadExt;

pub use deny::denied;

use crate::agent::tool::{Tool, ToolContext, ToolError};

/// Most output returned, in bytes (stdout and stderr each): both, with their notes, fit
/// in one tool result, so the registry's cut never hides how much output there was.
const OUTPUT_CAP: usize = (super::MAX_RESULT_CHARS - 1_000) / 2;
/// Default and longest command timeouts.
const DEFAULT_TIMEOUT: u64 = 30;
const MAX_TIMEOUT: u64 = 600;
/// Environment variables passed to commands; everything else (tokens, keys) is withheld.
const ENV_KEEP: [&str; 8] = [
    "PATH", "HOME", "USER", "LANG", "LC_ALL", "TZ", "TMPDIR", "TERM",
];

/// `exec`: a shell command in the workspace.
#[derive(Default)]
pub struct Exec {
    /// Kept out of the commands' reach with the system folder that holds it, if one does.
    data_dir: Option<std::path::PathBuf>,
}

impl Exec {
    /// The tool of a gateway whose data dir is `data_dir`.
    pub fn new(data_dir: &std::path::Path) -> Self {
        Self {
            data_dir: Some(data_dir.to_path_buf()),
        }
    }
}

/// Make the gateway's own process unreadable to the commands it starts. They run as the
/// same user, so without this `cat /proc/$PPID/environ` prints every secret the cleared
/// environment withheld (and `/proc/$PPID/mem` the keys read from it). A non-dumpable
/// process's `/proc` files belong to root and need `CAP_SYS_PTRACE`; it also writes no
/// core dump, which would hold the same secrets. `execve` resets the flag, so the
/// commands themselves are unaffected.
fn protect_gateway_process() -> Result<(), ToolError> {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    {
        use rustix::process::{DumpableBehavior, set_dumpable_behavior};
        static DONE: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();
        DONE.get_or_init(|| {
            set_dumpable_behavior(DumpableBehavior::NotDumpable).map_err(|e| e.to_string())
        })
        .clone()
        .map_err(|e| ToolError::Failed(format!("cannot shield the gateway's environment: {e}")))?;
    }
    Ok(())
}

/// The sandbox for a command in `workspace`: `None` where the kernel has none (said once
/// in the log); an error, and no command, when it exists but cannot be set up.
#[cfg(target_os = "linux")]
fn confinement(
    workspace: &std::path::Path,
    data_dir: Option<&std::path::Path>,
) -> Result<Option<std::os::fd::OwnedFd>, ToolError> {
    match sandbox::ruleset(workspace, data_dir) {
        Ok(Some(rules)) => Ok(Some(rules)),
        Ok(None) => {
            static SAID: std::sync::Once = std::sync::Once::new();
            SAID.call_once(|| {
                tracing::warn!(
                    "exec: this kernel has no Landlock, so commands are not confined to the \
                     workspace (agent.restrict_to_workspace covers the file tools only)"
                );
            });
            Ok(None)
        }
        Err(e) => Err(ToolError::Failed(format!(
            "cannot confine the command to the workspace: {e}"
        ))),
    }
}

#[cfg(not(target_os = "linux"))]
fn confinement(_: &std::path::Path, _: Option<&std::path::Path>) -> Result<Option<()>, ToolError> {
    Ok(None)
}

/// Output kept past [`OUTPUT_CAP`] until secrets are blotted out, so that the cut never
/// leaves half of one showing.
const REDACT_MARGIN: usize = 1024;

async fn read_capped(mut r: impl tokio::io::AsyncRead + Unpin) -> String {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    let mut total = 0usize;
    while let Ok(n) = r.read(&mut chunk).await {
        if n == 0 {
            break;
        }
        total += n;
        let keep = OUTPUT_CAP + REDACT_MARGIN;
        if buf.len() < keep {
            let take = n.min(keep - buf.len());
            buf.extend_from_slice(&chunk[..take]);
        }
    }
    let text = String::from_utf8_lossy(&buf);
    let cut = switchboard_channel::redact::safe_cut(&text, OUTPUT_CAP);
    let mut s = switchboard_channel::redact(&text[..cut]).into_owned();
    if total > OUTPUT_CAP {
        s.push_str(&format!("\n[… output cut: {total} bytes in all]"));
    }
    s
}

/// How long the supervisor of a call that ended early gets to end what the command
/// started, before the gateway kills the process group itself.
const SUPERVISOR_GRACE: Duration = Duration::from_secs(2);

/// Whether the supervisor exited by itself, which it does only once everything beneath it
/// is gone: its group is empty then, and its number free for the system to give another
/// process (another call's supervisor), which must not be killed in its place.
fn ended_itself(status: Option<&std::process::ExitStatus>) -> bool {
    status.is_some_and(|s| s.code().is_some())
}

/// SIGKILL to the process group `pgid`, by the system call itself: procps-ng 4.0's
/// `kill -KILL -<pgid>` was seen killing every process of the user (as if the target were
/// -1).
fn kill_group(pgid: Option<i32>) {
    if let Some(pgid) = pgid
        .filter(|p| *p > 1)
        .and_then(rustix::process::Pid::from_raw)
    {
        let _ = rustix::process::kill_process_group(pgid, rustix::process::Signal::KILL);
    }
}

/// A running command: its supervisor ([`supervise`], the child the gateway started, leader
/// of the command's process group) and the pipe whose closing asks the supervisor to end
/// everything beneath it. Dropped before the command ended (its timeout, a turn cancelled
/// mid-call by `/stop` or shutdown, the registry's time limit), it closes that pipe, and
/// kills the process group after [`SUPERVISOR_GRACE`] should the supervisor not be done
/// (stopped or killed by the command; before Landlock ABI 6 it can signal it).
struct Running {
    child: Option<tokio::process::Child>,
    control: Option<tokio::process::ChildStdin>,
    group: Option<i32>,
}

impl Running {
    /// Wait for the supervisor, which exits once the command and all it started are gone,
    /// with the command's status; then kill what may be left of the group (should the
    /// supervisor have been killed), so the output ends.
    async fn wait(&mut self) -> Option<std::process::ExitStatus> {
        let status = match self.child.as_mut() {
            Some(child) => child.wait().await.ok(),
            None => None,
        };
        let group = self.group.take();
        if !ended_itself(status.as_ref()) {
            kill_group(group);
        }
        self.control = None;
        status
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        // Closed first: the supervisor starts ending the command's processes now.
        self.control = None;
        let Some(group) = self.group.take() else {
            return;
        };
        match (tokio::runtime::Handle::try_current(), self.child.take()) {
            (Ok(runtime), Some(mut child)) => {
                runtime.spawn(async move {
                    let waited = tokio::time::timeout(SUPERVISOR_GRACE, child.wait()).await;
                    if !ended_itself(waited.ok().and_then(Result::ok).as_ref()) {
                        kill_group(Some(group));
                        let _ = child.wait().await;
                    }
                });
            }
            _ => kill_group(Some(group)),
        }
    }
}

/// The tool's name.
pub const NAME: &str = "exec";

#[async_trait]
impl Tool for Exec {
    fn name(&self) -> &'static str {
        NAME
    }
    fn description(&self) -> &'static str {
        "Run a shell command in the workspace folder and return its exit code and output. Whatever it starts ends with it (nothing keeps running in the background). Destructive commands are refused."
    }
    fn schema(&self) -> Value {
        json!({"type": "object", "required": ["command"],
               "properties": {"command": {"type": "string", "minLength": 1},
                              "timeout_secs": {"type": "integer", "minimum": 1, "maximum": MAX_TIMEOUT}}})
    }
    fn time_limit(&self, args: &Value) -> Option<Duration> {
        // Its own timeout, plus a moment to end the process group and report.
        let secs = args["timeout_secs"].as_u64().unwrap_or(DEFAULT_TIMEOUT);
        Some(Duration::from_secs(secs + 2))
    }
    async fn call(&self, args: Value, ctx: &ToolContext) -> Result<String, ToolError> {
        let command = args["command"].as_str().unwrap_or_default();
        // Not offered to a member's turn; refused all the same (see `agent::member`).
        if let Some(m) = &ctx.member {
            return Err(ToolError::Refused(format!(
                "running commands is for the owner only, not for {}",
                m.name
            )));
        }
        if let Some(reason) = denied(command) {
            return Err(ToolError::Refused(format!("command not allowed: {reason}")));
        }
        protect_gateway_process()?;
        let secs = args["timeout_secs"].as_u64().unwrap_or(DEFAULT_TIMEOUT);
        let rules = if ctx.restrict_to_workspace {
            // It reads the system's folders (every entry of `/etc`): off the runtime's threads.
            let (workspace, data_dir) = (ctx.workspace.clone(), self.data_dir.clone());
            tokio::task::spawn_blocking(move || confinement(&workspace, data_dir.as_deref()))
                .await
                .map_err(|e| ToolError::Failed(format!("cannot confine the command: {e}")))??
        } else {
            None
        };
        let mut cmd = tokio::process::Command::new("sh");
        cmd.arg("-c")
            .arg(command)
            .current_dir(&ctx.workspace)
            .env_clear()
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        // On Linux the supervisor's control pipe (the command's own stdin is /dev/null).
        cmd.stdin(if cfg!(target_os = "linux") {
            Stdio::piped()
        } else {
            Stdio::null()
        });
        for k in ENV_KEEP {
            if let Ok(v) = std::env::var(k) {
                cmd.env(k, v);
            }
        }
        #[cfg(target_os = "linux")]
        {
            let restrict = ctx.restrict_to_workspace;
            let run_as = restrict.then(|| sandbox::run_as(&ctx.workspace)).flatten();
            let uid = run_as.map_or_else(|| rustix::process::getuid().as_raw(), |r| r.uid);
            // It reads every process's `/proc` status: off the runtime's threads too.
            let limits = tokio::task::spawn_blocking(move || limits::Limits::for_user(uid))
                .await
                .map_err(|e| ToolError::Failed(format!("cannot set the command's limits: {e}")))?;
            let fd = rules.as_ref().map(std::os::fd::AsRawFd::as_raw_fd);
            #[allow(unsafe_code)]
            // SAFETY: these make only system calls, as may run between fork and exec;
            // `rules` stays open until `spawn` returns.
            unsafe {
                cmd.pre_exec(move || {
                    // First: the supervisor stays out of the sandbox and limits below.
                    supervise::split()?;
                    sandbox::close_inherited();
                    limits.apply()?;
                    if restrict {
                        if let Some(fd) = fd {
                            sandbox::restrict(fd)?;
                        }
                        sandbox::drop_capabilities(run_as)?;
                    }
                    Ok(())
                });
            }
        }
        let mut child = cmd
            .spawn()
            .map_err(|e| ToolError::Failed(format!("cannot start the shell: {e}")))?;
        drop(rules);
        let (out, err) = (child.stdout.take(), child.stderr.take());
        let mut running = Running {
            group: child.id().and_then(|p| i32::try_from(p).ok()),
            // Taken, or `wait` would close it (and so end the command) before waiting.
            control: child.stdin.take(),
            child: Some(child),
        };
        let run = async {
            tokio::join!(
                async {
                    match out {
                        Some(o) => read_capped(o).await,
                        None => String::new(),
                    }
                },
                async {
                    match err {
                        Some(e) => read_capped(e).await,
                        None => String::new(),
                    }
                },
                running.wait()
            )
        };
        // A turn cancelled meanwhile (`/stop`, shutdown) drops this call: `running` ends the
        // command then, as it does here on the timeout.
        let (stdout, stderr, status) = tokio::time::timeout(Duration::from_secs(secs), run)
            .await
            .map_err(|_| {
            ToolError::Failed(format!("command timed out after {secs}s (killed)"))
        })?;
        let code = status
            .and_then(|s| s.code())
            .map_or("killed".into(), |c| c.to_string());
        let mut text = format!("exit code: {code}");
        if !stdout.is_empty() {
            text.push_str(&format!("\nstdout:\n{stdout}"));
        }
        if !stderr.is_empty() {
            text.push_str(&format!("\nstderr:\n{stderr}"));
        }
        Ok(text)
    }
}

#[cfg(test)]
mod tests {

    use super::*;

    /// Whether `pid` is still a running (not zombie) process.
    fn alive(pid: i32) -> bool {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
            !s.rsplit(')')
                .next()
                .unwrap_or("")
                .trim_start()
                .starts_with('Z')
        })
    }

    #[tokio::test]
    async fn a_call_dropped_mid_run_ends_what_the_command_started() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = ToolContext {
            sender_is_owner: true,
            ..ToolContext::new("test:1".parse().unwrap(), dir.path())
        };
        let args = json!({"command": "sleep 60 & echo $! > pid; wait", "timeout_secs": 120});
        let pid_file = dir.path().join("pid");
        {
            let exec = Exec::default();
            let call = exec.call(args, &ctx);
            tokio::pin!(call);
            // Run the call until the command has started its child, then drop it, as a
            // cancelled turn or the registry's own timeout does.
            let started = async {
                while std::fs::read_to_string(&pid_file).map_or(true, |s| !s.ends_with('\n')) {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            };
            tokio::select! {
                _ = &mut call => panic!("the command ended on its own"),
                _ = tokio::time::timeout(Duration::from_secs(10), started) => {}
            }
        }
        let pid: i32 = std::fs::read_to_string(&pid_file)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while alive(pid) {
            assert!(
                std::time::Instant::now() < deadline,
                "sleep {pid} still runs"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}
