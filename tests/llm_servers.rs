//! The OpenAI-compatible provider (and Anthropic's) against what other servers of the
//! family answer on the wire: Mistral's refusals, llama.cpp's context overflow in its
//! three shapes, and errors that come inside a stream.

mod agent_support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_support::read_file_request;
use serde_json::{Value, json};
use switchboard::llm::openai::OpenAi;
use switchboard::llm::resilient::{Resilient, SleepFn};
use switchboard::llm::{LlmError, LlmProvider, LlmRequest};
use switchboard_fakes::llm::{FakeLlm, Reply};

const SECS_10: Duration = Duration::from_secs(10);

fn request(model: &str) -> LlmRequest {
    read_file_request(model, "what is in notes.md?")
}

fn openai(llm: &FakeLlm) -> OpenAi {
    OpenAi::new(&llm.base_url(), Some("sk-test".into()), SECS_10).unwrap()
}

type Sleeps = Arc<Mutex<Vec<Duration>>>;

/// `OpenAi` wrapped in retries whose waits are recorded, not slept.
fn resilient(llm: &FakeLlm) -> (Resilient, Sleeps) {
    let sleeps: Sleeps = Arc::default();
    let s = sleeps.clone();
    let sleep: SleepFn = Arc::new(move |d| {
        s.lock().unwrap().push(d);
        Box::pin(async {})
    });
    let p = Resilient::new(Arc::new(openai(llm)), Vec::new(), 8).with_sleep(sleep);
    (p, sleeps)
}

#[tokio::test]
async fn a_server_that_forbids_stream_options_is_asked_again_without_them_at_once() {
    let llm = FakeLlm::start().await;
    llm.refuse_stream_options("mistral-large-latest");
    let (p, sleeps) = resilient(&llm);
    llm.push(Reply::text("Bonjour"));
    let r = p
        .complete(&request("mistral-large-latest"), None)
        .await
        .unwrap();
    assert_eq!(r.text, "Bonjour");
    let sent: Vec<Value> = llm.requests().into_iter().map(|r| r.body).collect();
    assert_eq!(sent.len(), 2, "refused once, then sent again");
    assert_eq!(sent[0]["stream_options"], json!({"include_usage": true}));
    assert!(sent[1].get("stream_options").is_none(), "{}", sent[1]);
    assert_eq!(sent[1]["stream"], true);
    assert!(sleeps.lock().unwrap().is_empty(), "not a failure: no wait");

    // Learnt for the model: asked the right way from then on; other models unchanged.
    llm.clear();
    p.complete(&request("mistral-large-latest"), None)
        .await
        .unwrap();
    p.complete(&request("gpt-4o-mini"), None).await.unwrap();
    let sent: Vec<Value> = llm.requests().into_iter().map(|r| r.body).collect();
    assert_eq!(sent.len(), 2);
    assert!(sent[0].get("stream_options").is_none(), "{}", sent[0]);
    assert_eq!(sent[1]["stream_options"], json!({"include_usage": true}));

    // A 400 naming it (older Azure, other proxies) is learnt the same way; a 400 that
    // does not name it is still a refusal.
    llm.clear();
    llm.push(Reply::error(
        400,
        json!({"error": {"message": "Unrecognized request argument supplied: stream_options",
            "type": "invalid_request_error", "param": null, "code": null}}),
    ));
    p.complete(&request("azure-gpt"), None).await.unwrap();
    let sent = llm.requests();
    assert_eq!(sent.len(), 2);
    assert!(sent[1].body.get("stream_options").is_none());
    llm.push(Reply::error(
        400,
        json!({"error": {"message": "Invalid model", "type": "invalid_request_error"}}),
    ));
    let e = p.complete(&request("other"), None).await.unwrap_err();
    assert!(
        matches!(
            e,
            LlmError::Refused {
                status: Some(400),
                ..
            }
        ),
        "{e:?}"
    );
}
