//! `call`, `run` and `inspect` with `--protocol oracle` for a component that exports functions
//! (a Cairo `wasm:` oracle): the CLI side of [`crate::wasm_oracle`].

use anyhow::{Context, Result};
use sandpipe_proto::frame::{FrameLimits, Framing};
use sandpipe_proto::oracle::Felt;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::engine::{read_engine, write_engine};
use super::exit_code;
use super::proxy::BudgetArgs;
use super::signals::{self, SignalPolicy, Signals};
use super::status::status_for;
use crate::protocols::Protocol;
use crate::protocols::mcp::{ExportTools, serve_exports};
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

/// `sandpipe run --protocol oracle|mcp X.wasm` for a component that exports functions: serve
/// the `stdio:` oracle protocol, or MCP with each function a tool, on sandpipe's stdin and
/// stdout with the component's exports behind it. `--fuel-per-request` and
/// `--request-timeout` bound each invoke or `tools/call`; `--restart` gives the call after a
/// stop a fresh instance (without it the instance stays poisoned, as in Scarb, and every later
/// call gets an error); `--recycle-after` and `--recycle-memory` renew a healthy instance
/// between calls; `--allow-tool`/`--deny-tool` filter the MCP tools.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn serve(
    host: &Host,
    plugin: &Plugin,
    mut policy: Policy,
    protocol: Protocol,
    budgets: &BudgetArgs,
    limits: FrameLimits,
    mut signals: Signals,
    on_signal: SignalPolicy,
) -> Result<i32> {
    let filter = sandpipe_proto::mcp::ToolFilter {
        allow: budgets.allow_tools.clone(),
        deny: budgets.deny_tools.clone(),
    };
    if !filter.is_open() && protocol != Protocol::Mcp {
        eprintln!("sandpipe: --allow-tool and --deny-tool need --protocol mcp");
        return Ok(2);
    }
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
    let oracle = WasmOracle::new(host, plugin, &policy, options)
        .await
        .with_context(|| format!("starting {}", plugin.path().display()))?;
    let (in_tx, in_rx) = mpsc::channel::<Vec<u8>>(16);
    let (out_tx, out_rx) = mpsc::channel::<Vec<u8>>(16);
    let input = tokio::spawn(read_engine(in_tx, Framing::JsonLines, limits));
    let output = tokio::spawn(write_engine(out_rx, Framing::JsonLines, limits));
    let restart = budgets.restart;
    let report = match protocol {
        Protocol::Mcp => {
            let name = plugin
                .path()
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_else(|| "component".into());
            let mut tools = ExportTools::new(oracle, filter, &name);
            let served = serve_exports(&mut tools, in_rx, out_tx, |i| {
                print_incident(i, "tools/call", restart)
            });
            let report =
                signals::serve_until_done(served, &mut signals, &on_signal, &input.abort_handle())
                    .await;
            tools.close().await;
            match report {
                Ok(report) => report,
                Err(status) => return Ok(status),
            }
        }
        _ => {
            let mut oracle = oracle;
            let served = serve_wasm_oracle(&mut oracle, in_rx, out_tx, |i| {
                print_incident(i, "invoke", restart)
            });
            let report =
                signals::serve_until_done(served, &mut signals, &on_signal, &input.abort_handle())
                    .await;
            oracle.close().await;
            match report {
                Ok(report) => report,
                Err(status) => return Ok(status),
            }
        }
    };
    let _ = output.await;
    input.abort();
    let bad_input = match input.await {
        Ok(Err(e)) => Some(e),
        _ => None,
    };
    tracing::info!(
        calls = report.invokes,
        failed = report.failed,
        shut_down = report.shut_down,
        "exports session ended"
    );
    if let Some(e) = bad_input {
        eprintln!("sandpipe: bad frame on stdin: {e}");
        return Ok(exit_code::BAD_FRAME);
    }
    Ok(0)
}

fn print_incident(i: &InvokeIncident, what: &str, restart: bool) {
    let next = match &i.error {
        InvokeError::Stopped { .. } if restart => "; the next request gets a fresh instance",
        InvokeError::Stopped { .. } => "; the instance is poisoned (use --restart for a fresh one)",
        _ => "",
    };
    let first_line = i.error.to_string();
    let first_line = first_line.lines().next().unwrap_or_default().to_owned();
    eprintln!(
        "sandpipe: request {} ({what} {}) failed: {first_line}{next}",
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
                let supported = f
                    .params
                    .as_ref()
                    .and(f.results.as_ref())
                    .map_err(Clone::clone)
                    .and_then(|_| {
                        let params = f.params.as_deref().unwrap_or_default();
                        let results = f.results.as_deref().unwrap_or_default();
                        sandpipe_proto::oracle::wasm::check_supported(params.iter().chain(results))
                    });
                if let Err(e) = supported {
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

/// The MCP tools of a component that exports functions, started under `policy` (so a
/// component that cannot start says so).
async fn export_tools(
    host: &Host,
    plugin: &Plugin,
    policy: &Policy,
    mode: StderrMode,
) -> Result<ExportTools> {
    let options = WasmOracleOptions::default().stderr(mode);
    let oracle = WasmOracle::new(host, plugin, policy, options)
        .await
        .with_context(|| format!("starting {}", plugin.path().display()))?;
    let name = plugin
        .path()
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "component".into());
    Ok(ExportTools::new(
        oracle,
        sandpipe_proto::mcp::ToolFilter::default(),
        &name,
    ))
}

/// `inspect --protocol mcp` of a component that exports functions: its tools as `tools/list`
/// gives them.
pub(crate) async fn describe_tools(
    host: &Host,
    plugin: &Plugin,
    policy: &Policy,
) -> Result<Value, String> {
    let tools = export_tools(host, plugin, policy, StderrMode::Discard)
        .await
        .map_err(|e| format!("{e:#}"))?;
    let list = tools.list();
    tools.close().await;
    Ok(json!({"kind": "MCP tools (exported functions)", "tools": list["tools"]}))
}

/// `call --protocol mcp --method tools/list|tools/call` of a component that exports
/// functions: one instance, one request; a tool result with `isError: true` exits 1 (with the
/// stop's status when the call was stopped).
pub(crate) async fn call_tool(
    host: &Host,
    plugin: &Plugin,
    policy: &Policy,
    method: &str,
    params: Option<&Value>,
) -> Result<i32> {
    let mut tools = export_tools(host, plugin, policy, StderrMode::Inherit).await?;
    let (answer, failed) = match method {
        sandpipe_proto::mcp::TOOLS_LIST => (Ok(tools.list()), None),
        sandpipe_proto::mcp::TOOLS_CALL => tools.call(params).await,
        other => {
            tools.close().await;
            anyhow::bail!("a component's exports answer tools/list and tools/call, not {other}");
        }
    };
    tools.close().await;
    match answer {
        Ok(result) => {
            println!("{}", serde_json::to_string(&result)?);
            Ok(match failed {
                Some((_, InvokeError::Stopped { exit, .. })) => status_for(&exit),
                _ if result.get("isError") == Some(&Value::Bool(true)) => 1,
                _ => 0,
            })
        }
        Err(e) => {
            eprintln!("sandpipe: mcp error {}: {}", e.code, e.message);
            Ok(1)
        }
    }
}
