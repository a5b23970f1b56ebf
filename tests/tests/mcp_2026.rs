//! MCP's two eras behind `sandpipe run --protocol mcp`, driven by the official Python SDK's
//! `Client` (PyPI `mcp` 2.3.0, `tests/peers/mcp/drive_2026.py`) in each of its connect modes:
//! `auto` (probes `server/discover`, the SDK's default), `legacy` (`initialize`) and pinned to
//! `2026-07-28` (no probe at all), against an SDK 2.3.0 stdio server written for these tests
//! (`tests/peers/mcp/server_2026.py`: `add`, `slow`, `hog`, `hold`, `crash`, `boom`, a multi
//! round-trip `greet`, and `grow`, which changes the tool list).
//!
//! Each case passes in each mode: no options (the same report as the server run directly),
//! `--deny-tool`, `--request-timeout` with and without `--restart` (a slow call cancelled, a deaf
//! server replaced, and the next call served either way), a subscription held past the request
//! timeout, a call the client cancels, and a 1 s request timeout against a server that takes
//! longer than that to start. `SANDPIPE_MCP_RUNS=N` runs every test N times in a row.

use std::path::PathBuf;
use std::process::Command;

use sandpipe_tests::peers;
use serde_json::{Value, json};

const MODES: [&str; 3] = ["auto", "legacy", "2026-07-28"];

/// How many times each test runs its cases (`SANDPIPE_MCP_RUNS`, default once).
fn runs() -> usize {
    std::env::var("SANDPIPE_MCP_RUNS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(1)
}

/// The server, as a client's config names it.
fn server() -> Vec<PathBuf> {
    vec![peers::mcp_python(), peers::source("mcp/server_2026.py")]
}

/// `sandpipe run --protocol mcp FLAGS... SERVER`.
fn behind(flags: &[&str]) -> Vec<PathBuf> {
    let mut cmd = vec![
        peers::sandpipe(),
        "run".into(),
        "--protocol".into(),
        "mcp".into(),
    ];
    cmd.extend(flags.iter().map(PathBuf::from));
    cmd.extend(server());
    cmd
}

/// The driver's report of `cases` in `mode` against `command`.
fn drive(mode: &str, cases: &[&str], command: &[PathBuf]) -> Value {
    peers::report(
        Command::new(peers::mcp_python())
            .arg(peers::source("mcp/drive_2026.py"))
            .arg(mode)
            .args(cases)
            .arg("--")
            .args(command),
        &format!("{mode} {cases:?} on {command:?}"),
    )
}

/// The revision each mode ends up speaking.
fn version(mode: &str) -> &'static str {
    if mode == "legacy" {
        "2025-11-25"
    } else {
        "2026-07-28"
    }
}

fn text(call: &Value) -> String {
    call["result"]["text"][0]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

fn answers(call: &Value, expected: &str) -> bool {
    call["result"]["isError"] == false && text(call) == expected
}

#[test]
fn with_no_options_every_mode_sees_what_the_server_run_directly_shows() {
    let cases = ["basic", "unknown", "listen", "cancel"];
    for _ in 0..runs() {
        for mode in MODES {
            let direct = drive(mode, &cases, &server());
            let sandboxed = drive(mode, &cases, &behind(&[]));
            assert_eq!(direct["version"], version(mode), "{direct}");
            assert!(answers(&direct["basic"]["greet"], "hello, Ada"), "{direct}");
            // The server's eight tools and the one `grow` added.
            assert_eq!(
                direct["basic"]["tools_after"].as_array().map(Vec::len),
                Some(9)
            );
            assert_eq!(direct["cancel"]["cancelled"], true, "{direct}");
            let event = if mode == "legacy" {
                "unsupported"
            } else {
                "ToolsListChanged"
            };
            assert_eq!(direct["listen"]["event"], event, "{direct}");
            assert_eq!(direct, sandboxed, "mode {mode}");
        }
    }
}

#[test]
fn a_denied_tool_looks_like_one_the_server_does_not_have_in_each_revision() {
    for _ in 0..runs() {
        for mode in MODES {
            let direct = drive(mode, &["unknown"], &server());
            let r = drive(mode, &["deny", "basic"], &behind(&["--deny-tool", "boom"]));
            assert_eq!(r["version"], version(mode), "{r}");
            let tools = r["deny"]["tools"].as_array().expect("tools");
            assert!(!tools.contains(&json!("boom")), "{r}");
            let boom = &r["deny"]["boom"];
            if mode == "legacy" {
                // 2025-11-25's own example: -32602 for an unknown tool.
                assert_eq!(boom["error"]["code"], -32602, "{r}");
                assert_eq!(boom["error"]["message"], "unknown tool: boom", "{r}");
            } else {
                // What the SDK's 2026 server answers for a tool it does not have.
                let mut expected = direct["unknown"]["nope"].clone();
                expected["result"]["text"] = json!(["Unknown tool: boom"]);
                assert_eq!(*boom, expected, "{r} against {direct}");
            }
            // The filter holds on the multi round-trip's retry too: greet is allowed and
            // finishes; everything else answers as without the filter.
            assert!(answers(&r["basic"]["greet"], "hello, Ada"), "{r}");
            assert!(answers(&r["basic"]["add"], "3"), "{r}");
            // After the list changed, the list the client fetches again is filtered too.
            let after = r["basic"]["tools_after"].as_array().expect("tools");
            assert!(
                after.contains(&json!("extra")) && !after.contains(&json!("boom")),
                "{r}"
            );
        }
    }
}

/// A slow call and a deaf server under a 1 s request timeout, then a subscription held past it.
fn timeouts_keep_the_session(flags: &[&str]) {
    for _ in 0..runs() {
        for mode in MODES {
            let r = drive(mode, &["timeout", "deaf", "listen"], &behind(flags));
            assert_eq!(r["version"], version(mode), "{r}");
            let slow = &r["timeout"]["slow"];
            assert_eq!(slow["result"]["isError"], true, "{r}");
            assert!(text(slow).contains("timed out after 1s"), "{r}");
            assert!(answers(&r["timeout"]["add"], "4"), "{r}");
            let hog = &r["deaf"]["hog"];
            assert_eq!(hog["result"]["isError"], true, "{r}");
            assert!(text(hog).contains("timed out after 1s"), "{r}");
            assert!(answers(&r["deaf"]["add"], "6"), "{r}");
            let event = if mode == "legacy" {
                "unsupported"
            } else {
                "ToolsListChanged"
            };
            assert_eq!(r["listen"]["event"], event, "{r}");
            assert!(answers(&r["listen"]["add"], "8"), "{r}");
        }
    }
}

#[test]
fn a_request_timeout_without_restart_cancels_the_call_and_keeps_the_session() {
    timeouts_keep_the_session(&["--request-timeout", "1s"]);
}

#[test]
fn a_request_timeout_with_restart_cancels_the_call_and_keeps_the_session() {
    timeouts_keep_the_session(&["--request-timeout", "1s", "--restart"]);
}

#[test]
fn a_server_slower_to_start_than_the_request_timeout_is_served() {
    for _ in 0..runs() {
        for mode in MODES {
            let flags = ["--request-timeout", "1s", "--env", "START_DELAY=1.5"];
            let r = drive(mode, &["basic"], &behind(&flags));
            assert_eq!(r["version"], version(mode), "{r}");
            assert!(answers(&r["basic"]["add"], "3"), "{r}");
            assert!(answers(&r["basic"]["greet"], "hello, Ada"), "{r}");
        }
    }
}
