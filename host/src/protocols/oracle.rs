//! The Cairo oracle `stdio:` protocol, host side: wait for `ready`, ack it, `invoke` one
//! selector at a time, `shutdown`.

use std::time::Duration;

use sandpipe_proto::oracle::{self as machine, ClientEvent, ErrorOrigin, Felt, OracleError};
use serde_json::json;

use crate::error::{Exit, SessionError};
use crate::session::Session;

/// An oracle process after its handshake. Invocations are sequential by construction
/// (`invoke` takes `&mut self`), as the protocol requires.
#[derive(Debug)]
pub struct OracleClient {
    session: Session,
    machine: machine::OracleClient,
    first_frame_seen: bool,
}

impl OracleClient {
    /// Wait for the plugin's `ready` request and acknowledge it. The first byte the plugin
    /// writes must be `{`, as the real executor checks.
    pub async fn connect(session: Session) -> Result<Self, OracleError> {
        let mut client = OracleClient {
            session,
            machine: machine::OracleClient::new(),
            first_frame_seen: false,
        };
        loop {
            client.pump_one().await?;
            let mut ready = false;
            while let Some(event) = client.machine.poll_event() {
                ready |= matches!(event, ClientEvent::Ready);
            }
            client.flush().await;
            if ready {
                return Ok(client);
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
        self.machine
            .invoke(selector, calldata)
            .map_err(|e| host_error(&format!("{e}"), &[]))?;
        self.flush().await;
        loop {
            self.pump_one().await?;
            while let Some(event) = self.machine.poll_event() {
                if let ClientEvent::Invoked { result, .. } = event {
                    return result;
                }
            }
            self.flush().await;
        }
    }

    /// Send the `shutdown` notification, then give the plugin `grace` to exit before killing
    /// it (the real executor kills at once: pass `Duration::ZERO`).
    pub async fn shutdown(mut self, grace: Duration) -> Exit {
        if self.machine.shutdown().is_ok() {
            self.flush().await;
        }
        self.session.shutdown(grace).await
    }

    /// The session, for its stderr tail or exit.
    pub fn session(&self) -> &Session {
        &self.session
    }

    /// Read one frame into the machine. When the plugin is gone, fail what is pending with
    /// the reason and stderr tail and return that error.
    async fn pump_one(&mut self) -> Result<(), OracleError> {
        let frame = match self.session.recv().await {
            Ok(Some(frame)) => frame,
            Ok(None) => return Err(self.fail(None).await),
            Err(SessionError::BadFrameFromPlugin { error, .. }) => {
                return Err(self.fail(Some(error.to_string())).await);
            }
            Err(e) => return Err(self.fail(Some(e.to_string())).await),
        };
        if !self.first_frame_seen {
            self.first_frame_seen = true;
            if let Err(e) = machine::check_first_byte(frame.first().copied().unwrap_or(b'\n')) {
                self.session.kill();
                return Err(self.fail(Some(e.to_string())).await);
            }
        }
        if let Err(e) = self.machine.handle_frame(&frame) {
            // A bad result still completes the invoke (as a BadResult error event); anything
            // else is the plugin breaking the protocol.
            if !matches!(e, sandpipe_proto::jsonrpc::ProtocolError::BadPayload { .. }) {
                self.session.kill();
                return Err(self
                    .fail(Some(format!("plugin broke the protocol: {e}")))
                    .await);
            }
        }
        Ok(())
    }

    async fn fail(&mut self, framing_error: Option<String>) -> OracleError {
        if framing_error.is_some() {
            self.session.kill();
        }
        let exit = self.session.wait().await;
        let reason = match (&framing_error, &exit) {
            // A crash's cut-off last frame is the crash's casualty: report the crash.
            (Some(e), x)
                if e.contains("stream ended inside a frame")
                    && !matches!(x, Exit::Killed { .. }) =>
            {
                x.to_string()
            }
            (Some(e), _) => e.clone(),
            (None, x) => x.to_string(),
        };
        let tail = self.session.stderr_tail();
        self.machine.fail_pending(&reason, &tail);
        while let Some(event) = self.machine.poll_event() {
            if let ClientEvent::Invoked { result: Err(e), .. } = event {
                return e;
            }
        }
        host_error(&reason, &tail)
    }

    async fn flush(&mut self) {
        while let Some(frame) = self.machine.poll_transmit() {
            if self.session.send(&frame).await.is_err() {
                // The plugin stopped reading; the next recv reports how it ended.
                return;
            }
        }
    }
}

fn host_error(reason: &str, stderr_tail: &[String]) -> OracleError {
    OracleError {
        origin: ErrorOrigin::Host,
        code: sandpipe_proto::jsonrpc::ErrorCode::Int(sandpipe_proto::jsonrpc::INTERNAL_ERROR),
        message: format!("oracle failed: {reason}"),
        data: Some(json!({ "reason": reason, "stderr": stderr_tail })),
    }
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
