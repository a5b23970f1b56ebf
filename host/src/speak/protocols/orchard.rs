//! The Orchard provider protocol, host side: `describe` (answered within a deadline, schema
//! `protocol` must be `"1"`), `configure`, `execute` (several in flight, answers in any
//! order), `shutdown`; and plan mode, `PLUGIN schema`. The rules are the machine's
//! (`sandpipe_proto::orchard::Client`, also what the golden transcripts replay through); the
//! [`Driver`] runs it.

use std::time::Duration;

use sandpipe_proto::jsonrpc::{ErrorCode, ErrorObject};
use sandpipe_proto::orchard::{
    self as proto, CallError, ClientEvent, ProviderError, ProviderSchema, codes,
};
use serde_json::Value;

use crate::error::{Exit, Stopped};
use crate::run::session::{Session, SessionControl};
use crate::speak::driver::{Completion, Driver, Refused, Unasked};
use crate::speak::protocols::hooks::{self, CallRequest, DescribeError, Failure, Launch};
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
    /// Why the provider will never answer, when that is what this error says.
    pub stopped: Option<Stopped>,
    /// True when the provider broke the protocol: an answer that does not fit it (an execute
    /// result without `outputs`, a schema of another protocol version), or a frame the host
    /// refused and stopped it for.
    pub violation: bool,
}

impl OrchardError {
    fn provider(p: ProviderError, stopped: Option<Stopped>) -> Self {
        OrchardError {
            from_provider: stopped.is_none(),
            code: p.code,
            message: p.message,
            detail: p.detail,
            violation: stopped.as_ref().is_some_and(|s| s.violation),
            stopped,
        }
    }

    fn host(code: &str, message: String) -> Self {
        OrchardError {
            code: code.to_owned(),
            message,
            detail: None,
            from_provider: false,
            stopped: None,
            violation: false,
        }
    }

    fn stopped(method: proto::Method, stopped: Stopped) -> Self {
        Self::provider(proto::stopped_error(Some(method), &stopped), Some(stopped))
    }

