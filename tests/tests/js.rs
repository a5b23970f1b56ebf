//! JavaScript plugins, as componentize-js (StarlingMonkey) components and natively under
//! `node`: the guest SDK in `guest-sdk/js` and the examples in `examples/js` replay the same
//! golden transcripts as the Rust examples of their protocols (denobridge and Orchard).
//!
//! Each plugin is built once (see `sandpipe_tests::guests::js`) and compiled once per test
//! process: one `Host` for every test here, with the on-disk artifact cache in a directory of
//! the plugin target dir.

mod guest_replay;

use guest_replay::{host, replay_ports};
use sandpipe::{Exit, Host, HostOptions, Policy, SessionOptions, StderrMode};
use sandpipe_proto::transcript::Transcript;
use sandpipe_tests::{Target, guests, peers, workspace_root};

/// JS plugin for a transcript's `# plugin:` header.
fn js_example(bin: &str) -> Option<&'static str> {
    match bin {
        "example-denobridge" => Some("examples/js/denobridge/plugin.js"),
        "example-orchard" => Some("examples/js/orchard/plugin.js"),
        _ => None,
    }
}

/// Replay every transcript of `protocol` against the JS port of its plugin, as a component
/// and natively; returns the failures and how many replays ran.
async fn replay_protocol(protocol: &str) -> (Vec<String>, usize) {
    replay_ports(protocol, "JS", js_example, guests::js).await
}

#[tokio::test(flavor = "multi_thread")]
async fn js_denobridge_example_replays_the_denobridge_transcripts_as_wasm_and_native() {
    let (failures, replayed) = replay_protocol("denobridge").await;
    assert!(replayed >= 12, "only {replayed} replays");
    assert!(
        failures.is_empty(),
        "{} replay(s) failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn js_orchard_example_replays_the_orchard_transcripts_as_wasm_and_native() {
    let (failures, replayed) = replay_protocol("orchard").await;
    assert!(replayed >= 6, "only {replayed} replays");
    assert!(
        failures.is_empty(),
        "{} replay(s) failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// Plan mode: `plugin schema` prints the schema as one line and exits 0, both ways, the same
/// bytes as the Rust example's (the `describe` answer of the golden transcripts).
#[tokio::test(flavor = "multi_thread")]
async fn js_orchard_example_prints_its_schema_in_plan_mode() {
    let golden =
        std::fs::read_to_string(workspace_root().join("tests/transcripts/orchard/run.transcript"))
            .expect("transcript");
    let t = Transcript::parse(&golden).expect("transcript parses");
    let describe: serde_json::Value =
        serde_json::from_slice(&t.entries[1].frame).expect("describe answer");
    let want = format!("{}\n", describe["result"]["schema"]);
    for target in [Target::Wasm, Target::Native] {
        let plugin = guests::js("examples/js/orchard/plugin.js", target);
        let p = host().load(&plugin).expect("load");
        let opts = SessionOptions::default().stderr(StderrMode::Discard);
        let mut s = host()
            .start(&p, &Policy::default().arg("schema"), &opts)
            .await
            .expect("start");
        s.close_stdin().await;
        let mut out = Vec::new();
        while let Some(bytes) = s.recv().await.expect("recv") {
            out.extend_from_slice(&bytes);
        }
        assert_eq!(
            s.wait().await,
            Exit::Exited(0),
            "{target:?}: {:?}",
            s.stderr_tail()
        );
        assert_eq!(String::from_utf8_lossy(&out), want, "{target:?}");
    }
}

#[test]
fn the_js_sdk_unit_tests_pass_under_node() {
    let sdk = workspace_root().join("guest-sdk/js");
    let out = std::process::Command::new(peers::node())
        .current_dir(&sdk)
        .args(["--test", "test/"])
        .output()
        .expect("running node --test");
    assert!(
        out.status.success(),
        "node --test failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `Pooling::fitting` sizes a pool from the component itself: a pool one core instance short
/// of what `PoolNeeds::of` counts refuses the componentize-js component, the fitted one runs
/// it to a clean exit.
#[tokio::test(flavor = "multi_thread")]
async fn a_pool_sized_by_inspecting_the_component_runs_it_and_one_short_refuses_it() {
    use sandpipe::{PoolNeeds, Pooling};
    use sandpipe_proto::frame::Framing;
    let wasm = guests::js("examples/js/orchard/plugin.js", Target::Wasm);
    let bytes = std::fs::read(&wasm).expect("read the component");
    let needs = PoolNeeds::of(&bytes).expect("a component");
    assert!(needs.core_instances > 1 && needs.memories >= 1, "{needs:?}");
    let fitted = Pooling::fitting(2, &bytes).expect("fitting");
    assert_eq!(fitted.check(&needs), Ok(()));
    let short = fitted.core_instances_per_session(needs.core_instances - 1);
    assert_eq!(
        short.check(&needs),
        Err((
            "core instances",
            u64::from(needs.core_instances),
            u64::from(needs.core_instances - 1)
        ))
    );
    for (pool, fits) in [(short, false), (fitted, true)] {
        // No disk cache: a pooled engine validates the component against its limits on load.
        let host = Host::with_options(&HostOptions::default().cache_dir(None).pooling(pool))
            .expect("host");
        let opts = SessionOptions::framed(Framing::JsonLines).stderr(StderrMode::Discard);
        let started = match host.load(&wasm) {
            Ok(p) => host
                .start(&p, &Policy::default(), &opts)
                .await
                .map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        };
        match (started, fits) {
            (Ok(mut s), true) => {
                s.close_stdin().await;
                let exit = s.wait().await;
                assert_eq!(exit, Exit::Exited(0), "{:?}", s.stderr_tail());
            }
            (Err(e), false) => assert!(!e.is_empty()),
            (Ok(_), false) => panic!("a pool one core instance short ran the component: {needs:?}"),
            (Err(e), true) => panic!("the fitted pool refused the component: {e} ({needs:?})"),
        }
    }
}
