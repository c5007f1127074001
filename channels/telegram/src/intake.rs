//! Intake: start-up (`getMe`, `deleteWebhook`, `setMyCommands`) and the `getUpdates` loop.
//!
//! The loop is our own rather than teloxide's dispatcher, because an update may be
//! confirmed (by sending `offset = update_id + 1` on the next call) only after
//! `InboundSender::publish_many` returned `Ok` for its poll (one durable write per poll).
//! A failed publish leaves the poll's updates unconfirmed, so Telegram redelivers them. A watchdog abandons a `getUpdates` call that
//! hangs past its timeout; 409 conflicts and network errors back off with jitter.

use std::time::Duration;

use switchboard_channel::{ChannelError, InboundMessage, InboundSender, files};
use teloxide::Bot;
use teloxide::payloads::GetUpdatesSetters;
use teloxide::prelude::{Request, Requester};
use teloxide::types::{AllowedUpdate, BotCommand, Update, UpdateKind};
use tokio_util::sync::CancellationToken;

use crate::TelegramConfig;
use crate::errors::{Backoff, Failure, classify};
use crate::mapping::{AddressedAlbums, BotIdentity, map_update, migration};
use crate::media;

const CHANNEL: &str = "telegram";

/// The bot commands registered with `setMyCommands`: the chat commands the gateway
/// answers without the model.
pub(crate) const COMMANDS: [(&str, &str); 5] = [
    ("new", "Start a fresh conversation"),
    ("stop", "Stop the current answer"),
    ("status", "Show the assistant's status"),
    ("reminders", "List this chat's reminders"),
    ("help", "What the assistant can do"),
];

/// The running intake of one adapter.
pub(crate) struct Intake<'a> {
    pub bot: &'a Bot,
    pub cfg: &'a TelegramConfig,
    pub inbound: &'a InboundSender,
    pub shutdown: &'a CancellationToken,
}

fn unauthorized() -> ChannelError {
    ChannelError::Unauthorized(
        "Telegram refused the bot token (401 Unauthorized); check the token from BotFather \
         in the variable named by channels.telegram.token_env"
            .into(),
    )
}

