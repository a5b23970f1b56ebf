//! Real MCP servers, driven by the official MCP Python SDK client (`tests/peers/mcp/drive.py`,
//! PyPI `mcp` 2.3.0), directly and behind `sandpipe run --protocol mcp` with the default limits
//! and only the grants the README documents: npm `@modelcontextprotocol/server-everything`,
//! `server-filesystem`, `server-memory` (run through their installed bin links, the way a
//! client config names them) and PyPI `mcp-server-time` (its venv entry point), all installed by
//! `.ci/setup`. The client must see the same thing either way: the tools listed, calls, a
//! progress stream, a 2 MB argument, a tool's own error, and the shutdown ending when stdin
//! closes (the SDK never had to SIGTERM). Behind sandpipe also: a filtered tool is gone from the
//! list and refused, a hanging tool is cancelled by `--request-timeout` and the next call is
//! answered, a server that dies answers with the stopped error, and `call`, `inspect`,
//! `--record` and `replay` speak MCP.

use std::path::{Path, PathBuf};
use std::process::Command;

use sandpipe_tests::peers;
use serde_json::{Value, json};

/// Run the driver's `scenario` against `command` (env pairs as `NAME=VALUE`); its report.
fn drive(scenario: &[&str], command: &[&Path]) -> Value {
    peers::report(
        Command::new(peers::mcp_python())
            .arg(peers::source("mcp/drive.py"))
            .args(scenario)
            .arg("--")
            .args(command),
        &format!("{scenario:?} on {command:?}"),
    )
}

/// `sandpipe run --protocol mcp FLAGS... SERVER ARGS...` as a command line.
fn behind(flags: &[&str], server: &Path, args: &[&Path]) -> Vec<PathBuf> {
    let mut cmd = vec![
        peers::sandpipe(),
        "run".into(),
        "--protocol".into(),
        "mcp".into(),
    ];
    cmd.extend(flags.iter().map(PathBuf::from));
    cmd.push(server.to_owned());
    cmd.extend(args.iter().map(|a| a.to_path_buf()));
    cmd
}

fn refs(v: &[PathBuf]) -> Vec<&Path> {
    v.iter().map(PathBuf::as_path).collect()
}

fn without_tool(report: &mut Value, name: &str) {
    if let Some(tools) = report["tools"].as_array_mut() {
        tools.retain(|t| t["name"] != name);
    }
}

#[test]
fn server_everything_answers_the_sdk_client_the_same_behind_sandpipe() {
    let server = peers::mcp_npm_server("mcp-server-everything");
    let mut direct = drive(&["everything"], &[&server]);
    let mut sandboxed = drive(
        &["everything"],
        &refs(&behind(&["--deny-tool", "get-env"], &server, &[])),
    );
    // Progress came as a stream, the 2 MB argument made the round trip, the tool's own error
    // is its own, and nothing had to be killed.
    assert_eq!(
        direct["progress"],
        json!([[1.0, 3.0], [2.0, 3.0], [3.0, 3.0]])
    );
    assert_eq!(direct["big"], json!({"sent": 2 << 20, "echoed": true}));
    assert_eq!(direct["own_error"]["result"]["isError"], true);
    assert_eq!(direct["shutdown_escalated"], false);
    assert!(direct["tools"].as_array().expect("tools").len() > 5);
    // The filtered tool: gone from the list, and refused as a tool the server does not have.
    assert_eq!(
        sandboxed["get_env"],
        json!({"error": {"code": -32602, "message": "unknown tool: get-env"}})
    );
    assert!(direct["get_env"]["result"].is_object());
    for r in [&mut direct, &mut sandboxed] {
        without_tool(r, "get-env");
        r.as_object_mut().expect("report").remove("get_env");
    }
    assert_eq!(direct, sandboxed);
}

#[test]
fn a_hanging_tool_is_cancelled_by_the_request_timeout_and_the_next_call_is_answered() {
    let server = peers::mcp_npm_server("mcp-server-everything");
    let report = drive(
        &["hang"],
        &refs(&behind(
            &["--request-timeout", "2s", "--restart"],
            &server,
            &[],
        )),
    );
    let hang = &report["hang"]["result"];
    assert_eq!(hang["isError"], true, "{report}");
    let text = hang["content"][0]["text"].as_str().expect("text");
    assert!(
        text.contains("timed out after 2s (request timeout)"),
        "{text}"
    );
    // The server was sent notifications/cancelled, still answered sandpipe's ping, and so
    // serves the next call itself. server-everything lets the cancelled operation run on, so
    // at shutdown it is still busy, as it would be without sandpipe: whether the client had to
    // escalate is the server's business, not asserted here.
    assert_eq!(
        report["after"]["result"]["content"][0]["text"],
        "Echo: still here"
    );
}

