//! The Orchard provider protocol, host side: `describe` (answered within a deadline, schema
//! `protocol` must be `"1"`), `configure`, `execute` (several in flight, answers in any
//! order), `shutdown`; and plan mode, `PLUGIN schema`.

use std::time::Duration;

use sandpipe_proto::jsonrpc::{Dialect, ErrorCode, ErrorObject};
use sandpipe_proto::orchard::{self as proto, ProviderError, ProviderSchema, codes};
use serde_json::{Value, json};

use crate::error::Exit;
use crate::rpc::{JsonRpcPeer, RpcError};
use crate::session::Session;
use crate::{Host, HostError, Plugin, Policy, SessionOptions};

/// Why an Orchard call failed: always an Orchard error object (`code`, `message`, `detail`),
/// as Orchard itself reasons about them.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{code}: {message}")]
pub struct OrchardError {
    /// A well-known code (`execute_failed`, `internal_error`, …) or the provider's own.
    pub code: String,
    /// The message.
    pub message: String,
    /// The detail; for a plugin the sandbox stopped, its stderr tail.
    pub detail: Option<String>,
    /// True when the provider itself answered with this error (rather than the host making it
    /// because the provider was stopped, timed out or broke the protocol).
    pub from_provider: bool,
}

impl OrchardError {
    fn from_rpc(e: RpcError, failure_code: &str) -> Self {
        match e {
            RpcError::Remote(obj) => {
                let p = ProviderError::from(obj);
                OrchardError {
                    code: p.code,
                    message: p.message,
                    detail: p.detail,
                    from_provider: true,
                }
            }
            RpcError::Failed { error, .. } => OrchardError {
                code: failure_code.to_owned(),
                message: error.message,
                detail: error
                    .data
                    .as_ref()
                    .and_then(Value::as_str)
                    .map(str::to_owned),
                from_provider: false,
            },
            other => OrchardError {
                code: failure_code.to_owned(),
                message: other.to_string(),
                detail: None,
                from_provider: false,
            },
        }
    }

    fn host(code: &str, message: String) -> Self {
        OrchardError {
            code: code.to_owned(),
            message,
            detail: None,
            from_provider: false,
        }
    }

    /// The error object as it would appear on the wire.
    pub fn error_object(&self) -> ErrorObject {
        let mut e = ErrorObject::new(ErrorCode::Str(self.code.clone()), self.message.clone());
        if let Some(d) = &self.detail {
            e = e.with_data(Value::from(d.as_str()));
        }
        e
    }
}

/// A provider in run mode, after `describe`.
#[derive(Debug)]
pub struct OrchardClient {
    rpc: JsonRpcPeer,
    schema: ProviderSchema,
}

impl OrchardClient {
    /// Take over `session` and `describe` the provider. It must answer within `timeout`
    /// (Orchard uses [`proto::DESCRIBE_TIMEOUT`], 5 s) and declare protocol `"1"`.
    pub async fn connect(session: Session, timeout: Duration) -> Result<Self, OrchardError> {
        // Orchard numbers its requests from 1 and always sends params.
        let rpc = JsonRpcPeer::with_first_id(session, Dialect::Orchard, 1);
        let value = match rpc
            .call_with_timeout(proto::Method::Describe.as_str(), Some(json!({})), timeout)
            .await
        {
            Ok(v) => v,
            Err(e) => {
                rpc.control().kill();
                return Err(OrchardError::from_rpc(e, codes::INTERNAL_ERROR));
            }
        };
        let schema = value
            .get("schema")
            .cloned()
            .ok_or_else(|| "describe result has no schema".to_owned())
            .and_then(|s| {
                serde_json::from_value::<ProviderSchema>(s).map_err(|e| format!("bad schema: {e}"))
            })
            .map_err(|m| OrchardError::host(codes::INTERNAL_ERROR, m))?;
        if let Err(e) = schema.check_protocol() {
            rpc.control().kill();
            return Err(OrchardError::host(
                codes::INTERNAL_ERROR,
                format!("refusing provider: {e}"),
            ));
        }
        Ok(OrchardClient { rpc, schema })
    }

    /// The schema the provider described.
    pub fn schema(&self) -> &ProviderSchema {
        &self.schema
    }

    /// `configure` (run mode, before any `execute`).
    pub async fn configure(&self, config: Value) -> Result<(), OrchardError> {
        self.rpc
            .call(
                proto::Method::Configure.as_str(),
                Some(json!({ "config": config })),
            )
            .await
            .map(drop)
            .map_err(|e| OrchardError::from_rpc(e, codes::CONFIGURE_FAILED))
    }

    /// `execute` an action; returns its `outputs`. If the provider is stopped meanwhile, the
    /// error is `execute_failed` with the reason and the stderr tail as detail.
    pub async fn execute(&self, action: &str, attrs: Value) -> Result<Value, OrchardError> {
        let result = self
            .rpc
            .call(
                proto::Method::Execute.as_str(),
                Some(json!({ "action": action, "attrs": attrs })),
            )
            .await
            .map_err(|e| OrchardError::from_rpc(e, codes::EXECUTE_FAILED))?;
        Ok(result.get("outputs").cloned().unwrap_or(Value::Null))
    }

    /// `shutdown`, then close stdin and give the provider `grace` to exit.
    pub async fn shutdown(self, grace: Duration) -> Exit {
        let _ = self
            .rpc
            .call(proto::Method::Shutdown.as_str(), Some(json!({})))
            .await;
        self.rpc.shutdown(grace).await
    }
}

/// Plan mode: run `PLUGIN schema` (argv `["schema"]` for wasm) and parse the one JSON line it
/// prints. The plugin must exit 0.
pub async fn schema(
    host: &Host,
    plugin: &Plugin,
    policy: &Policy,
    options: &SessionOptions,
) -> Result<ProviderSchema, OrchardError> {
    let mut policy = policy.clone();
    policy.args = vec![proto::SCHEMA_SUBCOMMAND.to_owned()];
    let mut options = options.clone();
    options.framing = None;
    let mut session = host
        .start(plugin, &policy, &options)
        .await
        .map_err(|e: HostError| OrchardError::host(codes::INTERNAL_ERROR, e.to_string()))?;
    session.close_stdin().await;
    let mut out = Vec::new();
    loop {
        match session.recv().await {
            Ok(Some(chunk)) => {
                out.extend_from_slice(&chunk);
                if out.len() > 16 << 20 {
                    session.kill();
                    return Err(OrchardError::host(
                        codes::INTERNAL_ERROR,
                        "schema output exceeds 16 MiB".into(),
                    ));
                }
            }
            Ok(None) => break,
            Err(e) => return Err(OrchardError::host(codes::INTERNAL_ERROR, e.to_string())),
        }
    }
    let exit = session.wait().await;
    if !exit.success() {
        let mut e = OrchardError::host(codes::INTERNAL_ERROR, format!("`schema` failed: {exit}"));
        e.detail = Some(session.stderr_tail().join("\n"));
        return Err(e);
    }
    proto::parse_schema_output(&out)
        .map_err(|e| OrchardError::host(codes::INTERNAL_ERROR, e.to_string()))
}
