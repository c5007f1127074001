//! Messages sent while the bot had no session: a RESUME that could not connect (serenity then
//! spins over the dead socket), a session Discord would not resume, a client the watchdog
//! replaced. Each time the new session fetches what came meanwhile, once, in order.

mod common;

use std::time::Duration;

use switchboard_fakes::discord::{Author, Fault, IncomingMessage};

const CHAN: u64 = 111;
const DM: u64 = 333;

fn alice() -> Author {
    Author::user(42, "alice")
}

/// CPU time (user + system) used so far by the adapter's client threads ("discord-gateway",
/// of every test in this binary).
fn client_threads_cpu() -> Duration {
    let mut ticks = 0u64;
    for task in std::fs::read_dir("/proc/self/task")
        .expect("/proc/self/task")
        .flatten()
    {
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        if comm.trim() != "discord-gateway" {
            continue;
        }
        let Ok(stat) = std::fs::read_to_string(task.path().join("stat")) else {
            continue; // the thread ended meanwhile
        };
        // Fields after the command name (in parentheses): utime and stime are the 12th and 13th.
        let rest = &stat[stat.rfind(')').expect("comm") + 2..];
        let f: Vec<&str> = rest.split_whitespace().collect();
        ticks += f[11].parse::<u64>().unwrap_or(0) + f[12].parse::<u64>().unwrap_or(0);
    }
    // USER_HZ is 100 on Linux.
    Duration::from_millis(ticks * 10)
}

