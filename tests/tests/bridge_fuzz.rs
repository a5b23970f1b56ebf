//! The bridge fuzzer's fixed-seed run (see `sandpipe_tests::bridge_fuzz`): a few hundred
//! generated sessions through the built `sandpipe run`, every framing, wasm and native, every
//! ending; each must end with a documented status, without a panic or a hang, having given the
//! engine exactly the plugin's valid output. The long run is the `bridge_fuzz` example
//! (`--seconds N`).

use sandpipe_tests::bridge_fuzz::{Bins, run_many};

/// Cases in the fixed-seed run, and where their seeds start.
const CASES: u64 = 320;
const SEED: u64 = 0x5a9d_0025;

#[test]
fn fixed_seed_sessions_keep_the_invariants() {
    let cache = tempfile::tempdir().expect("cache dir");
    let bins = Bins::build(cache.path());
    // Three cases at a time on a two-core machine: each is two processes, mostly waiting.
    let tally = run_many(&bins, SEED..SEED + CASES, 3, &|| true);
    eprintln!("{} cases:\n{}", tally.cases, tally.summary());
    assert_eq!(tally.cases as u64, CASES);
    assert!(
        tally.failures.is_empty(),
        "{} of {} cases failed:\n{}",
        tally.failures.len(),
        tally.cases,
        tally.failures.join("\n")
    );
    // The run reaches every ending.
    for ending in ["eof", "signal", "reader-gone", "exit-early"] {
        assert!(
            tally.statuses.keys().any(|(e, _)| *e == ending),
            "no {ending} case ran"
        );
    }
}
