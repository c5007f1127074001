//! The real `Agent` against the fake LLM over real HTTP: the tool loop, limits, timeouts,
//! argument validation, steering, context budget and compaction, error replies.

mod agent_support;

use std::sync::Arc;
use std::time::Duration;

use agent_support::*;
use async_trait::async_trait;
use serde_json::{Value, json};
use switchboard::agent::tool::{Tool, ToolContext, ToolError};
use switchboard::config::DurationStr;
use switchboard_channel::{Origin, OutboundKind, SystemOrigin};
use switchboard_fakes::llm::Reply;

#[tokio::test]
async fn multi_step_tool_loop_reads_and_writes_files_and_stores_the_session() {
    let h = Harness::new().await;
    std::fs::write(h.workspace().join("notes.md"), "buy milk").unwrap();
    h.llm
        .push(Reply::tool_call("read_file", json!({"path": "notes.md"})).with_usage(100, 10));
    h.llm.push(
        Reply::tool_call(
            "write_file",
            json!({"path": "out/todo.md", "content": "- milk"}),
        )
        .with_usage(120, 20),
    );
    h.llm
        .push(Reply::text("Saved your todo.").with_usage(150, 5));
    let mut m = msg("t:1", "make a todo from my notes");
    m.metadata.insert("message_id".into(), json!("77"));
    let out = turn(&h.agent(), &h.store, m).await;

    assert_eq!(out.replies.len(), 1);
    assert_eq!(out.replies[0].text, "Saved your todo.");
    assert_eq!(out.replies[0].in_reply_to_inbound.as_deref(), Some("t:1"));
    assert_eq!(out.replies[0].reply_to.as_deref(), Some("77"));
    // The tokens of the turn's three requests, for the API channel to report.
    let usage = out.replies[0].usage.expect("usage");
    assert_eq!((usage.prompt_tokens, usage.completion_tokens), (370, 35));
    assert_eq!(
        std::fs::read_to_string(h.workspace().join("out/todo.md")).unwrap(),
        "- milk"
    );
    let reqs = h.llm.requests();
    assert_eq!(reqs.len(), 3);
    assert_eq!(tool_results(&reqs[1].body), ["buy milk"]);
    assert!(tool_results(&reqs[2].body)[1].starts_with("wrote 6 bytes"));
    let names: Vec<&str> = reqs[0].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    for t in [
        "read_file",
        "write_file",
        "edit_file",
        "list_dir",
        "exec",
        "web_fetch",
        "memory",
        "read_skill",
    ] {
        assert!(names.contains(&t), "{t} offered");
    }
    let session = stored_session(&h.store);
    let roles: Vec<&str> = session["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(
        roles,
        [
            "user",
            "assistant",
            "tool",
            "assistant",
            "tool",
            "assistant"
        ]
    );
    assert_eq!(
        h.store
            .get(switchboard::store::Tree::Meta, b"last_active")
            .unwrap()
            .unwrap(),
        b"telegram:42"
    );
}

#[tokio::test]
async fn iteration_limit_gives_an_honest_message() {
    let h = Harness::with(|c| c.agent.max_iterations = 3).await;
    h.llm
        .set_default(Reply::tool_call("list_dir", json!({"path": "."})));
    let out = turn(&h.agent(), &h.store, msg("t:1", "loop forever")).await;
    assert_eq!(h.llm.request_count(), 3);
    assert!(
        out.replies[0].text.contains("stopped after 3 steps"),
        "{}",
        out.replies[0].text
    );
    // The budget steering appears near the end.
    let last = &h.llm.requests()[2].body;
    assert!(
        messages(last)
            .iter()
            .any(|m| m["content"].as_str().unwrap_or("").contains("last step"))
    );
}

#[tokio::test]
async fn the_last_step_offers_no_tools_so_the_model_answers() {
    let h = Harness::with(|c| c.agent.max_iterations = 3).await;
    // A model that calls a tool whenever it is offered one.
    h.llm.set_responder(|body| match body.get("tools") {
        Some(_) => Reply::tool_call("list_dir", json!({"path": "."})),
        None => Reply::text("Here is what I found."),
    });
    let out = turn(&h.agent(), &h.store, msg("t:1", "look around")).await;
    assert_eq!(out.replies[0].text, "Here is what I found.");
    let offered: Vec<bool> = h
        .llm
        .requests()
        .iter()
        .map(|r| r.body.get("tools").is_some())
        .collect();
    assert_eq!(offered, [true, true, false]);
}

