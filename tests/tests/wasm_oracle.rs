//! Cairo `wasm:` oracles under limits (`sandpipe::exports::oracle`, `run`/`call`/`inspect
//! --protocol oracle`) against `examples/wasm-oracle`, a component built with wit-bindgen.
//!
//! Covered: the codec through a real component (ByteArrays across the 31-byte boundary,
//! signed values, lists, options, results), short and fully qualified selectors, ambiguous and
//! unknown ones, state across calls and one instance per connection, each limit biting in one
//! call while the next is answered, poisoning, denied filesystem, network and environment,
//! hostile calldata, the endless loop through `sandpipe run --protocol oracle`, and both that
//! command's supervisor and the library API recycling a component by one rule (`Recycle`).

use std::process::Command;
use std::time::Duration;

use sandpipe::exports::oracle::{AfterTrap, InvokeError, Recycle, WasmOracle, WasmOracleOptions};
use sandpipe::{Access, Exit, Fuel, Host, HostOptions, Plugin, Policy, StderrMode};
use sandpipe_proto::component::{CodecError, SelectorError, decode_byte_array, felt_from_i64};
use sandpipe_proto::oracle::Felt;
use sandpipe_tests::stand_in::{Step, play};
use sandpipe_tests::{peers, wasm_oracle};
use serde_json::{Value, json};

/// Generous: a regression fails here instead of hanging CI.
const STEP: Duration = Duration::from_secs(60);

fn f(n: u128) -> Felt {
    Felt::from(n)
}

/// A string as a ByteArray (the codec's own encoder).
fn byte_array(s: &str) -> Vec<Felt> {
    let mut out = Vec::new();
    sandpipe_proto::component::encode_byte_array(s.as_bytes(), &mut out);
    out
}

fn load() -> (Host, Plugin) {
    let host = Host::with_options(&HostOptions::default().cache_dir(None)).expect("host");
    let plugin = host.load(wasm_oracle()).expect("load the example");
    assert!(plugin.exports_functions(), "the example exports functions");
    (host, plugin)
}

async fn connect(
    host: &Host,
    plugin: &Plugin,
    policy: &Policy,
    options: WasmOracleOptions,
) -> WasmOracle {
    WasmOracle::new(host, plugin, policy, options.stderr(StderrMode::Discard))
        .await
        .expect("instantiate the example")
}

async fn invoke(
    o: &mut WasmOracle,
    selector: &str,
    calldata: &[Felt],
) -> Result<Vec<Felt>, InvokeError> {
    tokio::time::timeout(STEP, o.invoke(selector, calldata))
        .await
        .expect("an answer in time")
}

async fn ok(o: &mut WasmOracle, selector: &str, calldata: &[Felt]) -> Vec<Felt> {
    invoke(o, selector, calldata)
        .await
        .unwrap_or_else(|e| panic!("{selector}: {e}"))
}

