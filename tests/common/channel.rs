//! The recording test channel, shared by the gateway tests (`common`) and the scheduler
//! tests (`scheduler_support`).

use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use switchboard_channel::{
    Capabilities, Channel, ChannelError, ChatKey, Dialect, InboundSender, OutboundMessage,
    SendError, SendReceipt,
};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// A channel named `test` that records what it is asked to send.
#[derive(Default)]
pub struct TestChannel {
    pub sent: Mutex<Vec<OutboundMessage>>,
    notify: Notify,
    /// While set, sends wait until it is closed ([`TestChannel::release_sends`]).
    held: Mutex<Option<std::sync::Arc<tokio::sync::Semaphore>>>,
    /// Chats the platform refuses for good (the bot was removed from them), and how many
    /// sends it refused.
    gone: Mutex<(Vec<ChatKey>, usize)>,
}

impl TestChannel {
    /// Make sends wait (a slow platform) until [`TestChannel::release_sends`].
    #[allow(dead_code)]
    pub fn hold_sends(&self) {
        *self.held.lock().unwrap() = Some(std::sync::Arc::new(tokio::sync::Semaphore::new(0)));
    }

    #[allow(dead_code)]
    pub fn release_sends(&self) {
        if let Some(gate) = self.held.lock().unwrap().take() {
            gate.close();
        }
    }

    /// Refuse every send to `key` for good, as a platform does for a chat the bot left.
    #[allow(dead_code)]
    pub fn refuse(&self, key: &ChatKey) {
        self.gone.lock().unwrap().0.push(key.clone());
    }

    /// How many sends were refused.
    #[allow(dead_code)]
    pub fn refused(&self) -> usize {
        self.gone.lock().unwrap().1
    }

    pub fn sent(&self) -> Vec<OutboundMessage> {
        self.sent.lock().unwrap().clone()
    }

    /// Wait until at least `n` messages were sent.
    pub async fn wait_for(&self, n: usize, timeout: Duration) -> Vec<OutboundMessage> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let notified = self.notify.notified();
            let sent = self.sent();
            if sent.len() >= n {
                return sent;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                panic!(
                    "only {} of {n} messages sent in time: {:?}",
                    sent.len(),
                    sent
                );
            }
        }
    }
}

#[async_trait]
impl Channel for TestChannel {
    fn name(&self) -> &str {
        "test"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            edits: false,
            typing: false,
            threads: false,
            max_message_len: 4096,
            dialect: Dialect::Markdown,
        }
    }

    async fn run(&self, _: InboundSender, shutdown: CancellationToken) -> Result<(), ChannelError> {
        shutdown.cancelled().await;
        Ok(())
    }

    async fn send(&self, msg: &OutboundMessage) -> Result<SendReceipt, SendError> {
        let held = self.held.lock().unwrap().clone();
        if let Some(gate) = held {
            // Closed on release.
            let _ = gate.acquire().await;
        }
        {
            let mut gone = self.gone.lock().unwrap();
            if gone.0.contains(&msg.key) {
                gone.1 += 1;
                return Err(SendError::Permanent("chat not found".into()));
            }
        }
        self.sent.lock().unwrap().push(msg.clone());
        self.notify.notify_waiters();
        Ok(SendReceipt::default())
    }

    async fn typing(&self, _: &ChatKey) -> Result<(), SendError> {
        Ok(())
    }
}
