//! `bench/copy-count`, preloaded into a real process, counts the large copies it makes and
//! only those.

use std::path::PathBuf;
use std::process::Command;

/// Build the library into this test's target directory and return its path.
fn library() -> PathBuf {
    let profile_dir = sandpipe_tests::test_profile_dir();
    if let Err(e) =
        sandpipe_tests::cargo_build_into(&profile_dir, &["-p", "sandpipe-copy-count"], |_| {})
    {
        panic!("building the copy counter: {e}");
    }
    let lib = profile_dir.join("libsandpipe_copy_count.so");
    assert!(lib.is_file(), "{} was not built", lib.display());
    lib
}

/// Run a Python one-liner with the library preloaded; the counts it reported, if any.
fn run(lib: &PathBuf, report: bool, code: &str) -> Option<[u64; 4]> {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut cmd = Command::new("python3");
    cmd.args(["-c", code]).env("LD_PRELOAD", lib);
    if report {
        cmd.env("SANDPIPE_COPY_COUNT_DIR", dir.path());
    }
    let out = cmd.output().expect("running python3");
    assert!(out.status.success(), "python3 failed: {out:?}");
    // `python3` may be a launcher script (pyenv's): its shells report too, under their names.
    let mut reports = Vec::new();
    for entry in std::fs::read_dir(dir.path()).expect("reading the report dir") {
        let text = std::fs::read_to_string(entry.expect("a report").path()).expect("a report");
        if text.starts_with("python") {
            reports.push(text);
        }
    }
    assert!(
        reports.len() <= 1,
        "one Python process, one report: {reports:?}"
    );
    let text = reports.pop()?;
    let n: Vec<u64> = text
        .lines()
        .nth(1)
        .expect("the count line")
        .split_whitespace()
        .map(|w| w.parse().expect("a number"))
        .collect();
    Some(n.try_into().expect("four counts"))
}

#[test]
fn a_preloaded_process_reports_its_large_copies() {
    let lib = library();
    // Python's start-up copies too: count the difference that ten more 1 MiB copies make.
    let base = run(&lib, true, "b = bytes(1 << 20)").expect("a report");
    let more = run(
        &lib,
        true,
        "b = bytes(1 << 20)\nfor _ in range(10): bytearray(b)",
    )
    .expect("a report");
    let calls = more[0] + more[2] - base[0] - base[2];
    let bytes = more[1] + more[3] - base[1] - base[3];
    assert!(
        (10..20).contains(&calls),
        "{calls} large copies: {base:?} {more:?}"
    );
    assert!(
        (10 << 20..11 << 20).contains(&bytes),
        "{bytes} bytes copied: {base:?} {more:?}"
    );
    // Small copies are not counted: a thousand 1 KiB copies change nothing large.
    let small = run(
        &lib,
        true,
        "b = bytes(1 << 20)\nfor _ in range(1000): bytearray(b[:1024])",
    )
    .expect("a report");
    assert_eq!(small[1] + small[3], base[1] + base[3], "{base:?} {small:?}");
    // Without the directory, nothing is written.
    assert_eq!(run(&lib, false, "b = bytes(1 << 20)"), None);
}
