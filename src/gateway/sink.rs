//! The gateway side of intake: every adapter's messages pass here on their way to the bus,
//! through the access policy (`dm_policy`, `allow_from`, `group_policy`) and pairing.

use std::sync::Arc;

use async_trait::async_trait;
use switchboard_channel::{
    ChatKey, InboundMessage, InboundSink, Origin, OutboundMessage, PublishError, Published,
};

use super::Health;
use crate::access::{self, Decision};
use crate::bus::Bus;
use crate::config::Config;
use crate::metrics::Metrics;
use crate::pairing;
use crate::scheduler::heartbeat::LAST_ACTIVE;
use crate::store::{Batch, Tree};

/// The gateway side of intake: access policy and pairing, then the bus.
pub struct GatewaySink {
    pub(super) config: Arc<Config>,
    pub(super) bus: Arc<Bus>,
    pub(super) health: Arc<Health>,
    pub(super) metrics: Arc<Metrics>,
    pub(super) scheduler: Arc<crate::scheduler::Scheduler>,
}

impl GatewaySink {
    async fn publish_inner(&self, msg: InboundMessage) -> Result<Published, PublishError> {
        match self.admit(msg).await? {
            Ok(msg) => self
                .bus
                .publish(msg)
                .await
                .map_err(|e| PublishError(e.to_string())),
            Err(dropped) => Ok(dropped),
        }
    }

    /// Access control before the bus: the message back when it may go in, or what became
    /// of it (ignored; an unknown sender was sent a pairing code).
    async fn admit(
        &self,
        mut msg: InboundMessage,
    ) -> Result<Result<InboundMessage, Published>, PublishError> {
        let err = |e: &dyn std::fmt::Display| PublishError(e.to_string());
        if msg.origin == Origin::User {
            if let Some(access) = self.config.access_for(&msg.key.channel) {
                let store = self.bus.store().as_ref();
                let decision = self.decide(&access, &msg).map_err(|e| err(&e))?;
                msg.sender.is_owner = access::is_owner(&access, &msg.sender);
                if decision != Decision::Allow {
                    self.metrics
                        .ignored
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
                match decision {
                    Decision::Allow => {}
                    Decision::Ignore => {
                        tracing::debug!(channel = %msg.key.channel, sender = %msg.sender.id,
                            group = msg.is_group, mentioned = msg.mentions_bot,
                            "message ignored: not addressed to the bot, or its sender is not let in");
                        return Ok(Err(Published::Ignored));
                    }
                    Decision::Pair => {
                        let chat = msg.key.to_string();
                        let issued =
                            pairing::code_for(store, &msg.key.channel, &msg.sender, Some(&chat))
                                .await
                                .map_err(|e| err(&e))?;
                        let Some((code, new)) = issued else {
                            tracing::warn!(channel = %msg.key.channel, sender = %msg.sender.id,
                                "unknown sender not answered: {} pairing codes are waiting already",
                                pairing::MAX_PENDING);
                            return Ok(Err(Published::Ignored));
                        };
                        if !new {
                            // Told once already (this may be a redelivery of that message).
                            return Ok(Err(Published::Ignored));
                        }
                        tracing::info!(channel = %msg.key.channel, sender = %msg.sender.id, "unknown sender: pairing code issued");
                        let text = format!(
                            "Hi! I don't know you yet. Your pairing code is {code}.\n\
                             Ask the owner to run: switchboard pairing approve {} {code}\n\
                             (the code is valid for one hour)",
                            msg.key.channel
                        );
                        let reply = OutboundMessage::answering(&msg, text);
                        self.bus
                            .send_direct_in_background(vec![reply])
                            .await
                            .map_err(|e| err(&e))?;
                        return Ok(Err(Published::Ignored));
                    }
                }
            }
        }
        Ok(Ok(msg))
    }
}

impl GatewaySink {
    /// What `access` says of a user message, with the pairings approved so far.
    fn decide(
        &self,
        access: &crate::config::Access,
        msg: &InboundMessage,
    ) -> Result<Decision, crate::store::StoreError> {
        let approved =
            pairing::is_approved(self.bus.store().as_ref(), &msg.key.channel, &msg.sender.id)?;
        let decision = access::decide(access, msg, approved);
        // A bare `/stop` in a group that only mentions reach is for the turn the bot is
        // running there: people do not type `/stop@bot` to stop the answer they are reading.
        let stops_our_turn =
            || msg.command().as_deref() == Some("stop") && self.bus.is_running(&msg.key);
        if decision == Decision::Ignore && msg.is_group && !msg.mentions_bot && stops_our_turn() {
            let mut addressed = msg.clone();
            addressed.mentions_bot = true;
            return Ok(access::decide(access, &addressed, approved));
        }
        Ok(decision)
    }
}

#[async_trait]
impl InboundSink for GatewaySink {
    async fn publish(&self, msg: InboundMessage) -> Result<Published, PublishError> {
        self.publish_inner(msg).await
    }

    async fn publish_many(
        &self,
        msgs: Vec<InboundMessage>,
    ) -> Result<Vec<Published>, PublishError> {
        let mut results = Vec::with_capacity(msgs.len());
        let mut admitted = Vec::new();
        let mut slots = Vec::new();
        for msg in msgs {
            match self.admit(msg).await? {
                Ok(msg) => {
                    slots.push(results.len());
                    results.push(Published::Accepted);
                    admitted.push(msg);
                }
                Err(dropped) => results.push(dropped),
            }
        }
        if !admitted.is_empty() {
            let published = self
                .bus
                .publish_many(admitted)
                .await
                .map_err(|e| PublishError(e.to_string()))?;
            for (slot, p) in slots.into_iter().zip(published) {
                results[slot] = p;
            }
        }
        Ok(results)
    }

    async fn moved(&self, from: &ChatKey, to: &ChatKey) -> Result<(), PublishError> {
        let err = |e: &dyn std::fmt::Display| PublishError(e.to_string());
        let store = self.bus.store();
        let (from_b, to_b) = (from.to_string().into_bytes(), to.to_string().into_bytes());
        let mut batch = Batch::default();
        // The conversation, unless the new chat already has one of its own.
        if store
            .get(Tree::Sessions, &to_b)
            .map_err(|e| err(&e))?
            .is_none()
        {
            if let Some(session) = store.get(Tree::Sessions, &from_b).map_err(|e| err(&e))? {
                batch.put(Tree::Sessions, to_b.clone(), session);
                batch.delete(Tree::Sessions, from_b.clone());
            }
        }
        if store.get(Tree::Meta, LAST_ACTIVE).map_err(|e| err(&e))? == Some(from_b) {
            batch.put(Tree::Meta, LAST_ACTIVE, to_b);
        }
        store.commit(batch).await.map_err(|e| err(&e))?;
        let jobs = self.scheduler.rekey(from, to).await.map_err(|e| err(&e))?;
        tracing::info!(%from, %to, jobs, "chat moved: its conversation and reminders follow");
        Ok(())
    }

    fn set_connected(&self, channel: &str, connected: bool, detail: &str) {
        if connected {
            tracing::info!(channel, "connected");
        } else {
            tracing::warn!(channel, "disconnected: {detail}");
        }
        self.health.set(channel, connected, detail);
    }
}
