//! An async JSON-RPC client (and server, for requests the plugin sends back) over a
//! [`Session`], driven by `sandpipe_proto::jsonrpc::Peer`.
//!
//! ```text
//!  call() ──► Driver::request(Peer::request) ──► plugin stdin
//!  Driver reader: frame ──► Peer::handle_frame ──► Event
//!     Response      ──► the waiting call()
//!     Request/Notif ──► the driver's handler (a PluginRequests<Peer>): requests answered in order
//!  plugin gone / bad frame ──► Stopped ──► Peer::fail_pending(jsonrpc::stopped_error) ──► every call()
//! ```
//!
//! Protocol-correct failure: when the sandbox stops the plugin (or the plugin breaks the
//! framing or the protocol) while calls are pending, every pending call gets an error object
//! in the dialect's own form — code `-32603` (`internal_error` for Orchard), the reason as the
//! message, and `{"reason", "exit", "stderr"}` as data — never a hang or "channel closed".

use std::time::Duration;

use sandpipe_proto::jsonrpc::{
    self, Dialect, ErrorCode, ErrorObject, Event, Id, Peer, ProtocolError, REQUEST_CANCELLED,
};
use serde_json::Value;

use crate::error::{Exit, Stopped};
use crate::run::session::{Session, SessionControl};
use crate::speak::driver::{Completion, Driver, Pending, PluginRequests, Refused, Unasked};
use crate::speak::protocols::hooks::{CallError, CallRequest, DescribeError, Failure, Launch};

/// Why a call did not return a result.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum RpcError {
    /// The plugin answered with an error (data, not a failure).
    #[error("plugin returned {0}")]
    Remote(ErrorObject),
    /// The plugin was stopped, exited, or broke the framing or protocol before answering (or
    /// the host gave up waiting). `error` is the protocol's own error form
    /// ([`jsonrpc::stopped_error`]), built from `stopped`.
    #[error("{}", error.message)]
    Failed {
        /// The error in the dialect's form.
        error: ErrorObject,
        /// Why the plugin will not answer: reason, exit, stderr tail, violation.
        stopped: Stopped,
    },
    /// The protocol does not allow the call now (before the handshake, after shutdown, a
    /// method the provider kind does not have); nothing was sent.
    #[error("refused by the protocol: {0}")]
    Refused(ProtocolError),
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
            RpcError::Refused(e) => ErrorObject::new(dialect.internal_error(), e.to_string()),
            RpcError::BadResult { method, reason } => ErrorObject::new(
                dialect.internal_error(),
                format!("bad result for {method}: {reason}"),
            ),
        }
    }
}

/// A JSON-RPC connection to a plugin: the [`Driver`] running a `jsonrpc::Peer`. Cheap to
/// share behind an `Arc`; calls may run concurrently (responses are matched by id, in any
/// order).
pub struct JsonRpcPeer {
    dialect: Dialect,
    driver: Driver<Peer>,
}

impl std::fmt::Debug for JsonRpcPeer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JsonRpcPeer")
            .field("dialect", &self.dialect)
            .finish_non_exhaustive()
    }
}

impl RpcError {
    /// A completion's result: the plugin's answer, or the protocol's error when the plugin
    /// stopped.
    fn from_completion(c: Completion<Event>) -> Result<Value, RpcError> {
        let Event::Response { result, .. } = c.event else {
            unreachable!("only responses complete requests")
        };
        Self::from_answer(result, c.stopped)
    }

    /// A JSON-RPC answer as a call's result: a stop's error is [`RpcError::Failed`], `-32800`
    /// [`RpcError::Cancelled`], any other error the plugin's own ([`RpcError::Remote`]).
    pub(crate) fn from_answer<T>(
        answer: Result<T, ErrorObject>,
        stopped: Option<Stopped>,
    ) -> Result<T, RpcError> {
        match (answer, stopped) {
            (Ok(v), _) => Ok(v),
            (Err(error), Some(stopped)) => Err(RpcError::Failed { error, stopped }),
            (Err(error), None) if error.code == ErrorCode::Int(REQUEST_CANCELLED) => {
                Err(RpcError::Cancelled)
            }
            (Err(error), None) => Err(RpcError::Remote(error)),
        }
    }

    fn stopped(dialect: Dialect, stopped: Stopped) -> Self {
        RpcError::Failed {
            error: jsonrpc::stopped_error(dialect, &stopped),
            stopped,
        }
    }
}

impl JsonRpcPeer {
    /// Take over `session` (its framing must be JSON Lines or Content-Length). The plugin's
    /// own requests and notifications go to `handler` ([`Unasked`] serves none: each request
    /// gets `-32601`).
    pub fn new(session: Session, dialect: Dialect, handler: impl PluginRequests<Peer>) -> Self {
        Self::with_first_id(session, dialect, 0, handler)
    }

    /// Like [`JsonRpcPeer::new`], numbering the host's requests from `first_id`.
    pub fn with_first_id(
        session: Session,
        dialect: Dialect,
        first_id: i64,
        handler: impl PluginRequests<Peer>,
    ) -> Self {
        JsonRpcPeer {
            dialect,
            driver: Driver::serving(session, Peer::with_first_id(dialect, first_id), handler),
        }
    }

    /// The dialect.
    pub fn dialect(&self) -> Dialect {
        self.dialect
    }