#[tokio::test]
async fn plain_functions_answer_through_the_codec() {
    let (host, plugin) = load();
    let mut o = connect(
        &host,
        &plugin,
        &Policy::default(),
        WasmOracleOptions::default(),
    )
    .await;

    assert_eq!(ok(&mut o, "add", &[f(1), f(2)]).await, vec![f(3)]);
    // Signed values: negatives are P - |x| both ways.
    assert_eq!(ok(&mut o, "neg", &[f(5)]).await, vec![felt_from_i64(-5)]);
    assert_eq!(ok(&mut o, "neg", &[felt_from_i64(-7)]).await, vec![f(7)]);
    // ByteArrays across the 31-byte boundary: 30 + 2 bytes give one full word and a pending one.
    let a = "a".repeat(30);
    let joined = ok(&mut o, "join", &[byte_array(&a), byte_array("bc")].concat()).await;
    assert_eq!(joined, byte_array(&format!("{a}bc")));
    assert_eq!(joined[0], f(1), "one full 31-byte word");
    assert_eq!(joined[joined.len() - 1], f(1), "one pending byte");
    // Lists in and out.
    assert_eq!(
        ok(&mut o, "sum", &[f(3), f(1), f(2), f(3)]).await,
        vec![f(6)]
    );
    let words = ok(&mut o, "split", &byte_array("x yz")).await;
    assert_eq!(
        words,
        [vec![f(2)], byte_array("x"), byte_array("yz")].concat()
    );
    // Option and char (a short string).
    assert_eq!(
        ok(&mut o, "first-char", &byte_array("é!")).await,
        vec![f(1), f(0xc3a9)]
    );
    assert_eq!(ok(&mut o, "first-char", &byte_array("")).await, vec![f(0)]);
    // A result: ok is tag 0, an error value is tag 1 and its payload (data, not a failure).
    assert_eq!(
        ok(&mut o, "safe-div", &[f(9), f(3)]).await,
        vec![f(0), f(3)]
    );
    let err = ok(&mut o, "safe-div", &[f(9), f(0)]).await;
    assert_eq!(err[0], f(1));
    assert_eq!(
        decode_byte_array(&err[1..]).as_deref(),
        Ok("cannot divide 9 by zero")
    );

    // Selectors: a unique short name, the full name, an ambiguous and an unknown one.
    let mul = "sandpipe:wasm-oracle/math@0.1.0/mul";
    assert_eq!(
        ok(&mut o, "mul", &[felt_from_i64(-3), f(4)]).await,
        vec![felt_from_i64(-12)]
    );
    assert_eq!(ok(&mut o, mul, &[f(3), f(4)]).await, vec![f(12)]);
    let pick = "sandpipe:wasm-oracle/words@0.1.0/pick";
    let got = ok(
        &mut o,
        pick,
        &[byte_array("a"), byte_array("b")]
            .concat()
            .into_iter()
            .fold(vec![f(2)], |mut v, x| {
                v.push(x);
                v
            })
            .into_iter()
            .chain([f(1)])
            .collect::<Vec<_>>(),
    )
    .await;
    assert_eq!(got, [vec![f(1)], byte_array("b")].concat());
    let ambiguous = invoke(&mut o, "pick", &[f(0), f(0)])
        .await
        .expect_err("ambiguous");
    assert_eq!(
        ambiguous.to_string(),
        "multiple exports named: pick\nnote: possible matches are: \
         sandpipe:wasm-oracle/math@0.1.0/pick, sandpipe:wasm-oracle/words@0.1.0/pick"
    );
    let unknown = invoke(&mut o, "nope", &[]).await.expect_err("unknown");
    assert!(
        matches!(&unknown, InvokeError::Selector(SelectorError::Unknown { available, .. })
        if available.iter().any(|n| n == mul) && available.iter().any(|n| n == "add"))
    );
    assert!(unknown.to_string().starts_with(
        "no exported func in component named: nope\nnote: available funcs are: add, "
    ));
    // A type the codec does not carry is an error before the guest is entered.
    let half = invoke(&mut o, "half", &[f(1)]).await.expect_err("float");
    assert_eq!(half.to_string(), "unsupported type: float64");
    o.close().await;
}

#[tokio::test]
async fn state_persists_across_calls_and_each_connection_has_its_own_instance() {
    let (host, plugin) = load();
    let policy = Policy::default();
    let mut a = connect(&host, &plugin, &policy, WasmOracleOptions::default()).await;
    let mut b = connect(&host, &plugin, &policy, WasmOracleOptions::default()).await;
    for n in 1..=3 {
        assert_eq!(ok(&mut a, "count", &[]).await, vec![f(n)]);
    }
    assert_eq!(
        ok(&mut b, "count", &[]).await,
        vec![f(1)],
        "b is another instance"
    );
    assert_eq!(ok(&mut a, "count", &[]).await, vec![f(4)]);
    a.close().await;
    b.close().await;
}