    /// A call's failure: the provider's error, the stop's, a deadline, or an answer that does
    /// not fit the protocol (`failure_code`, the code Orchard gives that call's failures).
    fn from_call(e: CallError, stopped: Option<Stopped>, failure_code: &str) -> Self {
        match e {
            CallError::Provider(p) => Self::provider(p, stopped),
            CallError::TimedOut { method, timeout } => Self::host(
                codes::INTERNAL_ERROR,
                format!(
                    "{method} got no answer within {}",
                    humantime::format_duration(timeout)
                ),
            ),
            CallError::Protocol(e) => OrchardError {
                violation: true,
                ..Self::host(failure_code, e.to_string())
            },
            other => Self::host(failure_code, other.to_string()),
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
    driver: Driver<proto::Client>,
    schema: ProviderSchema,
}

impl OrchardClient {
    /// Take over `session` and `describe` the provider. It must answer within `timeout`
    /// (Orchard uses [`proto::DESCRIBE_TIMEOUT`], 5 s) and declare protocol `"1"`; otherwise
    /// it is stopped.
    pub async fn connect(session: Session, timeout: Duration) -> Result<Self, OrchardError> {
        let driver = Driver::new(session, proto::Client::new(), Unasked);
        let described = call(&driver, proto::Method::Describe, |m| {
            m.describe(crate::speak::driver::now(), timeout)
        })
        .await
        .and_then(|c| match c.event {
            ClientEvent::Described { result, .. } => {
                result.map_err(|e| OrchardError::from_call(e, c.stopped, codes::INTERNAL_ERROR))
            }
            other => unreachable!("describe completes with Described: {other:?}"),
        });
        match described {
            Ok(schema) => Ok(OrchardClient { driver, schema }),
            Err(e) => {
                driver.control().kill();
                Err(e)
            }
        }
    }

    /// The schema the provider described.
    pub fn schema(&self) -> &ProviderSchema {
        &self.schema
    }

    /// `configure` (run mode, before any `execute`).
    pub async fn configure(&self, config: Value) -> Result<(), OrchardError> {
        let c = call(&self.driver, proto::Method::Configure, |m| {
            m.configure(config)
        })
        .await?;
        match c.event {
            ClientEvent::Configured { result, .. } => {
                result.map_err(|e| OrchardError::from_call(e, c.stopped, codes::CONFIGURE_FAILED))
            }
            other => unreachable!("configure completes with Configured: {other:?}"),
        }
    }

    /// `execute` an action; returns its `outputs`. If the provider is stopped meanwhile, the
    /// error is `execute_failed` with the reason and the stderr tail as detail. A result
    /// without `outputs` does not fit the protocol: `execute_failed`.
    pub async fn execute(&self, action: &str, attrs: Value) -> Result<Value, OrchardError> {
        let c = call(&self.driver, proto::Method::Execute, |m| {
            m.execute(action, attrs)
        })
        .await?;
        match c.event {
            ClientEvent::Executed { result, .. } => {
                result.map_err(|e| OrchardError::from_call(e, c.stopped, codes::EXECUTE_FAILED))
            }
            other => unreachable!("execute completes with Executed: {other:?}"),
        }
    }

    /// `shutdown`, then close stdin and give the provider `grace` to exit.
    pub async fn shutdown(self, grace: Duration) -> Exit {
        let _ = call(
            &self.driver,
            proto::Method::Shutdown,
            proto::Client::shutdown,
        )
        .await;
        self.driver.shutdown(grace).await
    }

    /// The session's control half (exit, kill, stderr tail).
    pub fn control(&self) -> &SessionControl {
        self.driver.control()
    }
}

/// Make one request on the machine and wait for the event completing it.
async fn call(
    driver: &Driver<proto::Client>,
    method: proto::Method,
    make: impl FnOnce(
        &mut proto::Client,
    )
        -> Result<sandpipe_proto::jsonrpc::Id, sandpipe_proto::jsonrpc::ProtocolError>,
) -> Result<Completion<ClientEvent>, OrchardError> {
    let pending = driver.request(make).map_err(|refused| match refused {
        Refused::Stopped(s) => OrchardError::stopped(method, s),
        Refused::Machine(e) => OrchardError::host(codes::INTERNAL_ERROR, e.to_string()),
    })?;
    pending
        .wait()
        .await
        .map_err(|s| OrchardError::stopped(method, s))
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
    proto::parse_schema_output(&out).map_err(|e| OrchardError {
        violation: true,
        ..OrchardError::host(codes::INTERNAL_ERROR, e.to_string())
    })
}

impl OrchardError {
    /// This error as `sandpipe call` reports it (`exit`: how the provider ended, once it has).
    fn call_error(&self, exit: Option<Exit>) -> hooks::CallError {
        let mut lines = vec![format!("orchard error {}: {}", self.code, self.message)];
        if let Some(d) = &self.detail {
            lines.push(format!("detail: {d}"));
        }
        let failure = if self.violation {
            Failure::Violation
        } else if self.from_provider {
            Failure::Plugin
        } else {
            Failure::ended(exit, Failure::Plugin)
        };
        hooks::CallError::failed(failure, lines)
    }
}

// `sandpipe call` and `inspect --protocol` (the hooks in this protocol's line of
// `protocols::PROTOCOLS`).

/// `sandpipe call --protocol orchard`: METHOD is `describe`, `configure` (PARAMS the config,
/// or `{"config": ...}`), `execute` (PARAMS `{"action", "attrs"}`, after a `configure` with
/// `--config`), or `schema` (plan mode).
pub(crate) async fn one_call(
    launch: Launch<'_>,
    request: CallRequest,
) -> Result<Value, hooks::CallError> {
    if request.method == "schema" {
        let schema = plan_mode(launch.plugin())
            .await
            .map_err(|e| e.call_error(None))?;
        return serde_json::to_value(schema).map_err(|e| {
            hooks::CallError::failed(Failure::Violation, [format!("orchard schema: {e}")])
        });
    }
    let config = request.config_json()?;
    let session = launch.start().await.map_err(hooks::CallError::Start)?;
    let client = OrchardClient::connect(session, proto::DESCRIBE_TIMEOUT)
        .await
        .map_err(|e| e.call_error(None))?;
    let params = request.params.unwrap_or_else(|| serde_json::json!({}));
    let result = match request.method.as_str() {
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
            let _ = client.shutdown(request.grace).await;
            return Err(hooks::CallError::failed(
                Failure::Host,
                [format!(
                    "orchard methods are describe, configure, execute and schema, not {other:?}"
                )],
            ));
        }
    };
    let exit = client.shutdown(request.grace).await;
    result.map_err(|e| e.call_error(Some(exit)))
}

/// `sandpipe inspect --protocol orchard`: the schema, from plan mode.
pub(crate) async fn describe(launch: Launch<'_>) -> Result<Value, DescribeError> {
    plan_mode(launch.plugin())
        .await
        .map(|schema| serde_json::json!({ "schema": schema }))
        .map_err(|e| DescribeError::Failed(e.to_string()))
}

/// [`schema`] for the hooks: plan mode needs the plugin itself, not a started session.
async fn plan_mode(
    plugin: Option<(&Host, &Plugin, &Policy, &SessionOptions)>,
) -> Result<ProviderSchema, OrchardError> {
    let Some((host, plugin, policy, options)) = plugin else {
        return Err(OrchardError::host(
            codes::INTERNAL_ERROR,
            "plan mode runs the plugin itself, not a session already started".to_owned(),
        ));
    };
    schema(host, plugin, policy, options).await
}
