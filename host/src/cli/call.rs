//! `sandpipe call`: handshake, one call, clean shutdown; the result as JSON on stdout.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use serde_json::Value;

use super::exit_code;
use super::sandbox_args::{SandboxArgs, warn_if_native};
use super::status::ended_status;
use crate::protocols::Protocol;
use crate::protocols::denobridge::DenoBridgeClient;
use crate::protocols::oracle::OracleClient;
use crate::protocols::orchard::{OrchardClient, OrchardError};
use crate::rpc::{JsonRpcPeer, RpcError};
use crate::{Exit, Session, SessionOptions, StderrMode};
use sandpipe_proto::jsonrpc::Dialect;
use sandpipe_proto::oracle::{ErrorOrigin, Felt, OracleError};

/// Arguments of `sandpipe call`: the call itself is given by flags (`--method`, `--params`),
/// so that, as with `run` and `wasmtime run`, everything after PLUGIN is the plugin's.
#[derive(Debug, clap::Args)]
pub struct CallArgs {
    /// The protocol the plugin speaks. Required unless the policy file names it.
    #[arg(long, value_enum, value_name = "PROTOCOL")]
    pub(super) protocol: Option<Protocol>,
    /// The method; for the oracle, the selector (for a wasm: oracle component, a function's
    /// full name, e.g. `ns:pkg/iface@1.0.0/f`, or a unique short one); for Orchard, describe,
    /// configure, execute or schema (plan mode: runs `PLUGIN schema`); for denobridge, the
    /// method names the provider kind (open/renew/close: ephemeral, invoke: action, the rest:
    /// resource), whose calls the protocol machine checks.
    #[arg(long, value_name = "NAME", visible_alias = "selector")]
    method: String,
    /// Parameters as JSON; for the oracle, the calldata array of hex felts.
    #[arg(long, value_name = "JSON", visible_alias = "calldata")]
    params: Option<String>,
    /// Read the plugin, its limits and grants from a policy file (TOML; see the README's
    /// "Policy files"); flags given here override it. PLUGIN may be the file itself.
    #[arg(long, value_name = "FILE")]
    pub(super) policy: Option<PathBuf>,
    #[command(flatten)]
    pub(super) sandbox: SandboxArgs,
    /// Orchard: the config sent with `configure` before an `execute`.
    #[arg(long, value_name = "JSON", default_value = "{}")]
    config: String,
    /// How long the plugin gets to exit after the call before it is killed.
    #[arg(long, value_name = "DURATION", default_value = "2s", value_parser = super::parse_duration)]
    grace: Duration,
    /// Record the session as a transcript (see `sandpipe replay`).
    #[arg(long, value_name = "FILE")]
    record: Option<PathBuf>,
    /// The plugin (.wasm, sandboxed; a policy file, *.toml, naming one; anything else runs
    /// natively, NOT sandboxed).
    pub(super) plugin: PathBuf,
    /// Arguments for the plugin (e.g. the guest path of a state directory): everything after
    /// PLUGIN goes to the plugin, as with `run` and `wasmtime run` (a leading `--` is dropped).
    #[arg(
        value_name = "ARGS",
        trailing_var_arg = true,
        allow_hyphen_values = true
    )]
    pub(super) plugin_args: Vec<String>,
}

