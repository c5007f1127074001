//! The agent's `cron` tool: add / list / remove / run, scoped to the current chat unless the
//! sender is the owner; a reminder added through it fires into the chat it came from.

mod scheduler_support;

use std::path::PathBuf;
use std::time::Duration;

use scheduler_support::{Rig, at, key};
use serde_json::{Value, json};
use switchboard::agent::tool::{Tool, ToolContext, ToolError};
use switchboard::config::Config;
use switchboard::scheduler::CronTool;
use switchboard_channel::{ChatKey, Origin, SystemOrigin};
use tokio_util::sync::CancellationToken;

fn ctx(key: ChatKey, owner: bool) -> ToolContext {
    ToolContext {
        key,
        sender_is_owner: owner,
        workspace: PathBuf::from("."),
        restrict_to_workspace: true,
        cancel: CancellationToken::new(),
    }
}

fn other() -> ChatKey {
    "test:other".parse().unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_reminder_added_by_the_tool_fires_into_its_chat() {
    let dir = tempfile::tempdir().unwrap();
    let rig = Rig::start(dir.path(), at("2026-03-01T12:00:00Z"), Config::default()).await;
    let tool = CronTool::new(rig.scheduler.clone());
    assert_eq!(tool.name(), "cron");
    assert_eq!(tool.schema()["required"], json!(["action"]));
    let out = tool
        .call(
            json!({"action": "add", "message": "call mum", "at": "in 10m"}),
            &ctx(key(), false),
        )
        .await
        .unwrap();
    let out: Value = serde_json::from_str(&out).unwrap();
    let id = out["added"]["id"].as_str().unwrap().to_string();
    assert_eq!(out["added"]["next_run"], "2026-03-01 12:10 UTC");

    assert!(rig.handler.wait_for(1, Duration::from_secs(3600)).await);
    let (msg, _) = rig.handler.received().remove(0);
    assert_eq!(msg.key, key());
    assert_eq!(
        msg.origin,
        Origin::System(SystemOrigin::Cron { job_id: id })
    );
    assert_eq!(msg.text, "call mum");
    rig.stop().await;
}

#[tokio::test(start_paused = true)]
async fn the_tool_is_scoped_to_the_chat_unless_the_sender_is_the_owner() {
    let dir = tempfile::tempdir().unwrap();
    let rig = Rig::start(dir.path(), at("2026-03-01T12:00:00Z"), Config::default()).await;
    let tool = CronTool::new(rig.scheduler.clone());
    let mine = ctx(key(), false);
    let theirs = ctx(other(), false);
    let owner = ctx(other(), true);

    let add = |msg: &str| json!({"action": "add", "message": msg, "every": "1h"});
    let a: Value = serde_json::from_str(&tool.call(add("mine"), &mine).await.unwrap()).unwrap();
    let a_id = a["added"]["id"].as_str().unwrap().to_string();
    tool.call(add("theirs"), &theirs).await.unwrap();

    // A non-owner cannot target another chat, see its jobs, or touch them.
    let e = tool
        .call(
            json!({"action": "add", "message": "x", "at": "in 1h", "key": "test:other"}),
            &mine,
        )
        .await
        .unwrap_err();
    assert!(matches!(e, ToolError::Refused(_)), "{e:?}");
    let list: Value =
        serde_json::from_str(&tool.call(json!({"action": "list"}), &theirs).await.unwrap())
            .unwrap();
    let messages: Vec<&str> = list["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["message"].as_str().unwrap())
        .collect();
    assert_eq!(messages, ["theirs"]);
    let e = tool
        .call(json!({"action": "remove", "id": a_id}), &theirs)
        .await
        .unwrap_err();
    assert!(e.to_string().contains("no job with id"), "{e}");
    let e = tool
        .call(json!({"action": "run", "id": a_id}), &theirs)
        .await
        .unwrap_err();
    assert!(e.to_string().contains("no job with id"), "{e}");
    assert!(rig.scheduler.get(&a_id).unwrap().is_some());

    // Not even the owner can schedule for a channel this gateway does not have.
    let e = tool
        .call(
            json!({"action": "add", "message": "x", "every": "1h", "key": "telgram:42"}),
            &owner,
        )
        .await
        .unwrap_err();
    assert!(
        matches!(&e, ToolError::InvalidArguments(m) if m.contains("unknown channel `telgram` in `telgram:42`")),
        "{e:?}"
    );

    // Nor for a chat that only gets answers to its requests: the reminder would reach nobody.
    let e = tool
        .call(add("ping"), &ctx("api:alice".parse().unwrap(), true))
        .await
        .unwrap_err();
    assert!(
        matches!(&e, ToolError::Refused(m) if m.contains("cannot reach api:alice")),
        "{e:?}"
    );

    // The owner sees everything and may act on any chat.
    let list: Value =
        serde_json::from_str(&tool.call(json!({"action": "list"}), &owner).await.unwrap()).unwrap();
    assert_eq!(list["jobs"].as_array().unwrap().len(), 2);
    tool.call(json!({"action": "run", "id": a_id}), &owner)
        .await
        .unwrap();
    assert!(rig.handler.wait_for(1, Duration::from_secs(1)).await);
    assert_eq!(rig.handler.received()[0].0.key, key());
    let out = tool
        .call(json!({"action": "remove", "id": a_id}), &owner)
        .await
        .unwrap();
    assert!(out.contains(&a_id));
    assert!(rig.scheduler.get(&a_id).unwrap().is_none());
    rig.stop().await;
}

#[tokio::test(start_paused = true)]
async fn bad_tool_arguments_come_back_as_errors_and_store_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let rig = Rig::start(dir.path(), at("2026-03-01T12:00:00Z"), Config::default()).await;
    let tool = CronTool::new(rig.scheduler.clone());
    let c = ctx(key(), false);
    for (args, expect) in [
        (
            json!({"action": "add", "message": "x"}),
            "the schedule is empty",
        ),
        (
            json!({"action": "add", "message": "x", "at": "in 1h", "every": "1h"}),
            "exactly one of",
        ),
        (
            json!({"action": "add", "at": "in 1h"}),
            "missing required message",
        ),
        (
            json!({"action": "add", "message": "x", "cron": "0 9 * *"}),
            "expected 5 fields",
        ),
        (
            json!({"action": "add", "message": "x", "cron": "0 9 * * *", "tz": "Europe/Pariss"}),
            "did you mean \"Europe/Paris\"?",
        ),
        (
            json!({"action": "add", "message": "x", "every": "100ms"}),
            "at least 1s",
        ),
        (json!({"action": "remove"}), "missing required id"),
        (json!({"action": "pause"}), "unknown action"),
    ] {
        let e = tool.call(args.clone(), &c).await.unwrap_err();
        assert!(e.to_string().contains(expect), "{args}: {e}");
    }
    assert!(rig.scheduler.list(None).is_empty());
    rig.stop().await;
}
