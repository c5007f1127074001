//! Shared helpers for the gateway's integration tests: a config in a temp folder, the
//! gateway in-process or as a child process, and a recording test channel.
#![allow(dead_code)]

pub mod bus;
mod channel;
pub mod platform;
pub mod telegram;

pub use channel::TestChannel;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use switchboard::config::{self, Loaded};
use switchboard::gateway::{Running, StartOptions};
use switchboard_channel::Channel;
use tokio_util::sync::CancellationToken;

/// A temp folder holding `config.toml`, `data/` and `workspace/`.
pub struct Env {
    pub dir: tempfile::TempDir,
}

impl Env {
    /// A config pointing the LLM at `llm_base_url`, HTTP on an ephemeral port, channels off,
    /// plus `extra` TOML appended (later tables win over nothing; keep keys distinct).
    pub fn new(llm_base_url: &str, extra: &str) -> Env {
        let dir = tempfile::tempdir().expect("tempdir");
        let text = format!(
            "[gateway]\nhttp_listen = \"127.0.0.1:0\"\n\n\
             [llm]\nbase_url = \"{llm_base_url}\"\napi_key_env = \"SB_TEST_LLM_KEY\"\nmax_retries = 1\nrequest_timeout = \"30s\"\n\n\
             [channels.telegram]\nenabled = false\n[channels.discord]\nenabled = false\n[channels.slack]\nenabled = false\n\n\
             [heartbeat]\nenabled = false\n\n{extra}\n"
        );
        std::fs::write(dir.path().join("config.toml"), text).expect("write config");
        Env { dir }
    }

    pub fn config_path(&self) -> PathBuf {
        self.dir.path().join("config.toml")
    }

    pub fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    pub fn load(&self) -> Loaded {
        config::load(&self.config_path()).expect("config loads")
    }

    /// Start the gateway in this process.
    pub async fn start(&self, opts: StartOptions) -> (Running, CancellationToken) {
        let shutdown = CancellationToken::new();
        let running = switchboard::start(&self.load(), opts, shutdown.clone())
            .await
            .expect("gateway starts");
        (running, shutdown)
    }

    /// Start the gateway in this process with a fresh recording `test` channel.
    pub async fn start_with_test_channel(&self) -> (Arc<TestChannel>, Running, CancellationToken) {
        self.start_with_turn_grace(switchboard::gateway::TURN_GRACE)
            .await
    }

    /// [`Env::start_with_test_channel`], its turns given `grace` to finish at the stop.
    pub async fn start_with_turn_grace(
        &self,
        grace: Duration,
    ) -> (Arc<TestChannel>, Running, CancellationToken) {
        let ch = Arc::new(TestChannel::default());
        let opts = StartOptions {
            turn_grace: grace,
            ..with_test_channel(&ch)
        };
        let (running, shutdown) = self.start(opts).await;
        (ch, running, shutdown)
    }

    /// Start the real binary as a child process with this config; waits until `/healthz`.
    pub fn spawn(&self) -> GatewayProcess {
        self.spawn_after("")
    }

    /// [`Self::spawn`] from a shell that first runs `setup` (`trap '' HUP`, as `nohup`
    /// does), then becomes the gateway.
    pub fn spawn_after(&self, setup: &str) -> GatewayProcess {
        let port_file = self.dir.path().join("port");
        let _ = std::fs::remove_file(&port_file);
        let child = Command::new("sh")
            .arg("-c")
            .arg(format!("{setup}\nexec \"$0\" --config \"$1\" run"))
            .arg(env!("CARGO_BIN_EXE_switchboard"))
            .arg(self.config_path())
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn switchboard");
        GatewayProcess {
            child,
            data_dir: self.data_dir(),
        }
    }
}

/// A gateway running as a child process.
pub struct GatewayProcess {
    pub child: Child,
    data_dir: PathBuf,
}

