//! `sandpipe call`: handshake, one call, clean shutdown; the result as JSON on stdout.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use serde_json::Value;

use super::exit_code;
use super::run::status_for;
use super::sandbox_args::{SandboxArgs, warn_if_native};
use crate::protocols::Protocol;
use crate::protocols::denobridge::DenoBridgeClient;
use crate::protocols::oracle::OracleClient;
use crate::rpc::{JsonRpcPeer, RpcError};
use crate::{Exit, Host, Session, SessionOptions, StderrMode};
use sandpipe_proto::jsonrpc::Dialect;
use sandpipe_proto::oracle::{ErrorOrigin, Felt, OracleError};

/// Arguments of `sandpipe call`.
#[derive(Debug, clap::Args)]
pub struct CallArgs {
    /// The protocol the plugin speaks: jsonrpc, oracle, orchard or denobridge.
    #[arg(long, value_name = "PROTOCOL")]
    protocol: Protocol,
    #[command(flatten)]
    sandbox: SandboxArgs,
    /// An argument for the plugin (repeatable; e.g. the guest path of a state directory).
    #[arg(long = "arg", value_name = "ARG", allow_hyphen_values = true)]
    plugin_args: Vec<String>,
    /// Orchard: the config sent with `configure` before an `execute`.
    #[arg(long, value_name = "JSON", default_value = "{}")]
    config: String,
    /// How long the plugin gets to exit after the call before it is killed.
    #[arg(long, value_name = "DURATION", default_value = "2s", value_parser = super::parse_duration)]
    grace: Duration,
    /// The plugin (.wasm, sandboxed; anything else runs natively, NOT sandboxed).
    plugin: PathBuf,
    /// The method; for the oracle, the selector; for Orchard, describe, configure, execute
    /// or schema (plan mode: runs `PLUGIN schema`).
    method: String,
    /// Parameters as JSON; for the oracle, the calldata array of hex felts.
    params: Option<String>,
}

pub(crate) async fn call(args: CallArgs) -> Result<i32> {
    let params: Option<Value> = match &args.params {
        Some(text) => Some(
            serde_json::from_str(text)
                .with_context(|| format!("PARAMS_JSON is not JSON: {text}"))?,
        ),
        None => None,
    };
    let host = Host::with_cache_dir(args.sandbox.cache.dir().as_deref())?;
    let plugin = host
        .load(&args.plugin)
        .with_context(|| format!("loading plugin {}", args.plugin.display()))?;
    warn_if_native(&plugin);
    let policy = args.sandbox.policy(args.plugin_args.clone())?;
    let mut options =
        SessionOptions::framed(args.protocol.framing()).frame_limits(args.sandbox.frame_limits());
    options.stderr = StderrMode::Inherit;
    let session = host
        .start(&plugin, &policy, &options)
        .await
        .with_context(|| format!("starting plugin {}", plugin.path().display()))?;
    match args.protocol {
        Protocol::JsonRpc => {
            let rpc = std::sync::Arc::new(JsonRpcPeer::new(session, Dialect::JsonRpc2));
            // `call` serves nothing: answer any request from the plugin so it never waits.
            let server = rpc.clone();
            tokio::spawn(async move {
                while let Some(incoming) = server.next_incoming().await {
                    if let crate::rpc::Incoming::Request { id, method, .. } = incoming {
                        let error = sandpipe_proto::jsonrpc::ErrorObject::new(
                            sandpipe_proto::jsonrpc::METHOD_NOT_FOUND,
                            format!("sandpipe call does not serve {method}"),
                        );
                        let _ = server.respond(id, Err(error)).await;
                    }
                }
            });
            let result = rpc.call(&args.method, params).await;
            finish_rpc(Protocol::JsonRpc, result, rpc.shutdown(args.grace).await)
        }
        Protocol::Oracle => {
            let calldata = felts(params)?;
            call_oracle(session, &args.method, &calldata, args.grace).await
        }
        Protocol::DenoBridge => {
            let (client, health) = match DenoBridgeClient::connect(session).await {
                Ok(ok) => ok,
                Err(e) => return Ok(report_rpc(Protocol::DenoBridge, &e)),
            };
            let result = if args.method == "health" {
                serde_json::to_value(&health).map_err(|e| RpcError::BadResult {
                    method: "health".into(),
                    reason: e.to_string(),
                })
            } else {
                client.rpc().call(&args.method, params).await
            };
            finish_rpc(
                Protocol::DenoBridge,
                result,
                client.shutdown(args.grace).await,
            )
        }
        Protocol::Orchard => {
            super::orchard_call(session, &args.method, params, &args.config, args.grace).await
        }
    }
}