#[test]
fn a_server_killed_by_its_deadline_answers_the_pending_call_with_a_tool_error() {
    let server = peers::mcp_npm_server("mcp-server-everything");
    let report = drive(
        &["hang"],
        &refs(&behind(&["--timeout", "3s"], &server, &[])),
    );
    let hang = &report["hang"]["result"];
    assert_eq!(hang["isError"], true, "{report}");
    let text = hang["content"][0]["text"].as_str().expect("text");
    assert!(
        text.starts_with("plugin exceeded its deadline of 3s"),
        "{text}"
    );
    assert_eq!(
        hang["_meta"]["sandpipe"]["exit"]["kind"],
        "deadline_exceeded"
    );
    // Without --restart the session ended with the server: the next call finds it closed.
    assert!(report["after"].get("result").is_none(), "{report}");
}

#[test]
fn mcp_server_time_answers_the_same_behind_sandpipe() {
    let server = peers::mcp_server_time();
    let direct = drive(&["time"], &[&server]);
    let sandboxed = drive(&["time"], &refs(&behind(&[], &server, &[])));
    assert_eq!(direct["convert"]["result"]["isError"], false, "{direct}");
    assert_eq!(direct["shutdown_escalated"], false);
    assert_eq!(direct, sandboxed);
}

#[test]
fn server_filesystem_and_server_memory_work_with_their_documented_grants() {
    let root = tempfile::tempdir().expect("temp dir");
    let root = root.path().canonicalize().expect("canonical");
    let server = peers::mcp_npm_server("mcp-server-filesystem");
    let root_arg = root.to_str().expect("UTF-8");
    let direct = drive(&["filesystem", root_arg], &[&server, &root]);
    std::fs::remove_file(root.join("a.txt")).expect("the server wrote it");
    let dir = root_arg.to_owned();
    let sandboxed = drive(
        &["filesystem", root_arg],
        &refs(&behind(&["--dir", &dir], &server, &[&root])),
    );
    assert_eq!(direct["read"]["result"]["content"][0]["text"], "hi");
    assert_eq!(direct["outside"]["result"]["isError"], true);
    assert_eq!(direct, sandboxed);

    let state = tempfile::tempdir().expect("temp dir");
    let state = state.path().canonicalize().expect("canonical");
    let server = peers::mcp_npm_server("mcp-server-memory");
    let file = state.join("memory.jsonl");
    let env = format!("MEMORY_FILE_PATH={}", file.display());
    let direct = drive(&["memory", &env], &[&server]);
    std::fs::remove_file(&file).expect("the server wrote its file");
    let dir = state.to_str().expect("UTF-8").to_owned();
    let sandboxed = drive(
        &["memory", &env],
        &refs(&behind(&["--dir", &dir, "--env", &env], &server, &[])),
    );
    assert!(file.exists());
    assert_eq!(direct["create"]["result"]["isError"], false, "{direct}");
    assert_eq!(direct, sandboxed);
}

