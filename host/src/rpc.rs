//! An async JSON-RPC client (and server, for requests the plugin sends back) over a
//! [`Session`], driven by `sandpipe_proto::jsonrpc::Peer`.
//!
//! ```text
//!  call() ──► Peer::request ──► SessionWriter::send ──► plugin stdin
//!  driver task: SessionReader::recv ──► Peer::handle_frame ──► Event
//!     Response      ──► the waiting call()
//!     Request/Notif ──► next_incoming()  (answer requests with respond())
//!  plugin gone / bad frame ──► Peer::fail_pending(error in the protocol's form) ──► every call()
//! ```
//!
//! Protocol-correct failure: when the sandbox stops the plugin (or the plugin breaks the
//! framing or the protocol) while calls are pending, every pending call gets an error object
//! in the dialect's own form — code `-32603` (`internal_error` for Orchard), the reason as the
//! message, and `{"reason", "exit", "stderr"}` as data — never a hang or "channel closed".

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sandpipe_proto::jsonrpc::{Dialect, ErrorObject, Event, Id, Peer, ProtocolError};
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};

use crate::error::{Exit, SessionError};
use crate::session::{Session, SessionControl, SessionWriter};

/// Why a call did not return a result.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum RpcError {
    /// The plugin answered with an error (data, not a failure).
    #[error("plugin returned {0}")]
    Remote(ErrorObject),
    /// The plugin was stopped, exited, or broke the framing or protocol before answering.
    /// `error` is the protocol's own error form, carrying the reason and stderr tail.
    #[error("{}", error.message)]
    Failed {
        /// The error in the dialect's form.
        error: ErrorObject,
        /// How the plugin ended, if it did.
        exit: Option<Exit>,
        /// The plugin's last stderr lines.
        stderr_tail: Vec<String>,
        /// True when the plugin broke the framing or the protocol (rather than being stopped
        /// or exiting).
        violation: bool,
    },
    /// The call was cancelled locally.
    #[error("request cancelled")]
    Cancelled,
    /// The plugin answered with a result that does not have the protocol's shape.
    #[error("bad result for {method}: {reason}")]
    BadResult {
        /// The method called.
        method: String,
        /// Why the result was refused.
        reason: String,
    },
}

impl RpcError {
    /// The error object a protocol engine would see.
    pub fn error_object(&self, dialect: Dialect) -> ErrorObject {
        match self {
            RpcError::Remote(e) | RpcError::Failed { error: e, .. } => e.clone(),
            RpcError::Cancelled => ErrorObject::new(dialect.cancelled(), "request cancelled"),
            RpcError::BadResult { method, reason } => ErrorObject::new(
                dialect.internal_error(),
                format!("bad result for {method}: {reason}"),
            ),
        }
    }
}

/// A request or notification the plugin sent to the host.
#[derive(Debug, Clone, PartialEq)]
pub enum Incoming {
    /// Answer it with [`JsonRpcPeer::respond`].
    Request {
        /// Its id.
        id: Id,
        /// The method.
        method: String,
        /// Parameters.
        params: Option<Value>,
    },
    /// A notification.
    Notification {
        /// The method.
        method: String,
        /// Parameters.
        params: Option<Value>,
    },
}

type Waiter = oneshot::Sender<Result<Value, RpcError>>;

struct Shared {
    peer: Peer,
    waiters: HashMap<Id, Waiter>,
    /// Set once the plugin is gone: later calls fail at once with it.
    failed: Option<RpcError>,
}

/// A JSON-RPC connection to a plugin. Cheap to share behind an `Arc`; calls may run
/// concurrently (responses are matched by id, in any order).
pub struct JsonRpcPeer {
    dialect: Dialect,
    shared: Arc<Mutex<Shared>>,
    writer: tokio::sync::Mutex<SessionWriter>,
    control: SessionControl,
    incoming: tokio::sync::Mutex<mpsc::Receiver<Incoming>>,
    first_frame: Arc<Mutex<Option<Vec<u8>>>>,
}

