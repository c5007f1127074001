//! Turns that started turns: a job run through `cron run` and a sub-agent's result come
//! back as `System` messages whose turn may start more of the same. The [`Chain`] of those
//! that led to a turn rides in each such message's metadata ([`KEY`]), so the tools that
//! start turns can stop a loop: a job's run cannot run that job again (`cron run`, any
//! link back), and a sub-agent's result [`MAX_SPAWNS`] deep cannot spawn another one.
//! Without it, a job whose message says "run this job" or a task that says "spawn this
//! task" would have the gateway call the model for ever, as fast as it answers.
//!
//! A message from a person starts a new chain, and so does a job's run by its schedule
//! (the schedule already paces it). Metadata only ever narrows what a turn may do: a
//! message that came without it is an empty chain, as a person's.

use serde::{Deserialize, Serialize};
use switchboard_channel::{InboundMessage, Origin, SystemOrigin};

/// The metadata key of a message's chain.
pub const KEY: &str = "chain";

/// Sub-agent results a chain may hold for its turn to start one more sub-agent: a person's
/// request may spawn, the result's turn may spawn a follow-up, and that one's not.
pub const MAX_SPAWNS: u32 = 2;

/// Jobs a chain may hold for its turn to run one more (each of them distinct).
pub const MAX_JOBS: usize = 10;

/// What led to a turn.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Chain {
    /// The jobs whose runs led to it, oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub jobs: Vec<String>,
    /// How many sub-agent results led to it.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub spawns: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl Chain {
    /// The chain of a turn made of `msgs` (joined messages: all their links).
    pub fn of(msgs: &[InboundMessage]) -> Chain {
        let mut chain = Chain::default();
        for msg in msgs {
            let own = Chain::of_message(msg);
            for job in own.jobs {
                chain.add_job(job);
            }
            chain.spawns = chain.spawns.max(own.spawns);
        }
        chain
    }

    /// What led to `msg`: the chain it carries, and the job it is the run of.
    pub fn of_message(msg: &InboundMessage) -> Chain {
        if msg.origin == Origin::User {
            return Chain::default();
        }
        let mut chain: Chain = msg
            .metadata
            .get(KEY)
            .and_then(|v| serde_json::from_value(v.clone()).ok())
            .unwrap_or_default();
        if let Origin::System(SystemOrigin::Cron { job_id }) = &msg.origin {
            chain.add_job(job_id.clone());
        }
        chain
    }

    /// Whether a person's message started the turn, not a run or a result.
    pub fn is_empty(&self) -> bool {
        self.jobs.is_empty() && self.spawns == 0
    }

    fn add_job(&mut self, id: String) {
        if !self.jobs.contains(&id) {
            self.jobs.push(id);
        }
    }

    /// Why this turn may not run job `id` now, if it may not.
    pub fn refuses_run(&self, id: &str) -> Option<String> {
        if self.jobs.iter().any(|j| j == id) {
            return Some(format!(
                "job {id} led to this turn (its run, or a turn that one started): a job \
                 cannot run itself from its own run; it runs again on its schedule"
            ));
        }
        (self.jobs.len() >= MAX_JOBS).then(|| {
            format!(
                "this turn comes from {} job runs one after the other: it may not run \
                 another one",
                self.jobs.len()
            )
        })
    }

    /// Why this turn may not start a sub-agent, if it may not.
    pub fn refuses_spawn(&self) -> Option<String> {
        (self.spawns >= MAX_SPAWNS).then(|| {
            format!(
                "this turn answers a sub-agent started from another sub-agent's result ({} \
                 deep): it may not start one more; answer with what you have",
                self.spawns
            )
        })
    }

    /// The chain a run of job `id` started from this turn carries.
    pub fn then_job(&self, id: &str) -> Chain {
        let mut next = self.clone();
        next.add_job(id.to_string());
        next
    }

    /// The chain a sub-agent's result started from this turn carries.
    pub fn then_spawn(&self) -> Chain {
        Chain {
            spawns: self.spawns + 1,
            ..self.clone()
        }
    }

    /// Put this chain in `msg`'s metadata (nothing for an empty one).
    pub fn stamp(&self, msg: &mut InboundMessage) {
        if self.is_empty() {
            return;
        }
        if let Ok(v) = serde_json::to_value(self) {
            msg.metadata.insert(KEY.into(), v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use switchboard_channel::Sender;

    fn system(origin: SystemOrigin, chain: Option<Chain>) -> InboundMessage {
        let sender = Sender {
            id: "cron".into(),
            username: None,
            display_name: "x".into(),
            is_owner: false,
        };
        let mut m = InboundMessage::text("m", "test:1".parse().unwrap(), sender, "x");
        m.origin = Origin::System(origin);
        if let Some(c) = chain {
            c.stamp(&mut m);
        }
        m
    }

    #[test]
    fn a_chain_follows_runs_and_results_and_stops_loops() {
        let first = system(
            SystemOrigin::Cron {
                job_id: "ja".into(),
            },
            None,
        );
        let chain = Chain::of(std::slice::from_ref(&first));
        assert_eq!(chain.jobs, ["ja"]);
        assert!(chain.refuses_run("ja").is_some());
        assert!(chain.refuses_run("jb").is_none());
        // ja's turn runs jb: jb's turn may run neither.
        let second = system(
            SystemOrigin::Cron {
                job_id: "jb".into(),
            },
            Some(chain.then_job("jb")),
        );
        let chain = Chain::of(&[second]);
        assert_eq!(chain.jobs, ["ja", "jb"]);
        assert!(chain.refuses_run("ja").is_some() && chain.refuses_run("jb").is_some());
        // Sub-agents: the second result's turn may not spawn.
        let result = |c: &Chain| {
            system(
                SystemOrigin::Subagent { id: "s".into() },
                Some(c.then_spawn()),
            )
        };
        let one = Chain::of(&[result(&Chain::default())]);
        assert!(one.refuses_spawn().is_none());
        let two = Chain::of(&[result(&one)]);
        assert_eq!(two.spawns, 2);
        assert!(two.refuses_spawn().is_some());
        // A person's message starts afresh, whatever its metadata says.
        let mut person = system(SystemOrigin::Heartbeat, Some(two.clone()));
        person.origin = Origin::User;
        assert!(Chain::of(&[person]).is_empty());
    }
}
