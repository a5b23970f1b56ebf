//! An unchanged Arcaflow plugin on the real SDK (`arcaflow-plugin-sdk` 0.14.3 from PyPI,
//! `tests/peers/atp_plugin.py`: two steps, one of them with a signal handler, and a SIGTERM
//! handler) built into a component with one command,
//! `python3 -m sandpipe_guest.build --arcaflow tests/peers/atp_plugin.py -o plugin.wasm`
//! (`guest-sdk/python/sandpipe_guest/arcaflow_compat.py` inside), and played by an engine
//! written here through `sandpipe run --framing cbor plugin.wasm --atp`. The same engine plays
//! the same file natively (`python plugin.py --atp` in the venv, as an engine's podman deployer
//! runs it), and the engine must read the same bytes and see the same exit both ways.
//!
//! | scenario | checks |
//! |---|---|
//! | normal | hello v3 with both steps and the `finish` signal, `greet` → `success`, `wait` + signal → `finished` with the signal's data, client done, exit 0 |
//! | overlapping | a step started while another waits for its signal finishes first; then the signal ends the first |
//! | large frame | a 1 MiB input comes back in a 1 MiB output |
//! | malformed | a message without an `id`: the SDK's server-fatal error, exit 0 |
//! | two waits | what one thread cannot match, as documented: natively a run ends when its signal comes; in the component the run started last ends first (last in, first out) |
//!
//! `tests/tests/peers_python.rs` also runs this component under the real Arcaflow engine.
//!
//! `cargo test -p sandpipe-tests --test arcaflow_unchanged` (after `.ci/setup`).

use sandpipe_proto::atp::{Message, Value, Version};
use sandpipe_proto::frame::Framing;
use sandpipe_tests::stand_in;
use sandpipe_tests::stand_in::atp::{map, text, work_start};
use sandpipe_tests::stand_in::{Peer, Session, Transcript, Way};
use sandpipe_tests::{guests, peers, plugin_target_dir};

const PLUGIN: &str = "tests/peers/atp_plugin.py";

/// `python atp_plugin.py --atp`, run by the engine itself.
fn native() -> Session {
    let peer = Peer {
        program: peers::python(),
        args: vec![peers::source("atp_plugin.py").into(), "--atp".into()],
        env: Vec::new(),
        data_dirs: Vec::new(),
        framing: Framing::CborSeq,
    };
    Session::start(&peer, Way::Direct)
}

/// `sandpipe run --framing cbor --cache-dir DIR atp_plugin.wasm --atp`, the compiled component
/// kept in the plugin target dir (the engine's environment is empty, so sandpipe has no default
/// cache directory, and this component takes seconds to compile).
fn component() -> Session {
    let wasm = guests::arcaflow(PLUGIN);
    let mut cmd = std::process::Command::new(peers::sandpipe());
    cmd.env_clear()
        .args(["run", "--framing", "cbor", "--cache-dir"])
        .arg(plugin_target_dir().join("guests-cache"))
        .arg(wasm)
        .arg("--atp");
    Session::spawn(cmd, Framing::CborSeq, Way::Behind(Some(Framing::CborSeq)))
}

/// Play `script` natively, then against the component.
fn both(script: impl Fn(&mut Session)) -> [Transcript; 2] {
    [native as fn() -> Session, component].map(|start| {
        let mut s = start();
        script(&mut s);
        s.finish()
    })
}

/// The engine must have read the same bytes and seen the same exit both ways.
fn same(case: &str, script: impl Fn(&mut Session)) -> Transcript {
    let [want, got] = both(script);
    if let Err(diff) = stand_in::compare(case, &want, &got) {
        panic!("{diff}\n(direct = python3 natively, behind = the component)");
    }
    got
}

fn member<'a>(v: &'a Value, key: &str) -> Option<&'a Value> {
    match v {
        Value::Map(m) => m
            .iter()
            .find(|(k, _)| matches!(k, Value::Text(t) if t == key))
            .map(|(_, v)| v),
        _ => None,
    }
}

fn start(s: &mut Session, run: &str, step: &str, config: Value) {
    s.send(&work_start(run, step, config));
}

fn finish_signal(s: &mut Session, run: &str, reason: &str) {
    s.send(
        &Message::Signal {
            run_id: run.into(),
            signal_id: "finish".into(),
            data: map(&[("reason", text(reason))]),
        }
        .encode(),
    );
}

