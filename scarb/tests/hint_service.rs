//! Scarb's `OracleHintService` itself, from cheatcode inputs to cheatcode output, with
//! sandpipe registered as its `wasm` protocol, running `examples/wasm-oracle`.
//!
//! The expected answers are the ones Scarb 2.20.1's own `wasm` executor gives for the same
//! calls. They are derived from its source (scarb-oracle-hint-service 0.1.1, identical to the
//! crate at the 2.20.1 release tag except for a wasmtime API rename), not by running it:
//! - `hint_service.rs` `execute_invoke`: the inputs are `ByteArray(connection string)`,
//!   `ByteArray(selector)`, then the calldata as is; success is `[0, ..results]`; any error
//!   is `[1, ByteArray(format!("{err:?}"))]`, and the Debug form of an `anyhow` error made
//!   by `bail!`/`ensure!` without context is its message alone.
//! - `connection.rs`: one connection per exact connection string, reused; a failed connect
//!   is not cached.
//! - `connections/wasm/mod.rs` `search_component_func`: a full name first, then a unique short
//!   name; the two error texts ("no exported func in component named: …\nnote: available funcs
//!   are: …" and "multiple exports named: …\nnote: possible matches are: …", names sorted and
//!   joined with ", ").
//! - `connections/wasm/codec.rs`: the layouts (starknet-core's `Encode` for integers, `Felt`
//!   for signed values, `ByteArray`, a tag felt for option/result) and the error texts
//!   "unsupported type: float64" and "not all calldata was consumed".
//! - `assets.rs` `normalize_lexically`: "invalid asset path `…`: parent reference `..` points
//!   outside of base directory".
//! - A trap: `func.call(..)?` returns wasmtime's error, whose Debug form is "error while
//!   executing at wasm backtrace: … Caused by: wasm trap: wasm `unreachable` instruction
//!   executed" (Scarb's own test `trap` expects exactly that shape); wasmtime then refuses to
//!   enter the instance again, so every later call on that connection fails.
//!
//! The expected felts are built with starknet-core's own encoder (`ByteArray::encode`,
//! `Felt::from(i64)`), not sandpipe's codec. Where sandpipe differs on purpose (trap and
//! limit messages, an absolute path, an endless loop Scarb would never return from, a
//! working directory Scarb would preopen), the test says so and checks sandpipe's answer.

use std::path::{Path, PathBuf};
use std::time::Duration;

use sandpipe::exports::oracle::WasmOracleOptions;
use sandpipe_scarb::{Limits, SandpipeWasm};
use scarb_oracle_hint_service::OracleHintService;
use starknet_core::codec::Encode;
use starknet_core::types::{ByteArray, Felt};

/// A Cairo executable's directory with the example oracle as its asset `oracle.wasm`.
struct Project {
    dir: tempfile::TempDir,
}

impl Project {
    fn new() -> Project {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::copy(
            sandpipe_tests::wasm_oracle(),
            dir.path().join("oracle.wasm"),
        )
        .expect("copy the example oracle");
        std::fs::write(dir.path().join("app.executable.json"), "{}").expect("executable");
        Project { dir }
    }
    fn executable(&self) -> PathBuf {
        self.dir.path().join("app.executable.json")
    }
    fn service<L: Limits>(&self) -> OracleHintService {
        OracleHintService::new(Some(Path::new(&self.executable())))
            .with_protocol::<SandpipeWasm<L>>()
    }
}

fn bytes(s: &str) -> Vec<Felt> {
    let mut out = Vec::new();
    ByteArray::from(s).encode(&mut out).expect("encode");
    out
}

/// The cheatcode output for `oracle::invoke(connection, selector, calldata)`.
///
/// The service encodes an error as `format!("{err:?}")` of an `anyhow::Error`, which ends
/// with a stack backtrace when `RUST_BACKTRACE` or `RUST_LIB_BACKTRACE` is set, in Scarb's
/// executor as here: that suffix is cut before comparing.
fn invoke(
    service: &mut OracleHintService,
    connection: &str,
    selector: &str,
    calldata: &[Felt],
) -> Vec<Felt> {
    let mut inputs = bytes(connection);
    inputs.extend(bytes(selector));
    inputs.extend_from_slice(calldata);
    let cheatcode = service
        .accept_cheatcode(b"oracle_invoke")
        .expect("the service handles oracle_invoke");
    let answer = service.execute_cheatcode(cheatcode, &inputs);
    if answer.first() == Some(&Felt::ONE) {
        let text = message(&answer);
        let text = text
            .split("\n\nStack backtrace:")
            .next()
            .unwrap_or_default();
        return err(text);
    }
    answer
}

/// Scarb's success answer: `[0, ..felts]`.
fn ok(felts: &[Felt]) -> Vec<Felt> {
    [vec![Felt::ZERO], felts.to_vec()].concat()
}

/// Scarb's failure answer: `[1, ByteArray(message)]`.
fn err(message: &str) -> Vec<Felt> {
    [vec![Felt::ONE], bytes(message)].concat()
}

