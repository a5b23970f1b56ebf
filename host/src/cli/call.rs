//! `sandpipe call`: handshake, one call, clean shutdown; the result as JSON on stdout.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};
use serde_json::Value;

use super::exit_code;
use super::sandbox_args::{SandboxArgs, warn_if_native};
use super::status::ended_status;
use crate::speak::protocols::Protocol;
use crate::speak::protocols::hooks::{CallError, CallRequest, Failure, Launch};
use crate::{SessionOptions, StderrMode};

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
    /// Read the plugin, its limits and grants from a policy file (TOML; see docs/policy.md);
    /// flags given here override it. PLUGIN may be the file itself.
    #[arg(long, value_name = "FILE")]
    pub(super) policy: Option<PathBuf>,
    #[command(flatten)]
    pub(super) sandbox: SandboxArgs,
    #[command(flatten)]
    pub(super) tools: crate::policy_file::Tools,
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
    /// natively, in a sandbox of namespaces, seccomp and Landlock where the kernel allows).
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
    let tools = super::tool_filter(&args.tools, protocol)?;
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
    let mut policy = args.sandbox.policy(
        super::plugin_args(&args.plugin_args),
        &crate::policy::Requests::default(),
        &args.tools,
    )?;
    warn_if_native(&plugin, &policy);
    let mut options =
        SessionOptions::framed(protocol.framing()).frame_limits(args.sandbox.frame_limits());
    options.stderr = StderrMode::Inherit;
    // Whatever the protocol's hook starts joins it, so a failed start can be explained.
    let group = crate::SessionGroup::new();
    options.group = Some(group.clone());
    options.record = super::sandbox_args::recorder(
        args.record.as_deref(),
        &plugin,
        &mut policy,
        protocol.framing(),
        Some(protocol.name()),
        &args.sandbox.limits,
    )?;
    let request = CallRequest {
        method: args.method,
        params,
        config: args.config,
        grace: args.grace,
    };
    let answer = (protocol.spec().call)(
        Launch::new(&host, &plugin, &policy, &options, protocol).with_tools(tools),
        request,
    );
    let answer = answer.await;
    if answer.is_err()
        && let Some((exit, tail)) = group.last_ended()
        && super::status::failed_by_itself(&exit)
    {
        super::sandbox_args::explain_failed_start(&plugin, &policy, false, &tail);
    }
    match answer {
        Err(CallError::Start(e)) => {
            Err(anyhow::Error::from(e)
                .context(format!("starting plugin {}", plugin.path().display())))
        }
        answer => report(answer),
    }
}

/// Print the result on stdout, or the failure on stderr; the exit status either way.
fn report(answer: Result<Value, CallError>) -> Result<i32> {
    match answer {
        Ok(v) => {
            println!("{}", serde_json::to_string(&v)?);
            Ok(0)
        }
        Err(CallError::Failed {
            lines,
            failure,
            answer,
        }) => {
            if let Some(v) = answer {
                println!("{}", serde_json::to_string(&v)?);
            }
            for line in lines {
                eprintln!("sandpipe: {line}");
            }
            Ok(status(&failure))
        }
        Err(CallError::Start(e)) => Err(e.into()),
    }
}

/// The exit status for `failure` (the README's table).
fn status(failure: &Failure) -> i32 {
    match failure {
        Failure::Plugin => 1,
        Failure::Violation => exit_code::BAD_FRAME,
        Failure::Host => exit_code::HOST_ERROR,
        Failure::Ended { exit, otherwise } => ended_status(exit.as_ref(), status(otherwise)),
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

    /// `call`'s exit status for `method` with `params` through the protocol's hook, against
    /// `plugin` in memory.
    async fn call_status(
        protocol: Protocol,
        plugin: impl crate::MemoryPlugin,
        method: &str,
        params: Option<Value>,
    ) -> i32 {
        let session = crate::Session::memory(plugin, &SessionOptions::framed(protocol.framing()));
        let request = CallRequest {
            method: method.to_owned(),
            params,
            config: "{}".to_owned(),
            grace: GRACE,
        };
        let answer = (protocol.spec().call)(Launch::session(session), request).await;
        report(answer).expect("called")
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
            let plugin = orchard(execute_result.clone());
            let params = Some(json!({"action": "a", "attrs": {}}));
            let status = call_status(Protocol::Orchard, plugin, "execute", params).await;
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
        let status = call_status(Protocol::DenoBridge, plugin, "create", params).await;
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
        let method = "finecodeRunner/getInfo";
        let status = call_status(Protocol::FineCode, plugin, method, None).await;
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
        let status = call_status(Protocol::Atp, plugin, "s", None).await;
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
            let status = call_status(Protocol::Oracle, Oracle(answer.clone()), "f", None).await;
            assert_eq!(status, want, "{answer}");
        }
    }
}
