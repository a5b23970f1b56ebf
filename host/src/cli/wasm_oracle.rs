//! `call`, `run` and `inspect` with `--protocol oracle` for a component that exports functions
//! (a Cairo `wasm:` oracle): the CLI side of [`crate::wasm_oracle`].

use anyhow::{Context, Result};
use sandpipe_proto::frame::{FrameLimits, Framing};
use sandpipe_proto::oracle::Felt;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::exit_code;
use super::proxy::{BudgetArgs, read_engine, write_engine};
use super::run::{SignalPolicy, status_for};
use super::signals::{self, Signals};
use crate::protocols::oracle::{InvokeIncident, serve_wasm_oracle};
use crate::wasm_oracle::{AfterTrap, InvokeError, WasmOracle, WasmOracleOptions};
use crate::{Fuel, Host, Plugin, Policy, StderrMode};

/// `sandpipe call --protocol oracle X.wasm SELECTOR CALLDATA`: one instance, one call.
pub(crate) async fn call(
    host: &Host,
    plugin: &Plugin,
    policy: &Policy,
    selector: &str,
    calldata: &[Felt],
) -> Result<i32> {
    let options = WasmOracleOptions::default().stderr(StderrMode::Inherit);
    let mut oracle = WasmOracle::new(host, plugin, policy, options)
        .await
        .with_context(|| format!("starting wasm: oracle {}", plugin.path().display()))?;
    let result = oracle.invoke(selector, calldata).await;
    oracle.close().await;
    match result {
        Ok(felts) => {
            println!("{}", serde_json::to_string(&felts)?);
            Ok(0)
        }
        Err(e) => Ok(report(&e)),
    }
}

/// Print the oracle error as `call` does for a `stdio:` oracle; the exit status for it.
fn report(e: &InvokeError) -> i32 {
    eprintln!(
        "sandpipe: oracle error {}: {e}",
        sandpipe_proto::jsonrpc::INTERNAL_ERROR
    );
    eprintln!("sandpipe: data: {}", e.data());
    match e {
        InvokeError::Stopped { exit, .. } => status_for(exit),
        _ => 1,
    }
}

/// `sandpipe run --protocol oracle X.wasm`: serve the `stdio:` oracle protocol on sandpipe's
/// stdin and stdout with the component's exports behind it. `--fuel-per-request` and
/// `--request-timeout` bound each invoke; `--restart` gives the invoke after a stop a fresh
/// instance (without it the instance stays poisoned, as in Scarb, and every later invoke gets
/// an error); `--recycle-after` and `--recycle-memory` renew a healthy instance between
/// invokes.
pub(crate) async fn serve(
    host: &Host,
    plugin: &Plugin,
    mut policy: Policy,
    budgets: &BudgetArgs,
    limits: FrameLimits,
    mut signals: Signals,
    on_signal: SignalPolicy,
) -> Result<i32> {
    if let Some(fuel) = budgets.fuel_per_request {
        policy.fuel = Fuel::PerRequest(fuel);
    }
    let mut options = WasmOracleOptions::default()
        .call_timeout(budgets.request_timeout)
        .after_trap(if budgets.restart {
            AfterTrap::Restart
        } else {
            AfterTrap::Poison
        })
        .stderr(StderrMode::Inherit);
    options.recycle_after = budgets.recycle_after;
    options.recycle_memory = budgets.recycle_memory_above();
    let mut oracle = WasmOracle::new(host, plugin, &policy, options)
        .await
        .with_context(|| format!("starting wasm: oracle {}", plugin.path().display()))?;
    let (in_tx, in_rx) = mpsc::channel::<Vec<u8>>(16);
    let (out_tx, out_rx) = mpsc::channel::<Vec<u8>>(16);
    let input = tokio::spawn(read_engine(in_tx, Framing::JsonLines, limits));
    let output = tokio::spawn(write_engine(out_rx, Framing::JsonLines, limits));
    let restart = budgets.restart;
    let report = {
        let served = serve_wasm_oracle(&mut oracle, in_rx, out_tx, |i| print_incident(i, restart));
        match signals::serve_until_done(served, &mut signals, &on_signal, &input.abort_handle())
            .await
        {
            Ok(report) => report,
            Err(status) => return Ok(status),
        }
    };
    oracle.close().await;
    let _ = output.await;
    input.abort();
    let bad_input = match input.await {
        Ok(Err(e)) => Some(e),
        _ => None,
    };
    tracing::info!(
        invokes = report.invokes,
        failed = report.failed,
        shut_down = report.shut_down,
        "wasm: oracle session ended"
    );
    if let Some(e) = bad_input {
        eprintln!("sandpipe: bad frame on stdin: {e}");
        return Ok(exit_code::BAD_FRAME);
    }
    Ok(0)
}

fn print_incident(i: &InvokeIncident, restart: bool) {
    let next = match &i.error {
        InvokeError::Stopped { .. } if restart => "; the next request gets a fresh instance",
        InvokeError::Stopped { .. } => "; the instance is poisoned (use --restart for a fresh one)",
        _ => "",
    };
    let first_line = i.error.to_string();
    let first_line = first_line.lines().next().unwrap_or_default().to_owned();
    eprintln!(
        "sandpipe: request {} (invoke {}) failed: {first_line}{next}",
        i.request, i.selector
    );
}

/// What `inspect` shows of a component's functions: full name and WIT signature, and why the
/// codec cannot carry it, if so.
pub(crate) fn functions_json(plugin: &Plugin) -> Value {
    Value::Array(
        plugin
            .functions()
            .iter()
            .map(|f| {
                let mut entry = json!({"name": f.name, "signature": f.signature});
                if let Err(e) = f.params.as_ref().and(f.results.as_ref()) {
                    entry["unsupported"] = Value::from(e.to_string());
                }
                entry
            })
            .collect(),
    )
}

/// `inspect --protocol oracle` of a `wasm:` oracle: instantiate it (so a component that cannot
/// start says so) and list its selectors.
pub(crate) async fn describe(
    host: &Host,
    plugin: &Plugin,
    policy: &Policy,
) -> Result<Value, String> {
    let options = WasmOracleOptions::default().stderr(StderrMode::Discard);
    let oracle = WasmOracle::new(host, plugin, policy, options)
        .await
        .map_err(|e| e.to_string())?;
    oracle.close().await;
    Ok(json!({ "kind": "wasm: oracle (exported functions)", "selectors": functions_json(plugin) }))
}
