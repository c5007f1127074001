//! Turns running when the gateway stops: they finish within the stop's grace (their replies
//! go out), or their progress is kept and the next start goes on from it, so a tool that
//! already ran is not run again. (A crash mid-turn: `gateway_process.rs`.)

mod common;

use std::time::Duration;

use common::{Env, TestChannel, message};
use serde_json::{Value, json};
use switchboard::agent::resume;
use switchboard::agent::session::Session;
use switchboard::store::Tree;
use switchboard_channel::{ChatKey, InboundMessage};
use switchboard_fakes::llm::{FakeLlm, Reply};

const WAIT: Duration = Duration::from_secs(30);

fn texts(ch: &TestChannel) -> Vec<String> {
    ch.sent().into_iter().map(|m| m.text).collect()
}

fn messages(body: &Value) -> Vec<Value> {
    body["messages"].as_array().cloned().unwrap_or_default()
}

#[tokio::test]
async fn a_turn_running_at_the_stop_finishes_within_the_grace_and_its_reply_goes_out() {
    let llm = FakeLlm::start().await;
    llm.push(Reply::text("finished in time").with_delay(Duration::from_millis(500)));
    let env = Env::new(&llm.base_url(), "");
    let (ch, running, shutdown) = env.start_with_test_channel().await;
    let store = running.shared.store.clone();
    let key = ChatKey::new("test", "grace");
    running
        .inbound()
        .publish(message("g-1", &key, "quick one"))
        .await
        .unwrap();
    llm.wait_for_requests(1, WAIT).await.unwrap();
    shutdown.cancel();
    running.stopped().await;
    assert_eq!(texts(&ch), ["finished in time"]);
    // Answered and done with: nothing for the next start to run or send again.
    assert_eq!(store.len(Tree::Inbox), 0);
    assert_eq!(store.len(Tree::Outbox), 0);
    let session = Session::load(store.as_ref(), &key).unwrap();
    assert_eq!(session.messages.len(), 2);
    assert!(!resume::find(store.as_ref(), &key, &[]).unwrap().kept);
}

#[tokio::test]
async fn a_turn_interrupted_after_its_grace_goes_on_at_the_next_start_without_repeating_tools() {
    let llm = FakeLlm::start().await;
    let env = Env::new(&llm.base_url(), "");
    let ran = env.dir.path().join("workspace").join("ran.txt");
    llm.push(Reply::tool_call(
        "exec",
        json!({"command": "echo ran >> ran.txt"}),
    ));
    // Still running when the grace is over: cut off.
    llm.push(Reply::tool_call("exec", json!({"command": "sleep 60"})));
    let (ch, running, shutdown) = env.start_with_turn_grace(Duration::from_millis(200)).await;
    let store = running.shared.store.clone();
    let key = ChatKey::new("test", "resume");
    running
        .inbound()
        .publish(message("r-1", &key, "run the script"))
        .await
        .unwrap();
    llm.wait_for_requests(2, WAIT).await.unwrap();
    shutdown.cancel();
    running.stopped().await;
    assert_eq!(std::fs::read_to_string(&ran).unwrap(), "ran\n");
    assert!(texts(&ch).is_empty(), "{:?}", texts(&ch));
    assert_eq!(
        store.len(Tree::Inbox),
        1,
        "the message stays to be answered"
    );
    let session = Session::load(store.as_ref(), &key).unwrap();
    assert!(session.messages.is_empty(), "{:?}", session.messages);
    let asked = message("r-1", &key, "run the script");
    let found = resume::find(store.as_ref(), &key, &[asked]).unwrap();
    let kept = found.resume.expect("the turn's progress is kept");
    assert_eq!(kept.ids, ["r-1"]);
    assert_eq!(kept.user.content, "run the script");
    assert_eq!(kept.iteration, 2);
    let roles: Vec<_> = kept.produced.iter().map(|m| m.role).collect();
    use switchboard::llm::Role::{Assistant, Tool};
    assert_eq!(roles, [Assistant, Tool, Assistant, Tool]);
    // The call cut off has no result of its own: the model is told to check it.
    assert_eq!(kept.produced[3].content, resume::UNKNOWN);
    drop(store);

    // The next start goes on from there: the model sees what was done, nothing runs twice.
    llm.push(Reply::text("all done"));
    let (ch, running, shutdown) = env.start_with_test_channel().await;
    assert_eq!(ch.wait_for(1, WAIT).await[0].text, "all done");
    let reqs = llm.requests();
    assert_eq!(reqs.len(), 3);
    let sent = messages(&reqs[2].body);
    let users = sent
        .iter()
        .filter(|m| m["role"] == "user" && m["content"] == "run the script")
        .count();
    assert_eq!(users, 1, "{sent:?}");
    let results: Vec<&str> = sent
        .iter()
        .filter(|m| m["role"] == "tool")
        .filter_map(|m| m["content"].as_str())
        .collect();
    assert_eq!(results.len(), 2, "{sent:?}");
    assert_eq!(results[1], resume::UNKNOWN);
    let steering = sent
        .iter()
        .filter(|m| m["role"] == "system")
        .filter_map(|m| m["content"].as_str())
        .any(|t| t.contains("The gateway restarted while you were working"));
    assert!(steering, "{sent:?}");
    assert_eq!(std::fs::read_to_string(&ran).unwrap(), "ran\n");
    let store = running.shared.store.clone();
    shutdown.cancel();
    running.stopped().await;
    assert_eq!(store.len(Tree::Inbox), 0);
    let session = Session::load(store.as_ref(), &key).unwrap();
    assert!(!resume::find(store.as_ref(), &key, &[]).unwrap().kept);
    let roles: Vec<_> = session.messages.iter().map(|m| m.role).collect();
    use switchboard::llm::Role::User;
    assert_eq!(roles, [User, Assistant, Tool, Assistant, Tool, Assistant]);
}

