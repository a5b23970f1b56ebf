//! The bridge fuzzer's long mode: generated sessions through the built `sandpipe run` for a
//! given time, reporting cases per second and every failure with its seed.
//!
//! ```text
//! cargo run -p sandpipe-tests --example bridge_fuzz -- --seconds 1800 [--seed S] [--jobs J]
//! cargo run -p sandpipe-tests --example bridge_fuzz -- --seed S --cases 1   # replay one case
//! ... --sandpipe PATH   # fuzz this sandpipe binary (e.g. a copy, while the tree is rebuilt)
//! ```
//!
//! Exits 1 if any case failed.
//!
//! `cargo test`'s fixed-seed run (`tests/tests/bridge_fuzz.rs`) is
//! `--seed 1520238629 --cases 320 --jobs 3 --seconds 3600`.

use std::time::{Duration, Instant};

use sandpipe_tests::bridge_fuzz::{Bins, generate, run_many};

fn main() {
    let sandpipe_tests::long_run::Args {
        seconds,
        seed,
        jobs,
        cases,
        sandpipe,
    } = sandpipe_tests::long_run::Args::parse(2);
    let cache = std::env::temp_dir().join(format!("sandpipe-bridge-fuzz-{}", std::process::id()));
    let mut bins = Bins::build(&cache);
    // A copy of the binary, for a long run that must not test a binary rebuilt under it.
    if let Some(path) = sandpipe {
        bins.sandpipe = path;
    }
    if cases == 1 {
        println!("{}", generate(seed));
    }
    println!("bridge fuzz: seeds from {seed}, {jobs} jobs, {seconds} s");
    let started = Instant::now();
    let until = started + Duration::from_secs(seconds);
    let tally = run_many(&bins, seed..seed.saturating_add(cases), jobs, &|| {
        Instant::now() < until
    });
    let took = started.elapsed().as_secs_f64();
    println!(
        "{} cases in {:.1} min ({:.2} cases/s), {} failures",
        tally.cases,
        took / 60.0,
        tally.cases as f64 / took,
        tally.failures.len()
    );
    print!("{}", tally.summary());
    for f in &tally.failures {
        println!("FAIL {f}");
    }
    let _ = std::fs::remove_dir_all(&cache);
    std::process::exit(i32::from(!tally.failures.is_empty()));
}
