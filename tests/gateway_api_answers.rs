//! The API channel's answers over real HTTP against the fake LLM, whatever the turn does: a
//! stream read late gets every word, a stopped stream says so after what came, a turn that
//! says nothing after its tools answers at once.

mod common;

use std::time::Duration;

use common::{Env, ask, ask_stream, base, reply_text, sse_text};
use futures_util::StreamExt;
use switchboard_fakes::llm::{FakeLlm, Reply};

const WAIT: Duration = Duration::from_secs(20);

#[tokio::test]
async fn a_streamed_answer_arrives_whole_and_every_request_is_answered() {
    let llm = FakeLlm::start().await;
    llm.set_stream_chunk_chars(8);
    let env = Env::new(&llm.base_url(), "");
    let (running, shutdown) = env.start(Default::default()).await;
    let base = base(&running);
    let turns = || {
        running
            .shared
            .metrics
            .turns
            .load(std::sync::atomic::Ordering::Relaxed)
    };
    // A reader that reads nothing until the turn is over still gets every word.
    let long: String = (0..60_000).map(|i| format!("w{i} ")).collect();
    llm.push(Reply::text(long.clone()));
    let resp = ask_stream(&base, "slow", "a long one").await;
    common::platform::poll_until(WAIT, "the turn to end", || async {
        (turns() == 1).then_some(())
    })
    .await;
    let streamed = sse_text(&resp.text().await.unwrap());
    assert_eq!(streamed.len(), long.len());
    assert!(streamed == long, "the streamed answer differs");

    // /stop while an answer streams: what came, then "Stopped.".
    let slow = "partial ".repeat(400);
    llm.push(Reply::text(slow.clone()).with_chunk_delay(Duration::from_millis(50)));
    let resp = ask_stream(&base, "stopper", "go on").await;
    let mut body = String::new();
    let mut s = resp.bytes_stream();
    while !body.contains("partial") {
        let chunk = tokio::time::timeout(WAIT, s.next()).await.unwrap();
        let chunk = chunk.unwrap_or_else(|| panic!("the stream ended: {body}"));
        body.push_str(&String::from_utf8_lossy(&chunk.unwrap()));
    }
    assert_eq!(
        reply_text(&ask(&base, "stopper", "/stop").await),
        "Stopped."
    );
    while let Some(chunk) = tokio::time::timeout(WAIT, s.next()).await.unwrap() {
        body.push_str(&String::from_utf8_lossy(&chunk.unwrap()));
    }
    let text = sse_text(&body);
    let (came, note) = text.rsplit_once("\n\n").unwrap_or_else(|| panic!("{text}"));
    assert!(!came.is_empty() && slow.starts_with(came), "{text}");
    assert_eq!(note, "Stopped.");

    // A turn whose tools did the work and that says nothing after them answers at once,
    // with nothing, streamed or not.
    for stream in [false, true] {
        llm.push(Reply::tool_call(
            "list_dir",
            serde_json::json!({"path": "."}),
        ));
        llm.push(Reply::text(""));
        let resp = tokio::time::timeout(
            WAIT,
            reqwest::Client::new()
                .post(format!("{base}/v1/chat/completions"))
                .json(
                    &serde_json::json!({"model": "x", "stream": stream, "user": "quiet",
                    "messages": [{"role": "user", "content": "tidy up"}]}),
                )
                .send(),
        )
        .await
        .unwrap()
        .unwrap();
        assert_eq!(resp.status(), 200);
        let body = tokio::time::timeout(WAIT, resp.text())
            .await
            .unwrap()
            .unwrap();
        if stream {
            assert!(body.trim_end().ends_with("data: [DONE]"), "{body}");
            assert_eq!(sse_text(&body), "");
        } else {
            let v: serde_json::Value = serde_json::from_str(&body).unwrap();
            assert_eq!(v["choices"][0]["message"]["content"], "", "{body}");
            assert_eq!(v["choices"][0]["finish_reason"], "stop");
        }
    }
    shutdown.cancel();
    running.stopped().await;
}
