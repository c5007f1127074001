//! Platform tokens never show in what an adapter says about a failure: its logs (every crate,
//! TRACE), its connection reports (served by `/readyz`) and its send errors (logged by the
//! outbox, and handed to the model by the `message` tool). The real adapters run against
//! endpoints that fail: a closed port, a server that drops the connection, and one that
//! answers with an error quoting the request it got (path and headers, so the token too),
//! as a debugging proxy or a mistyped `api_url` may.

mod secrets_support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use secrets_support::{
    Quoting, WAIT, assert_clean, closed_port_url, dropping_url, logs, quote_head,
};
use switchboard_channel::{
    Channel, ChannelError, ChatKey, InboundMessage, InboundSender, InboundSink, OutboundMessage,
    PublishError, Published,
};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// Records connection reports.
#[derive(Default)]
struct Reports {
    details: Mutex<Vec<String>>,
    changed: Notify,
}

#[async_trait]
impl InboundSink for Reports {
    async fn publish(&self, _msg: InboundMessage) -> Result<Published, PublishError> {
        Ok(Published::Accepted)
    }

    fn set_connected(&self, _channel: &str, _connected: bool, detail: &str) {
        self.details.lock().unwrap().push(detail.to_string());
        self.changed.notify_waiters();
    }
}

impl Reports {
    fn all(&self) -> String {
        self.details.lock().unwrap().join("\n")
    }

    /// Wait until a report contains `text`; panics after [`WAIT`].
    async fn wait_for(&self, text: &str) {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.all().contains(text) {
                return;
            }
            assert!(
                tokio::time::timeout_at(deadline, notified).await.is_ok(),
                "no report with {text:?}: {}",
                self.all()
            );
        }
    }
}

/// Run `ch` until it reported a failure containing `failed`, send one reply through it, stop
/// it; then its reports, the send error and the logs must not hold `secrets`.
async fn check(
    ch: Arc<dyn Channel>,
    key: &str,
    failed: &str,
    wait: Option<&Quoting>,
    secrets: &[&str],
) {
    logs();
    let reports = Arc::new(Reports::default());
    let stop = CancellationToken::new();
    let run = tokio::spawn({
        let (ch, inbound, stop) = (
            ch.clone(),
            InboundSender::new(reports.clone()),
            stop.clone(),
        );
        async move { ch.run(inbound, stop).await }
    });
    match wait {
        // Slack reports nothing before it identified: count the failed calls instead (the
        // second one comes after the first failure was logged).
        Some(server) => server.wait_requests(2).await,
        None => reports.wait_for(failed).await,
    }
    let msg = OutboundMessage::new(key.parse::<ChatKey>().unwrap(), "hello");
    let sent = tokio::time::timeout(WAIT, ch.send(&msg))
        .await
        .expect("send gives up in time");
    let error = sent.expect_err("nothing answers properly").to_string();
    stop.cancel();
    let ended = tokio::time::timeout(WAIT, run).await.expect("run stops");
    let ended = match ended.expect("run did not panic") {
        Err(ChannelError::Unauthorized(e) | ChannelError::Other(e)) => e,
        Ok(()) => String::new(),
    };
    // In the log itself, so that its check below covers a real failure line.
    assert!(logs().contains(failed), "the failure was not logged");
    assert_clean("a connection report", &reports.all(), secrets);
    assert_clean("a send error", &error, secrets);
    assert_clean("the channel's end", &ended, secrets);
    assert_clean("the logs", &logs(), secrets);
}

fn telegram(token: &str, api_url: &str) -> Arc<dyn Channel> {
    let inbox = std::env::temp_dir().join("switchboard-secrets-inbox");
    let mut cfg = switchboard_telegram::TelegramConfig::new(token, api_url, inbox);
    cfg.pacing = false;
    cfg.retry_initial = Duration::from_millis(10);
    cfg.retry_max = Duration::from_millis(50);
    cfg.send_attempts = 1;
    Arc::new(switchboard_telegram::TelegramChannel::new(cfg).unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn telegram_never_shows_its_token() {
    // The token is part of every Bot API URL (`/bot<token>/GetMe`) that reqwest's errors
    // display; a quoting server puts it into the unreadable answer teloxide quotes whole.
    let quoting = Quoting::start(404, quote_head).await;
    for (n, url) in [closed_port_url(), dropping_url().await, quoting.url.clone()]
        .into_iter()
        .enumerate()
    {
        // One of the usual shape (which teloxide hides in URLs itself) and one it does not
        // recognise.
        for token in [
            format!("700000{n}:AAHtelegramSecretPart0123456789abcdef"),
            format!("700000{n}:tgShortSecret{n}"),
        ] {
            let ch = telegram(&token, &url);
            let secret = token.split_once(':').unwrap().1;
            check(ch, "telegram:42", "getMe failed", None, &[&token, secret]).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discord_never_shows_its_token() {
    let quoting = Quoting::start(404, quote_head).await;
    let urls = [closed_port_url(), dropping_url().await, quoting.url.clone()];
    // Side by side: a send backs off for seconds on network errors.
    let checks = urls.into_iter().enumerate().map(|(n, url)| async move {
        let token = format!("MTA5secret-discord-token-{n}.GhXyZ.abcdefghijklmnop");
        let cfg = switchboard_discord::DiscordConfig::new(&token, url);
        let ch = Arc::new(switchboard_discord::DiscordChannel::new(cfg).unwrap());
        check(ch, "discord:123", "preflight failed", None, &[&token]).await;
    });
    futures_util::future::join_all(checks).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slack_never_shows_its_tokens() {
    // 200 with a JSON body that is not a Web API answer: slack-morphism quotes the body.
    let quoting = Quoting::start(200, quote_head).await;
    let (bot, app, signing) = (
        "xoxb-1111-2222-slackBotSecret",
        "xapp-1-A0-3333-slackAppSecret",
        "slackSigningSecret0123456789",
    );
    let cfg = switchboard_slack::SlackConfig::new(bot)
        .with_app_token(app)
        .with_signing_secret(signing)
        .with_api_url(format!("{}/api", quoting.url));
    let ch = Arc::new(switchboard_slack::SlackChannel::new(cfg).unwrap());
    check(
        ch,
        "slack:C0CHAN",
        "slack auth.test failed",
        Some(&quoting),
        &[bot, app, signing],
    )
    .await;
}