/// The start item, then the plugin's hello: v3, both steps, `wait` with its `finish` handler.
fn handshake(s: &mut Session) {
    let hello = stand_in::atp::hello(s);
    assert_eq!(hello.version, Version::V3);
    assert_eq!(
        hello.step_ids().into_iter().collect::<Vec<_>>(),
        ["greet", "wait"]
    );
    let handlers = member(&hello.schema, "steps")
        .and_then(|steps| member(steps, "wait"))
        .and_then(|wait| member(wait, "signal_handlers"))
        .and_then(|h| member(h, "finish"));
    assert!(
        handlers.is_some(),
        "no finish signal handler: {:?}",
        hello.schema
    );
}

/// The next result: its run, output id and data (an error message fails the test).
fn next_done(s: &mut Session) -> (String, String, Value) {
    let frame = s.await_frame("a result", |f| {
        matches!(
            Message::decode(f),
            Ok(Message::WorkDone { .. } | Message::Error { .. })
        )
    });
    match Message::decode(&frame) {
        Ok(Message::WorkDone { run_id, output }) => (run_id, output.output_id, output.output_data),
        other => panic!("an error instead of a result: {other:?}"),
    }
}

fn greet(s: &mut Session, run: &str, name: &str) {
    start(s, run, "greet", map(&[("name", text(name))]));
    let (id, output, data) = next_done(s);
    assert_eq!((id.as_str(), output.as_str()), (run, "success"));
    assert_eq!(
        member(&data, "message"),
        Some(&text(&format!("Hello, {name}!")))
    );
}

fn client_done(s: &mut Session) {
    s.send(&Message::ClientDone.encode());
}

#[test]
fn normal_traffic_hello_both_steps_a_signal_and_client_done() {
    let t = same("normal", |s| {
        handshake(s);
        greet(s, "r1", "sandpipe");
        start(s, "r2", "wait", map(&[("label", text("second"))]));
        finish_signal(s, "r2", "engine says so");
        let (id, output, data) = next_done(s);
        assert_eq!((id.as_str(), output.as_str()), ("r2", "finished"));
        assert_eq!(member(&data, "reason"), Some(&text("engine says so")));
        assert_eq!(member(&data, "label"), Some(&text("second")));
        client_done(s);
    });
    assert_eq!(t.status, "exit code 0");
}

#[test]
fn a_step_started_while_another_waits_for_its_signal() {
    let t = same("overlapping", |s| {
        handshake(s);
        start(s, "w", "wait", map(&[("label", text("waits"))]));
        greet(s, "g", "meanwhile");
        finish_signal(s, "w", "now");
        let (id, output, _) = next_done(s);
        assert_eq!((id.as_str(), output.as_str()), ("w", "finished"));
        client_done(s);
    });
    assert_eq!(t.status, "exit code 0");
}

#[test]
fn a_large_frame_each_way() {
    let name = "x".repeat(1 << 20);
    let t = same("large frame", |s| {
        handshake(s);
        greet(s, "big", &name);
        client_done(s);
    });
    assert!(t.stdout.len() > 1 << 20, "{} bytes", t.stdout.len());
    assert_eq!(t.status, "exit code 0");
}

#[test]
fn a_malformed_message_is_the_sdks_server_fatal_error() {
    let t = same("malformed", |s| {
        handshake(s);
        // Valid CBOR, not an ATP message (no `id`).
        s.send(
            &sandpipe_proto::atp::Hello {
                version: Version::V3,
                schema: Value::Null,
                extra: Vec::new(),
            }
            .encode(),
        );
        s.await_frame("the error message", |f| {
            matches!(
                Message::decode(f),
                Ok(Message::Error {
                    server_fatal: true,
                    ..
                })
            )
        });
    });
    assert_eq!(t.status, "exit code 0");
}

#[test]
fn two_waits_end_as_signalled_natively_and_last_in_first_out_in_a_component() {
    // The documented limit of one thread (arcaflow_compat.py): natively each run ends when its
    // signal comes; in the component the run started last is on top of the stack, so it ends
    // first, whichever signal came first.
    let two_waits = |s: &mut Session| {
        handshake(s);
        start(s, "first", "wait", map(&[("label", text("1"))]));
        start(s, "second", "wait", map(&[("label", text("2"))]));
        finish_signal(s, "first", "a");
    };
    let mut s = native();
    two_waits(&mut s);
    assert_eq!(next_done(&mut s).0, "first", "natively");
    finish_signal(&mut s, "second", "b");
    assert_eq!(next_done(&mut s).0, "second", "natively");
    client_done(&mut s);
    assert_eq!(s.finish().status, "exit code 0");

    let mut s = component();
    two_waits(&mut s);
    finish_signal(&mut s, "second", "b");
    let order = [next_done(&mut s).0, next_done(&mut s).0];
    assert_eq!(
        order,
        ["second", "first"],
        "in the component; {}",
        s.stderr()
    );
    client_done(&mut s);
    assert_eq!(s.finish().status, "exit code 0");
}