/// The library API renews a healthy instance by the supervisor's own rule (`Recycle`, the
/// type of `Budgets::recycle`): after N calls, and before a heap that grows per call meets the
/// memory cap (half the headroom above what the first call left), so every call is answered.
#[tokio::test]
async fn the_library_api_recycles_by_the_supervisors_rule() {
    let (host, plugin) = load();
    let by_count = Recycle {
        after_requests: Some(3),
        ..Recycle::default()
    };
    let options = WasmOracleOptions::default().recycle(by_count);
    let mut o = connect(&host, &plugin, &Policy::default(), options).await;
    let counts: Vec<Vec<Felt>> = calls_in_order(&mut o, "count", 4).await;
    assert_eq!(counts, [vec![f(1)], vec![f(2)], vec![f(3)], vec![f(1)]]);
    assert_eq!(o.restarts(), 1);
    o.close().await;

    let cap = 64u64 << 20;
    let before_cap = Recycle {
        before_cap: Some(cap),
        ..Recycle::default()
    };
    let policy = Policy::default().max_memory(Some(cap));
    let options = WasmOracleOptions::default().recycle(before_cap);
    let mut o = connect(&host, &plugin, &policy, options).await;
    let kept: Vec<Vec<Felt>> = calls_in_order(&mut o, "hoard", 12).await;
    assert!(o.restarts() >= 1, "renewed before the cap: {kept:?}");
    assert!(
        kept.iter().skip(1).any(|k| k == &vec![f(8)]),
        "a fresh instance's first hoard keeps 8 MiB: {kept:?}"
    );
    o.close().await;
}

/// `n` calls of `selector` one after another (`hoard` keeps 8 MiB more each), each answered.
async fn calls_in_order(o: &mut WasmOracle, selector: &str, n: usize) -> Vec<Vec<Felt>> {
    let calldata: &[Felt] = if selector == "hoard" { &[f(8)] } else { &[] };
    let mut answers = Vec::new();
    for _ in 0..n {
        answers.push(ok(o, selector, calldata).await);
    }
    answers
}

/// One call runs into the limit; the next call on the same connection gets its answer from a
/// fresh instance (`AfterTrap::Restart`, what `run --restart` uses).
async fn limit_bites_once(
    policy: Policy,
    options: WasmOracleOptions,
    selector: &str,
    calldata: &[Felt],
) -> (Exit, Vec<String>) {
    let (host, plugin) = load();
    let mut o = connect(
        &host,
        &plugin,
        &policy,
        options.after_trap(AfterTrap::Restart),
    )
    .await;
    assert_eq!(ok(&mut o, "count", &[]).await, vec![f(1)]);
    let err = invoke(&mut o, selector, calldata)
        .await
        .expect_err("the limit bites");
    let InvokeError::Stopped {
        stopped,
        restarting,
    } = err
    else {
        panic!("{selector}: expected a stop, got {err:?}");
    };
    assert!(restarting);
    assert_eq!(
        ok(&mut o, "add", &[f(40), f(2)]).await,
        vec![f(42)],
        "the next call is answered"
    );
    assert_eq!(
        ok(&mut o, "count", &[]).await,
        vec![f(1)],
        "by a fresh instance"
    );
    assert_eq!(o.restarts(), 1);
    o.close().await;
    (
        stopped.exit.expect("a stop has its exit"),
        stopped.stderr_tail,
    )
}

#[tokio::test]
async fn fuel_per_call_stops_an_endless_loop_and_the_next_call_is_answered() {
    let policy = Policy::default().fuel(Fuel::PerRequest(50_000_000));
    let (exit, tail) = limit_bites_once(policy, WasmOracleOptions::default(), "spin", &[]).await;
    assert_eq!(exit, Exit::OutOfFuel { limit: 50_000_000 });
    assert_eq!(tail, vec!["spinning forever".to_owned()]);
}

#[tokio::test]
async fn a_call_deadline_stops_a_loop_and_a_blocked_sleep() {
    let options = WasmOracleOptions::default().call_timeout(Some(Duration::from_millis(300)));
    let (exit, tail) = limit_bites_once(Policy::default(), options.clone(), "spin", &[]).await;
    assert_eq!(
        exit,
        Exit::DeadlineExceeded {
            limit: Duration::from_millis(300)
        }
    );
    assert_eq!(tail, vec!["spinning forever".to_owned()]);
    // Blocked in a host call, where no epoch check runs: the outer timer stops it.
    let (exit, tail) = limit_bites_once(Policy::default(), options, "sleep", &[f(600_000)]).await;
    assert_eq!(
        exit,
        Exit::DeadlineExceeded {
            limit: Duration::from_millis(300)
        }
    );
    assert_eq!(tail, vec!["sleeping 600000 ms".to_owned()]);
}

