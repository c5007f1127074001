//! Helpers for the end-to-end tests that run the real binary against the fake platforms:
//! a config with the platform tables filled in and a fixed HTTP port, the gateway spawned
//! with platform tokens in its environment (logs to a file, so a chatty gateway never
//! blocks on a full pipe), the CLI as a second process, and small polling helpers.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::{Env, GatewayProcess};

/// Every environment variable a platform adapter reads by default; removed from the child
/// unless a test passes it, so a developer's real tokens never leak into a test.
const PLATFORM_VARS: [&str; 6] = [
    "TELEGRAM_BOT_TOKEN",
    "DISCORD_BOT_TOKEN",
    "SLACK_BOT_TOKEN",
    "SLACK_APP_TOKEN",
    "SLACK_SIGNING_SECRET",
    "SWITCHBOARD_API_TOKEN",
];

/// A loopback port that was free a moment ago (the child binds it itself).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

/// A test config: the LLM at `llm_base_url`, HTTP on a fixed free port, and `channels` —
/// TOML tables such as `[channels.telegram] …` — replacing the default "channel off" tables
/// of [`Env::new`] for the channels they name. Read the HTTP base URL with [`http_base`]
/// after spawning ([`spawn_ready`] may have to move it).
pub fn env_with(llm_base_url: &str, channels: &str) -> Env {
    let env = Env::new(llm_base_url, "");
    let port = free_port();
    let path = env.config_path();
    let mut text = std::fs::read_to_string(&path).expect("read config");
    text = text.replace("127.0.0.1:0", &format!("127.0.0.1:{port}"));
    for name in ["telegram", "discord", "slack"] {
        let table = format!("[channels.{name}]");
        if channels.contains(&table) {
            text = text.replace(&format!("{table}\nenabled = false\n"), "");
        }
    }
    text.push('\n');
    text.push_str(channels);
    text.push('\n');
    std::fs::write(&path, text).expect("write config");
    env
}

/// Where [`spawn_with_env`] writes the gateway's log (appended across restarts).
pub fn log_path(env: &Env) -> PathBuf {
    env.dir.path().join("gateway.log")
}

/// The gateway's log so far (for assertion messages).
pub fn logs(env: &Env) -> String {
    std::fs::read_to_string(log_path(env)).unwrap_or_default()
}

/// Start the real binary with these extra environment variables (platform tokens), its
/// log appended to [`log_path`]. Call [`GatewayProcess::wait_admin`] to wait until ready.
pub fn spawn_with_env(env: &Env, vars: &[(&str, &str)]) -> GatewayProcess {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log_path(env))
        .expect("open the log file");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_switchboard"));
    cmd.arg("--config")
        .arg(env.config_path())
        .arg("run")
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::from(log));
    for var in PLATFORM_VARS {
        cmd.env_remove(var);
    }
    for (k, v) in vars {
        cmd.env(k, v);
    }
    let child = cmd.spawn().expect("spawn switchboard");
    GatewayProcess {
        child,
        data_dir: env.data_dir(),
    }
}

/// Run `switchboard --config <env> <args…>` to completion: (success, stdout, stderr).
pub fn cli(env: &Env, args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_switchboard"))
        .arg("--config")
        .arg(env.config_path())
        .args(args)
        .env("RUST_LOG", "warn")
        .output()
        .expect("run switchboard");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The HTTP base URL the config names (`http://127.0.0.1:PORT`).
pub fn http_base(env: &Env) -> String {
    let text = std::fs::read_to_string(env.config_path()).expect("read config");
    let line = text
        .lines()
        .find(|l| l.starts_with("http_listen"))
        .expect("http_listen in the config");
    format!(
        "http://{}",
        line.split('"').nth(1).expect("a quoted address")
    )
}

/// [`spawn_with_env`], then wait until the gateway is ready (its admin address written);
/// panics with the gateway's log if it exits or times out first. The HTTP port was only
/// free when the config was written; if something took it meanwhile, a new one is picked
/// and the gateway started again (read it back with [`http_base`]).
pub fn spawn_ready(env: &Env, vars: &[(&str, &str)], timeout: Duration) -> GatewayProcess {
    let mut attempts = 0;
    'spawn: loop {
        attempts += 1;
        let log_start = logs(env).len();
        let mut gw = spawn_with_env(env, vars);
        let deadline = Instant::now() + timeout;
        loop {
            if switchboard::http::admin::running_at(&env.data_dir()).is_some() {
                return gw;
            }
            if let Ok(Some(status)) = gw.child.try_wait() {
                let log = logs(env);
                if attempts < 3 && log[log_start..].contains("cannot listen on") {
                    let path = env.config_path();
                    let text = std::fs::read_to_string(&path).expect("read config");
                    let old = http_base(env).replace("http://", "");
                    let text = text.replace(&old, &format!("127.0.0.1:{}", free_port()));
                    std::fs::write(&path, text).expect("write config");
                    continue 'spawn;
                }
                panic!("gateway exited early: {status}; log:\n{log}");
            }
            assert!(
                Instant::now() < deadline,
                "gateway not ready in {timeout:?}; log:\n{}",
                logs(env)
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl GatewayProcess {
    /// Whether the child is still running.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

/// Poll `check` every 50 ms until it yields, at most `timeout` (for state only reachable by
/// asking, such as `/readyz`); panics with `what` on timeout.
pub async fn poll_until<T, F, Fut>(timeout: Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `GET /readyz`: the status and the JSON body (`None` when the gateway does not answer).
pub async fn readyz(env: &Env) -> Option<(u16, serde_json::Value)> {
    let resp = reqwest::get(format!("{}/readyz", http_base(env)))
        .await
        .ok()?;
    let status = resp.status().as_u16();
    Some((status, resp.json().await.ok()?))
}

/// The pairing code in a message: the 8-character word from `A–Z` / `2–9`.
pub fn pairing_code(text: &str) -> Option<String> {
    text.split(|c: char| !c.is_ascii_alphanumeric())
        .find(|w| {
            w.len() == 8
                && w.chars()
                    .all(|c| c.is_ascii_uppercase() || ('2'..='9').contains(&c))
        })
        .map(str::to_string)
}

/// Send `text` as `user` to the gateway's API at `base` and do not wait for the answer (a
/// turn left in flight).
pub fn fire(base: String, user: &str, text: &str) {
    let body = serde_json::json!({"model": "x", "user": user, "messages": [{"role": "user", "content": text}]});
    tokio::spawn(async move {
        let _ = reqwest::Client::new()
            .post(format!("{base}/v1/chat/completions"))
            .json(&body)
            .send()
            .await;
    });
}

/// The fake LLM and fake Slack, and a config with Slack on (open DMs), pointed at them.
pub async fn slack_fakes() -> (
    switchboard_fakes::llm::FakeLlm,
    switchboard_fakes::slack::FakeSlack,
    Env,
) {
    let llm = switchboard_fakes::llm::FakeLlm::start().await;
    let slack = switchboard_fakes::slack::FakeSlack::start().await;
    let table = format!(
        "[channels.slack]\nenabled = true\napi_url = \"{}\"\ndm_policy = \"open\"\n",
        slack.api_url()
    );
    let env = env_with(&llm.base_url(), &table);
    (llm, slack, env)
}