impl Intake<'_> {
    fn backoff(&self) -> Backoff {
        Backoff::new(self.cfg.retry_initial, self.cfg.retry_max)
    }

    /// Sleep unless shut down first; `false` when shutting down.
    async fn pause(&self, d: Duration) -> bool {
        tokio::select! {
            _ = self.shutdown.cancelled() => false,
            _ = tokio::time::sleep(d) => true,
        }
    }

    fn down(&self, detail: &str) {
        self.inbound.set_connected(CHANNEL, false, detail);
    }

    /// `getMe` until it answers (a refused token ends the channel), then `deleteWebhook`
    /// and `setMyCommands` together. `None` when shut down meanwhile.
    pub(crate) async fn start(&self) -> Result<Option<BotIdentity>, ChannelError> {
        let mut backoff = self.backoff();
        let me = loop {
            let res = tokio::select! {
                _ = self.shutdown.cancelled() => return Ok(None),
                r = self.bot.get_me() => r,
            };
            match res {
                Ok(me) => break me,
                Err(e) => match classify(&e) {
                    Failure::Unauthorized => {
                        self.down("the bot token was refused");
                        tracing::error!(
                            "telegram: the bot token was refused (getMe: 401 Unauthorized)"
                        );
                        return Err(unauthorized());
                    }
                    f => {
                        let d = backoff.next_delay();
                        tracing::warn!(retry_in = ?d, "telegram: getMe failed: {f}");
                        self.down("getMe failed");
                        if !self.pause(d).await {
                            return Ok(None);
                        }
                    }
                },
            }
        };
        let identity = BotIdentity {
            id: me.user.id.0,
            username: me.user.username.clone().unwrap_or_default(),
        };
        let commands: Vec<BotCommand> = COMMANDS
            .iter()
            .map(|(c, d)| BotCommand::new(*c, *d))
            .collect();
        let (webhook, cmds) = tokio::join!(
            self.bot.delete_webhook(),
            self.bot.set_my_commands(commands)
        );
        if let Err(e) = webhook {
            tracing::warn!(error = ?classify(&e), "telegram: deleteWebhook failed; polling may conflict with a webhook");
        }
        if let Err(e) = cmds {
            tracing::warn!(error = ?classify(&e), "telegram: setMyCommands failed");
        }
        tracing::info!(bot = %identity.username, "telegram: connected");
        self.inbound.set_connected(CHANNEL, true, "polling");
        Ok(Some(identity))
    }

    /// Poll until shutdown; a refused token is the only error that ends it.
    pub(crate) async fn poll(&self, me: &BotIdentity) -> Result<(), ChannelError> {
        let poll_secs = u32::try_from(self.cfg.poll_timeout.as_secs().max(1)).unwrap_or(10);
        let watchdog = Duration::from_secs(u64::from(poll_secs)) + self.cfg.watchdog_margin;
        let mut backoff = self.backoff();
        let mut offset: i64 = 0;
        // The offset Telegram last saw, i.e. what is confirmed there.
        let mut told: i64 = 0;
        let mut connected = true;
        let mut albums = AddressedAlbums::default();
        loop {
            let req = self
                .bot
                .get_updates()
                .offset(i32::try_from(offset).unwrap_or(i32::MAX))
                .timeout(poll_secs)
                .allowed_updates([AllowedUpdate::Message]);
            let outcome = tokio::select! {
                _ = self.shutdown.cancelled() => break,
                r = tokio::time::timeout(watchdog, req.send()) => r,
            };
            let failure = match outcome {
                Err(_) => {
                    Failure::Transient(format!("getUpdates did not answer within {watchdog:?}"))
                }
                Ok(Err(e)) => classify(&e),
                Ok(Ok(updates)) => {
                    told = offset;
                    backoff.reset();
                    if !connected {
                        tracing::info!("telegram: polling again");
                        self.inbound.set_connected(CHANNEL, true, "polling");
                        connected = true;
                    }
                    // One durable write for the whole poll, then one confirmation.
                    let fresh: Vec<Update> = updates
                        .into_iter()
                        .filter(|u| i64::from(u.id.0) >= offset)
                        .collect();
                    let Some(last) = fresh.last().map(|u| i64::from(u.id.0)) else {
                        continue;
                    };
                    // A group that became a supergroup: its conversation and reminders follow
                    // it to the new id, before the new group's messages are published.
                    for (from, to) in fresh.iter().filter_map(migration) {
                        match self.inbound.moved(&from, &to).await {
                            Ok(()) => {
                                tracing::info!(%from, %to, "telegram: the group became a supergroup")
                            }
                            Err(e) => {
                                tracing::warn!(%from, %to, error = %e, "telegram: cannot move the group's data to its new id")
                            }
                        }
                    }
                    let mut batch: Vec<InboundMessage> = fresh
                        .into_iter()
                        .filter_map(|update| prepare(update, me))
                        .collect();
                    albums.apply(&mut batch);
                    let published = if batch.is_empty() {
                        Ok(())
                    } else {
                        self.inbound.publish_many(batch).await.map(|_| ())
                    };
                    match published {
                        Ok(()) => offset = last + 1,
                        Err(e) => {
                            tracing::warn!(first_update_id = offset, last_update_id = last, error = %e,
                                "telegram: publish failed; the updates stay unconfirmed and will be redelivered");
                            if !self.pause(backoff.next_delay()).await {
                                break;
                            }
                        }
                    }
                    continue;
                }
            };
            let wait = match &failure {
                Failure::Unauthorized => {
                    self.down("the bot token was refused");
                    tracing::error!(
                        "telegram: the bot token was refused (getUpdates: 401 Unauthorized)"
                    );
                    return Err(unauthorized());
                }
                Failure::RetryAfter(d) => *d,
                Failure::Conflict(_) => {
                    let d = backoff.next_delay();
                    tracing::error!(retry_in = ?d,
                        "telegram: another process is polling with this token (409 Conflict); \
                         stop the other instance — retrying");
                    self.down("409 Conflict: another process is polling with this token");
                    d
                }
                Failure::WebhookActive => {
                    tracing::warn!(
                        "telegram: a webhook is set for this bot, so polling is refused; deleting it"
                    );
                    self.down("a webhook is set for this bot");
                    if let Err(e) = self.bot.delete_webhook().await {
                        tracing::warn!(error = ?classify(&e), "telegram: deleteWebhook failed");
                    }
                    backoff.next_delay()
                }
                Failure::Transient(t) | Failure::Permanent(t) => {
                    let d = backoff.next_delay();
                    tracing::warn!(error = %t, retry_in = ?d, "telegram: getUpdates failed");
                    self.down("getUpdates failed");
                    d
                }
            };
            connected = false;
            if !self.pause(wait).await {
                break;
            }
        }
        if offset > told {
            // Tell Telegram what was published, so a restart does not see it again (the
            // gateway would drop the duplicates anyway).
            let confirm = self
                .bot
                .get_updates()
                .offset(i32::try_from(offset).unwrap_or(i32::MAX))
                .timeout(0)
                .limit(1);
            let _ = tokio::time::timeout(Duration::from_secs(2), confirm.send()).await;
        }
        self.down("stopped");
        Ok(())
    }
}

/// The message to publish, its files left on it to be fetched before its turn; `None` for
/// an update that is not a new message (it counts as handled).
fn prepare(update: Update, me: &BotIdentity) -> Option<InboundMessage> {
    if matches!(update.kind, UpdateKind::Error(_)) {
        // teloxide could not read it (a field the Bot API marks optional that it requires,
        // such as a video's `mime_type`, or a newer type) and keeps nothing of it, so not
        // even its chat is known: said, since someone may wait for an answer.
        tracing::warn!(
            update_id = update.id.0,
            "telegram: skipping a message this version cannot read"
        );
        return None;
    }
    let Some(mapped) = map_update(&update, me) else {
        tracing::debug!(
            update_id = update.id.0,
            "telegram: skipping an update that is not a new message"
        );
        return None;
    };
    let mut msg = mapped.msg;
    if !mapped.files.is_empty() {
        let pending = media::Pending {
            update: update.id.0,
            files: mapped.files,
        };
        files::leave_pending(&mut msg, &pending);
    }
    Some(msg)
}