/// The message of a failure answer.
fn message(answer: &[Felt]) -> String {
    assert_eq!(answer.first(), Some(&Felt::ONE), "a failure: {answer:?}");
    let felts: Vec<sandpipe_proto::oracle::Felt> = answer[1..]
        .iter()
        .map(|f| sandpipe_proto::oracle::Felt::from_be_bytes(&f.to_bytes_be()).expect("felt"))
        .collect();
    sandpipe_proto::component::decode_byte_array(&felts).expect("a ByteArray")
}

fn f(n: u64) -> Felt {
    Felt::from(n)
}

const ORACLE: &str = "wasm:oracle.wasm";

#[test]
fn answers_match_scarbs_executor_for_the_same_calls() {
    let project = Project::new();
    let mut service = project.service::<sandpipe_scarb::DefaultLimits>();

    assert_eq!(
        invoke(&mut service, ORACLE, "add", &[f(1), f(2)]),
        ok(&[f(3)])
    );
    let args = [bytes("foo"), bytes("bar")].concat();
    assert_eq!(
        invoke(&mut service, ORACLE, "join", &args),
        ok(&bytes("foobar"))
    );
    // A ByteArray across the 31-byte boundary, both ways.
    let long = "x".repeat(40);
    let args = [bytes(&long[..20]), bytes(&long[20..])].concat();
    assert_eq!(
        invoke(&mut service, ORACLE, "join", &args),
        ok(&bytes(&long))
    );
    // Signed values are Felt::from(i64): P - |x|.
    assert_eq!(
        invoke(&mut service, ORACLE, "neg", &[Felt::from(-5i64)]),
        ok(&[f(5)])
    );
    assert_eq!(
        invoke(&mut service, ORACLE, "neg", &[f(5)]),
        ok(&[Felt::from(-5i64)])
    );
    assert_eq!(
        invoke(
            &mut service,
            ORACLE,
            "sandpipe:wasm-oracle/math@0.1.0/mul",
            &[Felt::from(-3i64), f(4)]
        ),
        ok(&[Felt::from(-12i64)])
    );
    // A list, an option, a result whose error is data.
    assert_eq!(
        invoke(&mut service, ORACLE, "sum", &[f(2), f(20), f(22)]),
        ok(&[f(42)])
    );
    assert_eq!(
        invoke(
            &mut service,
            ORACLE,
            "sandpipe:wasm-oracle/math@0.1.0/pick",
            &[f(2), f(7), f(9), f(1)]
        ),
        ok(&[Felt::ONE, f(9)])
    );
    assert_eq!(
        invoke(&mut service, ORACLE, "safe-div", &[f(9), f(0)]),
        ok(&[vec![Felt::ONE], bytes("cannot divide 9 by zero")].concat())
    );

    // State persists on one connection string; another string is another instance.
    assert_eq!(invoke(&mut service, ORACLE, "count", &[]), ok(&[f(1)]));
    assert_eq!(invoke(&mut service, ORACLE, "count", &[]), ok(&[f(2)]));
    assert_eq!(
        invoke(&mut service, "wasm:./oracle.wasm", "count", &[]),
        ok(&[f(1)])
    );
    assert_eq!(invoke(&mut service, ORACLE, "count", &[]), ok(&[f(3)]));

    // Selector errors: Scarb's texts, word for word.
    assert_eq!(
        invoke(&mut service, ORACLE, "pick", &[f(0), f(0)]),
        err("multiple exports named: pick\nnote: possible matches are: \
             sandpipe:wasm-oracle/math@0.1.0/pick, sandpipe:wasm-oracle/words@0.1.0/pick")
    );
    let available = "add, connect, count, env, first-char, grow, half, hoard, join, log, neg, read-file, \
        safe-div, sandpipe:wasm-oracle/math@0.1.0/mul, sandpipe:wasm-oracle/math@0.1.0/pick, \
        sandpipe:wasm-oracle/words@0.1.0/pick, sleep, spin, split, sum, trap";
    assert_eq!(
        invoke(&mut service, ORACLE, "adda", &[]),
        err(&format!(
            "no exported func in component named: adda\nnote: available funcs are: {available}"
        ))
    );
    assert_eq!(
        invoke(&mut service, ORACLE, "half", &[f(1)]),
        err("unsupported type: float64")
    );
    // Left-over calldata: Scarb says "not all calldata was consumed"; sandpipe adds the counts.
    let left_over = message(&invoke(&mut service, ORACLE, "add", &[f(1), f(2), f(3)]));
    assert!(
        left_over.starts_with("not all calldata was consumed"),
        "{left_over}"
    );
    // An asset outside the executable's directory: Scarb's lookup, Scarb's text.
    assert_eq!(
        invoke(&mut service, "wasm:foo/../../exploit.wasm", "exploit", &[]),
        err(
            "invalid asset path `foo/../../exploit.wasm`: parent reference `..` points outside of base directory"
        )
    );
    // Differs on purpose: Scarb would load any absolute path.
    let absolute = message(&invoke(&mut service, "wasm:/etc/oracle.wasm", "add", &[]));
    assert_eq!(
        absolute,
        "invalid asset path `/etc/oracle.wasm`: an absolute path reaches outside of the base directory"
    );
}

