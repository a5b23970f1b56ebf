//! Transparent stand-in, denobridge: a provider in TypeScript (`tests/peers/denobridge`) that
//! behaves as the denobridge library does, run by Deno from npm (`deno` 2.9.6, installed by
//! `.ci/setup`), driven as terraform-provider-denobridge's Go host drives it: `deno run -q
//! /abs/provider.ts`, JSON-RPC 2.0 in JSON Lines, requests numbered from 0, `shutdown` as a
//! notification. Each scenario runs Deno directly, then behind `sandpipe run` natively, raw and
//! with `--framing lines`, under the default limits; the engine must see the same stdout bytes
//! and the same end.

use std::path::{Path, PathBuf};
use std::process::Command;

use sandpipe_tests::peers;
use sandpipe_tests::stand_in::{Step, Tally, Transcript, play};

const SHUTDOWN: &str = r#"{"jsonrpc":"2.0","method":"shutdown"}"#;

fn line(text: &str) -> Step {
    Step::Send(format!("{text}\n").into_bytes())
}

/// A request and the wait for its one answer.
fn call(id: u64, method: &str, params: &str) -> [Step; 2] {
    [
        line(&format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"{method}","params":{params}}}"#
        )),
        Step::Expect(1),
    ]
}

/// The Go host's first request: `health`, without params.
fn started() -> Vec<Step> {
    vec![
        line(r#"{"jsonrpc":"2.0","id":0,"method":"health"}"#),
        Step::Expect(1),
    ]
}

/// (name, steps).
fn scenarios() -> Vec<(&'static str, Vec<Step>)> {
    let mut normal = started();
    normal.extend(call(
        1,
        "create",
        r#"{"props":{"name":"a","content":"hello"}}"#,
    ));
    normal.extend(call(2, "read", r#"{"id":"r1","props":{"name":"a"}}"#));
    normal.extend(call(
        3,
        "update",
        r#"{"id":"r1","nextProps":{"name":"a","content":"bye"},"currentProps":{"name":"a","content":"hello"},"currentState":{"size":5}}"#,
    ));
    normal.extend(call(4, "create", r#"{"props":{"name":"b","fail":true}}"#));
    normal.extend(call(5, "modifyPlan", r#"{"planType":"create"}"#));
    normal.extend(call(6, "delete", r#"{"id":"r1","props":{},"state":{}}"#));
    normal.extend(call(7, "read", r#"{"id":"r1","props":null}"#));
    normal.push(line(SHUTDOWN));

    let mut malformed = started();
    malformed.extend([line("this is not json"), Step::Expect(1)]);
    malformed.extend([line(r#"{"jsonrpc":"2.0","id":7,"#), Step::Expect(1)]);
    malformed.extend(call(8, "health", "{}"));
    malformed.push(line(SHUTDOWN));

    let content = "x".repeat(3 << 19);
    let mut large = started();
    large.extend(call(
        1,
        "create",
        &format!(r#"{{"props":{{"name":"big","content":"{content}"}}}}"#),
    ));
    large.push(line(SHUTDOWN));

    let mut sigint = started();
    sigint.push(Step::Signal("INT"));
    let mut sigterm = started();
    sigterm.push(Step::Signal("TERM"));
    let mut eof = started();
    eof.push(Step::CloseStdin);

    vec![
        ("normal", normal),
        ("malformed", malformed),
        ("large", large),
        ("sigint", sigint),
        ("sigterm", sigterm),
        ("eof", eof),
    ]
}

fn provider() -> PathBuf {
    peers::source("denobridge/provider.ts")
}

/// Deno's own cache directory (`DENO_DIR`: transpiled TypeScript, code cache). Deno needs one
/// it can write: see `behind_sandpipe`.
fn deno_dir() -> &'static Path {
    static DIR: std::sync::OnceLock<tempfile::TempDir> = std::sync::OnceLock::new();
    DIR.get_or_init(|| tempfile::tempdir().expect("temp dir"))
        .path()
}

/// The Go host's command line for a provider without a deno.json: `deno run -q <abs path>`.
fn deno_args() -> Vec<String> {
    vec![
        "run".into(),
        "-q".into(),
        provider().to_str().expect("UTF-8 path").into(),
    ]
}

fn direct(steps: &[Step]) -> Transcript {
    let mut cmd = Command::new(peers::deno());
    cmd.args(deno_args()).env("DENO_DIR", deno_dir());
    play(&mut cmd, steps)
}

fn behind_sandpipe(framing: Option<&str>, steps: &[Step]) -> Transcript {
    let mut cmd = Command::new(peers::sandpipe());
    cmd.arg("run");
    if let Some(framing) = framing {
        cmd.args(["--framing", framing]);
    }
    // What Deno needs beyond the automatic grants, each named:
    // - a cache directory: sandpipe empties the environment, and without DENO_DIR (or HOME)
    //   Deno stops at once ("Could not resolve global Deno cache directory"); a cache it
    //   cannot write makes Deno 2.9.6 panic in `stacker` (pthread_getattr_np reads
    //   /proc/self/maps, which Landlock hides);
    // - the provider's directory: the automatic grant covers the script named on the command
    //   line, not the module it imports (./denobridge.ts).
    let cache = deno_dir().to_str().expect("UTF-8 path");
    let provider_dir = provider()
        .parent()
        .expect("the provider's directory")
        .to_str()
        .expect("UTF-8 path")
        .to_owned();
    cmd.args(["--env", &format!("DENO_DIR={cache}"), "--dir", cache])
        .args(["--dir", &format!("{provider_dir}:ro")]);
    cmd.arg(peers::deno()).args(deno_args());
    play(&mut cmd, steps)
}

/// The provider's own stderr lines: all but sandpipe's (`sandpipe: …`).
fn own_stderr(t: &Transcript) -> Vec<String> {
    String::from_utf8_lossy(&t.stderr)
        .lines()
        .filter(|l| !l.starts_with("sandpipe: "))
        .map(str::to_owned)
        .collect()
}

#[test]
fn deno_provider_behind_sandpipe_run_is_the_provider_run_directly() {
    let mut tally = Tally::default();
    for (name, steps) in scenarios() {
        let want = direct(&steps);
        assert_eq!(want.broke, None, "{name}, directly: {want:?}");
        tally.record("directly", name, Ok(()));
        for framing in [None, Some("lines")] {
            let got = behind_sandpipe(framing, &steps);
            let way = match framing {
                None => "sandpipe run Native".to_owned(),
                Some(f) => format!("sandpipe run --framing {f} Native"),
            };
            // The provider's stderr (which the Go host logs) passes through too.
            let outcome = want.same_for_engine(&got).and_then(|()| {
                if own_stderr(&want) == own_stderr(&got) {
                    Ok(())
                } else {
                    Err(format!(
                        "the provider's stderr differs:\n{:?}\nvs\n{:?}",
                        own_stderr(&want),
                        own_stderr(&got)
                    ))
                }
            });
            tally.record(&way, name, outcome);
        }
    }
    tally.finish("denobridge provider on deno 2.9.6");
}

/// The scenarios themselves, run directly: the answers the denobridge library gives, so that
/// a stand-in that matches them is known to match the right thing.
#[test]
fn the_provider_answers_as_the_denobridge_library_does() {
    let scenarios = scenarios();
    let run = |name: &str| {
        let steps = &scenarios
            .iter()
            .find(|(n, _)| *n == name)
            .expect("scenario")
            .1;
        direct(steps)
    };
    let text = |t: &Transcript| String::from_utf8(t.stdout.clone()).expect("UTF-8");

    let normal = run("normal");
    assert_eq!(
        text(&normal),
        [
            r#"{"jsonrpc":"2.0","id":0,"result":{"ok":true}}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{"id":"r1","state":{"size":5,"content":"hello"}}}"#,
            r#"{"jsonrpc":"2.0","id":2,"result":{"props":{"name":"a","content":"hello"},"state":{"size":5,"content":"hello"}}}"#,
            r#"{"jsonrpc":"2.0","id":3,"result":{"state":{"size":3,"content":"bye"}}}"#,
            r#"{"jsonrpc":"2.0","id":4,"error":{"code":-32603,"message":"Internal error"}}"#,
            r#"{"jsonrpc":"2.0","id":5,"error":{"code":-32601,"message":"Method not found"}}"#,
            r#"{"jsonrpc":"2.0","id":6,"result":{"done":true}}"#,
            r#"{"jsonrpc":"2.0","id":7,"result":{"exists":false}}"#,
            "",
        ]
        .join("\n")
    );
    assert_eq!(normal.status, "exit code 0");
    // The failure's detail goes to stderr only, as the library's `wrapMethods` does.
    assert_eq!(
        normal
            .stderr_lines("uncaught error Error: refusing to create b")
            .len(),
        1
    );

    // A line that is not JSON gets -32700 with the parser's message, and the provider serves
    // the next request.
    let malformed = run("malformed");
    let answers: Vec<serde_json::Value> = text(&malformed)
        .lines()
        .map(|l| serde_json::from_str(l).expect("the provider writes JSON"))
        .collect();
    for bad in &answers[1..3] {
        assert_eq!(bad["id"], serde_json::Value::Null, "{bad}");
        assert_eq!(bad["error"]["code"], -32700, "{bad}");
        assert_eq!(bad["error"]["message"], "Parse error", "{bad}");
        assert!(
            bad["error"]["data"]
                .as_str()
                .is_some_and(|d| d.starts_with("SyntaxError: ")),
            "{bad}"
        );
    }
    assert_eq!(answers[3]["result"]["ok"], true);
    assert_eq!(malformed.status, "exit code 0");

    let large = run("large");
    assert!(large.stdout.len() > 3 << 19, "{} bytes", large.stdout.len());

    assert_eq!(run("sigint").status, "killed by signal 2");
    assert_eq!(run("sigterm").status, "killed by signal 15");
    assert_eq!(run("eof").status, "exit code 0");
}
