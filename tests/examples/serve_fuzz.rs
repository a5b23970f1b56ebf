//! The `serve` fuzzer's long mode: generated clients against one `sandpipe serve` for a given
//! time, reporting cases per second and every failure with its seed.
//!
//! ```text
//! cargo run -p sandpipe-tests --example serve_fuzz -- --seconds 1800 [--seed S] [--jobs J]
//! cargo run -p sandpipe-tests --example serve_fuzz -- --seed S --cases 1   # replay one case
//! ... --sandpipe PATH   # fuzz this sandpipe binary (e.g. a copy, while the tree is rebuilt)
//! ```
//!
//! Exits 1 if any case failed. `cargo test`'s fixed-seed run (`tests/tests/serve_fuzz.rs`) is
//! `--seed 1582170184 --cases 240 --jobs 3 --seconds 3600`.

use std::time::{Duration, Instant};

use sandpipe_tests::serve_fuzz::{bins, generate, run_many};

fn main() {
    let sandpipe_tests::long_run::Args {
        seconds,
        seed,
        jobs,
        cases,
        sandpipe,
    } = sandpipe_tests::long_run::Args::parse(3);
    let (built, server) = bins();
    let sandpipe = sandpipe.unwrap_or(built);
    let cache = tempfile::tempdir().expect("cache dir");
    if cases == 1 {
        println!("{:#?}", generate(seed));
    }
    println!("serve fuzz: seeds from {seed}, {jobs} jobs, {seconds} s");
    let started = Instant::now();
    let until = started + Duration::from_secs(seconds);
    let tally = run_many(
        &sandpipe,
        &server,
        cache.path(),
        seed..seed.saturating_add(cases),
        jobs,
        &|| Instant::now() < until,
    );
    let took = started.elapsed().as_secs_f64();
    println!(
        "{} cases in {:.1} min ({:.2} cases/s), {} failures; requests by fault: {:?}",
        tally.cases,
        took / 60.0,
        tally.cases as f64 / took,
        tally.failures.len(),
        tally.faults
    );
    for f in &tally.failures {
        println!("FAIL {f}");
    }
    std::process::exit(i32::from(!tally.failures.is_empty()));
}
