//! Every field of the policy round-trips: a policy file that sets each one away from its
//! default, run with `--record`, gives a recording whose `# policy:` header is exactly that
//! policy, the library's `PolicyFile` reads the file to the same document, and `inspect --json`
//! shows it, with each value's source.
//!
//! `every_declared_key_round_trips_through_flag_file_env_and_recording` is complete by
//! construction: it walks every key the policy's sections declare
//! (`sandpipe::policy::sections::all_keys`), so a key added to a section fails it until the
//! test has a value for it, and a key of the recorded document that no section declares fails
//! it too.

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
max-frame = "1MiB"
max-record = "2MiB"

[grants]
dirs = ["data::/data:ro"]
env = ["LANG=C.UTF-8"]
allow-imports = {imports_toml}
startup-grants = false

[net]
allow = ["127.0.0.1:9"]
resolve = ["api.test=127.0.0.1"]
http-headers = ["api.test:X-Key=env:POLICY_TEST_TOKEN"]
tls-intercept = true
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
            "max-memory": 64u64 << 20,
            "timeout": "5m",
            "max-cpu-time": "10s",
            "max-open-files": 64,
            "max-processes": 100,
            "max-disk-write": 1u64 << 20,
            "max-frame": 1u64 << 20,
            "max-record": 2u64 << 20,
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
            "tls-intercept": true,
        },
        // Per-request budgets and tool filters need a protocol: their defaults, recorded too
        // (`every_declared_key_round_trips_through_flag_file_env_and_recording` sets them).
        "requests": {
            "fuel": null,
            "timeout": null,
            "start-timeout": "1m",
            "restart": false,
            "recycle-after": null,
            "recycle-memory": "auto",
            "recycle-grace": "2s",
        },
        "tools": {"allow": [], "deny": []},
        "audit": root.join("audit.jsonl"),
    });
    // The sections a framed run without a protocol cannot set.
    let needs_protocol = |key: &str| key.starts_with("requests.") || key.starts_with("tools.");

    // Every key of the document but those that need a protocol is set away from its default.
    let defaults = leaves(&serde_json::to_value(Policy::default().document()).expect("JSON"));
    let wanted = leaves(&want);
    assert_eq!(
        defaults.keys().collect::<Vec<_>>(),
        wanted.keys().collect::<Vec<_>>(),
        "the test's document has every key of the policy document, and no other"
    );
    for (key, default) in &defaults {
        if !needs_protocol(key) {
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
    // The frame limit is the session's option, which an engine takes from the file as `run`
    // does (`file.limits.max_frame()`), not a field of the `Policy`.
    let mut document = policy.document();
    document.limits.max_frame = Some(file.limits.max_frame());
    document.limits.max_record = Some(file.limits.max_record());
    assert_eq!(
        serde_json::to_value(document).expect("JSON"),
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
            "limits.max-open-files" => "env",
            k if needs_protocol(k) => "default",
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

/// One key's value: as a policy file's TOML, as its flag's (and variable's) text (`None`: a
/// switch, given alone), and as the document holds it.
struct Sample {
    toml: String,
    text: Option<String>,
    json: Value,
}

/// A value away from the default for each declared key. A key declared in a section and not
/// here fails the test: a new field gets a value to round-trip.
fn sample(key: &str, root: &std::path::Path) -> Sample {
    let s = |toml: &str, text: &str, json: Value| Sample {
        toml: toml.to_owned(),
        text: Some(text.to_owned()),
        json,
    };
    let list = |entry: &str, json: Value| s(&format!("[{entry:?}]"), entry, json);
    let switch = |toml: &str, json: Value| Sample {
        toml: toml.to_owned(),
        text: None,
        json,
    };
    let data = root.join("data");
    let dir = format!("{}::/data:ro", data.display());
    match key {
        "limits.fuel" => s("500000000", "500000000", json!(500000000)),
        "limits.max-memory" => s("\"64MiB\"", "64MiB", json!(64 << 20)),
        "limits.timeout" => s("\"5m\"", "5m", json!("5m")),
        "limits.max-cpu-time" => s("\"10s\"", "10s", json!("10s")),
        "limits.max-open-files" => s("64", "64", json!(64)),
        "limits.max-processes" => s("100", "100", json!(100)),
        "limits.max-disk-write" => s("\"1MiB\"", "1MiB", json!(1 << 20)),
        "limits.max-frame" => s("\"1MiB\"", "1MiB", json!(1 << 20)),
        "limits.max-record" => s("\"2MiB\"", "2MiB", json!(2 << 20)),
        "grants.dirs" => list(
            &dir,
            json!([{"host": data, "guest": "/data", "read-only": true}]),
        ),
        "grants.env" => list("LANG=C.UTF-8", json!(["LANG"])),
        "grants.allow-imports" => list("wasi:cli/stdin@0.2", json!(["wasi:cli/stdin@0.2"])),
        "grants.startup-grants" => switch("false", json!(false)),
        "net.allow" => list("127.0.0.1:9", json!(["127.0.0.1:9"])),
        "net.resolve" => list("api.test=127.0.0.1", json!(["api.test=127.0.0.1"])),
        "net.http-headers" => list(
            "api.test:X-Key=env:POLICY_TEST_TOKEN",
            json!(["api.test:X-Key=env:POLICY_TEST_TOKEN"]),
        ),
        "net.tls-intercept" => switch("true", json!(true)),
        "requests.fuel" => s("5000000", "5000000", json!(5000000)),
        "requests.timeout" => s("\"2s\"", "2s", json!("2s")),
        "requests.start-timeout" => s("\"5s\"", "5s", json!("5s")),
        "requests.restart" => switch("true", json!(true)),
        "requests.recycle-after" => s("1000", "1000", json!(1000)),
        "requests.recycle-memory" => s("\"128MiB\"", "128MiB", json!(128 << 20)),
        "requests.recycle-grace" => s("\"1s\"", "1s", json!("1s")),
        "tools.allow" => list("a", json!(["a"])),
        "tools.deny" => list("b", json!(["b"])),
        _ => panic!("{key}: a declared key this test has no value for"),
    }
}

/// How a run is told its policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Way {
    File,
    Flag,
    Env,
}

/// The command line (and environment) that gives `keys` their samples `way`'s way, with the
/// top-level keys (`seed`, `audit`, `args`) given too; `protocol` names the protocol, or
/// `None` for `--framing lines`.
fn command(
    sub: &str,
    way: Way,
    keys: &[&sandpipe::policy::sections::Key],
    protocol: Option<&str>,
    root: &std::path::Path,
    plugin: &std::path::Path,
    extra: &[&str],
) -> Command {
    let mut cmd = Command::new(peers::sandpipe());
    cmd.arg(sub).args(extra);
    cmd.env("POLICY_TEST_TOKEN", "s3cret");
    let audit = root.join("audit.jsonl");
    let plugin_arg = match way {
        Way::File => {
            let mut tables: BTreeMap<&str, Vec<String>> = BTreeMap::new();
            for key in keys {
                let (table, name) = key.key.split_once('.').expect("section.key");
                tables
                    .entry(table)
                    .or_default()
                    .push(format!("{name} = {}", sample(key.key, root).toml));
            }
            let head = match protocol {
                Some(p) => format!("protocol = {p:?}"),
                None => "framing = \"lines\"".to_owned(),
            };
            let mut text = format!(
                "{head}\nseed = 7\naudit = {:?}\n\n[plugin]\nsource = {:?}\nargs = [\"--quiet\"]\n",
                audit.display().to_string(),
                plugin.display().to_string()
            );
            for (table, lines) in tables {
                text.push_str(&format!("\n[{table}]\n{}\n", lines.join("\n")));
            }
            let file = root.join(format!("{sub}-{}.toml", keys.len()));
            std::fs::write(&file, text).expect("write the policy file");
            file
        }
        Way::Flag | Way::Env => {
            match protocol {
                Some(p) => cmd.args(["--protocol", p]),
                None if sub == "run" => cmd.args(["--framing", "lines"]),
                None => &mut cmd,
            };
            let top = [
                ("--seed", "SANDPIPE_SEED", "7".to_owned()),
                ("--audit", "SANDPIPE_AUDIT", audit.display().to_string()),
            ];
            for (flag, var, value) in top {
                if way == Way::Flag {
                    cmd.args([flag, &value]);
                } else {
                    cmd.env(var, value);
                }
            }
            for key in keys {
                let sample = sample(key.key, root);
                match way {
                    Way::Flag => {
                        cmd.arg(key.long()).args(sample.text);
                    }
                    _ => {
                        cmd.env(key.env_var(), sample.text.as_deref().unwrap_or("true"));
                    }
                }
            }
            plugin.to_owned()
        }
    };
    cmd.arg(plugin_arg);
    if way != Way::File {
        // `args` has no variable: arguments after PLUGIN, both ways.
        cmd.arg("--quiet");
    }
    cmd
}

/// The `# policy:` header of the recording `sandpipe run` makes from `cmd` (its stdin closed at
/// once: the header is written before the plugin starts).
fn recorded(mut cmd: Command, recording: &std::path::Path) -> Value {
    let _ = std::fs::remove_file(recording);
    let out = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .expect("run");
    let text = std::fs::read_to_string(recording).unwrap_or_else(|e| {
        panic!(
            "no recording ({e}): {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    assert!(
        !text.contains("s3cret") && !text.contains("C.UTF-8"),
        "{text}"
    );
    let header = text
        .lines()
        .find_map(|l| l.strip_prefix("# policy: "))
        .unwrap_or_else(|| panic!("no # policy: header in\n{text}"));
    serde_json::from_str(header).expect("the header is JSON")
}

/// Whether `help` lists the flag `long` (`--fuel` and not only `--fuel-per-request`).
fn lists_flag(help: &str, long: &str) -> bool {
    help.match_indices(long).any(|(at, _)| {
        help[at + long.len()..]
            .chars()
            .next()
            .is_none_or(|c| !(c.is_alphanumeric() || c == '-'))
    })
}

/// Every key the sections declare (`sandpipe::policy::sections::all_keys`), none skipped by
/// name: given by a policy file, by its flag and by its `SANDPIPE_*` variable, each way it is
/// the recording's header value and `inspect --json`'s, with `inspect`'s source saying which
/// way it came. `limits.fuel` and `requests.fuel` exclude each other, so `limits.fuel` gets a
/// run of its own; the rest run under `--protocol mcp`, which per-request budgets and tool
/// filters need. The document's keys are exactly the declared ones and the top-level three.
#[test]
fn every_declared_key_round_trips_through_flag_file_env_and_recording() {
    use sandpipe::policy::sections::all_keys;

    let echo = plugin("echo-lines", Target::Wasm);
    let dir = tempfile::tempdir().expect("temp dir");
    let root = dir.path().canonicalize().expect("canonical");
    std::fs::create_dir_all(root.join("data")).expect("mkdir");
    let recording = root.join("session.transcript");
    let record = ["--record", recording.to_str().expect("UTF-8")];
    let top = ["seed", "audit", "args"];
    let top_json = json!({"seed": 7, "audit": root.join("audit.jsonl"), "args": ["--quiet"]});

    let inspect_help = Command::new(peers::sandpipe())
        .args(["inspect", "--help"])
        .output()
        .expect("inspect --help");
    let inspect_help = String::from_utf8_lossy(&inspect_help.stdout).into_owned();

    let keys: Vec<_> = all_keys().collect();
    let runs: [(Vec<_>, Option<&str>); 2] = [
        (
            keys.iter()
                .copied()
                .filter(|k| k.key != "limits.fuel")
                .collect(),
            Some("mcp"),
        ),
        (
            keys.iter()
                .copied()
                .filter(|k| k.key == "limits.fuel")
                .collect(),
            None,
        ),
    ];
    let covered: Vec<&str> = runs
        .iter()
        .flat_map(|(ks, _)| ks.iter().map(|k| k.key))
        .collect();
    assert_eq!(
        covered.len(),
        keys.len(),
        "every declared key is in one run"
    );

    for (run_keys, protocol) in &runs {
        // Nothing given: every key at its default.
        let mut bare = Command::new(peers::sandpipe());
        bare.arg("run").args(record);
        match protocol {
            Some(p) => bare.args(["--protocol", p]),
            None => bare.args(["--framing", "lines"]),
        };
        bare.arg(&echo);
        let defaults = leaves(&recorded(bare, &recording));
        let mut declared: Vec<&str> = keys.iter().map(|k| k.key).chain(top).collect();
        declared.sort_unstable();
        assert_eq!(
            defaults.keys().map(String::as_str).collect::<Vec<_>>(),
            declared,
            "the recorded document has every declared key, and no other"
        );
        let mut want = defaults.clone();
        for key in run_keys {
            let value = sample(key.key, &root).json;
            assert_ne!(
                defaults[key.key], value,
                "{}: the sample must differ from the default",
                key.key
            );
            want.insert(key.key.to_owned(), value);
        }
        for key in top {
            want.insert(key.to_owned(), top_json[key].clone());
        }
        for way in [Way::File, Way::Flag, Way::Env] {
            let cmd = command("run", way, run_keys, *protocol, &root, &echo, &record);
            let got = leaves(&recorded(cmd, &recording));
            for (key, value) in &want {
                assert_eq!(&got[key], value, "{way:?}: the recording's {key}");
            }

            // inspect, given the keys it has flags for (all of them in a file).
            let given: Vec<_> = run_keys
                .iter()
                .copied()
                .filter(|k| way == Way::File || lists_flag(&inspect_help, &k.long()))
                .collect();
            // `inspect --protocol` would start the plugin; a file's protocol does not.
            let named = if way == Way::File { *protocol } else { None };
            let mut cmd = command("inspect", way, &given, named, &root, &echo, &["--json"]);
            let out = cmd.output().expect("inspect");
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(out.status.success(), "{way:?}: {err}");
            let report: Value = serde_json::from_slice(&out.stdout).expect("JSON");
            let policy = leaves(&report["policy"]);
            let sources = report["policy_sources"].as_object().expect("sources");
            for key in &declared {
                assert!(sources.contains_key(*key), "{way:?}: no source for {key}");
            }
            let want_source = match way {
                Way::File => "file",
                Way::Flag => "flag",
                Way::Env => "env",
            };
            for key in &given {
                assert_eq!(
                    policy[key.key], want[key.key],
                    "{way:?}: inspect's {}",
                    key.key
                );
                assert_eq!(
                    sources[key.key], want_source,
                    "{way:?}: inspect's source of {}",
                    key.key
                );
            }
        }
    }
}
