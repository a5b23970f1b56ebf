//! The FineCode WM ↔ ER protocol: the workspace manager (host, [`Client`]) drives an
//! extension runner (plugin, [`Server`]) over JSON-RPC 2.0 with LSP `Content-Length` framing.
//!
//! Both machines are built on [`Peer`](crate::jsonrpc::Peer); they add FineCode's rules on top:
//! - **Lifecycle** (LSP): `initialize` → result, `initialized`, calls…, `shutdown` → `null`,
//!   `exit`. A client call in the wrong state is
//!   [`ProtocolError::Unexpected`](crate::jsonrpc::ProtocolError::Unexpected); a server answers
//!   a call before `initialize` with LSP's `-32002 server not initialized` and a call after
//!   `shutdown` with `-32600`, and reports `ProtocolError::Unexpected` too. `exit` may take
//!   the real runner seconds to end its process: the host should wait, then kill.
//! - **Two call forms.** The seed's direct methods (`actions/run {actionName, params,
//!   options}`) and the released runner's (0.3) `workspace/executeCommand {"command": name,
//!   "arguments": [positional…]}`. The client picks one with [`CallForm`]; the server accepts
//!   both and answers in the form it was asked. Positional order (taken from the released WM's
//!   calls, extended in the seed's member order for the calls it does not make):
//!
//!   | command | arguments |
//!   |---|---|
//!   | `finecodeRunner/updateConfig` | `[workingDir, projectName, projectDefPath, config]` |
//!   | `actions/run` | `[actionName, params, options]` |
//!   | `actions/runHandlers` | `[actionName, handlerNames, previousResult, options]` |
//!   | `actions/mergeResults` | `[actionName, results]` |
//!   | `actions/reload` | `[actionName]` |
//!   | `actions/resolveSource` | `[source]` |
//!   | `packages/resolvePath` | `[packageName]` |
//!   | `finecodeRunner/getInfo`, `finecodeRunner/resolveActionMeta`, `actions/getPayloadSchemas` | `[]` |
//!
//!   Missing trailing arguments read as `null`. The released runner answers `actions/run`
//!   with `resultByFormat`/`returnCode`, the seed with `result_by_format`/`return_code`: the
//!   client accepts both, the server writes the spelling of the form it was asked in.
//! - **Streaming.** A call whose `options.partialResultToken` is set may deliver its results
//!   as `$/progress {token, value}` notifications ([`ClientEvent::Progress`], matched to the
//!   call by token) and then answer `status: "streamed"` with an empty `result_by_format`. An
//!   empty `result_by_format` with any other status, or `streamed` without a token, is
//!   [`FineCodeError::BadResult`].
//! - **Command-level failures** arrive as a *successful* result `{"error": "..."}`; the client
//!   surfaces them as [`FineCodeError::Command`], never as a result.
//! - **Cancellation.** [`Client::cancel`] completes the call locally with `-32800` (a late
//!   answer is dropped) and sends `$/cancelRequest {id}`. The server turns that into
//!   [`ServerEvent::Cancel`] for a call still being handled and remembers it
//!   ([`Server::is_cancelled`]); the handler then answers [`Server::respond_cancelled`].
//! - **Runner → manager requests** (`projects/getRawConfig`, `workspace/applyEdit`,
//!   `finecode/runActionInProject`, `finecode/runActionInWorkspace`) reach the host as
//!   [`ClientEvent::Request`], answered with [`Client::respond`].
//! - [`Client::fail_pending`] completes every call in flight with [`stopped_error`]: `-32603`,
//!   message = the reason, `data: {"reason", "exit", "stderr"}`.
//!
//! [`fuzz`] is the fuzz body for both machines.
//!
//! ```text
//!   WM (Client)                                          ER (Server)
//!   initialize(params)   ── initialize ──────────────►   Initialize → respond_initialize
//!   Initialize ◄──────────── {capabilities, serverInfo} ─
//!   initialized()        ── initialized ─────────────►   Initialized
//!   call(UpdateConfig)   ── finecodeRunner/updateConfig ► Call → respond(Reply::UpdateConfig)
//!   call(RunAction)      ── actions/run {token: 7} ──►   Call
//!   Request ◄─────────────── projects/getRawConfig ─────   request(GetRawConfig)
//!   respond(id, ..)      ── {config: "..."} ─────────►   Response
//!   Progress ◄────────────── $/progress {token: 7} ─────   progress(&id, value)
//!   Reply ◄──────────────── {status: "streamed"} ───────   respond(Reply::RunAction(..))
//!   cancel(id)           ── $/cancelRequest {id} ────►   Cancel → respond_cancelled (-32800)
//!   shutdown()           ── shutdown ────────────────►   Shutdown → respond_shutdown
//!   exit()               ── exit ────────────────────►   Exit (process ends, maybe slowly)
//! ```
//!
//! What it does not do: IO, framing (bodies without the `Content-Length` header; the caller's
//! framer adds it), clocks, the loopback-TCP transport newer runners default to, or
//! `textDocument/*` semantics (the client sends them with [`Client::notify`], the server passes
//! them on as [`ServerEvent::Notification`]).
//!
//! ```
//! use sandpipe_proto::finecode::*;
//! use serde_json::json;
//!
//! let mut wm = Client::new();
//! let mut er = Server::new();
//! fn pump(from: &mut Client, to: &mut Server) {
//!     while let Some(f) = from.poll_transmit() { to.handle_frame(&f).unwrap(); }
//! }
//! wm.initialize(&InitializeParams::default()).unwrap();
//! pump(&mut wm, &mut er);
//! let Some(ServerEvent::Initialize { id, .. }) = er.poll_event() else { panic!() };
//! er.respond_initialize(id, &InitializeResult::new("er", "0.1")).unwrap();
//! wm.handle_frame(&er.poll_transmit().unwrap()).unwrap();
//! assert!(matches!(wm.poll_event(), Some(ClientEvent::Initialize { result: Ok(_), .. })));
//! wm.initialized().unwrap();
//! let run = wm.run_action(RunActionParams::new("lint", json!({}))).unwrap();
//! pump(&mut wm, &mut er);
//! assert_eq!(er.poll_event(), Some(ServerEvent::Initialized));
//! let Some(ServerEvent::Call { id, .. }) = er.poll_event() else { panic!() };
//! er.respond(id, Err(FineCodeError::command("no such action"))).unwrap();
//! let answer = er.poll_transmit().unwrap();
//! assert_eq!(answer, br#"{"jsonrpc":"2.0","id":2,"result":{"error":"no such action"}}"#);
//! wm.handle_frame(&answer).unwrap();
//! let Some(ClientEvent::Reply { id, result: Err(e), .. }) = wm.poll_event() else { panic!() };
//! assert_eq!((id, e), (run, FineCodeError::Command { message: "no such action".into() }));
//! ```

