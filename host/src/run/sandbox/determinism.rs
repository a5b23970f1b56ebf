//! Deterministic clocks and random for [`crate::Policy::deterministic`].

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use wasmtime_wasi::{Deterministic, HostMonotonicClock, HostWallClock, WasiCtxBuilder};

/// 2000-01-01T00:00:00Z in seconds since the Unix epoch.
const START_WALL_SECS: u64 = 946_684_800;
/// How far each read moves a clock.
const STEP: Duration = Duration::from_millis(1);
/// Length of each random stream before it repeats.
const RANDOM_BYTES: usize = 64 * 1024;

/// A wall clock that moves only when read.
struct StepWall(AtomicU64);

impl HostWallClock for StepWall {
    fn resolution(&self) -> Duration {
        STEP
    }
    fn now(&self) -> Duration {
        let reads = self.0.fetch_add(1, Ordering::Relaxed);
        Duration::from_secs(START_WALL_SECS) + STEP * u32::try_from(reads).unwrap_or(u32::MAX)
    }
}

/// A monotonic clock (nanoseconds) that moves only when read.
struct StepMono(AtomicU64);

impl HostMonotonicClock for StepMono {
    fn resolution(&self) -> u64 {
        STEP.as_nanos() as u64
    }
    fn now(&self) -> u64 {
        self.0
            .fetch_add(1, Ordering::Relaxed)
            .saturating_mul(STEP.as_nanos() as u64)
    }
}

/// SplitMix64 bytes: a fixed function of `seed`.
fn stream(seed: u64) -> Vec<u8> {
    let mut state = seed;
    let mut out = Vec::with_capacity(RANDOM_BYTES);
    while out.len() < RANDOM_BYTES {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        out.extend_from_slice(&z.to_le_bytes());
    }
    out
}

pub(super) fn apply(b: &mut WasiCtxBuilder, seed: u64) {
    b.wall_clock(StepWall(AtomicU64::new(0)))
        .monotonic_clock(StepMono(AtomicU64::new(0)))
        .secure_random(Deterministic::new(stream(seed)))
        .insecure_random(Deterministic::new(stream(seed ^ 0x5eed_5eed_5eed_5eed)))
        .insecure_random_seed(u128::from(seed));
}