/// A tool that never finishes; `started` fires when it is called.
#[derive(Default)]
struct Slow {
    started: Arc<tokio::sync::Notify>,
}

#[async_trait]
impl Tool for Slow {
    fn name(&self) -> &'static str {
        "slow"
    }
    fn description(&self) -> &'static str {
        "never finishes"
    }
    fn schema(&self) -> Value {
        json!({"type": "object", "properties": {}})
    }
    async fn call(&self, _: Value, _: &ToolContext) -> Result<String, ToolError> {
        self.started.notify_one();
        std::future::pending().await
    }
}

#[tokio::test]
async fn tool_timeout_is_reported_to_the_model() {
    let h = Harness::with(|c| c.agent.tool_timeout = DurationStr(Duration::from_millis(200))).await;
    h.llm.push(Reply::tool_call("slow", json!({})));
    h.llm.push(Reply::text("It timed out."));
    let agent = h.agent().with_tools(vec![Arc::new(Slow::default())]);
    let out = turn(&agent, &h.store, msg("t:1", "go")).await;
    assert_eq!(out.replies[0].text, "It timed out.");
    assert_eq!(
        tool_results(&h.llm.requests()[1].body),
        ["error: slow timed out after 0.2s"]
    );
}

#[tokio::test]
async fn steering_is_in_the_request_but_never_stored_or_shown() {
    let h = Harness::new().await;
    h.llm.push(Reply::text("Sure."));
    let mut m = msg("t:1", "remind me to stretch");
    m.origin = Origin::System(SystemOrigin::Cron {
        job_id: "job-7".into(),
    });
    let out = turn(&h.agent(), &h.store, m).await;
    let body = &h.llm.requests()[0].body;
    let msgs = messages(body);
    // One system message, first (strict chat templates take no other): steering goes
    // after the system prompt.
    let systems = msgs.iter().filter(|m| m["role"] == "system").count();
    assert_eq!((systems, &msgs[0]["role"]), (1, &json!("system")));
    let steer: Vec<&str> = msgs[0]["content"].as_str().unwrap().split("\n\n").collect();
    assert!(
        steer.iter().any(|s| s.starts_with("Telegram:")),
        "{steer:?}"
    );
    assert!(
        steer
            .iter()
            .any(|s| s.contains("scheduled reminder you set earlier (job job-7)")),
        "{steer:?}"
    );
    assert_eq!(out.replies[0].text, "Sure.");
    let stored = stored_session(&h.store).to_string();
    assert!(
        !stored.contains("Telegram:") && !stored.contains("scheduled reminder you set"),
        "{stored}"
    );
    // The system prompt: identity, channel facts; clock in the dynamic part. A turn the
    // scheduler started has no one to talk with.
    let system = msgs[0]["content"].as_str().unwrap();
    assert!(system.starts_with("You are Switchboard"));
    assert!(
        system.contains(
            "Channel: telegram (a direct chat), chat key telegram:42. No one wrote this turn"
        ),
        "{system}"
    );
    assert!(system.contains("Current date and time:"));
}

#[tokio::test]
async fn an_unreadable_history_is_left_as_it_is() {
    let h = Harness::new().await;
    let key_bytes = key().to_string();
    h.store
        .put(
            switchboard::store::Tree::Sessions,
            key_bytes.as_bytes(),
            b"{not json",
        )
        .unwrap();
    let out = turn(&h.agent(), &h.store, msg("t:1", "hello")).await;
    assert_eq!(out.replies[0].kind, OutboundKind::Error);
    assert!(
        out.replies[0].text.contains("/new"),
        "{}",
        out.replies[0].text
    );
    assert_eq!(h.llm.request_count(), 0);
    assert_eq!(
        h.store
            .get(switchboard::store::Tree::Sessions, key_bytes.as_bytes())
            .unwrap()
            .as_deref(),
        Some(&b"{not json"[..])
    );
}

