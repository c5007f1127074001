//! Starting the release gateway binary in a temporary folder, and reading its RSS.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use switchboard_fakes::llm::FakeLlm;

pub(crate) fn binary() -> PathBuf {
    static BUILT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BUILT.get_or_init(build).clone()
}

fn build() -> PathBuf {
    let exe = std::env::current_exe().expect("current exe");
    // target/<profile>/examples/bench → target/<profile>/switchboard
    let bin = exe
        .parent()
        .and_then(Path::parent)
        .expect("target dir")
        .join("switchboard");
    // Always: `cargo run --example bench` builds the example, not the gateway, and an old
    // binary would be measured after a pull. Built together with the example, as that
    // command builds it (the same features, so nothing is built twice); up to date, this
    // takes a moment.
    let ok = Command::new(env!("CARGO"))
        .args([
            "build",
            "--release",
            "--bin",
            "switchboard",
            "--example",
            "bench",
        ])
        .status()
        .expect("cargo build");
    assert!(ok.success(), "cargo build failed");
    assert!(bin.exists(), "no gateway binary at {}", bin.display());
    bin
}

pub(crate) fn rss_mb(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|kb| kb.parse::<f64>().ok())
        .map_or(f64::NAN, |kb| kb / 1024.0)
}

pub(crate) struct Gateway {
    pub(crate) child: Child,
    pub(crate) base: String,
    dir: Option<tempfile::TempDir>,
}

impl Gateway {
    /// Stop the gateway gracefully (SIGTERM) and hand back its folder, data included.
    pub(crate) fn stop(mut self) -> tempfile::TempDir {
        let pid = self.child.id().to_string();
        let ok = Command::new("kill").args(["-TERM", &pid]).status();
        assert!(ok.is_ok_and(|s| s.success()), "kill -TERM {pid}");
        let _ = self.child.wait();
        self.dir.take().expect("the folder is taken once")
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub(crate) async fn start_gateway(
    llm: &FakeLlm,
    extra: &str,
    envs: &[(&str, String)],
) -> (Gateway, Duration) {
    start_gateway_in(tempfile::tempdir().expect("tempdir"), llm, extra, envs).await
}

pub(crate) async fn start_gateway_in(
    dir: tempfile::TempDir,
    llm: &FakeLlm,
    extra: &str,
    envs: &[(&str, String)],
) -> (Gateway, Duration) {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let config = format!(
        "[gateway]\nhttp_listen = \"127.0.0.1:{port}\"\nmax_concurrent_turns = 64\n\
         [llm]\nbase_url = \"{}\"\nmax_retries = 0\n\
         [heartbeat]\nenabled = false\n{extra}\n",
        llm.base_url()
    );
    std::fs::write(dir.path().join("config.toml"), config).unwrap();
    let base = format!("http://127.0.0.1:{port}");
    let http = reqwest::Client::new();
    let bin = binary();
    let started = Instant::now();
    let mut cmd = Command::new(bin);
    cmd.arg("--config")
        .arg(dir.path().join("config.toml"))
        .arg("run")
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit());
    for (k, v) in envs {
        cmd.env(k, v);
    }
    // Extra variables for experiments, e.g. BENCH_GATEWAY_ENV="MALLOC_ARENA_MAX=2".
    if let Ok(extra) = std::env::var("BENCH_GATEWAY_ENV") {
        for kv in extra.split_whitespace() {
            if let Some((k, v)) = kv.split_once('=') {
                cmd.env(k, v);
            }
        }
    }
    let child = cmd.spawn().expect("spawn gateway");
    loop {
        if let Ok(r) = http.get(format!("{base}/readyz")).send().await {
            if r.status() == 200 {
                break;
            }
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "gateway never became ready"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let ready = started.elapsed();
    (
        Gateway {
            child,
            base,
            dir: Some(dir),
        },
        ready,
    )
}

pub(crate) async fn one(http: &reqwest::Client, base: &str, user: &str, text: &str) -> Duration {
    let t = Instant::now();
    let r = http
        .post(format!("{base}/v1/chat/completions"))
        .json(&serde_json::json!({"model": "x", "user": user, "messages": [{"role": "user", "content": text}]}))
        .send()
        .await
        .expect("request");
    assert!(r.status().is_success(), "status {}", r.status());
    let _ = r.bytes().await;
    t.elapsed()
}

pub(crate) fn pct(sorted: &[Duration], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i].as_secs_f64() * 1000.0
}
