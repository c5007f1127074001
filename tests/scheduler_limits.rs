//! The limits of the `cron` tool for those who are not the owner: schedules at most once a
//! minute and 20 jobs a chat for chat members, every 30 s for callers of the HTTP API,
//! `cron run` at most once a minute, and no job run from a turn its own run led to.

mod scheduler_support;

use std::time::Duration;

use scheduler_support::{ctx, key, other, tool_rig};
use serde_json::{Value, json};
use switchboard::agent::tool::{Tool, ToolContext, ToolError};
use switchboard::scheduler::{NewJob, ScheduleSpec};
use switchboard_channel::ChatKey;

#[tokio::test(start_paused = true)]
async fn jobs_set_by_others_than_the_owner_run_at_most_once_a_minute_and_20_a_chat() {
    let dir = tempfile::tempdir().unwrap();
    let (rig, tool) = tool_rig(dir.path()).await;
    let member = ctx(key(), false);
    for (schedule, value) in [
        ("every", "30s"),
        ("every", "59s"),
        ("cron", "* * * * * *"),
        ("cron", "*/30 * * * * *"),
        ("cron", "0,59 0 9 * * *"),
    ] {
        let args = json!({"action": "add", "message": "ping", schedule: value});
        let e = tool.call(args, &member).await.unwrap_err();
        assert!(
            matches!(&e, ToolError::Refused(m) if m.contains("runs more than once a minute")),
            "{schedule} {value}: {e:?}"
        );
    }
    assert!(rig.scheduler.list(None).is_empty());
    // A minute apart is fine, in every form.
    for (schedule, value) in [
        ("every", "1m"),
        ("cron", "* * * * *"),
        ("cron", "5 * * * * *"),
    ] {
        let args = json!({"action": "add", "message": "ok", schedule: value});
        tool.call(args, &member).await.unwrap();
    }
    for i in 3..20 {
        let args = json!({"action": "add", "message": format!("job {i}"), "every": "1h"});
        tool.call(args, &member).await.unwrap();
    }
    let e = tool
        .call(
            json!({"action": "add", "message": "one more", "at": "in 1h"}),
            &member,
        )
        .await
        .unwrap_err();
    assert!(
        matches!(&e, ToolError::Refused(m) if m.contains("already has 20 active jobs")),
        "{e:?}"
    );
    assert_eq!(rig.scheduler.list(Some(&key())).len(), 20);
    // Another chat has its own 20.
    let args = json!({"action": "add", "message": "elsewhere", "every": "1h"});
    tool.call(args, &ctx(other(), false)).await.unwrap();

    // The owner (and the CLI and admin API, through `Scheduler::add`) keep today's limits.
    let owner = ctx(key(), true);
    for (schedule, value) in [("every", "30s"), ("cron", "*/10 * * * * *")] {
        let args = json!({"action": "add", "message": "owner's", schedule: value});
        tool.call(args, &owner).await.unwrap();
    }
    rig.add(NewJob::new(
        key(),
        "cli's",
        ScheduleSpec::Every("30s".into()),
        "cli",
    ))
    .await;
    assert_eq!(rig.scheduler.list(Some(&key())).len(), 23);
    rig.stop().await;
}

