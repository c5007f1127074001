//! Process-wide counters and histograms, rendered as Prometheus text for `GET /metrics`.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Latency buckets in seconds, shared by every histogram (the sub-millisecond ones are for
/// the disk's `fdatasync`).
const BUCKETS: [f64; 15] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// A fixed-bucket histogram.
#[derive(Default)]
pub struct Histogram {
    counts: [AtomicU64; BUCKETS.len()],
    count: AtomicU64,
    /// Sum in microseconds.
    sum_us: AtomicU64,
}

impl Histogram {
    pub fn observe(&self, d: Duration) {
        let secs = d.as_secs_f64();
        if let Some(i) = BUCKETS.iter().position(|b| secs <= *b) {
            self.counts[i].fetch_add(1, Ordering::Relaxed);
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum_us
            .fetch_add(d.as_micros() as u64, Ordering::Relaxed);
    }

    /// Observations so far.
    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    fn render(&self, name: &str, labels: &str, out: &mut String) {
        let mut cumulative = 0;
        let sep = if labels.is_empty() { "" } else { "," };
        for (i, b) in BUCKETS.iter().enumerate() {
            cumulative += self.counts[i].load(Ordering::Relaxed);
            let _ = writeln!(out, "{name}_bucket{{{labels}{sep}le=\"{b}\"}} {cumulative}");
        }
        let count = self.count();
        let _ = writeln!(out, "{name}_bucket{{{labels}{sep}le=\"+Inf\"}} {count}");
        let sum = self.sum_us.load(Ordering::Relaxed) as f64 / 1e6;
        let braces = if labels.is_empty() {
            String::new()
        } else {
            format!("{{{labels}}}")
        };
        let _ = writeln!(out, "{name}_sum{braces} {sum}");
        let _ = writeln!(out, "{name}_count{braces} {count}");
    }
}

/// All metrics of the gateway.
#[derive(Default)]
pub struct Metrics {
    inbound: Mutex<BTreeMap<String, u64>>,
    outbound: Mutex<BTreeMap<String, u64>>,
    outbound_failed: Mutex<BTreeMap<String, u64>>,
    pub duplicates: AtomicU64,
    pub ignored: AtomicU64,
    pub turns: AtomicU64,
    pub turns_failed: AtomicU64,
    pub turn_latency: Histogram,
    pub llm_requests: AtomicU64,
    pub llm_errors: AtomicU64,
    pub llm_prompt_tokens: AtomicU64,
    pub llm_completion_tokens: AtomicU64,
    pub queue_depth: AtomicU64,
    pub active_workers: AtomicU64,
    pub running_turns: AtomicU64,
    pub stalled_chats: AtomicU64,
    pub cron_runs: AtomicU64,
    pub cron_failures: AtomicU64,
    pub cron_lateness: Histogram,
    /// Times the gateway gave freed heap memory back to the system after going idle.
    pub heap_trims: AtomicU64,
    /// One journal append + `fdatasync` of the store's group commit (shared with the store).
    pub store_sync: Arc<Histogram>,
}

fn bump(map: &Mutex<BTreeMap<String, u64>>, channel: &str) {
    let mut m = map.lock().unwrap_or_else(|p| p.into_inner());
    match m.get_mut(channel) {
        Some(v) => *v += 1,
        None => {
            m.insert(channel.to_string(), 1);
        }
    }
}

impl Metrics {
    pub fn inbound(&self, channel: &str) {
        bump(&self.inbound, channel);
    }

    pub fn outbound(&self, channel: &str) {
        bump(&self.outbound, channel);
    }

    pub fn outbound_failed(&self, channel: &str) {
        bump(&self.outbound_failed, channel);
    }

