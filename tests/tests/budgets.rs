//! Per-request budgets (`sandpipe::supervise`) end to end, with real plugins: a runaway
//! request fails with the protocol's own error and the next request succeeds on a fresh
//! instance (wasm: fuel per request; native: the request timeout), for the oracle (JSON Lines,
//! a plugin-initiated handshake) and ATP (CBOR, the hello swallowed); the fuel budget is
//! re-armed per request inside wasmtime; recycling by count and by memory is invisible to the
//! engine, reading the real memory meters; the `auto` rule keeps a growing heap under its cap.
//!
//! The supervisor's decisions for every protocol (each one's error answer and handshake
//! replay, timeouts per request, idle time not billed, requests in flight when the plugin
//! dies, the session ending without restart) are unit tests on a virtual clock in
//! `sandpipe_proto::supervise`.

use std::time::Duration;

use sandpipe::protocols::Protocol;
use sandpipe::supervise::{Budgets, Recycle, Report, Supervisor};
use sandpipe::{Exit, Fuel, Host, HostOptions, Policy, SessionOptions, StderrMode};
use sandpipe_proto::atp;
use sandpipe_tests::{Target, plugin};
use serde_json::{Value, json};
use tokio::sync::mpsc;

/// Generous: a regression fails here instead of hanging CI.
const STEP: Duration = Duration::from_secs(30);

/// The engine's side of a supervised session.
struct Engine {
    tx: Option<mpsc::Sender<Vec<u8>>>,
    rx: mpsc::Receiver<Vec<u8>>,
}

impl Engine {
    async fn send(&self, frame: Vec<u8>) {
        self.tx
            .as_ref()
            .expect("open")
            .send(frame)
            .await
            .expect("supervisor is running");
    }
    async fn send_json(&self, v: Value) {
        self.send(serde_json::to_vec(&v).expect("test step")).await;
    }
    async fn recv(&mut self) -> Vec<u8> {
        tokio::time::timeout(STEP, self.rx.recv())
            .await
            .expect("a frame in time")
            .expect("the supervisor sends a frame")
    }
    async fn recv_json(&mut self) -> Value {
        let f = self.recv().await;
        serde_json::from_slice(&f)
            .unwrap_or_else(|e| panic!("{e}: {:?}", String::from_utf8_lossy(&f)))
    }
    /// Close the engine's side; the rest of what the supervisor sends.
    async fn close(&mut self) -> Vec<Vec<u8>> {
        self.tx = None;
        let mut rest = Vec::new();
        while let Ok(Some(f)) = tokio::time::timeout(STEP, self.rx.recv()).await {
            rest.push(f);
        }
        rest
    }
}

/// Run `script` as the engine against `bin` supervised with `budgets`.
async fn supervised<F, Fut>(
    bin: &str,
    target: Target,
    protocol: Protocol,
    policy: Policy,
    budgets: Budgets,
    script: F,
) -> Report
where
    F: FnOnce(Engine) -> Fut,
    Fut: Future<Output = ()>,
{
    let host =
        Host::with_options(&HostOptions::default().allow_native_unsandboxed(true)).expect("host");
    let plugin = host.load(plugin(bin, target)).expect("load");
    let options = SessionOptions::default().stderr(StderrMode::Discard);
    let (to_sup, from_engine) = mpsc::channel(16);
    let (to_engine, from_sup) = mpsc::channel(16);
    let sup = Supervisor::new(&host, &plugin, policy, options, protocol, budgets);
    let engine = Engine {
        tx: Some(to_sup),
        rx: from_sup,
    };
    let (report, ()) = tokio::time::timeout(Duration::from_secs(120), async {
        tokio::join!(sup.run(from_engine, to_engine), script(engine))
    })
    .await
    .expect("the supervised session ends");
    report.expect("supervisor runs")
}

/// How each target's runaway request is stopped: fuel per request for wasm (the policy's), the
/// request timeout for native (which has no fuel). Restart is on.
fn runaway(target: Target) -> (Policy, Budgets, &'static str, &'static str) {
    let mut b = Budgets {
        restart: true,
        ..Budgets::default()
    };
    match target {
        Target::Native => {
            b.request_timeout = Some(Duration::from_millis(500));
            (Policy::default(), b, "sleep", "timed out")
        }
        _ => (
            Policy::default().fuel(Fuel::PerRequest(100_000_000)),
            b,
            "spin",
            "ran out of fuel (limit 100000000 per request)",
        ),
    }
}

/// For wasm (fuel per request, `spin`) and native (request timeout, `sleep`): run `script`,
/// told how to misbehave and what its error must name, against `bin` with restart on; then
/// check the one failed request, the one restart and the one answered request.
async fn runaway_then_next<F, Fut>(bin: &str, protocol: Protocol, script: F)
where
    F: Fn(Engine, &'static str, &'static str) -> Fut,
    Fut: Future<Output = ()>,
{
    for target in [Target::Wasm, Target::Native] {
        let (policy, budgets, how, reason) = runaway(target);
        let report = supervised(bin, target, protocol, policy, budgets, |e| {
            script(e, how, reason)
        })
        .await;
        check_report(&report, reason);
        assert_eq!(report.answered, 1, "{target:?}: {report:?}");
    }
}

