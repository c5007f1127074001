//! Skills (precedence, gating, `always` inlining, `read_skill`) and sub-agents (result back
//! to the parent chat; no `spawn` or `message` inside), against the fake LLM.

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

    let list = list_skills(&h.config);
    let names: Vec<(&str, &str, bool)> = list
        .iter()
        .map(|s| (s.name.as_str(), s.source.as_str(), s.available))
        .collect();
    assert_eq!(
        names,
        [
            ("house-rules", "bundled", true),
            ("search", "bundled", false),
            ("video", "bundled", false),
            ("weather", "workspace", true)
        ]
    );
    assert_eq!(list[1].missing, ["env:SWITCHBOARD_TEST_NO_SUCH_ENV"]);
    assert_eq!(list[2].missing, ["bin:no-such-binary-xyz"]);

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

#[tokio::test]
async fn subagent_result_reaches_the_parent_chat_and_it_cannot_spawn_or_message() {
    let h = Harness::new().await;
    let (tx, mut rx) = tokio::sync::mpsc::channel(4);
    let publisher = Arc::new(RecordingPublisher {
        known: vec![key()],
        ..Default::default()
    });
    *publisher.tx.lock().unwrap() = Some(tx);
    let agent = h.agent().with_publisher(publisher.clone());

    h.llm.push(Reply::tool_call(
        "spawn",
        json!({"task": "research penguins"}),
    ));
    h.llm.push(Reply::text("I started a helper."));
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