#[tokio::test]
async fn the_memory_cap_stops_one_call_and_the_next_is_answered() {
    let policy = Policy::default().max_memory(Some(32 << 20));
    let (exit, tail) =
        limit_bites_once(policy, WasmOracleOptions::default(), "grow", &[f(64)]).await;
    assert_eq!(exit, Exit::MemoryLimit { limit: 32 << 20 });
    assert_eq!(tail.first().map(String::as_str), Some("allocating 64 MiB"));
}

#[tokio::test]
async fn a_trap_carries_the_stderr_tail_and_poisons_the_instance_by_default() {
    let (exit, tail) = limit_bites_once(
        Policy::default(),
        WasmOracleOptions::default(),
        "trap",
        &byte_array("x"),
    )
    .await;
    assert!(
        matches!(&exit, Exit::Trap { message, .. } if message.contains("unreachable")),
        "{exit:?}"
    );
    assert_eq!(tail.first().map(String::as_str), Some("about to trap: x"));
    assert!(
        tail.iter().any(|l| l.contains("trapped on purpose: x")),
        "{tail:?}"
    );

    // Scarb's semantics, the default: the connection stays, every later call fails.
    let (host, plugin) = load();
    let mut o = connect(
        &host,
        &plugin,
        &Policy::default(),
        WasmOracleOptions::default(),
    )
    .await;
    let first = invoke(&mut o, "trap", &byte_array("y"))
        .await
        .expect_err("trap");
    assert!(
        first.to_string().contains("stderr:\nabout to trap: y"),
        "{first}"
    );
    let next = invoke(&mut o, "add", &[f(1), f(2)])
        .await
        .expect_err("poisoned");
    assert!(
        matches!(&next, InvokeError::Poisoned { cause } if cause.contains("plugin trapped")),
        "{next:?}"
    );
    // Codec and selector errors never poison.
    let (host, plugin) = load();
    let mut o = connect(
        &host,
        &plugin,
        &Policy::default(),
        WasmOracleOptions::default(),
    )
    .await;
    assert!(invoke(&mut o, "add", &[f(1)]).await.is_err());
    assert!(invoke(&mut o, "nope", &[]).await.is_err());
    assert_eq!(ok(&mut o, "add", &[f(1), f(2)]).await, vec![f(3)]);
    o.close().await;
}

/// `(tag, message)` of a `result<string, string>` answer.
fn result_string(felts: &[Felt]) -> (u128, String) {
    let tag = felts[0].to_u128().expect("tag");
    (tag, decode_byte_array(&felts[1..]).expect("a ByteArray"))
}

#[tokio::test]
async fn filesystem_network_and_environment_are_denied_unless_granted() {
    let (host, plugin) = load();
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("x.txt"), "granted").expect("write");
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a loopback listener");
    let addr = listener.local_addr().expect("addr").to_string();

    let mut o = connect(
        &host,
        &plugin,
        &Policy::default(),
        WasmOracleOptions::default(),
    )
    .await;
    let (tag, msg) = result_string(&ok(&mut o, "read-file", &byte_array("/etc/passwd")).await);
    assert_eq!(tag, 1, "{msg}");
    let cwd = std::env::current_dir().expect("cwd");
    let (tag, msg) = result_string(&ok(&mut o, "read-file", &byte_array("Cargo.toml")).await);
    assert_eq!(
        tag,
        1,
        "no working directory is preopened ({}): {msg}",
        cwd.display()
    );
    let (tag, msg) = result_string(&ok(&mut o, "connect", &byte_array(&addr)).await);
    assert_eq!(tag, 1, "{msg}");
    assert_eq!(
        ok(&mut o, "env", &byte_array("HOME")).await,
        vec![f(0)],
        "no environment"
    );
    o.close().await;

    // What the policy grants, the guest gets.
    let policy = Policy::default()
        .preopen(dir.path(), "/data", Access::ReadOnly)
        .env("ORACLE_MODE", "test");
    let mut o = connect(&host, &plugin, &policy, WasmOracleOptions::default()).await;
    let (tag, msg) = result_string(&ok(&mut o, "read-file", &byte_array("/data/x.txt")).await);
    assert_eq!((tag, msg.as_str()), (0, "granted"));
    let mode = ok(&mut o, "env", &byte_array("ORACLE_MODE")).await;
    assert_eq!(mode, [vec![f(1)], byte_array("test")].concat());
    o.close().await;
    drop(listener);
}

