//! FineCode WM ↔ ER, host side: the host is the workspace manager (WM), the plugin an
//! extension runner (ER). `initialize`/`initialized`, then calls (several may be in flight,
//! answers come back in any order), `shutdown`/`exit` last. Calls go out in the direct form
//! or as `workspace/executeCommand` ([`CallForm`]).
//!
//! ```text
//!  start()/run_action() ──► Driver::request_stream(Client::call) ──► runner stdin
//!  each call is one driver stream, in order:
//!     Progress ($/progress)         ──► the call's on_progress, in order, before its Reply
//!     Reply / Initialize / Shutdown ──► the PendingCall's outcome, the stream's end
//!  Driver::serving(Client, Runner(handler)): the driver's one handler, in arrival order:
//!     Request (getRawConfig, …)     ──► RunnerRequests::handle ──► Client::respond
//!     Notification (logMessage, …)  ──► logged at debug level
//!  cancel(id) ──► Client::cancel: the call completes with -32800, $/cancelRequest goes out
//!  runner gone / broke the protocol ──► Stopped ──► Client::fail_pending ──► the driver
//!                       ends every pending call: -32603 {"reason", "exit", "stderr"}
//! ```
//!
//! The rules live in `sandpipe_proto::finecode::Client`; this module only moves bytes and
//! events between it, the session and the caller. Outcomes a caller sees:
//! - a result;
//! - [`FineCodeFailure::Call`]: the call completed with an error — the runner's JSON-RPC
//!   error, a command-level `{"error": "..."}` ([`FineCodeError::Command`]), a result of the
//!   wrong shape, or `-32800` after [`FineCodeClient::cancel`];
//! - [`FineCodeFailure::Stopped`]: the runner ended (the sandbox stopped it, it crashed or
//!   exited) or broke the framing or the protocol before answering; the error object is the
//!   machine's `-32603` with `data: {"reason", "exit", "stderr"}`;
//! - [`FineCodeFailure::Misuse`]: the host asked for something the lifecycle does not allow.
//!
//! What it does not do: time calls out (wrap them in `tokio::time::timeout` and
//! [`cancel`](FineCodeClient::cancel)), surface the runner's notifications other than
//! `$/progress` (they are logged at debug level), or speak the loopback-TCP transport newer
//! runners default to.

use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::time::Duration;

pub use sandpipe_proto::finecode::{
    ActionMetas, Call, CallForm, FineCodeError, InitializeParams, InitializeResult,
    MergeResultsParams, Method, PayloadSchemas, RawConfig, Reply, RunActionParams, RunActionResult,
    RunHandlersParams, RunHandlersResult, RunnerInfo, RunnerRequest, UpdateConfigParams,
};
use sandpipe_proto::finecode::{Client, ClientEvent};
use sandpipe_proto::jsonrpc::{ErrorCode, INTERNAL_ERROR, METHOD_NOT_FOUND, ProtocolError};
pub use sandpipe_proto::jsonrpc::{ErrorObject, Id};
use serde_json::{Value, json};

use crate::error::{Exit, Stopped};
use crate::run::session::{Session, SessionControl};
use crate::speak::driver::{Completion, Driver, PluginRequests, Refused, Stream};
use crate::speak::protocols::hooks::{
    CallError, CallRequest, DESCRIBE_GRACE, DescribeError, Failure, Launch,
};

/// Why a FineCode call did not return a result.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum FineCodeFailure {
    /// The call completed with an error: the runner's JSON-RPC error, a command-level
    /// failure (`{"error": "..."}`, [`FineCodeError::Command`]), a result that does not have
    /// the call's shape, or `-32800` after [`FineCodeClient::cancel`].
    #[error("{0}")]
    Call(FineCodeError),
    /// The runner ended, or broke the framing or the protocol, before answering.
    #[error("{}", error.message)]
    Stopped {
        /// `-32603`, the reason as message, `data: {"reason", "exit", "stderr"}`
        /// (`finecode::stopped_error`).
        error: ErrorObject,
        /// Why the runner will never answer: reason, exit, stderr tail, violation.
        stopped: Stopped,
    },
    /// The host asked for something the lifecycle does not allow now (a call after
    /// `shutdown`, a `partialResultToken` another call in flight uses).
    #[error("{0}")]
    Misuse(ProtocolError),
}