#[test]
fn a_trap_fails_the_call_and_poisons_the_connection_as_in_scarb() {
    let project = Project::new();
    let mut service = project.service::<sandpipe_scarb::DefaultLimits>();
    assert_eq!(invoke(&mut service, ORACLE, "count", &[]), ok(&[f(1)]));
    let trap = message(&invoke(&mut service, ORACLE, "trap", &bytes("boom")));
    // Scarb: "error while executing at wasm backtrace: … wasm trap: wasm `unreachable`
    // instruction executed"; sandpipe names the trap the same way and adds the stderr tail.
    assert!(
        trap.contains("wasm trap: wasm `unreachable` instruction executed"),
        "{trap}"
    );
    assert!(trap.contains("\nstderr:\nabout to trap: boom"), "{trap}");
    // Every later call on that connection fails (Scarb: wasmtime refuses to enter the
    // instance; sandpipe: the poisoned instance says why).
    let later = message(&invoke(&mut service, ORACLE, "add", &[f(1), f(2)]));
    assert!(
        later.starts_with("the oracle instance is poisoned by an earlier failure: plugin trapped"),
        "{later}"
    );
    // Another connection string is another instance, unaffected.
    assert_eq!(
        invoke(&mut service, "wasm:./oracle.wasm", "add", &[f(1), f(2)]),
        ok(&[f(3)])
    );
}

#[test]
fn a_failed_connect_is_not_cached() {
    let project = Project::new();
    let mut service = project.service::<sandpipe_scarb::DefaultLimits>();
    // Scarb's asset lookup text.
    assert_eq!(
        invoke(&mut service, "wasm:late.wasm", "add", &[f(1), f(2)]),
        err("asset not found: late.wasm")
    );
    std::fs::copy(
        sandpipe_tests::wasm_oracle(),
        project.dir.path().join("late.wasm"),
    )
    .expect("copy");
    assert_eq!(
        invoke(&mut service, "wasm:late.wasm", "add", &[f(1), f(2)]),
        ok(&[f(3)])
    );
}

/// Tighter limits than the default, as an executor would choose them.
struct Tight;

impl Limits for Tight {
    fn policy() -> sandpipe::Policy {
        sandpipe::Policy::default()
            .fuel(sandpipe::Fuel::PerRequest(100_000_000))
            .max_memory(Some(32 << 20))
    }
    fn options() -> WasmOracleOptions {
        WasmOracleOptions::default().call_timeout(Some(Duration::from_secs(5)))
    }
}

#[test]
fn limits_bite_where_scarb_has_none() {
    let project = Project::new();
    let mut service = project.service::<Tight>();
    // Scarb: `scarb execute` hangs here forever. sandpipe: an oracle::Error.
    assert_eq!(
        invoke(&mut service, ORACLE, "spin", &[]),
        err("plugin ran out of fuel (limit 100000000)\nstderr:\nspinning forever")
    );
    // Scarb: grows without a cap. sandpipe: the memory limit, on a fresh connection string.
    let grow = message(&invoke(
        &mut service,
        "wasm:./oracle.wasm",
        "grow",
        &[f(64)],
    ));
    assert!(
        grow.starts_with(
            "plugin exceeded the memory limit of 32.0 MiB\nstderr:\nallocating 64 MiB"
        ),
        "{grow}"
    );
    // Scarb preopens its working directory read-write and inherits env and network; sandpipe
    // grants nothing: the guest's own error comes back as a result::err value.
    let answer = invoke(
        &mut service,
        "wasm:sub/../oracle.wasm",
        "read-file",
        &bytes("Cargo.toml"),
    );
    assert_eq!(
        answer[..2],
        [Felt::ZERO, Felt::ONE],
        "ok(err(..)): {answer:?}"
    );
    let answer = invoke(
        &mut service,
        "wasm:sub/../oracle.wasm",
        "env",
        &bytes("HOME"),
    );
    assert_eq!(answer, ok(&[Felt::ZERO]), "no environment");
    // Hostile calldata (Scarb's codec would pass the length to Vec::with_capacity, or slice
    // past a felt's 32 bytes): an error, and the connection keeps working.
    let huge = message(&invoke(
        &mut service,
        "wasm:sub/../oracle.wasm",
        "sum",
        &[Felt::from(u64::MAX)],
    ));
    assert!(
        huge.contains("is a list length that 0 remaining felts cannot hold"),
        "{huge}"
    );
    let pending = message(&invoke(
        &mut service,
        "wasm:sub/../oracle.wasm",
        "join",
        &[f(0), f(0), f(33), f(0), f(0), f(0)],
    ));
    assert!(
        pending.contains("pending word length 0x21 is over 30"),
        "{pending}"
    );
    assert_eq!(
        invoke(
            &mut service,
            "wasm:sub/../oracle.wasm",
            "add",
            &[f(1), f(2)]
        ),
        ok(&[f(3)])
    );
}
