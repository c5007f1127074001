//! A model that answers nothing: a person is told, a reminder and a sub-agent's result
//! still reach their chat, a heartbeat stays quiet; against the fake LLM.

mod agent_support;

use std::sync::Arc;

use agent_support::*;
use serde_json::json;
use switchboard_channel::{Origin, OutboundKind, SystemOrigin};
use switchboard_fakes::llm::Reply;

#[tokio::test]
async fn a_reminder_the_model_leaves_empty_is_sent_as_it_was_set() {
    let h = Harness::new().await;
    // The first empty answer is retried once; the second is final.
    h.llm.push(Reply::empty());
    h.llm.push(Reply::empty());
    let mut reminder = msg("cron:j1:1", "take your pill");
    reminder.origin = Origin::System(SystemOrigin::Cron {
        job_id: "j1".into(),
    });
    let out = turn(&h.agent(), &h.store, reminder).await;
    assert_eq!(h.llm.request_count(), 2);
    assert_eq!(out.replies.len(), 1, "{:?}", out.replies);
    assert_eq!(out.replies[0].key, key());
    assert_eq!(
        out.replies[0].text,
        "⏰ Reminder: take your pill\n\n(The language model gave an empty answer, so here it is as it was set.)"
    );
}

#[tokio::test]
async fn a_reminder_that_sent_its_own_message_may_end_in_silence() {
    let h = Harness::new().await;
    let publisher = Arc::new(RecordingPublisher {
        known: vec!["discord:99".parse().unwrap()],
        ..Default::default()
    });
    let agent = h.agent().with_publisher(publisher.clone());
    h.llm.push(Reply::tool_call(
        "message",
        json!({"key": "discord:99", "text": "pill time, Ada"}),
    ));
    h.llm.push(Reply::empty());
    let mut reminder = msg("cron:j2:1", "tell Ada on discord to take her pill");
    reminder.origin = Origin::System(SystemOrigin::Cron {
        job_id: "j2".into(),
    });
    let out = turn(&agent, &h.store, reminder).await;
    assert_eq!(publisher.sent.lock().unwrap()[0].text, "pill time, Ada");
    assert!(out.replies.is_empty(), "{:?}", out.replies);
}

#[tokio::test]
async fn a_subagent_result_the_model_leaves_empty_is_passed_on_cut() {
    let h = Harness::new().await;
    h.llm.push(Reply::empty());
    h.llm.push(Reply::empty());
    let long = "Penguins live in the south. ".repeat(100);
    let mut result = msg(
        "subagent:ab-1:result",
        &format!("Task: research penguins\n\nResult:\n{long}"),
    );
    result.origin = Origin::System(SystemOrigin::Subagent { id: "ab-1".into() });
    let out = turn(&h.agent(), &h.store, result).await;
    assert_eq!(out.replies.len(), 1, "{:?}", out.replies);
    let text = &out.replies[0].text;
    assert!(
        text.starts_with(
            "A background task I started has finished:\n\nTask: research penguins\n\nResult:\nPenguins live in the south."
        ),
        "{text}"
    );
    assert!(text.ends_with('…'), "{text}");
    assert!(text.chars().count() < 1600, "{}", text.chars().count());
}

#[tokio::test]
async fn a_heartbeat_with_nothing_to_say_stays_silent_and_a_person_is_told() {
    let h = Harness::new().await;
    h.llm.push(Reply::empty());
    h.llm.push(Reply::empty());
    let mut beat = msg("heartbeat:1", "- water the plants");
    beat.origin = Origin::System(SystemOrigin::Heartbeat);
    let out = turn(&h.agent(), &h.store, beat).await;
    assert!(out.replies.is_empty(), "{:?}", out.replies);
    h.llm.push(Reply::empty());
    h.llm.push(Reply::empty());
    let out = turn(&h.agent(), &h.store, msg("t:1", "hi")).await;
    assert_eq!(out.replies[0].kind, OutboundKind::Error);
    assert!(out.replies[0].text.contains("empty answer"));
}

#[tokio::test]
async fn an_answer_given_beside_a_tool_call_stands_when_the_last_round_is_empty() {
    let h = Harness::new().await;
    h.llm
        .push(Reply::text("The answer is 42.").with_tool_call("list_dir", json!({"path": "."})));
    h.llm.push(Reply::empty());
    let out = turn(&h.agent(), &h.store, msg("t:1", "what is the answer?")).await;
    assert_eq!(h.llm.request_count(), 2);
    assert_eq!(out.replies.len(), 1, "{:?}", out.replies);
    assert_eq!(out.replies[0].kind, OutboundKind::Final);
    assert_eq!(out.replies[0].text, "The answer is 42.");
    let s = stored_session(&h.store);
    let stored = s["messages"].as_array().unwrap();
    let roles: Vec<&str> = stored.iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert_eq!(roles, ["user", "assistant", "tool", "assistant"]);
    assert_eq!(stored[3]["content"], "The answer is 42.");
}

#[tokio::test]
async fn an_empty_answer_in_the_history_goes_back_as_no_answer_not_as_empty_text() {
    let h = Harness::new().await;
    // Tools ran, then the model said nothing: stored as an empty answer.
    h.llm
        .push(Reply::tool_call("list_dir", json!({"path": "."})));
    h.llm.push(Reply::empty());
    let out = turn(&h.agent(), &h.store, msg("t:1", "tidy up")).await;
    assert!(out.replies.is_empty(), "{:?}", out.replies);
    h.llm.push(Reply::text("Done."));
    turn(&h.agent(), &h.store, msg("t:2", "did you?")).await;
    let sent = messages(&h.llm.requests()[2].body);
    let answers: Vec<&serde_json::Value> = sent
        .iter()
        .filter(|m| m["role"] == "assistant" && m.get("tool_calls").is_none())
        .collect();
    assert_eq!(answers.len(), 1, "{sent:?}");
    assert_eq!(answers[0]["content"], "(no answer)");
}
