//! `/metrics`: the endpoint's counters in the Prometheus text format (version 0.0.4).
//!
//! ```text
//! sandpipe_serve_instances{state="running"} 2        instances serving now (warm ones too)
//! sandpipe_serve_instances{state="warm"} 1           of them, those no client has claimed yet
//! sandpipe_serve_instances{state="ended"} 5          instances ended since start-up
//! sandpipe_serve_requests_total{method="tools/call",outcome="result"} 12
//! sandpipe_serve_refusals_total{reason="auth"} 3     answered before reaching an instance
//! sandpipe_serve_request_duration_seconds_bucket{method="tools/call",le="0.005"} 9
//! sandpipe_serve_request_duration_seconds_sum{method="tools/call"} 0.041
//! sandpipe_serve_request_duration_seconds_count{method="tools/call"} 12
//! ```
//!
//! A request's duration runs from its forwarding to the instance until its answer (or until it
//! was abandoned or its instance ended): what the sandboxed server took, with the bridge,
//! without the client's network.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;
use std::time::Duration;

/// The latency histogram's upper bounds, in seconds (Prometheus' client defaults, from 1 ms,
/// and 30 s for slow tools); `+Inf` follows.
const BUCKETS: [f64; 14] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// Why a request was answered by the endpoint itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Refusal {
    /// A `Host` the endpoint does not answer to (403).
    Host,
    /// A foreign `Origin` (403).
    Origin,
    /// No token, or one nobody holds (401).
    Auth,
    /// A body over the cap (413).
    BodySize,
    /// Over the principal's requests per minute (429).
    Rate,
    /// Over the principal's instances (429).
    Instances,
    /// A message the MCP rules refuse: not JSON-RPC, headers that disagree with the body, an
    /// unsupported revision (400).
    Protocol,
    /// An unknown or ended session (404).
    Session,
    /// A method HTTP does not allow there (405), or a path that is not the endpoint (404).
    Route,
    /// The endpoint is shutting down (503).
    Stopping,
}

impl Refusal {
    fn label(self) -> &'static str {
        match self {
            Refusal::Host => "host",
            Refusal::Origin => "origin",
            Refusal::Auth => "auth",
            Refusal::BodySize => "body-size",
            Refusal::Rate => "rate",
            Refusal::Instances => "instances",
            Refusal::Protocol => "protocol",
            Refusal::Session => "session",
            Refusal::Route => "route",
            Refusal::Stopping => "stopping",
        }
    }
}

/// How a forwarded request ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Outcome {
    /// A result.
    Result,
    /// A JSON-RPC error.
    Error,
    /// The client went away first.
    Abandoned,
    /// The instance ended before answering.
    Ended,
}

impl Outcome {
    fn label(self) -> &'static str {
        match self {
            Outcome::Result => "result",
            Outcome::Error => "error",
            Outcome::Abandoned => "abandoned",
            Outcome::Ended => "ended",
        }
    }
}

/// The methods counted by name; any other is `other`, so a client cannot grow the table.
const METHODS: [&str; 14] = [
    "initialize",
    "server/discover",
    "ping",
    "tools/list",
    "tools/call",
    "resources/list",
    "resources/read",
    "resources/templates/list",
    "prompts/list",
    "prompts/get",
    "completion/complete",
    "logging/setLevel",
    "subscriptions/listen",
    "notifications",
];

/// `method`'s label: its own when MCP has it, else `other`.
fn counted(method: &str) -> &'static str {
    if method.starts_with("notifications/") {
        "notifications"
    } else {
        METHODS
            .iter()
            .find(|m| **m == method)
            .copied()
            .unwrap_or("other")
    }
}

/// The counters.
#[derive(Debug, Default)]
pub struct Metrics {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    running: u64,
    ended: u64,
    requests: BTreeMap<(&'static str, Outcome), u64>,
    refusals: BTreeMap<Refusal, u64>,
    durations: BTreeMap<&'static str, Histogram>,
}

/// One method's durations: a count per bucket (not cumulative; the text sums them), the
/// count past the last, the total.
#[derive(Debug, Default)]
struct Histogram {
    buckets: [u64; BUCKETS.len()],
    over: u64,
    sum: f64,
}

impl Histogram {
    fn observe(&mut self, seconds: f64) {
        match BUCKETS.iter().position(|b| seconds <= *b) {
            Some(i) => self.buckets[i] += 1,
            None => self.over += 1,
        }
        self.sum += seconds;
    }

