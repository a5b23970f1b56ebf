//! Write a FineCode extension runner: implement [`Runner`], call [`serve`].
//!
//! ```text
//!   stdin ──Content-Length──► Server (sandpipe-proto) ──► Runner::{update_config, run_action, ..}
//!                                   ▲                          │ ctx.progress(value)  ─► $/progress
//!                                   │                          │ ctx.request(..)      ─► WM, then
//!                                   └── frames read while ◄────┘   read until its answer arrives
//!   stdout ◄── one frame per message, flushed                    until `exit` or EOF
//! ```
//!
//! The loop answers the LSP lifecycle itself (`initialize` from [`Runner::initialize`],
//! `shutdown` with `null`, stops after `exit`), accepts every call in both forms (direct
//! methods and `workspace/executeCommand`), and answers malformed or unknown calls for the
//! runner. Calls are handled one at a time, in arrival order.
//!
//! **Asking the manager.** [`Context::request`] sends a runner → manager request and keeps
//! reading frames until its answer arrives; whatever else arrives meanwhile is queued and
//! handled after the current call. If the current call is cancelled (`$/cancelRequest`)
//! while it waits, the wait ends at once with `-32800` (the late answer is dropped).
//!
//! **Cancellation.** A call cancelled before or while it is handled is answered with
//! `-32800 request cancelled`, whatever the handler returned. The loop is single-threaded, so
//! a `$/cancelRequest` is only read while a handler waits in [`Context::request`] or between
//! calls; a handler that computes for long can poll [`Context::is_cancelled`] only after such
//! a wait.
//!
//! **Errors.** Handlers return [`FineCodeError`]: [`FineCodeError::Command`] goes out as the
//! successful result `{"error": message}` (how the real runner reports a failed action),
//! [`FineCodeError::Rpc`] as a JSON-RPC error. Unimplemented calls answer `-32601`.
//!
//! ```no_run
//! use sandpipe_guest::finecode::*;
//! use sandpipe_guest::{Framing, Stdio};
//!
//! struct Hello;
//! impl Runner for Hello {
//!     fn run_action(&mut self, ctx: &mut Context<'_>, p: RunActionParams)
//!         -> Result<RunActionResult, FineCodeError> {
//!         if ctx.progress(&json!({"hello": p.action_name})) {
//!             return Ok(RunActionResult::streamed());
//!         }
//!         Ok(RunActionResult::success(&json!({"json": {"hello": p.action_name}})))
//!     }
//! }
//!
//! serve(&mut Stdio::new(Framing::ContentLength), &mut Hello).unwrap();
//! ```

use std::collections::VecDeque;
use std::io::Write;

use sandpipe_proto::finecode::Server;
pub use sandpipe_proto::finecode::serde_json;
pub use sandpipe_proto::finecode::{
    ActionMeta, ActionMetas, Call, FineCodeError, InitializeParams, InitializeResult,
    MergeResultsParams, Method, PayloadSchema, PayloadSchemas, ProgressToken, RawConfig, Reply,
    RunActionParams, RunActionResult, RunHandlersParams, RunHandlersResult, RunMeta, RunOptions,
    RunStatus, RunnerInfo, RunnerRequest, ServerEvent, UpdateConfigParams, Value,
};
pub use sandpipe_proto::jsonrpc::{ErrorObject, Id};
use sandpipe_proto::jsonrpc::{INTERNAL_ERROR, METHOD_NOT_FOUND, ProtocolError, REQUEST_CANCELLED};
pub use serde_json::json;

use crate::{Bytes, Framed, GuestError};

/// A FineCode extension runner. Only [`Runner::run_action`] is required.
pub trait Runner {
    /// Answer `initialize`. The default names the runner `sandpipe-finecode-runner` and
    /// advertises every call as an `executeCommand` command.
    fn initialize(&mut self, params: &InitializeParams) -> InitializeResult {
        let _ = params;
        InitializeResult::new("sandpipe-finecode-runner", env!("CARGO_PKG_VERSION"))
    }