impl FineCodeFailure {
    /// The JSON-RPC error object, if the failure is one (the runner's, a cancellation's, or
    /// the stopped runner's `-32603`).
    pub fn rpc(&self) -> Option<&ErrorObject> {
        match self {
            FineCodeFailure::Call(FineCodeError::Rpc(e))
            | FineCodeFailure::Stopped { error: e, .. } => Some(e),
            _ => None,
        }
    }

    /// The message of a command-level failure (`{"error": message}`).
    pub fn command_message(&self) -> Option<&str> {
        match self {
            FineCodeFailure::Call(FineCodeError::Command { message }) => Some(message),
            _ => None,
        }
    }

    /// True for a call completed by [`FineCodeClient::cancel`] (or that the runner answered
    /// `-32800`).
    pub fn is_cancelled(&self) -> bool {
        matches!(
            self,
            FineCodeFailure::Call(FineCodeError::Rpc(e))
                if e.code == ErrorCode::Int(sandpipe_proto::jsonrpc::REQUEST_CANCELLED)
        )
    }
}

/// Answers the runner's requests to the manager (`projects/getRawConfig`,
/// `workspace/applyEdit`, `finecode/runActionInProject`, `finecode/runActionInWorkspace`,
/// anything else). It is the driver's one handler ([`PluginRequests`]): requests are handled
/// one at a time, in arrival order, in the driver's handler task, so a slow answer does not
/// stop the client from reading the runner's output; progress, other answers and cancellation
/// keep flowing meanwhile (until [`EVENT_QUEUE`](crate::speak::driver::EVENT_QUEUE) of the runner's
/// requests and notifications wait: then the runner is read no further until one is taken).
/// A panicking handler gets `-32603` sent for it and for every later request.
pub trait RunnerRequests: Send + 'static {
    /// The answer to `request` (for `projects/getRawConfig`, a [`RawConfig`] as JSON).
    /// Requests the manager does not serve get [`not_served`] (`-32601`).
    fn handle(
        &mut self,
        request: RunnerRequest,
    ) -> impl Future<Output = Result<Value, ErrorObject>> + Send;
}

/// The `-32601` answer to a runner request the manager does not serve.
pub fn not_served(method: &str) -> ErrorObject {
    ErrorObject::new(
        METHOD_NOT_FOUND,
        format!("the manager does not serve {method}"),
    )
}

/// A manager that serves no runner requests: every one is answered `-32601`.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoRunnerRequests;

impl RunnerRequests for NoRunnerRequests {
    fn handle(
        &mut self,
        request: RunnerRequest,
    ) -> impl Future<Output = Result<Value, ErrorObject>> + Send {
        std::future::ready(Err(not_served(request.method())))
    }
}

/// Runner requests answered by a blocking-free closure.
pub struct SyncRequests<F>(pub F);

impl<F> std::fmt::Debug for SyncRequests<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SyncRequests").finish_non_exhaustive()
    }
}

impl<F> RunnerRequests for SyncRequests<F>
where
    F: FnMut(RunnerRequest) -> Result<Value, ErrorObject> + Send + 'static,
{
    fn handle(
        &mut self,
        request: RunnerRequest,
    ) -> impl Future<Output = Result<Value, ErrorObject>> + Send {
        std::future::ready((self.0)(request))
    }
}

/// A [`RunnerRequests`] as the driver's handler.
struct Runner<H>(H);

impl<H: RunnerRequests> PluginRequests<Client> for Runner<H> {
    async fn request(&mut self, request: RunnerRequest) -> Option<Result<Value, ErrorObject>> {
        Some(self.0.handle(request).await)
    }
}

/// What completes a request of ours.
#[derive(Debug)]
enum Answer {
    Initialize(InitializeResult),
    Reply(Reply),
    Shutdown,
}

/// A FineCode extension runner after `initialize`/`initialized`. Calls take `&self` and may
/// run concurrently. Dropping the client without [`FineCodeClient::shutdown`] kills the
/// runner.
pub struct FineCodeClient {
    driver: Driver<Client>,
    form: CallForm,
}

