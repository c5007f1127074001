//! Secrets never show in the gateway's own output: LLM errors (logged), what the model is
//! handed from a tool (which it could repeat to the user), and — with the real binary —
//! `/readyz`, the log at TRACE, and `doctor`.

mod common;
mod secrets_support;

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use common::platform::{self, env_with};
use common::{Env, ask, reply_text};
use secrets_support::{Quoting, WAIT, assert_clean, logs, quote_head};
use switchboard::llm::resilient::Resilient;
use switchboard::llm::{ChatMessage, LlmProvider, LlmRequest, Role, anthropic, openai};
use switchboard_fakes::llm::{FakeLlm, Reply};

/// A streamed answer whose only event is an error quoting the key, as providers (and the
/// proxies in front of them) word a refused key: HTTP 200, then the error mid-stream.
fn error_event(key: &'static str, anthropic: bool) -> impl Fn(&str) -> (String, String) {
    move |_| {
        let message = format!("Incorrect API key provided: {key}");
        let body = if anthropic {
            let data = serde_json::json!({"type": "error",
                "error": {"type": "authentication_error", "message": message}});
            format!("event: error\ndata: {data}\n\n")
        } else {
            let data =
                serde_json::json!({"error": {"message": message, "type": "invalid_request_error"}});
            format!("data: {data}\n\n")
        };
        ("text/event-stream".into(), body)
    }
}

#[tokio::test]
async fn llm_error_events_never_show_the_key() {
    logs();
    let req = LlmRequest {
        model: "m".into(),
        messages: vec![ChatMessage::new(Role::User, "hi")],
        max_tokens: 10,
        ..Default::default()
    };
    for (key, is_anthropic) in [
        ("sk-proj-openaiSecretKey0123456789", false),
        ("sk-ant-api03-anthropicSecretKey0123", true),
    ] {
        let server = Quoting::start(200, error_event(key, is_anthropic)).await;
        let t = Duration::from_secs(10);
        let provider: Arc<dyn LlmProvider> = if is_anthropic {
            Arc::new(anthropic::Anthropic::new(&server.url, Some(key.into()), t).unwrap())
        } else {
            Arc::new(openai::OpenAi::new(&server.url, Some(key.into()), t).unwrap())
        };
        // No retries: the failure is logged ("giving up on this model: …") and returned.
        let llm = Resilient::new(provider, Vec::new(), 0);
        let err = llm.complete(&req, None).await.expect_err("an error event");
        assert!(err.to_string().contains("Incorrect API key"), "{err}");
        assert_clean("the LLM error", &err.to_string(), &[key]);
        assert!(logs().contains("giving up on this model"));
        assert_clean("the logs", &logs(), &[key]);
    }
}

#[tokio::test]
async fn a_secret_in_a_tool_result_never_reaches_the_model_or_the_user() {
    let llm = FakeLlm::start().await;
    let env = Env::new(&llm.base_url(), "");
    let (running, shutdown) = env.start(Default::default()).await;
    let admin_token = std::fs::read_to_string(env.data_dir().join("admin.token")).unwrap();
    // The data dir is out of the commands' reach; say a copy of the token was left in the
    // workspace. The model reads it with a command, then repeats what the command printed.
    let workspace = env.dir.path().join("workspace");
    std::fs::create_dir_all(&workspace).unwrap();
    std::fs::write(workspace.join("notes.txt"), &admin_token).unwrap();
    llm.push(Reply::tool_call(
        "exec",
        serde_json::json!({"command": "cat notes.txt"}),
    ));
    llm.set_responder(|body| {
        let tool = body["messages"].as_array().and_then(|m| {
            m.iter()
                .rev()
                .find(|m| m["role"] == "tool")
                .and_then(|m| m["content"].as_str())
        });
        Reply::text(format!(
            "The command printed: {}",
            tool.unwrap_or("nothing")
        ))
    });
    let base = format!("http://{}", running.http_addr.unwrap());
    let reply = reply_text(&ask(&base, "alice", "what is in notes.txt?").await);
    assert!(reply.contains("[redacted]"), "{reply}");
    assert_clean("the reply", &reply, &[admin_token.trim()]);
    let reqs = llm.wait_for_requests(2, WAIT).await.unwrap();
    assert_clean(
        "the LLM request",
        &reqs[1].body.to_string(),
        &[admin_token.trim()],
    );
    shutdown.cancel();
    running.stopped().await;
}