    /// `finecodeRunner/updateConfig`. The default accepts any config.
    fn update_config(
        &mut self,
        ctx: &mut Context<'_>,
        params: UpdateConfigParams,
    ) -> Result<(), FineCodeError> {
        let _ = (ctx, params);
        Ok(())
    }

    /// `finecodeRunner/getInfo`. The default reports no log file.
    fn get_info(&mut self, ctx: &mut Context<'_>) -> Result<RunnerInfo, FineCodeError> {
        let _ = ctx;
        Ok(RunnerInfo::default())
    }

    /// `finecodeRunner/resolveActionMeta`. The default resolves nothing.
    fn resolve_action_meta(&mut self, ctx: &mut Context<'_>) -> Result<ActionMetas, FineCodeError> {
        let _ = ctx;
        Ok(ActionMetas::new())
    }

    /// `actions/run`. Stream partial results with [`Context::progress`] and then return
    /// [`RunActionResult::streamed`].
    fn run_action(
        &mut self,
        ctx: &mut Context<'_>,
        params: RunActionParams,
    ) -> Result<RunActionResult, FineCodeError>;

    /// `actions/runHandlers`. The default answers `-32601`.
    fn run_handlers(
        &mut self,
        ctx: &mut Context<'_>,
        params: RunHandlersParams,
    ) -> Result<RunHandlersResult, FineCodeError> {
        let _ = (ctx, params);
        Err(not_supported(Method::RunHandlers))
    }

    /// `actions/mergeResults`: the `merged` result. The default answers `-32601`.
    fn merge_results(
        &mut self,
        ctx: &mut Context<'_>,
        params: MergeResultsParams,
    ) -> Result<Value, FineCodeError> {
        let _ = (ctx, params);
        Err(not_supported(Method::MergeResults))
    }

    /// `actions/getPayloadSchemas`. The default knows no actions.
    fn get_payload_schemas(
        &mut self,
        ctx: &mut Context<'_>,
    ) -> Result<PayloadSchemas, FineCodeError> {
        let _ = ctx;
        Ok(PayloadSchemas::new())
    }

    /// `actions/reload`. The default does nothing.
    fn reload_action(
        &mut self,
        ctx: &mut Context<'_>,
        action_name: String,
    ) -> Result<(), FineCodeError> {
        let _ = (ctx, action_name);
        Ok(())
    }

    /// `actions/resolveSource`: the canonical source. The default answers `-32601`.
    fn resolve_source(
        &mut self,
        ctx: &mut Context<'_>,
        source: String,
    ) -> Result<String, FineCodeError> {
        let _ = (ctx, source);
        Err(not_supported(Method::ResolveSource))
    }

    /// `packages/resolvePath`: the package's path. The default answers `-32601`.
    fn resolve_package_path(
        &mut self,
        ctx: &mut Context<'_>,
        package_name: String,
    ) -> Result<String, FineCodeError> {
        let _ = (ctx, package_name);
        Err(not_supported(Method::ResolvePackagePath))
    }

    /// A notification (`textDocument/didOpen`, …). The default ignores it.
    fn notification(&mut self, method: &str, params: Option<Value>) {
        let _ = (method, params);
    }

    /// `shutdown` arrived; release resources. The default does nothing.
    fn shutdown(&mut self) {}
}

/// The `-32601` error the defaults answer.
pub fn not_supported(method: Method) -> FineCodeError {
    FineCodeError::Rpc(ErrorObject::new(
        METHOD_NOT_FOUND,
        format!("{method} is not supported by this runner"),
    ))
}

/// The framed stream, without its type parameters (so handlers need none).
trait Wire {
    fn recv(&mut self) -> Result<Option<Bytes>, GuestError>;
    fn send(&mut self, frame: &[u8]) -> Result<(), GuestError>;
}

impl<R: crate::Input, W: Write> Wire for Framed<R, W> {
    fn recv(&mut self) -> Result<Option<Bytes>, GuestError> {
        Framed::recv(self)
    }
    fn send(&mut self, frame: &[u8]) -> Result<(), GuestError> {
        Framed::send(self, frame)
    }
}