pub(crate) async fn call(args: CallArgs) -> Result<i32> {
    let Some(protocol) = args.protocol else {
        anyhow::bail!("call needs --protocol (or `protocol = ...` in the policy file)");
    };
    let params: Option<Value> = match &args.params {
        Some(text) => Some(
            serde_json::from_str(text).with_context(|| format!("--params is not JSON: {text}"))?,
        ),
        None => None,
    };
    let host = super::host(args.sandbox.cache.dir())?;
    let plugin =
        super::dist::load(&host, &args.plugin, &args.sandbox.dist, &args.sandbox.cache).await?;
    super::dist::note_slow_compile(&plugin, &args.plugin);
    let policy = args.sandbox.policy(super::plugin_args(&args.plugin_args))?;
    warn_if_native(&plugin, &policy);
    if protocol == Protocol::Oracle && plugin.exports_functions() {
        if args.record.is_some() {
            bail!("--record records stdio sessions; a wasm: oracle component has none");
        }
        let calldata = felts(params)?;
        return super::wasm_oracle::call(&host, &plugin, &policy, &args.method, &calldata).await;
    }
    if protocol == Protocol::Mcp && plugin.exports_functions() {
        if args.record.is_some() {
            bail!("--record records stdio sessions; a component exporting functions has none");
        }
        return super::wasm_oracle::call_tool(
            &host,
            &plugin,
            &policy,
            &args.method,
            params.as_ref(),
        )
        .await;
    }
    let mut options =
        SessionOptions::framed(protocol.framing()).frame_limits(args.sandbox.frame_limits());
    options.stderr = StderrMode::Inherit;
    options.record = super::sandbox_args::recorder(
        args.record.as_deref(),
        &plugin,
        &policy,
        protocol.framing(),
        Some(protocol.name()),
    )?;
    if protocol == Protocol::Orchard && args.method == "schema" {
        return match crate::protocols::orchard::schema(&host, &plugin, &policy, &options).await {
            Ok(schema) => {
                println!("{}", serde_json::to_string(&schema)?);
                Ok(0)
            }
            Err(e) => Ok(report_orchard(&e, None)),
        };
    }
    let session = host
        .start(&plugin, &policy, &options)
        .await
        .with_context(|| format!("starting plugin {}", plugin.path().display()))?;
    match protocol {
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
                        let _ = server.respond(id, Err(error));
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
        Protocol::DenoBridge => call_denobridge(session, &args.method, params, args.grace).await,
        Protocol::Atp => call_atp(session, &args.method, params, args.grace).await,
        Protocol::FineCode => {
            let config: Value = serde_json::from_str(&args.config)
                .with_context(|| format!("--config is not JSON: {}", args.config))?;
            call_finecode(session, &args.method, params, config, args.grace).await
        }
        Protocol::Orchard => {
            let config: Value = serde_json::from_str(&args.config)
                .with_context(|| format!("--config is not JSON: {}", args.config))?;
            call_orchard(session, &args.method, params, config, args.grace).await
        }
        Protocol::Mcp => call_mcp(session, &args.method, params, args.grace).await,
    }
}

/// denobridge: METHOD names the provider kind ([`denobridge_kind`]) and the call.
async fn call_denobridge(
    session: Session,
    method: &str,
    params: Option<Value>,
    grace: Duration,
) -> Result<i32> {
    let kind = denobridge_kind(method);
    let (client, health) = match DenoBridgeClient::connect(session, kind).await {
        Ok(ok) => ok,
        Err(e) => return Ok(report_rpc(Protocol::DenoBridge, &e)),
    };
    let result = if method == "health" {
        serde_json::to_value(&health).map_err(|e| RpcError::BadResult {
            method: "health".into(),
            reason: e.to_string(),
        })
    } else {
        client.call_value(method, params).await
    };
    finish_rpc(Protocol::DenoBridge, result, client.shutdown(grace).await)
}

/// MCP: the handshake, METHOD (`tools/call`, `tools/list`, `resources/read`, …) with PARAMS,
/// then the spec's shutdown. A tool's own failure (`isError: true`) is printed as the result
/// and exits 1.
async fn call_mcp(
    session: Session,
    method: &str,
    params: Option<Value>,
    grace: Duration,
) -> Result<i32> {
    use crate::protocols::mcp::McpClient;
    let info = serde_json::json!({"name": "sandpipe", "version": env!("CARGO_PKG_VERSION")});
    let (client, _init) = match McpClient::connect(session, info).await {
        Ok(ok) => ok,
        Err(e) => return Ok(report_rpc(Protocol::Mcp, &e)),
    };
    let result = client.call(method, params).await;
    let tool_failed = result
        .as_ref()
        .is_ok_and(|v| method == "tools/call" && v.get("isError") == Some(&Value::Bool(true)));
    let code = finish_rpc(Protocol::Mcp, result, client.shutdown(grace).await)?;
    Ok(if tool_failed { 1 } else { code })
}

