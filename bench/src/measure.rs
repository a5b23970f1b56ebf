//! Sampling: warm-up, then timed iterations until a count or a time budget is reached.

use std::time::{Duration, Instant};

/// How long one figure is measured.
#[derive(Debug, Clone, Copy)]
pub struct Plan {
    /// Iterations run and thrown away first.
    pub warmup: usize,
    /// Timed iterations wanted.
    pub iters: usize,
    /// Stop early once this much time went into timed iterations…
    pub budget: Duration,
    /// …but only after at least this many samples.
    pub min_iters: usize,
}

impl Plan {
    pub const fn new(warmup: usize, iters: usize, budget_ms: u64) -> Plan {
        Plan {
            warmup,
            iters,
            budget: Duration::from_millis(budget_ms),
            min_iters: if iters < 10 { iters } else { 10 },
        }
    }

    fn more(&self, taken: usize, started: Instant) -> bool {
        taken < self.iters && (taken < self.min_iters || started.elapsed() < self.budget)
    }
}

/// Percentiles of one figure.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Stats {
    pub n: usize,
    pub p50: Duration,
    pub p99: Duration,
}

impl Stats {
    fn from_samples(mut samples: Vec<Duration>) -> Stats {
        samples.sort_unstable();
        Stats {
            n: samples.len(),
            p50: percentile(&samples, 50),
            p99: percentile(&samples, 99),
        }
    }
}

/// Nearest-rank percentile of sorted samples (zero for none).
/// The median of `v` (the upper one of an even count); `v` must not be empty.
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn percentile(sorted: &[Duration], p: usize) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = (sorted.len() * p).div_ceil(100).max(1);
    sorted[rank - 1]
}

/// Drives one figure's loop: `while s.more() { s.record(timed()?) }`. A loop rather than a
/// closure-taking function so async bodies can borrow freely and stay `Send`.
#[derive(Debug)]
pub struct Sampler {
    plan: Plan,
    warmed: usize,
    started: Option<Instant>,
    samples: Vec<Duration>,
}

impl Sampler {
    pub fn new(plan: &Plan) -> Sampler {
        Sampler {
            plan: *plan,
            warmed: 0,
            started: None,
            samples: Vec::with_capacity(plan.iters),
        }
    }

    /// Whether to run another iteration (warm-up ones first).
    pub fn more(&mut self) -> bool {
        if self.warmed < self.plan.warmup {
            return true;
        }
        let started = *self.started.get_or_insert_with(Instant::now);
        self.plan.more(self.samples.len(), started)
    }

    /// One iteration's time; warm-up iterations are dropped.
    pub fn record(&mut self, took: Duration) {
        if self.warmed < self.plan.warmup {
            self.warmed += 1;
        } else {
            self.samples.push(took);
        }
    }

    pub fn finish(self) -> Stats {
        Stats::from_samples(self.samples)
    }
}

/// Run `f` per the plan; `f` times its own interesting part and returns that duration, so
/// per-iteration setup stays outside the figure.
pub fn run_sync(
    plan: &Plan,
    mut f: impl FnMut() -> anyhow::Result<Duration>,
) -> anyhow::Result<Stats> {
    let mut s = Sampler::new(plan);
    while s.more() {
        s.record(f()?);
    }
    Ok(s.finish())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let us = |n: u64| Duration::from_micros(n);
        let samples: Vec<Duration> = (1..=100).map(us).collect();
        let cases = [(50, us(50)), (99, us(99)), (100, us(100)), (1, us(1))];
        for (p, want) in cases {
            assert_eq!(percentile(&samples, p), want, "p{p}");
        }
        assert_eq!(percentile(&[us(7)], 99), us(7));
        assert_eq!(percentile(&[], 50), Duration::ZERO);
    }

    #[test]
    fn plan_stops_at_count() {
        let plan = Plan::new(2, 5, 60_000);
        let mut calls = 0;
        let stats = run_sync(&plan, || {
            calls += 1;
            Ok(Duration::from_nanos(calls))
        })
        .expect("no error");
        assert_eq!((calls, stats.n), (7, 5));
        assert_eq!(stats.p50, Duration::from_nanos(5));
    }
}
