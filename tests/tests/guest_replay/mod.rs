//! What `python.rs` and `js.rs` share: one cached `Host` per test process, and replaying the
//! golden transcripts against a language's port of each example plugin, as a component and
//! natively (the same replay `tests/tests/transcripts.rs` does for the Rust examples).

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use sandpipe::{Exit, Host, HostOptions, SessionOptions, StderrMode, replay};
use sandpipe_proto::transcript::Transcript;
use sandpipe_tests::{Target, plugin_target_dir, workspace_root};

/// One host for the whole test file, caching compiled components on disk between test
/// processes (a guest component takes seconds to compile).
pub fn host() -> &'static Host {
    static HOST: OnceLock<Host> = OnceLock::new();
    HOST.get_or_init(|| {
        let cache = plugin_target_dir().join("guests-cache");
        Host::with_options(
            &HostOptions::default()
                .cache_dir(Some(cache))
                .allow_native_unsandboxed(true),
        )
        .expect("host")
    })
}

/// The golden transcripts of `protocol`, sorted.
pub fn transcripts(protocol: &str) -> Vec<PathBuf> {
    let dir = workspace_root().join("tests/transcripts").join(protocol);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("transcripts")
        .map(|e| e.expect("entry").path())
        .filter(|f| f.extension().is_some_and(|e| e == "transcript"))
        .collect();
    files.sort();
    files
}

/// `sandpipe replay FILE --plugin PLUGIN`, as `tests/tests/transcripts.rs` does it.
pub async fn replay(file: &Path, plugin: &Path, target: Target) -> Result<(), String> {
    let text = std::fs::read_to_string(file).map_err(|e| e.to_string())?;
    let t = Transcript::parse(&text).map_err(|e| e.to_string())?;
    let framing = replay::framing_of(&t)?;
    let scratch = replay::ScratchDirs::new().map_err(|e| e.to_string())?;
    let policy = replay::recorded_policy(&t, target == Target::Native, &|guest| {
        scratch.dir_for(guest)
    })?;
    let p = host().load(plugin).map_err(|e| e.to_string())?;
    let opts = SessionOptions::framed(framing).stderr(StderrMode::Discard);
    let mut s = host()
        .start(&p, &policy, &opts)
        .await
        .map_err(|e| e.to_string())?;
    match replay::check(&mut s, &t, Duration::from_secs(60)).await {
        Ok(Exit::Exited(0)) => Ok(()),
        Ok(other) => Err(format!(
            "plugin ended with {other} (stderr: {:?})",
            s.stderr_tail()
        )),
        Err(divergence) => Err(divergence.to_string()),
    }
}

/// Replay every transcript of `protocol` against `port(bin)` (the `# plugin:` header's example
/// in the language `lang`) built by `build`, as a component and natively; returns the
/// failures and how many replays ran.
pub async fn replay_ports(
    protocol: &str,
    lang: &str,
    port: fn(&str) -> Option<&'static str>,
    build: fn(&str, Target) -> PathBuf,
) -> (Vec<String>, usize) {
    let mut failures = Vec::new();
    let mut replayed = 0;
    for file in transcripts(protocol) {
        let text = std::fs::read_to_string(&file).expect("transcript");
        let t = Transcript::parse(&text).expect("transcript parses");
        let bin = t.header("plugin").expect("a # plugin: header");
        let source =
            port(bin).unwrap_or_else(|| panic!("{}: no {lang} port of {bin}", file.display()));
        for target in [Target::Wasm, Target::Native] {
            let plugin = build(source, target);
            replayed += 1;
            if let Err(e) = replay(&file, &plugin, target).await {
                failures.push(format!("{} ({target:?}): {e}", file.display()));
            }
        }
    }
    (failures, replayed)
}
