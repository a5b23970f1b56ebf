//! The `sandpipe` binary, driven the way an engine or a person would drive it.

use std::io::Write;
use std::process::{Command, Output, Stdio};

use sandpipe_tests::{Target, plugin};

fn sandpipe(args: &[&str], stdin: &[u8]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_sandpipe"))
        .args(args)
        .env_remove("SANDPIPE_LOG")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn sandpipe");
    let mut input = child.stdin.take().expect("stdin");
    let data = stdin.to_vec();
    let writer = std::thread::spawn(move || {
        let _ = input.write_all(&data);
    });
    let out = child.wait_with_output().expect("wait");
    let _ = writer.join();
    out
}

fn path(bin: &str, target: Target) -> String {
    plugin(bin, target).display().to_string()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn run_echoes_a_frame_wasm_and_native() {
    for target in [Target::Wasm, Target::Native] {
        let out = sandpipe(
            &[
                "run",
                "--no-cache",
                "--framing",
                "lines",
                &path("echo-lines", target),
            ],
            b"{\"id\":1}\n",
        );
        assert_eq!(out.stdout, b"{\"id\":1}\n", "{target:?}: {}", stderr(&out));
        assert_eq!(out.status.code(), Some(0), "{target:?}: {}", stderr(&out));
        let notice = stderr(&out).contains("NOT sandboxed");
        assert_eq!(
            notice,
            target == Target::Native,
            "{target:?}: {}",
            stderr(&out)
        );
    }
}

#[test]
fn run_raw_passes_bytes_through() {
    let out = sandpipe(
        &[
            "run",
            "--no-cache",
            &path("echo-content-length", Target::Wasm),
        ],
        b"Content-Length: 2\r\n\r\n{}",
    );
    assert_eq!(out.stdout, b"Content-Length: 2\r\n\r\n{}");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
}

/// Each limit ends the run with its documented status and a one-line `sandpipe:` reason.
#[test]
fn limits_give_documented_exit_codes() {
    let cases: [(&str, Vec<&str>, i32, &str); 6] = [
        (
            "spin",
            vec!["--fuel", "20000000"],
            121,
            "sandpipe: plugin ran out of fuel (limit 20000000)",
        ),
        (
            "alloc",
            vec!["--max-memory", "32MiB"],
            122,
            "sandpipe: plugin exceeded the memory limit of 32.0 MiB",
        ),
        (
            "sleep-stdin",
            vec!["--timeout", "1s"],
            124,
            "sandpipe: plugin exceeded its deadline of 1s",
        ),
        (
            "trap-mid-frame",
            vec![],
            134,
            "sandpipe: plugin trapped: wasm trap: wasm `unreachable` instruction executed (in abort)",
        ),
        (
            "junk",
            vec![],
            123,
            "sandpipe: bad frame from plugin: line is not valid JSON",
        ),
        (
            "oversized",
            vec!["--max-frame", "1MiB"],
            123,
            "sandpipe: bad frame from plugin: frame of",
        ),
    ];
    for (bin, flags, code, reason) in cases {
        let plugin = path(bin, Target::Wasm);
        let mut args = vec!["run", "--no-cache", "--framing", "lines"];
        args.extend(flags);
        args.push(&plugin);
        let out = sandpipe(&args, b"");
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(code), "{bin}: {err}");
        assert!(
            err.lines().any(|l| l.starts_with(reason)),
            "{bin}: no line starting {reason:?} in {err}"
        );
    }
}

#[test]
fn trap_keeps_complete_frames_and_reports_the_cut_one() {
    let out = sandpipe(
        &[
            "run",
            "--no-cache",
            "--framing",
            "lines",
            &path("trap-mid-frame", Target::Wasm),
        ],
        b"",
    );
    assert_eq!(out.stdout, b"{\"id\":1}\n{\"id\":2}\n");
    let err = stderr(&out);
    assert!(
        err.contains("about to trap"),
        "plugin stderr is forwarded: {err}"
    );
    assert!(
        err.contains("sandpipe: dropped an incomplete frame of 12 bytes"),
        "{err}"
    );
    assert_eq!(out.status.code(), Some(134));
}