#[tokio::test]
async fn hostile_calldata_is_an_error_before_the_guest_and_the_host_survives() {
    let (host, plugin) = load();
    let mut o = connect(
        &host,
        &plugin,
        &Policy::default(),
        WasmOracleOptions::default(),
    )
    .await;
    let minus_one = felt_from_i64(-1);
    let cases: Vec<(&str, Vec<Felt>)> = vec![
        ("sum", vec![f(u128::from(u64::MAX))]),
        ("sum", vec![minus_one.clone()]),
        ("sum", vec![f(1 << 40), f(1)]),
        ("join", vec![f(0), f(0), f(31), f(0), f(0), f(0)]),
        (
            "join",
            vec![f(0), f(0), minus_one.clone(), f(0), f(0), f(0)],
        ),
        ("join", vec![f(u128::MAX), f(0), f(0), f(0), f(0), f(0)]),
        ("join", vec![f(0), f(0x6162), f(1), f(0), f(0), f(0)]),
        ("add", vec![f(1)]),
        ("add", vec![f(1), f(2), f(3)]),
        ("add", vec![minus_one.clone(), f(1)]),
        ("neg", vec![f(1u128 << 31)]),
        ("first-char", vec![f(0), f(0)]),
    ];
    for (selector, calldata) in cases {
        let err = invoke(&mut o, selector, &calldata)
            .await
            .expect_err("refused");
        assert!(
            matches!(err, InvokeError::Codec(_)),
            "{selector} {calldata:?}: {err:?}"
        );
    }
    let err = invoke(&mut o, "sum", &[f(u128::from(u64::MAX))])
        .await
        .expect_err("huge");
    assert!(matches!(
        err,
        InvokeError::Codec(CodecError::LengthTooLarge { what: "list", .. })
    ));
    let err = invoke(&mut o, "join", &[f(0), f(0), f(31), f(0), f(0), f(0)])
        .await
        .expect_err("pending");
    assert!(
        matches!(err, InvokeError::Codec(CodecError::BadByteArray { .. })),
        "{err:?}"
    );
    // Nothing above entered the guest: its state is untouched and it still answers.
    assert_eq!(ok(&mut o, "count", &[]).await, vec![f(1)]);
    o.close().await;
}

// ---- the CLI ------------------------------------------------------------------------------