impl std::fmt::Debug for FineCodeClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FineCodeClient")
            .field("form", &self.form)
            .finish_non_exhaustive()
    }
}

/// The `initialize` params [`FineCodeClient::connect`] sends: this process's id, the client
/// info `{"name": "sandpipe", "version"}` and empty capabilities.
pub fn default_initialize_params() -> InitializeParams {
    InitializeParams {
        process_id: Some(i64::from(std::process::id())),
        client_info: Some(json!({"name": "sandpipe", "version": env!("CARGO_PKG_VERSION")})),
        capabilities: json!({}),
        ..InitializeParams::default()
    }
}

impl FineCodeClient {
    /// Take over `session` (Content-Length framing), make calls in `form`, answer the runner's
    /// requests with `handler`; send `initialize` with [`default_initialize_params`], wait for
    /// its result and send `initialized`. There is no deadline: a runner that never answers is
    /// only ended by its policy (or wrap this in `tokio::time::timeout`).
    pub async fn connect(
        session: Session,
        form: CallForm,
        handler: impl RunnerRequests,
    ) -> Result<(FineCodeClient, InitializeResult), FineCodeFailure> {
        Self::connect_with(session, form, &default_initialize_params(), handler).await
    }

    /// [`FineCodeClient::connect`] with the given `initialize` params.
    pub async fn connect_with(
        session: Session,
        form: CallForm,
        params: &InitializeParams,
        handler: impl RunnerRequests,
    ) -> Result<(FineCodeClient, InitializeResult), FineCodeFailure> {
        let driver = Driver::serving(session, Client::with_call_form(form), Runner(handler));
        let client = FineCodeClient { driver, form };
        let mut stream = client.send(|c| c.initialize(params))?;
        let result = match outcome(&mut stream, |_| {}).await? {
            Answer::Initialize(result) => result,
            other => return Err(unexpected_answer("initialize", &other)),
        };
        client.act(Client::initialized)?;
        Ok((client, result))
    }

    /// The call form.
    pub fn call_form(&self) -> CallForm {
        self.form
    }

    /// The session's control half (exit, kill, stderr tail).
    pub fn control(&self) -> &SessionControl {
        self.driver.control()
    }

    /// Send `call` without waiting for its answer. With a `partialResultToken` in its
    /// options, its `$/progress` values are collected for
    /// [`PendingCall::wait_with_progress`].
    pub fn start(&self, call: Call) -> Result<PendingCall<Reply>, FineCodeFailure> {
        self.start_typed(call, Some)
    }

    /// Make `call` and wait for its answer (progress values are dropped).
    pub async fn call(&self, call: Call) -> Result<Reply, FineCodeFailure> {
        self.start(call)?.wait().await
    }

    /// `finecodeRunner/updateConfig`.
    pub async fn update_config(&self, params: UpdateConfigParams) -> Result<(), FineCodeFailure> {
        self.start_typed(Call::UpdateConfig(params), |r| {
            matches!(r, Reply::UpdateConfig).then_some(())
        })?
        .wait()
        .await
    }

    /// `finecodeRunner/getInfo`.
    pub async fn get_info(&self) -> Result<RunnerInfo, FineCodeFailure> {
        self.start_typed(Call::GetInfo, |r| match r {
            Reply::GetInfo(info) => Some(info),
            _ => None,
        })?
        .wait()
        .await
    }

    /// `finecodeRunner/resolveActionMeta`.
    pub async fn resolve_action_meta(&self) -> Result<ActionMetas, FineCodeFailure> {
        self.start_typed(Call::ResolveActionMeta, |r| match r {
            Reply::ResolveActionMeta(metas) => Some(metas),
            _ => None,
        })?
        .wait()
        .await
    }

    /// Send `actions/run` without waiting: the [`PendingCall`]'s id is what
    /// [`FineCodeClient::cancel`] takes.
    pub fn start_run_action(
        &self,
        params: RunActionParams,
    ) -> Result<PendingCall<RunActionResult>, FineCodeFailure> {
        self.start_typed(Call::RunAction(params), |r| match r {
            Reply::RunAction(result) => Some(result),
            _ => None,
        })
    }

