//! Golden transcripts replayed against the real example plugins, as wasm and natively.
//!
//! The third way, the protocol state machines in memory, runs in each example crate's
//! `tests/golden.rs` (which also re-blesses the files with `BLESS=1`). Here every
//! `tests/transcripts/<protocol>/<case>.transcript` is replayed strictly in order: each `>`
//! frame is sent, each `<` frame must be the plugin's next frame, byte for byte; then stdin
//! closes and the plugin must have nothing more to say and exit 0.

use std::path::{Path, PathBuf};
use std::time::Duration;

use sandpipe::{Exit, Host, HostOptions, SessionOptions, StderrMode, replay};
use sandpipe_proto::transcript::Transcript;
use sandpipe_tests::{Target, plugin, workspace_root};

fn transcripts() -> Vec<PathBuf> {
    let root = workspace_root().join("tests").join("transcripts");
    let mut files = Vec::new();
    for dir in std::fs::read_dir(&root).expect("tests/transcripts") {
        let dir = dir.expect("entry").path();
        for f in std::fs::read_dir(&dir).expect("protocol dir") {
            let f = f.expect("entry").path();
            if f.extension().is_some_and(|e| e == "transcript") {
                files.push(f);
            }
        }
    }
    files.sort();
    files
}

/// The same replay as `sandpipe replay FILE --plugin`: the recorded policy (fresh directories
/// for `# preopen:`), every `>` frame sent, every `<` frame compared, then nothing more and a
/// clean exit.
async fn replay(host: &Host, file: &Path, target: Target) -> Result<(), String> {
    let text = std::fs::read_to_string(file).map_err(|e| e.to_string())?;
    let t = Transcript::parse(&text).map_err(|e| e.to_string())?;
    let bin = t.header("plugin").ok_or("no `# plugin:` header")?;
    let framing = replay::framing_of(&t)?;
    let scratch = replay::ScratchDirs::new().map_err(|e| e.to_string())?;
    let policy = replay::recorded_policy(&t, target == Target::Native, &|guest| {
        scratch.dir_for(guest)
    })?;
    let p = host.load(plugin(bin, target)).map_err(|e| e.to_string())?;
    let opts = SessionOptions::framed(framing).stderr(StderrMode::Discard);
    let mut s = host
        .start(&p, &policy, &opts)
        .await
        .map_err(|e| e.to_string())?;
    match replay::check(&mut s, &t, Duration::from_secs(30)).await {
        Ok(Exit::Exited(0)) => Ok(()),
        Ok(other) => Err(format!(
            "plugin ended with {other} (stderr: {:?})",
            s.stderr_tail()
        )),
        Err(divergence) => Err(divergence.to_string()),
    }
}

#[tokio::test]
async fn every_transcript_replays_identically_as_wasm_and_native() {
    let host = Host::with_options(
        &HostOptions::default()
            .cache_dir(None)
            .allow_native_unsandboxed(true),
    )
    .expect("host");
    let files = transcripts();
    assert!(files.len() >= 3, "no transcripts found: {files:?}");
    let mut failures = Vec::new();
    for file in &files {
        for target in [Target::Wasm, Target::Native] {
            if let Err(e) = replay(&host, file, target).await {
                failures.push(format!("{} ({target:?}): {e}", file.display()));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} replay(s) failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
