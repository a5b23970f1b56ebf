//! sandpipe's own MCP client (`call`, `inspect`) against real servers of both revisions, and
//! `run --protocol mcp`'s end as an MCP client orders it: the Python SDK 2.3.0 server of the
//! tests (`tests/peers/mcp/server_2026.py`, 2026-07-28 and the handshake revisions) and npm
//! `server-everything` (the handshake revisions only), both installed by `.ci/setup`.
//! - `call` and `inspect` probe `server/discover` and fall back to `initialize`, as the SDK's
//!   own client does;
//! - `--deny-tool`, `--allow-tool` and a policy file's `[tools]` make `inspect` show what a
//!   client behind `run` sees, and `call` refuse a hidden tool as the supervisor does;
//! - once its input has ended, one SIGTERM to `run --protocol mcp` reaches a server that is
//!   still busy, as it does without sandpipe.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use sandpipe_tests::peers;
use serde_json::Value;

/// The Python SDK 2.3.0 server of the tests, as a command line.
fn server_2026() -> Vec<PathBuf> {
    vec![peers::mcp_python(), peers::source("mcp/server_2026.py")]
}

fn sandpipe(args: &[&str], server: &[PathBuf]) -> Output {
    Command::new(peers::sandpipe())
        .args(args)
        .args(server)
        .stdin(Stdio::null())
        .output()
        .expect("running sandpipe")
}