async fn call_orchard(
    session: Session,
    method: &str,
    params: Option<Value>,
    config: Value,
    grace: Duration,
) -> Result<i32> {
    let client =
        match OrchardClient::connect(session, sandpipe_proto::orchard::DESCRIBE_TIMEOUT).await {
            Ok(c) => c,
            Err(e) => return Ok(report_orchard(&e, None)),
        };
    let params = params.unwrap_or_else(|| serde_json::json!({}));
    let result = match method {
        "describe" => Ok(serde_json::json!({ "schema": client.schema() })),
        "configure" => client
            .configure(params.get("config").cloned().unwrap_or(params))
            .await
            .map(|()| serde_json::json!({})),
        "execute" => match client.configure(config).await {
            Ok(()) => {
                let action = params
                    .get("action")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned();
                let attrs = params
                    .get("attrs")
                    .cloned()
                    .unwrap_or_else(|| serde_json::json!({}));
                client
                    .execute(&action, attrs)
                    .await
                    .map(|outputs| serde_json::json!({ "outputs": outputs }))
            }
            Err(e) => Err(e),
        },
        other => {
            let _ = client.shutdown(grace).await;
            bail!("orchard methods are describe, configure, execute and schema, not {other:?}");
        }
    };
    let exit = client.shutdown(grace).await;
    match result {
        Ok(v) => {
            println!("{}", serde_json::to_string(&v)?);
            Ok(0)
        }
        Err(e) => Ok(report_orchard(&e, Some(&exit))),
    }
}

/// ATP: METHOD is the step id, PARAMS its config; prints `{"output_id", "output_data"}`.
async fn call_atp(
    session: Session,
    step: &str,
    params: Option<Value>,
    grace: Duration,
) -> Result<i32> {
    use crate::protocols::atp::{AtpClient, AtpFailure, ErrorOrigin as RunOrigin, Value as Cbor};
    let (client, _hello) = match AtpClient::connect(session).await {
        Ok(ok) => ok,
        Err(e) => {
            eprintln!("sandpipe: atp error: {e}");
            return Ok(exit_code::BAD_FRAME);
        }
    };
    let config = Cbor::serialized(&params.unwrap_or(Value::Null))
        .context("converting PARAMS_JSON to CBOR")?;
    // The error, and the status it decides by itself (else how the plugin ended decides).
    let result = match client.start("run-1", step, config).await {
        Ok(run) => run.result().await.map_err(|e| {
            let status = match (e.origin, &e.stopped) {
                (RunOrigin::Plugin, _) => Some(1),
                (_, Some(s)) if s.violation => Some(exit_code::BAD_FRAME),
                _ => None,
            };
            (e.to_string(), status)
        }),
        Err(AtpFailure::Stopped(s)) if s.violation => {
            Err((s.reason.clone(), Some(exit_code::BAD_FRAME)))
        }
        Err(e) => Err((e.to_string(), None)),
    };
    let exit = client.done(grace).await;
    match result {
        Ok(done) => {
            let data = done
                .output_data
                .deserialized::<Value>()
                .unwrap_or_else(|_| Value::from(crate::cbor_note::render_value(&done.output_data)));
            println!(
                "{}",
                serde_json::json!({"output_id": done.output_id, "output_data": data})
            );
            Ok(0)
        }
        Err((e, status)) => {
            eprintln!("sandpipe: atp error: {e}");
            Ok(status.unwrap_or_else(|| ended_status(Some(&exit), 1)))
        }
    }
}

/// FineCode: METHOD is a call (`actions/run`, `finecodeRunner/resolveActionMeta`, ...), PARAMS
/// its params; `--config` answers the runner's `projects/getRawConfig`. Direct call form.
async fn call_finecode(
    session: Session,
    method: &str,
    params: Option<Value>,
    config: Value,
    grace: Duration,
) -> Result<i32> {
    use crate::protocols::finecode::{
        Call, CallForm, FineCodeClient, FineCodeFailure, RunnerRequest, SyncRequests, not_served,
    };
    use sandpipe_proto::finecode::FineCodeError;
    let Some(m) = sandpipe_proto::finecode::Method::from_name(method) else {
        let _ = session.shutdown(grace).await;
        bail!("unknown FineCode call {method:?}");
    };
    let call = Call::from_params(m, params)
        .map_err(|e| anyhow::anyhow!("bad params for {method}: {e}"))?;
    let handler = SyncRequests(move |request: RunnerRequest| match request {
        // The runner expects the config as a JSON-encoded string.
        RunnerRequest::GetRawConfig { .. } => {
            Ok(serde_json::json!({ "config": config.to_string() }))
        }
        other => Err(not_served(&format!("{other:?}"))),
    });
    let (client, _init) = match FineCodeClient::connect(session, CallForm::Direct, handler).await {
        Ok(ok) => ok,
        Err(e) => {
            eprintln!("sandpipe: finecode error: {e}");
            return Ok(exit_code::BAD_FRAME);
        }
    };
    let result = client.call(call).await;
    let exit = client.shutdown(grace).await;
    match result {
        Ok(reply) => {
            println!(
                "{}",
                serde_json::to_string(&reply.to_value(CallForm::Direct))?
            );
            Ok(0)
        }
        Err(e) => {
            eprintln!("sandpipe: finecode error: {e}");
            Ok(match &e {
                // An answer that does not have the call's shape breaks the protocol.
                FineCodeFailure::Call(FineCodeError::BadResult { .. }) => exit_code::BAD_FRAME,
                FineCodeFailure::Stopped { stopped, .. } if stopped.violation => {
                    exit_code::BAD_FRAME
                }
                _ => ended_status(Some(&exit), 1),
            })
        }
    }
}

