//! Transparent stand-in, Python peers: real plugins nobody here wrote, installed pinned by
//! `.ci/setup` into one venv made from the machine's `python3` (a pyenv CPython), played by an
//! engine written here. Each scenario runs the peer directly, then behind `sandpipe run` with
//! raw framing, then behind `sandpipe run --framing <the protocol's>`, all with sandpipe's
//! default limits and no `--dir` for the interpreter; the byte transcripts (everything the
//! engine read from the process it spawned, and that process's exit status) must be identical.
//!
//! | peer | framing | scenarios |
//! |---|---|---|
//! | ATP plugin on `arcaflow-plugin-sdk` (`tests/peers/atp_plugin.py`) | CBOR sequence | normal, malformed message, not CBOR, large frame, SIGINT, SIGTERM, stdin EOF |
//! | `python-lsp-server` (`pylsp`) | Content-Length | normal, malformed message, large frame, SIGINT, SIGTERM, stdin EOF |
//! | `finecode-extension-runner` (stdio) | Content-Length | normal, malformed message, large frame, SIGINT, SIGTERM, stdin EOF |
//!
//! The real Arcaflow engine (PyPI `arcaflow` 0.21.0) runs a workflow whose plugin step goes
//! through a podman stand-in: the SDK plugin directly and behind `sandpipe run`, and the
//! project's Rust example (`examples/atp`) natively and, behind `sandpipe run`, as wasm; the
//! workflow output must be the same. The same SDK plugin file, unchanged, also runs as a
//! component (`python3 -m sandpipe_guest.build --arcaflow`, see `arcaflow_unchanged.rs`).
//!
//! Nothing is normalised: none of these peers writes a time or a pid on stdout.
//!
//! `cargo test -p sandpipe-tests --test peers_python` (after `.ci/setup`); `atp`, `pylsp` or
//! `finecode` as a filter runs one peer.

use std::ffi::OsString;
use std::path::Path;

use sandpipe_proto::atp::{Message, Value};
use sandpipe_proto::frame::Framing;
use sandpipe_tests::peers;
use sandpipe_tests::stand_in;
use sandpipe_tests::stand_in::atp::{map, text, work_start};
use sandpipe_tests::stand_in::{Peer, Session, Transcript, Way};
use serde_json::{Value as Json, json};

/// Run `script` against `peer(way)` each way and check that every transcript equals the
/// direct one; every way runs, and the failure names each one that differed. Returns the
/// direct transcript.
fn each_way(
    case: &str,
    framing: Framing,
    peer: impl Fn(Way) -> Peer,
    script: impl Fn(&mut Session),
) -> Transcript {
    each_of(case, &Way::all(framing), peer, script)
}

/// Like [`each_way`], over `ways` (the first is the reference).
fn each_of(
    case: &str,
    ways: &[Way],
    peer: impl Fn(Way) -> Peer,
    script: impl Fn(&mut Session),
) -> Transcript {
    let mut direct: Option<Transcript> = None;
    let mut differ = Vec::new();
    for &way in ways {
        let mut session = Session::start(&peer(way), way);
        script(&mut session);
        let got = session.finish();
        let stderr = got.stderr_text();
        match &direct {
            None => direct = Some(got),
            Some(want) => {
                let name = format!("{case}, {way}; its stderr:\n{stderr}\n");
                if let Err(diff) = stand_in::compare(&name, want, &got) {
                    differ.push(diff);
                }
            }
        }
    }
    assert!(differ.is_empty(), "{}", differ.join("\n"));
    direct.expect("the direct run")
}

fn py(args: &[&str]) -> Vec<OsString> {
    args.iter().map(OsString::from).collect()
}

// --- ATP: a plugin on the real Arcaflow SDK ------------------------------------------------

fn atp_peer(_: Way) -> Peer {
    let script = peers::source("atp_plugin.py");
    Peer {
        program: peers::python(),
        args: vec![script.into_os_string(), "--atp".into()],
        env: Vec::new(),
        data_dirs: Vec::new(),
        framing: Framing::CborSeq,
    }
}