fn stdout_json(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "no JSON on stdout ({e}): {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

fn tool_names(report: &Value) -> Vec<String> {
    report["self_description"]["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("no tools: {report}"))
        .iter()
        .map(|t| t["name"].as_str().expect("a name").to_owned())
        .collect()
}

#[test]
fn inspect_speaks_each_servers_revision_and_shows_the_tools_a_filtered_client_sees() {
    let modern = sandpipe(
        &[
            "inspect",
            "--json",
            "--protocol",
            "mcp",
            "--deny-tool",
            "add",
        ],
        &server_2026(),
    );
    let report = stdout_json(&modern);
    let described = &report["self_description"];
    assert_eq!(described["revision"], "2026-07-28", "{report}");
    assert!(
        described["discover"]["supportedVersions"]
            .as_array()
            .is_some_and(|v| v.iter().any(|v| v == "2026-07-28")),
        "{report}"
    );
    let names = tool_names(&report);
    assert!(names.contains(&"greet".to_owned()), "{names:?}");
    assert!(!names.contains(&"add".to_owned()), "{names:?}");

    // A server of the handshake revisions: the probe falls back to initialize.
    let everything = vec![peers::mcp_npm_server("mcp-server-everything")];
    let legacy = sandpipe(
        &[
            "inspect",
            "--json",
            "--protocol",
            "mcp",
            "--allow-tool",
            "echo",
        ],
        &everything,
    );
    let report = stdout_json(&legacy);
    let described = &report["self_description"];
    assert_eq!(described["revision"], "2025-11-25", "{report}");
    assert_eq!(described["initialize"]["protocolVersion"], "2025-11-25");
    assert_eq!(tool_names(&report), ["echo"]);
}

#[test]
fn call_speaks_2026_and_refuses_a_tool_the_filter_or_the_policy_hides() {
    let call = |extra: &[&str], params: &str| {
        let mut args = vec!["call", "--protocol", "mcp"];
        args.extend(extra);
        args.extend(["--method", "tools/call", "--params", params]);
        sandpipe(&args, &server_2026())
    };
    let add = r#"{"name":"add","arguments":{"a":1,"b":2}}"#;
    let out = call(&[], add);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let result = stdout_json(&out);
    assert_eq!(result["structuredContent"]["result"], 3, "{result}");
    // A 2026-07-28 result: the session was not the handshake's.
    assert_eq!(result["resultType"], "complete", "{result}");

    let denied = call(&["--deny-tool", "add"], add);
    assert_eq!(denied.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&denied.stderr);
    let stdout = String::from_utf8_lossy(&denied.stdout);
    assert!(
        format!("{stdout}{stderr}")
            .to_lowercase()
            .contains("unknown tool"),
        "{stdout}\n{stderr}"
    );
    assert!(!stdout.contains("\"result\":3"), "{stdout}");

    // The same from a policy file's [tools].
    let dir = tempfile::tempdir().expect("temp dir");
    let policy = dir.path().join("server.toml");
    let [python, script] = &server_2026()[..] else {
        unreachable!()
    };
    std::fs::write(
        &policy,
        format!(
            "protocol = \"mcp\"\n[plugin]\nsource = {:?}\nargs = [{:?}]\n[tools]\ndeny = [\"add\"]\n",
            python.display().to_string(),
            script.display().to_string()
        ),
    )
    .expect("policy");
    let out = Command::new(peers::sandpipe())
        .args(["call", "--method", "tools/call", "--params", add])
        .arg(&policy)
        .stdin(Stdio::null())
        .output()
        .expect("sandpipe call");
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // And a tool the policy leaves is called.
    let out = Command::new(peers::sandpipe())
        .args(["call", "--method", "tools/call", "--params"])
        .arg(r#"{"name":"greet","arguments":{}}"#)
        .arg(&policy)
        .stdin(Stdio::null())
        .output()
        .expect("sandpipe call");
    // greet resolves a name by elicitation (a multi round-trip call), which needs a client
    // capability `call` does not declare: the server says so through the 2026-07-28 envelope.
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("-32021"), "{stderr}");
}

/// A server that answers nothing, and after its stdin's end stays busy until a SIGTERM, which
/// it answers by exiting 42. The line it writes at EOF tells the test that the end has
/// reached it.
const BUSY_AFTER_EOF: &str = r#"
import os, signal, sys, time
def term(*_):
    sys.stderr.write("busy server: SIGTERM\n")
    sys.stderr.flush()
    os._exit(42)
signal.signal(signal.SIGTERM, term)
for _ in sys.stdin:
    pass
sys.stdout.write('{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"stdin ended"}}\n')
sys.stdout.flush()
while True:
    time.sleep(3600)
"#;

/// Start `command`, close its stdin, wait for the server's EOF line, send one SIGTERM; the
/// exit status, the stderr, and the time from the SIGTERM to the end. If the SIGTERM has not
/// ended it within 30 s, a second one ends sandpipe (and with it the server, by SIGKILL), so
/// the assertions fail instead of the test hanging.
fn one_sigterm_after_eof(command: &[PathBuf]) -> (Option<i32>, String, Duration) {
    let mut child = Command::new(&command[0])
        .args(&command[1..])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start");
    drop(child.stdin.take());
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("read");
    assert!(line.contains("stdin ended"), "{line:?}");
    let term = |pid: u32| {
        Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status()
            .expect("kill");
    };
    let sent = Instant::now();
    term(child.id());
    let mut second = false;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if !second && sent.elapsed() > Duration::from_secs(30) {
            second = true;
            term(child.id());
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let took = sent.elapsed();
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().expect("stderr"), &mut stderr)
        .expect("stderr");
    (status.code(), stderr, took)
}

#[test]
fn one_sigterm_after_the_input_ended_reaches_a_busy_server_as_without_sandpipe() {
    let dir = tempfile::tempdir().expect("temp dir");
    let script = dir.path().join("busy.py");
    std::fs::write(&script, BUSY_AFTER_EOF).expect("script");
    let server = vec![peers::mcp_python(), script];
    let (direct, direct_err, direct_took) = one_sigterm_after_eof(&server);
    assert_eq!(direct, Some(42), "{direct_err}");

    let mut behind: Vec<PathBuf> = vec![
        peers::sandpipe(),
        "run".into(),
        "--protocol".into(),
        "mcp".into(),
    ];
    behind.extend(server);
    let (status, stderr, took) = one_sigterm_after_eof(&behind);
    // The server's own handler ran and sandpipe ended with its status: the SIGTERM reached
    // it, not sandpipe's kill after a second signal.
    assert!(stderr.contains("busy server: SIGTERM"), "{stderr}");
    assert_eq!(status, Some(42), "{stderr}");
    eprintln!("one SIGTERM to the end: {direct_took:?} direct, {took:?} behind sandpipe");
}

/// A native server that dies at start-up for want of a grant gets the note plain `run` gives,
/// under `run --protocol mcp`, `call` and `inspect`, and the advice fits what it was refused:
/// read-write for a write, `:ro` for a read.
#[test]
fn a_server_refused_a_path_at_start_up_gets_the_note_with_advice_that_fits() {
    let dir = tempfile::tempdir().expect("temp dir");
    let state = dir.path().join("state");
    std::fs::create_dir(&state).expect("state dir");
    let writes = dir.path().join("writes.js");
    let reads = dir.path().join("reads.js");
    std::fs::write(
        &writes,
        format!(
            "require('fs').mkdirSync({:?});\n",
            state.join("cache").display().to_string()
        ),
    )
    .expect("script");
    std::fs::write(
        &reads,
        format!(
            "require('fs').readdirSync({:?});\n",
            state.display().to_string()
        ),
    )
    .expect("script");
    let state = state.display().to_string();
    let initialize = r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#;
    let run = |script: &PathBuf| {
        let mut child = Command::new(peers::sandpipe())
            .args(["run", "--protocol", "mcp"])
            .arg(peers::node())
            .arg(script)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("sandpipe run");
        {
            use std::io::Write;
            let mut stdin = child.stdin.take().expect("stdin");
            writeln!(stdin, "{initialize}").expect("write");
        }
        let out = child.wait_with_output().expect("wait");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let tools = |command: &str, script: &PathBuf| {
        let mut cmd = Command::new(peers::sandpipe());
        cmd.args([command, "--protocol", "mcp"]);
        if command == "call" {
            cmd.args(["--method", "tools/list"]);
        }
        let out = cmd
            .arg(peers::node())
            .arg(script)
            .stdin(Stdio::null())
            .output()
            .expect("sandpipe");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let write_advice =
        format!("it was refused a write under {state}: grant it with --dir {state}\n");
    let read_advice =
        format!("it was refused a read under {state}: grant it with --dir {state}:ro\n");
    for (how, stderr, advice) in [
        ("run --protocol mcp", run(&writes), &write_advice),
        ("run --protocol mcp", run(&reads), &read_advice),
        ("call", tools("call", &writes), &write_advice),
        ("inspect", tools("inspect", &reads), &read_advice),
    ] {
        let note = stderr
            .lines()
            .find(|l| l.starts_with("sandpipe: note: the plugin failed"))
            .unwrap_or_else(|| panic!("{how}: no note in {stderr}"));
        assert!(
            format!("{note}\n").ends_with(advice.as_str()),
            "{how}: {note}"
        );
    }
}

/// The official SDK's `Client` in auto mode (`tests/peers/mcp/drive_auto.py`): its report.
fn drive_auto(tool: &str, args: &str, command: &[PathBuf]) -> Value {
    let out = Command::new(peers::mcp_python())
        .arg(peers::source("mcp/drive_auto.py"))
        .args([tool, args, "--"])
        .args(command)
        .output()
        .expect("running the SDK client");
    assert!(
        out.status.success(),
        "{command:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout_json(&out)
}

#[test]
fn sandpipes_own_servers_speak_2026_to_the_sdks_client_in_auto_mode() {
    // The Python guest SDK's server, natively.
    let guest = sandpipe_tests::guests::python(
        "examples/python/example_mcp.py",
        sandpipe_tests::Target::Native,
    );
    let report = drive_auto("add", r#"{"a": 2, "b": 40}"#, &[guest]);
    assert_eq!(report["protocolVersion"], "2026-07-28", "{report}");
    assert_eq!(report["result"]["content"][0]["text"], "42", "{report}");

    // A component's exports as tools, behind run --protocol mcp, with a tool filtered out.
    let command = vec![
        peers::sandpipe(),
        "run".into(),
        "--protocol".into(),
        "mcp".into(),
        "--deny-tool".into(),
        "crash".into(),
        sandpipe_tests::mcp_tools(),
    ];
    let report = drive_auto("add", r#"{"a": 40, "b": 2}"#, &command);
    assert_eq!(report["protocolVersion"], "2026-07-28", "{report}");
    assert_eq!(
        report["result"]["structuredContent"]["result"], 42,
        "{report}"
    );
    let tools = report["tools"].as_array().expect("tools");
    assert!(tools.contains(&Value::from("add")), "{report}");
    assert!(!tools.contains(&Value::from("crash")), "{report}");
}