/// What a handler may do besides returning: stream partial results, ask the manager.
pub struct Context<'a> {
    wire: &'a mut dyn Wire,
    server: &'a mut Server,
    queue: &'a mut VecDeque<ServerEvent>,
    failure: &'a mut Option<GuestError>,
    call: Id,
}

impl std::fmt::Debug for Context<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("call", &self.call)
            .finish_non_exhaustive()
    }
}

impl Context<'_> {
    /// The id of the call being handled.
    pub fn call_id(&self) -> &Id {
        &self.call
    }

    /// Whether the manager cancelled this call (`$/cancelRequest`).
    pub fn is_cancelled(&self) -> bool {
        self.server.is_cancelled(&self.call)
    }

    /// Send `value` as a partial result (`$/progress`). False, and nothing is sent, when the
    /// call passed no `partialResultToken` (or stdout failed: the loop reports that after the
    /// handler returns).
    pub fn progress(&mut self, value: &Value) -> bool {
        match self.server.progress(&self.call, value) {
            Ok(true) => self.flush().is_ok(),
            Ok(false) => false,
            Err(e) => {
                eprintln!("finecode runner: {e}");
                false
            }
        }
    }

    /// Ask the manager `request` and wait for its answer, queueing whatever else arrives. Ends
    /// with `-32800` if this call is cancelled meanwhile, `-32603` if the manager hangs up.
    pub fn request(&mut self, request: &RunnerRequest) -> Result<Value, ErrorObject> {
        if self.is_cancelled() {
            return Err(cancelled());
        }
        let id = self.server.request(request).map_err(internal)?;
        self.flush()?;
        loop {
            let frame = match self.wire.recv() {
                Ok(Some(frame)) => frame,
                Ok(None) => {
                    return Err(ErrorObject::new(INTERNAL_ERROR, "the manager closed stdin"));
                }
                Err(e) => return Err(self.fail(e)),
            };
            if let Err(e) = self.server.handle_frame(&frame) {
                eprintln!("finecode runner: {e}");
            }
            let mut answer = None;
            while let Some(event) = self.server.poll_event() {
                match event {
                    ServerEvent::Response {
                        id: got, result, ..
                    } if got == id => answer = Some(result),
                    ServerEvent::Cancel { id: got } if got == self.call => {
                        // Stop waiting: the local completion arrives as the next event.
                        self.server.abandon(&id);
                    }
                    other => self.queue.push_back(other),
                }
            }
            self.flush()?;
            if let Some(answer) = answer {
                return answer;
            }
        }
    }

    /// `projects/getRawConfig`: the project's config as a JSON string.
    pub fn get_raw_config(&mut self, project_def_path: &str) -> Result<String, ErrorObject> {
        let params = sandpipe_proto::finecode::GetRawConfigParams {
            project_def_path: project_def_path.to_owned(),
        };
        let answer = self.request(&RunnerRequest::GetRawConfig(params))?;
        serde_json::from_value::<RawConfig>(answer)
            .map(|r| r.config)
            .map_err(|e| {
                ErrorObject::new(
                    INTERNAL_ERROR,
                    format!("bad projects/getRawConfig result: {e}"),
                )
            })
    }

    fn flush(&mut self) -> Result<(), ErrorObject> {
        while let Some(frame) = self.server.poll_transmit() {
            if let Err(e) = self.wire.send(&frame) {
                return Err(self.fail(e));
            }
        }
        Ok(())
    }

    fn fail(&mut self, e: GuestError) -> ErrorObject {
        let error = ErrorObject::new(INTERNAL_ERROR, e.to_string());
        self.failure.get_or_insert(e);
        error
    }
}

fn cancelled() -> ErrorObject {
    ErrorObject::new(REQUEST_CANCELLED, "request cancelled")
}

fn internal(e: ProtocolError) -> ErrorObject {
    ErrorObject::new(INTERNAL_ERROR, e.to_string())
}