    /// `actions/run`. With a `partialResultToken` in `params.options`, every `$/progress`
    /// value (decoded from its JSON string) is passed to `on_progress`, in order, before the
    /// final result (`status: "streamed"`) returns.
    pub async fn run_action(
        &self,
        params: RunActionParams,
        on_progress: impl FnMut(Value),
    ) -> Result<RunActionResult, FineCodeFailure> {
        self.start_run_action(params)?
            .wait_with_progress(on_progress)
            .await
    }

    /// Send `actions/runHandlers` without waiting (use
    /// [`PendingCall::wait_with_progress`] for a streamed segment).
    pub fn start_run_handlers(
        &self,
        params: RunHandlersParams,
    ) -> Result<PendingCall<RunHandlersResult>, FineCodeFailure> {
        self.start_typed(Call::RunHandlers(params), |r| match r {
            Reply::RunHandlers(result) => Some(result),
            _ => None,
        })
    }

    /// `actions/runHandlers` (progress values are dropped: see
    /// [`FineCodeClient::start_run_handlers`]).
    pub async fn run_handlers(
        &self,
        params: RunHandlersParams,
    ) -> Result<RunHandlersResult, FineCodeFailure> {
        self.start_run_handlers(params)?.wait().await
    }

    /// `actions/mergeResults`: the `merged` result.
    pub async fn merge_results(
        &self,
        params: MergeResultsParams,
    ) -> Result<Value, FineCodeFailure> {
        self.start_typed(Call::MergeResults(params), |r| match r {
            Reply::MergeResults(merged) => Some(merged),
            _ => None,
        })?
        .wait()
        .await
    }

    /// `actions/getPayloadSchemas`.
    pub async fn get_payload_schemas(&self) -> Result<PayloadSchemas, FineCodeFailure> {
        self.start_typed(Call::GetPayloadSchemas, |r| match r {
            Reply::GetPayloadSchemas(schemas) => Some(schemas),
            _ => None,
        })?
        .wait()
        .await
    }

    /// Give up on call `id`: its [`PendingCall`] completes at once with `-32800`
    /// ([`FineCodeFailure::is_cancelled`]), a late answer is dropped, and the runner is sent
    /// `$/cancelRequest`. False if `id` is not a call in flight.
    pub fn cancel(&self, id: &Id) -> bool {
        self.driver.act(|c| c.cancel(id))
    }

    /// Send a notification (`textDocument/didOpen`, …).
    pub fn notify(&self, method: &str, params: Value) -> Result<(), FineCodeFailure> {
        self.act(|c| c.notify(method, params))
    }

    /// End the session as the WM does: `shutdown` (its answer awaited up to `grace`), the
    /// `exit` notification, then close stdin and give the runner `grace` to end on its own
    /// (the real runner may take seconds); then a native runner gets SIGTERM and up to
    /// [`TERM_GRACE`](crate::run::session::TERM_GRACE) more, then it is killed — as
    /// [`Session::shutdown`]. A runner already gone just reports how it ended.
    pub async fn shutdown(self, grace: Duration) -> Exit {
        match self.send(Client::shutdown) {
            Ok(mut stream) => match tokio::time::timeout(grace, outcome(&mut stream, |_| {})).await
            {
                Ok(Ok(_)) => {}
                Ok(Err(e)) => tracing::debug!("shutdown failed: {e}"),
                Err(_) => tracing::debug!("shutdown got no answer"),
            },
            Err(e) => tracing::debug!("not sending shutdown: {e}"),
        }
        let _ = self.driver.act(Client::exit);
        // The driver keeps reading stdout to its end meanwhile, so the runner never blocks
        // on a full pipe while it exits.
        self.driver.shutdown(grace).await
    }

    fn start_typed<T>(
        &self,
        call: Call,
        extract: fn(Reply) -> Option<T>,
    ) -> Result<PendingCall<T>, FineCodeFailure> {
        let method = call.method();
        let mut id = None;
        let stream = self.send(|c| {
            let key = c.call(call)?;
            id = Some(key.clone());
            Ok(key)
        })?;
        Ok(PendingCall {
            id: id.expect("the call was made"),
            method,
            stream,
            extract,
        })
    }