fn felts(params: Option<Value>) -> Result<Vec<Felt>> {
    let Some(v) = params else {
        return Ok(Vec::new());
    };
    match sandpipe_proto::oracle::felts_from_value(&v) {
        Ok(f) => Ok(f),
        Err(e) => {
            bail!("oracle calldata must be an array of lowercase hex felts like [\"0x10\"]: {e}")
        }
    }
}

async fn call_oracle(
    session: Session,
    selector: &str,
    calldata: &[Felt],
    grace: Duration,
) -> Result<i32> {
    let mut client = match OracleClient::connect(session).await {
        Ok(c) => c,
        Err(e) => return Ok(report_oracle(&e, None)),
    };
    let result = client.invoke(selector, calldata).await;
    let exit_now = client.session().control().try_exit();
    let exit = client.shutdown(grace).await;
    match result {
        Ok(felts) => {
            println!("{}", serde_json::to_string(&felts)?);
            Ok(0)
        }
        Err(e) => Ok(report_oracle(&e, exit_now.or(Some(exit)))),
    }
}

fn report_oracle(e: &OracleError, exit: Option<Exit>) -> i32 {
    eprintln!("sandpipe: oracle error {}: {}", e.code, e.message);
    if let Some(data) = &e.data {
        eprintln!("sandpipe: data: {data}");
    }
    match e.origin {
        ErrorOrigin::Plugin => 1,
        ErrorOrigin::BadResult => exit_code::BAD_FRAME,
        _ => exit
            .as_ref()
            .map(status_for)
            .filter(|s| *s != 0)
            .unwrap_or(exit_code::BAD_FRAME),
    }
}

/// Print the result, or report the error; either way the exit status.
pub(crate) fn finish_rpc(
    protocol: Protocol,
    result: Result<Value, RpcError>,
    _exit: Exit,
) -> Result<i32> {
    match result {
        Ok(v) => {
            println!("{}", serde_json::to_string(&v)?);
            Ok(0)
        }
        Err(e) => Ok(report_rpc(protocol, &e)),
    }
}

/// Print the protocol's error on stderr; the exit status for it.
pub(crate) fn report_rpc(protocol: Protocol, e: &RpcError) -> i32 {
    let dialect = if protocol == Protocol::Orchard {
        Dialect::Orchard
    } else {
        Dialect::JsonRpc2
    };
    let obj = e.error_object(dialect);
    eprintln!(
        "sandpipe: {} error {}: {}",
        protocol.name(),
        obj.code,
        obj.message
    );
    if let Some(data) = &obj.data {
        eprintln!("sandpipe: data: {data}");
    }
    match e {
        RpcError::Remote(_) | RpcError::Cancelled => 1,
        RpcError::BadResult { .. } => exit_code::BAD_FRAME,
        RpcError::Failed {
            violation: true, ..
        } => exit_code::BAD_FRAME,
        RpcError::Failed {
            exit: Some(exit), ..
        } if status_for(exit) != 0 => status_for(exit),
        // Exited 0 (or unknown) with the call unanswered is a protocol failure too.
        RpcError::Failed { .. } => exit_code::BAD_FRAME,
    }
}
