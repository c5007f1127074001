//! The Telegram end-to-end harness: the real binary with Telegram on, against the fake
//! Bot API and the fake LLM.

use std::time::Duration;

use switchboard_fakes::llm::FakeLlm;
use switchboard_fakes::telegram::{FakeTelegram, SentMessage};

use super::platform::{self, env_with, spawn_ready};
use super::{Env, GatewayProcess};

pub const WAIT: Duration = Duration::from_secs(15);

/// The fakes and a running gateway with Telegram on.
pub struct Tg {
    pub llm: FakeLlm,
    pub tg: FakeTelegram,
    pub env: Env,
    pub gw: GatewayProcess,
}

impl Tg {
    /// Start the fakes and the gateway; `access` adds keys to `[channels.telegram]`.
    pub async fn start(access: &str) -> Tg {
        let llm = FakeLlm::start().await;
        let tg = FakeTelegram::start().await;
        let table = format!(
            "[channels.telegram]\nenabled = true\napi_url = \"{}\"\npacing = false\n{access}\n",
            tg.url()
        );
        let env = env_with(&llm.base_url(), &table);
        let gw = spawn(&env, &tg);
        Tg { llm, tg, env, gw }
    }

    /// Wait until the sent messages satisfy `done`, however many that takes.
    pub async fn sent_until(
        &self,
        what: &str,
        done: impl Fn(&[SentMessage]) -> bool,
    ) -> Vec<SentMessage> {
        let deadline = tokio::time::Instant::now() + WAIT;
        let mut n = 1;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let Some(sent) = self.tg.wait_for_sent(n, left).await else {
                panic!(
                    "timed out waiting for {what}; sent: {:#?}\nlogs:\n{}",
                    self.tg.sent(),
                    platform::logs(&self.env)
                );
            };
            if done(&sent) {
                return sent;
            }
            n = sent.len() + 1;
        }
    }

    pub async fn wait_sent(&self, n: usize) -> Vec<SentMessage> {
        self.sent_until(&format!("{n} sent messages"), |s| s.len() >= n)
            .await
    }
}

pub fn spawn(env: &Env, tg: &FakeTelegram) -> GatewayProcess {
    spawn_ready(env, &[("TELEGRAM_BOT_TOKEN", tg.token())], WAIT)
}

/// A message with a chosen `message_id`, so replies to it can be checked.
pub fn with_message_id(mut update: serde_json::Value, id: i64) -> serde_json::Value {
    update["message"]["message_id"] = serde_json::json!(id);
    update
}