/// The start item (`null`), then the plugin's v3 hello.
fn atp_handshake(s: &mut Session) {
    assert_eq!(stand_in::atp::hello(s).version.number(), 3);
}

fn atp_done(s: &mut Session, run: &str) -> Message {
    let frame = s.await_frame(
        &format!("work done for {run}"),
        |f| matches!(Message::decode(f), Ok(Message::WorkDone { run_id, .. }) if run_id == run),
    );
    Message::decode(&frame).expect("work done")
}

fn atp_greet(s: &mut Session, run: &str, name: &str) -> Message {
    s.send(&work_start(run, "greet", map(&[("name", text(name))])));
    atp_done(s, run)
}

#[test]
fn atp_normal_traffic() {
    each_way("atp normal", Framing::CborSeq, atp_peer, |s| {
        atp_handshake(s);
        let Message::WorkDone { output, .. } = atp_greet(s, "r1", "sandpipe") else {
            unreachable!()
        };
        assert_eq!(output.output_id, "success");
        // A step with a signal handler: it finishes when the signal arrives.
        s.send(&work_start("r2", "wait", map(&[("label", text("second"))])));
        s.send(
            &Message::Signal {
                run_id: "r2".into(),
                signal_id: "finish".into(),
                data: map(&[("reason", text("engine says so"))]),
            }
            .encode(),
        );
        let Message::WorkDone { output, .. } = atp_done(s, "r2") else {
            unreachable!()
        };
        assert_eq!(output.output_id, "finished");
        s.send(&Message::ClientDone.encode());
    });
}

