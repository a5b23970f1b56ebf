//! A second real MCP client: the official TypeScript SDK (`@modelcontextprotocol/sdk` from npm,
//! pinned in `tests/peers/mcp/package.json`, installed by `.ci/setup`), its `Client` over
//! `StdioClientTransport` (`tests/peers/mcp/drive.mjs`), drives npm `server-everything` and the
//! Python SDK 2.3.0 server of the tests (`tests/peers/mcp/server_2026.py`), directly and behind
//! `sandpipe run --protocol mcp` with the default limits. This SDK speaks the handshake
//! revisions, so the Python server answers it with `initialize`; what the client sees must not
//! change behind sandpipe: tools, calls, progress, a 2 MB argument, a tool's own error, an
//! unknown tool, an elicitation the client answers, a tool list that changes, a call the
//! client cancels, and a shutdown that ends at stdin's close.

use std::path::PathBuf;
use std::process::Command;

use sandpipe_tests::peers;
use serde_json::{Value, json};

/// Run `drive.mjs SCENARIO -- COMMAND...`; its report.
fn drive(scenario: &str, command: &[PathBuf]) -> Value {
    peers::report(
        Command::new(peers::node())
            .arg(peers::source("mcp/drive.mjs"))
            .arg(scenario)
            .arg("--")
            .args(command)
            .env("SANDPIPE_MCP_NPM", peers::mcp_npm()),
        &format!("{scenario} on {command:?}"),
    )
}

/// `sandpipe run --protocol mcp FLAGS... SERVER...` as a command line.
fn behind(flags: &[&str], server: &[PathBuf]) -> Vec<PathBuf> {
    let mut cmd = vec![
        peers::sandpipe(),
        "run".into(),
        "--protocol".into(),
        "mcp".into(),
    ];
    cmd.extend(flags.iter().map(PathBuf::from));
    cmd.extend(server.iter().cloned());
    cmd
}

/// The Python SDK 2.3.0 server of the tests, as a command line.
fn server_2026() -> Vec<PathBuf> {
    vec![peers::mcp_python(), peers::source("mcp/server_2026.py")]
}

fn without(report: &mut Value, key: &str) -> Value {
    report
        .as_object_mut()
        .expect("a report")
        .remove(key)
        .unwrap_or(Value::Null)
}

#[test]
fn the_typescript_sdk_sees_server_everything_the_same_behind_sandpipe() {
    let server = vec![peers::mcp_npm_server("mcp-server-everything")];
    let mut direct = drive("everything", &server);
    let mut sandboxed = drive("everything", &behind(&["--deny-tool", "get-env"], &server));
    assert_eq!(direct["protocolVersion"], "2025-11-25");
    assert_eq!(
        direct["echo"]["result"]["content"][0]["text"],
        "Echo: hello"
    );
    assert_eq!(direct["big"], json!({"sent": 2 << 20, "echoed": true}));
    assert_eq!(direct["own_error"]["result"]["isError"], true);
    assert_eq!(direct["shutdown_escalated"], false);
    // The filtered tool: gone from the list, and refused as a tool the server does not have.
    assert_eq!(sandboxed["get_env"]["error"]["code"], -32602, "{sandboxed}");
    assert!(direct["get_env"]["result"].is_object());
    // The SDK drops a progress notification that comes after its call's answer, and the
    // server sends its last one right before it: only the ones before are the same every run.
    for r in [&mut direct, &mut sandboxed] {
        let progress = without(r, "progress");
        assert_eq!(progress[0], json!([1, 3]), "{progress}");
        assert_eq!(progress[1], json!([2, 3]), "{progress}");
        without(r, "get_env");
        if let Some(tools) = r["tools"].as_array_mut() {
            tools.retain(|t| t["name"] != "get-env");
        }
    }
    assert_eq!(direct, sandboxed);
}

#[test]
fn the_typescript_sdk_sees_the_python_sdk_server_the_same_behind_sandpipe() {
    let direct = drive("sdk2026", &server_2026());
    let sandboxed = drive("sdk2026", &behind(&[], &server_2026()));
    assert_eq!(direct["add"]["result"]["structuredContent"]["result"], 3);
    assert_eq!(direct["boom"]["result"]["isError"], true);
    assert_eq!(
        direct["unknown"]["result"]["content"][0]["text"],
        "Unknown tool: nope"
    );
    // The server's elicitation reached the client and its answer came back.
    assert_eq!(
        direct["greet"]["result"]["content"][0]["text"], "hello, Ada",
        "{direct}"
    );
    assert!(
        direct["tools_after"]
            .as_array()
            .expect("tools")
            .contains(&json!("extra"))
    );
    assert_eq!(direct["cancelled"]["error"]["code"], -32001, "{direct}");
    assert_eq!(
        direct["after_cancel"]["result"]["structuredContent"]["result"],
        5
    );
    assert_eq!(direct["shutdown_escalated"], false);
    assert_eq!(direct, sandboxed);
}