#[tokio::test]
async fn heartbeat_ok_is_neither_delivered_nor_kept_in_the_history() {
    let h = Harness::new().await;
    h.llm.push(Reply::text("HEARTBEAT_OK"));
    let mut m = msg("hb:1", "check HEARTBEAT.md");
    m.origin = Origin::System(SystemOrigin::Heartbeat);
    m.metadata.insert("model".into(), json!("cheap-model"));
    let out = turn(&h.agent(), &h.store, m).await;
    assert!(out.replies.is_empty());
    assert_eq!(h.llm.requests()[0].model, "cheap-model");
    // A beat the user never saw does not fill the chat's history.
    assert_eq!(
        stored_session(&h.store)["messages"]
            .as_array()
            .map_or(0, Vec::len),
        0
    );
    assert!(
        h.store
            .get(switchboard::store::Tree::Meta, b"last_active")
            .unwrap()
            .is_none()
    );
}

#[tokio::test]
async fn long_history_is_cut_to_fit_without_splitting_tool_pairs() {
    let h = Harness::with(|c| {
        c.llm.context_window = 12_000;
        c.llm.max_tokens = 1000;
        c.agent.history_messages = 200;
    })
    .await;
    let agent = h.agent();
    let filler = "lorem ipsum ".repeat(300); // ≈ 1200 tokens
    for i in 0..8 {
        h.llm
            .push(Reply::tool_call("list_dir", json!({"path": "."})));
        h.llm.push(Reply::text(format!("answer {i} {filler}")));
        turn(
            &agent,
            &h.store,
            msg(&format!("t:{i}"), &format!("question {i} {filler}")),
        )
        .await;
    }
    h.llm.clear();
    h.llm.push(Reply::text("fits"));
    let out = turn(&agent, &h.store, msg("t:last", "final question")).await;
    assert_eq!(out.replies[0].text, "fits");
    let body = &h.llm.requests()[0].body;
    let msgs = messages(body);
    let system = msgs[0]["content"].as_str().unwrap();
    assert!(
        system.contains("chat key telegram:42. Talking with: Ada."),
        "{system}"
    );
    let all = serde_json::to_string(&msgs).unwrap();
    assert!(
        all.len() / 3 < 12_000,
        "request within the window: {} chars",
        all.len()
    );
    assert!(!all.contains("question 0"), "oldest turns dropped");
    // … and the model is told some of the conversation is left out.
    assert!(all.contains("oldest messages of this conversation did not fit"));
    let first = msgs.iter().find(|m| m["role"] != "system").unwrap();
    assert_eq!(first["role"], "user", "history starts at a user message");
    // Every tool result follows an assistant message that called it.
    for (i, m) in msgs.iter().enumerate() {
        if m["role"] == "tool" {
            let id = &m["tool_call_id"];
            let caller = msgs[..i]
                .iter()
                .rev()
                .find(|p| p["role"] == "assistant")
                .unwrap();
            assert!(
                caller["tool_calls"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|c| &c["id"] == id)
            );
        }
    }
    assert_eq!(messages(body).last().unwrap()["content"], "final question");
}

#[tokio::test]
async fn context_overflow_compacts_and_retries_once() {
    let h = Harness::new().await;
    let agent = h.agent();
    for i in 0..3 {
        h.llm.push(Reply::text(format!("reply {i}")));
        turn(
            &agent,
            &h.store,
            msg(&format!("t:{i}"), &format!("message number {i}")),
        )
        .await;
    }
    h.llm.clear();
    h.llm.push(Reply::context_overflow());
    h.llm.push(Reply::text("after compaction"));
    let out = turn(&agent, &h.store, msg("t:x", "and now?")).await;
    assert_eq!(out.replies[0].text, "after compaction");
    let reqs = h.llm.requests();
    assert_eq!(reqs.len(), 2);
    let retry = messages(&reqs[1].body);
    assert_eq!(
        retry.iter().filter(|m| m["role"] == "user").count(),
        1,
        "older turns folded"
    );
    let system = retry[0]["content"].as_str().unwrap();
    assert!(
        system.contains("Earlier in this conversation (condensed)")
            && system.contains("- User: message number 1")
    );
    assert!(retry.iter().any(|m| {
        m["content"]
            .as_str()
            .unwrap_or("")
            .contains("condensed into a summary")
    }));
    let s = stored_session(&h.store);
    assert!(s["summary"].as_str().unwrap().contains("message number 0"));
    assert_eq!(s["messages"].as_array().unwrap().len(), 2);

    // A second overflow after compaction gives up with a clear error.
    h.llm.push(Reply::context_overflow());
    h.llm.push(Reply::context_overflow());
    let out = turn(&agent, &h.store, msg("t:y", "more")).await;
    assert_eq!(out.replies[0].kind, OutboundKind::Error);
    assert!(out.replies[0].text.contains("/new"));
}

