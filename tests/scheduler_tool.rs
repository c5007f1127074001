//! The agent's `cron` tool: add / list / remove / run, scoped to the current chat unless the
//! sender is the owner; a reminder added through it fires into the chat it came from.

mod scheduler_support;

use std::sync::Arc;
use std::time::Duration;

use scheduler_support::{Rig, at, ctx, key, other, tool_rig};
use serde_json::{Value, json};
use switchboard::agent::tool::{Tool, ToolError};
use switchboard::agent::tools::Registry;
use switchboard::config::Config;
use switchboard::scheduler::{CronTool, NewJob, ScheduleSpec};
use switchboard_channel::{ChatKey, Origin, SystemOrigin};

#[tokio::test(start_paused = true)]
async fn a_reminder_added_by_the_tool_fires_into_its_chat() {
    let dir = tempfile::tempdir().unwrap();
    let (rig, tool) = tool_rig(dir.path()).await;
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
    let (rig, tool) = tool_rig(dir.path()).await;
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

    // The owner lists the current chat's jobs, or every chat's with key "*", and may act
    // on any chat.
    let listed = |out: String| -> Vec<String> {
        let list: Value = serde_json::from_str(&out).unwrap();
        let jobs = list["jobs"].as_array().unwrap();
        jobs.iter()
            .map(|j| j["message"].as_str().unwrap().to_string())
            .collect()
    };
    let here = tool.call(json!({"action": "list"}), &owner).await.unwrap();
    assert_eq!(listed(here), ["theirs"]);
    let all = tool
        .call(json!({"action": "list", "key": "*"}), &owner)
        .await
        .unwrap();
    let mut all = listed(all);
    all.sort();
    assert_eq!(all, ["mine", "theirs"]);
    let e = tool
        .call(json!({"action": "list", "key": "*"}), &mine)
        .await
        .unwrap_err();
    assert!(
        matches!(&e, ToolError::Refused(m) if m.contains("only the owner")),
        "{e:?}"
    );
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
    let (rig, tool) = tool_rig(dir.path()).await;
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
        // A chat id its channel never gives: a model call at each run for nobody.
        (
            json!({"action": "add", "message": "x", "every": "1h", "key": "telegram:@alice"}),
            "`telegram:@alice` is not a chat of telegram",
        ),
        (
            json!({"action": "add", "message": "x", "every": "1h", "key": "slack:two words"}),
            "`slack:two words` is not a chat of slack",
        ),
    ] {
        let c = if args.get("key").is_some() {
            ctx(key(), true)
        } else {
            c.clone()
        };
        let e = tool.call(args.clone(), &c).await.unwrap_err();
        assert!(e.to_string().contains(expect), "{args}: {e}");
    }
    assert!(rig.scheduler.list(None).is_empty());
    rig.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_misnamed_argument_is_refused_not_ignored() {
    let dir = tempfile::tempdir().unwrap();
    let rig = Rig::start(dir.path(), at("2026-03-01T12:00:00Z"), Config::default()).await;
    // Through the registry, which validates arguments against the schema as for the model.
    let tools = Registry::new(vec![Arc::new(CronTool::new(rig.scheduler.clone()))]);
    let args = json!({"action": "add", "message": "standup", "at": "tomorrow 09:00",
        "timezone": "Europe/Berlin"});
    let e = tools
        .call(
            "cron",
            &args.to_string(),
            &ctx(key(), false),
            Duration::from_secs(5),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(&e, ToolError::InvalidArguments(m) if m == "unknown argument timezone"),
        "{e:?}"
    );
    assert!(rig.scheduler.list(None).is_empty(), "nothing stored in UTC");
    rig.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_finished_one_shot_job_is_kept_but_no_longer_listed() {
    let dir = tempfile::tempdir().unwrap();
    let (rig, tool) = tool_rig(dir.path()).await;
    let me = ctx(key(), false);
    let out = tool
        .call(
            json!({"action": "add", "message": "call mum", "at": "in 1m"}),
            &me,
        )
        .await
        .unwrap();
    let id = serde_json::from_str::<Value>(&out).unwrap()["added"]["id"]
        .as_str()
        .unwrap()
        .to_string();
    tool.call(
        json!({"action": "add", "message": "water plants", "every": "1d"}),
        &me,
    )
    .await
    .unwrap();
    assert!(rig.handler.wait_for(1, Duration::from_secs(600)).await);
    // Wait (bounded) for the run to be recorded: it trails the hand-over to the bus.
    let stored = tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            let job = rig.scheduler.get(&id).unwrap().unwrap();
            if !job.runs.is_empty() {
                break job;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the run is recorded");
    assert!(!stored.enabled);

    let list: Value =
        serde_json::from_str(&tool.call(json!({"action": "list"}), &me).await.unwrap()).unwrap();
    let messages: Vec<&str> = list["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["message"].as_str().unwrap())
        .collect();
    assert_eq!(messages, ["water plants"]);
    let text = rig.scheduler.reminders_text(&key());
    assert!(text.starts_with("Reminders in this chat (1):"), "{text}");
    assert!(!text.contains("call mum"), "{text}");
    // Still stored with its run, and the CLI's listing shows it as finished.
    let all = rig.scheduler.list(Some(&key()));
    let done = all.iter().find(|j| j.id == id).unwrap();
    assert_eq!(done.runs.len(), 1);
    assert!(done.summary().contains("finished"), "{}", done.summary());
    rig.stop().await;
}

#[tokio::test(start_paused = true)]
async fn chats_that_only_get_answers_have_jobs_and_the_model_is_told_they_are_not_pushed() {
    let dir = tempfile::tempdir().unwrap();
    let (rig, tool) = tool_rig(dir.path()).await;
    let api: switchboard_channel::ChatKey = "api:alice".parse().unwrap();
    let add = json!({"action": "add", "message": "stretch", "every": "1h"});
    let out: Value =
        serde_json::from_str(&tool.call(add, &ctx(api.clone(), true)).await.unwrap()).unwrap();
    assert_eq!(out["added"]["key"], "api:alice", "{out}");
    assert!(
        out["note"].as_str().unwrap().contains("not pushed"),
        "{out}"
    );
    // A Telegram chat's reminder is pushed: no such note.
    let add = json!({"action": "add", "message": "water", "every": "1h"});
    let out: Value =
        serde_json::from_str(&tool.call(add, &ctx(key(), true)).await.unwrap()).unwrap();
    assert!(out.get("note").is_none(), "{out}");
    let new = NewJob::new(
        "cli:local".parse().unwrap(),
        "hello",
        ScheduleSpec::Every("1h".into()),
        "cli",
    );
    rig.scheduler.add(new).await.unwrap();
    assert_eq!(rig.scheduler.list(Some(&api)).len(), 1);
    assert_eq!(rig.scheduler.list(None).len(), 3);
    rig.stop().await;
}

/// Someone approved by pairing sets an hourly reminder in their DM; once the owner revokes
/// them it no longer fires (each run recorded as skipped, saying why), and it fires again
/// when they are approved again. A turn answering a run acts for the same person, so a job
/// set from it is held to the same check.
#[tokio::test(start_paused = true)]
async fn a_reminder_stops_firing_while_the_person_who_set_it_has_no_access() {
    use switchboard::access;
    use switchboard::pairing;
    use switchboard::scheduler::Outcome;
    use switchboard_channel::{InboundMessage, Sender};
    const HOUR: Duration = Duration::from_secs(3600);

    let dir = tempfile::tempdir().unwrap();
    let (rig, tool) = tool_rig(dir.path()).await;
    // Telegram runs (a recording channel stands in for it).
    let telegram = Arc::new(scheduler_support::TestChannel::default());
    rig.registry
        .write()
        .unwrap()
        .insert("telegram".into(), telegram.clone());
    let store = rig.store.as_ref();
    let bob = Sender {
        id: "42".into(),
        username: Some("bob".into()),
        display_name: "Bob".into(),
        is_owner: false,
    };
    let approve = || async {
        let (code, _) = pairing::code_for(store, "telegram", &bob, None)
            .await
            .unwrap()
            .unwrap();
        pairing::approve(store, "telegram", &code).await.unwrap();
    };
    approve().await;
    let dm: ChatKey = "telegram:42".parse().unwrap();
    let asked = InboundMessage::text("t:1", dm.clone(), bob.clone(), "remind me hourly");
    let mut c = ctx(dm.clone(), false);
    c.set_by = access::setters(&[asked]);
    let out = tool
        .call(
            json!({"action": "add", "message": "stretch", "every": "1h"}),
            &c,
        )
        .await
        .unwrap();
    let out: Value = serde_json::from_str(&out).unwrap();
    let id = out["added"]["id"].as_str().unwrap().to_string();

    assert!(rig.handler.wait_for(1, HOUR + HOUR / 60).await);
    let (fired, _) = rig.handler.received().remove(0);
    assert_eq!(
        fired.metadata["set_by"],
        json!([{"channel": "telegram", "id": "42", "username": "bob", "group": false}])
    );
    assert_eq!(access::setters(&[fired]), c.set_by);

    pairing::revoke(store, "telegram", "@bob").await.unwrap();
    assert!(
        !rig.handler.wait_for(2, 2 * HOUR).await,
        "not fired while revoked"
    );
    let job = rig.scheduler.get(&id).unwrap().unwrap();
    let last = job.runs.last().unwrap();
    assert_eq!(last.outcome, Outcome::Skipped);
    assert_eq!(
        last.error.as_deref(),
        Some("@bob (telegram 42), who set it, no longer has access")
    );
    assert!(
        job.enabled && job.next_run.is_some(),
        "kept on its schedule"
    );

    approve().await;
    assert!(
        rig.handler.wait_for(2, HOUR + HOUR / 60).await,
        "fires again"
    );
    rig.stop().await;
}

/// A Slack channel whose replies go in threads gives each mention its own key: the jobs
/// set in any of its threads are the channel's. A member sees, removes and counts them from
/// any thread (a new thread opens no new allowance of 20), and never another channel's
/// whose id starts alike.
#[tokio::test(start_paused = true)]
async fn the_threads_of_a_chat_share_its_jobs_and_its_limit() {
    let dir = tempfile::tempdir().unwrap();
    let (rig, tool) = tool_rig(dir.path()).await;
    let thread = |ts: &str| ctx(format!("slack:C1:{ts}").parse().unwrap(), false);
    let add = |n: usize| json!({"action": "add", "message": format!("job {n}"), "every": "1h"});
    let first = tool.call(add(0), &thread("1.0")).await.unwrap();
    let first: Value = serde_json::from_str(&first).unwrap();
    let id = first["added"]["id"].as_str().unwrap().to_string();
    // Another Slack channel, C12, whose id begins with C1's.
    tool.call(add(99), &ctx("slack:C12:1.0".parse().unwrap(), false))
        .await
        .unwrap();

    let out = tool
        .call(json!({"action": "list"}), &thread("2.0"))
        .await
        .unwrap();
    let out: Value = serde_json::from_str(&out).unwrap();
    let listed: Vec<&str> = out["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["message"].as_str().unwrap())
        .collect();
    assert_eq!(listed, ["job 0"]);
    assert!(
        rig.scheduler
            .reminders_text(&"slack:C1".parse().unwrap())
            .contains("job 0")
    );
    tool.call(json!({"action": "remove", "id": id}), &thread("3.0"))
        .await
        .unwrap();
    assert!(rig.scheduler.get(&id).unwrap().is_none());

    // An API chat whose id has a colon is a chat of its own: `api:bob` is not `api:bob:x`'s
    // room.
    let bob = ctx("api:bob".parse().unwrap(), false);
    tool.call(add(50), &ctx("api:bob:x".parse().unwrap(), false))
        .await
        .unwrap();
    let out = tool.call(json!({"action": "list"}), &bob).await.unwrap();
    assert_eq!(
        serde_json::from_str::<Value>(&out).unwrap()["jobs"],
        json!([])
    );

    for n in 1..=20 {
        tool.call(add(n), &thread(&format!("{n}.0"))).await.unwrap();
    }
    let e = tool.call(add(21), &thread("21.0")).await.unwrap_err();
    assert!(
        matches!(&e, ToolError::Refused(m) if m.contains("already has 20 active jobs")),
        "{e:?}"
    );
    rig.stop().await;
}