#[test]
fn atp_malformed_message() {
    // Valid CBOR, not an ATP message: the SDK answers with a server-fatal error and stops.
    let t = each_way("atp malformed", Framing::CborSeq, atp_peer, |s| {
        atp_handshake(s);
        s.send(
            &sandpipe_proto::atp::Hello {
                version: sandpipe_proto::atp::Version::V3,
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
fn atp_not_cbor() {
    // 0x1c is a reserved CBOR initial byte: the engine's stream loses its framing. The SDK
    // reports the decode error and stops.
    let script = |s: &mut Session| {
        atp_handshake(s);
        atp_greet(s, "r1", "before");
        s.send(&[0x1c]);
    };
    let marker: &[u8] = b"Error while decoding CBOR:";
    // Raw: byte for byte what the engine sees directly, the bad byte passed on unjudged.
    let t = each_of(
        "atp not cbor",
        &[Way::Direct, Way::Behind(None)],
        atp_peer,
        script,
    );
    let cut = t
        .stdout
        .windows(marker.len())
        .position(|w| w == marker)
        .unwrap_or_else(|| panic!("{}", stand_in::render(&t.stdout)));
    // With --framing cbor, sandpipe validates what the untrusted plugin writes (README,
    // "Standing in for a plugin"): the SDK writes that error as plain text on stdout (its
    // "stderr" points there), which is not CBOR. The engine gets every frame before it, then
    // the end of the stream, and status 123 with the reason on stderr: the documented
    // difference, not the plugin's own exit.
    let behind = Way::Behind(Some(Framing::CborSeq));
    let mut session = Session::start(&atp_peer(behind), behind);
    script(&mut session);
    let got = session.finish();
    let stderr = got.stderr_text();
    // The text's first bytes may still parse as CBOR items (`E` opens a 5-byte string), so
    // the engine gets everything before the text, and no more than the plugin wrote.
    assert!(
        got.stdout.len() >= cut && t.stdout.starts_with(&got.stdout),
        "{stderr}\nbehind: {}\ndirect: {}",
        stand_in::render(&got.stdout),
        stand_in::render(&t.stdout)
    );
    assert_eq!(got.status, "exit code 123", "{stderr}");
    assert!(
        stderr.contains("sandpipe: bad frame from plugin"),
        "{stderr}"
    );
}

#[test]
fn atp_large_frame() {
    let name = "x".repeat(1 << 20);
    let t = each_way("atp large", Framing::CborSeq, atp_peer, |s| {
        atp_handshake(s);
        atp_greet(s, "big", &name);
        s.send(&Message::ClientDone.encode());
    });
    assert!(t.stdout.len() > 1 << 20);
    assert_eq!(t.status, "exit code 0");
}

#[test]
fn atp_sigint_is_ignored() {
    // The SDK ignores SIGINT on purpose; behind sandpipe, with a pipe on its stdin, so does
    // sandpipe.
    let t = each_way("atp SIGINT", Framing::CborSeq, atp_peer, |s| {
        atp_handshake(s);
        atp_greet(s, "r1", "before");
        s.signal("INT");
        atp_greet(s, "r2", "after");
        s.send(&Message::ClientDone.encode());
    });
    assert_eq!(t.status, "exit code 0");
}

#[test]
fn atp_sigterm_reaches_the_plugin() {
    // The plugin's SIGTERM handler exits 0: sandpipe must hand the signal over, not die of it.
    let t = each_way("atp SIGTERM", Framing::CborSeq, atp_peer, |s| {
        atp_handshake(s);
        atp_greet(s, "r1", "before");
        // The SDK answers `work_done` before it has finished handling the work start; its
        // handler's `sys.exit` landing in that window surfaces as a work error ("release
        // unlocked lock" from `threading`), directly as behind sandpipe, by chance. Let the
        // plugin go idle first: this case is about the signal reaching it, not that race.
        std::thread::sleep(std::time::Duration::from_millis(300));
        s.signal("TERM");
    });
    assert_eq!(t.status, "exit code 0");
}

#[test]
fn atp_stdin_eof() {
    each_way("atp stdin EOF", Framing::CborSeq, atp_peer, |s| {
        atp_handshake(s);
        atp_greet(s, "r1", "before");
        s.close_stdin();
    });
}

// --- LSP: python-lsp-server ----------------------------------------------------------------

/// One Content-Length frame, as VS Code's client writes it.
fn lsp(msg: &Json) -> Vec<u8> {
    let body = msg.to_string();
    let mut out = format!("Content-Length: {}\r\n\r\n", body.len()).into_bytes();
    out.extend_from_slice(body.as_bytes());
    out
}

fn json_of(frame: &[u8]) -> Json {
    serde_json::from_slice(frame).unwrap_or(Json::Null)
}

fn is_response(frame: &[u8], id: u64) -> bool {
    let m = json_of(frame);
    m.get("method").is_none() && m["id"] == json!(id)
}

fn request(s: &mut Session, id: u64, method: &str, params: Json) -> Json {
    s.send(&lsp(
        &json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}),
    ));
    json_of(&s.await_frame(&format!("the answer to {method}"), |f| is_response(f, id)))
}

fn notify(s: &mut Session, method: &str, params: Json) {
    s.send(&lsp(
        &json!({"jsonrpc": "2.0", "method": method, "params": params}),
    ));
}

/// pylsp with `HOME` (parso and jedi keep their caches under it; without `HOME` Python looks
/// the user up in `/etc/passwd`, which a sandboxed plugin cannot read).
fn pylsp_peer(home: &Path) -> Peer {
    Peer {
        program: peers::python(),
        args: py(&["-m", "pylsp"]),
        env: vec![("HOME".into(), home.as_os_str().to_owned())],
        data_dirs: vec![home.to_owned()],
        framing: Framing::ContentLength,
    }
}

fn pylsp_each_way(case: &str, script: impl Fn(&mut Session)) -> Transcript {
    let home = tempfile::tempdir().expect("tempdir");
    each_way(
        case,
        Framing::ContentLength,
        |_| pylsp_peer(home.path()),
        script,
    )
}

const DOC_URI: &str = "file:///nowhere/example.py";

fn pylsp_open(s: &mut Session, text: &str) {
    let init = request(
        s,
        1,
        "initialize",
        json!({"processId": null, "rootUri": null, "capabilities": {}}),
    );
    assert!(init["result"]["capabilities"].is_object(), "{init}");
    notify(s, "initialized", json!({}));
    notify(
        s,
        "textDocument/didOpen",
        json!({"textDocument": {"uri": DOC_URI, "languageId": "python", "version": 1, "text": text}}),
    );
    // pylsp lints an opened document on a timer; waiting for its diagnostics keeps the order
    // of what follows independent of timing.
    s.await_frame("publishDiagnostics", |f| {
        json_of(f)["method"] == "textDocument/publishDiagnostics"
    });
}

fn pylsp_hover(s: &mut Session, id: u64, line: u64) -> Json {
    request(
        s,
        id,
        "textDocument/hover",
        json!({"textDocument": {"uri": DOC_URI}, "position": {"line": line, "character": 1}}),
    )
}

fn pylsp_close(s: &mut Session, id: u64) {
    request(s, id, "shutdown", Json::Null);
    notify(s, "exit", Json::Null);
}

const SOURCE: &str =
    "def greet(name):\n    \"\"\"Say hello to NAME.\"\"\"\n    return name\n\n\ngreet('x')\n";

#[test]
fn pylsp_normal_traffic() {
    let t = pylsp_each_way("pylsp normal", |s| {
        pylsp_open(s, SOURCE);
        let hover = pylsp_hover(s, 2, 5);
        assert!(
            hover["result"]["contents"]["value"]
                .as_str()
                .is_some_and(|v| v.contains("Say hello to NAME.")),
            "{hover}"
        );
        pylsp_close(s, 3);
    });
    assert_eq!(t.status, "exit code 0");
}

#[test]
fn pylsp_malformed_message() {
    // A frame whose body is not JSON: pylsp logs it and serves the next request.
    pylsp_each_way("pylsp malformed", |s| {
        pylsp_open(s, SOURCE);
        s.send(b"Content-Length: 9\r\n\r\n{not json");
        pylsp_hover(s, 2, 5);
        pylsp_close(s, 3);
    });
}

#[test]
fn pylsp_large_frame() {
    // A 1 MiB docstring travels in didOpen and comes back in the hover.
    let doc = "y".repeat(1 << 20);
    let text = format!("def big():\n    \"\"\"{doc}\"\"\"\n\n\nbig()\n");
    let t = pylsp_each_way("pylsp large", |s| {
        pylsp_open(s, &text);
        let hover = pylsp_hover(s, 2, 4);
        assert!(
            hover.to_string().len() > 1 << 20,
            "{:.300}",
            hover.to_string()
        );
        pylsp_close(s, 3);
    });
    assert!(t.stdout.len() > 1 << 20);
}

#[test]
fn pylsp_sigint() {
    // No stdin EOF right after the signal: behind sandpipe the signal and the EOF travel
    // separately (the signal forwarded, the EOF through the bridge), so an EOF sent at once
    // could reach pylsp first and it would exit 0 before the SIGINT lands.
    pylsp_each_way("pylsp SIGINT", |s| {
        pylsp_open(s, SOURCE);
        s.signal("INT");
    });
}

#[test]
fn pylsp_sigterm() {
    pylsp_each_way("pylsp SIGTERM", |s| {
        pylsp_open(s, SOURCE);
        s.signal("TERM");
    });
}

#[test]
fn pylsp_stdin_eof() {
    pylsp_each_way("pylsp stdin EOF", |s| {
        pylsp_open(s, SOURCE);
        s.close_stdin();
    });
}

// --- FineCode: finecode-extension-runner, stdio ---------------------------------------------

/// The runner as the workspace manager starts it; it writes its log under the project
/// (`.venvs/<env>/logs`), so the project directory is its data.
fn finecode_peer(project: &Path) -> Peer {
    Peer {
        program: peers::python(),
        args: vec![
            "-m".into(),
            "finecode_extension_runner.cli".into(),
            "start".into(),
            format!("--project-path={}", project.display()).into(),
            "--env-name=dev_workspace".into(),
        ],
        env: Vec::new(),
        data_dirs: vec![project.to_owned()],
        framing: Framing::ContentLength,
    }
}

/// The workspace manager's frames carry `Content-Type`, like the real one.
fn wm(msg: &Json) -> Vec<u8> {
    let body = msg.to_string();
    let mut out = format!(
        "Content-Length: {}\r\nContent-Type: application/vscode-jsonrpc; charset=utf-8\r\n\r\n",
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(body.as_bytes());
    out
}

fn wm_request(s: &mut Session, id: u64, method: &str, params: Json) -> Json {
    s.send(&wm(
        &json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}),
    ));
    json_of(&s.await_frame(&format!("the answer to {method}"), |f| is_response(f, id)))
}

fn command(s: &mut Session, id: u64, name: &str, arguments: Json) -> Json {
    wm_request(
        s,
        id,
        "workspace/executeCommand",
        json!({"command": name, "arguments": arguments}),
    )
}

fn finecode_start(s: &mut Session, project: &Path) {
    let init = wm_request(
        s,
        1,
        "initialize",
        json!({"processId": null, "rootUri": null, "capabilities": {},
               "clientInfo": {"name": "FineCode_WorkspaceManager", "version": "0.1.0"}}),
    );
    assert!(init["result"]["capabilities"].is_object(), "{init}");
    s.send(&wm(
        &json!({"jsonrpc": "2.0", "method": "initialized", "params": {}}),
    ));
    let updated = command(
        s,
        2,
        "finecodeRunner/updateConfig",
        json!([project.display().to_string(), "demo", {"actions": [], "action_handler_configs": {}}]),
    );
    assert_eq!(updated["result"], json!({}), "{updated}");
}

fn finecode_work(s: &mut Session, first_id: u64) {
    let run = command(s, first_id, "actions/run", json!(["lint", {}, null]));
    assert!(
        run["result"]["error"]
            .as_str()
            .is_some_and(|e| e.contains("lint")),
        "{run}"
    );
    let path = command(s, first_id + 1, "packages/resolvePath", json!(["loguru"]));
    assert!(
        path["result"]["packagePath"]
            .as_str()
            .is_some_and(|p| p.ends_with("site-packages/loguru")),
        "{path}"
    );
}

fn finecode_stop(s: &mut Session, id: u64) {
    wm_request(s, id, "shutdown", Json::Null);
    s.send(&wm(&json!({"jsonrpc": "2.0", "method": "exit"})));
}

fn finecode_each_way(case: &str, script: impl Fn(&mut Session, &Path)) -> Transcript {
    let project = tempfile::tempdir().expect("tempdir");
    let p = project.path().to_owned();
    each_way(
        case,
        Framing::ContentLength,
        |_| finecode_peer(&p),
        |s| script(s, &p),
    )
}

#[test]
fn finecode_normal_traffic() {
    let t = finecode_each_way("finecode normal", |s, project| {
        finecode_start(s, project);
        finecode_work(s, 3);
        finecode_stop(s, 5);
    });
    assert_eq!(t.status, "exit code 0");
}

#[test]
fn finecode_malformed_message() {
    // The runner (pygls) answers a body that is not JSON with a window/showMessage and goes on.
    finecode_each_way("finecode malformed", |s, project| {
        finecode_start(s, project);
        s.send(b"Content-Length: 9\r\nContent-Type: application/vscode-jsonrpc; charset=utf-8\r\n\r\n{not json");
        s.await_frame("the runner's complaint", |f| {
            json_of(f)["method"] == "window/showMessage"
        });
        finecode_work(s, 3);
        finecode_stop(s, 5);
    });
}

#[test]
fn finecode_large_frame() {
    // A 1 MiB package name: its error (which quotes it) is as large.
    let name = "z".repeat(1 << 20);
    let t = finecode_each_way("finecode large", |s, project| {
        finecode_start(s, project);
        let answer = command(s, 3, "packages/resolvePath", json!([name]));
        assert!(answer["error"].is_object(), "{:.300}", answer.to_string());
        finecode_stop(s, 4);
    });
    assert!(t.stdout.len() > 1 << 20);
}

#[test]
fn finecode_sigint() {
    // No stdin EOF right after the signal (see pylsp_sigint).
    finecode_each_way("finecode SIGINT", |s, project| {
        finecode_start(s, project);
        s.signal("INT");
    });
}

#[test]
fn finecode_sigterm() {
    finecode_each_way("finecode SIGTERM", |s, project| {
        finecode_start(s, project);
        s.signal("TERM");
    });
}

#[test]
fn finecode_stdin_eof() {
    finecode_each_way("finecode stdin EOF", |s, project| {
        finecode_start(s, project);
        finecode_work(s, 3);
        s.close_stdin();
    });
}

// --- The real Arcaflow engine (PyPI `arcaflow`), its podman deployer, a podman stand-in -----

/// The workflow: one plugin step, `greet`, fed from the workflow's input.
const WORKFLOW: &str = "\
version: v0.2.0
input:
  root: RootObject
  objects:
    RootObject:
      id: RootObject
      properties:
        name:
          type:
            type_id: string
steps:
  greet:
    plugin:
      deployment_type: image
      src: localhost/sandpipe-peer/atp-plugin
    step: greet
    input:
      name: !expr $.input.name
outputs:
  success:
    message: !expr $.steps.greet.outputs.success.message
";

/// A script in podman's place. The podman deployer runs `PODMAN run -i -a stdin -a stdout
/// -a stderr --name NAME [-e ..] [-v ..] [--cgroupns ..] [--network ..] [--privileged] IMAGE
/// --atp` and talks ATP over its stdin and stdout; later `PODMAN container ls --format
/// {{.Names}}`, `PODMAN kill NAME` and `PODMAN rm --force NAME`. Here the "container" is
/// `PLUGIN --atp`, recorded by name so that `kill` and `rm --force` reach it as podman's would
/// (SIGKILL; SIGTERM, then SIGKILL after 10 s). Every call is logged.
fn fake_podman(dir: &Path, plugin: &[OsString]) -> std::path::PathBuf {
    let quoted: Vec<String> = plugin
        .iter()
        .map(|a| {
            format!(
                "'{}'",
                a.to_str().expect("utf-8 argument").replace('\'', "'\\''")
            )
        })
        .collect();
    let script = format!(
        r#"#!/bin/sh
# Stands in for podman for the Arcaflow engine's podman deployer (see peers_python.rs).
dir='{dir}'
echo "podman $*" >> "$dir/podman.log"
case "$1" in
  run)
    shift
    while [ $# -gt 0 ]; do
      case "$1" in
        -i|--privileged) shift ;;
        --name) name=$2; shift 2 ;;
        -a|-e|-v|--cgroupns|--network) shift 2 ;;
        *) shift; break ;;
      esac
    done
    echo $$ > "$dir/$name.pid"
    exec {plugin} "$@" ;;
  kill)
    [ -f "$dir/$2.pid" ] && kill -KILL "$(cat "$dir/$2.pid")" 2>/dev/null
    exit 0 ;;
  rm)
    name=$3
    if [ -f "$dir/$name.pid" ]; then
      pid=$(cat "$dir/$name.pid")
      if kill -TERM "$pid" 2>/dev/null; then
        n=0
        while kill -0 "$pid" 2>/dev/null && [ $n -lt 100 ]; do sleep 0.1; n=$((n+1)); done
        kill -KILL "$pid" 2>/dev/null
      fi
      rm -f "$dir/$name.pid"
    fi
    exit 0 ;;
  *) exit 0 ;;
