//! The real binary and the signals a terminal sends it: Ctrl-C in `switchboard chat` with
//! no gateway stops the message as `/stop` does (it never runs again), a closed terminal
//! (SIGHUP) stops the gateway gracefully, and an open chat prompt holding the store is
//! named by the commands it keeps out.

mod common;

use std::io::{Read, Write};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::Env;
use common::platform::{cli, env_with, fire, http_base};
use switchboard::agent::session::Session;
use switchboard::store::{SledStore, Store, Tree};
use switchboard_fakes::llm::{FakeLlm, Reply};

const WAIT: Duration = Duration::from_secs(30);
/// What a turn stopped before its answer leaves in the conversation.
const STOPPED: &str = "(stopped by the user before answering)";

/// `switchboard chat [message]` with no gateway running, its output piped.
fn spawn_chat(env: &Env, message: Option<&str>) -> Child {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_switchboard"));
    cmd.arg("--config")
        .arg(env.config_path())
        .arg("chat")
        .args(message)
        .env("RUST_LOG", "warn")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd.spawn().expect("spawn switchboard chat")
}

fn signal(child: &Child, name: &str) {
    let ok = Command::new("kill")
        .args([&format!("-{name}"), &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(ok.success());
}

/// Wait (bounded) for the child to exit: its status, how long it took, and its stderr.
fn wait_exit(child: &mut Child, timeout: Duration) -> (ExitStatus, Duration, String) {
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            let mut err = String::new();
            if let Some(mut e) = child.stderr.take() {
                let _ = e.read_to_string(&mut err);
            }
            return (status, start.elapsed(), err);
        }
        assert!(start.elapsed() < timeout, "did not exit within {timeout:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Wait (bounded) until the chat prints its prompt: the store is open, the agent ready.
fn wait_prompt(child: &mut Child) {
    let mut stdout = child.stdout.take().expect("stdout piped");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut seen = Vec::new();
        let mut byte = [0u8; 1];
        while let Ok(1) = stdout.read(&mut byte) {
            seen.push(byte[0]);
            if seen.ends_with(b"> ") {
                let _ = tx.send(());
            }
        }
    });
    rx.recv_timeout(WAIT).expect("the chat prompt within 30 s");
}

fn session_texts(env: &Env, key: &str) -> Vec<String> {
    let store = SledStore::open(&env.data_dir()).unwrap();
    Session::load(&store, &key.parse().unwrap())
        .unwrap()
        .messages
        .into_iter()
        .map(|m| m.content)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_in_chat_without_a_gateway_stops_the_message_for_good() {
    let llm = FakeLlm::start().await;
    let env = env_with(&llm.base_url(), "");
    llm.push(Reply::text("too late").with_delay(Duration::from_secs(120)));

    // A one-shot question, and one asked at the prompt: both stopped by Ctrl-C mid-answer.
    let mut chat = spawn_chat(&env, Some("slow question"));
    llm.wait_for_requests(1, WAIT).await.unwrap();
    signal(&chat, "INT");
    let (status, _, err) = wait_exit(&mut chat, Duration::from_secs(15));
    assert_eq!(status.code(), Some(130), "{status}: {err}");

    llm.push(Reply::text("too late again").with_delay(Duration::from_secs(120)));
    let mut chat = spawn_chat(&env, None);
    let mut stdin = chat.stdin.take().unwrap();
    stdin.write_all(b"slow at the prompt\n").unwrap();
    llm.wait_for_requests(2, WAIT).await.unwrap();
    signal(&chat, "INT");
    let (status, _, err) = wait_exit(&mut chat, Duration::from_secs(15));
    assert_eq!(status.code(), Some(130), "{status}: {err}");
    drop(stdin);

    // Stopped as by `/stop`: nothing waits in the inbox, the conversation has each message
    // marked as stopped, and the store was closed (its lock and holder record are gone).
    assert!(!env.data_dir().join("store.holder").exists());
    {
        let store = SledStore::open(&env.data_dir()).unwrap();
        assert_eq!(store.len(Tree::Inbox), 0, "a stopped message is kept");
    }
    let stopped = |text: &str| [text.to_string(), STOPPED.to_string()];
    let texts = session_texts(&env, "cli:local");
    assert_eq!(
        texts,
        [stopped("slow question"), stopped("slow at the prompt")].concat()
    );

    // The next gateway does not run them: the only model request is the new message's.
    let mut gw = env.spawn();
    gw.wait_admin(WAIT);
    let (ok, out, err) = cli(&env, &["chat", "after the stop"]);
    assert!(ok, "{err}");
    assert_eq!(out.trim(), "echo: after the stop");
    gw.sigterm();
    assert!(gw.wait_exit(WAIT).0.success());
    let logs = gw.stderr();
    assert!(!logs.contains("resuming"), "{logs}");
    let asked: Vec<String> = llm.requests().iter().map(|r| r.last_user_text()).collect();
    assert_eq!(
        asked,
        ["slow question", "slow at the prompt", "after the stop"]
    );
    let texts = session_texts(&env, "cli:local");
    assert_eq!(
        texts[4..],
        ["after the stop".to_string(), "echo: after the stop".into()]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_stops_the_gateway_gracefully() {
    let llm = FakeLlm::start().await;
    let env = env_with(&llm.base_url(), "");
    let mut gw = env.spawn();
    gw.wait_admin(WAIT);
    assert!(env.data_dir().join("admin.addr").exists());
    signal(&gw.child, "HUP");
    let (status, took) = gw.wait_exit(Duration::from_secs(15));
    assert!(status.success(), "exit status {status}");
    assert!(took < Duration::from_secs(10), "took {took:?}");
    assert!(
        !env.data_dir().join("admin.addr").exists(),
        "admin.addr left behind"
    );
    let logs = gw.stderr();
    assert!(logs.contains("stopped"), "{logs}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_chat_prompt_is_named_by_the_commands_it_keeps_out() {
    let llm = FakeLlm::start().await;
    let env = env_with(&llm.base_url(), "");
    let mut chat = spawn_chat(&env, None);
    wait_prompt(&mut chat);
    let pid = chat.id();
    let named = format!(
        "is in use by `switchboard chat` (pid {pid}); close it, or run the gateway and use chat \
         through it"
    );

    let (ok, _, err) = cli(&env, &["sessions", "list"]);
    assert!(!ok);
    assert!(err.contains(&named), "{err}");
    let (ok, _, err) = cli(&env, &["run"]);
    assert!(!ok);
    assert!(err.contains(&named), "{err}");
    // A sentence, not sled's debug dump of the OS error.
    assert!(
        !err.contains("Os {") && !err.contains("WouldBlock"),
        "{err}"
    );
    assert_eq!(err.trim().lines().count(), 1, "{err}");

    // Closed: the record goes with it, and the store is free again.
    drop(chat.stdin.take());
    let (status, _, err) = wait_exit(&mut chat, WAIT);
    assert!(status.success(), "{status}: {err}");
    assert!(!env.data_dir().join("store.holder").exists());
    let (ok, _, err) = cli(&env, &["sessions", "list"]);
    assert!(ok, "{err}");
}

/// Started with SIGHUP ignored (`nohup switchboard run &`), the gateway outlives its
/// terminal: the hangup does not reach it, and what stops it is the later SIGTERM.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_started_under_nohup_ignores_the_hangup() {
    let llm = FakeLlm::start().await;
    let env = env_with(&llm.base_url(), "");
    let mut gw = env.spawn_after("trap '' HUP");
    gw.wait_admin(WAIT);
    signal(&gw.child, "HUP");
    signal(&gw.child, "TERM");
    let (status, _) = gw.wait_exit(Duration::from_secs(15));
    assert!(status.success(), "exit status {status}");
    let logs = gw.stderr();
    assert!(logs.contains("stop signal received signal=15"), "{logs}");
    assert!(
        !logs.contains("signal=1\n") && !logs.contains("signal=1 "),
        "{logs}"
    );
}

/// A second signal while the gateway stops gracefully (a turn given its 5 s to finish)
/// ends it at once, with 128 + the signal, as a crash would: the turn runs at the next
/// start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_signal_during_the_stop_ends_the_gateway_at_once() {
    let (_llm, _env, mut gw) = stopping_with_a_turn_in_flight("twice").await;
    signal(&gw.child, "TERM");
    let (status, took) = gw.wait_exit(Duration::from_secs(15));
    assert_eq!(status.code(), Some(143), "exit status {status}");
    assert!(
        took < Duration::from_secs(4),
        "took {took:?}: waited for the turn's grace"
    );
    let logs = gw.stderr();
    assert!(logs.contains("a second stop signal"), "{logs}");
}

/// A SIGHUP during the stop (the terminal closed after a Ctrl-C, or systemd's
/// `SendSIGHUP=yes` right after its SIGTERM) leaves the graceful stop to finish.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hangup_during_the_stop_does_not_cut_it_short() {
    let (_llm, _env, mut gw) = stopping_with_a_turn_in_flight("hangup").await;
    signal(&gw.child, "HUP");
    let (status, _) = gw.wait_exit(Duration::from_secs(15));
    assert_eq!(status.code(), Some(0), "exit status {status}");
    let logs = gw.stderr();
    assert!(!logs.contains("a second stop signal"), "{logs}");
    assert!(logs.contains("stop signal received"), "{logs}");
}

/// A gateway with a turn in flight (its LLM answer 120 s away) that has taken a SIGTERM
/// and stopped taking connections: it is giving the turn its grace.
async fn stopping_with_a_turn_in_flight(user: &str) -> (FakeLlm, Env, common::GatewayProcess) {
    let llm = FakeLlm::start().await;
    let env = env_with(&llm.base_url(), "");
    llm.push(Reply::text("too late").with_delay(Duration::from_secs(120)));
    let mut gw = env.spawn();
    gw.wait_admin(WAIT);
    let base = http_base(&env);
    fire(base.clone(), user, "in flight");
    llm.wait_for_requests(1, WAIT).await.unwrap();
    signal(&gw.child, "TERM");
    // The first is taken once the HTTP server stops taking connections.
    let healthz = format!("{base}/healthz");
    let deadline = Instant::now() + WAIT;
    loop {
        let fresh = reqwest::Client::builder()
            .pool_max_idle_per_host(0)
            .build()
            .unwrap();
        if fresh.get(&healthz).send().await.is_err() {
            break;
        }
        assert!(Instant::now() < deadline, "the gateway never began to stop");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    (llm, env, gw)
}