fn check_report(report: &Report, reason: &str) {
    assert_eq!(report.incidents.len(), 1, "{report:?}");
    assert!(report.incidents[0].reason.contains(reason), "{report:?}");
    assert!(report.incidents[0].restarting, "{report:?}");
    assert_eq!(report.restarts, 1, "{report:?}");
    assert!(!report.stopped, "{report:?}");
    assert_eq!(report.exit, Exit::Exited(0), "{report:?}");
}

fn error_of(v: &Value, id: i64) -> &Value {
    assert_eq!(v["id"], json!(id), "{v}");
    v.get("error").unwrap_or_else(|| panic!("an error: {v}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oracle_runaway_invoke_fails_and_the_next_succeeds() {
    runaway_then_next(
        "oracle-hog",
        Protocol::Oracle,
        |mut e, how, reason| async move {
            let ready = e.recv_json().await;
            assert_eq!(ready["method"], "ready");
            e.send_json(json!({"jsonrpc": "2.0", "id": ready["id"], "result": {}}))
                .await;
            e.send_json(json!({"jsonrpc":"2.0","id":1,"method":"invoke",
                    "params":{"selector": how, "calldata":["0x1"]}}))
                .await;
            let err = e.recv_json().await;
            let err = error_of(&err, 1);
            assert_eq!(err["code"], json!(-32603), "{err}");
            assert!(
                err["message"].as_str().expect("a string").contains(reason),
                "{err}"
            );
            assert_eq!(err["data"]["stderr"][0], format!("hog: {how} starting"));
            e.send_json(json!({"jsonrpc":"2.0","id":2,"method":"invoke",
                    "params":{"selector":"echo","calldata":["0x2"]}}))
                .await;
            // The fresh instance's `ready` is answered by the supervisor, never seen here.
            let ok = e.recv_json().await;
            assert_eq!(ok, json!({"jsonrpc":"2.0","id":2,"result":["0x2"]}));
            e.send_json(json!({"jsonrpc":"2.0","method":"shutdown"}))
                .await;
            assert!(e.close().await.is_empty());
        },
    )
    .await;
}

fn text(s: &str) -> atp::Value {
    atp::Value::Text(s.into())
}

fn work_start(run: &str, step: &str, config: atp::Value) -> Vec<u8> {
    atp::Message::WorkStart {
        run_id: run.into(),
        step_id: step.into(),
        config,
    }
    .encode()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn atp_runaway_run_fails_and_the_next_succeeds() {
    runaway_then_next("atp-hog", Protocol::Atp, |mut e, how, reason| async move {
        e.send(atp::START_ITEM.to_vec()).await;
        let hello = atp::Hello::decode(&e.recv().await).expect("hello");
        assert_eq!(hello.version, atp::Version::V3);
        let config = atp::Value::Map(vec![(text("how"), text(how))]);
        e.send(work_start("r1", "hog", config)).await;
        match atp::Message::decode(&e.recv().await).expect("a message") {
            atp::Message::Error {
                run_id,
                error,
                step_fatal,
                server_fatal,
            } => {
                assert_eq!(run_id, "r1");
                assert!(error.contains(reason), "{error}");
                assert!(step_fatal && !server_fatal);
            }
            other => panic!("expected an error for r1, got {other:?}"),
        }
        // The fresh instance's hello is swallowed: the next frame is r2's result.
        e.send(work_start("r2", "ok", text("x"))).await;
        match atp::Message::decode(&e.recv().await).expect("a message") {
            atp::Message::WorkDone { run_id, output } => {
                assert_eq!(run_id, "r2");
                assert_eq!(output.output_id, "success");
            }
            other => panic!("expected r2's work done, got {other:?}"),
        }
        e.send(atp::Message::ClientDone.encode()).await;
        assert!(e.close().await.is_empty());
    })
    .await;
}

/// Invoke echo `n` times; the number answered before the session ended.
async fn echo_invokes(policy: Policy, budgets: Budgets, n: i64) -> Report {
    supervised(
        "oracle-hog",
        Target::Wasm,
        Protocol::Oracle,
        policy,
        budgets,
        |mut e| async move {
            let ready = e.recv_json().await;
            e.send_json(json!({"jsonrpc": "2.0", "id": ready["id"], "result": {}}))
                .await;
            for id in 1..=n {
                if e.tx.as_ref().expect("test step").is_closed() {
                    break;
                }
                let _ =
                    e.tx.as_ref()
                        .expect("test step")
                        .send(
                            serde_json::to_vec(&json!({"jsonrpc":"2.0","id":id,"method":"invoke",
                            "params":{"selector":"echo","calldata":["0x1"]}}))
                            .expect("test step"),
                        )
                        .await;
                match tokio::time::timeout(STEP, e.rx.recv()).await {
                    Ok(Some(f)) => {
                        let v: Value = serde_json::from_slice(&f).expect("test step");
                        if v.get("error").is_some() {
                            break;
                        }
                    }
                    _ => break,
                }
            }
            e.close().await;
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fuel_is_per_request_not_per_session() {
    // The same budget as a whole-session total runs out long before 300 invokes …
    const BUDGET: u64 = 3_000_000;
    let whole = echo_invokes(
        Policy::default().fuel(Fuel::PerSession(BUDGET)),
        Budgets::default(),
        300,
    )
    .await;
    assert!(whole.answered < 300, "{whole:?}");
    assert!(matches!(whole.exit, Exit::OutOfFuel { .. }), "{whole:?}");
    // … but per request it is re-armed for each one, and all 300 are answered.
    let per = echo_invokes(
        Policy::default().fuel(Fuel::PerRequest(BUDGET)),
        Budgets::default(),
        300,
    )
    .await;
    assert_eq!(per.answered, 300, "{per:?}");
    assert!(per.incidents.is_empty(), "{per:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recycling_is_invisible_to_the_engine() {
    for target in [Target::Wasm, Target::Native] {
        // By count: a fresh instance after every 3 answers.
        let by_count = Budgets {
            recycle: Recycle {
                after_requests: Some(3),
                ..Recycle::default()
            },
            ..Budgets::default()
        };
        // By memory: any instance holds more than one byte, so each answer recycles.
        let by_memory = Budgets {
            recycle: Recycle {
                above_memory: Some(1),
                ..Recycle::default()
            },
            ..Budgets::default()
        };
        for (budgets, recycles) in [(by_count, 2), (by_memory, 7)] {
            let report = supervised(
                "oracle-hog",
                target,
                Protocol::Oracle,
                Policy::default(),
                budgets,
                |mut e| async move {
                    let ready = e.recv_json().await;
                    e.send_json(json!({"jsonrpc": "2.0", "id": ready["id"], "result": {}}))
                        .await;
                    for id in 1..=7 {
                        e.send_json(json!({"jsonrpc":"2.0","id":id,"method":"invoke",
                            "params":{"selector":"echo","calldata":["0x7"]}}))
                            .await;
                        // Only answers: no second `ready` ever reaches the engine.
                        let v = e.recv_json().await;
                        assert_eq!(v["id"], json!(id), "{target:?}: {v}");
                        assert_eq!(v["result"], json!(["0x7"]), "{target:?}: {v}");
                    }
                    e.close().await;
                },
            )
            .await;
            assert_eq!(report.answered, 7, "{target:?}: {report:?}");
            assert_eq!(report.recycles, recycles, "{target:?}: {report:?}");
            assert!(report.incidents.is_empty(), "{target:?}: {report:?}");
        }
    }
}

/// `Recycle::before_cap` (the CLI's default `--recycle-memory auto`): a guest that keeps 8 MiB
/// per request under a 64 MiB cap is replaced between requests before it meets the cap, and
/// every request is answered; without it, a request fails on the memory limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_heap_growing_per_request_is_recycled_before_the_cap() {
    let cap = 64u64 << 20;
    let auto = Budgets {
        recycle: Recycle {
            before_cap: Some(cap),
            ..Recycle::default()
        },
        restart: true,
        ..Budgets::default()
    };
    let off = Budgets {
        restart: true,
        ..Budgets::default()
    };
    for (budgets, recycling) in [(auto, true), (off, false)] {
        let report = supervised(
            "oracle-hog",
            Target::Wasm,
            Protocol::Oracle,
            Policy::default().max_memory(Some(cap)),
            budgets,
            |mut e| async move {
                let ready = e.recv_json().await;
                e.send_json(json!({"jsonrpc": "2.0", "id": ready["id"], "result": {}}))
                    .await;
                for id in 1..=12 {
                    e.send_json(json!({"jsonrpc":"2.0","id":id,"method":"invoke",
                        "params":{"selector":"leak","calldata":["0x1"]}}))
                        .await;
                    let v = e.recv_json().await;
                    assert_eq!(v["id"], json!(id), "{v}");
                }
                e.close().await;
            },
        )
        .await;
        if recycling {
            assert_eq!(report.answered, 12, "{report:?}");
            assert!(report.incidents.is_empty(), "{report:?}");
            assert!(report.recycles >= 2, "{report:?}");
        } else {
            assert_eq!(report.recycles, 0, "{report:?}");
            assert!(
                report.incidents.iter().any(|i| i.reason.contains("memory")),
                "{report:?}"
            );
        }
    }
}