/// Print the Orchard error on stderr; the exit status for it (`exit`: how the provider ended,
/// once it has).
fn report_orchard(e: &OrchardError, exit: Option<&Exit>) -> i32 {
    eprintln!("sandpipe: orchard error {}: {}", e.code, e.message);
    if let Some(d) = &e.detail {
        eprintln!("sandpipe: detail: {d}");
    }
    if e.violation {
        exit_code::BAD_FRAME
    } else if e.from_provider {
        1
    } else {
        ended_status(exit, 1)
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
    let exit_now = client.control().try_exit();
    let violation = client.stopped().is_some_and(|s| s.violation);
    let exit = client.shutdown(grace).await;
    match result {
        Ok(felts) => {
            println!("{}", serde_json::to_string(&felts)?);
            Ok(0)
        }
        // The host stopped a plugin that broke the protocol: how it ended (killed) is ours.
        Err(e) if violation && e.origin == ErrorOrigin::Host => {
            report_oracle(&e, None);
            Ok(exit_code::BAD_FRAME)
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
        _ => ended_status(exit.as_ref(), exit_code::BAD_FRAME),
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
        RpcError::Refused(_) => exit_code::HOST_ERROR,
        RpcError::BadResult { .. } => exit_code::BAD_FRAME,
        RpcError::Failed { stopped, .. } if stopped.violation => exit_code::BAD_FRAME,
        // Exited 0 (or unknown) with the call unanswered is a protocol failure too.
        RpcError::Failed { stopped, .. } => {
            ended_status(stopped.exit.as_ref(), exit_code::BAD_FRAME)
        }
    }
}

/// The denobridge provider kind a `call` of `method` speaks to: the kind that has the method
/// (`read` is a resource's; `health` any kind's). A data source's `read` is not callable
/// from `sandpipe call`.
fn denobridge_kind(method: &str) -> sandpipe_proto::denobridge::ProviderKind {
    use sandpipe_proto::denobridge::ProviderKind;
    match method {
        "open" | "renew" | "close" => ProviderKind::Ephemeral,
        "invoke" => ProviderKind::Action,
        _ => ProviderKind::Resource,
    }
}

#[cfg(test)]
mod tests {
    //! `call`'s exit status for each kind of failure, per protocol, against in-memory plugins
    //! ([`Session::memory`]): the plugin's own error is 1; an answer that breaks the protocol
    //! is 123 (the README's table), whoever stops the plugin for it.

    use sandpipe_proto::atp;
    use serde_json::json;

    use super::*;

    const GRACE: Duration = Duration::from_secs(1);

    fn session(protocol: Protocol, plugin: impl crate::MemoryPlugin) -> Session {
        Session::memory(plugin, &SessionOptions::framed(protocol.framing()))
    }

    fn json(frame: &[u8]) -> Value {
        serde_json::from_slice(frame).expect("json")
    }

    fn bytes(v: &Value) -> Vec<u8> {
        serde_json::to_vec(v).expect("json")
    }

    /// An Orchard provider that answers `execute` with `execute_result`.
    fn orchard(execute_result: Value) -> impl crate::MemoryPlugin {
        move |frame: &[u8]| {
            let v = json(frame);
            let answer = match v["method"].as_str() {
                Some("describe") => json!({"result": {"schema": {"name": "p", "protocol": "1"}}}),
                Some("execute") => execute_result.clone(),
                _ => json!({"result": {}}),
            };
            let mut answer = answer;
            answer["id"] = v["id"].clone();
            vec![bytes(&answer)]
        }
    }

    #[tokio::test]
    async fn an_orchard_execute_result_without_outputs_is_a_protocol_violation() {
        for (execute_result, want) in [
            (json!({"result": {}}), exit_code::BAD_FRAME),
            // The provider's own error.
            (
                json!({"error": {"code": "validation_failed", "message": "no"}}),
                1,
            ),
        ] {
            let session = session(Protocol::Orchard, orchard(execute_result.clone()));
            let params = Some(json!({"action": "a", "attrs": {}}));
            let status = call_orchard(session, "execute", params, json!({}), GRACE)
                .await
                .expect("called");
            assert_eq!(status, want, "{execute_result}");
        }
    }

    /// A JSON-RPC 2.0 plugin that answers each request with `result(method)`; notifications
    /// get nothing.
    fn jsonrpc(result: fn(&str) -> Value) -> impl crate::MemoryPlugin {
        move |frame: &[u8]| {
            let v = json(frame);
            match (v.get("id"), v["method"].as_str()) {
                (Some(id), Some(method)) => {
                    vec![bytes(
                        &json!({"jsonrpc": "2.0", "id": id, "result": result(method)}),
                    )]
                }
                _ => Vec::new(),
            }
        }
    }

    #[tokio::test]
    async fn a_denobridge_result_of_the_wrong_shape_is_a_protocol_violation() {
        let plugin = jsonrpc(|method| match method {
            "health" => json!({"ok": true}),
            // A create result has an `id`.
            _ => json!({"state": {}}),
        });
        let params = Some(json!({"props": {}}));
        let status = call_denobridge(
            session(Protocol::DenoBridge, plugin),
            "create",
            params,
            GRACE,
        )
        .await
        .expect("called");
        assert_eq!(status, exit_code::BAD_FRAME);
    }

    #[tokio::test]
    async fn a_finecode_reply_of_the_wrong_shape_is_a_protocol_violation() {
        let plugin = jsonrpc(|method| match method {
            "initialize" => json!({"capabilities": {}}),
            "shutdown" => Value::Null,
            // getInfo's reply is an object.
            _ => json!(5),
        });
        let session = session(Protocol::FineCode, plugin);
        let method = "finecodeRunner/getInfo";
        let status = call_finecode(session, method, None, json!({}), GRACE)
            .await
            .expect("called");
        assert_eq!(status, exit_code::BAD_FRAME);
    }

    #[tokio::test]
    async fn an_atp_work_done_for_a_run_never_started_is_a_protocol_violation() {
        let plugin = |frame: &[u8]| {
            if frame == atp::START_ITEM {
                let steps = atp::Value::Map(vec![("s".into(), atp::Value::Map(Vec::new()))]);
                let hello = atp::Hello {
                    version: atp::Version::V3,
                    schema: atp::Value::Map(vec![("steps".into(), steps)]),
                    extra: Vec::new(),
                };
                return vec![hello.encode()];
            }
            let done = atp::Message::WorkDone {
                run_id: "never-started".into(),
                output: atp::Output::new("success", atp::Value::Null),
            };
            vec![done.encode()]
        };
        let status = call_atp(session(Protocol::Atp, plugin), "s", None, GRACE)
            .await
            .expect("called");
        assert_eq!(status, exit_code::BAD_FRAME);
    }

    /// A Cairo oracle that answers an invoke with `answer` (its id put in).
    struct Oracle(Value);

    impl crate::MemoryPlugin for Oracle {
        fn start(&mut self) -> Vec<Vec<u8>> {
            vec![bytes(
                &json!({"jsonrpc": "2.0", "id": 0, "method": "ready"}),
            )]
        }
        fn handle(&mut self, frame: &[u8]) -> Result<Vec<Vec<u8>>, String> {
            let v = json(frame);
            if v["method"] != "invoke" {
                return Ok(Vec::new());
            }
            let mut answer = self.0.clone();
            answer["jsonrpc"] = json!("2.0");
            answer["id"] = answer.get("id").cloned().unwrap_or(v["id"].clone());
            Ok(vec![bytes(&answer)])
        }
    }

    #[tokio::test]
    async fn an_oracle_answer_to_no_invoke_is_a_protocol_violation_and_its_error_is_1() {
        for (answer, want) in [
            (json!({"id": 99, "result": []}), exit_code::BAD_FRAME),
            (json!({"result": ["0xzz"]}), exit_code::BAD_FRAME),
            (json!({"error": {"code": -32603, "message": "no"}}), 1),
        ] {
            let session = session(Protocol::Oracle, Oracle(answer.clone()));
            let status = call_oracle(session, "f", &[], GRACE).await.expect("called");
            assert_eq!(status, want, "{answer}");
        }
    }
}