    /// Make a call on the machine; the driver streams its `$/progress` values, then its
    /// answer.
    fn send(
        &self,
        make: impl FnOnce(&mut Client) -> Result<Id, ProtocolError>,
    ) -> Result<Stream<ClientEvent>, FineCodeFailure> {
        self.driver.request_stream(make).map_err(|e| match e {
            Refused::Machine(e) => FineCodeFailure::Misuse(e),
            Refused::Stopped(stopped) => stopped_failure(stopped),
        })
    }

    /// Act on the machine unless the runner is gone.
    fn act(
        &self,
        f: impl FnOnce(&mut Client) -> Result<(), ProtocolError>,
    ) -> Result<(), FineCodeFailure> {
        if let Some(stopped) = self.driver.stopped() {
            return Err(stopped_failure(stopped));
        }
        self.driver.act(f).map_err(FineCodeFailure::Misuse)
    }
}

fn stopped_failure(stopped: Stopped) -> FineCodeFailure {
    FineCodeFailure::Stopped {
        error: sandpipe_proto::finecode::stopped_error(&stopped),
        stopped,
    }
}

/// A call in flight. Await it (it is [`IntoFuture`]), or call [`PendingCall::wait`] or
/// [`PendingCall::wait_with_progress`]; its [`id`](PendingCall::id) is what
/// [`FineCodeClient::cancel`] takes.
pub struct PendingCall<T> {
    id: Id,
    method: Method,
    stream: Stream<ClientEvent>,
    extract: fn(Reply) -> Option<T>,
}

impl<T> std::fmt::Debug for PendingCall<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PendingCall")
            .field("id", &self.id)
            .field("method", &self.method)
            .finish_non_exhaustive()
    }
}

impl<T> PendingCall<T> {
    /// The call's request id.
    pub fn id(&self) -> &Id {
        &self.id
    }

    /// The call's method.
    pub fn method(&self) -> Method {
        self.method
    }

    /// Wait for the answer; `$/progress` values are dropped.
    pub async fn wait(self) -> Result<T, FineCodeFailure> {
        self.wait_with_progress(|_| {}).await
    }

    /// Wait for the answer, passing each `$/progress` value (decoded from its JSON string) to
    /// `on_progress` in arrival order; all of them come before this returns.
    pub async fn wait_with_progress(
        mut self,
        on_progress: impl FnMut(Value),
    ) -> Result<T, FineCodeFailure> {
        match outcome(&mut self.stream, on_progress).await? {
            Answer::Reply(reply) => {
                let got = reply.method();
                (self.extract)(reply).ok_or_else(|| {
                    FineCodeFailure::Call(FineCodeError::BadResult {
                        method: self.method.as_str(),
                        reason: format!("answered as {got}"),
                    })
                })
            }
            other => Err(unexpected_answer(self.method.as_str(), &other)),
        }
    }
}

impl<T: Send + 'static> IntoFuture for PendingCall<T> {
    type Output = Result<T, FineCodeFailure>;
    type IntoFuture = Pin<Box<dyn Future<Output = Self::Output> + Send>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(self.wait())
    }
}

fn driver_gone() -> FineCodeFailure {
    FineCodeFailure::Call(FineCodeError::Rpc(ErrorObject::new(
        INTERNAL_ERROR,
        "the finecode client's driver is gone",
    )))
}

fn unexpected_answer(method: &'static str, answer: &Answer) -> FineCodeFailure {
    FineCodeFailure::Call(FineCodeError::BadResult {
        method,
        reason: format!("completed by {answer:?}"),
    })
}