/// A caller of the HTTP API may call the model as often as it likes while it is connected,
/// so it sets jobs as often as DESIGN's `every = "30s"` (crontab with seconds too), not
/// more (a job goes on after its caller left), runs a job again after 30 s, and keeps the
/// cap of 20 jobs a chat and no owner's reach over other chats.
#[tokio::test(start_paused = true)]
async fn a_caller_of_the_api_sets_jobs_every_30s_but_stays_in_its_chat() {
    let dir = tempfile::tempdir().unwrap();
    let (rig, tool) = tool_rig(dir.path()).await;
    let api: ChatKey = "api:bob".parse().unwrap();
    let caller = ctx(api.clone(), false);
    let mut ids = Vec::new();
    for (schedule, value) in [
        ("every", "1h"),
        ("every", "30s"),
        ("cron", "0,30 * * * * *"),
    ] {
        let args = json!({"action": "add", "message": "ping", schedule: value});
        let added: Value = serde_json::from_str(&tool.call(args, &caller).await.unwrap()).unwrap();
        ids.push(added["added"]["id"].as_str().unwrap().to_string());
    }
    let id = &ids[0];
    for (schedule, value) in [
        ("every", "29s"),
        ("cron", "*/10 * * * * *"),
        ("cron", "0,1 * * * * *"),
    ] {
        let args = json!({"action": "add", "message": "ping", schedule: value});
        let e = tool.call(args, &caller).await.unwrap_err();
        assert!(
            matches!(&e, ToolError::Refused(m) if m.contains("runs more often than every 30s")),
            "{schedule} {value}: {e:?}"
        );
    }
    let run = || tool.call(json!({"action": "run", "id": id}), &caller);
    run().await.unwrap();
    let e = run().await.unwrap_err();
    assert!(
        matches!(&e, ToolError::Refused(m) if m.contains("ran less than 30s ago") && m.contains("in 30s")),
        "{e:?}"
    );
    tokio::time::advance(Duration::from_secs(31)).await;
    run().await.unwrap();
    let elsewhere = json!({"action": "add", "message": "x", "every": "1h", "key": "test:other"});
    assert!(matches!(
        tool.call(elsewhere, &caller).await,
        Err(ToolError::Refused(_))
    ));
    for i in 3..20 {
        let args = json!({"action": "add", "message": format!("job {i}"), "every": "1h"});
        tool.call(args, &caller).await.unwrap();
    }
    let args = json!({"action": "add", "message": "one more", "every": "1h"});
    let e = tool.call(args, &caller).await.unwrap_err();
    assert!(
        matches!(&e, ToolError::Refused(m) if m.contains("already has 20 active jobs")),
        "{e:?}"
    );
    assert_eq!(rig.scheduler.list(Some(&api)).len(), 20);
    assert_eq!(rig.scheduler.get(id).unwrap().unwrap().runs.len(), 2);
    rig.stop().await;
}

/// `cron run` holds a member to once a minute per job (it had no limit); not the owner. No
/// one runs a job from a turn its own run led to (owner or not: a job whose message says
/// "run this job" looped at ~19 model calls a second), and a job set from such a turn first
/// runs a minute ahead at the earliest (else each run could set the next a second later).
#[tokio::test(start_paused = true)]
async fn runs_are_held_to_once_a_minute_and_never_asked_for_by_their_own_run() {
    let dir = tempfile::tempdir().unwrap();
    let (rig, tool) = tool_rig(dir.path()).await;
    let member = ctx(key(), false);
    let add = json!({"action": "add", "message": "stretch", "every": "1h"});
    let added: Value = serde_json::from_str(&tool.call(add, &member).await.unwrap()).unwrap();
    let id = added["added"]["id"].as_str().unwrap().to_string();
    let run = |c: ToolContext| {
        let args = json!({"action": "run", "id": id});
        let tool = &tool;
        async move { tool.call(args, &c).await }
    };
    run(member.clone()).await.unwrap();
    let e = run(member.clone()).await.unwrap_err();
    assert!(
        matches!(&e, ToolError::Refused(m) if m.contains("at most once a minute") && m.contains("in 60s")),
        "{e:?}"
    );
    tokio::time::advance(Duration::from_secs(61)).await;
    run(member.clone()).await.unwrap();
    let owner = ctx(key(), true);
    // (A moment apart: runs in the same millisecond share a message id.)
    for _ in 0..2 {
        tokio::time::advance(Duration::from_millis(10)).await;
        run(owner.clone()).await.unwrap();
    }
    assert!(rig.handler.wait_for(4, Duration::from_secs(10)).await);
    // The turn the run leads to carries the job in its chain.
    let (msg, _) = rig.handler.received().remove(3);
    let chain = switchboard::chain::Chain::of(&[msg]);
    assert_eq!(chain.jobs, std::slice::from_ref(&id));
    for who in [owner, member] {
        let from_run = ToolContext {
            chain: chain.clone(),
            member: None,
            ..who
        };
        let e = run(from_run.clone()).await.unwrap_err();
        assert!(
            matches!(&e, ToolError::Refused(m) if m.contains("cannot run itself")),
            "{e:?}"
        );
        if from_run.sender_is_owner {
            continue;
        }
        let soon = json!({"action": "add", "message": "again", "at": "in 10s"});
        let e = tool.call(soon, &from_run).await.unwrap_err();
        assert!(
            matches!(&e, ToolError::Refused(m) if m.contains("60s from now at the earliest")),
            "{e:?}"
        );
        let later = json!({"action": "add", "message": "again", "at": "in 2m"});
        tool.call(later, &from_run).await.unwrap();
    }
    assert_eq!(rig.scheduler.get(&id).unwrap().unwrap().runs.len(), 4);
    rig.stop().await;
}

