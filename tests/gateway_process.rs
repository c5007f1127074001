//! The real binary as a child process: crash durability (SIGKILL mid-turn), graceful
//! shutdown on SIGTERM, and `config check` errors naming the key path.

mod common;

use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use common::Env;
use common::platform::{cli, env_with, fire, http_base};
use switchboard::agent::session::Session;
use switchboard::store::{SledStore, Store, Tree};
use switchboard_channel::ChatKey;
use switchboard_fakes::llm::{FakeLlm, Reply};

const WAIT: Duration = Duration::from_secs(30);

/// Wait until the running gateway has finished `n` turns (their replies and sessions
/// stored): a stop before that would put a turn back in the inbox.
async fn wait_turns(env: &Env, n: u64) {
    let (base, line) = (http_base(env), format!("switchboard_turns_total {n}"));
    common::platform::poll_until(WAIT, &line, || async {
        let metrics = reqwest::get(format!("{base}/metrics"))
            .await
            .ok()?
            .text()
            .await
            .ok()?;
        metrics.lines().any(|l| l == line).then_some(())
    })
    .await;
}

fn session_of(env: &Env, key: &str) -> Session {
    let store = SledStore::open(&env.data_dir()).unwrap();
    Session::load(&store, &key.parse::<ChatKey>().unwrap()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_mid_turn_then_restart_answers_exactly_once() {
    let llm = FakeLlm::start().await;
    let env = env_with(&llm.base_url(), "");
    // The first LLM call hangs long enough for the gateway to be killed during it.
    llm.push(Reply::text("too late").with_delay(Duration::from_secs(120)));
    let mut gw = env.spawn();
    gw.wait_admin(WAIT);
    fire(http_base(&env), "crash", "remember the milk");
    llm.wait_for_requests(1, WAIT).await.unwrap();
    gw.kill9();

    let mut gw = env.spawn();
    gw.wait_admin(WAIT);
    let reqs = llm.wait_for_requests(2, WAIT).await.unwrap();
    assert_eq!(reqs[1].last_user_text(), "remember the milk");
    wait_turns(&env, 1).await;
    gw.sigterm();
    let (status, _) = gw.wait_exit(WAIT);
    assert!(status.success());
    // Stopped right after the reply was written (well within the store's 2 s of quiet):
    // the shutdown checkpoint folded the journal into the store, nothing is left to apply.
    assert_eq!(journal_bytes(&env), 0, "journal bytes left after shutdown");
    let s = session_of(&env, "api:crash");
    let users = s
        .messages
        .iter()
        .filter(|m| m.content == "remember the milk")
        .count();
    assert_eq!(users, 1, "{:?}", s.messages);
    assert_eq!(s.messages.len(), 2);
    {
        let store = SledStore::open(&env.data_dir()).unwrap();
        assert_eq!(store.len(Tree::Inbox), 0);
    }

    // A third start has nothing left to do.
    let mut gw = env.spawn();
    gw.wait_admin(WAIT);
    gw.sigterm();
    assert!(gw.wait_exit(WAIT).0.success());
    assert_eq!(llm.request_count(), 2);

    // A stale admin.addr where another program now listens: no gateway runs, so the CLI
    // uses the store and sends that program nothing.
    std::fs::write(env.data_dir().join("admin.addr"), llm.addr().to_string()).unwrap();
    let (ok, out, err) = cli(&env, &["sessions", "list"]);
    assert!(ok, "{err}");
    assert!(!out.contains("cli:local"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_after_a_tool_ran_resumes_the_turn_without_running_the_tool_again() {
    let llm = FakeLlm::start().await;
    let env = env_with(&llm.base_url(), "");
    let ran = env.dir.path().join("workspace").join("ran.txt");
    llm.push(Reply::tool_call(
        "exec",
        serde_json::json!({"command": "echo ran >> ran.txt"}),
    ));
    // The tool's result is on disk before the model is asked again; killed during that.
    llm.push(Reply::text("too late").with_delay(Duration::from_secs(120)));
    let mut gw = env.spawn();
    gw.wait_admin(WAIT);
    fire(http_base(&env), "tool", "run the script");
    llm.wait_for_requests(2, WAIT).await.unwrap();
    gw.kill9();

    llm.push(Reply::text("it ran"));
    let mut gw = env.spawn();
    gw.wait_admin(WAIT);
    let reqs = llm.wait_for_requests(3, WAIT).await.unwrap();
    let results: Vec<String> = reqs[2].body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].to_string())
        .collect();
    assert_eq!(results.len(), 1, "the model sees the result: {results:?}");
    wait_turns(&env, 1).await;
    gw.sigterm();
    assert!(gw.wait_exit(WAIT).0.success());
    assert_eq!(std::fs::read_to_string(&ran).unwrap(), "ran\n", "ran once");
    assert_eq!(llm.request_count(), 3);
    let s = session_of(&env, "api:tool");
    assert_eq!(s.messages.len(), 4, "{:?}", s.messages);
    let store = SledStore::open(&env.data_dir()).unwrap();
    let key: ChatKey = "api:tool".parse().unwrap();
    let kept = switchboard::agent::resume::find(&store, &key, &[]).unwrap();
    assert!(!kept.kept, "the finished turn's progress is gone");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_exits_zero_within_ten_seconds_and_keeps_in_flight_work() {
    let llm = FakeLlm::start().await;
    let env = env_with(&llm.base_url(), "");
    llm.push(Reply::text("never delivered").with_delay(Duration::from_secs(120)));
    let mut gw = env.spawn();
    gw.wait_admin(WAIT);
    fire(http_base(&env), "term", "in flight");
    llm.wait_for_requests(1, WAIT).await.unwrap();
    gw.sigterm();
    let (status, took) = gw.wait_exit(Duration::from_secs(15));
    assert!(status.success(), "exit status {status}");
    assert!(took < Duration::from_secs(10), "took {took:?}");
    let logs = gw.stderr();
    assert!(logs.contains("stopped"), "{logs}");
    {
        let store: Arc<dyn Store> = Arc::new(SledStore::open(&env.data_dir()).unwrap());
        assert_eq!(
            store.len(Tree::Inbox),
            1,
            "the in-flight message is persisted"
        );
    }
    let mut gw = env.spawn();
    gw.wait_admin(WAIT);
    let reqs = llm.wait_for_requests(2, WAIT).await.unwrap();
    assert_eq!(reqs[1].last_user_text(), "in flight");
    wait_turns(&env, 1).await;
    gw.sigterm();
    assert!(gw.wait_exit(WAIT).0.success());
    assert_eq!(session_of(&env, "api:term").messages.len(), 2);
}

fn config_check(toml: &str) -> (bool, String, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.toml");
    std::fs::write(&path, toml).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_switchboard"))
        .arg("--config")
        .arg(&path)
        .args(["config", "check"])
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn config_check_names_the_key_path_and_warns_on_unknown_keys() {
    for (toml, want) in [
        (
            "[agent]\nmax_iterations = \"many\"\n",
            "agent.max_iterations: expected an integer",
        ),
        (
            "[gateway]\ntimezone = \"Mars/Olympus\"\n",
            "gateway.timezone: unknown timezone",
        ),
        (
            "[llm]\nrequest_timeout = \"forever\"\n",
            "llm.request_timeout: expected a duration",
        ),
        (
            "[channels.slack]\ngroup_policy = \"sometimes\"\n",
            "channels.slack.group_policy",
        ),
        ("[heartbeat]\ninterval = 5\n", "heartbeat.interval"),
        (
            "[channels.telegram]\ntoken_env = \"123456:AAH-SECRET\"\n",
            "channels.telegram.token_env: must name an environment variable",
        ),
        (
            "[llm]\napi_key_env = \"sk-proj-SECRET\"\n",
            "llm.api_key_env: must name an environment variable",
        ),
        (
            "[gateway]\ndata_dir = \"\"\n",
            "gateway.data_dir: must not be empty",
        ),
        (
            "[agent]\nmax_iterations = -1\n",
            "agent.max_iterations: expected a non-negative integer small enough for this setting (got -1)",
        ),
        (
            "[gateway]\ntimezone = \"\"\n",
            "gateway.timezone: must not be empty",
        ),
        (
            "[channels.discord]\nmax_message_len = 4000\n",
            "channels.discord.max_message_len: must be between 100 and 2000",
        ),
        (
            "[llm]\nfallback_models = [\"backup\", \" \"]\n",
            "llm.fallback_models[1]: must be a model name",
        ),
        (
            "[gateway]\ndata_dir = \"ws/data\"\nworkspace = \"ws\"\n",
            "gateway.data_dir: ",
        ),
    ] {
        let (ok, _, err) = config_check(toml);
        assert!(!ok, "{toml} should fail");
        assert!(err.contains(want), "{toml}: {err}");
        assert_eq!(
            err.trim().lines().count(),
            1,
            "one line, the key once: {err}"
        );
        assert!(
            !err.contains("SECRET"),
            "a pasted secret is not repeated: {err}"
        );
    }
    let (ok, out, err) = config_check("[agent]\nmax_iteratons = 3\n");
    assert!(ok);
    assert!(
        out.contains("unknown config key `agent.max_iteratons`") && out.contains("max_iterations"),
        "{out}"
    );
    assert!(
        !err.contains("max_iteratons"),
        "said once, on stdout: {err}"
    );
    let shipped = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("config.toml");
    let out = Command::new(env!("CARGO_BIN_EXE_switchboard"))
        .arg("--config")
        .arg(&shipped)
        .args(["config", "check"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        !String::from_utf8_lossy(&out.stdout).contains("warning"),
        "the shipped config has no unknown keys"
    );
}

/// `switchboard doctor` on `config` with `vars` set: whether it passed, and what it printed.
fn doctor(config: &std::path::Path, vars: &[(&str, &str)]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_switchboard"))
        .arg("--config")
        .arg(config)
        .arg("doctor")
        .envs(vars.iter().copied())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    (
        out.status.success(),
        stdout + &String::from_utf8_lossy(&out.stderr),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_checks_each_part_as_the_gateway_would_use_it() {
    let llm = FakeLlm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.toml");
    // The Anthropic base is accepted with or without its /v1, as the provider does.
    for base in [llm.url(), format!("{}/v1", llm.url())] {
        let text = format!(
            "[gateway]\nhttp_listen = \"\"\n[agent]\nmax_iteratons = 3\n\
             [llm]\nprovider = \"anthropic\"\nbase_url = \"{base}\"\napi_key_env = \"SB_DOCTOR_KEY\"\n\
             [channels.telegram]\nenabled = false\n\
             [channels.discord]\ntoken_env = \"SB_DOCTOR_UNSET_DISCORD\"\n\
             [channels.slack]\nbot_token_env = \"SB_DOCTOR_SLACK_BOT\"\n\
             app_token_env = \"SB_DOCTOR_UNSET_APP\"\nsigning_secret_env = \"SB_DOCTOR_UNSET_SIGNING\"\n"
        );
        std::fs::write(&config, text).unwrap();
        let (ok, stdout) = doctor(
            &config,
            &[
                ("SB_DOCTOR_KEY", "sk-ant-doctor"),
                ("SB_DOCTOR_SLACK_BOT", "xoxb-doctor"),
            ],
        );
        // A misspelt key is worth a warning, not a failure.
        assert!(ok, "{stdout}");
        assert!(
            stdout.contains("warn config: unknown config key `agent.max_iteratons`"),
            "{stdout}"
        );
        assert!(stdout.contains("ok   llm:"), "{stdout}");
        // Slack with a bot token but no way to receive events does not start: doctor says so.
        assert!(
            stdout.contains("off  slack: neither $SB_DOCTOR_UNSET_APP (Socket Mode)"),
            "{stdout}"
        );
        assert!(
            stdout.contains("off  discord: $SB_DOCTOR_UNSET_DISCORD is not set"),
            "{stdout}"
        );
        assert!(!stdout.contains("sk-ant-doctor") && !stdout.contains("xoxb-doctor"));
        // The Messages API's model list, asked the way Anthropic wants.
        let probe = llm.requests().pop().unwrap();
        assert_eq!(probe.path, "/v1/models", "base {base}");
        assert_eq!(
            probe.headers.get("anthropic-version").map(String::as_str),
            Some("2023-06-01")
        );
        assert_eq!(
            probe.headers.get("x-api-key").map(String::as_str),
            Some("sk-ant-doctor")
        );
    }
    // The Events API alone cannot work without the HTTP listener (http_listen = "").
    let (_, stdout) = doctor(
        &config,
        &[
            // A line end from an env file is not part of the key.
            ("SB_DOCTOR_KEY", "sk-ant-doctor\r\n"),
            ("SB_DOCTOR_SLACK_BOT", "xoxb-doctor"),
            ("SB_DOCTOR_UNSET_SIGNING", "signing-doctor"),
        ],
    );
    assert!(
        stdout.contains(
            "off  slack: only $SB_DOCTOR_UNSET_SIGNING (Events API) is set, and gateway.http_listen is \"\""
        ),
        "{stdout}"
    );
    assert!(!stdout.contains("signing-doctor"), "{stdout}");
    assert!(stdout.contains("ok   llm:"), "{stdout}");
    assert_eq!(
        llm.requests()
            .pop()
            .unwrap()
            .headers
            .get("x-api-key")
            .map(String::as_str),
        Some("sk-ant-doctor")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cli_works_offline_and_through_the_admin_api() {
    let llm = FakeLlm::start().await;
    let env = env_with(&llm.base_url(), "");

    // Before any run, commands that read the store say there is none, and make none.
    for args in [
        &["sessions", "list"][..],
        &["pairing", "list"],
        &["cron", "list"],
    ] {
        let (ok, _, err) = cli(&env, args);
        assert!(!ok && err.contains("no store at"), "{args:?}: {err}");
    }
    assert!(!env.data_dir().join("store").exists(), "a store was made");

    // No gateway: `chat` runs an embedded one, `sessions` open the store directly.
    let (ok, out, err) = cli(&env, &["chat", "hello from the terminal"]);
    assert!(ok, "{err}");
    assert_eq!(out.trim(), "echo: hello from the terminal");
    let (ok, out, _) = cli(&env, &["sessions", "list"]);
    assert!(ok);
    assert!(out.contains("cli:local\t2 messages"), "{out}");
    let (ok, out, _) = cli(&env, &["sessions", "show", "cli:local"]);
    assert!(ok);
    assert!(out.contains("user: hello from the terminal"), "{out}");
    let (ok, out, _) = cli(&env, &["sessions", "show", "api:nobody"]);
    assert!(ok);
    assert_eq!(out.trim(), "no messages in api:nobody");

    // With a gateway running, the same commands go through its admin API. Its token is new
    // at every start (an old one, as a CLI may send to a stale address, opens nothing) and
    // readable by its owner only.
    let token_file = env.data_dir().join("admin.token");
    std::fs::write(&token_file, "0123456789abcdef").unwrap();
    std::fs::set_permissions(
        &token_file,
        std::os::unix::fs::PermissionsExt::from_mode(0o644),
    )
    .unwrap();
    let mut gw = env.spawn();
    gw.wait_admin(WAIT);
    let mode = std::fs::metadata(env.data_dir().join("admin.token")).unwrap();
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&mode.permissions()) & 0o777,
        0o600
    );
    let token = std::fs::read_to_string(&token_file).unwrap();
    assert!(token.len() == 64 && token != "0123456789abcdef", "{token}");
    let (ok, out, err) = cli(&env, &["chat", "through the gateway"]);
    assert!(ok, "{err}");
    assert_eq!(out.trim(), "echo: through the gateway");
    let (ok, out, err) = cli(&env, &["sessions", "reset", "cli:local"]);
    assert!(ok, "{err}");
    assert!(out.contains("reset cli:local"));
    let (ok, out, _) = cli(&env, &["sessions", "list"]);
    assert!(ok);
    assert!(!out.contains("cli:local"), "{out}");
    let (ok, _, err) = cli(&env, &["pairing", "approve", "telegram", "NOPE2345"]);
    assert!(!ok);
    assert!(err.contains("no pending pairing code"), "{err}");
    let (ok, out, _) = cli(&env, &["skills", "list"]);
    assert!(ok);
    assert!(out.contains("no skills found"), "{out}");
    gw.sigterm();
    assert!(gw.wait_exit(WAIT).0.success());
    assert_eq!(llm.request_count(), 2);
}

#[test]
fn output_to_a_reader_that_went_away_ends_quietly() {
    let env = Env::new("http://127.0.0.1:9/v1", "");
    drop(SledStore::open(&env.data_dir()).unwrap());
    // `switchboard cron list | head -0`: the reading end is closed before the first line.
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let out = Command::new(env!("CARGO_BIN_EXE_switchboard"))
        .arg("--config")
        .arg(env.config_path())
        .args(["cron", "list"])
        .stdout(writer)
        .stderr(std::process::Stdio::piped())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(141), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

/// Bytes in the store's journal files.
fn journal_bytes(env: &Env) -> u64 {
    std::fs::read_dir(env.data_dir().join("journal"))
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_asks_each_platform_whether_it_accepts_the_token() {
    use switchboard_fakes::discord::FakeDiscord;
    use switchboard_fakes::slack::{APP_TOKEN, BOT_TOKEN, FakeSlack};
    use switchboard_fakes::telegram::FakeTelegram;
    let llm = FakeLlm::start().await;
    let tg = FakeTelegram::start().await;
    let dc = FakeDiscord::start("doctor-discord-token-0123").await;
    let sl = FakeSlack::start().await;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.toml");
    let text = format!(
        "[llm]\nbase_url = \"{}\"\napi_key_env = \"\"\n\
         [channels.telegram]\nenabled = true\napi_url = \"{}\"\ntoken_env = \"SB_DR_TG\"\n\
         [channels.discord]\nenabled = true\napi_url = \"{}\"\ntoken_env = \"SB_DR_DC\"\n\
         [channels.slack]\nenabled = true\napi_url = \"{}\"\nbot_token_env = \"SB_DR_SL\"\n\
         app_token_env = \"SB_DR_APP\"\n",
        llm.base_url(),
        tg.url(),
        dc.base_url,
        sl.api_url()
    );
    std::fs::write(&config, text).unwrap();
    let (ok, out) = doctor(
        &config,
        &[
            ("SB_DR_TG", tg.token()),
            ("SB_DR_DC", "doctor-discord-token-0123"),
            ("SB_DR_SL", BOT_TOKEN),
            ("SB_DR_APP", APP_TOKEN),
        ],
    );
    assert!(ok, "{out}");
    let bot = tg.bot_username().to_string();
    for line in [
        format!("ok   telegram: the platform accepts the token (@{bot})"),
        "ok   discord: the platform accepts the token (switchboard)".to_string(),
        "ok   slack: the platform accepts the token (switchboard in Fake Team)".to_string(),
        "ok   slack app token: Slack accepts it (apps.connections.open)".to_string(),
    ] {
        assert!(out.contains(&line), "{line}\n{out}");
    }
    // Wrong tokens: refused, each named, none repeated.
    let wrong = [
        ("SB_DR_TG", "123456:wrong-telegram-token"),
        ("SB_DR_DC", "wrong-discord-token-0123"),
        ("SB_DR_SL", "xoxb-wrong-slack-token"),
        ("SB_DR_APP", "xapp-doctor-app-token"),
    ];
    let (ok, out) = doctor(&config, &wrong);
    assert!(!ok, "{out}");
    assert!(
        out.contains("FAIL telegram: the platform refused the token (HTTP 401)"),
        "{out}"
    );
    assert!(
        out.contains("FAIL discord: the platform refused the token (HTTP 401)"),
        "{out}"
    );
    assert!(
        out.contains("FAIL slack: Slack refused the bot token (invalid_auth)"),
        "{out}"
    );
    assert!(
        out.contains(
            "FAIL slack app token: Slack refused the app token in $SB_DR_APP (invalid_auth)"
        ),
        "{out}"
    );
    assert!(out.contains("4 problem(s) found"), "{out}");
    for (_, token) in wrong {
        assert!(!out.contains(token), "{token} in\n{out}");
    }
}
