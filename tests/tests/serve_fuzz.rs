//! The `serve` fuzzer's fixed-seed run (see `sandpipe_tests::serve_fuzz`): a few hundred
//! generated clients of both eras against one `sandpipe serve`, on three threads at once, each
//! request written in pieces and some damaged or cut off; every answer must be the spec's
//! status and error, or the call's own result, and the endpoint must end with nothing started
//! that no client asked for and exit 0 at SIGTERM. The long run is the `serve_fuzz` example
//! (`--seconds N`).

use sandpipe_tests::serve_fuzz::{bins, run_many};

/// Cases in the fixed-seed run, and where their seeds start.
const CASES: u64 = 240;
const SEED: u64 = 0x5e4e_0048;

#[test]
fn fixed_seed_clients_get_the_specs_answers() {
    let cache = tempfile::tempdir().expect("cache dir");
    let (sandpipe, server) = bins();
    let tally = run_many(
        &sandpipe,
        &server,
        cache.path(),
        SEED..SEED + CASES,
        3,
        &|| true,
    );
    eprintln!(
        "{} cases; requests by fault: {:?}",
        tally.cases, tally.faults
    );
    assert_eq!(tally.cases as u64, CASES);
    assert!(
        tally.failures.is_empty(),
        "{} failures:\n{}",
        tally.failures.len(),
        tally.failures.join("\n")
    );
    // The run reaches every fault.
    for fault in [
        "None",
        "MalformedJson",
        "Batch",
        "OverCap",
        "NoVersion",
        "WrongVersionHeader",
        "WrongMethodHeader",
        "WrongNameHeader",
        "UnsupportedRevision",
        "UnknownSession",
        "StolenSession",
        "ForeignOrigin",
        "ForeignHost",
        "NoToken",
        "WrongToken",
        "HalfHead",
        "HalfBody",
        "HangUp",
    ] {
        assert!(
            tally.faults.contains_key(fault),
            "no {fault} request was sent"
        );
    }
}