impl std::fmt::Debug for JsonRpcPeer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JsonRpcPeer")
            .field("dialect", &self.dialect)
            .finish_non_exhaustive()
    }
}

/// How many plugin→host requests and notifications may wait unread before the driver stops
/// reading stdout (backpressure instead of unbounded memory).
const INCOMING_QUEUE: usize = 256;

fn lock(shared: &Mutex<Shared>) -> std::sync::MutexGuard<'_, Shared> {
    shared.lock().unwrap_or_else(|p| p.into_inner())
}

impl JsonRpcPeer {
    /// Take over `session` (its framing must be JSON Lines or Content-Length).
    pub fn new(session: Session, dialect: Dialect) -> Self {
        Self::with_first_id(session, dialect, 0)
    }

    /// Like [`JsonRpcPeer::new`], numbering the host's requests from `first_id`.
    pub fn with_first_id(session: Session, dialect: Dialect, first_id: i64) -> Self {
        let (writer, mut reader, control) = session.into_split();
        let shared = Arc::new(Mutex::new(Shared {
            peer: Peer::with_first_id(dialect, first_id),
            waiters: HashMap::new(),
            failed: None,
        }));
        let (tx, rx) = mpsc::channel(INCOMING_QUEUE);
        let first_frame = Arc::new(Mutex::new(None));
        let driver_shared = shared.clone();
        let driver_control = control.clone();
        let driver_first = first_frame.clone();
        tokio::spawn(async move {
            let reason: (String, Option<Exit>, bool) = loop {
                match reader.recv().await {
                    Ok(Some(frame)) => {
                        {
                            let mut first = driver_first.lock().unwrap_or_else(|p| p.into_inner());
                            if first.is_none() {
                                *first = Some(frame.to_vec());
                            }
                        }
                        let (events, violation) = {
                            let mut s = lock(&driver_shared);
                            let violation = s.peer.handle_frame(&frame).err();
                            (
                                std::iter::from_fn(|| s.peer.poll_event()).collect::<Vec<_>>(),
                                violation,
                            )
                        };
                        for event in events {
                            dispatch(&driver_shared, &tx, event).await;
                        }
                        if let Some(v) = violation {
                            driver_control.kill();
                            break (format!("plugin broke the protocol: {v}"), None, true);
                        }
                    }
                    Ok(None) => {
                        let exit = driver_control.wait().await;
                        break (exit.to_string(), Some(exit), false);
                    }
                    Err(SessionError::BadFrameFromPlugin { error, .. }) => {
                        // A frame cut off by the plugin's end is that end's casualty: stdout is
                        // closed, so wait for the exit and report it. Any other bad frame is
                        // the plugin breaking the framing: stop it.
                        if let sandpipe_proto::frame::FrameError::Truncated { .. } = error {
                            let exit = driver_control.wait().await;
                            break (exit.to_string(), Some(exit), false);
                        }
                        driver_control.kill();
                        let exit = driver_control.wait().await;
                        break (format!("bad frame from plugin: {error}"), Some(exit), true);
                    }
                    Err(e) => {
                        driver_control.kill();
                        break (format!("reading plugin output: {e}"), None, true);
                    }
                }
            };
            let (message, exit, violation) = reason;
            let exit = match exit {
                Some(e) => Some(e),
                None => Some(driver_control.wait().await),
            };
            let stderr_tail = driver_control.stderr_tail();
            let error = stopped_error(dialect, &message, exit.as_ref(), &stderr_tail);
            let failure = RpcError::Failed {
                error: error.clone(),
                exit,
                stderr_tail,
                violation,
            };
            let events = {
                let mut s = lock(&driver_shared);
                s.failed = Some(failure.clone());
                s.peer.fail_pending(error);
                std::iter::from_fn(|| s.peer.poll_event()).collect::<Vec<_>>()
            };
            for event in events {
                let Event::Response { id, .. } = event else {
                    continue;
                };
                if let Some(w) = lock(&driver_shared).waiters.remove(&id) {
                    let _ = w.send(Err(failure.clone()));
                }
            }
        });
        JsonRpcPeer {
            dialect,
            shared,
            writer: tokio::sync::Mutex::new(writer),
            control,
            incoming: tokio::sync::Mutex::new(rx),
            first_frame,
        }
    }

