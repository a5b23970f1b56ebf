//! Send one frame with what a plugin can observe of time and randomness,
//! `{"wall_ns":…,"mono_ns":…,"random":[8 × u64]}`, then exit 0; a deterministic host makes
//! two runs print the same frame.
//!
//! Build: cargo build --release -p sandpipe-test-plugins --target wasm32-wasip2
//! Run:   sandpipe run --framing lines target/wasm32-wasip2/release/clock-random.wasm </dev/null

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use sandpipe_guest::{Framing, Stdio};
use serde_json::json;

fn main() {
    // A clock before 1970 reads as 0; nanoseconds overflow u64 only after the year 2554.
    let wall_ns = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| {
            u64::try_from(since.as_nanos()).unwrap_or(u64::MAX)
        });
    let start = Instant::now();
    let mono_ns = u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX);
    // The host seeds RandomState: wasi:random/insecure-seed under wasip2, random_get under
    // wasip1, the OS natively.
    let state = RandomState::new();
    let random: Vec<u64> = (0u64..8).map(|i| state.hash_one(i)).collect();
    let frame = json!({"wall_ns": wall_ns, "mono_ns": mono_ns, "random": random});
    let frame = serde_json::to_vec(&frame).expect("a serde_json::Value always serializes");
    if let Err(err) = Stdio::new(Framing::JsonLines).send(&frame) {
        eprintln!("clock-random: {err}");
        sandpipe_guest::exit(2);
    }
}
