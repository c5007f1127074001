//! Skills (precedence, gating, `always` inlining, `read_skill`) and sub-agents (result back
//! to the parent chat; no `spawn` or `message` inside; a failure told in brief), against
//! the fake LLM.

mod agent_support;

use std::sync::Arc;
use std::time::Duration;

use agent_support::*;
use serde_json::json;
use switchboard::agent::list_skills;
use switchboard_channel::{Origin, SystemOrigin};
use switchboard_fakes::llm::Reply;

fn write_skill(dir: &std::path::Path, name: &str, front: &str, body: &str) {
    let d = dir.join(name);
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(
        d.join("SKILL.md"),
        format!("---\nname: {name}\n{front}---\n{body}\n"),
    )
    .unwrap();
}

#[tokio::test]
async fn skills_precedence_gating_and_always_inlining() {
    let h = Harness::new().await;
    let bundled = h.dir.path().join("skills");
    let ws = h.workspace().join("skills");
    write_skill(
        &bundled,
        "weather",
        "description: bundled weather\n",
        "BUNDLED BODY",
    );
    write_skill(
        &ws,
        "weather",
        "description: workspace weather\n",
        "WORKSPACE BODY",
    );
    write_skill(
        &bundled,
        "video",
        "description: cut videos\nrequires:\n  bins: [no-such-binary-xyz]\n",
        "x",
    );
    write_skill(
        &bundled,
        "search",
        "description: search\nrequires:\n  env: [SWITCHBOARD_TEST_NO_SUCH_ENV]\n",
        "x",
    );
    write_skill(
        &bundled,
        "house-rules",
        "description: rules\nalways: true\n",
        "ALWAYS SAY PLEASE",
    );
    // A bundled skill folder linked from the owner's own checkout is read; a workspace
    // skill whose SKILL.md leads out of the workspace (as `exec` could make it) is not.
    let elsewhere = h.dir.path().join("checkout");
    write_skill(&elsewhere, "linked", "description: linked\n", "x");
    std::os::unix::fs::symlink(elsewhere.join("linked"), bundled.join("linked")).unwrap();
    std::fs::create_dir_all(ws.join("escape")).unwrap();
    std::os::unix::fs::symlink(
        elsewhere.join("linked").join("SKILL.md"),
        ws.join("escape").join("SKILL.md"),
    )
    .unwrap();

    let list = list_skills(&h.config);
    let names: Vec<(&str, &str, bool)> = list
        .iter()
        .map(|s| (s.name.as_str(), s.source.as_str(), s.available))
        .collect();
    assert_eq!(
        names,
        [
            ("house-rules", "bundled", true),
            ("linked", "bundled", true),
            ("search", "bundled", false),
            ("video", "bundled", false),
            ("weather", "workspace", true)
        ]
    );
    assert_eq!(list[2].missing, ["env:SWITCHBOARD_TEST_NO_SUCH_ENV"]);
    assert_eq!(list[3].missing, ["bin:no-such-binary-xyz"]);

    h.llm.push(Reply::tool_calls([
        ("read_skill", json!({"name": "weather"})),
        ("read_skill", json!({"name": "video"})),
    ]));
    h.llm.push(Reply::text("ok"));
    turn(&h.agent(), &h.store, msg("t:1", "weather?")).await;
    let reqs = h.llm.requests();
    let system = messages(&reqs[0].body)[0]["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(system.contains("- weather: workspace weather"));
    assert!(
        !system.contains("video") && !system.contains("- search"),
        "unavailable skills not offered"
    );
    assert!(
        system.contains("ALWAYS SAY PLEASE"),
        "always skills inlined"
    );
    assert!(!system.contains("- house-rules"));
    let results = tool_results(&reqs[1].body);
    assert!(results[0].contains("WORKSPACE BODY") && !results[0].contains("BUNDLED"));
    assert!(
        results[1].contains("unavailable: missing bin:no-such-binary-xyz"),
        "{}",
        results[1]
    );
}

#[test]
fn bundled_skills_parse_and_are_available() {
    let mut c = switchboard::config::Config::default();
    c.gateway.skills_dirs = vec![std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("skills")];
    c.gateway.workspace = "/nonexistent-workspace".into();
    let list = list_skills(&c);
    let names: Vec<&str> = list.iter().map(|s| s.name.as_str()).collect();
    for n in ["reminders", "skill-writing", "summarize-url", "weather"] {
        assert!(names.contains(&n), "{n} in {names:?}");
    }
    assert!(
        list.iter()
            .all(|s| s.available && !s.description.is_empty())
    );
}

/// The harness's agent with a publisher that hands on what it publishes (a sub-agent's
/// result) through the returned receiver; the model's first answer spawns a sub-agent to
/// "research penguins" (the sub-agent's replies are the test's to push).
fn spawning_agent(
    h: &Harness,
) -> (
    switchboard::agent::Agent,
    tokio::sync::mpsc::Receiver<switchboard_channel::InboundMessage>,
) {
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    let publisher = Arc::new(RecordingPublisher {
        known: vec![key()],
        ..Default::default()
    });
    *publisher.tx.lock().unwrap() = Some(tx);
    h.llm.push(Reply::tool_call(
        "spawn",
        json!({"task": "research penguins"}),
    ));
    h.llm.push(Reply::text("I started a helper."));
    (h.agent().with_publisher(publisher), rx)
}

#[tokio::test]
async fn subagent_result_reaches_the_parent_chat_and_it_cannot_spawn_or_message() {
    let h = Harness::new().await;
    let (agent, mut rx) = spawning_agent(&h);
    // The sub-agent's requests carry the task as their user message.
    h.llm.push_for(
        "research penguins",
        Reply::tool_call("spawn", json!({"task": "recurse"})),
    );
    h.llm.push_for(
        "research penguins",
        Reply::text("Penguins live in the south."),
    );
    let out = turn(&agent, &h.store, msg("t:1", "look into penguins")).await;
    assert_eq!(out.replies[0].text, "I started a helper.");
    // The parent's second request (the sub-agent's first may come before it).
    let parent: Vec<_> = h
        .llm
        .requests()
        .into_iter()
        .filter(|r| r.last_user_text() == "look into penguins")
        .collect();
    assert!(tool_results(&parent[1].body)[0].contains("started"));

    let result = tokio::time::timeout(Duration::from_secs(10), rx.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(result.key, key());
    assert!(matches!(
        result.origin,
        Origin::System(SystemOrigin::Subagent { .. })
    ));
    // The turn answering it acts for Ada, who asked (a job it sets is hers).
    assert_eq!(
        result.metadata["set_by"],
        json!([{"channel": "telegram", "id": "42", "group": false}])
    );
    assert!(
        result.text.contains("Penguins live in the south."),
        "{}",
        result.text
    );

    let sub_reqs: Vec<_> = h
        .llm
        .requests()
        .into_iter()
        .filter(|r| r.last_user_text().contains("research penguins"))
        .collect();
    assert_eq!(sub_reqs.len(), 2);
    let tools: Vec<&str> = sub_reqs[0].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    assert!(
        !tools.contains(&"spawn")
            && !tools.contains(&"message")
            && !tools.contains(&"write_file")
            && !tools.contains(&"exec"),
        "{tools:?}"
    );
    assert!(tools.contains(&"read_file") && tools.contains(&"web_fetch"));
    assert!(tool_results(&sub_reqs[1].body)[0].starts_with("error: unknown tool spawn"));

    // The parent composes the final reply from the System(Subagent) message.
    h.llm.push(Reply::text(
        "Here is what the helper found: penguins live in the south.",
    ));
    let out = turn(&agent, &h.store, result).await;
    assert!(out.replies[0].text.contains("helper found"));
    let last = h.llm.requests().last().unwrap().body.clone();
    assert!(messages(&last).iter().any(|m| {
        m["content"]
            .as_str()
            .unwrap_or("")
            .contains("sub-agent you started")
    }));
}

/// A sub-agent's result may start a follow-up, but the chain stops there: a task that says
/// "spawn this task" had every result's turn spawn again (~25 model calls a second).
#[tokio::test]
async fn a_chain_of_sub_agents_through_their_results_stops() {
    let h = Harness::new().await;
    let (tx, mut rx) = tokio::sync::mpsc::channel(4);
    let publisher = Arc::new(RecordingPublisher {
        known: vec![key()],
        ..Default::default()
    });
    *publisher.tx.lock().unwrap() = Some(tx);
    let agent = h.agent().with_publisher(publisher);
    // The chat's turns spawn the task; the sub-agent answers that it says to spawn itself.
    h.llm.set_responder(|body| {
        let all = messages(body);
        let last = all.last().cloned().unwrap_or_default();
        let text = last["content"].as_str().unwrap_or_default();
        if last["role"] == "tool" {
            Reply::text("ok")
        } else if text == "start" || text.starts_with("[sub-agent") {
            Reply::tool_call("spawn", json!({"task": "spawn this very task again"}))
        } else {
            Reply::text("The task says: spawn this very task again.")
        }
    });
    let mut next = msg("t:1", "start");
    for depth in 1..=2 {
        turn(&agent, &h.store, next).await;
        let last = h.llm.requests().last().unwrap().body.clone();
        assert!(tool_results(&last).last().unwrap().contains("started"));
        next = tokio::time::timeout(Duration::from_secs(10), rx.recv())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(next.metadata["chain"], json!({"spawns": depth}));
    }
    // The second result's turn is refused; nothing more runs.
    let requests = h.llm.request_count();
    turn(&agent, &h.store, next).await;
    let last = h.llm.requests().last().unwrap().body.clone();
    let result = tool_results(&last).last().unwrap().clone();
    assert!(result.contains("may not start one more"), "{result}");
    assert_eq!(h.llm.request_count(), requests + 2);
    assert!(rx.try_recv().is_err());
}

#[tokio::test]
async fn message_tool_sends_only_to_known_chats_unless_owner() {
    let h = Harness::new().await;
    let other: switchboard_channel::ChatKey = "discord:99".parse().unwrap();
    let publisher = Arc::new(RecordingPublisher {
        known: vec![other.clone()],
        ..Default::default()
    });
    let agent = h.agent().with_publisher(publisher.clone());
    h.llm.push(Reply::tool_calls([
        (
            "message",
            json!({"key": "discord:99", "text": "hello there"}),
        ),
        ("message", json!({"key": "slack:C404", "text": "who?"})),
        ("message", json!({"key": "not a key", "text": "x"})),
    ]));
    h.llm.push(Reply::text("sent"));
    turn(&agent, &h.store, msg("t:1", "tell discord hi")).await;
    let r = tool_results(&h.llm.requests()[1].body);
    assert_eq!(r[0], "sent to discord:99");
    assert!(
        r[1].starts_with("error: refused: slack:C404 is not a chat"),
        "{}",
        r[1]
    );
    assert!(
        r[2].starts_with("error: invalid arguments: key:"),
        "{}",
        r[2]
    );
    let sent = publisher.sent.lock().unwrap().clone();
    assert_eq!(sent.len(), 1);
    assert_eq!(
        (sent[0].key.clone(), sent[0].text.as_str()),
        (other, "hello there")
    );
}

#[tokio::test]
async fn a_turn_joining_a_members_message_with_the_owners_has_no_owner_rights() {
    let h = Harness::new().await;
    let publisher = Arc::new(RecordingPublisher::default());
    let agent = h.agent().with_publisher(publisher.clone());
    let mut owner = msg("t:2", "thanks!");
    owner.sender.is_owner = true;
    let member = msg("t:1", "message slack:C404 that the owner says hi");
    // A new chat is the owner's to write to: refused for the joined turn, done for the owner.
    for (batch, allowed) in [(vec![member, owner.clone()], false), (vec![owner], true)] {
        h.llm.push(Reply::tool_call(
            "message",
            json!({"key": "slack:C404", "text": "hi"}),
        ));
        h.llm.push(Reply::text("done"));
        let mut input = input(batch[0].clone());
        input.messages = batch;
        switchboard::bus::TurnHandler::handle(&agent, input)
            .await
            .expect("turn runs");
        let last = h.llm.requests().last().unwrap().body.clone();
        let result = tool_results(&last)[0].clone();
        assert_eq!(
            result.starts_with("sent to slack:C404"),
            allowed,
            "{result}"
        );
    }
    assert_eq!(publisher.sent.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn the_heartbeats_last_chat_is_the_owners_direct_chat_not_a_group_or_someone_elses() {
    use switchboard::store::Tree;
    let last_active = |h: &Harness| {
        let raw = h.store.get(Tree::Meta, b"last_active").unwrap();
        raw.map(|v| String::from_utf8(v).unwrap())
    };
    let from = |chat: &str, owner: bool, group: bool| {
        let mut m = msg(&format!("t:{chat}"), "hello");
        m.key = format!("telegram:{chat}").parse().unwrap();
        m.sender.is_owner = owner;
        m.is_group = group;
        m
    };
    // An owner is listed: only their chats count.
    let h = Harness::with(|c| c.channels.telegram.allow_from = vec!["42".into()]).await;
    h_llm_default(&h);
    let agent = h.agent();
    turn(&agent, &h.store, from("42", true, false)).await;
    assert_eq!(last_active(&h).as_deref(), Some("telegram:42"));
    turn(&agent, &h.store, from("7", false, false)).await;
    turn(&agent, &h.store, from("-100", false, true)).await;
    assert_eq!(last_active(&h).as_deref(), Some("telegram:42"));
    // Nor a group the owner writes in: their tasks would run there with their powers,
    // among what members wrote.
    turn(&agent, &h.store, from("-200", true, true)).await;
    assert_eq!(last_active(&h).as_deref(), Some("telegram:42"));
    // A stranger's DM on a channel that lists nobody: still not the owner's chat.
    let mut elsewhere = from("5", false, false);
    elsewhere.key = "discord:5".parse().unwrap();
    turn(&agent, &h.store, elsewhere).await;
    assert_eq!(last_active(&h).as_deref(), Some("telegram:42"));
    // No owner listed (everyone paired): the last direct chat, never a group.
    let h = Harness::new().await;
    h_llm_default(&h);
    let agent = h.agent();
    turn(&agent, &h.store, from("-100", false, true)).await;
    assert_eq!(last_active(&h), None);
    turn(&agent, &h.store, from("7", false, false)).await;
    assert_eq!(last_active(&h).as_deref(), Some("telegram:7"));
}

fn h_llm_default(h: &Harness) {
    h.llm.set_default(Reply::text("hi"));
}

#[tokio::test]
async fn anthropic_provider_runs_the_tool_loop() {
    let h = Harness::with(|c| {
        c.llm.provider = switchboard::config::Provider::Anthropic;
        c.llm.model = "claude-sonnet-4-5".into();
    })
    .await;
    let mut cfg = (*h.config).clone();
    cfg.llm.base_url = h.llm.url();
    cfg.llm.api_key_env = "CARGO_PKG_NAME".into(); // any set variable: the fake wants a key
    let agent = switchboard::agent::Agent::new(
        Arc::new(cfg.clone()),
        h.store.clone(),
        switchboard::llm::from_config(&cfg.llm).unwrap(),
        h.metrics.clone(),
    );
    std::fs::write(h.workspace().join("a.txt"), "alpha").unwrap();
    h.llm
        .push(Reply::tool_call("read_file", json!({"path": "a.txt"})));
    h.llm.push(Reply::text("It says alpha."));
    let out = turn(&agent, &h.store, msg("t:1", "read a.txt")).await;
    assert_eq!(out.replies[0].text, "It says alpha.");
    let second = &h.llm.requests()[1].body;
    let last = second["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(last["content"][0]["type"], "tool_result");
    assert_eq!(last["content"][0]["content"], "alpha");
}

#[tokio::test]
async fn a_failed_subagent_reports_the_brief_error_not_the_providers_words() {
    let h = Harness::new().await;
    let (agent, mut rx) = spawning_agent(&h);
    h.llm.push_for(
        "research penguins",
        Reply::error(
            400,
            json!({"error": {"message": "Invalid 'messages[1]': internal detail zq-77",
                             "type": "invalid_request_error", "param": null, "code": null}}),
        ),
    );
    turn(&agent, &h.store, msg("t:1", "look into penguins")).await;
    let result = tokio::time::timeout(Duration::from_secs(10), rx.recv())
        .await
        .unwrap()
        .unwrap();
    assert!(
        result
            .text
            .ends_with("(the sub-agent failed: the model provider refused the request, HTTP 400)"),
        "{}",
        result.text
    );
    assert!(!result.text.contains("zq-77"), "{}", result.text);
}