esac
"#,
        dir = dir.display(),
        plugin = quoted.join(" "),
    );
    let path = dir.join("podman");
    std::fs::write(&path, script).expect("write the podman stand-in");
    let status = std::process::Command::new("chmod")
        .arg("+x")
        .arg(&path)
        .status()
        .expect("chmod");
    assert!(status.success());
    path
}

/// Run the workflow with the plugin command `plugin` in podman's place; the engine's stdout
/// (the workflow's output) and exit status, and the podman calls it made.
fn run_workflow(plugin: &[OsString]) -> (String, String, String) {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let podman = fake_podman(d, plugin);
    std::fs::write(d.join("workflow.yaml"), WORKFLOW).expect("workflow");
    std::fs::write(d.join("input.yaml"), "name: Arca Lot\n").expect("input");
    std::fs::write(
        d.join("config.yaml"),
        format!(
            "deployers:\n  image:\n    deployer_name: podman\n    podman:\n      path: {}\n    \
             deployment:\n      imagePullPolicy: Never\nlog:\n  level: info\n",
            podman.display()
        ),
    )
    .expect("config");
    let out = std::process::Command::new(peers::arcaflow_engine())
        .arg("-config")
        .arg(d.join("config.yaml"))
        .arg("-input")
        .arg(d.join("input.yaml"))
        .arg("-workflow")
        .arg(d.join("workflow.yaml"))
        .arg("-context")
        .arg(d)
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run the arcaflow engine");
    let calls = std::fs::read_to_string(d.join("podman.log")).unwrap_or_default();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "the engine failed ({}) with {plugin:?}\nstdout:\n{stdout}\nstderr:\n{}\npodman calls:\n{calls}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    (stdout, format!("{}", out.status), calls)
}

