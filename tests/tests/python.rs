//! Python plugins, as componentize-py components and natively under `python3`: the guest SDK
//! in `guest-sdk/python` and the examples in `examples/python` replay the same golden
//! transcripts as the Rust examples, and a guest's blocking write completes in full as on a
//! Linux pipe while the host's buffer stays bounded.
//!
//! Each component is built once (see `sandpipe_tests::guests`) and compiled once per test
//! process: one `Host` for every test here, with the on-disk artifact cache in a directory of
//! the plugin target dir.

use std::time::Duration;

mod guest_replay;

use guest_replay::{host, replay_ports};
use sandpipe::{Exit, Policy, SessionOptions, StderrMode};
use sandpipe_tests::{Target, guests, peers, workspace_root};

/// Python plugin for a transcript's `# plugin:` header.
fn python_example(bin: &str) -> Option<&'static str> {
    match bin {
        "example-atp" => Some("examples/python/example_atp.py"),
        "example-oracle" => Some("examples/python/example_oracle.py"),
        _ => None,
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn python_examples_replay_the_atp_and_oracle_transcripts_as_wasm_and_native() {
    let _alone = ALONE.lock().await;
    let mut failures = Vec::new();
    let mut replayed = 0;
    for protocol in ["atp", "oracle"] {
        let (failed, ran) = replay_ports(protocol, "Python", python_example, guests::python).await;
        failures.extend(failed);
        replayed += ran;
    }
    assert!(replayed >= 18, "only {replayed} replays");
    assert!(
        failures.is_empty(),
        "{} replay(s) failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// Start `tests/plugins/python/big_write.py CHUNKS SIZE` with stdout unframed.
async fn big_write(target: Target, chunks: usize, size: usize) -> sandpipe::Session {
    let plugin = guests::python("tests/plugins/python/big_write.py", target);
    let p = host().load(&plugin).expect("load");
    let policy = Policy::default()
        .arg(chunks.to_string())
        .arg(size.to_string());
    let opts = SessionOptions::default().stderr(StderrMode::Discard);
    host().start(&p, &policy, &opts).await.expect("start")
}

/// Read stdout (raw chunks) from byte `offset` until at least byte `until`, checking that the
/// byte at `at` is `(at / size) % 251`; returns where reading stopped. A read may return more
/// than asked for (sandpipe sizes its reads to what arrives), so it may stop past `until`.
async fn read_chunks(
    s: &mut sandpipe::Session,
    mut offset: usize,
    until: usize,
    size: usize,
) -> usize {
    while offset < until {
        let bytes = s.recv().await.expect("recv").unwrap_or_else(|| {
            panic!(
                "stdout ended at byte {offset} of {until}: {:?}",
                s.stderr_tail()
            )
        });
        for (i, b) in bytes.iter().enumerate() {
            let at = offset + i;
            assert_eq!(
                usize::from(*b),
                (at / size) % 251,
                "byte {at} belongs to chunk {}",
                at / size
            );
        }
        offset += bytes.len();
    }
    offset
}

#[tokio::test(flavor = "multi_thread")]
async fn a_blocking_write_of_1_mib_completes_in_full() {
    let _alone = ALONE.lock().await;
    const MIB: usize = 1 << 20;
    for target in [Target::Wasm, Target::Native] {
        let mut s = big_write(target, 1, MIB).await;
        assert_eq!(read_chunks(&mut s, 0, MIB, MIB).await, MIB);
        assert_eq!(s.recv().await.expect("eof"), None);
        assert_eq!(
            s.wait().await,
            Exit::Exited(0),
            "{target:?}: {:?}",
            s.stderr_tail()
        );
    }
}

/// The tests that start components in this process run one at a time (the memory test reads
/// the whole process's RSS).
static ALONE: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("statm");
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .expect("rss pages");
    pages * 4096
}

#[tokio::test(flavor = "multi_thread")]
async fn a_guest_writing_mib_after_mib_waits_for_the_host_instead_of_filling_its_memory() {
    // Measures this process's RSS: no other test of this file may compile or run a component
    // meanwhile.
    let _alone = ALONE.lock().await;
    const MIB: usize = 1 << 20;
    const CHUNKS: usize = 64;
    let mut s = big_write(Target::Wasm, CHUNKS, MIB).await;
    // The first chunk is through: the guest is into its next writes. Stop reading.
    let at = read_chunks(&mut s, 0, MIB, MIB).await;
    let before = rss_bytes();
    // What a host that does not read meanwhile may hold: the guest's stdout pipe (1 MiB) plus
    // one write (1 MiB), never the 63 MiB the guest still wants to write.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let paused = rss_bytes();
    eprintln!("rss before {before}, after the pause {paused}");
    assert!(
        paused.saturating_sub(before) < 16 << 20,
        "host memory grew by {} bytes while it did not read",
        paused.saturating_sub(before)
    );
    assert_eq!(
        read_chunks(&mut s, at, CHUNKS * MIB, MIB).await,
        CHUNKS * MIB
    );
    assert_eq!(s.recv().await.expect("eof"), None);
    assert_eq!(s.wait().await, Exit::Exited(0), "{:?}", s.stderr_tail());
}

#[test]
fn the_python_sdk_unit_tests_pass_under_python3() {
    let sdk = workspace_root().join("guest-sdk/python");
    let out = std::process::Command::new(peers::system_python())
        .current_dir(&sdk)
        .env("PYTHONPATH", &sdk)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .args(["-m", "unittest", "discover", "-s", "tests"])
        .output()
        .expect("running python3");
    assert!(
        out.status.success(),
        "python3 -m unittest failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