mod calls;
mod client;
mod fuzz;
mod server;
mod types;

pub use calls::*;
pub use client::*;
pub use fuzz::fuzz;
pub use serde_json;
pub use serde_json::Value;
pub use server::*;
pub use types::*;

use crate::jsonrpc::{Dialect, ErrorObject};
use crate::stopped::Stopped;
/// LSP's `ServerNotInitialized`: a call before `initialize` was answered.
pub const SERVER_NOT_INITIALIZED: i64 = -32002;

/// The LSP method that carries calls in the released runner's form.
pub const EXECUTE_COMMAND: &str = "workspace/executeCommand";

/// The answer to a call the runner will never answer: LSP's `-32603`, the reason as message,
/// data `{"reason", "exit", "stderr"}` ([`jsonrpc::stopped_error`](crate::jsonrpc::stopped_error)).
pub fn stopped_error(stopped: &Stopped) -> ErrorObject {
    crate::jsonrpc::stopped_error(Dialect::JsonRpc2, stopped)
}

/// FineCode under the supervisor (`crate::supervise`): `initialize` and `initialized` are the
/// handshake replayed to a fresh instance; every other request is budgeted.
#[derive(Debug, Clone, Copy, Default)]
pub struct Supervised;

impl crate::supervise::SupervisedProtocol for Supervised {
    fn classify_engine(&self, frame: &[u8]) -> crate::supervise::FromEngine {
        crate::jsonrpc::classify_engine(frame, &["initialize", "initialized"])
    }
    fn classify_plugin(&self, frame: &[u8]) -> crate::supervise::FromPlugin {
        crate::jsonrpc::classify_plugin(frame, &[])
    }
    fn stopped_answer(&self, key: &str, _method: Option<&str>, stopped: &Stopped) -> Vec<u8> {
        crate::jsonrpc::error_answer(key, Dialect::JsonRpc2, stopped_error(stopped))
    }
}

#[cfg(test)]
mod tests;