#[test]
fn bad_frame_on_stdin_ends_the_run() {
    let out = sandpipe(
        &[
            "run",
            "--no-cache",
            "--framing",
            "lines",
            &path("echo-lines", Target::Wasm),
        ],
        b"{\"ok\":1}\nnot json\n",
    );
    assert_eq!(out.stdout, b"{\"ok\":1}\n");
    assert_eq!(out.status.code(), Some(123));
    assert!(
        stderr(&out).contains("sandpipe: bad frame on stdin: line is not valid JSON"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn plugin_exit_code_passes_through() {
    for target in [Target::Wasm, Target::Native] {
        let out = sandpipe(
            &[
                "run",
                "--no-cache",
                "--framing",
                "lines",
                &path("exit-early", target),
                "--",
                "9",
            ],
            b"{}\n",
        );
        assert_eq!(out.stdout, b"{}\n");
        assert_eq!(out.status.code(), Some(9), "{target:?}: {}", stderr(&out));
    }
}

#[test]
fn read_only_dir_and_escape_fail_inside_the_plugin() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("hello.txt"), "hi").expect("write");
    let spec = format!("{}::/ro:ro", dir.path().display());
    let out = sandpipe(
        &[
            "run",
            "--no-cache",
            "--framing",
            "lines",
            "--dir",
            &spec,
            &path("fs", Target::Wasm),
            "--",
            "read:/ro/hello.txt",
            "write:/ro/hello.txt",
            "read:/ro/../../etc/passwd",
        ],
        b"",
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let lines: Vec<serde_json::Value> = out
        .stdout
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_slice(l).expect("json"))
        .collect();
    let ok: Vec<bool> = lines
        .iter()
        .map(|l| l["ok"].as_bool().expect("ok"))
        .collect();
    assert_eq!(ok, vec![true, false, false], "{lines:#?}");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("hello.txt")).expect("read"),
        "hi"
    );
}

#[test]
fn second_run_uses_the_disk_cache() {
    let cache = tempfile::tempdir().expect("tempdir");
    let dir = cache.path().display().to_string();
    let echo = path("echo-lines", Target::Wasm);
    let first = sandpipe(
        &[
            "-v",
            "run",
            "--cache-dir",
            &dir,
            "--framing",
            "lines",
            &echo,
        ],
        b"{}\n",
    );
    let second = sandpipe(
        &[
            "-v",
            "run",
            "--cache-dir",
            &dir,
            "--framing",
            "lines",
            &echo,
        ],
        b"{}\n",
    );
    assert_eq!(first.stdout, b"{}\n");
    assert_eq!(second.stdout, b"{}\n");
    assert!(stderr(&first).contains("compiled"), "{}", stderr(&first));
    assert!(
        stderr(&second).contains("from the disk cache"),
        "{}",
        stderr(&second)
    );
}

#[test]
fn help_documents_exit_codes() {
    let out = sandpipe(&["run", "--help"], b"");
    let help = String::from_utf8_lossy(&out.stdout);
    for needle in [
        "--framing",
        "--fuel",
        "--max-memory",
        "--timeout",
        "--dir",
        "--env",
        "--max-frame",
    ] {
        assert!(help.contains(needle), "{needle} missing from:\n{help}");
    }
    // The open-file cap states its default and what it means for wasm.
    let flag = help
        .split("--max-open-files")
        .nth(1)
        .and_then(|rest| rest.split("\n      --").next())
        .unwrap_or_else(|| panic!("--max-open-files missing from:\n{help}"))
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    for needle in [
        "[default: 1024]",
        "Wasm:",
        "quota",
        "EMFILE",
        "RLIMIT_NOFILE",
    ] {
        assert!(flag.contains(needle), "{needle} missing from:\n{flag}");
    }
    let out = sandpipe(&["--help"], b"");
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(help.contains("124  deadline exceeded"), "{help}");
}