/// Someone who lost access (a pairing revoked) leaves their jobs to be skipped, and their
/// places in the chat's 20 free for the others.
#[tokio::test(start_paused = true)]
async fn the_jobs_of_someone_revoked_leave_their_places_free() {
    let dir = tempfile::tempdir().unwrap();
    let (rig, tool) = tool_rig(dir.path()).await;
    let store = rig.store.as_ref();
    let mut approved = Vec::new();
    for (id, name) in [("77", "sam"), ("88", "mom")] {
        let who = switchboard_channel::Sender {
            id: id.into(),
            username: Some(name.into()),
            display_name: name.into(),
            is_owner: false,
        };
        let (code, _) = switchboard::pairing::code_for(store, "telegram", &who, None)
            .await
            .unwrap()
            .unwrap();
        switchboard::pairing::approve(store, "telegram", &code)
            .await
            .unwrap();
        approved.push(ToolContext {
            set_by: vec![switchboard::access::Setter {
                channel: "telegram".into(),
                id: id.into(),
                username: Some(name.into()),
                group: true,
            }],
            ..ctx(key(), false)
        });
    }
    let (sam, mom) = (&approved[0], &approved[1]);
    let add = |n: usize| json!({"action": "add", "message": format!("spam {n}"), "every": "1m"});
    for n in 0..20 {
        tool.call(add(n), sam).await.unwrap();
    }
    let dinner = json!({"action": "add", "message": "Sunday dinner", "cron": "0 17 * * SUN"});
    let e = tool.call(dinner.clone(), mom).await.unwrap_err();
    assert!(
        matches!(&e, ToolError::Refused(m) if m.contains("20 active jobs")),
        "{e:?}"
    );
    switchboard::pairing::revoke(store, "telegram", "sam")
        .await
        .unwrap();
    tool.call(dinner, mom).await.unwrap();
    assert_eq!(rig.scheduler.list(Some(&key())).len(), 21);
    rig.stop().await;
}

/// A member who runs the owner's job (the `cron` tool's `run`) is among those its turn acts
/// for: the run does not lend them the owner's powers.
#[tokio::test(start_paused = true)]
async fn a_run_asked_for_by_a_member_acts_for_them_too() {
    let dir = tempfile::tempdir().unwrap();
    let (rig, tool) = tool_rig(dir.path()).await;
    let job = rig
        .add(NewJob::new(
            key(),
            "take the bins out",
            ScheduleSpec::Every("1d".into()),
            "cli",
        ))
        .await;
    let sam = switchboard::access::Setter {
        channel: "telegram".into(),
        id: "77".into(),
        username: Some("sam".into()),
        group: true,
    };
    let member = ToolContext {
        set_by: vec![sam.clone()],
        ..ctx(key(), false)
    };
    tool.call(json!({"action": "run", "id": job.id}), &member)
        .await
        .unwrap();
    assert!(rig.handler.wait_for(1, Duration::from_secs(60)).await);
    let (msg, _) = rig.handler.received().remove(0);
    assert_eq!(
        switchboard::access::setters(std::slice::from_ref(&msg)),
        [sam]
    );
    let mut config = switchboard::config::Config::default();
    config.channels.telegram.allow_from = vec!["1".into()];
    let who = switchboard::agent::member::of_turn(&config, &[msg], &[], false);
    assert_eq!(who.map(|m| m.name), Some("@sam (telegram 77)".to_string()));
    // Stored, the job is still the owner's alone.
    assert!(
        rig.scheduler
            .get(&job.id)
            .unwrap()
            .unwrap()
            .set_by
            .is_empty()
    );
    // A member may not remove it, but may remove their own.
    let member = ToolContext {
        member: Some(switchboard::agent::tool::Member {
            name: "sam".into(),
            folder: None,
            files: Vec::new(),
        }),
        ..member
    };
    let e = tool
        .call(json!({"action": "remove", "id": job.id}), &member)
        .await
        .unwrap_err();
    assert!(
        matches!(&e, ToolError::Refused(m) if m.contains("set by someone else")),
        "{e:?}"
    );
    let added: Value = serde_json::from_str(
        &tool
            .call(
                json!({"action": "add", "message": "mine", "every": "1h"}),
                &member,
            )
            .await
            .unwrap(),
    )
    .unwrap();
    let mine = added["added"]["id"].as_str().unwrap();
    tool.call(json!({"action": "remove", "id": mine}), &member)
        .await
        .unwrap();
    assert!(rig.scheduler.get(&job.id).unwrap().is_some());
    rig.stop().await;
}
