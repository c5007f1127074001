//! Faults against the fake Discord: dropped sockets, a silent gateway, a refused token,
//! shutdown; plus start-up time and memory.

mod common;

use std::time::Duration;

use switchboard_channel::{Channel, ChannelError, InboundSender};
use switchboard_discord::DiscordChannel;
use switchboard_fakes::discord::{Author, IncomingMessage};
use tokio_util::sync::CancellationToken;

const CHAN: u64 = 111;

fn alice() -> Author {
    Author::user(42, "alice")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aborted_socket_resumes_and_replays_missed_events() {
    let h = common::start().await;
    h.fake.drop_connection();
    // Pushed while disconnected: kept in the session log and replayed on RESUME.
    let missed = h.fake.push_message_create(IncomingMessage::guild_mention(
        CHAN,
        alice(),
        "during the outage",
    ));
    assert!(
        h.fake.wait_for_resume(common::WAIT).await,
        "client did not resume"
    );
    let later = h
        .fake
        .push_message_create(IncomingMessage::guild_mention(CHAN, alice(), "after"));
    let msgs = h.rec.wait_for_msgs(2).await;
    let ids: Vec<&str> = msgs.iter().map(|m| m.id.as_str()).collect();
    assert!(
        ids.contains(&format!("discord:msg:{missed}").as_str()),
        "{ids:?}"
    );
    assert!(
        ids.contains(&format!("discord:msg:{later}").as_str()),
        "{ids:?}"
    );
    assert_eq!(h.fake.identifies().len(), 1, "resumed, not re-identified");
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eof_without_close_frame_reconnects() {
    let h = common::start().await;
    h.fake.half_close_connection();
    assert!(
        h.fake.wait_for_sessions(2, Duration::from_secs(20)).await,
        "no new session after the gateway went away"
    );
    let id = h.fake.push_message_create(IncomingMessage::guild_mention(
        CHAN,
        alice(),
        "still there?",
    ));
    let msgs = h.rec.wait_for_msgs(1).await;
    assert_eq!(msgs[0].id, format!("discord:msg:{id}"));
    eprintln!(
        "after EOF: {} identifies, {} resumes, reports {:?}",
        h.fake.identifies().len(),
        h.fake.resumes().len(),
        h.rec.connected_reports()
    );
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hung_gateway_is_left_by_the_watchdog() {
    // The socket drops and every reconnection then hangs after the TCP handshake (no HELLO).
    // serenity would wait 15 s per attempt; the watchdog gives up after stall_timeout (3 s)
    // and starts a fresh client, which connects once the gateway answers again.
    let h = common::start().await;
    h.fake.mute_new_connections(true);
    h.fake.drop_connection();
    let rec = h.rec.clone();
    let noticed = tokio::time::timeout(Duration::from_secs(15), async {
        while !rec
            .connected_reports()
            .iter()
            .any(|(c, d)| !c && d.contains("no gateway event"))
        {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    assert!(
        noticed.is_ok(),
        "watchdog silent: {:?}",
        rec.connected_reports()
    );
    h.fake.mute_new_connections(false);
    assert!(
        h.fake.wait_for_identify(2, Duration::from_secs(15)).await,
        "no fresh IDENTIFY after the watchdog restart"
    );
    let id = h
        .fake
        .push_message_create(IncomingMessage::guild_mention(CHAN, alice(), "back?"));
    let msgs = h.rec.wait_for_msgs(1).await;
    assert_eq!(msgs[0].id, format!("discord:msg:{id}"));
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frozen_gateway_is_left_and_a_new_session_answers() {
    let h = common::start().await;
    assert!(h.fake.wait_for_heartbeats(1, common::WAIT).await);
    h.fake.freeze();
    assert!(
        h.fake.wait_for_sessions(2, Duration::from_secs(20)).await,
        "no new session after the gateway froze"
    );
    let id = h
        .fake
        .push_message_create(IncomingMessage::dm(333, alice(), "hello again"));
    let msgs = h.rec.wait_for_msgs(1).await;
    assert_eq!(msgs[0].id, format!("discord:msg:{id}"));
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_token_is_unauthorized_and_never_echoes_the_token() {
    let fake = common::fake().await;
    let bad = "definitely-not-the-token";
    let ch = DiscordChannel::new(common::config(&fake, bad)).expect("channel");
    let rec = common::Recorder::new();
    let res = tokio::time::timeout(
        common::WAIT,
        ch.run(InboundSender::new(rec.clone()), CancellationToken::new()),
    )
    .await
    .expect("run returned");
    match res {
        Err(ChannelError::Unauthorized(why)) => {
            assert!(why.contains("refused"), "{why}");
            assert!(!why.contains(bad), "the token leaked into the error");
        }
        other => panic!("expected Unauthorized, got {other:?}"),
    }
    assert_eq!(rec.connected_reports().last().map(|r| r.0), Some(false));
    assert!(
        fake.identifies().is_empty(),
        "no gateway connection with a refused token"
    );
}

/// Message Content not enabled for the bot (close code 4014): the channel stops with what
/// to do, instead of identifying again and again (Discord resets a token after 1 000
/// IDENTIFYs a day).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_intent_stops_the_channel_and_says_what_to_turn_on() {
    let fake = common::fake().await;
    fake.disallow_intents();
    let ch = DiscordChannel::new(common::config(&fake, common::TOKEN)).expect("channel");
    let rec = common::Recorder::new();
    let res = tokio::time::timeout(
        common::WAIT,
        ch.run(InboundSender::new(rec.clone()), CancellationToken::new()),
    )
    .await
    .expect("run returned instead of retrying");
    match res {
        Err(ChannelError::Other(why)) => {
            assert!(why.contains("close code 4014"), "{why}");
            assert!(why.contains("Message Content Intent"), "{why}");
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert_eq!(fake.identifies().len(), 1, "identified once");
    let last = rec.connected_reports().last().cloned().unwrap();
    assert!(!last.0 && last.1.contains("4014"), "{last:?}");
}

/// A shutdown while the start-up token check waits on a slow API ends the channel at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shutdown_during_a_slow_token_check_is_not_held_up() {
    let fake = common::fake().await;
    fake.slow_token_check(std::time::Duration::from_secs(25));
    let ch = DiscordChannel::new(common::config(&fake, common::TOKEN)).expect("channel");
    let rec = common::Recorder::new();
    let shutdown = CancellationToken::new();
    let run = tokio::spawn({
        let (rec, shutdown) = (rec.clone(), shutdown.clone());
        async move { ch.run(InboundSender::new(rec), shutdown).await }
    });
    assert!(fake.wait_for_token_checks(1, common::WAIT).await);
    shutdown.cancel();
    let res = tokio::time::timeout(std::time::Duration::from_secs(2), run)
        .await
        .expect("stopped at once")
        .unwrap();
    assert!(res.is_ok(), "{res:?}");
    assert!(fake.identifies().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateway_discovery_failure_is_loud_and_never_falls_back() {
    // An api_url that does not serve /api/v10/gateway: run keeps retrying and reports why,
    // instead of letting serenity connect to the real Discord gateway.
    let fake = common::fake().await;
    let mut cfg = common::config(&fake, common::TOKEN);
    cfg.api_url = format!("{}/nowhere", fake.base_url);
    let ch = DiscordChannel::new(cfg).expect("channel");
    let rec = common::Recorder::new();
    let shutdown = CancellationToken::new();
    let run = {
        let (r, s) = (rec.clone(), shutdown.clone());
        tokio::spawn(async move { ch.run(InboundSender::new(r), s).await })
    };
    let ok = tokio::time::timeout(common::WAIT, async {
        while !rec
            .connected_reports()
            .iter()
            .any(|(c, d)| !c && d.contains("preflight"))
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(ok.is_ok(), "{:?}", rec.connected_reports());
    shutdown.cancel();
    let res = tokio::time::timeout(Duration::from_secs(5), run).await;
    assert!(matches!(res, Ok(Ok(Ok(())))), "{res:?}");
    assert!(fake.identifies().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn becomes_ready_and_stops_within_the_shutdown_bound() {
    // (How fast and how small: the benchmark measures both.)
    let fake = common::fake().await;
    let ch = DiscordChannel::new(common::config(&fake, common::TOKEN)).expect("channel");
    let rec = common::Recorder::new();
    let shutdown = CancellationToken::new();
    let run = {
        let (r, s) = (rec.clone(), shutdown.clone());
        tokio::spawn(async move { ch.run(InboundSender::new(r), s).await })
    };
    assert!(fake.wait_for_sessions(1, common::WAIT).await);
    shutdown.cancel();
    // Well within the gateway's 10 s to stop.
    let res = tokio::time::timeout(Duration::from_secs(6), run).await;
    assert!(matches!(res, Ok(Ok(Ok(())))), "{res:?}");
}