    /// Prometheus text exposition format.
    pub fn render(&self) -> String {
        let mut out = String::with_capacity(4096);
        let per_channel =
            |out: &mut String, name: &str, help: &str, map: &Mutex<BTreeMap<String, u64>>| {
                let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
                for (ch, v) in map.lock().unwrap_or_else(|p| p.into_inner()).iter() {
                    let _ = writeln!(out, "{name}{{channel=\"{ch}\"}} {v}");
                }
            };
        per_channel(
            &mut out,
            "switchboard_inbound_messages_total",
            "Inbound messages accepted, per channel.",
            &self.inbound,
        );
        per_channel(
            &mut out,
            "switchboard_outbound_messages_total",
            "Replies delivered, per channel.",
            &self.outbound,
        );
        per_channel(
            &mut out,
            "switchboard_outbound_failures_total",
            "Replies that could not be delivered, per channel.",
            &self.outbound_failed,
        );
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        for (name, kind, help, v) in [
            (
                "switchboard_duplicates_total",
                "counter",
                "Inbound messages dropped as redeliveries.",
                load(&self.duplicates),
            ),
            (
                "switchboard_ignored_total",
                "counter",
                "Inbound messages dropped by access policy.",
                load(&self.ignored),
            ),
            (
                "switchboard_turns_total",
                "counter",
                "Agent turns completed.",
                load(&self.turns),
            ),
            (
                "switchboard_turns_failed_total",
                "counter",
                "Agent turns that ended in an error reply.",
                load(&self.turns_failed),
            ),
            (
                "switchboard_llm_requests_total",
                "counter",
                "LLM requests sent.",
                load(&self.llm_requests),
            ),
            (
                "switchboard_llm_errors_total",
                "counter",
                "LLM requests that failed.",
                load(&self.llm_errors),
            ),
            (
                "switchboard_llm_prompt_tokens_total",
                "counter",
                "Prompt tokens reported by the LLM.",
                load(&self.llm_prompt_tokens),
            ),
            (
                "switchboard_llm_completion_tokens_total",
                "counter",
                "Completion tokens reported by the LLM.",
                load(&self.llm_completion_tokens),
            ),
            (
                "switchboard_queue_depth",
                "gauge",
                "Messages waiting for their chat's turn.",
                load(&self.queue_depth),
            ),
            (
                "switchboard_active_workers",
                "gauge",
                "Chats with work in progress.",
                load(&self.active_workers),
            ),
            (
                "switchboard_stalled_chats",
                "gauge",
                "Chats whose replies wait for their platform (kept after failed sends).",
                load(&self.stalled_chats),
            ),
            (
                "switchboard_running_turns",
                "gauge",
                "Turns running now.",
                load(&self.running_turns),
            ),
            (
                "switchboard_cron_runs_total",
                "counter",
                "Scheduled jobs fired.",
                load(&self.cron_runs),
            ),
            (
                "switchboard_cron_failures_total",
                "counter",
                "Scheduled jobs that failed.",
                load(&self.cron_failures),
            ),
            (
                "switchboard_heap_trims_total",
                "counter",
                "Times freed heap memory was given back to the system after the gateway went idle.",
                load(&self.heap_trims),
            ),
        ] {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {v}"
            );
        }
        let _ = writeln!(
            out,
            "# HELP switchboard_turn_duration_seconds Time from turn start to replies recorded.\n# TYPE switchboard_turn_duration_seconds histogram"
        );
        self.turn_latency
            .render("switchboard_turn_duration_seconds", "", &mut out);
        let _ = writeln!(
            out,
            "# HELP switchboard_cron_lateness_seconds Fire time minus due time.\n# TYPE switchboard_cron_lateness_seconds histogram"
        );
        self.cron_lateness
            .render("switchboard_cron_lateness_seconds", "", &mut out);
        let _ = writeln!(
            out,
            "# HELP switchboard_store_sync_seconds One durable journal write (append and fdatasync) of the store's group commit.\n# TYPE switchboard_store_sync_seconds histogram"
        );
        self.store_sync
            .render("switchboard_store_sync_seconds", "", &mut out);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_counters_and_cumulative_buckets() {
        let m = Metrics::default();
        m.inbound("telegram");
        m.inbound("telegram");
        m.turn_latency.observe(Duration::from_millis(3));
        m.turn_latency.observe(Duration::from_millis(300));
        let text = m.render();
        assert!(text.contains("switchboard_inbound_messages_total{channel=\"telegram\"} 2"));
        assert!(text.contains("switchboard_turn_duration_seconds_bucket{le=\"0.005\"} 1"));
        assert!(text.contains("switchboard_turn_duration_seconds_bucket{le=\"0.5\"} 2"));
        assert!(text.contains("switchboard_turn_duration_seconds_count 2"));
    }
}