#[test]
fn arcaflow_engine_runs_the_sdk_plugin_through_sandpipe_run() {
    let python = peers::python().into_os_string();
    let script = peers::source("atp_plugin.py").into_os_string();
    let sandpipe = peers::sandpipe().into_os_string();
    let direct = vec![python.clone(), script.clone()];
    let (want, status, calls) = run_workflow(&direct);
    assert!(
        want.contains("message: Hello, Arca Lot!") && want.contains("output_id: success"),
        "{want}"
    );
    // The engine asked the stand-in for the plugin twice (schema, then the run) and removed
    // the containers afterwards.
    assert_eq!(calls.matches("podman run -i").count(), 2, "{calls}");
    assert!(calls.contains("podman rm --force"), "{calls}");
    for framing in [None, Some("cbor")] {
        let mut behind = vec![sandpipe.clone(), "run".into()];
        if let Some(f) = framing {
            behind.extend(["--framing".into(), f.into()]);
        }
        behind.extend([python.clone(), script.clone()]);
        let (got, got_status, _) = run_workflow(&behind);
        assert_eq!((&got, &got_status), (&want, &status), "{behind:?}");
    }
}

#[test]
fn arcaflow_engine_runs_the_unchanged_sdk_plugin_as_a_component_through_sandpipe_run() {
    // The same plugin file, built with `python3 -m sandpipe_guest.build --arcaflow`
    // (tests/tests/arcaflow_unchanged.rs plays it as an engine would, scenario by scenario).
    let wasm = sandpipe_tests::guests::arcaflow("tests/peers/atp_plugin.py").into_os_string();
    let python = peers::python().into_os_string();
    let script = peers::source("atp_plugin.py").into_os_string();
    let sandpipe = peers::sandpipe().into_os_string();
    let (want, status, _) = run_workflow(&[python, script]);
    assert!(want.contains("message: Hello, Arca Lot!"), "{want}");
    let behind = vec![
        sandpipe,
        "run".into(),
        "--framing".into(),
        "cbor".into(),
        wasm,
    ];
    let (got, got_status, calls) = run_workflow(&behind);
    assert_eq!((&got, &got_status), (&want, &status), "{behind:?}");
    assert_eq!(calls.matches("podman run -i").count(), 2, "{calls}");
}

#[test]
fn arcaflow_engine_runs_the_rust_example_as_wasm_through_sandpipe_run() {
    use sandpipe_tests::{Target, plugin};
    let native = plugin("example-atp", Target::Native).into_os_string();
    let wasm = plugin("example-atp", Target::Wasm).into_os_string();
    let sandpipe = peers::sandpipe().into_os_string();
    let (want, status, _) = run_workflow(std::slice::from_ref(&native));
    assert!(want.contains("message: Hello, Arca Lot!"), "{want}");
    for behind in [
        vec![sandpipe.clone(), "run".into(), wasm.clone()],
        vec![
            sandpipe.clone(),
            "run".into(),
            "--framing".into(),
            "cbor".into(),
            wasm.clone(),
        ],
        vec![sandpipe.clone(), "run".into(), native.clone()],
    ] {
        let (got, got_status, _) = run_workflow(&behind);
        assert_eq!((&got, &got_status), (&want, &status), "{behind:?}");
    }
}