/// Serve the manager until `exit` or EOF.
pub fn serve<R: crate::Input, W: Write, H: Runner>(
    io: &mut Framed<R, W>,
    runner: &mut H,
) -> Result<(), GuestError> {
    let mut server = Server::new();
    let mut queue = VecDeque::new();
    let mut failure = None;
    loop {
        let Some(event) = queue.pop_front() else {
            let Some(frame) = io.recv()? else {
                return Ok(());
            };
            if let Err(e) = server.handle_frame(&frame) {
                eprintln!("finecode runner: {e}");
            }
            queue.extend(std::iter::from_fn(|| server.poll_event()));
            flush(io, &mut server)?;
            continue;
        };
        let answered = match event {
            ServerEvent::Initialize { id, params } => {
                let result = runner.initialize(&params);
                server.respond_initialize(id, &result)
            }
            ServerEvent::Call { id, call, .. } => {
                let result = if server.is_cancelled(&id) {
                    None
                } else {
                    let mut ctx = Context {
                        wire: io,
                        server: &mut server,
                        queue: &mut queue,
                        failure: &mut failure,
                        call: id.clone(),
                    };
                    Some(dispatch(runner, &mut ctx, call))
                };
                if let Some(e) = failure.take() {
                    return Err(e);
                }
                match result {
                    Some(result) if !server.is_cancelled(&id) => server.respond(id, result),
                    _ => server.respond_cancelled(id),
                }
            }
            ServerEvent::Notification { method, params } => {
                runner.notification(&method, params);
                Ok(())
            }
            ServerEvent::Shutdown { id } => {
                runner.shutdown();
                server.respond_shutdown(id)
            }
            ServerEvent::Exit => {
                flush(io, &mut server)?;
                return Ok(());
            }
            // Cancels are read through `is_cancelled`; late answers to abandoned requests and
            // `initialized` need nothing.
            _ => Ok(()),
        };
        if let Err(e) = answered {
            // Ids come from the server's own events, so this only reports a bug in this loop.
            eprintln!("finecode runner: {e}");
        }
        flush(io, &mut server)?;
    }
}

fn dispatch<H: Runner>(
    runner: &mut H,
    ctx: &mut Context<'_>,
    call: Call,
) -> Result<Reply, FineCodeError> {
    Ok(match call {
        Call::UpdateConfig(p) => runner.update_config(ctx, p).map(|()| Reply::UpdateConfig)?,
        Call::GetInfo => Reply::GetInfo(runner.get_info(ctx)?),
        Call::ResolveActionMeta => Reply::ResolveActionMeta(runner.resolve_action_meta(ctx)?),
        Call::RunAction(p) => Reply::RunAction(runner.run_action(ctx, p)?),
        Call::RunHandlers(p) => Reply::RunHandlers(runner.run_handlers(ctx, p)?),
        Call::MergeResults(p) => Reply::MergeResults(runner.merge_results(ctx, p)?),
        Call::GetPayloadSchemas => Reply::GetPayloadSchemas(runner.get_payload_schemas(ctx)?),
        Call::ReloadAction { action_name } => runner
            .reload_action(ctx, action_name)
            .map(|()| Reply::ReloadAction)?,
        Call::ResolveSource { source } => Reply::ResolveSource(runner.resolve_source(ctx, source)?),
        Call::ResolvePackagePath { package_name } => {
            Reply::ResolvePackagePath(runner.resolve_package_path(ctx, package_name)?)
        }
        // A call added to the protocol later.
        other => return Err(not_supported(other.method())),
    })
}

