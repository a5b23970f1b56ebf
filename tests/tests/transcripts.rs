//! Golden transcripts replayed against the real example plugins, as wasm and natively.
//!
//! The third way, the protocol state machines in memory, runs in each example crate's
//! `tests/golden.rs` (which also re-blesses the files with `BLESS=1`). Here every
//! `tests/transcripts/<protocol>/<case>.transcript` is replayed strictly in order: each `>`
//! frame is sent, each `<` frame must be the plugin's next frame, byte for byte; then stdin
//! closes and the plugin must have nothing more to say and exit 0.

use std::path::{Path, PathBuf};

use sandpipe::{Access, Exit, Host, Policy, SessionOptions, StderrMode};
use sandpipe_proto::frame::Framing;
use sandpipe_proto::transcript::{Direction, Transcript};
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

async fn replay(host: &Host, file: &Path, target: Target) -> Result<(), String> {
    let text = std::fs::read_to_string(file).map_err(|e| e.to_string())?;
    let t = Transcript::parse(&text).map_err(|e| e.to_string())?;
    let bin = t.header("plugin").ok_or("no `# plugin:` header")?;
    let framing: Framing = t.header("framing").unwrap_or("lines").parse()?;
    let state = tempfile::tempdir().map_err(|e| e.to_string())?;
    let mut policy = Policy::default();
    let guest_dir = t.header("preopen");
    if let Some(guest) = guest_dir {
        policy = policy.preopen(state.path(), guest, Access::ReadWrite);
    }
    for arg in t.header("args").unwrap_or("").split_whitespace() {
        // Natively there is no preopen: the plugin gets the real directory instead.
        let arg = match (target, guest_dir) {
            (Target::Native, Some(g)) if arg == g => state.path().display().to_string(),
            _ => arg.to_owned(),
        };
        policy = policy.arg(arg);
    }
    let p = host.load(plugin(bin, target)).map_err(|e| e.to_string())?;
    let opts = SessionOptions::framed(framing).stderr(StderrMode::Discard);
    let mut s = host
        .start(&p, &policy, &opts)
        .await
        .map_err(|e| e.to_string())?;
    for (i, entry) in t.entries.iter().enumerate() {
        match entry.dir {
            Direction::ToPlugin => s
                .send(&entry.frame)
                .await
                .map_err(|e| format!("frame {i}: send: {e}"))?,
            Direction::FromPlugin => {
                let got = s.recv().await.map_err(|e| format!("frame {i}: {e}"))?;
                let got = got.ok_or_else(|| {
                    format!("frame {i}: plugin ended; expected {}", show(&entry.frame))
                })?;
                if got[..] != entry.frame[..] {
                    return Err(format!(
                        "frame {i} differs\n  expected: {}\n  got:      {}",
                        show(&entry.frame),
                        show(&got)
                    ));
                }
            }
        }
    }
    s.close_stdin().await;
    if let Some(extra) = s
        .recv()
        .await
        .map_err(|e| format!("after the last frame: {e}"))?
    {
        return Err(format!("unexpected extra frame: {}", show(&extra)));
    }
    match s.wait().await {
        Exit::Exited(0) => Ok(()),
        other => Err(format!(
            "plugin ended with {other} (stderr: {:?})",
            s.stderr_tail()
        )),
    }
}

fn show(frame: &[u8]) -> String {
    String::from_utf8_lossy(frame).into_owned()
}

#[tokio::test]
async fn every_transcript_replays_identically_as_wasm_and_native() {
    let host = Host::with_cache_dir(None).expect("host");
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
