//! Every field of the policy round-trips: a policy file that sets each one away from its
//! default, run with `--record`, gives a recording whose `# policy:` header is exactly that
//! policy, the library's `PolicyFile` reads the file to the same document, and `inspect --json`
//! shows it, with each value's source.
//!
//! The test is complete by construction: it walks every key of the document sandpipe writes
//! for the default policy (`Policy::default().document()`), so a field added to `Policy` (which
//! cannot compile without a key in the document) fails here until the file below sets it.

use std::collections::BTreeMap;
use std::io::Write;
use std::process::{Command, Stdio};

use sandpipe::Policy;
use sandpipe_tests::{Target, peers, plugin};
use serde_json::{Value, json};

/// The document's leaves, by dotted key (`limits.max-memory`).
fn leaves(v: &Value) -> BTreeMap<String, Value> {
    let mut out = BTreeMap::new();
    for (k, v) in v.as_object().expect("an object") {
        match v {
            Value::Object(_) => {
                for (inner, leaf) in leaves(v) {
                    out.insert(format!("{k}.{inner}"), leaf);
                }
            }
            _ => {
                out.insert(k.clone(), v.clone());
            }
        }
    }
    out
}

#[test]
fn every_policy_field_round_trips_through_the_file_the_recording_and_inspect() {
    let echo = plugin("echo-lines", Target::Wasm);
    let dir = tempfile::tempdir().expect("temp dir");
    let root = dir.path().canonicalize().expect("canonical");
    std::fs::create_dir_all(root.join("data")).expect("mkdir");

    // A strict import list must admit what the plugin imports: take it from inspect.
    let out = Command::new(peers::sandpipe())
        .args(["inspect", "--json", echo.to_str().expect("UTF-8")])
        .output()
        .expect("inspect");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let imports: Vec<String> = report["imports"]
        .as_array()
        .expect("imports")
        .iter()
        .map(|i| i.as_str().expect("text").to_owned())
        .collect();

    let policy_file = root.join("policy.toml");
    let imports_toml = serde_json::to_string(&imports).expect("JSON is TOML here");
    std::fs::write(
        &policy_file,
        format!(
            r#"framing = "lines"
seed = 7
audit = "audit.jsonl"

[plugin]
source = "{echo}"
args = ["--quiet"]

[limits]
fuel = 500000000
max-memory = "64MiB"
timeout = "5m"
max-cpu-time = "10s"
max-open-files = 64
max-processes = 100
max-disk-write = "1MiB"

[grants]
dirs = ["data::/data:ro"]
env = ["LANG=C.UTF-8"]
allow-imports = {imports_toml}
startup-grants = false

[net]
allow = ["127.0.0.1:9"]
resolve = ["api.test=127.0.0.1"]
http-headers = ["api.test:X-Key=env:POLICY_TEST_TOKEN"]
"#,
            echo = echo.display()
        ),
    )
    .expect("write the policy file");

    // What the file says, as the document sandpipe writes it.
    let want = json!({
        "args": ["--quiet"],
        "seed": 7,
        "limits": {
            "fuel": 500000000u64,
            "fuel-per-request": null,
            "max-memory": 64u64 << 20,
            "timeout": "5m",
            "max-cpu-time": "10s",
            "max-open-files": 64,
            "max-processes": 100,
            "max-disk-write": 1u64 << 20,
        },
        "grants": {
            "dirs": [{"host": root.join("data"), "guest": "/data", "read-only": true}],
            "env": ["LANG"],
            "allow-imports": imports,
            "startup-grants": false,
        },
        "net": {
            "allow": ["127.0.0.1:9"],
            "resolve": ["api.test=127.0.0.1"],
            "http-headers": ["api.test:X-Key=env:POLICY_TEST_TOKEN"],
        },
        "audit": root.join("audit.jsonl"),
    });

    // Every key of the document is set away from its default, except per-request fuel: the
    // command line's per-request fuel is the supervisor's budget (`[requests] fuel`), not the
    // policy's, and it excludes `limits.fuel`.
    let defaults = leaves(&serde_json::to_value(Policy::default().document()).expect("JSON"));
    let wanted = leaves(&want);
    assert_eq!(
        defaults.keys().collect::<Vec<_>>(),
        wanted.keys().collect::<Vec<_>>(),
        "the test's document has every key of the policy document, and no other"
    );
    for (key, default) in &defaults {
        if key != "limits.fuel-per-request" {
            assert_ne!(
                &wanted[key], default,
                "{key} must be set away from its default"
            );
        }
    }

    // The recording's header.
    let recording = root.join("session.transcript");
    let mut child = Command::new(peers::sandpipe())
        .args([
            "run",
            "--record",
            recording.to_str().expect("UTF-8"),
            policy_file.to_str().expect("UTF-8"),
        ])
        .env("POLICY_TEST_TOKEN", "s3cret")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(b"{\"id\":1}\n")
        .expect("write a frame");
    let out = child.wait_with_output().expect("run ends");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert_eq!(out.stdout, b"{\"id\":1}\n", "{err}");
    let recorded = std::fs::read_to_string(&recording).expect("the recording");
    assert!(
        !recorded.contains("s3cret") && !recorded.contains("C.UTF-8"),
        "{recorded}"
    );
    let header = recorded
        .lines()
        .find_map(|l| l.strip_prefix("# policy: "))
        .unwrap_or_else(|| panic!("no # policy: header in\n{recorded}"));
    let header: Value = serde_json::from_str(header).expect("the header is JSON");
    assert_eq!(header, want, "the recording's header");

    // The library reads the same file to the same policy: an engine that embeds sandpipe and
    // one that runs `sandpipe run` agree on what a policy file means.
    let file = sandpipe::PolicyFile::load(&policy_file).expect("the library reads the file");
    assert_eq!(file.plugin.source, echo);
    let env = |name: &str| (name == "POLICY_TEST_TOKEN").then(|| "s3cret".to_owned());
    let policy = file.policy_with_env(&env).expect("a policy");
    assert_eq!(
        serde_json::to_value(policy.document()).expect("JSON"),
        want,
        "the library's policy"
    );

    // inspect --json, with one value from the environment.
    let out = Command::new(peers::sandpipe())
        .args(["inspect", "--json", policy_file.to_str().expect("UTF-8")])
        .env("POLICY_TEST_TOKEN", "s3cret")
        .env("SANDPIPE_MAX_OPEN_FILES", "32")
        .output()
        .expect("inspect");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains(
            "note: SANDPIPE_MAX_OPEN_FILES overrides the policy file's limits.max-open-files"
        ),
        "{err}"
    );
    let report: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let mut want_env = want.clone();
    want_env["limits"]["max-open-files"] = json!(32);
    assert_eq!(report["policy"], want_env, "inspect's policy");
    let sources = report["policy_sources"].as_object().expect("sources");
    for key in wanted.keys() {
        let want_source = match key.as_str() {
            "limits.fuel-per-request" => continue,
            "limits.max-open-files" => "env",
            _ => "file",
        };
        assert_eq!(sources[key], want_source, "{key}: {sources:?}");
    }

    // A replay reads the header back: the same policy, so the same echo.
    let out = Command::new(peers::sandpipe())
        .args([
            "replay",
            recording.to_str().expect("UTF-8"),
            "--plugin",
            echo.to_str().expect("UTF-8"),
            "--dir",
            &format!("{}::/data", root.join("data").display()),
        ])
        .env("POLICY_TEST_TOKEN", "s3cret")
        .output()
        .expect("replay");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