#[tokio::test]
async fn messages_that_came_after_an_unfinished_turn_join_its_next_run_after_its_steps() {
    let llm = FakeLlm::start().await;
    let env = Env::new(&llm.base_url(), "");
    llm.push(Reply::tool_call(
        "exec",
        json!({"command": "echo ran >> ran.txt"}),
    ));
    llm.push(Reply::text("too late").with_delay(Duration::from_secs(60)));
    let (_, running, shutdown) = env.start_with_turn_grace(Duration::ZERO).await;
    let key = ChatKey::new("test", "joined");
    let inbound = running.inbound();
    inbound
        .publish(message("j-1", &key, "run the script"))
        .await
        .unwrap();
    llm.wait_for_requests(2, WAIT).await.unwrap();
    // Waits behind the running turn; at the next start it joins that turn's rest.
    inbound
        .publish(message("j-2", &key, "and tell me when done"))
        .await
        .unwrap();
    drop(inbound);
    shutdown.cancel();
    running.stopped().await;

    llm.push(Reply::text("done, and telling you"));
    let (ch, running, shutdown) = env.start_with_test_channel().await;
    assert_eq!(ch.wait_for(1, WAIT).await[0].text, "done, and telling you");
    let sent = messages(&llm.requests()[2].body);
    let tail: Vec<(&str, &str)> = sent
        .iter()
        .skip_while(|m| m["content"] != "run the script")
        .map(|m| {
            (
                m["role"].as_str().unwrap_or_default(),
                m["content"].as_str().unwrap_or_default(),
            )
        })
        .collect();
    // (A user message never follows a tool result on the wire: strict chat templates,
    // Mistral's, refuse that order.)
    assert_eq!(tail.len(), 5, "{sent:?}");
    assert_eq!(tail[1].0, "assistant");
    assert_eq!(tail[2].0, "tool");
    assert_eq!(tail[3], ("assistant", "(no answer)"));
    assert_eq!(tail[4], ("user", "and tell me when done"));
    let store = running.shared.store.clone();
    shutdown.cancel();
    running.stopped().await;
    assert_eq!(store.len(Tree::Inbox), 0);
    assert_eq!(
        Session::load(store.as_ref(), &key).unwrap().messages.len(),
        5
    );
}