fn flush<R: crate::Input, W: Write>(
    io: &mut Framed<R, W>,
    server: &mut Server,
) -> Result<(), GuestError> {
    while let Some(frame) = server.poll_transmit() {
        io.send(&frame)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use sandpipe_proto::frame::{FrameLimits, Framing};

    use super::*;

    struct Minimal;
    impl Runner for Minimal {
        fn run_action(
            &mut self,
            ctx: &mut Context<'_>,
            p: RunActionParams,
        ) -> Result<RunActionResult, FineCodeError> {
            if p.action_name == "ask" {
                let config = ctx.get_raw_config("/p").map_err(FineCodeError::Rpc)?;
                return Ok(RunActionResult::success(&json!({"json": config})));
            }
            ctx.progress(&json!(1));
            Ok(RunActionResult::streamed())
        }
    }

    fn frame(body: &str) -> String {
        format!("Content-Length: {}\r\n\r\n{body}", body.len())
    }

    /// Run `Minimal` over `input` bodies; return the bodies it wrote.
    fn run(input: &[&str]) -> Vec<String> {
        let bytes: String = input.iter().map(|b| frame(b)).collect();
        let mut io = Framed::from_parts(
            bytes.as_bytes(),
            Vec::new(),
            Framing::ContentLength,
            FrameLimits::default(),
        );
        serve(&mut io, &mut Minimal).expect("serves");
        let out = String::from_utf8(io.writer().clone()).expect("utf-8");
        out.split("Content-Length: ")
            .filter(|s| !s.is_empty())
            .map(|s| s.split_once("\r\n\r\n").expect("header").1.to_owned())
            .collect()
    }

    const INIT: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}"#;

    #[test]
    fn defaults_answer_and_exit_stops_the_loop() {
        let out = run(&[
            INIT,
            r#"{"jsonrpc":"2.0","method":"initialized","params":{}}"#,
            r#"{"jsonrpc":"2.0","id":2,"method":"actions/mergeResults","params":{"actionName":"a","results":[]}}"#,
            r#"{"jsonrpc":"2.0","id":3,"method":"workspace/executeCommand","params":{"command":"actions/getPayloadSchemas"}}"#,
            r#"{"jsonrpc":"2.0","id":4,"method":"actions/run","params":{"actionName":"a","params":{},"options":{"partialResultToken":"t"}}}"#,
            r#"{"jsonrpc":"2.0","id":5,"method":"shutdown"}"#,
            r#"{"jsonrpc":"2.0","method":"exit"}"#,
            r#"{"jsonrpc":"2.0","id":6,"method":"shutdown"}"#,
        ]);
        // Nothing after `exit` is read.
        assert_eq!(out.len(), 6, "{out:#?}");
        assert!(out[0].contains(r#""serverInfo":{"name":"sandpipe-finecode-runner""#));
        assert_eq!(
            out[1],
            r#"{"jsonrpc":"2.0","id":2,"error":{"code":-32601,"message":"actions/mergeResults is not supported by this runner"}}"#
        );
        assert_eq!(out[2], r#"{"jsonrpc":"2.0","id":3,"result":{}}"#);
        assert_eq!(
            out[3],
            r#"{"jsonrpc":"2.0","method":"$/progress","params":{"token":"t","value":"1"}}"#
        );
        assert!(out[4].contains(r#""status":"streamed""#));
        assert_eq!(out[5], r#"{"jsonrpc":"2.0","id":5,"result":null}"#);
    }

    #[test]
    fn a_call_cancelled_while_queued_is_answered_cancelled() {
        // The runner asks the manager; meanwhile call 3 arrives and is cancelled, then the
        // answer comes: call 2 completes, call 3 is answered -32800 without running.
        let out = run(&[
            INIT,
            r#"{"jsonrpc":"2.0","id":2,"method":"actions/run","params":{"actionName":"ask","params":{}}}"#,
            r#"{"jsonrpc":"2.0","id":3,"method":"actions/run","params":{"actionName":"b","params":{}}}"#,
            r#"{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":3}}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{"config":"{}"}}"#,
        ]);
        assert_eq!(
            out[1..],
            [
                r#"{"jsonrpc":"2.0","id":1,"method":"projects/getRawConfig","params":{"projectDefPath":"/p"}}"#,
                r#"{"jsonrpc":"2.0","id":2,"result":{"status":"success","result_by_format":"{\"json\":\"{}\"}","return_code":0}}"#,
                r#"{"jsonrpc":"2.0","id":3,"error":{"code":-32800,"message":"request cancelled"}}"#,
            ]
        );
    }
}