    /// The dialect.
    pub fn dialect(&self) -> Dialect {
        self.dialect
    }

    /// The session's control half (exit, kill, stderr tail).
    pub fn control(&self) -> &SessionControl {
        &self.control
    }

    /// The first frame the plugin sent, once it has sent one (protocols that check the
    /// first byte, like the Cairo oracle's `{`, look here).
    pub fn first_frame(&self) -> Option<Vec<u8>> {
        self.first_frame
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Call `method` and wait for its result.
    pub async fn call(&self, method: &str, params: Option<Value>) -> Result<Value, RpcError> {
        let (_, rx) = self.start_call(method, params).await?;
        rx.await.unwrap_or(Err(RpcError::Cancelled))
    }

    /// Call `method` with serializable params and deserialize its result.
    pub async fn call_typed<P: serde::Serialize, R: serde::de::DeserializeOwned>(
        &self,
        method: &str,
        params: Option<&P>,
    ) -> Result<R, RpcError> {
        let params = match params {
            Some(p) => Some(serde_json::to_value(p).map_err(|e| RpcError::BadResult {
                method: method.to_owned(),
                reason: format!("params do not serialize: {e}"),
            })?),
            None => None,
        };
        let value = self.call(method, params).await?;
        serde_json::from_value(value).map_err(|e| RpcError::BadResult {
            method: method.to_owned(),
            reason: e.to_string(),
        })
    }

    /// Call `method` with a deadline: past it, the call fails with the dialect's internal
    /// error ("request timed out") and a late answer is ignored. The plugin keeps running.
    pub async fn call_with_timeout(
        &self,
        method: &str,
        params: Option<Value>,
        timeout: Duration,
    ) -> Result<Value, RpcError> {
        let (id, rx) = self.start_call(method, params).await?;
        match tokio::time::timeout(timeout, rx).await {
            Ok(r) => r.unwrap_or(Err(RpcError::Cancelled)),
            Err(_) => {
                self.cancel(&id);
                let message = format!(
                    "{method} got no answer within {}",
                    humantime::format_duration(timeout)
                );
                Err(RpcError::Failed {
                    error: ErrorObject::new(self.dialect.internal_error(), message),
                    exit: None,
                    stderr_tail: self.control.stderr_tail(),
                    violation: false,
                })
            }
        }
    }

    /// Send a request and return its id and the receiver of its result, without waiting.
    pub async fn start_call(
        &self,
        method: &str,
        params: Option<Value>,
    ) -> Result<(Id, oneshot::Receiver<Result<Value, RpcError>>), RpcError> {
        let (tx, rx) = oneshot::channel();
        let (id, frames) = {
            let mut s = lock(&self.shared);
            if let Some(f) = &s.failed {
                return Err(f.clone());
            }
            let id = s.peer.request(method, params);
            s.waiters.insert(id.clone(), tx);
            (
                id,
                std::iter::from_fn(|| s.peer.poll_transmit()).collect::<Vec<_>>(),
            )
        };
        self.send_frames(frames).await;
        Ok((id, rx))
    }

    /// Cancel a pending call locally: its caller gets [`RpcError::Cancelled`] and a late
    /// answer is ignored. Protocols that tell the plugin (LSP `$/cancelRequest`) also
    /// [`notify`](Self::notify).
    pub fn cancel(&self, id: &Id) -> bool {
        let mut s = lock(&self.shared);
        if !s.peer.cancel(id) {
            return false;
        }
        while s.peer.poll_event().is_some() {}
        if let Some(w) = s.waiters.remove(id) {
            let _ = w.send(Err(RpcError::Cancelled));
        }
        true
    }

    /// Send a notification.
    pub async fn notify(&self, method: &str, params: Option<Value>) -> Result<(), RpcError> {
        let frames = {
            let mut s = lock(&self.shared);
            if let Some(f) = &s.failed {
                return Err(f.clone());
            }
            s.peer.notify(method, params);
            std::iter::from_fn(|| s.peer.poll_transmit()).collect::<Vec<_>>()
        };
        self.send_frames(frames).await;
        Ok(())
    }

    /// The next request or notification from the plugin; `None` once the plugin is gone.
    pub async fn next_incoming(&self) -> Option<Incoming> {
        self.incoming.lock().await.recv().await
    }

    /// Answer a request from the plugin.
    pub async fn respond(
        &self,
        id: Id,
        result: Result<Value, ErrorObject>,
    ) -> Result<(), ProtocolError> {
        let frames = {
            let mut s = lock(&self.shared);
            s.peer.respond(id, result)?;
            std::iter::from_fn(|| s.peer.poll_transmit()).collect::<Vec<_>>()
        };
        self.send_frames(frames).await;
        Ok(())
    }

    /// Close the plugin's stdin, then as [`Session::shutdown`]: `grace` to exit, SIGTERM
    /// (native), kill. The driver keeps reading stdout meanwhile.
    pub async fn shutdown(&self, grace: Duration) -> Exit {
        self.writer.lock().await.close().await;
        self.control.wait_or_stop(grace).await
    }

    /// A write failure means the plugin stopped reading; the driver reports how it ended to
    /// every pending call, so the error is not repeated here.
    async fn send_frames(&self, frames: Vec<Vec<u8>>) {
        let mut w = self.writer.lock().await;
        for f in frames {
            if let Err(e) = w.send(&f).await {
                tracing::debug!("plugin stopped reading stdin: {e}");
                return;
            }
        }
    }
}

async fn dispatch(shared: &Arc<Mutex<Shared>>, tx: &mpsc::Sender<Incoming>, event: Event) {
    match event {
        Event::Response { id, result, .. } => {
            if let Some(w) = lock(shared).waiters.remove(&id) {
                let _ = w.send(result.map_err(RpcError::Remote));
            }
        }
        Event::Request { id, method, params } => {
            let _ = tx.send(Incoming::Request { id, method, params }).await;
        }
        Event::Notification { method, params } => {
            let _ = tx.send(Incoming::Notification { method, params }).await;
        }
    }
}

/// The error every pending call gets when the plugin is gone: the dialect's internal error,
/// the reason as message, and the reason, exit and stderr tail as data (Orchard: a detail
/// string).
pub fn stopped_error(
    dialect: Dialect,
    reason: &str,
    exit: Option<&Exit>,
    stderr_tail: &[String],
) -> ErrorObject {
    let data = match dialect {
        Dialect::Orchard => Value::from(stderr_tail.join("\n")),
        _ => json!({
            "reason": reason,
            "exit": exit.map(exit_json),
            "stderr": stderr_tail,
        }),
    };
    ErrorObject::new(dialect.internal_error(), reason).with_data(data)
}

/// A machine-readable rendering of an exit.
pub fn exit_json(exit: &Exit) -> Value {
    match exit {
        Exit::Exited(code) => json!({"kind": "exited", "code": code}),
        Exit::OutOfFuel { limit } => json!({"kind": "out_of_fuel", "limit": limit}),
        Exit::MemoryLimit { limit } => json!({"kind": "memory_limit", "limit": limit}),
        Exit::DeadlineExceeded { limit } => {
            json!({"kind": "deadline_exceeded", "limit_ms": limit.as_millis() as u64})
        }
        Exit::CpuTimeLimit { limit } => {
            json!({"kind": "cpu_time_limit", "limit_ms": limit.as_millis() as u64})
        }
        Exit::Trap { message, .. } => json!({"kind": "trap", "message": message}),
        Exit::Killed { signal } => json!({"kind": "killed", "signal": signal}),
    }
}
