//! The one-shot commands as a user meets them: `doctor` in a folder with nothing in it,
//! a local model server without a key, sessions and pairing commands given a key or a
//! channel that does not exist, `cron add` given an option its schedule cannot use, and
//! `skills list` with no skills.

mod common;

use std::path::Path;
use std::process::Command;
use std::sync::Arc;

use common::Env;
use switchboard::agent::session::Session;
use switchboard::llm::{ChatMessage, Role};
use switchboard::store::{Batch, SledStore, Store};
use switchboard_channel::Sender;
use switchboard_fakes::llm::FakeLlm;

/// What a run of the binary left: its exit code, stdout and stderr.
struct Run {
    code: Option<i32>,
    out: String,
    err: String,
}

/// `switchboard <args…>` in `dir`, with no config named by the environment, no LLM key,
/// and every proxy pointing at a closed port (nothing leaves the machine; the fakes on
/// 127.0.0.1 are reached directly).
fn run_in(dir: &Path, args: &[&str]) -> Run {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_switchboard"));
    cmd.current_dir(dir)
        .args(args)
        .env("RUST_LOG", "warn")
        .env_remove("SWITCHBOARD_CONFIG")
        .env_remove("OPENAI_API_KEY")
        .env("NO_PROXY", "127.0.0.1,localhost")
        .env("no_proxy", "127.0.0.1,localhost");
    for var in [
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
        "https_proxy",
        "http_proxy",
    ] {
        cmd.env(var, "http://127.0.0.1:9");
    }
    let out = cmd.output().expect("run switchboard");
    Run {
        code: out.status.code(),
        out: String::from_utf8_lossy(&out.stdout).into_owned(),
        err: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// `switchboard --config <env> <args…>`.
fn run(env: &Env, args: &[&str]) -> Run {
    let config = env.config_path().display().to_string();
    let mut all = vec!["--config", config.as_str()];
    all.extend_from_slice(args);
    run_in(env.dir.path(), &all)
}

#[test]
fn doctor_in_an_empty_folder_says_so_and_makes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let r = run_in(dir.path(), &["doctor"]);
    assert!(
        r.out
            .contains("ok   config: built-in defaults: no config.toml found"),
        "{}",
        r.out
    );
    for line in [
        "ok   data dir: ",
        "ok   store: none yet: made at the first `run`",
        "ok   workspace: ",
    ] {
        assert!(r.out.contains(line), "{line}\n{}", r.out);
    }
    assert!(
        r.out
            .matches("does not exist yet: made at the first `run`")
            .count()
            == 2,
        "data dir and workspace: {}",
        r.out
    );
    // The default model server is a hosted one: it needs a key.
    assert!(
        r.out.contains("FAIL llm key: $OPENAI_API_KEY is not set"),
        "{}",
        r.out
    );
    assert_eq!(r.code, Some(1));
    let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert!(left.is_empty(), "doctor made {left:?}");
    // So the commands that need a store still say there is none.
    let r = run_in(dir.path(), &["pairing", "list"]);
    assert_eq!(r.code, Some(1));
    assert!(r.err.contains("no store at"), "{}", r.err);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_local_model_server_needs_no_key_a_hosted_one_does() {
    let llm = FakeLlm::start().await;
    let env = Env::new(&llm.base_url(), "");
    let r = run(&env, &["doctor"]);
    assert_eq!(r.code, Some(0), "{}{}", r.out, r.err);
    assert!(
        r.out
            .contains("ok   llm key: $SB_TEST_LLM_KEY is not set (fine for a local server)"),
        "{}",
        r.out
    );
    assert!(!env.data_dir().exists() && !env.dir.path().join("workspace").exists());

    let hosted = Env::new("https://llm.invalid/v1", "");
    let r = run(&hosted, &["doctor"]);
    assert_eq!(r.code, Some(1), "{}", r.out);
    assert!(
        r.out.contains("FAIL llm key: $SB_TEST_LLM_KEY is not set"),
        "{}",
        r.out
    );
}

#[tokio::test]
async fn sessions_and_cron_refuse_what_does_not_exist() {
    let env = Env::new("http://127.0.0.1:9/v1", "");
    {
        let store = SledStore::open(&env.data_dir()).unwrap();
        let mut session = Session::default();
        session.messages.push(ChatMessage::new(Role::User, "hi"));
        let mut b = Batch::default();
        session.save(&"telegram:42".parse().unwrap(), &mut b);
        store.commit(b).await.unwrap();
    }
    let r = run(&env, &["sessions", "reset", "telegram:999"]);
    assert_eq!(r.code, Some(1));
    assert_eq!(
        r.err.trim(),
        "error: no session telegram:999: nothing to reset"
    );
    let r = run(&env, &["sessions", "show", "nosuch:key"]);
    assert_eq!(r.code, Some(1));
    assert_eq!(
        r.err.trim(),
        "error: unknown channel \"nosuch\" in nosuch:key (one of telegram, discord, slack, api, cli)"
    );
    assert_eq!(r.out, "");
    let r = run(&env, &["sessions", "reset", "telegramm:42"]);
    assert_eq!(r.code, Some(1));
    assert!(r.err.contains("(did you mean \"telegram\"?)"), "{}", r.err);
    // What exists is still reset.
    let r = run(&env, &["sessions", "reset", "telegram:42"]);
    assert_eq!(r.code, Some(0), "{}", r.err);
    assert_eq!(r.out.trim(), "reset telegram:42");

    let r = run(
        &env,
        &[
            "cron",
            "add",
            "--key",
            "telegram:42",
            "--every",
            "5m",
            "--tz",
            "Europe/Berlin",
            "--message",
            "stretch",
        ],
    );
    assert_eq!(r.code, Some(2), "{}", r.err);
    assert!(
        r.err
            .contains("error: the argument '--every <EVERY>' cannot be used with '--tz <TZ>'"),
        "{}",
        r.err
    );
    let r = run(&env, &["cron", "list"]);
    assert_eq!(r.out.trim(), "no jobs");
}

#[tokio::test]
async fn pairing_shows_what_revoke_takes_and_names_an_unknown_channel() {
    let env = Env::new("http://127.0.0.1:9/v1", "");
    {
        let store: Arc<dyn Store> = Arc::new(SledStore::open(&env.data_dir()).unwrap());
        let alice = Sender {
            id: "5555".into(),
            username: Some("alice".into()),
            display_name: "U5555".into(),
            is_owner: false,
        };
        let (code, _) = switchboard::pairing::code_for(store.as_ref(), "telegram", &alice, None)
            .await
            .unwrap()
            .unwrap();
        switchboard::pairing::approve(store.as_ref(), "telegram", &code)
            .await
            .unwrap();
        let bob = Sender {
            id: "6666".into(),
            username: Some("bob".into()),
            display_name: "Bob".into(),
            is_owner: false,
        };
        switchboard::pairing::code_for(store.as_ref(), "telegram", &bob, None)
            .await
            .unwrap()
            .unwrap();
    }
    let r = run(&env, &["pairing", "list"]);
    assert_eq!(r.code, Some(0), "{}", r.err);
    assert!(r.out.contains(" from Bob @bob (6666) until "), "{}", r.out);
    // In the gateway's timezone (UTC here), to the minute, as `cron list` shows times.
    let until = r
        .out
        .split(" until ")
        .nth(1)
        .unwrap()
        .lines()
        .next()
        .unwrap();
    assert!(
        until.ends_with(" UTC") && until.len() == "2026-11-25 07:28 UTC".len(),
        "{until}"
    );
    assert!(
        r.out.contains("  telegram U5555 @alice (5555)\n"),
        "{}",
        r.out
    );
    let r = run(&env, &["pairing", "revoke", "telegram", "@alice"]);
    assert_eq!(r.code, Some(0), "{}", r.err);
    assert_eq!(r.out.trim(), "revoked U5555 @alice (5555) on telegram");

    let r = run(&env, &["pairing", "approve", "telegramm", "ABCD2345"]);
    assert_eq!(r.code, Some(1));
    assert_eq!(
        r.err.trim(),
        "error: unknown channel \"telegramm\" (did you mean \"telegram\"?)"
    );
    let r = run(&env, &["pairing", "revoke", "irc", "bob"]);
    assert_eq!(r.code, Some(1));
    assert!(
        r.err
            .contains("unknown channel \"irc\" (one of telegram, discord, slack)"),
        "{}",
        r.err
    );
}

#[test]
fn skills_list_with_none_names_the_folders_and_where_the_bundled_ones_are() {
    let env = Env::new("http://127.0.0.1:9/v1", "");
    let r = run(&env, &["skills", "list"]);
    assert_eq!(r.code, Some(0), "{}", r.err);
    let dir = env.dir.path().display();
    let first = r.out.lines().next().unwrap_or_default();
    assert_eq!(
        first,
        format!("no skills found in {dir}/skills, {dir}/workspace/skills")
    );
    assert!(
        r.out
            .contains("hint: the bundled skills are in the repository's skills/ folder"),
        "{}",
        r.out
    );
}
