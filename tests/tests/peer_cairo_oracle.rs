//! Transparent stand-in, Cairo oracle: an oracle written with the real SDK from crates.io
//! (`cairo-oracle-server` 0.1.0, `tests/peers/cairo-oracle`), driven as the Cairo executor
//! drives a `stdio:` oracle. Each scenario runs the native oracle directly, then the same
//! oracle behind `sandpipe run` (native, and built for wasm32-wasip2) three ways, raw, with
//! `--framing lines`, and with `--protocol oracle` (sandpipe's supervisor between engine and
//! oracle), under the default limits; the engine must see the same stdout bytes and the same
//! end.
//!
//! The SDK logs every line it receives on stderr (`recv: …`), so the tests also check that
//! each engine line, malformed ones included, reached the oracle unchanged.

use std::process::Command;

use sandpipe_tests::Target;
use sandpipe_tests::stand_in::{Step, Tally, Transcript, play};
use sandpipe_tests::{cli, peers};

const SHUTDOWN: &str = r#"{"jsonrpc":"2.0","method":"shutdown"}"#;

fn line(text: &str) -> Step {
    Step::Send(format!("{text}\n").into_bytes())
}

/// A request and the wait for its one answer.
fn call(id: u64, selector: &str, calldata: &[&str]) -> [Step; 2] {
    [
        line(&peers::oracle_invoke(id, selector, calldata)),
        Step::Expect(1),
    ]
}

/// Start-up as the executor does it: read `ready`, acknowledge it, then one call.
fn started() -> Vec<Step> {
    let mut steps = vec![Step::Expect(1), line(peers::ORACLE_READY_ACK)];
    steps.extend(call(1, "sqrt", &["0x10"]));
    steps
}

/// `echo` of `n` felts: `[n, f1 … fn]` as calldata (Cairo's serialisation of an array).
fn large_echo(id: u64, n: usize) -> String {
    let mut calldata = vec![format!("{n:#x}")];
    calldata.extend((0..n).map(|i| format!("{:#x}", 0x1000_0000 + i)));
    let refs: Vec<&str> = calldata.iter().map(String::as_str).collect();
    peers::oracle_invoke(id, "echo", &refs)
}

