//! The conversations waiting for their catch-up, and the workers that run them.
//!
//! One queue per channel, shared by every catch-up of the run (at each `hello` after a gap,
//! and the retries of those that failed): a few workers ([`Queue::add_worker`]) take the
//! conversations from the front. A conversation one of whose live events is being held
//! moves to the front ([`Queue::prioritize`]), so a busy conversation is not held behind a
//! hundred quiet ones.

use std::collections::VecDeque;
use std::sync::{Mutex, MutexGuard};

use crate::hold::Reserved;
use crate::recent::Gap;

/// One conversation to catch up on.
pub(crate) struct Job {
    pub gap: Gap,
    /// Its place in the holds (`None` for a retry, which holds nothing).
    pub place: Option<Reserved>,
    /// Earlier attempts that failed.
    pub attempt: u32,
}

#[derive(Default)]
pub(crate) struct Queue(Mutex<Inner>);

#[derive(Default)]
struct Inner {
    jobs: VecDeque<Job>,
    workers: usize,
}

impl Queue {
    fn inner(&self) -> MutexGuard<'_, Inner> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Add `job` at the back. A conversation already waiting (not started) is not queued
    /// twice: the waiting job takes `job`'s gap (same start, newer session) and place.
    pub(crate) fn push(&self, job: Job) {
        let mut inner = self.inner();
        let waiting = inner
            .jobs
            .iter_mut()
            .find(|j| j.gap.channel == job.gap.channel);
        match waiting {
            Some(w) => {
                w.gap = job.gap;
                if job.place.is_some() {
                    // The older place never ran: dropped, it lets the newer one start, which
                    // holds the conversation from now on.
                    w.place = job.place;
                }
            }
            None => inner.jobs.push_back(job),
        }
    }

    /// Whether `channel` waits in the queue.
    pub(crate) fn waiting(&self, channel: &str) -> bool {
        self.inner().jobs.iter().any(|j| j.gap.channel == channel)
    }

    /// Move `channel`'s waiting job to the front.
    pub(crate) fn prioritize(&self, channel: &str) {
        let mut inner = self.inner();
        if let Some(i) = inner.jobs.iter().position(|j| j.gap.channel == channel) {
            if let Some(job) = inner.jobs.remove(i) {
                inner.jobs.push_front(job);
            }
        }
    }

    /// Jobs waiting.
    pub(crate) fn len(&self) -> usize {
        self.inner().jobs.len()
    }

    /// Count one more worker if fewer than `max` run and a job waits.
    pub(crate) fn add_worker(&self, max: usize) -> bool {
        let mut inner = self.inner();
        if inner.workers >= max || inner.jobs.is_empty() {
            return false;
        }
        inner.workers += 1;
        true
    }

    /// The next job for a worker; `None`, and the worker is counted out, when there is none.
    pub(crate) fn next(&self) -> Option<Job> {
        let mut inner = self.inner();
        let job = inner.jobs.pop_front();
        if job.is_none() {
            inner.workers -= 1;
        }
        job
    }

    /// A worker stops early (shutdown): counted out; the jobs are dropped (their holds go).
    pub(crate) fn quit(&self) {
        let mut inner = self.inner();
        inner.workers = inner.workers.saturating_sub(1);
        inner.jobs.clear();
    }
}