#[tokio::test]
async fn provider_failure_ends_in_a_clear_error_reply() {
    let h = Harness::with(|c| {
        c.llm.max_retries = 0;
        c.llm.fallback_models = vec!["backup".into()];
    })
    .await;
    h.llm.set_default(Reply::server_error());
    let out = turn(&h.agent(), &h.store, msg("t:1", "hello")).await;
    assert_eq!(out.replies.len(), 1);
    assert_eq!(out.replies[0].kind, OutboundKind::Error);
    assert!(
        out.replies[0].text.contains("couldn't get an answer"),
        "{}",
        out.replies[0].text
    );
    assert!(
        out.replies[0]
            .text
            .ends_with("Please try again in a moment.")
    );
    let models: Vec<String> = h.llm.requests().iter().map(|r| r.model.clone()).collect();
    assert_eq!(models, ["gpt-4o-mini", "backup"]);
    // Nothing was done: nothing is kept, the message can simply be sent again.
    assert!(stored_session(&h.store)["messages"].is_null());
    // Failing after a tool ran: what it did is kept, so a retry does not do it twice.
    h.llm.push(Reply::tool_call(
        "memory",
        json!({"action": "remember", "text": "told mum"}),
    ));
    let out = turn(&h.agent(), &h.store, msg("t:2", "tell mum, then summarise")).await;
    assert_eq!(out.replies[0].kind, OutboundKind::Error);
    let roles: Vec<String> = stored_session(&h.store)["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(roles, ["user", "assistant", "tool"]);
    // A reminder still reaches its chat, in its own words; a heartbeat stays quiet.
    let mut reminder = msg("t:3", "take your pill");
    reminder.origin = Origin::System(SystemOrigin::Cron {
        job_id: "j1".into(),
    });
    let out = turn(&h.agent(), &h.store, reminder).await;
    assert!(
        out.replies[0]
            .text
            .starts_with("⏰ Reminder: take your pill\n\n(I couldn't reach the language model"),
        "{}",
        out.replies[0].text
    );
    let mut beat = msg("t:4", "- water the plants");
    beat.origin = Origin::System(SystemOrigin::Heartbeat);
    let out = turn(&h.agent(), &h.store, beat).await;
    assert!(out.replies.is_empty(), "{:?}", out.replies);
}

#[tokio::test]
async fn a_setting_the_owner_must_fix_is_not_worth_trying_again() {
    // With retries allowed: a refusal the owner must fix is asked once, not again.
    let h = Harness::new().await;
    let refusal = json!({"error": {"message": "Incorrect API key provided", "type": "invalid_request_error"}});
    for (i, (status, advice)) in [
        (401, "its owner should check llm.api_key_env."),
        (404, "the gateway's owner should check llm.model."),
        (400, "The gateway's log has the details for its owner."),
    ]
    .into_iter()
    .enumerate()
    {
        h.llm.push(Reply::error(status, refusal.clone()));
        let out = turn(&h.agent(), &h.store, msg(&format!("t:{status}"), "hello")).await;
        assert_eq!(h.llm.request_count(), i + 1, "HTTP {status} asked again");
        let text = &out.replies[0].text;
        assert!(
            text.contains(&format!("HTTP {status}")) && text.ends_with(advice),
            "{text}"
        );
        assert!(!text.contains("try again"), "{text}");
    }
}

#[tokio::test]
async fn empty_first_answer_is_retried_once() {
    let h = Harness::new().await;
    h.llm.push(Reply::empty());
    h.llm.push(Reply::text("here"));
    let out = turn(&h.agent(), &h.store, msg("t:1", "hi")).await;
    assert_eq!(out.replies[0].text, "here");
    let second = messages(&h.llm.requests()[1].body);
    assert!(second.iter().any(|m| {
        m["content"]
            .as_str()
            .unwrap_or("")
            .contains("previous answer was empty")
    }));
}

#[tokio::test]
async fn an_answer_empty_twice_gets_the_user_an_error_not_silence() {
    let h = Harness::new().await;
    h.llm.push(Reply::empty());
    h.llm.push(Reply::empty());
    let out = turn(&h.agent(), &h.store, msg("t:1", "hi")).await;
    assert_eq!(out.replies.len(), 1);
    assert_eq!(out.replies[0].kind, OutboundKind::Error);
    assert!(
        out.replies[0].text.contains("empty answer"),
        "{}",
        out.replies[0].text
    );
}

#[tokio::test]
async fn commands_are_answered_without_the_llm() {
    let h = Harness::new().await;
    let agent = h
        .agent()
        .with_command("reminders", Arc::new(|k| format!("no reminders for {k}")));
    let out = turn(&agent, &h.store, msg("t:1", "/reminders")).await;
    assert_eq!(out.replies[0].text, "no reminders for telegram:42");
    let out = turn(&agent, &h.store, msg("t:2", "/status")).await;
    assert!(out.replies[0].text.contains("Model: gpt-4o-mini"));
    assert_eq!(h.llm.request_count(), 0);
}

/// Run a turn of `m` that `/stop` cancels once `stop_when` is done; it ends with no reply,
/// and its writes are applied to `store`.
async fn stopped_turn(
    agent: &switchboard::agent::Agent,
    store: &std::sync::Arc<dyn switchboard::store::Store>,
    m: switchboard_channel::InboundMessage,
    stop_when: impl std::future::Future<Output = ()> + Send + 'static,
) {
    let inp = input(m);
    let cancel = inp.cancel.clone();
    tokio::spawn(async move {
        stop_when.await;
        cancel.cancel();
    });
    let out = switchboard::bus::TurnHandler::handle(agent, inp)
        .await
        .expect("a /stop finishes the turn");
    assert!(out.replies.is_empty());
    store.apply(out.writes).unwrap();
}

#[tokio::test]
async fn stop_keeps_a_valid_history_with_cancelled_results() {
    let h = Harness::new().await;
    let shutdown = tokio_util::sync::CancellationToken::new();
    let slow = Arc::new(Slow::default());
    let started = slow.started.clone();
    let agent = h
        .agent()
        .with_tools(vec![slow])
        .with_shutdown(shutdown.clone());
    h.llm.push(Reply::tool_calls([
        ("slow", json!({})),
        ("list_dir", json!({"path": "."})),
    ]));
    stopped_turn(&agent, &h.store, msg("t:1", "go"), async move {
        tokio::time::timeout(Duration::from_secs(5), started.notified())
            .await
            .unwrap();
    })
    .await;
    let s = stored_session(&h.store);
    let msgs = s["messages"].as_array().unwrap();
    assert_eq!(msgs.len(), 4);
    assert!(
        msgs[2]["content"]
            .as_str()
            .unwrap()
            .starts_with("cancelled")
    );
    assert!(
        msgs[3]["content"]
            .as_str()
            .unwrap()
            .starts_with("cancelled")
    );
}

#[tokio::test]
async fn a_stop_before_the_first_answer_never_sends_two_user_messages_in_a_row() {
    let h = Harness::new().await;
    let shutdown = tokio_util::sync::CancellationToken::new();
    let agent = h.agent().with_shutdown(shutdown.clone());
    // The model is still thinking when the user sends /stop.
    h.llm
        .push(Reply::text("too late").with_delay(Duration::from_secs(60)));
    let llm = h.llm.clone();
    stopped_turn(&agent, &h.store, msg("t:1", "write a poem"), async move {
        llm.wait_for_requests(1, Duration::from_secs(5))
            .await
            .unwrap();
    })
    .await;

    let s = stored_session(&h.store);
    assert_eq!(
        s["messages"],
        json!([{"role": "user", "content": "write a poem"},
               {"role": "assistant", "content": "(stopped by the user before answering)"}])
    );

    h.llm.push(Reply::text("Here is a haiku."));
    let out = turn(&agent, &h.store, msg("t:2", "a short one")).await;
    assert_eq!(out.replies[0].text, "Here is a haiku.");
    let sent = messages(&h.llm.requests()[1].body);
    let roles: Vec<&str> = sent.iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert_eq!(roles, ["system", "user", "assistant", "user"], "{sent:?}");
}