#[tokio::test]
async fn a_secret_the_model_writes_is_redacted_in_a_stream_and_sent_once() {
    // As the config's `api_key_env` registers the LLM key.
    let key = "sk-fake-secret-0123456789abcdef";
    switchboard_channel::redact::register(key);
    let llm = FakeLlm::start().await;
    // Pieces of 4: the key arrives split across eight of them.
    llm.set_stream_chunk_chars(4);
    let env = Env::new(&llm.base_url(), "");
    let (running, shutdown) = env.start(Default::default()).await;
    let base = format!("http://{}", running.http_addr.unwrap());
    let answer = format!("Here it is: {key} done");
    for stream in [false, true] {
        llm.push(Reply::text(answer.clone()));
        let text = if stream {
            let body = common::ask_stream(&base, "mallory", "the key?")
                .await
                .text()
                .await
                .unwrap();
            assert!(body.trim_end().ends_with("data: [DONE]"), "{body}");
            // No piece of it either: the key's second half, which no word of the answer has.
            assert_clean("the stream", &body, &[key, "0123456789abcdef"]);
            common::sse_text(&body)
        } else {
            reply_text(&ask(&base, "mallory", "the key?").await)
        };
        assert_eq!(text, "Here it is: [redacted] done", "stream: {stream}");
    }
    // Nor is it kept in the chat's history (`sessions show`, the admin API).
    let sessions = running
        .shared
        .store
        .scan(switchboard::store::Tree::Sessions, b"")
        .unwrap();
    let kept: String = sessions
        .iter()
        .map(|(_, v)| String::from_utf8_lossy(v).into_owned())
        .collect();
    assert!(kept.contains("Here it is: [redacted] done"), "{kept}");
    assert_clean("the stored session", &kept, &[key]);
    // A streamed answer with no secret, ending in what could start one, comes whole.
    llm.push(Reply::text("Keys begin with sk"));
    let body = common::ask_stream(&base, "mallory", "how do keys begin?")
        .await
        .text()
        .await
        .unwrap();
    assert_eq!(common::sse_text(&body), "Keys begin with sk");
    shutdown.cancel();
    running.stopped().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_keeps_tokens_out_of_readyz_its_log_and_doctor() {
    let (tg, dc, bot, app, signing, key, api) = (
        "7100001:AAHbinaryTelegramSecret0123456789abcd",
        "MTA5binary-discord-token.GhXyZ.abcdefghijklmnop",
        "xoxb-1111-2222-binarySlackBotSecret",
        "xapp-1-A0-3333-binarySlackAppSecret",
        "binarySlackSigningSecret0123",
        "sk-proj-binaryLlmSecretKey0123456789",
        "binaryApiTokenSecret0123456789",
    );
    let secrets = [tg, dc, bot, app, signing, key, api];
    // Every platform and the LLM point at servers that quote the request back in an error.
    let tg_server = Quoting::start(404, quote_head).await;
    let dc_server = Quoting::start(404, quote_head).await;
    let sl_server = Quoting::start(200, quote_head).await;
    let llm_server = Quoting::start(401, quote_head).await;
    let tables = format!(
        "[channels.telegram]\nenabled = true\napi_url = \"{}\"\npacing = false\n\
         [channels.discord]\nenabled = true\napi_url = \"{}\"\n\
         [channels.slack]\nenabled = true\napi_url = \"{}/api\"\n",
        tg_server.url, dc_server.url, sl_server.url
    );
    let env = env_with(&llm_server.url, &tables);
    let vars = [
        ("TELEGRAM_BOT_TOKEN", tg),
        ("DISCORD_BOT_TOKEN", dc),
        ("SLACK_BOT_TOKEN", bot),
        ("SLACK_APP_TOKEN", app),
        ("SLACK_SIGNING_SECRET", signing),
        ("SB_TEST_LLM_KEY", key),
        ("SWITCHBOARD_API_TOKEN", api),
    ];
    let log_path = env.dir.path().join("trace.log");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_switchboard"));
    cmd.arg("--config")
        .arg(env.config_path())
        .arg("run")
        .env("RUST_LOG", "trace")
        .envs(vars)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log_path).unwrap());
    let mut child = Guard(cmd.spawn().expect("spawn switchboard"));

    // Each adapter failed at least once (a second call comes after the first was logged).
    for server in [&tg_server, &dc_server, &sl_server] {
        server.wait_requests(2).await;
    }
    let ready = platform::poll_until(WAIT, "/readyz naming both failures", || async {
        let (status, body) = platform::readyz(&env).await?;
        let body = body.to_string();
        (status == 503 && body.contains("preflight failed") && body.contains("getMe failed"))
            .then_some(body)
    })
    .await;
    assert_clean("/readyz", &ready, &secrets);
    let _ = child.0.kill();
    let _ = child.0.wait();
    let log = std::fs::read_to_string(&log_path).unwrap();
    assert!(log.contains("slack auth.test failed"), "{log}");
    assert!(
        !log.contains("SB_TEST_LLM_KEY is not set"),
        "the key is set"
    );
    assert_clean("the gateway's log", &log, &secrets);

    let doctor = Command::new(env!("CARGO_BIN_EXE_switchboard"))
        .arg("--config")
        .arg(env.config_path())
        .arg("doctor")
        .env("RUST_LOG", "trace")
        .envs(vars)
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&doctor.stdout).into_owned()
        + &String::from_utf8_lossy(&doctor.stderr);
    assert!(out.contains("FAIL llm"), "{out}");
    assert_clean("doctor", &out, &secrets);
}

/// Kills the child when the test fails before it does.
struct Guard(std::process::Child);

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