impl GatewayProcess {
    /// The admin API address, once the gateway wrote it (it does so when ready).
    pub fn wait_admin(&mut self, timeout: Duration) -> (String, String) {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some((addr, token)) = switchboard::http::admin::running_at(&self.data_dir) {
                return (format!("http://{addr}"), token);
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("gateway exited early: {status}");
            }
            assert!(Instant::now() < deadline, "gateway did not become ready");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn kill9(&mut self) {
        self.child.kill().expect("SIGKILL");
        let _ = self.child.wait();
        // A killed gateway leaves its address file behind; the next one overwrites it.
        let _ = std::fs::remove_file(self.data_dir.join("admin.addr"));
    }

    pub fn sigterm(&mut self) {
        let pid = self.child.id().to_string();
        let ok = Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .expect("kill");
        assert!(ok.success());
    }

    /// Wait for exit with a bound; returns the exit status and how long it took.
    pub fn wait_exit(&mut self, timeout: Duration) -> (std::process::ExitStatus, Duration) {
        let start = Instant::now();
        loop {
            if let Some(s) = self.child.try_wait().expect("try_wait") {
                return (s, start.elapsed());
            }
            assert!(
                start.elapsed() < timeout,
                "gateway did not exit within {timeout:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn stderr(&mut self) -> String {
        let mut s = String::new();
        if let Some(mut e) = self.child.stderr.take() {
            use std::io::Read;
            let _ = e.read_to_string(&mut s);
        }
        s
    }
}

impl Drop for GatewayProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A chat member's message (not the owner's).
pub fn message(
    id: &str,
    key: &switchboard_channel::ChatKey,
    text: &str,
) -> switchboard_channel::InboundMessage {
    let sender = switchboard_channel::Sender {
        id: "u".into(),
        username: None,
        display_name: "U".into(),
        is_owner: false,
    };
    switchboard_channel::InboundMessage::text(id, key.clone(), sender, text)
}

/// A chat member's message that is never joined with others into one turn.
pub fn message_alone(
    id: &str,
    key: &switchboard_channel::ChatKey,
    text: &str,
) -> switchboard_channel::InboundMessage {
    let mut m = message(id, key, text);
    m.metadata
        .insert("join".into(), serde_json::Value::Bool(false));
    m
}

/// Options with the test channel registered and platform channels off.
pub fn with_test_channel(ch: &Arc<TestChannel>) -> StartOptions {
    StartOptions {
        channels: false,
        extra_channels: vec![ch.clone() as Arc<dyn Channel>],
        ..Default::default()
    }
}

/// The base URL of an in-process gateway's HTTP server.
pub fn base(running: &switchboard::gateway::Running) -> String {
    format!("http://{}", running.http_addr.expect("http is on"))
}

/// POST a chat completion to the gateway's API channel.
pub async fn ask(base: &str, user: &str, text: &str) -> serde_json::Value {
    let resp = reqwest::Client::new()
        .post(format!("{base}/v1/chat/completions"))
        .json(&serde_json::json!({"model": "x", "user": user, "messages": [{"role": "user", "content": text}]}))
        .send()
        .await
        .expect("request");
    assert!(resp.status().is_success(), "status {}", resp.status());
    resp.json().await.expect("json")
}

/// POST a streamed chat completion; the response, its body not read yet.
pub async fn ask_stream(base: &str, user: &str, text: &str) -> reqwest::Response {
    reqwest::Client::new()
        .post(format!("{base}/v1/chat/completions"))
        .json(
            &serde_json::json!({"model": "x", "stream": true, "user": user,
            "messages": [{"role": "user", "content": text}]}),
        )
        .send()
        .await
        .expect("request")
}

/// The chunks of an SSE chat completion body (`[DONE]` left out).
pub fn sse_chunks(body: &str) -> Vec<serde_json::Value> {
    body.lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .collect()
}

/// The text an SSE chat completion body streamed.
pub fn sse_text(body: &str) -> String {
    sse_chunks(body)
        .iter()
        .filter_map(|v| v["choices"][0]["delta"]["content"].as_str())
        .collect()
}

pub fn reply_text(v: &serde_json::Value) -> String {
    v["choices"][0]["message"]["content"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

pub fn path_str(p: &Path) -> String {
    p.display().to_string()
}

/// Wait until `cond` holds, checking every 10 ms, for at most 20 s (there is no event to
/// wait on: a store write, a worker's state); panics with `what` when it never does.
pub async fn until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while !cond() {
        assert!(tokio::time::Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