/// A call's outcome from its stream, passing each `$/progress` value (decoded from its JSON
/// string) to `on_progress` in arrival order: every `$/progress` precedes its answer on the
/// wire, and the driver keeps that order.
async fn outcome(
    stream: &mut Stream<ClientEvent>,
    mut on_progress: impl FnMut(Value),
) -> Result<Answer, FineCodeFailure> {
    while let Some(item) = stream.next().await {
        let Completion { event, stopped } = item.map_err(stopped_failure)?;
        let result = match event {
            ClientEvent::Progress { params, .. } => {
                on_progress(params.decode_value().unwrap_or(params.value));
                continue;
            }
            ClientEvent::Initialize { result, .. } => {
                result.map(Answer::Initialize).map_err(FineCodeError::Rpc)
            }
            ClientEvent::Reply { result, .. } => result.map(Answer::Reply),
            ClientEvent::Shutdown { result, .. } => result
                .map(|()| Answer::Shutdown)
                .map_err(FineCodeError::Rpc),
            other => {
                tracing::debug!(?other, "finecode event not handled");
                continue;
            }
        };
        return result.map_err(|e| match (stopped, e) {
            (Some(stopped), FineCodeError::Rpc(error)) => {
                FineCodeFailure::Stopped { error, stopped }
            }
            (_, e) => FineCodeFailure::Call(e),
        });
    }
    Err(driver_gone())
}

// `sandpipe call` and `inspect --protocol` (the hooks in this protocol's line of
// `protocols::PROTOCOLS`).

/// `sandpipe call --protocol finecode`: METHOD is a call (`actions/run`,
/// `finecodeRunner/resolveActionMeta`, ...), PARAMS its params, in the direct call form; the
/// config (`--config`) answers the runner's `projects/getRawConfig`.
pub(crate) async fn one_call(launch: Launch<'_>, request: CallRequest) -> Result<Value, CallError> {
    let method = request.method.as_str();
    let Some(m) = sandpipe_proto::finecode::Method::from_name(method) else {
        return Err(CallError::failed(
            Failure::Host,
            [format!("unknown FineCode call {method:?}")],
        ));
    };
    let config = request.config_json()?;
    let call = Call::from_params(m, request.params)
        .map_err(|e| CallError::failed(Failure::Host, [format!("bad params for {method}: {e}")]))?;
    let handler = SyncRequests(move |request: RunnerRequest| match request {
        // The runner expects the config as a JSON-encoded string.
        RunnerRequest::GetRawConfig { .. } => Ok(json!({ "config": config.to_string() })),
        other => Err(not_served(&format!("{other:?}"))),
    });
    let session = launch.start().await.map_err(CallError::Start)?;
    let (client, _init) = FineCodeClient::connect(session, CallForm::Direct, handler)
        .await
        .map_err(|e| CallError::failed(Failure::Violation, [format!("finecode error: {e}")]))?;
    let result = client.call(call).await;
    let exit = client.shutdown(request.grace).await;
    match result {
        Ok(reply) => Ok(reply.to_value(CallForm::Direct)),
        Err(e) => {
            let failure = match &e {
                // An answer that does not have the call's shape breaks the protocol.
                FineCodeFailure::Call(sandpipe_proto::finecode::FineCodeError::BadResult {
                    ..
                }) => Failure::Violation,
                FineCodeFailure::Stopped { stopped, .. } if stopped.violation => Failure::Violation,
                _ => Failure::ended(Some(exit), Failure::Plugin),
            };
            Err(CallError::failed(failure, [format!("finecode error: {e}")]))
        }
    }
}

/// `sandpipe inspect --protocol finecode`: the `initialize` answer and the runner's action
/// metadata.
pub(crate) async fn describe(launch: Launch<'_>) -> Result<Value, DescribeError> {
    let session = launch.start().await?;
    let (client, init) = FineCodeClient::connect(session, CallForm::Direct, NoRunnerRequests)
        .await
        .map_err(|e| DescribeError::Failed(e.to_string()))?;
    let meta = client.resolve_action_meta().await;
    let _ = client.shutdown(DESCRIBE_GRACE).await;
    let init = serde_json::to_value(init).unwrap_or(Value::Null);
    meta.map_err(|e| e.to_string())
        .and_then(|m| serde_json::to_value(m).map_err(|e| e.to_string()))
        .map(|m| json!({"initialize": init, "resolveActionMeta": m}))
        .map_err(DescribeError::Failed)
}