fn run_cli(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(peers::sandpipe())
        .args(args)
        .output()
        .expect("run sandpipe");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn call_and_inspect_work_on_the_example() {
    let w = wasm_oracle();
    let w = w.to_str().expect("utf-8 path");
    let (code, out, err) = run_cli(&[
        "call",
        "--protocol",
        "oracle",
        "--method",
        "add",
        "--params",
        r#"["0x1","0x2"]"#,
        w,
    ]);
    assert_eq!((code, out.as_str()), (0, "[\"0x3\"]\n"), "{err}");
    // The guest's stdout never reaches sandpipe's: only the answer is there.
    let (code, out, err) = run_cli(&[
        "call",
        "--protocol",
        "oracle",
        "--method",
        "log",
        "--params",
        r#"["0x0","0x6869","0x2"]"#,
        w,
    ]);
    assert_eq!((code, out.as_str()), (0, "[\"0x2\"]\n"), "{err}");
    assert!(
        err.contains("stdout: hi") && err.contains("stderr: hi"),
        "{err}"
    );
    // A stop: the limit's status, the reason and the stderr tail.
    let (code, out, err) = run_cli(&[
        "call",
        "--protocol",
        "oracle",
        "--fuel",
        "20000000",
        "--method",
        "spin",
        w,
    ]);
    assert_eq!((code, out.as_str()), (121, ""), "{err}");
    // The one stopped answer every oracle gets: the reason, and the tail in its data.
    assert!(
        err.contains(
            "sandpipe: oracle error -32603: oracle failed: plugin ran out of fuel (limit 20000000)"
        ),
        "{err}"
    );
    assert!(err.contains(r#""stderr":["spinning forever"]"#), "{err}");
    let (code, _, err) = run_cli(&[
        "call",
        "--protocol",
        "oracle",
        "--method",
        "pick",
        "--params",
        "[]",
        w,
    ]);
    assert_eq!(code, 1);
    assert!(err.contains("multiple exports named: pick"), "{err}");

    let (code, out, err) = run_cli(&["inspect", "--protocol", "oracle", "--json", w]);
    assert_eq!(code, 0, "{err}");
    let report: Value = serde_json::from_str(&out).expect("json");
    let selectors = report["self_description"]["selectors"]
        .as_array()
        .expect("selectors");
    let find = |name: &str| selectors.iter().find(|s| s["name"] == name).cloned();
    assert_eq!(
        find("add"),
        Some(json!({"name": "add", "signature": "func(a: u64, b: u64) -> u64"}))
    );
    assert_eq!(
        find("sandpipe:wasm-oracle/math@0.1.0/pick"),
        Some(json!({"name": "sandpipe:wasm-oracle/math@0.1.0/pick",
                    "signature": "func(items: list<u32>, index: u32) -> option<u32>"}))
    );
    assert_eq!(
        find("safe-div").map(|s| s["signature"].clone()),
        Some(json!("func(a: u64, b: u64) -> result<u64, string>"))
    );
    assert_eq!(
        find("half").map(|s| s["unsupported"].clone()),
        Some(json!("unsupported type: float64"))
    );
}

const READY: &str = r#"{"jsonrpc":"2.0","id":0,"method":"ready"}"#;

fn invoke_line(id: u64, selector: &str, calldata: &[&str]) -> Vec<u8> {
    format!("{}\n", peers::oracle_invoke(id, selector, calldata)).into_bytes()
}

/// The engine's side of `sandpipe run --protocol oracle BUDGET X.wasm`: the handshake, an
/// endless loop, then `add`; the lines it got back and the process's stderr.
fn endless_loop_then_add(budget: &[&str]) -> (Vec<Value>, String, String) {
    let w = wasm_oracle();
    let mut cmd = Command::new(peers::sandpipe());
    cmd.args(["run", "--protocol", "oracle"])
        .args(budget)
        .arg(&w);
    let t = play(
        &mut cmd,
        &[
            Step::Expect(1),
            Step::Send(format!("{}\n", peers::ORACLE_READY_ACK).into_bytes()),
            Step::Send(invoke_line(1, "spin", &[])),
            Step::Expect(1),
            Step::Send(invoke_line(2, "add", &["0x28", "0x2"])),
            Step::Expect(1),
            Step::Send(b"{\"jsonrpc\":\"2.0\",\"method\":\"shutdown\"}\n".to_vec()),
            Step::CloseStdin,
        ],
    );
    assert_eq!(t.broke, None, "{}", String::from_utf8_lossy(&t.stderr));
    let lines = json_lines(&t.stdout);
    (
        lines,
        t.status,
        String::from_utf8_lossy(&t.stderr).into_owned(),
    )
}

#[test]
fn run_protocol_oracle_stops_an_endless_loop_by_fuel_and_answers_the_next_invoke() {
    let (lines, status, stderr) =
        endless_loop_then_add(&["--fuel-per-request", "50000000", "--restart"]);
    assert_eq!(
        lines[0],
        serde_json::from_str::<Value>(READY).expect("json")
    );
    let error = &lines[1]["error"];
    assert_eq!(lines[1]["id"], 1);
    assert_eq!(error["code"], -32603);
    assert_eq!(
        error["message"],
        "oracle failed: request ran out of fuel (limit 50000000 per request)"
    );
    assert_eq!(error["data"]["stderr"], json!(["spinning forever"]));
    assert_eq!(
        lines[2],
        json!({"jsonrpc": "2.0", "id": 2, "result": ["0x2a"]})
    );
    assert_eq!(status, "exit code 0", "{stderr}");
    assert!(stderr.contains("sandpipe: request 1 (invoke) failed: request ran out of fuel (limit 50000000 per request); the next request gets a fresh instance"), "{stderr}");
}

#[test]
fn run_protocol_oracle_stops_an_endless_loop_by_request_timeout_and_answers_the_next_invoke() {
    let (lines, status, stderr) =
        endless_loop_then_add(&["--request-timeout", "500ms", "--restart"]);
    assert_eq!(
        lines[1]["error"]["message"],
        "oracle failed: plugin exceeded its deadline of 500ms"
    );
    assert_eq!(
        lines[1]["error"]["data"]["stderr"],
        json!(["spinning forever"])
    );
    assert_eq!(lines[2]["result"], json!(["0x2a"]));
    assert_eq!(status, "exit code 0", "{stderr}");

    // Without --restart the instance stays poisoned, as in Scarb: the next invoke is answered
    // with an error, and the session goes on.
    let (lines, status, _) = endless_loop_then_add(&["--request-timeout", "500ms"]);
    assert!(
        lines[1]["error"]["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("oracle failed: plugin exceeded its deadline"))
    );
    let poisoned = lines[2]["error"]["message"].as_str().expect("an error");
    assert!(poisoned.starts_with("oracle failed: the instance is poisoned by an earlier failure: plugin exceeded its deadline of 500ms"), "{poisoned}");
    assert_eq!(status, "exit code 0");
}

/// The engine's side of `sandpipe -v run --protocol oracle --max-memory 64MiB RECYCLE X.wasm`:
/// twelve `hoard` invokes of 8 MiB each (a heap that grows per call and never shrinks); the
/// answers (MiB the instance keeps in all), the exit status and sandpipe's stderr.
fn hoard_twelve_times(recycle: &[&str]) -> (Vec<Value>, String, String) {
    let w = wasm_oracle();
    let mut cmd = Command::new(peers::sandpipe());
    cmd.args(["-v", "run", "--protocol", "oracle", "--max-memory", "64MiB"])
        .args(recycle)
        .arg(&w);
    let mut steps = vec![
        Step::Expect(1),
        Step::Send(format!("{}\n", peers::ORACLE_READY_ACK).into_bytes()),
    ];
    for id in 1..=12 {
        steps.push(Step::Send(invoke_line(id, "hoard", &["0x8"])));
        steps.push(Step::Expect(1));
    }
    steps.push(Step::Send(
        b"{\"jsonrpc\":\"2.0\",\"method\":\"shutdown\"}\n".to_vec(),
    ));
    steps.push(Step::CloseStdin);
    let t = play(&mut cmd, &steps);
    assert_eq!(t.broke, None, "{}", String::from_utf8_lossy(&t.stderr));
    let lines = json_lines(&t.stdout);
    (
        lines[1..].to_vec(),
        t.status,
        String::from_utf8_lossy(&t.stderr).into_owned(),
    )
}

#[test]
fn run_protocol_oracle_recycles_a_component_whose_memory_grows_per_call() {
    // `auto`: once the instance has used half of its headroom below the 64 MiB cap (measured
    // from its size after the first call), it is replaced between calls, and every call is
    // answered: the hoard starts over on the fresh instance.
    let (answers, status, stderr) = hoard_twelve_times(&["--recycle-memory", "auto"]);
    let kept: Vec<Value> = answers.iter().map(|a| a["result"].clone()).collect();
    assert!(
        kept.iter().all(|k| k.is_array()),
        "every call answered: {answers:?}\n{stderr}"
    );
    assert_eq!(kept[0], json!(["0x8"]));
    let fresh = kept[1..].iter().position(|k| *k == json!(["0x8"]));
    assert!(
        fresh.is_some_and(|i| i > 0),
        "a fresh instance's first hoard: {kept:?}"
    );
    assert!(
        stderr.contains("recycling the instance between requests"),
        "the log says so: {stderr}"
    );
    assert!(
        stderr.contains("recycles=") && !stderr.contains("recycles=0"),
        "{stderr}"
    );
    assert_eq!(status, "exit code 0", "{stderr}");

    // A SIZE works as well: over 20 MiB after a call, the instance is replaced.
    let (answers, status, stderr) = hoard_twelve_times(&["--recycle-memory", "20MiB"]);
    let kept: Vec<Value> = answers.iter().map(|a| a["result"].clone()).collect();
    assert_eq!(
        kept[..4],
        [
            json!(["0x8"]),
            json!(["0x10"]),
            json!(["0x18"]),
            json!(["0x8"])
        ],
        "{stderr}"
    );
    assert_eq!(status, "exit code 0", "{stderr}");

    // Without recycling the same calls meet the cap: the call that passes it stops the
    // instance (poisoned, as in Scarb), so the feature is what keeps them answered.
    let (answers, _, stderr) = hoard_twelve_times(&["--recycle-memory", "none"]);
    let stopped = answers
        .iter()
        .find(|a| a.get("error").is_some())
        .expect("the cap bites without recycling");
    let reason = stopped["error"]["data"]["reason"]
        .as_str()
        .unwrap_or_default();
    assert!(
        reason.contains("memory limit of 64.0 MiB"),
        "{stopped}\n{stderr}"
    );
}

#[test]
fn sessions_with_export_components_are_recorded_and_replay_green_and_a_change_fails() {
    let dir = tempfile::tempdir().expect("tempdir");
    let oracle = wasm_oracle();
    let tools = sandpipe_tests::mcp_tools();
    // `run --protocol oracle`, as an engine drives it: the handshake, two invokes, shutdown.
    let run_file = dir.path().join("run.transcript");
    let mut cmd = Command::new(peers::sandpipe());
    cmd.args(["run", "--protocol", "oracle", "--deterministic", "--record"])
        .arg(&run_file)
        .arg(&oracle);
    let t = play(
        &mut cmd,
        &[
            Step::Expect(1),
            Step::Send(format!("{}\n", peers::ORACLE_READY_ACK).into_bytes()),
            Step::Send(invoke_line(1, "add", &["0x1", "0x2"])),
            Step::Expect(1),
            Step::Send(invoke_line(2, "count", &[])),
            Step::Expect(1),
            Step::CloseStdin,
        ],
    );
    assert_eq!(t.broke, None, "{}", String::from_utf8_lossy(&t.stderr));
    // `call --protocol mcp` on the tools component: the handshake, one tool call, shutdown.
    let call_file = dir.path().join("call.transcript");
    let call_path = call_file.to_str().expect("utf-8 path");
    let (code, out, err) = run_cli(&[
        "call",
        "--protocol",
        "mcp",
        "--deterministic",
        "--record",
        call_path,
        "--method",
        "tools/call",
        "--params",
        r#"{"name":"add","arguments":{"a":1,"b":2}}"#,
        tools.to_str().expect("utf-8 path"),
    ]);
    assert_eq!(code, 0, "{out}{err}");
    for (file, plugin, protocol, answer) in [
        (&run_file, &oracle, "oracle", r#"["0x3"]"#),
        (&call_file, &tools, "mcp", r#""text":"3""#),
    ] {
        let recorded = std::fs::read_to_string(file).expect("a recording");
        assert!(
            recorded.contains(&format!("# protocol: {protocol}\n"))
                && recorded.contains("\"seed\":0")
                && recorded.contains(answer)
                && recorded.contains("# outcome: plugin exited with code 0"),
            "{recorded}"
        );
        let (file, plugin) = (
            file.to_str().expect("utf-8 path"),
            plugin.to_str().expect("utf-8 path"),
        );
        let (code, _, err) = run_cli(&["replay", file, "--plugin", plugin]);
        assert_eq!(code, 0, "{protocol}: {err}\n{recorded}");
        assert!(err.contains("replay matched all"), "{err}");
        // The same session with the answer changed: the replay names the frame (from 0).
        let changed = dir.path().join(format!("{protocol}-changed.transcript"));
        let at = recorded.find(answer).expect("the answer");
        let (line, index) = recorded
            .lines()
            .filter(|l| l.starts_with(['<', '>']))
            .enumerate()
            .find_map(|(i, l)| l.contains(answer).then_some((l, i)))
            .expect("the answer's frame");
        assert!(line.starts_with('<'), "{line}");
        let mut edited = recorded.clone();
        edited.replace_range(at..at + answer.len(), &answer.replace('3', "4"));
        std::fs::write(&changed, edited).expect("write");
        let changed = changed.to_str().expect("utf-8 path");
        let (code, _, err) = run_cli(&["replay", changed, "--plugin", plugin]);
        assert_eq!(code, 1, "{protocol}: {err}");
        assert!(
            err.contains(&format!("first divergence at frame {index}")),
            "{protocol}: {err}"
        );
    }
}

/// Each non-empty line of `stdout`, parsed as JSON.
fn json_lines(stdout: &[u8]) -> Vec<Value> {
    stdout
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_slice(l).expect("a JSON line"))
        .collect()
}