    fn count(&self) -> u64 {
        self.buckets.iter().sum::<u64>() + self.over
    }
}

impl Metrics {
    fn inner(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// An instance started.
    pub fn started(&self) {
        self.inner().running += 1;
    }

    /// An instance ended.
    pub fn ended(&self) {
        let mut m = self.inner();
        m.running = m.running.saturating_sub(1);
        m.ended += 1;
    }

    /// A forwarded request of `method` ended with `outcome`, `took` after it was forwarded.
    pub fn request(&self, method: &str, outcome: Outcome, took: Duration) {
        let method = counted(method);
        let mut m = self.inner();
        *m.requests.entry((method, outcome)).or_default() += 1;
        m.durations
            .entry(method)
            .or_default()
            .observe(took.as_secs_f64());
    }

    /// A notification or a response to the server was forwarded (counted as a `result`; it
    /// waits for nothing, so it has no duration).
    pub fn forwarded(&self, method: &str) {
        let method = counted(method);
        *self
            .inner()
            .requests
            .entry((method, Outcome::Result))
            .or_default() += 1;
    }

    /// A request was refused for `reason`.
    pub fn refused(&self, reason: Refusal) {
        *self.inner().refusals.entry(reason).or_default() += 1;
    }

    /// How many instances serve now.
    pub fn running(&self) -> u64 {
        self.inner().running
    }

    /// The Prometheus text, with `warm` instances waiting unclaimed (`--warm`).
    pub fn render(&self, warm: usize) -> String {
        let m = self.inner();
        let mut out = String::new();
        out.push_str("# HELP sandpipe_serve_instances Sandboxed server instances by state.\n");
        out.push_str("# TYPE sandpipe_serve_instances gauge\n");
        let _ = writeln!(
            out,
            "sandpipe_serve_instances{{state=\"running\"}} {}",
            m.running
        );
        let _ = writeln!(out, "sandpipe_serve_instances{{state=\"warm\"}} {warm}");
        let _ = writeln!(
            out,
            "sandpipe_serve_instances{{state=\"ended\"}} {}",
            m.ended
        );
        out.push_str(
            "# HELP sandpipe_serve_requests_total MCP messages forwarded, by method and outcome.\n",
        );
        out.push_str("# TYPE sandpipe_serve_requests_total counter\n");
        for ((method, outcome), n) in &m.requests {
            let _ = writeln!(
                out,
                "sandpipe_serve_requests_total{{method=\"{method}\",outcome=\"{}\"}} {n}",
                outcome.label()
            );
        }
        out.push_str("# HELP sandpipe_serve_refusals_total Requests answered by sandpipe itself, by reason.\n");
        out.push_str("# TYPE sandpipe_serve_refusals_total counter\n");
        for (reason, n) in &m.refusals {
            let _ = writeln!(
                out,
                "sandpipe_serve_refusals_total{{reason=\"{}\"}} {n}",
                reason.label()
            );
        }
        out.push_str("# HELP sandpipe_serve_request_duration_seconds From a request's forwarding to its instance until its answer, by method.\n");
        out.push_str("# TYPE sandpipe_serve_request_duration_seconds histogram\n");
        for (method, h) in &m.durations {
            let series = "sandpipe_serve_request_duration_seconds";
            let mut cumulative = 0;
            for (bound, n) in BUCKETS.iter().zip(h.buckets) {
                cumulative += n;
                let _ = writeln!(
                    out,
                    "{series}_bucket{{method=\"{method}\",le=\"{bound}\"}} {cumulative}"
                );
            }
            let count = h.count();
            let _ = writeln!(
                out,
                "{series}_bucket{{method=\"{method}\",le=\"+Inf\"}} {count}"
            );
            let _ = writeln!(out, "{series}_sum{{method=\"{method}\"}} {}", h.sum);
            let _ = writeln!(out, "{series}_count{{method=\"{method}\"}} {count}");
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_text_has_each_family_and_bounded_labels() {
        let m = Metrics::default();
        m.started();
        m.started();
        m.ended();
        m.request("tools/call", Outcome::Result, Duration::from_millis(3));
        m.request("tools/call", Outcome::Result, Duration::from_secs(60));
        m.request("made/up", Outcome::Error, Duration::from_millis(1));
        m.refused(Refusal::Auth);
        let text = m.render(0);
        for line in [
            "sandpipe_serve_instances{state=\"running\"} 1",
            "sandpipe_serve_instances{state=\"ended\"} 1",
            "sandpipe_serve_requests_total{method=\"tools/call\",outcome=\"result\"} 2",
            "sandpipe_serve_requests_total{method=\"other\",outcome=\"error\"} 1",
            "sandpipe_serve_refusals_total{reason=\"auth\"} 1",
            "# TYPE sandpipe_serve_request_duration_seconds histogram",
            "sandpipe_serve_request_duration_seconds_bucket{method=\"tools/call\",le=\"0.0025\"} 0",
            "sandpipe_serve_request_duration_seconds_bucket{method=\"tools/call\",le=\"0.005\"} 1",
            "sandpipe_serve_request_duration_seconds_bucket{method=\"tools/call\",le=\"30\"} 1",
            "sandpipe_serve_request_duration_seconds_bucket{method=\"tools/call\",le=\"+Inf\"} 2",
            "sandpipe_serve_request_duration_seconds_sum{method=\"tools/call\"} 60.003",
            "sandpipe_serve_request_duration_seconds_count{method=\"tools/call\"} 2",
            "sandpipe_serve_request_duration_seconds_count{method=\"other\"} 1",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} in\n{text}");
        }
    }
}