#[test]
fn call_inspect_record_and_replay_speak_mcp() {
    let server = peers::mcp_npm_server("mcp-server-everything");
    let result = call_tool(&server, r#"{"name":"get-sum","arguments":{"a":1,"b":2}}"#);
    assert_eq!(result["content"][0]["text"], "The sum of 1 and 2 is 3.");

    let report: Value = sandpipe_json(
        Command::new(peers::sandpipe())
            .args(["inspect", "--json", "--protocol", "mcp"])
            .arg(&server),
    );
    let tools = report["self_description"]["tools"]
        .as_array()
        .expect("tools");
    let sum = tools
        .iter()
        .find(|t| t["name"] == "get-sum")
        .expect("get-sum listed");
    assert_eq!(sum["inputSchema"]["properties"]["a"]["type"], "number");

    // A session recorded behind `run --protocol mcp` replays against the same server.
    let dir = tempfile::tempdir().expect("temp dir");
    let recording = dir.path().join("session.transcript");
    let mut child = Command::new(peers::sandpipe())
        .args(["run", "--protocol", "mcp", "--record"])
        .arg(&recording)
        .arg(&server)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("sandpipe run");
    let lines = [
        r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#,
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"message":"recorded"}}}"#,
    ];
    {
        use std::io::{BufRead, Write};
        let mut stdin = child.stdin.take().expect("stdin");
        let mut stdout = std::io::BufReader::new(child.stdout.take().expect("stdout"));
        let mut answer = String::new();
        for (line, id) in lines.iter().zip([Some(0), None, Some(1)]) {
            writeln!(stdin, "{line}").expect("write");
            // Wait for the request's answer; the server's notifications may come first.
            while let Some(id) = id {
                answer.clear();
                assert!(
                    stdout.read_line(&mut answer).expect("read") > 0,
                    "no answer"
                );
                let v: Value = serde_json::from_str(&answer).expect("JSON");
                if v["id"] == id {
                    break;
                }
            }
        }
        assert!(answer.contains("Echo: recorded"), "{answer}");
        drop(stdin);
    }
    assert!(child.wait().expect("wait").success());
    let text = std::fs::read_to_string(&recording).expect("recording");
    assert!(text.contains("# protocol: mcp"), "{text}");
    let out = Command::new(peers::sandpipe())
        .arg("replay")
        .arg(&recording)
        .arg("--plugin")
        .arg(&server)
        .output()
        .expect("sandpipe replay");
    assert!(
        out.status.success(),
        "{}\n{text}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Run `cmd` (a `sandpipe` command), require success (its stderr in the message), and parse
/// what it printed on stdout as one JSON value.
fn sandpipe_json(cmd: &mut Command) -> Value {
    let out = cmd.output().expect("running sandpipe");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON")
}

/// `sandpipe call --protocol mcp --method tools/call --params PARAMS SERVER`: the result.
fn call_tool(server: &std::path::Path, params: &str) -> Value {
    sandpipe_json(
        Command::new(peers::sandpipe())
            .args([
                "call",
                "--protocol",
                "mcp",
                "--method",
                "tools/call",
                "--params",
            ])
            .arg(params)
            .arg(server),
    )
}

/// A tool result's text.
fn text(r: &Value) -> &str {
    r["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
}

#[test]
fn a_components_exported_functions_are_tools_with_per_call_limits() {
    let tools = sandpipe_tests::mcp_tools();
    let report = drive(
        &["exports"],
        &refs(&behind(
            &[
                "--fuel-per-request",
                "100000000",
                "--request-timeout",
                "2s",
                "--restart",
            ],
            &tools,
            &[],
        )),
    );
    // Every export is a tool whose input schema comes from its WIT signature.
    let listed = report["tools"].as_array().expect("tools");
    let names: Vec<&str> = listed.iter().filter_map(|t| t["name"].as_str()).collect();
    assert_eq!(
        names,
        [
            "add", "greet", "distance", "convert", "divide", "count", "crash", "spin", "sleep"
        ]
    );
    let schema = |name: &str| {
        listed
            .iter()
            .find(|t| t["name"] == name)
            .map(|t| t["inputSchema"].clone())
            .expect("listed")
    };
    assert_eq!(schema("add")["properties"]["a"]["type"], "integer");
    assert_eq!(schema("greet")["required"], json!(["name"]));
    assert_eq!(
        schema("distance")["properties"]["b"]["required"],
        json!(["x", "y"])
    );
    assert_eq!(
        schema("convert")["properties"]["from"]["enum"],
        json!(["celsius", "fahrenheit", "kelvin"])
    );
    // Calls, with structured content the SDK checked against each output schema.
    assert_eq!(
        report["add"]["result"]["structuredContent"],
        json!({"result": 42})
    );
    assert_eq!(text(&report["greet"]), "Hello, Countess Ada!");
    assert_eq!(text(&report["distance"]), "5.0");
    assert_eq!(text(&report["convert"]), "212.0");
    // The function's own error value and arguments that do not fit are tool errors.
    assert_eq!(report["divide_by_zero"]["result"]["isError"], true);
    assert_eq!(text(&report["divide_by_zero"]), "cannot divide 1 by zero");
    assert_eq!(
        text(&report["bad_arguments"]),
        "invalid arguments: argument a: expected an integer (s64)"
    );
    // State lives as long as the instance; a trap is a tool error with the guest's stderr and
    // the next call gets a fresh instance (its counter starts over).
    assert_eq!(text(&report["count"][1]), "2");
    let crash = &report["crash"]["result"];
    assert_eq!(crash["isError"], true, "{report}");
    assert_eq!(crash["_meta"]["sandpipe"]["exit"]["kind"], "trap");
    assert!(text(&report["crash"]).contains("about to crash: boom"));
    assert_eq!(text(&report["after_crash"]), "1");
    // Per-call budgets: an endless loop runs out of its fuel, a sleep out of its time, and
    // the next call is answered.
    assert_eq!(
        report["spin"]["result"]["_meta"]["sandpipe"]["exit"]["kind"],
        "out_of_fuel"
    );
    assert_eq!(
        report["sleep"]["result"]["_meta"]["sandpipe"]["exit"]["kind"],
        "deadline_exceeded"
    );
    assert_eq!(text(&report["after_limits"]), "2");
    assert_eq!(
        report["unknown"],
        json!({"error": {"code": -32602, "message": "unknown tool: nope"}})
    );
    assert_eq!(report["shutdown_escalated"], false);

    // Without --restart a trap poisons the instance, as for a wasm: oracle; a filtered tool is
    // gone.
    let report = drive(
        &["exports-poisoned"],
        &refs(&behind(&["--deny-tool", "spin"], &tools, &[])),
    );
    assert_eq!(report["crash"]["result"]["isError"], true, "{report}");
    assert!(
        text(&report["after_crash"])
            .starts_with("the instance is poisoned by an earlier failure: plugin trapped"),
        "{report}"
    );
    let listed = report["tools"].as_array().expect("tools");
    assert!(!listed.iter().any(|t| t["name"] == "spin"), "{report}");

    // `inspect` and `call` serve the same tools.
    let result = call_tool(&tools, r#"{"name":"add","arguments":{"a":1,"b":2}}"#);
    assert_eq!(result["structuredContent"], json!({"result": 3}));
    let out = Command::new(peers::sandpipe())
        .args(["inspect", "--json", "--protocol", "mcp"])
        .arg(&tools)
        .output()
        .expect("sandpipe inspect");
    let report: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(
        report["self_description"]["tools"].as_array().map(Vec::len),
        Some(9),
        "{report}"
    );
}

#[test]
fn a_server_that_dies_before_initialize_answers_it_with_the_stopped_error() {
    // A server that cannot start: it writes why on stderr and exits before reading anything.
    let dir = tempfile::tempdir().expect("temp dir");
    let server = dir.path().join("broken-server");
    std::fs::write(
        &server,
        "#!/bin/sh\necho 'cannot start: missing config' >&2\nexit 3\n",
    )
    .expect("write the server");
    std::fs::set_permissions(&server, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("chmod");
    for flags in [&[][..], &["--restart"][..]] {
        let report = drive(&["time"], &refs(&behind(flags, &server, &[])));
        // The client's initialize is answered with the reason, not left to a closed pipe.
        assert_eq!(
            report["initialize_error"],
            json!({"code": -32603, "message": "plugin exited with status 3 before answering"}),
            "{flags:?}: {report}"
        );
    }
}

#[test]
fn an_mcp_server_on_the_python_guest_sdk_answers_the_same_as_a_component_and_natively() {
    use sandpipe_tests::{Target, guests};
    let source = "examples/python/example_mcp.py";
    let native = guests::python(source, Target::Native);
    let wasm = guests::python(source, Target::Wasm);
    let direct = drive(&["guest"], &[&native]);
    let sandboxed = drive(&["guest"], &refs(&behind(&[], &wasm, &[])));
    assert_eq!(text(&direct["add"]), "42", "{direct}");
    assert_eq!(text(&direct["words"]), r#"["one", "two"]"#);
    assert_eq!(direct["fail"]["result"]["isError"], true);
    assert_eq!(direct["unknown"]["error"]["code"], -32602);
    assert_eq!(direct["shutdown_escalated"], false);
    assert_eq!(direct, sandboxed);
}