#[tokio::test]
async fn sub_agents_results_are_kept_across_a_stop_and_one_cut_off_says_so() {
    let llm = FakeLlm::start().await;
    let env = Env::new(&llm.base_url(), "");
    llm.push(Reply::tool_calls([
        ("spawn", json!({"task": "quick task"})),
        ("spawn", json!({"task": "slow task"})),
    ]));
    llm.push(Reply::text("I started two helpers."));
    // One finishes within the stop's grace, the other does not.
    let quick = Reply::text("penguins are birds").with_delay(Duration::from_millis(300));
    llm.push_for("quick task", quick);
    llm.push_for(
        "slow task",
        Reply::text("never").with_delay(Duration::from_secs(60)),
    );
    let (ch, running, shutdown) = env.start_with_turn_grace(Duration::from_secs(2)).await;
    let store = running.shared.store.clone();
    let key = ChatKey::new("test", "helpers");
    running
        .inbound()
        .publish(message("h-1", &key, "look into penguins"))
        .await
        .unwrap();
    assert_eq!(ch.wait_for(1, WAIT).await[0].text, "I started two helpers.");
    llm.wait_for_requests(4, WAIT).await.unwrap();
    shutdown.cancel();
    running.stopped().await;
    // Both results wait in the inbox for the next start.
    let kept: Vec<String> = store
        .scan(Tree::Inbox, &[])
        .unwrap()
        .iter()
        .map(|(_, v)| serde_json::from_slice::<InboundMessage>(v).unwrap().text)
        .collect();
    assert_eq!(kept.len(), 2, "{kept:?}");
    assert!(
        kept.iter().any(|t| t.contains("penguins are birds")),
        "{kept:?}"
    );
    assert!(
        kept.iter()
            .any(|t| t.contains("slow task") && t.contains("the gateway restarted")),
        "{kept:?}"
    );
    drop(store);

    // The next start tells the chat (the model echoes what it was given).
    let (ch, running, shutdown) = env.start_with_test_channel().await;
    let told: Vec<String> = ch
        .wait_for(2, WAIT)
        .await
        .into_iter()
        .map(|m| m.text)
        .collect();
    assert!(
        told.iter().any(|t| t.contains("penguins are birds")),
        "{told:?}"
    );
    assert!(
        told.iter().any(|t| t.contains("the gateway restarted")),
        "{told:?}"
    );
    shutdown.cancel();
    running.stopped().await;
}

#[tokio::test]
async fn a_turn_of_joined_messages_goes_on_after_a_crash_too() {
    let llm = FakeLlm::start().await;
    let env = Env::new(&llm.base_url(), "");
    let ran = env.dir.path().join("workspace").join("ran.txt");
    llm.push(Reply::tool_call(
        "exec",
        json!({"command": "echo ran >> ran.txt"}),
    ));
    llm.push(Reply::text("too late").with_delay(Duration::from_secs(60)));
    let (_, running, shutdown) = env.start_with_turn_grace(Duration::ZERO).await;
    let store = running.shared.store.clone();
    let key = ChatKey::new("test", "crashed");
    // Two messages in one delivery: one turn.
    running
        .inbound()
        .publish_many(vec![
            message("c-1", &key, "run the script"),
            message("c-2", &key, "and tell me"),
        ])
        .await
        .unwrap();
    llm.wait_for_requests(2, WAIT).await.unwrap();
    shutdown.cancel();
    running.stopped().await;
    // As a crash leaves it: no clean stop noted, so the restart counts the first message.
    let mut crash = switchboard::store::Batch::default();
    crash.delete(Tree::Meta, b"clean_stop".to_vec());
    store.apply(crash).unwrap();
    drop(store);

    llm.push(Reply::text("ran it, as you asked"));
    let (ch, running, shutdown) = env.start_with_test_channel().await;
    assert_eq!(ch.wait_for(1, WAIT).await[0].text, "ran it, as you asked");
    let sent = messages(&llm.requests()[2].body);
    let results = sent.iter().filter(|m| m["role"] == "tool").count();
    assert_eq!(results, 1, "the model sees the step it took: {sent:?}");
    assert_eq!(std::fs::read_to_string(&ran).unwrap(), "ran\n");
    assert_eq!(llm.request_count(), 3);
    shutdown.cancel();
    running.stopped().await;
}
