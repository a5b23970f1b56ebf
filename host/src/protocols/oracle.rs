//! The Cairo oracle `stdio:` protocol, host side: wait for `ready`, ack it, `invoke` one
//! selector at a time, `shutdown`. The machine (`sandpipe_proto::oracle::OracleClient`) holds
//! the rules (the first byte `{`, one invoke at a time, a result is an array of felts); the
//! [`Driver`] runs it.

use std::time::Duration;

use sandpipe_proto::oracle::{self as machine, ClientEvent, ErrorOrigin, Felt, OracleError};
use serde_json::Value;

use crate::driver::{Driver, Refused};
use crate::error::{Exit, Stopped};
use crate::protocols::hooks::{
    CallError, CallRequest, DESCRIBE_GRACE, DescribeError, Failure, Launch,
};
use crate::session::{Session, SessionControl};

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
        let driver = Driver::new(session, machine::OracleClient::new());
        loop {
            match driver.next_event().await.map(|c| c.event) {
                Some(ClientEvent::Ready) => return Ok(OracleClient { driver }),
                Some(_) => {}
                None => return Err(machine::stopped_error(&stopped(&driver))),
            }
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

/// Why the driver ended; it has, once `next_event` returned `None`.
fn stopped<M: sandpipe_proto::machine::ClientMachine>(driver: &Driver<M>) -> Stopped {
    driver
        .stopped()
        .unwrap_or_else(|| Stopped::by_host("the session ended", Vec::new()))
}

/// How [`serve_wasm_oracle`] ended.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ServeReport {
    /// Invokes received.
    pub invokes: u64,
    /// Invokes answered with an error.
    pub failed: u64,
    /// True if the engine sent `shutdown` (false: its input ended).
    pub shut_down: bool,
}

/// One invoke that failed, for the caller's log line.
#[derive(Debug, Clone, PartialEq)]
pub struct InvokeIncident {
    /// The request id (JSON).
    pub request: String,
    /// The selector.
    pub selector: String,
    /// The error the engine got.
    pub error: crate::wasm_oracle::InvokeError,
}

/// Serve the Cairo `stdio:` oracle protocol to an engine (frames in `from_engine`, frames out
/// to `to_engine`) with a `wasm:` oracle behind it: `ready` first, then each `invoke` calls
/// the export through the codec; the result felts are the answer, and any failure is a
/// JSON-RPC error `-32603` whose message is the executor's (with the stderr tail) and whose
/// data is [`InvokeError::data`](crate::wasm_oracle::InvokeError::data). Ends at `shutdown`
/// or when the engine's input ends.
pub async fn serve_wasm_oracle(
    oracle: &mut crate::wasm_oracle::WasmOracle,
    mut from_engine: tokio::sync::mpsc::Receiver<Vec<u8>>,
    to_engine: tokio::sync::mpsc::Sender<Vec<u8>>,
    mut on_incident: impl FnMut(&InvokeIncident),
) -> ServeReport {
    use sandpipe_proto::jsonrpc::ErrorObject;
    use sandpipe_proto::oracle::{OracleServer, ServerEvent};

    let mut server = OracleServer::new();
    let mut report = ServeReport {
        invokes: 0,
        failed: 0,
        shut_down: false,
    };
    'frames: loop {
        while let Some(frame) = server.poll_transmit() {
            if to_engine.send(frame).await.is_err() {
                break 'frames;
            }
        }
        if server.must_terminate() {
            report.shut_down = true;
            break;
        }
        let Some(frame) = from_engine.recv().await else {
            break;
        };
        if let Err(e) = server.handle_frame(&frame) {
            // As the Rust oracle SDK does with a line it cannot use: log it, serve the next.
            tracing::warn!("oracle: ignoring a frame from the engine: {e}");
        }
        while let Some(event) = server.poll_event() {
            let ServerEvent::Invoke {
                id,
                selector,
                calldata,
            } = event
            else {
                continue;
            };
            report.invokes += 1;
            let answer = match oracle.invoke(&selector, &calldata).await {
                Ok(felts) => Ok(felts),
                Err(error) => {
                    report.failed += 1;
                    on_incident(&InvokeIncident {
                        request: id.to_string(),
                        selector: selector.clone(),
                        error: error.clone(),
                    });
                    Err(ErrorObject::new(
                        sandpipe_proto::jsonrpc::INTERNAL_ERROR,
                        error.to_string(),
                    )
                    .with_data(error.data()))
                }
            };
            if let Err(e) = server.respond(id, answer) {
                tracing::warn!("oracle: could not answer an invoke: {e}");
            }
        }
    }
    report
}

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
