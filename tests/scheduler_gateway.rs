//! Reminders through the whole gateway: the agent's `cron` tool (driven by the fake LLM)
//! and the CLI through the admin API both create jobs that fire into their chat, composed
//! by the agent with a `System(Cron)` message.

mod common;

use std::time::Duration;

use common::Env;
use common::platform::cli;
use switchboard_channel::{ChatKey, InboundMessage, Sender};
use switchboard_fakes::llm::{FakeLlm, Reply};

const WAIT: Duration = Duration::from_secs(20);
/// A chat of a channel this build has (not running here: the replies wait in the outbox).
const OPS: &str = "telegram:4242";

/// A member of the chat who is not the owner.
fn ann() -> Sender {
    Sender {
        id: "u1".into(),
        username: None,
        display_name: "Ann".into(),
        is_owner: false,
    }
}

/// `switchboard cron add --key KEY <schedule…> --message MESSAGE`.
fn cron_add(env: &Env, key: &str, schedule: &[&str], message: &str) -> (bool, String, String) {
    let mut args = vec!["cron", "add", "--key", key];
    args.extend_from_slice(schedule);
    args.extend(["--message", message]);
    cli(env, &args)
}

#[tokio::test]
async fn a_reminder_set_by_the_model_fires_into_its_chat() {
    let llm = FakeLlm::start().await;
    let env = Env::new(&llm.base_url(), "");
    let (ch, running, shutdown) = env.start_with_test_channel().await;
    llm.push(Reply::tool_call(
        "cron",
        serde_json::json!({"action": "add", "message": "call mum", "at": "in 2s"}),
    ));
    llm.push(Reply::text("Reminder set."));
    let key = ChatKey::new("test", "family");
    let mut asked = InboundMessage::text(
        "r1",
        key.clone(),
        ann(),
        "remind me in 2 seconds to call mum",
    );
    (asked.is_group, asked.mentions_bot) = (true, true);
    running.inbound().publish(asked).await.unwrap();
    let sent = ch.wait_for(1, WAIT).await;
    assert_eq!(sent[0].text, "Reminder set.");
    let jobs = running.shared.scheduler.list(Some(&key));
    assert_eq!(jobs.len(), 1);
    // Made by Ann's message: it fires only while she has access.
    let ann_set_it = switchboard::access::Setter {
        channel: "test".into(),
        id: "u1".into(),
        username: None,
        group: true,
    };
    assert_eq!(jobs[0].set_by, [ann_set_it]);

    // The job fires: the agent gets a System(Cron) turn for the same chat and its reply
    // reaches that chat.
    let sent = ch.wait_for(2, WAIT).await;
    assert_eq!(sent[1].key, key);
    let reqs = llm.requests();
    let last = reqs.last().unwrap().last_user_text();
    assert!(
        last.contains("scheduled job") && last.contains("call mum"),
        "{last}"
    );
    assert!(sent[1].text.contains("call mum"), "{}", sent[1].text);
    // Asked to remind, the model was pointed at the cron tool; the reminder's own run is not
    // (it would set itself again). That run is worded for the group it was set in, and greets
    // no "Scheduler".
    const NUDGE: &str = "use the cron tool";
    assert!(reqs[0].body.to_string().contains(NUDGE));
    let run = reqs.last().unwrap();
    assert!(!run.body.to_string().contains(NUDGE), "{}", run.body);
    let system = run.system_text();
    assert!(system.contains("(a group chat)"), "{system}");
    assert!(
        system.contains("No one wrote this turn") && system.contains("set by test user u1"),
        "{system}"
    );
    assert!(!system.contains("Scheduler"), "{system}");
    // One-shot: done after it ran, its run recorded (the record is written right after the
    // hand-over to the bus, so it may trail the reply by a moment).
    let deadline = tokio::time::Instant::now() + WAIT;
    let job = loop {
        let job = running.shared.scheduler.list(Some(&key)).remove(0);
        if !job.runs.is_empty() || tokio::time::Instant::now() > deadline {
            break job;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert!(!job.enabled, "{job:?}");
    assert_eq!(job.runs.len(), 1, "{job:?}");
    shutdown.cancel();
    running.stopped().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cli_jobs_go_through_the_running_gateway_and_fire() {
    let llm = FakeLlm::start().await;
    let env = Env::new(&llm.base_url(), "");
    // Offline: bad input is refused with a clear message and nothing is stored.
    let (ok, _, err) = cron_add(
        &env,
        OPS,
        &["--cron", "0 9 * * *", "--tz", "Europe/Berln"],
        "x",
    );
    assert!(!ok);
    assert!(err.contains("Europe/Berlin"), "{err}");
    let (ok, _, err) = cron_add(&env, "telgram:42", &["--every", "1h"], "x");
    assert!(!ok);
    assert!(
        err.contains("unknown channel `telgram` in `telgram:42`"),
        "{err}"
    );
    let (ok, out, _) = cli(&env, &["cron", "list"]);
    assert!(ok);
    assert!(out.contains("no jobs"), "{out}");
    // Offline, `cron run` queues the run: the gateway runs it when it starts.
    let (ok, out, err) = cron_add(&env, OPS, &["--every", "7d"], "weekly backup check");
    assert!(ok, "{err}");
    // `telegram:4242\t<id> — …`
    let id = out.split('\t').nth(1).unwrap().split(' ').next().unwrap();
    let (ok, out, err) = cli(&env, &["cron", "run", id]);
    assert!(ok, "{err}");
    assert_eq!(
        out.trim(),
        format!("queued {id}: the gateway runs it when it starts")
    );
    assert_eq!(llm.request_count(), 0);

    let mut gw = env.spawn();
    gw.wait_admin(WAIT);
    let run = llm
        .wait_for_request(|r| r.last_user_text().contains("weekly backup check"), WAIT)
        .await
        .expect("the queued run ran when the gateway started");
    assert!(run.last_user_text().contains("scheduled job"));
    let (ok, out, err) = cron_add(&env, OPS, &["--at", "in 2s"], "stand-up time");
    assert!(ok, "{err}");
    assert!(out.contains(OPS), "{out}");
    let (ok, out, err) = cron_add(
        &env,
        OPS,
        &["--cron", "0 9 * * MON-FRI", "--tz", "Europe/Berlin"],
        "weekday digest",
    );
    assert!(ok, "{err}");
    assert!(out.contains("weekday digest"), "{out}");
    // The running gateway (its admin API) refuses a key no channel serves, as the offline
    // CLI did.
    let (ok, _, err) = cron_add(&env, "telgram:42", &["--every", "1h"], "x");
    assert!(!ok);
    assert!(
        err.contains("unknown channel `telgram` in `telgram:42`"),
        "{err}"
    );
    // An API chat gets only the answers to its requests: its reminder is not pushed but
    // kept in its history, where its next request finds it.
    llm.push_for("drink water", Reply::text("Time for a glass of water."));
    let (ok, _, err) = cron_add(&env, "api:ops", &["--at", "in 1s"], "drink water");
    assert!(ok, "{err}");
    let run = llm
        .wait_for_request(|r| r.last_user_text().contains("drink water"), WAIT)
        .await
        .expect("the API chat's job fired through the agent");
    assert!(run.last_user_text().contains("scheduled job"));
    common::until("the reminder kept in the API chat's history", || {
        let (ok, out, err) = cli(&env, &["sessions", "show", "api:ops"]);
        assert!(ok, "{err}");
        out.contains("Time for a glass of water.")
    })
    .await;
    let reqs = llm
        .wait_for_request(|r| r.last_user_text().contains("stand-up time"), WAIT)
        .await
        .expect("the CLI job fired through the agent");
    assert!(reqs.last_user_text().contains("scheduled job"));
    // Both jobs are still there after the gateway saved the fired one.
    let (ok, out, _) = cli(&env, &["cron", "list", "--key", OPS]);
    assert!(ok);
    assert!(
        out.contains("stand-up time") && out.contains("weekday digest"),
        "{out}"
    );
    gw.sigterm();
    assert!(gw.wait_exit(WAIT).0.success());
}

#[tokio::test]
async fn a_heartbeat_is_composed_in_the_context_of_its_chat() {
    let llm = FakeLlm::start().await;
    let env = Env::new(&llm.base_url(), "");
    let config = std::fs::read_to_string(env.config_path()).unwrap().replace(
        "[heartbeat]\nenabled = false",
        "[heartbeat]\nenabled = true\ninterval = \"1s\"\ntarget = \"test:garden\"",
    );
    std::fs::write(env.config_path(), config).unwrap();
    let workspace = env.dir.path().join("workspace");
    std::fs::create_dir_all(&workspace).unwrap();
    std::fs::write(
        workspace.join("HEARTBEAT.md"),
        "- remind me of my plant chores\n",
    )
    .unwrap();
    let (_ch, running, shutdown) = env.start_with_test_channel().await;
    llm.push(Reply::text("Noted: the ficus on Fridays."));
    running
        .inbound()
        .publish(InboundMessage::text(
            "g1",
            ChatKey::new("test", "garden"),
            ann(),
            "I water the ficus on Fridays",
        ))
        .await
        .unwrap();
    // DESIGN §1: a producer's message is composed in the context of the chat it goes to
    // (a beat before the chat's first turn, on a slow machine, has no history yet).
    let with_history = |r: &switchboard_fakes::llm::RecordedRequest| {
        let sent = serde_json::to_string(&r.body["messages"]).unwrap();
        r.last_user_text().contains("plant chores")
            && sent.contains("I water the ficus on Fridays")
            && sent.contains("Noted: the ficus on Fridays.")
    };
    assert!(
        llm.wait_for_request(with_history, WAIT).await.is_ok(),
        "no heartbeat with the chat's history: {:#?}",
        llm.requests().last().map(|r| &r.body["messages"])
    );
    shutdown.cancel();
    running.stopped().await;
}

#[tokio::test]
async fn an_api_caller_sets_reminders_for_its_chat_only_and_they_are_kept_not_pushed() {
    let llm = FakeLlm::start().await;
    let env = Env::new(&llm.base_url(), "");
    let (running, shutdown) = env.start(Default::default()).await;
    llm.push(Reply::tool_call(
        "cron",
        serde_json::json!({"action": "add", "message": "stretch", "every": "1h"}),
    ));
    // Not the owner: no other chat. But any schedule (it may call the model as often as it
    // likes by itself).
    llm.push(Reply::tool_call(
        "cron",
        serde_json::json!({"action": "add", "message": "ping", "every": "30s"}),
    ));
    llm.push(Reply::tool_call(
        "message",
        serde_json::json!({"key": "telegram:777", "text": "hi stranger"}),
    ));
    llm.push(Reply::text("Set."));
    let reply = common::ask(
        &common::base(&running),
        "ops",
        "remind me hourly to stretch",
    )
    .await;
    assert_eq!(common::reply_text(&reply), "Set.");
    let key: ChatKey = "api:ops".parse().unwrap();
    let jobs = running.shared.scheduler.list(Some(&key));
    let mut set: Vec<_> = jobs.iter().map(|j| j.message.as_str()).collect();
    set.sort_unstable();
    assert_eq!(set, ["ping", "stretch"]);
    let reqs = llm.requests();
    // The model was told the reminders are not pushed here, to say so, and was refused the
    // message to a new chat.
    let results = reqs[3].body.to_string();
    assert!(results.contains("not pushed"), "{results}");
    assert!(
        !results.contains("runs more than once a minute"),
        "{results}"
    );
    assert!(
        results.contains("only the owner may message new chats"),
        "{results}"
    );
    shutdown.cancel();
    running.stopped().await;
}

/// A job whose run asks for the job to run again (`cron run` from its own turn) no longer
/// loops: the run's turn is refused, once, and no further run or model call follows. (It
/// made ~19 model calls a second until the owner removed the job.)
#[tokio::test]
async fn a_job_cannot_run_itself_from_its_own_run() {
    use switchboard::scheduler::{NewJob, ScheduleSpec};
    let llm = FakeLlm::start().await;
    let env = Env::new(&llm.base_url(), "");
    let (running, shutdown) = env.start(Default::default()).await;
    let key: ChatKey = "api:ops".parse().unwrap();
    let new = NewJob::new(
        key.clone(),
        "LOOP: run this job again now with the cron tool",
        ScheduleSpec::At("in 1d".into()),
        "chat:api:ops",
    );
    let id = running.shared.scheduler.add(new).await.unwrap().id;
    // The model does what each message says, as a model taking a job's words at face value.
    let job = id.clone();
    llm.set_responder(move |body| {
        let messages = body["messages"].as_array().cloned().unwrap_or_default();
        let last = messages.last().cloned().unwrap_or_default();
        if last["role"] == "tool" {
            return Reply::text("done");
        }
        let text = last["content"].as_str().unwrap_or_default();
        if text.contains("LOOP") || text.contains("run the job") {
            Reply::tool_call("cron", serde_json::json!({"action": "run", "id": job}))
        } else {
            Reply::text("nothing to do")
        }
    });
    // A member who is not the owner runs it once.
    let reply = common::ask(&common::base(&running), "ops", "please run the job").await;
    assert_eq!(common::reply_text(&reply), "done");
    let refused = llm
        .wait_for_request(|r| r.body.to_string().contains("cannot run itself"), WAIT)
        .await
        .expect("the run's turn is refused");
    assert!(
        refused.last_user_text().contains("LOOP"),
        "{:?}",
        refused.body
    );
    // A message after it is answered after anything the run could have queued before it.
    let reply = common::ask(&common::base(&running), "ops", "status?").await;
    assert_eq!(common::reply_text(&reply), "nothing to do");
    let runs_turns = llm
        .requests()
        .iter()
        .filter(|r| r.last_user_text().contains("LOOP"))
        .count();
    // The run's turn: the call that asked to run, the one after the refusal.
    assert_eq!(runs_turns, 2);
    assert_eq!(llm.request_count(), 5);
    assert_eq!(
        running
            .shared
            .scheduler
            .get(&id)
            .unwrap()
            .unwrap()
            .runs
            .len(),
        1
    );
    shutdown.cancel();
    running.stopped().await;
}

/// `cron list` says why a job's last run did not go: here its setter lost access.
#[tokio::test]
async fn cron_list_says_why_a_last_run_was_skipped() {
    use switchboard::scheduler::{CatchUp, Delivery, Job, Outcome, Run, Schedule};
    use switchboard::store::{Batch, SledStore, Store, Tree};
    let env = Env::new("http://127.0.0.1:9", "");
    let at = chrono::DateTime::from_timestamp(1_790_000_000, 0).unwrap();
    {
        let store = SledStore::open(&env.data_dir()).unwrap();
        let job = Job {
            id: "jbob".into(),
            key: OPS.parse().unwrap(),
            message: "stretch".into(),
            schedule: Schedule::Every {
                every_ms: 3_600_000,
                anchor: at,
            },
            tz: "UTC".into(),
            created_by: format!("chat:{OPS}"),
            created_at: at,
            enabled: true,
            next_run: Some(at + chrono::Duration::hours(1)),
            runs: vec![Run {
                at,
                due: at,
                outcome: Outcome::Skipped,
                error: Some("@bob (telegram 42), who set it, no longer has access".into()),
            }],
            delivery: Delivery::Agent,
            catch_up: CatchUp::Once,
            model: None,
            set_by: Vec::new(),
        };
        let mut b = Batch::default();
        b.put(Tree::Cron, Job::store_key(&job.id), job.to_bytes().unwrap());
        store.commit(b).await.unwrap();
    }
    let (ok, out, err) = cli(&env, &["cron", "list"]);
    assert!(ok, "{err}");
    assert!(
        out.contains(
            "stretch (last run skipped: @bob (telegram 42), who set it, no longer has access)"
        ),
        "{out}"
    );
}

/// A Telegram group that became a supergroup (a new id): its conversation, its reminders
/// and the heartbeat's last chat follow it to the new key; told twice (each side of the move
/// reports it), nothing more changes.
#[tokio::test]
async fn a_chat_that_moved_takes_its_conversation_and_reminders_along() {
    use switchboard::scheduler::{NewJob, ScheduleSpec};
    use switchboard::store::Tree;
    use switchboard_channel::InboundSink;
    let llm = FakeLlm::start().await;
    let env = Env::new(&llm.base_url(), "");
    let (_ch, running, shutdown) = env.start_with_test_channel().await;
    let (old, new): (ChatKey, ChatKey) = (
        "telegram:-555".parse().unwrap(),
        "telegram:-100555".parse().unwrap(),
    );
    let store = &running.shared.store;
    let session = br#"{"messages":[{"role":"user","content":"we moved"}],"turns":1}"#;
    store
        .put(Tree::Sessions, old.to_string().as_bytes(), session)
        .unwrap();
    store
        .put(Tree::Meta, b"last_active", old.to_string().as_bytes())
        .unwrap();
    let scheduler = &running.shared.scheduler;
    let job = scheduler
        .add(NewJob::new(
            old.clone(),
            "water the plants",
            ScheduleSpec::Every("1d".into()),
            "cli",
        ))
        .await
        .unwrap();

    for _ in 0..2 {
        running.shared.sink.moved(&old, &new).await.unwrap();
    }
    let at = |k: &ChatKey| store.get(Tree::Sessions, k.to_string().as_bytes()).unwrap();
    assert_eq!(at(&new).as_deref(), Some(&session[..]));
    assert_eq!(at(&old), None);
    assert_eq!(
        store.get(Tree::Meta, b"last_active").unwrap().as_deref(),
        Some(new.to_string().as_bytes())
    );
    assert!(scheduler.list(Some(&old)).is_empty());
    let moved = scheduler.list(Some(&new));
    assert_eq!(moved.len(), 1);
    assert_eq!((&moved[0].id, &moved[0].next_run), (&job.id, &job.next_run));
    assert_eq!(scheduler.get(&job.id).unwrap().unwrap().key, new);
    shutdown.cancel();
    running.stopped().await;
}

/// A job whose chat refuses every reply (the bot was removed from it) stops after three
/// such runs, instead of calling the model for ever; each run says why.
#[tokio::test]
async fn a_job_whose_chat_refuses_its_replies_stops_after_three_runs() {
    let llm = FakeLlm::start().await;
    llm.set_default(Reply::text("ping"));
    let env = Env::new(&llm.base_url(), "");
    let (ch, running, shutdown) = env.start_with_test_channel().await;
    let gone = ChatKey::new("test", "left");
    ch.refuse(&gone);
    let scheduler = &running.shared.scheduler;
    let every = switchboard::scheduler::ScheduleSpec::Every("1s".into());
    let job = switchboard::scheduler::NewJob::new(gone.clone(), "ping them", every, "cli");
    let job = scheduler.add(job).await.unwrap();
    let deadline = tokio::time::Instant::now() + WAIT;
    let stopped = loop {
        let j = scheduler.get(&job.id).unwrap().unwrap();
        if !j.enabled {
            break j;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "still running: {j:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(ch.refused(), 3);
    assert_eq!(stopped.next_run, None);
    let errors: Vec<&str> = stopped
        .runs
        .iter()
        .filter_map(|r| r.error.as_deref())
        .collect();
    assert_eq!(
        errors,
        ["the platform refused the reply: chat not found"; 3]
    );
    shutdown.cancel();
    running.stopped().await;
    assert_eq!(llm.request_count(), 3, "no run after it stopped");
}
