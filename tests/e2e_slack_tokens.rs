//! End to end: the real `switchboard` binary against the fake Slack when Slack's tokens go
//! wrong — an app token refused while the Events API is also set up, an app uninstalled
//! (or its tokens revoked) while the gateway runs, and `switchboard doctor` checking the
//! app token. Asserts what crossed the wire (HTTP statuses, `/readyz`, posts, the doctor's
//! report) and that no token reaches the log or the output.

mod common;

use std::process::Command;
use std::time::Duration;

use common::platform::{self, slack_fakes as fakes};
use common::{Env, GatewayProcess};
use switchboard_fakes::slack::events::{
    app_mention, app_uninstalled, event_callback_body, now_timestamp, signed_headers,
};
use switchboard_fakes::slack::{APP_TOKEN, BOT_TOKEN};

const WAIT: Duration = Duration::from_secs(15);
const SECRET: &str = "e2e-tokens-signing-secret";
const CHANNEL: &str = "C0CHAN";
const USER: &str = "U0ALICE";
const REFUSED_APP_TOKEN: &str = "xapp-refused-e2e-token";

/// POST `body` to the gateway's `/slack/events`, signed as Slack does: status and body.
async fn post_event(env: &Env, body: &str) -> (u16, String) {
    let headers = signed_headers(SECRET, &now_timestamp(), body);
    let resp = reqwest::Client::new()
        .post(format!("{}/slack/events", platform::http_base(env)))
        .headers(headers)
        .body(body.to_string())
        .send()
        .await
        .expect("POST /slack/events");
    let status = resp.status().as_u16();
    (status, resp.text().await.unwrap_or_default())
}

/// Until `/readyz` answers `status`; its body.
async fn readyz_until(env: &Env, status: u16) -> serde_json::Value {
    platform::poll_until(WAIT, &format!("/readyz {status}"), || async {
        platform::readyz(env)
            .await
            .filter(|r| r.0 == status)
            .map(|r| r.1)
    })
    .await
}

fn spawn(env: &Env, app_token: &str) -> GatewayProcess {
    let vars = [
        ("SLACK_BOT_TOKEN", BOT_TOKEN),
        ("SLACK_APP_TOKEN", app_token),
        ("SLACK_SIGNING_SECRET", SECRET),
    ];
    platform::spawn_ready(env, &vars, WAIT)
}

/// Both intakes set up, as the README suggests while switching over, and Slack refuses the
/// app token: Socket Mode is off, the Events API still takes signed events in and they are
/// answered; the log names the variable to fix, never its value.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_app_token_leaves_the_events_api_answering() {
    let (_llm, slack, env) = fakes().await;
    let _gw = spawn(&env, REFUSED_APP_TOKEN);
    readyz_until(&env, 200).await;
    let ts = "1700000050.000100";
    let body = event_callback_body(
        "Ev0APPTOKEN",
        app_mention(CHANNEL, USER, "<@UBOT> are you there?", ts),
    );
    let (status, answer) = post_event(&env, &body).await;
    assert_eq!(status, 200, "{answer}; log:\n{}", platform::logs(&env));
    let post = tokio::time::timeout(WAIT, slack.wait_for_posts(1))
        .await
        .expect("answered")
        .remove(0);
    assert_eq!(
        (post.channel.as_str(), post.thread_ts.as_deref()),
        (CHANNEL, Some(ts))
    );
    assert!(post.text.ends_with("are you there?"), "{}", post.text);
    assert_eq!(slack.connections(), 0, "no socket with a refused token");
    let log = platform::logs(&env);
    assert!(
        log.contains("slack app token ($SLACK_APP_TOKEN) refused by apps.connections.open"),
        "{log}"
    );
    assert!(
        !log.contains(REFUSED_APP_TOKEN) && !log.contains(BOT_TOKEN),
        "{log}"
    );
}

/// Slack says the app was uninstalled from the workspace: the Events API answers 200, the
/// log says at error level what to do, and `/readyz` reports Slack not ready, saying why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_uninstalled_app_is_logged_and_leaves_slack_not_ready() {
    let (_llm, _slack, env) = fakes().await;
    let _gw = spawn(&env, APP_TOKEN);
    readyz_until(&env, 200).await;
    let body = event_callback_body("Ev0UNINSTALL", app_uninstalled());
    let (status, answer) = post_event(&env, &body).await;
    assert_eq!(status, 200, "{answer}");
    let ready = readyz_until(&env, 503).await;
    let why = ready["not_ready"]["slack"].as_str().unwrap_or_default();
    assert!(
        why.starts_with("app_uninstalled: ")
            && why.contains("reinstall the app, put its new bot token in $SLACK_BOT_TOKEN"),
        "{ready}"
    );
    let log = platform::logs(&env);
    let line = log
        .lines()
        .find(|l| l.contains("the app was uninstalled or its bot token revoked"))
        .unwrap_or_else(|| panic!("not logged:\n{log}"));
    assert!(line.contains("ERROR"), "{line}");
    assert!(
        !log.contains(BOT_TOKEN) && !log.contains(APP_TOKEN),
        "{log}"
    );
}

/// `switchboard doctor` with the gateway's environment: what it printed, and whether it
/// passed.
fn doctor(env: &Env, vars: &[(&str, &str)]) -> (bool, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_switchboard"));
    cmd.arg("--config").arg(env.config_path()).arg("doctor");
    for var in ["SLACK_BOT_TOKEN", "SLACK_APP_TOKEN", "SLACK_SIGNING_SECRET"] {
        cmd.env_remove(var);
    }
    let out = cmd.envs(vars.iter().copied()).output().expect("run doctor");
    let said = String::from_utf8_lossy(&out.stdout).into_owned();
    (
        out.status.success(),
        said + &String::from_utf8_lossy(&out.stderr),
    )
}

/// `doctor` asks Slack about the app token too (`apps.connections.open`, at the configured
/// API base, with that token): ok when Slack takes it, a failure with Slack's error code —
/// never the token — when it does not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_checks_the_slack_app_token() {
    let (_llm, slack, env) = fakes().await;
    let (_, said) = doctor(
        &env,
        &[
            ("SLACK_BOT_TOKEN", BOT_TOKEN),
            ("SLACK_APP_TOKEN", APP_TOKEN),
        ],
    );
    assert!(
        said.contains("ok   slack: the platform accepts the token"),
        "{said}"
    );
    assert!(
        said.contains("ok   slack app token: Slack accepts it (apps.connections.open)"),
        "{said}"
    );
    let (passed, said) = doctor(
        &env,
        &[
            ("SLACK_BOT_TOKEN", BOT_TOKEN),
            ("SLACK_APP_TOKEN", REFUSED_APP_TOKEN),
            ("SLACK_SIGNING_SECRET", SECRET),
        ],
    );
    assert!(!passed, "{said}");
    assert!(
        said.contains(
            "FAIL slack app token: Slack refused the app token in $SLACK_APP_TOKEN \
             (invalid_auth); until it is fixed, events come only over the Events API \
             ($SLACK_SIGNING_SECRET)"
        ),
        "{said}"
    );
    for token in [BOT_TOKEN, APP_TOKEN, REFUSED_APP_TOKEN, SECRET] {
        assert!(!said.contains(token), "{said}");
    }
    // Asked at the configured API base, each time with the app token in question.
    assert_eq!(slack.call_count("apps.connections.open"), 2);
    assert_eq!(slack.call_count("auth.test"), 2);
}
