//! Record → replay → serve, through the `sandpipe` binary and the host clients.

use sandpipe_proto::denobridge::ProviderKind;
use std::process::{Command, Output, Stdio};

use sandpipe::protocols::denobridge::DenoBridgeClient;
use sandpipe::protocols::oracle::OracleClient;
use sandpipe::{Access, Host, HostOptions, Plugin, Policy, SessionOptions, StderrMode};
use sandpipe_proto::frame::Framing;
use sandpipe_tests::Target;
use sandpipe_tests::cli::{path, text};
use serde_json::json;

fn sandpipe(args: &[&str]) -> Output {
    sandpipe_tests::cli::run(env!("CARGO_BIN_EXE_sandpipe"), args, b"")
}

/// Record `call` sessions with each example, then replay each against the same build (green)
/// and natively where the plugin is deterministic by itself.
#[test]
fn recordings_of_every_example_replay_green() {
    let dir = tempfile::tempdir().expect("tempdir");
    let state = tempfile::tempdir().expect("tempdir");
    let state_spec = format!("{}::/state", state.path().display());
    let cases: Vec<(&str, Vec<String>)> = vec![
        (
            "oracle",
            vec![
                "--protocol".into(),
                "oracle".into(),
                "--method".into(),
                "add".into(),
                "--params".into(),
                r#"["0x2","0x3"]"#.into(),
                path("example-oracle", Target::Wasm),
            ],
        ),
        (
            "denobridge",
            vec![
                "--protocol".into(),
                "denobridge".into(),
                "--dir".into(),
                state_spec.clone(),
                "--method".into(),
                "create".into(),
                "--params".into(),
                r#"{"props":{"name":"n"}}"#.into(),
                path("example-denobridge", Target::Wasm),
                "/state".into(),
            ],
        ),
    ];
    let cases = {
        let mut c = cases;
        c.push((
            "atp",
            vec![
                "--protocol".into(),
                "atp".into(),
                "--method".into(),
                "greet".into(),
                "--params".into(),
                r#"{"name":"r"}"#.into(),
                path("example-atp", Target::Wasm),
            ],
        ));
        c.push((
            "finecode",
            vec![
                "--protocol".into(),
                "finecode".into(),
                "--method".into(),
                "actions/run".into(),
                "--params".into(),
                r#"{"actionName":"lint","params":{"files":["a.py"]}}"#.into(),
                path("example-finecode", Target::Wasm),
            ],
        ));
        c.push((
            "orchard",
            vec![
                "--protocol".into(),
                "orchard".into(),
                "--method".into(),
                "execute".into(),
                "--params".into(),
                r#"{"action":"echo","attrs":{"x":1}}"#.into(),
                path("example-orchard", Target::Wasm),
            ],
        ));
        c
    };
    for (name, call_args) in cases {
        let file = dir
            .path()
            .join(format!("{name}.transcript"))
            .display()
            .to_string();
        let mut args = vec!["call", "--no-cache", "--deterministic", "--record", &file];
        args.extend(call_args.iter().map(String::as_str));
        let out = sandpipe(&args);
        assert_eq!(out.status.code(), Some(0), "{name}: {}", text(&out.stderr));
        let recorded = std::fs::read_to_string(&file).expect("recording");
        assert!(
            recorded.contains("\"seed\":0")
                && recorded.contains("# outcome: plugin exited with code 0"),
            "{recorded}"
        );
        let bin = format!("example-{name}");
        for target in [Target::Wasm, Target::Native] {
            let out = sandpipe(&[
                "replay",
                &file,
                "--no-cache",
                "--plugin",
                &path(&bin, target),
            ]);
            assert_eq!(
                out.status.code(),
                Some(0),
                "{name} {target:?}: {}\n{recorded}",
                text(&out.stderr)
            );
        }
    }
    // A `run` recording of the echo replays too.
    let file = dir.path().join("echo.transcript").display().to_string();
    let mut child = Command::new(env!("CARGO_BIN_EXE_sandpipe"))
        .args([
            "run",
            "--no-cache",
            "--framing",
            "lines",
            "--record",
            &file,
            &path("echo-lines", Target::Wasm),
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn");
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().expect("stdin");
        stdin.write_all(b"{\"a\":1}\n[2]\n").expect("write");
    }
    let out = child.wait_with_output().expect("wait");
    assert_eq!(out.stdout, b"{\"a\":1}\n[2]\n");
    let out = sandpipe(&[
        "replay",
        &file,
        "--no-cache",
        "--plugin",
        &path("echo-lines", Target::Wasm),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
}

#[test]
fn a_changed_plugin_fails_replay_at_the_right_frame() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("o.transcript").display().to_string();
    let oracle = path("example-oracle", Target::Wasm);
    let out = sandpipe(&[
        "call",
        "--no-cache",
        "--record",
        &file,
        "--protocol",
        "oracle",
        "--method",
        "sqrt",
        "--params",
        r#"["0x10"]"#,
        &oracle,
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    // The "new build": the same protocol, different answers (it echoes its calldata).
    let out = sandpipe(&[
        "replay",
        &file,
        "--no-cache",
        "--plugin",
        &path("oracle-hog", Target::Wasm),
    ]);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.contains("first divergence at frame 3: the plugin sent a different frame"),
        "{err}"
    );
    assert!(
        err.contains(r#"- {"jsonrpc":"2.0","id":0,"result":["0x4"]}"#),
        "{err}"
    );
    assert!(
        err.contains(r#"+ {"jsonrpc":"2.0","id":0,"result":["0x10"]}"#),
        "{err}"
    );
}

/// `sandpipe replay FILE --serve` stands in for the plugin: the host clients drive it
/// unchanged and get the recorded answers.
#[tokio::test]
async fn serve_stands_in_for_the_examples_under_the_host_clients() {
    let dir = tempfile::tempdir().expect("tempdir");
    let state = tempfile::tempdir().expect("tempdir");
    let oracle_file = dir.path().join("oracle.transcript").display().to_string();
    let deno_file = dir.path().join("deno.transcript").display().to_string();
    let out = sandpipe(&[
        "call",
        "--no-cache",
        "--record",
        &oracle_file,
        "--protocol",
        "oracle",
        "--method",
        "sqrt",
        "--params",
        r#"["0x19"]"#,
        &path("example-oracle", Target::Wasm),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let spec = format!("{}::/state", state.path().display());
    let out = sandpipe(&[
        "call",
        "--no-cache",
        "--record",
        &deno_file,
        "--protocol",
        "denobridge",
        "--dir",
        &spec,
        "--method",
        "create",
        "--params",
        r#"{"props":{"name":"x"}}"#,
        &path("example-denobridge", Target::Wasm),
        "/state",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));

    let host = Host::with_options(
        &HostOptions::default()
            .cache_dir(None)
            .allow_native_unsandboxed(true),
    )
    .expect("host");
    let stand_in =
        Plugin::native_unsandboxed(env!("CARGO_BIN_EXE_sandpipe")).expect("sandpipe binary");
    let opts = SessionOptions::framed(Framing::JsonLines).stderr(StderrMode::Discard);

    // The stand-in is a native plugin: Landlock lets it read only what is granted.
    let policy = Policy::default()
        .max_memory(None)
        .preopen(
            dir.path(),
            dir.path().display().to_string(),
            Access::ReadOnly,
        )
        .arg("replay")
        .arg(&oracle_file)
        .arg("--serve");
    let session = host.start(&stand_in, &policy, &opts).await.expect("start");
    let mut oracle = OracleClient::connect(session).await.expect("ready");
    let got = oracle
        .invoke("sqrt", &[sandpipe_proto::oracle::Felt::from(25u128)])
        .await
        .expect("invoke");
    assert_eq!(got, vec![sandpipe_proto::oracle::Felt::from(5u128)]);
    assert!(
        oracle
            .shutdown(std::time::Duration::from_secs(5))
            .await
            .success()
    );

    // The stand-in is a native plugin: Landlock lets it read only what is granted.
    let policy = Policy::default()
        .max_memory(None)
        .preopen(
            dir.path(),
            dir.path().display().to_string(),
            Access::ReadOnly,
        )
        .arg("replay")
        .arg(&deno_file)
        .arg("--serve")
        .arg("--match")
        .arg("id");
    let session = host.start(&stand_in, &policy, &opts).await.expect("start");
    let (deno, _health) = DenoBridgeClient::connect(session, ProviderKind::Resource)
        .await
        .expect("health");
    let created = deno
        .create(&sandpipe_proto::denobridge::PropsParams::new(
            json!({"name": "x"}),
        ))
        .await
        .expect("create");
    assert_eq!(serde_json::to_value(&created).expect("json")["id"], "r1");
    // A request the recording does not have gets the protocol's error, with a precise message.
    // (Checked below, after the other protocols.)
    let err = deno
        .create(&sandpipe_proto::denobridge::PropsParams::new(
            json!({"name": "y"}),
        ))
        .await
        .expect_err("unexpected");
    let msg = err
        .error_object(sandpipe_proto::jsonrpc::Dialect::JsonRpc2)
        .message;
    assert!(msg.starts_with("replay: unexpected frame"), "{msg}");

    // Orchard, ATP (CBOR) and FineCode (Content-Length) the same way.
    let orchard_file = dir.path().join("orchard.transcript").display().to_string();
    let out = sandpipe(&[
        "call",
        "--no-cache",
        "--record",
        &orchard_file,
        "--protocol",
        "orchard",
        "--method",
        "execute",
        "--params",
        r#"{"action":"echo","attrs":{"x":1}}"#,
        &path("example-orchard", Target::Wasm),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    // The stand-in is a native plugin: Landlock lets it read only what is granted.
    let policy = Policy::default()
        .max_memory(None)
        .preopen(
            dir.path(),
            dir.path().display().to_string(),
            Access::ReadOnly,
        )
        .arg("replay")
        .arg(&orchard_file)
        .arg("--serve");
    let session = host.start(&stand_in, &policy, &opts).await.expect("start");
    let orchard = sandpipe::protocols::orchard::OrchardClient::connect(
        session,
        std::time::Duration::from_secs(5),
    )
    .await
    .expect("describe");
    assert_eq!(orchard.schema().name, "example-orchard");
    orchard.configure(json!({})).await.expect("configure");
    assert_eq!(
        orchard
            .execute("echo", json!({"x": 1}))
            .await
            .expect("execute"),
        json!({"x": 1})
    );
    assert!(
        orchard
            .shutdown(std::time::Duration::from_secs(5))
            .await
            .success()
    );

    let atp_file = dir.path().join("atp.transcript").display().to_string();
    let out = sandpipe(&[
        "call",
        "--no-cache",
        "--record",
        &atp_file,
        "--protocol",
        "atp",
        "--method",
        "greet",
        "--params",
        r#"{"name":"r"}"#,
        &path("example-atp", Target::Wasm),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let cbor_opts = SessionOptions::framed(Framing::CborSeq).stderr(StderrMode::Discard);
    // The stand-in is a native plugin: Landlock lets it read only what is granted.
    let policy = Policy::default()
        .max_memory(None)
        .preopen(
            dir.path(),
            dir.path().display().to_string(),
            Access::ReadOnly,
        )
        .arg("replay")
        .arg(&atp_file)
        .arg("--serve");
    let session = host
        .start(&stand_in, &policy, &cbor_opts)
        .await
        .expect("start");
    let (atp, _hello) = sandpipe::protocols::atp::AtpClient::connect(session)
        .await
        .expect("hello");
    let config = sandpipe::protocols::atp::Value::serialized(&json!({"name": "r"})).expect("cbor");
    let done = atp
        .start("run-1", "greet", config)
        .await
        .expect("start")
        .result()
        .await
        .expect("work done");
    assert_eq!(done.output_id, "success");
    assert!(atp.done(std::time::Duration::from_secs(5)).await.success());

    let fine_file = dir.path().join("finecode.transcript").display().to_string();
    let out = sandpipe(&[
        "call",
        "--no-cache",
        "--record",
        &fine_file,
        "--protocol",
        "finecode",
        "--method",
        "finecodeRunner/resolveActionMeta",
        &path("example-finecode", Target::Wasm),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let lsp_opts = SessionOptions::framed(Framing::ContentLength).stderr(StderrMode::Discard);
    // The stand-in is a native plugin: Landlock lets it read only what is granted.
    let policy = Policy::default()
        .max_memory(None)
        .preopen(
            dir.path(),
            dir.path().display().to_string(),
            Access::ReadOnly,
        )
        .arg("replay")
        .arg(&fine_file)
        .arg("--serve")
        // LSP initialize carries the manager's processId, which differs per run: match by id.
        .arg("--match")
        .arg("id");
    let session = host
        .start(&stand_in, &policy, &lsp_opts)
        .await
        .expect("start");
    use sandpipe::protocols::finecode::{CallForm, FineCodeClient, NoRunnerRequests};
    let (fine, _init) = FineCodeClient::connect(session, CallForm::Direct, NoRunnerRequests)
        .await
        .expect("initialize");
    let meta = fine.resolve_action_meta().await.expect("meta");
    assert!(
        serde_json::to_string(&meta)
            .expect("json")
            .contains("LintAction")
    );
    assert!(
        fine.shutdown(std::time::Duration::from_secs(5))
            .await
            .success()
    );
}

/// `replay --serve` reads the engine's side as `run` does, under `--max-frame`: an engine
/// frame over the cap ends the replay with `run`'s status 123 and its line, before anything
/// is answered; the same recording replays without the cap, and a frame within it replays
/// with it.
#[test]
fn replay_serve_refuses_an_engine_frame_over_max_frame_as_run_does() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("big.transcript");
    let big = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"echo","params":["{}"]}}"#,
        "x".repeat(2000)
    );
    let small = r#"{"jsonrpc":"2.0","id":2,"method":"echo","params":["y"]}"#;
    let answer = |id: u32| format!(r#"{{"jsonrpc":"2.0","id":{id},"result":"ok"}}"#);
    std::fs::write(
        &file,
        format!(
            "# sandpipe transcript 1\n# protocol: jsonrpc\n# framing: lines\n\
             > {small}\n< {}\n> {big}\n< {}\n",
            answer(2),
            answer(1)
        ),
    )
    .expect("write");
    let file = file.display().to_string();
    let serve = |extra: &[&str], stdin: String| {
        let mut args = vec!["replay", file.as_str(), "--serve"];
        args.extend_from_slice(extra);
        sandpipe_tests::cli::run(env!("CARGO_BIN_EXE_sandpipe"), &args, stdin.as_bytes())
    };

    // Over the cap: 123 and `run`'s line; the frame before it was answered.
    let out = serve(&["--max-frame", "1KiB"], format!("{small}\n{big}\n"));
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(123), "{err}");
    assert!(
        err.contains("sandpipe: bad frame on stdin: frame of"),
        "{err}"
    );
    assert_eq!(text(&out.stdout), format!("{}\n", answer(2)), "{err}");

    // The same input without the cap replays in full.
    let out = serve(&[], format!("{small}\n{big}\n"));
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert_eq!(
        text(&out.stdout),
        format!("{}\n{}\n", answer(2), answer(1)),
        "{err}"
    );

    // A frame within the cap replays under it; by id, in the engine's order.
    let out = serve(
        &["--max-frame", "1KiB", "--match", "id"],
        format!("{small}\n"),
    );
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert_eq!(text(&out.stdout), format!("{}\n", answer(2)), "{err}");
}
