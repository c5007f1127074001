//! What the API channel takes from a request, over real HTTP against the fake LLM: a long
//! conversation resent whole, the `user` field that names the session, and the JSON error
//! shape for whatever it refuses.

mod common;

use std::time::Duration;

use common::{Env, ask, base, reply_text};
use switchboard_channel::ChatKey;
use switchboard_fakes::llm::FakeLlm;

const WAIT: Duration = Duration::from_secs(20);

#[tokio::test]
async fn a_conversation_of_very_many_messages_is_answered() {
    let llm = FakeLlm::start().await;
    let env = Env::new(&llm.base_url(), "");
    let (running, shutdown) = env.start(Default::default()).await;
    // ~500k messages, ~17 MiB: a chat UI resending a long conversation. (Read into a JSON
    // tree, such a body took ~25 times its size.)
    let mut body = String::from(r#"{"model": "x", "user": "long", "messages": ["#);
    for i in 0..500_000 {
        body.push_str(&format!(r#"{{"role":"user","content":"m{i}"}},"#));
    }
    body.push_str(r#"{"role":"user","content":"and the last one?"}]}"#);
    let resp = reqwest::Client::new()
        .post(format!("{}/v1/chat/completions", base(&running)))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let v: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(reply_text(&v), "echo: and the last one?");
    // Only the last message is taken: the gateway keeps the conversation itself.
    let reqs = llm.wait_for_requests(1, WAIT).await.unwrap();
    assert!(!reqs[0].body.to_string().contains("m499999"));
    shutdown.cancel();
    running.stopped().await;
}

#[tokio::test]
async fn the_user_field_is_trimmed_and_checked() {
    let llm = FakeLlm::start().await;
    let env = Env::new(&llm.base_url(), "");
    let (running, shutdown) = env.start(Default::default()).await;
    let base = base(&running);
    // Surrounding spaces name the same session.
    ask(&base, "eve", "one").await;
    ask(&base, "  eve\t", "two").await;
    let key: ChatKey = "api:eve".parse().unwrap();
    let session = switchboard::agent::session::Session::load(&*running.shared.store, &key).unwrap();
    assert_eq!(session.messages.len(), 4, "{session:?}");
    let sessions = running
        .shared
        .store
        .scan(switchboard::store::Tree::Sessions, b"");
    let names: Vec<String> = sessions
        .unwrap()
        .iter()
        .map(|(k, _)| String::from_utf8_lossy(k).into_owned())
        .collect();
    assert_eq!(names, ["api:eve"]);
    // A line break (a fake line in `sessions list`), or a name too long to be a key.
    let http = reqwest::Client::new();
    for (user, want) in [
        (
            "eve\nFAKE api:mallory".to_string(),
            "`user` must not contain control characters",
        ),
        ("u".repeat(257), "`user` is over 256 bytes"),
    ] {
        let r = http
            .post(format!("{base}/v1/chat/completions"))
            .json(
                &serde_json::json!({"user": user, "messages": [{"role": "user", "content": "hi"}]}),
            )
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 400, "{user:?}");
        let v: serde_json::Value = r.json().await.unwrap();
        assert_eq!(v["error"]["message"], want, "{v}");
        assert_eq!(v["error"]["type"], "invalid_request_error", "{v}");
    }
    assert_eq!(llm.request_count(), 2);
    shutdown.cancel();
    running.stopped().await;
}

#[tokio::test]
async fn a_wrong_method_gets_the_json_error_shape() {
    let llm = FakeLlm::start().await;
    let env = Env::new(&llm.base_url(), "");
    let (running, shutdown) = env.start(Default::default()).await;
    let r = reqwest::Client::new()
        .get(format!("{}/v1/chat/completions", base(&running)))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 405);
    assert_eq!(r.headers()["allow"], "POST");
    let v: serde_json::Value = r.json().await.unwrap();
    assert_eq!(
        v["error"]["message"], "GET is not allowed on /v1/chat/completions",
        "{v}"
    );
    assert_eq!(v["error"]["type"], "invalid_request_error", "{v}");
    shutdown.cancel();
    running.stopped().await;
}
