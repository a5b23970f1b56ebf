//! The Cairo oracle `stdio:` protocol, host side: wait for `ready`, ack it, `invoke` one
//! selector at a time, `shutdown`. The machine (`sandpipe_proto::oracle::OracleClient`) holds
//! the rules (the first byte `{`, one invoke at a time, a result is an array of felts); the
//! [`Driver`] runs it.

use std::time::Duration;

use sandpipe_proto::component::{DEFAULT_MAX_RESULT_FELTS, encode_results};
use sandpipe_proto::jsonrpc::{self, ErrorObject};
use sandpipe_proto::oracle::{self as machine, ClientEvent, ErrorOrigin, Felt, OracleError};
use serde_json::Value;
use tokio::sync::oneshot;

use crate::Plugin;
use crate::error::{Exit, Stopped};
use crate::exports::oracle::{InvokeError, prepare};
use crate::exports::session::{Exports, ExportsServer, functions_json};
use crate::run::session::{Session, SessionControl};
use crate::speak::driver::{Completion, Driver, Refused};
use crate::speak::protocols::hooks::{
    CallError, CallRequest, DESCRIBE_GRACE, DescribeError, Failure, Launch,
};

/// An oracle process after its handshake. Invocations are sequential by construction
/// (`invoke` takes `&mut self`), as the protocol requires.
#[derive(Debug)]
pub struct OracleClient {
    driver: Driver<machine::OracleClient>,
}

impl OracleClient {
    /// Wait for the plugin's `ready` request (the machine acknowledges it). The first byte the
    /// plugin writes must be `{`, as the real executor checks.
    pub async fn connect(session: Session) -> Result<Self, OracleError> {
        let (ready_tx, ready) = oneshot::channel();
        let mut ready_tx = Some(ready_tx);
        let driver = Driver::new(
            session,
            machine::OracleClient::new(),
            move |c: Completion<ClientEvent>| match c.event {
                ClientEvent::Ready => {
                    if let Some(tx) = ready_tx.take() {
                        let _ = tx.send(());
                    }
                }
                other => tracing::debug!(event = ?other, "oracle event nobody asked for"),
            },
        );
        // The sender is dropped unsent only when the plugin is gone before `ready`.
        match ready.await {
            Ok(()) => Ok(OracleClient { driver }),
            Err(_) => Err(machine::stopped_error(&stopped(&driver))),
        }
    }

    /// Invoke `selector` with `calldata`. A plugin error, a bad result, or the plugin being
    /// stopped all come back as an [`OracleError`] value, never a panic or a hang.
    pub async fn invoke(
        &mut self,
        selector: &str,
        calldata: &[Felt],
    ) -> Result<Vec<Felt>, OracleError> {
        let pending = self
            .driver
            .request(|m| m.invoke(selector, calldata))
            .map_err(|refused| match refused {
                Refused::Stopped(s) => machine::stopped_error(&s),
                Refused::Machine(e) => OracleError {
                    origin: ErrorOrigin::Host,
                    ..machine::stopped_error(&Stopped::by_host(e.to_string(), Vec::new()))
                },
            })?;
        match pending.wait().await {
            Ok(c) => match c.event {
                ClientEvent::Invoked { result, .. } => result,
                other => unreachable!("only Invoked completes an invoke: {other:?}"),
            },
            Err(s) => Err(machine::stopped_error(&s)),
        }
    }

    /// Send the `shutdown` notification, then give the plugin `grace` to exit before killing
    /// it (the real executor kills at once: pass `Duration::ZERO`).
    pub async fn shutdown(self, grace: Duration) -> Exit {
        let _ = self.driver.act(machine::OracleClient::shutdown);
        self.driver.shutdown(grace).await
    }

    /// The session's control half, for its stderr tail or exit.
    pub fn control(&self) -> &SessionControl {
        self.driver.control()
    }

    /// Why the plugin will never answer again, once that is so: an invoke's
    /// [`ErrorOrigin::Host`] error carries the stop only in its wire form.
    pub fn stopped(&self) -> Option<Stopped> {
        self.driver.stopped()
    }
}

/// Why the driver ended; it has, once its handler is gone.
fn stopped<M: sandpipe_proto::machine::ClientMachine>(driver: &Driver<M>) -> Stopped {
    driver
        .stopped()
        .unwrap_or_else(|| Stopped::by_host("the session ended", Vec::new()))
}

// `sandpipe call` and `inspect --protocol` (the hooks in this protocol's line of
// `protocols::PROTOCOLS`).

/// `sandpipe call --protocol oracle`: METHOD is the selector, PARAMS the calldata (an array
/// of hex felts); the result is the felts the oracle returned.
pub(crate) async fn one_call(launch: Launch<'_>, request: CallRequest) -> Result<Value, CallError> {
    let calldata = match &request.params {
        None => Vec::new(),
        Some(v) => machine::felts_from_value(v).map_err(|e| {
            CallError::failed(
                Failure::Host,
                [format!(
                    "oracle calldata must be an array of lowercase hex felts like [\"0x10\"]: {e}"
                )],
            )
        })?,
    };
    let session = launch.start().await.map_err(CallError::Start)?;
    let mut client = OracleClient::connect(session)
        .await
        .map_err(|e| call_error(&e, None))?;
    let result = client.invoke(&request.method, &calldata).await;
    let exit_now = client.control().try_exit();
    let violation = client.stopped().is_some_and(|s| s.violation);
    let exit = client.shutdown(request.grace).await;
    match result {
        Ok(felts) => serde_json::to_value(&felts)
            .map_err(|e| CallError::failed(Failure::Violation, [format!("oracle result: {e}")])),
        // The host stopped a plugin that broke the protocol: how it ended (killed) is ours.
        Err(e) if violation && e.origin == ErrorOrigin::Host => {
            Err(CallError::failed(Failure::Violation, error_lines(&e)))
        }
        Err(e) => Err(call_error(&e, exit_now.or(Some(exit)))),
    }
}

