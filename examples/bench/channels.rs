//! Figures with the platform channels connected to their fakes: ready time and idle RSS,
//! Telegram throughput, and `/slack/events` latency.

use std::time::{Duration, Instant};

use switchboard_fakes::discord::FakeDiscord;
use switchboard_fakes::llm::FakeLlm;
use switchboard_fakes::slack::{self as fake_slack, APP_TOKEN, BOT_TOKEN, FakeSlack};
use switchboard_fakes::telegram::{FakeTelegram, TgUser};

use crate::gateway::{rss_mb, start_gateway};
use crate::probes::{Window, at_rate};

const DISCORD_TOKEN: &str = "bench-discord-token-0123456789";
const SLACK_SECRET: &str = "bench-signing-secret";

/// Figures with the platform channels connected to their fakes.
pub(crate) async fn channels(llm: &FakeLlm, http: &reqwest::Client, idle_none: f64) {
    let tg = FakeTelegram::start().await;
    let dc = FakeDiscord::start(DISCORD_TOKEN).await;
    let sl = FakeSlack::start().await;
    let off = |name: &str| format!("[channels.{name}]\nenabled = false\n");
    let tg_on = format!(
        "[channels.telegram]\nenabled = true\napi_url = \"{}\"\npacing = false\ndm_policy = \"open\"\n",
        tg.url()
    );
    let dc_on = format!(
        "[channels.discord]\nenabled = true\napi_url = \"{}\"\ndm_policy = \"open\"\n",
        dc.base_url
    );
    let sl_on = format!(
        "[channels.slack]\nenabled = true\napi_url = \"{}\"\ndm_policy = \"open\"\n",
        sl.api_url()
    );
    let envs = vec![
        ("TELEGRAM_BOT_TOKEN", tg.token().to_string()),
        ("DISCORD_BOT_TOKEN", DISCORD_TOKEN.to_string()),
        ("SLACK_BOT_TOKEN", BOT_TOKEN.to_string()),
        ("SLACK_APP_TOKEN", APP_TOKEN.to_string()),
        ("SLACK_SIGNING_SECRET", SLACK_SECRET.to_string()),
    ];
    for (name, cfg) in [
        (
            "telegram",
            format!("{tg_on}{}{}", off("discord"), off("slack")),
        ),
        (
            "discord",
            format!("{}{dc_on}{}", off("telegram"), off("slack")),
        ),
        (
            "slack",
            format!("{}{}{sl_on}", off("telegram"), off("discord")),
        ),
        ("all three", format!("{tg_on}{dc_on}{sl_on}")),
    ] {
        let (gw, ready) = start_gateway(llm, &cfg, &envs).await;
        tokio::time::sleep(Duration::from_secs(1)).await;
        let rss = rss_mb(gw.child.id());
        println!(
            "{name:<10} connected:   ready in {:.1} ms, idle RSS {rss:.1} MB (+{:.1} MB over no channels)",
            ready.as_secs_f64() * 1000.0,
            rss - idle_none
        );
    }

    // Telegram throughput: 1 000 chats x 5 messages through getUpdates → sendMessage.
    let cfg = format!("{tg_on}{}{}", off("discord"), off("slack"));
    let (gw, _) = start_gateway(llm, &cfg, &envs).await;
    let before = tg.sent().len();
    let users: Vec<TgUser> = (0..1000)
        .map(|i| TgUser::new(100_000 + i, &format!("user{i}")))
        .collect();
    let started = Instant::now();
    for round in 0..5 {
        for u in &users {
            tg.push_update(tg.dm_text(u, &format!("message {round}")));
        }
    }
    let total = 5000;
    tg.wait_for_sent(before + total, Duration::from_secs(120))
        .await
        .expect("all Telegram replies sent");
    let secs = started.elapsed().as_secs_f64();
    println!(
        "telegram throughput:      {:.0} messages/s (1 000 chats x 5, update to sendMessage)",
        total as f64 / secs
    );
    drop(gw);

    // Slack Events API: POST /slack/events at 200 events/s.
    let cfg = format!("{}{}{sl_on}", off("telegram"), off("discord"));
    let slack_env: Vec<(&str, String)> = vec![
        ("SLACK_BOT_TOKEN", BOT_TOKEN.to_string()),
        ("SLACK_SIGNING_SECRET", SLACK_SECRET.to_string()),
    ];
    let (gw, _) = start_gateway(llm, &cfg, &slack_env).await;
    let window = Window::open(http, &gw.base).await;
    let lat = at_rate(1000, Duration::from_millis(5), |i| {
        let (http, base) = (http.clone(), gw.base.clone());
        let event = fake_slack::events::dm(
            &format!("D{}", i % 50),
            "U123",
            "hello",
            &format!("1700000000.{i:06}"),
        );
        let body = fake_slack::events::event_callback_body(&format!("EvBench{i}"), event);
        async move {
            let ts = fake_slack::events::now_timestamp();
            let sig = fake_slack::events::sign(SLACK_SECRET, &ts, &body);
            let t = Instant::now();
            let r = http
                .post(format!("{base}/slack/events"))
                .header("content-type", "application/json")
                .header("x-slack-request-timestamp", ts)
                .header("x-slack-signature", sig)
                .body(body)
                .send()
                .await
                .expect("post");
            assert_eq!(r.status(), 200);
            t.elapsed()
        }
    })
    .await;
    window
        .close("slack /slack/events:", &lat, "at 200 events/s")
        .await;
    drop(gw);
}