/// (name, steps). Every scenario but the signals ends the session the protocol's way or by
/// closing stdin, so the oracle exits by itself.
fn scenarios() -> Vec<(&'static str, Vec<Step>)> {
    let mut normal = started();
    normal.extend(call(2, "add", &["0x2", "0x3"]));
    normal.extend(call(3, "funny_hash", &["0x3"])); // odd: the handler fails
    normal.extend(call(4, "funny_hash", &["0x4"]));
    normal.extend(call(5, "add", &["0x2"])); // too few arguments: the SDK's decode error
    normal.push(line(SHUTDOWN));

    let mut malformed = started();
    malformed.push(line("this is not json"));
    malformed.push(line(r#"{"jsonrpc":"2.0","id":7,"#));
    malformed.extend(call(8, "add", &["0x20", "0x22"]));
    malformed.push(line(SHUTDOWN));

    let big = large_echo(2, 100_000);
    assert!(
        big.len() >= 1 << 20,
        "the large frame is {} bytes",
        big.len()
    );
    let mut large = started();
    large.extend([line(&big), Step::Expect(1)]);
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

/// The engine's command for `program`. The oracle's error messages are the SDK's `{err:?}` of
/// an `anyhow::Error`, which carries a stack backtrace when `RUST_BACKTRACE` or
/// `RUST_LIB_BACKTRACE` is set: the engine here runs without them, so that both ways see the
/// same environment (sandpipe gives a plugin an empty one unless `--env` grants more).
fn engine_command(program: impl AsRef<std::ffi::OsStr>) -> Command {
    let mut cmd = Command::new(program);
    cmd.env_remove("RUST_BACKTRACE")
        .env_remove("RUST_LIB_BACKTRACE");
    cmd
}

fn direct(steps: &[Step]) -> Transcript {
    play(
        &mut engine_command(peers::cairo_oracle(Target::Native)),
        steps,
    )
}

fn behind_sandpipe(target: Target, way: &[&str], steps: &[Step]) -> Transcript {
    let mut cmd = engine_command(peers::sandpipe());
    cmd.arg("run").args(way).arg(peers::cairo_oracle(target));
    play(&mut cmd, steps)
}

/// How the engine runs the oracle through sandpipe: a transparent pipe, raw or with the
/// framing named, or with sandpipe speaking the oracle protocol (its supervisor between the
/// engine and the oracle).
const WAYS: [&[&str]; 3] = [&[], &["--framing", "lines"], &["--protocol", "oracle"]];

/// What the engine must see behind `sandpipe run` of `target` (with `--protocol` or not) for
/// a scenario, and why.
///
/// As a transparent pipe, a native oracle gets every signal (sandpipe forwards it to the
/// process group), so it ends as it does directly. A wasm plugin cannot be signalled: SIGTERM
/// closes its stdin (the oracle then ends as at EOF), and SIGINT is ignored because the
/// engine's stdin is a pipe, not a terminal (the oracle keeps serving). With `--protocol`,
/// the first signal not ignored ends the engine's input instead, so the oracle, native too,
/// ends as at EOF.
fn expected(target: Target, protocol: bool, name: &str, steps: &[Step]) -> (Vec<Step>, Vec<Step>) {
    let replace = |with: &[Step]| {
        let mut plain: Vec<Step> = steps.to_vec();
        plain.pop();
        plain.extend_from_slice(with);
        plain
    };
    match (target, name) {
        (Target::Wasm, "sigterm") => (steps.to_vec(), replace(&[Step::CloseStdin])),
        (Target::Native, "sigterm" | "sigint") if protocol => {
            (steps.to_vec(), replace(&[Step::CloseStdin]))
        }
        (Target::Wasm, "sigint") => {
            // Still serving after the SIGINT; then the protocol's own end.
            let mut after = steps.to_vec();
            after.extend(call(2, "sqrt", &["0x51"]));
            after.push(line(SHUTDOWN));
            let mut direct = replace(&[]);
            direct.extend(call(2, "sqrt", &["0x51"]));
            direct.push(line(SHUTDOWN));
            (after, direct)
        }
        _ => (steps.to_vec(), steps.to_vec()),
    }
}

/// The SDK's log lines on stderr (`recv: `, `send: `, `warn: `), in order.
fn sdk_log(t: &Transcript) -> Vec<String> {
    String::from_utf8_lossy(&t.stderr)
        .lines()
        .filter(|l| {
            ["recv: ", "send: ", "warn: "]
                .iter()
                .any(|p| l.starts_with(p))
        })
        .map(str::to_owned)
        .collect()
}

/// Every scenario, under one sandpipe target, raw and with `--framing lines`.
fn stand_in_matches_direct(target: Target) {
    let mut tally = Tally::default();
    for (name, steps) in scenarios() {
        // The oracle run directly, once per distinct way of driving it.
        let mut directly: Vec<(Vec<Step>, Transcript)> = Vec::new();
        for way in WAYS {
            let protocol = way.contains(&"--protocol");
            let (stand_in_steps, direct_steps) = expected(target, protocol, name, &steps);
            if !directly.iter().any(|(s, _)| *s == direct_steps) {
                let t = direct(&direct_steps);
                assert_eq!(t.broke, None, "{name}, directly: {t:?}");
                directly.push((direct_steps.clone(), t));
            }
            let want = &directly
                .iter()
                .find(|(s, _)| *s == direct_steps)
                .expect("run above")
                .1;
            let got = behind_sandpipe(target, way, &stand_in_steps);
            let way = format!(
                "sandpipe run {}{target:?}",
                way.iter().map(|a| format!("{a} ")).collect::<String>()
            );
            // What the engine sent reached the oracle byte for byte, and the oracle did the
            // same with it: the SDK logs every line it receives and sends, and each warning.
            let outcome = want.same_for_engine(&got).and_then(|()| {
                if sdk_log(want) == sdk_log(&got) {
                    Ok(())
                } else {
                    Err(format!(
                        "the oracle's own log differs:\n{:?}\nvs\n{:?}",
                        sdk_log(want),
                        sdk_log(&got)
                    ))
                }
            });
            tally.record(&way, name, outcome);
        }
    }
    tally.record("directly", "every scenario", Ok(()));
    tally.finish("cairo-oracle-server 0.1.0");
}

#[test]
fn wasm_oracle_behind_sandpipe_run_is_the_oracle_run_directly() {
    stand_in_matches_direct(Target::Wasm);
}

#[test]
fn native_oracle_behind_sandpipe_run_is_the_oracle_run_directly() {
    stand_in_matches_direct(Target::Native);
}

/// The scenarios themselves, run directly: what the real SDK does, so that a stand-in that
/// matches it is known to match the right thing.
#[test]
fn the_real_sdk_answers_as_the_protocol_says() {
    let scenarios = scenarios();
    let run = |name: &str| {
        let steps = &scenarios
            .iter()
            .find(|(n, _)| *n == name)
            .expect("scenario")
            .1;
        direct(steps)
    };

    let normal = run("normal");
    let lines: Vec<String> = String::from_utf8(normal.stdout.clone())
        .expect("UTF-8")
        .lines()
        .map(str::to_owned)
        .collect();
    assert_eq!(lines[0], r#"{"jsonrpc":"2.0","id":0,"method":"ready"}"#);
    assert_eq!(lines[1], r#"{"jsonrpc":"2.0","id":1,"result":["0x4"]}"#);
    assert_eq!(lines[2], r#"{"jsonrpc":"2.0","id":2,"result":["0x5"]}"#);
    assert!(
        lines[3].starts_with(
            r#"{"jsonrpc":"2.0","id":3,"error":{"code":-32603,"message":"value must be even"#
        ),
        "{}",
        lines[3]
    );
    assert_eq!(lines[4], r#"{"jsonrpc":"2.0","id":4,"result":["0x10"]}"#);
    assert!(lines[5].contains(r#""id":5,"error""#), "{}", lines[5]);
    assert_eq!(lines.len(), 6);
    assert_eq!(normal.status, "exit code 0");

    // A malformed line: a warning on stderr, no answer, and the next request is served.
    let malformed = run("malformed");
    let text = String::from_utf8(malformed.stdout.clone()).expect("UTF-8");
    assert!(
        text.ends_with("{\"jsonrpc\":\"2.0\",\"id\":8,\"result\":[\"0x42\"]}\n"),
        "{text}"
    );
    assert_eq!(text.lines().count(), 3, "{text}");
    assert_eq!(malformed.stderr_lines("warn: ").len(), 2, "{malformed:?}");
    assert_eq!(malformed.status, "exit code 0");

    let large = run("large");
    let last = large
        .stdout
        .split(|b| *b == b'\n')
        .nth(2)
        .expect("the echo");
    assert!(last.len() >= 1 << 20, "{} bytes", last.len());

    assert_eq!(run("sigint").status, "killed by signal 2");
    assert_eq!(run("sigterm").status, "killed by signal 15");
    let eof = run("eof");
    assert_eq!(eof.status, "exit code 0");
    assert_eq!(
        eof.stderr_lines("warn: "),
        ["warn: client disconnected without sending `shutdown` notification"]
    );
}

/// `sandpipe call --protocol oracle`, which is the library's `OracleClient` on the host driver,
/// against the real SDK, native and wasm: the `ready` handshake, an answer, the oracle's own
/// error with the status for it, and the shutdown notification ending the oracle cleanly.
#[test]
fn call_drives_the_real_sdk_through_the_oracle_client() {
    for target in [Target::Native, Target::Wasm] {
        let oracle = peers::cairo_oracle(target).display().to_string();
        let call = |method: &str, params: &str| {
            let args = [
                "call",
                "--protocol",
                "oracle",
                "--method",
                method,
                "--params",
                params,
                &oracle,
            ];
            let out = cli::run_command(
                {
                    let mut cmd = engine_command(peers::sandpipe());
                    cmd.args(args);
                    cmd
                },
                b"",
            );
            (
                out.status.code(),
                cli::text(&out.stdout),
                cli::text(&out.stderr),
            )
        };
        let (code, out, err) = call("sqrt", r#"["0x10"]"#);
        assert_eq!(
            (code, out.as_str()),
            (Some(0), "[\"0x4\"]\n"),
            "{target:?}: {err}"
        );
        // The SDK logs the shutdown it received: the client ended the session the protocol's way.
        assert!(
            err.contains(r#"recv: {"jsonrpc":"2.0","method":"shutdown"}"#),
            "{target:?}: {err}"
        );
        let (code, out, err) = call("funny_hash", r#"["0x3"]"#);
        assert_eq!((code, out.as_str()), (Some(1), ""), "{target:?}: {err}");
        assert!(
            err.contains("sandpipe: oracle error -32603: value must be even"),
            "{target:?}: {err}"
        );
        let (code, out, err) = call("add", r#"["0x2","0x3"]"#);
        assert_eq!(
            (code, out.as_str()),
            (Some(0), "[\"0x5\"]\n"),
            "{target:?}: {err}"
        );
    }
}