#[test]
fn plugin_args_follow_the_plugin_and_env_is_granted_explicitly() {
    // As with `wasmtime run`, everything after PLUGIN is the plugin's; `--` is optional.
    let out = Command::new(env!("CARGO_BIN_EXE_sandpipe"))
        .args([
            "run",
            "--no-cache",
            "--framing",
            "lines",
            "--env",
            "ONE=1",
            "--env",
            "HOME",
        ])
        .arg(path("fs", Target::Wasm))
        .args(["env:ONE", "env:HOME", "env:PATH"])
        .env("HOME", "/home/sandpipe-test")
        .stdin(Stdio::null())
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[0].contains(r#""value":"1""#), "{text}");
    assert!(
        lines[1].contains(r#""value":"/home/sandpipe-test""#),
        "{text}"
    );
    assert!(lines[2].contains(r#""ok":false"#), "{text}");
}

/// `sandpipe call` against every example gives the same output as wasm and natively.
#[test]
fn call_answers_the_same_as_wasm_and_native() {
    struct Case {
        protocol: &'static str,
        bin: &'static str,
        method: &'static str,
        params: &'static str,
        stdout: &'static str,
        status: i32,
        stderr: &'static str,
        state_dir: bool,
    }
    let cases = [
        Case {
            protocol: "oracle",
            bin: "example-oracle",
            method: "sqrt",
            params: r#"["0x10"]"#,
            stdout: "[\"0x4\"]\n",
            status: 0,
            stderr: "",
            state_dir: false,
        },
        Case {
            protocol: "oracle",
            bin: "example-oracle",
            method: "sqrt",
            params: r#"["0x1","0x2"]"#,
            stdout: "",
            status: 1,
            stderr: "sandpipe: oracle error -32603: sqrt: expected exactly one argument",
            state_dir: false,
        },
        Case {
            protocol: "denobridge",
            bin: "example-denobridge",
            method: "create",
            params: r#"{"props":{"name":"a"}}"#,
            stdout: "{\"id\":\"r1\",\"state\":{\"version\":1}}\n",
            status: 0,
            stderr: "",
            state_dir: true,
        },
        Case {
            protocol: "orchard",
            bin: "example-orchard",
            method: "execute",
            params: r#"{"action":"sum","attrs":{"values":[1,2,3]}}"#,
            stdout: "{\"outputs\":{\"sum\":6}}\n",
            status: 0,
            stderr: "",
            state_dir: false,
        },
        Case {
            protocol: "orchard",
            bin: "example-orchard",
            method: "execute",
            params: r#"{"action":"sum","attrs":{"values":[1,"two"]}}"#,
            stdout: "",
            status: 1,
            stderr: "sandpipe: orchard error validation_failed: values[1] is not a number",
            state_dir: false,
        },
        Case {
            protocol: "orchard",
            bin: "example-orchard",
            method: "schema",
            params: "{}",
            stdout: "",
            status: 0,
            stderr: "",
            state_dir: false,
        },
        Case {
            protocol: "atp",
            bin: "example-atp",
            method: "greet",
            params: r#"{"name":"sandpipe"}"#,
            stdout: "{\"output_id\":\"success\",\"output_data\":{\"message\":\"Hello, sandpipe!\"}}\n",
            status: 0,
            stderr: "",
            state_dir: false,
        },
        Case {
            protocol: "atp",
            bin: "example-atp",
            method: "greet",
            params: r#"{"name":""}"#,
            stdout: "{\"output_id\":\"error\",\"output_data\":{\"reason\":\"name must not be empty\"}}\n",
            status: 0,
            stderr: "",
            state_dir: false,
        },
        Case {
            protocol: "finecode",
            bin: "example-finecode",
            method: "actions/run",
            params: r#"{"actionName":"broken","params":{}}"#,
            stdout: "",
            status: 1,
            stderr: "sandpipe: finecode error: command failed: broken: this action always fails",
            state_dir: false,
        },
        Case {
            protocol: "finecode",
            bin: "example-finecode",
            method: "finecodeRunner/resolveActionMeta",
            params: "{}",
            stdout: "",
            status: 0,
            stderr: "",
            state_dir: false,
        },
        Case {
            protocol: "jsonrpc",
            bin: "example-denobridge",
            method: "health",
            params: "{}",
            stdout: "",
            status: 0,
            stderr: "",
            state_dir: true,
        },
    ];
    for case in cases {
        let mut outputs = Vec::new();
        for target in [Target::Wasm, Target::Native] {
            let state = tempfile::tempdir().expect("tempdir");
            let state_path = state.path().display().to_string();
            let dir_spec = format!("{state_path}::/state");
            let plugin_path = path(case.bin, target);
            let mut args = vec!["call", "--no-cache", "--protocol", case.protocol];
            if case.state_dir {
                match target {
                    Target::Wasm => args.extend(["--dir", &dir_spec, "--arg", "/state"]),
                    // Natively the directory is granted at its host path (Landlock).
                    _ => args.extend(["--dir", &state_path, "--arg", &state_path]),
                }
            }
            args.extend([plugin_path.as_str(), case.method, case.params]);
            let out = sandpipe(&args, b"");
            let err = stderr(&out);
            assert_eq!(
                out.status.code(),
                Some(case.status),
                "{} {} {target:?}: {err}",
                case.protocol,
                case.method
            );
            if !case.stdout.is_empty() {
                assert_eq!(
                    String::from_utf8_lossy(&out.stdout),
                    case.stdout,
                    "{} {target:?}",
                    case.protocol
                );
            }
            assert!(
                err.contains(case.stderr),
                "{} {target:?}: {err}",
                case.protocol
            );
            outputs.push(out.stdout);
        }
        assert_eq!(
            outputs[0], outputs[1],
            "{} {}: wasm and native differ",
            case.protocol, case.method
        );
    }
}

#[test]
fn call_reports_a_stopped_plugin_with_its_exit_status() {
    let plugin = path("oracle-hog", Target::Wasm);
    let out = sandpipe(
        &[
            "call",
            "--no-cache",
            "--protocol",
            "oracle",
            "--fuel",
            "100000000",
            &plugin,
            "spin",
        ],
        b"",
    );
    assert_eq!(out.status.code(), Some(121), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("sandpipe: oracle error -32603: oracle failed: plugin ran out of fuel"),
        "{err}"
    );
    assert!(err.contains(r#""stderr":["hog: spin starting"]"#), "{err}");
}

#[test]
fn inspect_describes_kind_imports_and_protocol() {
    let out = sandpipe(
        &[
            "inspect",
            "--no-cache",
            "--json",
            "--protocol",
            "oracle",
            &path("example-oracle", Target::Wasm),
        ],
        b"",
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v["kind"], "component");
    assert_eq!(v["sandboxed"], true);
    assert_eq!(v["sha256"].as_str().map(str::len), Some(64));
    assert!(v["imports"].as_array().expect("imports").iter().any(|i| {
        i.as_str()
            .is_some_and(|s| s.starts_with("wasi:cli/stdin@0.2"))
    }));
    assert!(v["exports"].as_array().expect("exports").iter().any(|i| {
        i.as_str()
            .is_some_and(|s| s.starts_with("wasi:cli/run@0.2"))
    }));
    assert_eq!(v["self_description"], serde_json::json!({"ready": true}));

    let out = sandpipe(
        &["inspect", "--json", &path("example-oracle", Target::Native)],
        b"",
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v["kind"], "native (unsandboxed)");
    assert_eq!(v["sandboxed"], false);
}

/// Drive `sandpipe run --protocol oracle` the way an engine does: one line at a time, each
/// after the answer to the previous one. Returns the lines the engine read, status and stderr.
fn oracle_engine(
    args: &[&str],
    plugin: &str,
    invokes: &[&str],
) -> (Vec<String>, Option<i32>, String) {
    use std::io::{BufRead, BufReader};
    let mut child = Command::new(env!("CARGO_BIN_EXE_sandpipe"))
        .args(["run", "--protocol", "oracle"])
        .args(args)
        .arg(plugin)
        .env_remove("SANDPIPE_LOG")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn sandpipe");
    let mut input = child.stdin.take().expect("stdin");
    let mut output = BufReader::new(child.stdout.take().expect("stdout"));
    let mut seen = Vec::new();
    let mut line = String::new();
    output.read_line(&mut line).expect("ready");
    seen.push(line.trim_end().to_owned());
    writeln!(input, r#"{{"jsonrpc":"2.0","id":0,"result":{{}}}}"#).expect("engine side");
    for (i, selector) in invokes.iter().enumerate() {
        let id = i + 1;
        let sent = writeln!(
            input,
            r#"{{"jsonrpc":"2.0","id":{id},"method":"invoke","params":{{"selector":"{selector}","calldata":["0x1"]}}}}"#
        );
        line.clear();
        if sent.is_err() || output.read_line(&mut line).unwrap_or(0) == 0 {
            break;
        }
        seen.push(line.trim_end().to_owned());
    }
    drop(input);
    let out = child.wait_with_output().expect("wait");
    (seen, out.status.code(), stderr(&out))
}

#[test]
fn run_protocol_fails_only_the_runaway_request_and_restarts() {
    // wasm: fuel per request.
    let wasm = path("oracle-hog", Target::Wasm);
    let budget = ["--fuel-per-request", "100000000", "--restart"];
    let (seen, code, err) = oracle_engine(&budget, &wasm, &["spin", "echo"]);
    assert!(seen[1].contains(r#""id":1,"error""#), "{seen:?}\n{err}");
    assert!(seen[1].contains("ran out of fuel"), "{seen:?}");
    assert_eq!(
        seen[2], r#"{"jsonrpc":"2.0","id":2,"result":["0x1"]}"#,
        "{err}"
    );
    assert!(
        err.contains("sandpipe: request 1 (invoke) failed: request ran out of fuel (limit 100000000 per request); the next request gets a fresh instance"),
        "{err}"
    );
    assert_eq!(code, Some(0), "{err}");
    // Without --restart the session ends with the limit's status.
    let (seen, code, err) = oracle_engine(&budget[..2], &wasm, &["spin", "echo"]);
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert_eq!(code, Some(121), "{err}");
    // native: the request timeout, and 124 without --restart.
    let native = path("oracle-hog", Target::Native);
    let timeout = ["--request-timeout", "300ms", "--restart"];
    let (seen, code, err) = oracle_engine(&timeout, &native, &["sleep", "echo"]);
    assert!(seen[1].contains("timed out after 300ms"), "{seen:?}\n{err}");
    assert_eq!(
        seen[2], r#"{"jsonrpc":"2.0","id":2,"result":["0x1"]}"#,
        "{err}"
    );
    assert_eq!(code, Some(0), "{err}");
    let (_, code, err) = oracle_engine(&timeout[..2], &native, &["sleep", "echo"]);
    assert_eq!(code, Some(124), "{err}");
}

#[test]
fn per_request_options_need_a_protocol() {
    let out = sandpipe(
        &["run", "--restart", &path("echo-lines", Target::Wasm)],
        b"",
    );
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("--protocol"), "{}", stderr(&out));
}

#[test]
fn native_start_and_inspect_state_the_landlock_confinement() {
    // What this kernel gives, as the library sees it; the CLI must say the same in both places.
    let support = sandpipe::LandlockSupport::detect();
    let spin = path("spin", Target::Native);
    let out = sandpipe(&["inspect", "--json", "--max-cpu-time", "1s", &spin], b"");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v["native"]["landlock"]["status"], support.name(), "{v:#}");
    assert_eq!(
        v["native"]["landlock"]["warning"],
        serde_json::json!(support.warning())
    );
    assert_eq!(v["native"]["rlimits"]["cpu_seconds"], 1);
    assert_eq!(v["native"]["rlimits"]["open_files"], 1024);
    let text = sandpipe(&["inspect", &spin], b"");
    let text = String::from_utf8_lossy(&text.stdout).into_owned();
    assert!(
        text.contains(&format!("landlock:  {} (", support.name())),
        "{text}"
    );

    // A run prints the warning once when Landlock is missing or partial, never when it is full,
    // and the CPU limit gives 121 with its one line.
    let out = sandpipe(
        &["run", "--framing", "lines", "--max-cpu-time", "1s", &spin],
        b"",
    );
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(121), "{err}");
    assert!(
        err.contains("sandpipe: plugin used up its CPU time of 1s"),
        "{err}"
    );
    let warnings = err.matches("sandpipe: warning: ").count();
    match support.warning() {
        Some(warning) => {
            assert_eq!(warnings, 1, "{err}");
            assert!(err.contains(&warning), "{err}");
        }
        None => assert_eq!(warnings, 0, "{err}"),
    }
}