    /// The session's control half (exit, kill, stderr tail).
    pub fn control(&self) -> &SessionControl {
        self.driver.control()
    }

    /// Call `method` and wait for its result.
    pub async fn call(&self, method: &str, params: Option<Value>) -> Result<Value, RpcError> {
        let (_, pending) = self.start(method, params)?;
        match pending.wait().await {
            Ok(c) => RpcError::from_completion(c),
            Err(stopped) => Err(RpcError::stopped(self.dialect, stopped)),
        }
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

    /// Call `method` with a deadline: past it, the request is given up (`Peer::cancel`: a
    /// late answer is ignored) and the call fails as [`RpcError::Failed`] with the dialect's
    /// internal error, "METHOD got no answer within T". The plugin keeps running.
    pub async fn call_with_timeout(
        &self,
        method: &str,
        params: Option<Value>,
        timeout: Duration,
    ) -> Result<Value, RpcError> {
        let (id, pending) = self.start(method, params)?;
        match tokio::time::timeout(timeout, pending.wait()).await {
            Ok(Ok(c)) => RpcError::from_completion(c),
            Ok(Err(stopped)) => Err(RpcError::stopped(self.dialect, stopped)),
            Err(_) => {
                self.driver.act(|peer| peer.cancel(&id));
                let reason = format!(
                    "{method} got no answer within {}",
                    humantime::format_duration(timeout)
                );
                let stopped = Stopped::by_host(reason, self.control().stderr_tail());
                Err(RpcError::stopped(self.dialect, stopped))
            }
        }
    }

    fn start(&self, method: &str, params: Option<Value>) -> Result<(Id, Pending<Event>), RpcError> {
        let mut id = None;
        let pending = self
            .driver
            .request(|peer| {
                let key = peer.request(method, params);
                id = Some(key.clone());
                Ok::<_, std::convert::Infallible>(key)
            })
            .map_err(|refused| match refused {
                Refused::Stopped(stopped) => RpcError::stopped(self.dialect, stopped),
                Refused::Machine(never) => match never {},
            })?;
        Ok((id.expect("request made"), pending))
    }

    /// Send a request and return its result when it comes, without waiting here: the
    /// returned future resolves to what [`call`](Self::call) would.
    pub fn start_call(
        &self,
        method: &str,
        params: Option<Value>,
    ) -> Result<impl Future<Output = Result<Value, RpcError>> + use<>, RpcError> {
        let (_, pending) = self.start(method, params)?;
        let dialect = self.dialect;
        Ok(async move {
            match pending.wait().await {
                Ok(c) => RpcError::from_completion(c),
                Err(stopped) => Err(RpcError::stopped(dialect, stopped)),
            }
        })
    }

    /// Send a notification.
    pub fn notify(&self, method: &str, params: Option<Value>) -> Result<(), RpcError> {
        if let Some(stopped) = self.driver.stopped() {
            return Err(RpcError::stopped(self.dialect, stopped));
        }
        self.driver.act(|peer| peer.notify(method, params));
        Ok(())
    }

    /// Close the plugin's stdin, then as [`Session::shutdown`](crate::Session::shutdown):
    /// `grace` to exit, SIGTERM (native), kill. The driver keeps reading stdout meanwhile.
    pub async fn shutdown(&self, grace: Duration) -> Exit {
        self.driver.shutdown(grace).await
    }
}

impl RpcError {
    /// This error as `sandpipe call` reports it for `protocol` (bare JSON-RPC, denobridge,
    /// MCP): the error object, its data, and whose doing it is.
    pub fn call_error(&self, protocol: &str) -> CallError {
        let obj = self.error_object(Dialect::JsonRpc2);
        let mut lines = vec![format!("{protocol} error {}: {}", obj.code, obj.message)];
        if let Some(data) = &obj.data {
            lines.push(format!("data: {data}"));
        }
        let failure = match self {
            RpcError::Remote(_) | RpcError::Cancelled => Failure::Plugin,
            RpcError::Refused(_) => Failure::Host,
            RpcError::BadResult { .. } => Failure::Violation,
            RpcError::Failed { stopped, .. } if stopped.violation => Failure::Violation,
            // Exited 0 (or unknown) with the call unanswered is a protocol failure too.
            RpcError::Failed { stopped, .. } => {
                Failure::ended(stopped.exit.clone(), Failure::Violation)
            }
        };
        CallError::failed(failure, lines)
    }
}

// `sandpipe call` and `inspect --protocol` (the hooks in this protocol's line of
// `protocols::PROTOCOLS`).

/// `sandpipe call --protocol jsonrpc`: METHOD with PARAMS, then a clean shutdown. `call`
/// serves nothing: a request from the plugin gets `-32601` so it never waits.
pub(crate) async fn one_call(launch: Launch<'_>, request: CallRequest) -> Result<Value, CallError> {
    let session = launch.start().await.map_err(CallError::Start)?;
    let rpc = JsonRpcPeer::new(session, Dialect::JsonRpc2, Unasked);
    let result = rpc.call(&request.method, request.params).await;
    let _ = rpc.shutdown(request.grace).await;
    result.map_err(|e| e.call_error("jsonrpc"))
}

/// `sandpipe inspect --protocol jsonrpc`: plain JSON-RPC has no self-description.
pub(crate) async fn describe() -> Result<Value, DescribeError> {
    Err(DescribeError::Failed(
        "plain JSON-RPC has no self-description".to_owned(),
    ))
}
