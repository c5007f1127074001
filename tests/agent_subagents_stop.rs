//! Sub-agents belong to their chat: `/stop` and `/new` there stop them (no result comes
//! back), and one chat runs at most two at once; against the fake LLM.

mod agent_support;
mod common;

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use switchboard::bus::TurnHandler;
use switchboard::store::{SledStore, Store, Tree};
use switchboard_channel::ChatKey;
use switchboard_fakes::llm::{FakeLlm, Reply};
use tokio_util::task::TaskTracker;

use agent_support::{Harness, RecordingPublisher, key, msg, tool_results, turn};
use common::{Env, message_alone};

const WAIT: Duration = Duration::from_secs(20);
/// Longer than any test: a sub-agent waiting on it is still running unless stopped.
const NEVER: Duration = Duration::from_secs(300);

#[tokio::test]
async fn stop_in_a_chat_stops_its_subagent_and_no_result_ever_comes() {
    let llm = FakeLlm::start().await;
    let env = Env::new(&llm.base_url(), "");
    let (ch, running, shutdown) = env.start_with_test_channel().await;
    let tx = running.inbound();
    let chat = ChatKey::new("test", "penguins");
    llm.push(Reply::tool_call(
        "spawn",
        json!({"task": "research penguins"}),
    ));
    llm.push(Reply::text("I started a helper."));
    llm.push_for(
        "research penguins",
        Reply::text("Penguins live in the south.").with_delay(NEVER),
    );
    tx.publish(message_alone("p1", &chat, "look into penguins"))
        .await
        .unwrap();
    assert_eq!(ch.wait_for(1, WAIT).await[0].text, "I started a helper.");
    // The sub-agent is at work: its request is at the model.
    llm.wait_for_request(|r| r.last_user_text() == "research penguins", WAIT)
        .await
        .unwrap();
    // No turn runs in the chat, but its sub-agent does: that is what `/stop` stops.
    tx.publish(message_alone("p2", &chat, "/stop"))
        .await
        .unwrap();
    assert_eq!(ch.wait_for(2, WAIT).await[1].text, "Stopped.");
    // A stopping gateway waits for running sub-agents (its grace), then cuts them off and
    // keeps their result for the next start: a stopped one has neither left.
    shutdown.cancel();
    running.stopped().await;
    let sent: Vec<String> = ch.sent().into_iter().map(|m| m.text).collect();
    assert_eq!(sent, ["I started a helper.", "Stopped."]);
    let requests = llm.requests();
    assert_eq!(
        requests
            .iter()
            .filter(|r| r.last_user_text().contains("research penguins"))
            .count(),
        1,
        "the sub-agent went on"
    );
    assert!(
        !requests
            .iter()
            .any(|r| r.last_user_text().contains("[sub-agent")),
        "a sub-agent result reached the model"
    );
    drop(tx);
    let store = SledStore::open(&env.data_dir()).unwrap();
    let inbox: Vec<String> = store
        .scan(Tree::Inbox, &[])
        .unwrap()
        .into_iter()
        .map(|(_, v)| String::from_utf8_lossy(&v).into_owned())
        .collect();
    assert!(inbox.is_empty(), "left for the next start: {inbox:?}");
}

#[tokio::test]
async fn a_chat_runs_at_most_two_subagents_and_new_stops_them() {
    let h = Harness::new().await;
    let publisher = Arc::new(RecordingPublisher {
        known: vec![key()],
        ..Default::default()
    });
    let tasks = TaskTracker::new();
    let agent = h
        .agent()
        .with_publisher(publisher.clone())
        .with_tasks(tasks.clone());
    h.llm.push(Reply::tool_calls([
        ("spawn", json!({"task": "slow task one"})),
        ("spawn", json!({"task": "slow task two"})),
        ("spawn", json!({"task": "slow task three"})),
    ]));
    h.llm.push(Reply::text("Two helpers are on it."));
    for _ in 0..4 {
        h.llm
            .push_for("slow task", Reply::text("late").with_delay(NEVER));
    }
    let out = turn(&agent, &h.store, msg("t:1", "do three things")).await;
    assert_eq!(out.replies[0].text, "Two helpers are on it.");
    let parent = h
        .llm
        .wait_for_request(
            |r| r.last_user_text() == "do three things" && r.body.to_string().contains("\"tool\""),
            WAIT,
        )
        .await
        .unwrap();
    let results = tool_results(&parent.body);
    assert!(results[0].contains("started") && results[1].contains("started"));
    assert_eq!(
        results[2],
        "error: this chat already has 2 sub-agents running (at most 2); wait for one to finish"
    );
    for task in ["slow task one", "slow task two"] {
        h.llm
            .wait_for_request(|r| r.last_user_text() == task, WAIT)
            .await
            .unwrap();
    }
    // `/new`: what the old conversation set going ends, and reports nothing.
    let out = turn(&agent, &h.store, msg("t:2", "/new")).await;
    assert_eq!(out.replies[0].text, "Started a fresh conversation.");
    tasks.close();
    tokio::time::timeout(WAIT, tasks.wait())
        .await
        .expect("the chat's sub-agents stopped");
    assert!(publisher.published.lock().unwrap().is_empty());
    assert!(
        !h.llm
            .requests()
            .iter()
            .any(|r| r.last_user_text() == "slow task three")
    );
    // Their slots are free again; `/stop`'s hook stops this one.
    h.llm
        .push(Reply::tool_call("spawn", json!({"task": "slow task four"})));
    h.llm.push(Reply::text("On it."));
    turn(&agent, &h.store, msg("t:3", "one more")).await;
    let parent = h
        .llm
        .wait_for_request(
            |r| r.last_user_text() == "one more" && r.body.to_string().contains("\"tool\""),
            WAIT,
        )
        .await
        .unwrap();
    assert!(tool_results(&parent.body)[0].contains("started"));
    assert!(agent.stop_background(&key()));
    assert!(!agent.stop_background(&key()), "nothing left to stop");
    tokio::time::timeout(WAIT, tasks.wait())
        .await
        .expect("the sub-agent stopped");
    assert!(publisher.published.lock().unwrap().is_empty());
}
