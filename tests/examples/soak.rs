//! The full soak: a million round trips (or `--round-trips N`) through one long-lived
//! `sandpipe run --framing lines` and one `run --protocol oracle` (a tenth of the requests
//! erroring), wasm and native, sampling resident memory and descriptors of sandpipe and its
//! plugin every tenth; prints each curve as a Markdown table and whether it meets the bars.
//!
//! ```text
//! cargo run --release -p sandpipe-tests --example soak -- [--round-trips N]
//! ```
//!
//! Exits 1 if a soak failed or missed a bar.

use std::time::Instant;

use sandpipe_tests::Target;
use sandpipe_tests::soak::{Soak, judge, soak, table};

fn main() {
    let mut round_trips = 1_000_000u64;
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        match (flag.as_str(), args.next().and_then(|v| v.parse().ok())) {
            ("--round-trips", Some(n)) => round_trips = n,
            _ => panic!("usage: soak [--round-trips N]"),
        }
    }
    let cache = std::env::temp_dir().join(format!("sandpipe-soak-{}", std::process::id()));
    let sandpipe = sandpipe_tests::peers::sandpipe();
    let mut failed = false;
    for what in [
        Soak::Lines(Target::Wasm),
        Soak::Lines(Target::Native),
        Soak::Oracle(Target::Wasm),
        Soak::Oracle(Target::Native),
    ] {
        let started = Instant::now();
        match soak(&sandpipe, &cache, what, round_trips) {
            Ok(samples) => {
                let verdict = judge(&samples);
                println!(
                    "{what}: {round_trips} round trips in {:.0} s, {}\n\n{}",
                    started.elapsed().as_secs_f64(),
                    match &verdict {
                        Ok(()) => "bars met".to_owned(),
                        Err(e) => format!("BAR MISSED: {e}"),
                    },
                    table(&samples)
                );
                failed |= verdict.is_err();
            }
            Err(e) => {
                println!("{what}: FAILED: {e}");
                failed = true;
            }
        }
    }
    let _ = std::fs::remove_dir_all(&cache);
    std::process::exit(i32::from(failed));
}
