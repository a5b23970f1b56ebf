//! The soak's short, fixed-size run (see `sandpipe_tests::soak`): round trips through one
//! long-lived `sandpipe run --framing lines` and one `run --protocol oracle` (a tenth of the
//! requests erroring), wasm and native, with sandpipe's and the plugin's resident memory and
//! descriptors read every tenth. The full million is the `soak` example (BENCHMARKS.md).

use sandpipe_tests::Target;
use sandpipe_tests::soak::{Soak, judge, soak, table};

/// Round trips per soak here: enough for ten samples past warm-up, a few seconds in all.
const ROUND_TRIPS: u64 = 5_000;

#[test]
fn a_long_lived_session_keeps_its_memory_and_descriptors() {
    let cache = tempfile::tempdir().expect("cache dir");
    let sandpipe = sandpipe_tests::peers::sandpipe();
    for what in [
        Soak::Lines(Target::Wasm),
        Soak::Lines(Target::Native),
        Soak::Oracle(Target::Wasm),
        Soak::Oracle(Target::Native),
    ] {
        let samples = soak(&sandpipe, cache.path(), what, ROUND_TRIPS)
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_eq!(samples.len(), 10, "{what}");
        eprintln!("{what}\n{}", table(&samples));
        if let Err(e) = judge(&samples) {
            panic!("{what}: {e}\n{}", table(&samples));
        }
    }
}