/// An oracle error as `sandpipe call` reports it (`exit`: how the plugin ended, if known).
fn call_error(e: &OracleError, exit: Option<Exit>) -> CallError {
    let failure = match e.origin {
        ErrorOrigin::Plugin => Failure::Plugin,
        ErrorOrigin::BadResult => Failure::Violation,
        _ => Failure::ended(exit, Failure::Violation),
    };
    CallError::failed(failure, error_lines(e))
}

/// An oracle error, as `sandpipe call` prints it.
fn error_lines(e: &OracleError) -> Vec<String> {
    let mut lines = vec![format!("oracle error {}: {}", e.code, e.message)];
    if let Some(data) = &e.data {
        lines.push(format!("data: {data}"));
    }
    lines
}

/// `sandpipe inspect --protocol oracle`: whether the plugin says `ready`.
pub(crate) async fn describe(launch: Launch<'_>) -> Result<Value, DescribeError> {
    let session = launch.start().await?;
    match OracleClient::connect(session).await {
        Ok(client) => {
            let _ = client.shutdown(DESCRIBE_GRACE).await;
            Ok(serde_json::json!({"ready": true}))
        }
        Err(e) => Err(DescribeError::Failed(format!(
            "oracle error {}: {}",
            e.code, e.message
        ))),
    }
}

// A component that exports functions, served as an oracle: the line's `exports` in
// `protocols::PROTOCOLS`.

/// The oracle's `stdio:` protocol spoken for a component's exports, each `invoke` a call of
/// the function its selector names ([`crate::exports::session`]).
struct OracleExports {
    server: machine::OracleServer,
}

/// The oracle's server for `plugin`'s exports.
pub(crate) fn serve_exports(_plugin: &Plugin) -> Box<dyn ExportsServer> {
    Box::new(OracleExports {
        server: machine::OracleServer::new(),
    })
}

impl OracleExports {
    /// The frames the machine has queued.
    fn transmit(&mut self) -> Vec<Vec<u8>> {
        std::iter::from_fn(|| self.server.poll_transmit()).collect()
    }
}

#[async_trait::async_trait]
impl ExportsServer for OracleExports {
    fn start(&mut self) -> Vec<Vec<u8>> {
        // The oracle's `ready`.
        self.transmit()
    }

    async fn handle(&mut self, frame: &[u8], exports: &mut Exports) -> Result<Vec<Vec<u8>>, Exit> {
        if let Err(e) = self.server.handle_frame(frame) {
            // As the Rust oracle SDK does with a line it cannot use: log it, serve the next.
            tracing::warn!("oracle: ignoring a frame from the engine: {e}");
        }
        while let Some(event) = self.server.poll_event() {
            let machine::ServerEvent::Invoke {
                id,
                selector,
                calldata,
            } = event
            else {
                continue;
            };
            let answer = invoke(exports, &selector, &calldata).await?;
            if let Err(e) = self.server.respond(id, answer) {
                tracing::warn!("oracle: could not answer an invoke: {e}");
            }
        }
        Ok(self.transmit())
    }

    fn finished(&self) -> bool {
        self.server.must_terminate()
    }
}

/// One oracle invoke of a component's export: the felts, or the plugin's own error answer.
async fn invoke(
    exports: &mut Exports,
    selector: &str,
    calldata: &[Felt],
) -> Result<Result<Vec<Felt>, ErrorObject>, Exit> {
    let answer = match prepare(exports.functions(), exports.selectors(), selector, calldata) {
        Ok((index, args, results)) => match exports.call(index, &args, results.len()).await? {
            Ok(values) => {
                encode_results(&values, DEFAULT_MAX_RESULT_FELTS).map_err(InvokeError::from)
            }
            Err(e) => Err(e),
        },
        Err(e) => Err(e),
    };
    Ok(answer.map_err(|e| plugin_error(&e)))
}

/// The answer the component gives for an invoke it cannot make (a selector or codec error):
/// the plugin's own error, `-32603` with the message, as the Rust oracle SDK gives one.
fn plugin_error(e: &InvokeError) -> ErrorObject {
    ErrorObject::new(jsonrpc::INTERNAL_ERROR, e.to_string()).with_data(e.data())
}

/// `sandpipe inspect --protocol oracle` of a `wasm:` oracle: start it and wait for its
/// `ready` (so a component that cannot start says so), and list its selectors.
pub(crate) async fn describe_exports(launch: Launch<'_>) -> Result<Value, DescribeError> {
    let selectors = launch
        .plugin()
        .map(|(_, plugin, _, _)| functions_json(plugin))
        .unwrap_or_default();
    let session = launch
        .start()
        .await
        .map_err(|e| DescribeError::Failed(e.to_string()))?;
    let client = OracleClient::connect(session)
        .await
        .map_err(|e| DescribeError::Failed(format!("oracle error {}: {}", e.code, e.message)))?;
    let _ = client.shutdown(DESCRIBE_GRACE).await;
    Ok(serde_json::json!({ "kind": "wasm: oracle (exported functions)", "selectors": selectors }))
}