fn ids(msgs: &[switchboard_channel::InboundMessage]) -> Vec<String> {
    msgs.iter().map(|m| m.id.clone()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resume_that_cannot_connect_starts_a_new_session_at_once_and_catches_up() {
    // Heartbeats and the stall watchdog far apart: only the stuck-runner check can act in time.
    let fake = common::fake_beating(Duration::from_secs(60)).await;
    let h = common::start_on(fake, |c| c.stall_timeout = Duration::from_secs(60)).await;
    let seen = h
        .fake
        .push_message_create(IncomingMessage::guild_mention(CHAN, alice(), "first"));
    let seen_dm = h
        .fake
        .push_message_create(IncomingMessage::dm(DM, alice(), "hi"));
    h.rec.wait_for_msgs(2).await;

    // The socket drops and the network is still down when serenity tries to resume.
    h.fake.refuse_new_connections(true);
    h.fake.drop_connection();
    assert!(
        h.fake.wait_for_refused(1, common::WAIT).await,
        "serenity did not try to resume"
    );
    let gap =
        h.fake
            .push_unseen_message(IncomingMessage::guild_mention(CHAN, alice(), "while away"));
    let gap_dm = h
        .fake
        .push_unseen_message(IncomingMessage::dm(DM, alice(), "still there?"));
    h.fake.refuse_new_connections(false);

    // serenity alone would spin until its next heartbeat (60 s), then identify.
    assert!(
        h.fake.wait_for_identify(2, Duration::from_secs(15)).await,
        "no new session in time: {:?}",
        h.rec.connected_reports()
    );
    let msgs = h.rec.wait_for_msgs(4).await;
    let want: Vec<String> = [seen, seen_dm, gap, gap_dm]
        .iter()
        .map(|id| format!("discord:msg:{id}"))
        .collect();
    let mut got = ids(&msgs);
    got.sort();
    let mut sorted = want.clone();
    sorted.sort();
    assert_eq!(got, sorted, "each message once");
    let away = msgs.iter().find(|m| m.id == want[2]).expect("gap message");
    assert_eq!(away.text, "while away");
    assert!(away.is_group && away.mentions_bot, "{away:?}");
    let away_dm = msgs.iter().find(|m| m.id == want[3]).expect("gap DM");
    assert!(!away_dm.is_group, "{away_dm:?}");
    let reads = h.fake.history_reads();
    assert!(
        reads.contains(&(CHAN, format!("after={seen}&limit=100")))
            && reads.contains(&(DM, format!("after={seen_dm}&limit=100"))),
        "{reads:?}"
    );

    // Nothing is left spinning: the client threads are about idle.
    let (cpu0, wall0) = (client_threads_cpu(), std::time::Instant::now());
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let (cpu, wall) = (client_threads_cpu().saturating_sub(cpu0), wall0.elapsed());
    assert!(
        cpu < wall / 4,
        "{cpu:?} of CPU in {wall:?}: something still spins"
    );
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_discord_will_not_resume_is_identified_again_and_caught_up_in_order() {
    let h = common::start().await;
    let seen = h
        .fake
        .push_message_create(IncomingMessage::guild_mention(CHAN, alice(), "first"));
    h.rec.wait_for_msgs(1).await;
    h.fake.end_session();
    // The first fetch of the gap meets a passing fault; the next one gets it.
    h.fake.inject_faults([Fault::ServerError]);
    h.fake.drop_connection();
    let gap: Vec<u64> = (1..=3)
        .map(|i| {
            h.fake.push_unseen_message(IncomingMessage::guild_mention(
                CHAN,
                alice(),
                &format!("gap {i}"),
            ))
        })
        .collect();
    assert!(
        h.fake.wait_for_identify(2, common::WAIT).await,
        "no IDENTIFY after the refused RESUME"
    );
    let live = h
        .fake
        .push_message_create(IncomingMessage::guild_mention(CHAN, alice(), "after"));
    let msgs = h.rec.wait_for_msgs(5).await;
    let want: Vec<String> = [seen, gap[0], gap[1], gap[2], live]
        .iter()
        .map(|id| format!("discord:msg:{id}"))
        .collect();
    assert_eq!(ids(&msgs), want, "once each, in the order they were sent");
    // One read refused with the fault, then the one recorded.
    assert_eq!(h.fake.faulted_posts(), 1, "the fault was met");
    assert_eq!(
        h.fake.history_reads().len(),
        1,
        "{:?}",
        h.fake.history_reads()
    );
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_replaced_by_the_watchdog_catches_up_and_the_bots_own_posts_are_skipped() {
    let h = common::start().await;
    assert!(h.fake.wait_for_heartbeats(1, common::WAIT).await);
    let seen = h
        .fake
        .push_message_create(IncomingMessage::dm(DM, alice(), "hello"));
    h.rec.wait_for_msgs(1).await;
    h.fake.freeze();
    // The bot's own reply lands in the channel's history too.
    let key = switchboard_channel::ChatKey::new("discord", DM.to_string());
    let reply = switchboard_channel::OutboundMessage::new(key, "hi alice");
    switchboard_channel::Channel::send(&*h.channel, &reply)
        .await
        .expect("reply posted");
    let gap = h
        .fake
        .push_unseen_message(IncomingMessage::dm(DM, alice(), "are you there?"));
    assert!(
        h.fake.wait_for_sessions(2, Duration::from_secs(20)).await,
        "no new session after the gateway froze"
    );
    let msgs = h.rec.wait_for_msgs(2).await;
    assert_eq!(
        ids(&msgs),
        vec![format!("discord:msg:{seen}"), format!("discord:msg:{gap}")]
    );
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_was_sent_while_the_gateway_was_stopped_is_fetched_at_the_next_start() {
    use std::sync::Arc;
    use switchboard_channel::{Channel, InboundSender};
    use switchboard_discord::DiscordChannel;
    use tokio_util::sync::CancellationToken;

    let fake = common::fake().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let state = dir.path().join("discord-recent.json");
    let start = |rec: Arc<common::Recorder>| {
        let mut cfg = common::config(&fake, common::TOKEN);
        cfg.state_file = Some(state.clone());
        let channel = DiscordChannel::new(cfg).expect("channel");
        let shutdown = CancellationToken::new();
        let s = shutdown.clone();
        let run = tokio::spawn(async move { channel.run(InboundSender::new(rec), s).await });
        (shutdown, run)
    };

    let first = common::Recorder::new();
    let (shutdown, run) = start(first.clone());
    assert!(fake.wait_for_sessions(1, common::WAIT).await);
    let seen = fake.push_message_create(IncomingMessage::guild_mention(CHAN, alice(), "before"));
    first.wait_for_msgs(1).await;
    shutdown.cancel();
    let stopped = tokio::time::timeout(common::WAIT, run).await;
    assert!(matches!(stopped, Ok(Ok(Ok(())))), "{stopped:?}");
    assert!(state.exists(), "no state file written at shutdown");

    let away =
        fake.push_unseen_message(IncomingMessage::guild_mention(CHAN, alice(), "while down"));
    let second = common::Recorder::new();
    let (shutdown, run) = start(second.clone());
    let msgs = second.wait_for_msgs(1).await;
    assert_eq!(ids(&msgs), vec![format!("discord:msg:{away}")]);
    assert!(
        fake.history_reads()
            .contains(&(CHAN, format!("after={seen}&limit=100"))),
        "{:?}",
        fake.history_reads()
    );
    shutdown.cancel();
    let _ = tokio::time::timeout(common::WAIT, run).await;
}
