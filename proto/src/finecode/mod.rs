//! The FineCode WM ↔ ER protocol: the workspace manager (host, [`Client`]) drives an
//! extension runner (plugin, [`Server`]) over JSON-RPC 2.0 with LSP `Content-Length` framing.
//!
//! Both machines are built on [`Peer`]; they add FineCode's rules on top:
//! - **Lifecycle** (LSP): `initialize` → result, `initialized`, calls…, `shutdown` → `null`,
//!   `exit`. A client call in the wrong state is [`ProtocolError::Unexpected`]; a server answers
//!   a call before `initialize` with LSP's `-32002 server not initialized` and a call after
//!   `shutdown` with `-32600`, and reports [`ProtocolError::Unexpected`] too. `exit` may take
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

mod types;

use std::collections::{BTreeMap, VecDeque};
use std::fmt;

use serde::Serialize;
use serde::de::DeserializeOwned;
pub use serde_json;
pub use serde_json::Value;
use serde_json::json;
use thiserror::Error;
pub use types::*;

use crate::jsonrpc::{
    Dialect, ErrorObject, Event, INTERNAL_ERROR, INVALID_PARAMS, INVALID_REQUEST, Id,
    METHOD_NOT_FOUND, Peer, ProtocolError, REQUEST_CANCELLED,
};
use crate::stopped::Stopped;

/// LSP's `ServerNotInitialized`: a call before `initialize` was answered.
pub const SERVER_NOT_INITIALIZED: i64 = -32002;

/// The LSP method that carries calls in the released runner's form.
pub const EXECUTE_COMMAND: &str = "workspace/executeCommand";

/// How the client carries a FineCode call.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum CallForm {
    /// The seed's direct method: `{"method": "actions/run", "params": {...}}`.
    #[default]
    Direct,
    /// The released runner's (0.3) form: `workspace/executeCommand {command, arguments}`.
    ExecuteCommand,
}

/// The FineCode calls (WM → ER requests other than the LSP lifecycle).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Method {
    /// `finecodeRunner/updateConfig`.
    UpdateConfig,
    /// `finecodeRunner/getInfo`.
    GetInfo,
    /// `finecodeRunner/resolveActionMeta`.
    ResolveActionMeta,
    /// `actions/run`.
    RunAction,
    /// `actions/runHandlers`.
    RunHandlers,
    /// `actions/mergeResults`.
    MergeResults,
    /// `actions/getPayloadSchemas`.
    GetPayloadSchemas,
    /// `actions/reload`.
    ReloadAction,
    /// `actions/resolveSource`.
    ResolveSource,
    /// `packages/resolvePath`.
    ResolvePackagePath,
}

impl Method {
    /// Every call, in the order the seed lists them.
    pub const ALL: [Method; 10] = [
        Method::UpdateConfig,
        Method::GetInfo,
        Method::ResolveActionMeta,
        Method::RunAction,
        Method::RunHandlers,
        Method::MergeResults,
        Method::GetPayloadSchemas,
        Method::ReloadAction,
        Method::ResolveSource,
        Method::ResolvePackagePath,
    ];

    /// The wire name (also the `executeCommand` command).
    pub fn as_str(self) -> &'static str {
        match self {
            Method::UpdateConfig => "finecodeRunner/updateConfig",
            Method::GetInfo => "finecodeRunner/getInfo",
            Method::ResolveActionMeta => "finecodeRunner/resolveActionMeta",
            Method::RunAction => "actions/run",
            Method::RunHandlers => "actions/runHandlers",
            Method::MergeResults => "actions/mergeResults",
            Method::GetPayloadSchemas => "actions/getPayloadSchemas",
            Method::ReloadAction => "actions/reload",
            Method::ResolveSource => "actions/resolveSource",
            Method::ResolvePackagePath => "packages/resolvePath",
        }
    }

    /// The call with this wire name.
    pub fn from_name(name: &str) -> Option<Method> {
        Method::ALL.into_iter().find(|m| m.as_str() == name)
    }
}

impl fmt::Display for Method {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A FineCode call with its typed params.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Call {
    /// `finecodeRunner/updateConfig`.
    UpdateConfig(UpdateConfigParams),
    /// `finecodeRunner/getInfo`.
    GetInfo,
    /// `finecodeRunner/resolveActionMeta`.
    ResolveActionMeta,
    /// `actions/run`.
    RunAction(RunActionParams),
    /// `actions/runHandlers`.
    RunHandlers(RunHandlersParams),
    /// `actions/mergeResults`.
    MergeResults(MergeResultsParams),
    /// `actions/getPayloadSchemas`.
    GetPayloadSchemas,
    /// `actions/reload {actionName}`.
    ReloadAction {
        /// The action to reload.
        action_name: String,
    },
    /// `actions/resolveSource {source}`.
    ResolveSource {
        /// An import-path alias.
        source: String,
    },
    /// `packages/resolvePath {packageName}`.
    ResolvePackagePath {
        /// The package.
        package_name: String,
    },
}

impl Call {
    /// The call's method.
    pub fn method(&self) -> Method {
        match self {
            Call::UpdateConfig(_) => Method::UpdateConfig,
            Call::GetInfo => Method::GetInfo,
            Call::ResolveActionMeta => Method::ResolveActionMeta,
            Call::RunAction(_) => Method::RunAction,
            Call::RunHandlers(_) => Method::RunHandlers,
            Call::MergeResults(_) => Method::MergeResults,
            Call::GetPayloadSchemas => Method::GetPayloadSchemas,
            Call::ReloadAction { .. } => Method::ReloadAction,
            Call::ResolveSource { .. } => Method::ResolveSource,
            Call::ResolvePackagePath { .. } => Method::ResolvePackagePath,
        }
    }

    /// The `partialResultToken` of a run, if any.
    pub fn token(&self) -> Option<&ProgressToken> {
        let options = match self {
            Call::RunAction(p) => p.options.as_ref(),
            Call::RunHandlers(p) => p.options.as_ref(),
            _ => None,
        };
        options?.partial_result_token.as_ref()
    }

    /// The params object of the direct form.
    pub fn to_params(&self) -> Value {
        match self {
            Call::UpdateConfig(p) => to_value(p),
            Call::GetInfo | Call::ResolveActionMeta | Call::GetPayloadSchemas => json!({}),
            Call::RunAction(p) => to_value(p),
            Call::RunHandlers(p) => to_value(p),
            Call::MergeResults(p) => to_value(p),
            Call::ReloadAction { action_name } => json!({"actionName": action_name}),
            Call::ResolveSource { source } => json!({"source": source}),
            Call::ResolvePackagePath { package_name } => json!({"packageName": package_name}),
        }
    }

    /// The positional `arguments` of the `workspace/executeCommand` form (see the module docs
    /// for the order).
    pub fn to_arguments(&self) -> Vec<Value> {
        match self {
            Call::UpdateConfig(p) => vec![
                json!(p.working_dir),
                json!(p.project_name),
                json!(p.project_def_path),
                p.config.clone(),
            ],
            Call::GetInfo | Call::ResolveActionMeta | Call::GetPayloadSchemas => vec![],
            Call::RunAction(p) => {
                vec![json!(p.action_name), p.params.clone(), to_value(&p.options)]
            }
            Call::RunHandlers(p) => vec![
                json!(p.action_name),
                json!(p.handler_names),
                to_value(&p.previous_result),
                to_value(&p.options),
            ],
            Call::MergeResults(p) => vec![json!(p.action_name), json!(p.results)],
            Call::ReloadAction { action_name } => vec![json!(action_name)],
            Call::ResolveSource { source } => vec![json!(source)],
            Call::ResolvePackagePath { package_name } => vec![json!(package_name)],
        }
    }

    /// Decode the direct form's params (absent params read as `{}`).
    pub fn from_params(method: Method, params: Option<Value>) -> Result<Call, String> {
        let p = params.unwrap_or_else(|| json!({}));
        Ok(match method {
            Method::UpdateConfig => Call::UpdateConfig(from_value(p)?),
            Method::GetInfo => Call::GetInfo,
            Method::ResolveActionMeta => Call::ResolveActionMeta,
            Method::RunAction => Call::RunAction(from_value(p)?),
            Method::RunHandlers => Call::RunHandlers(from_value(p)?),
            Method::MergeResults => Call::MergeResults(from_value(p)?),
            Method::GetPayloadSchemas => Call::GetPayloadSchemas,
            Method::ReloadAction => Call::ReloadAction {
                action_name: member(&p, "actionName")?,
            },
            Method::ResolveSource => Call::ResolveSource {
                source: member(&p, "source")?,
            },
            Method::ResolvePackagePath => Call::ResolvePackagePath {
                package_name: member(&p, "packageName")?,
            },
        })
    }

    /// Decode the `workspace/executeCommand` form's positional arguments.
    pub fn from_arguments(method: Method, args: &[Value]) -> Result<Call, String> {
        let arg = |i: usize| args.get(i).cloned().unwrap_or(Value::Null);
        let string = |i: usize, name: &str| -> Result<String, String> {
            match arg(i) {
                Value::String(s) => Ok(s),
                other => Err(format!("argument {i} ({name}) is not a string: {other}")),
            }
        };
        Ok(match method {
            Method::UpdateConfig => Call::UpdateConfig(UpdateConfigParams {
                working_dir: string(0, "workingDir")?,
                project_name: string(1, "projectName")?,
                project_def_path: string(2, "projectDefPath")?,
                config: arg(3),
            }),
            Method::GetInfo => Call::GetInfo,
            Method::ResolveActionMeta => Call::ResolveActionMeta,
            Method::RunAction => Call::RunAction(RunActionParams {
                action_name: string(0, "actionName")?,
                params: arg(1),
                options: from_value(arg(2))?,
            }),
            Method::RunHandlers => Call::RunHandlers(RunHandlersParams {
                action_name: string(0, "actionName")?,
                handler_names: from_value(arg(1))?,
                previous_result: from_value(arg(2))?,
                options: from_value(arg(3))?,
            }),
            Method::MergeResults => Call::MergeResults(MergeResultsParams {
                action_name: string(0, "actionName")?,
                results: from_value(arg(1))?,
            }),
            Method::GetPayloadSchemas => Call::GetPayloadSchemas,
            Method::ReloadAction => Call::ReloadAction {
                action_name: string(0, "actionName")?,
            },
            Method::ResolveSource => Call::ResolveSource {
                source: string(0, "source")?,
            },
            Method::ResolvePackagePath => Call::ResolvePackagePath {
                package_name: string(0, "packageName")?,
            },
        })
    }
}

/// A FineCode call's successful, typed result.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Reply {
    /// `finecodeRunner/updateConfig`: `{}`.
    UpdateConfig,
    /// `finecodeRunner/getInfo`.
    GetInfo(RunnerInfo),
    /// `finecodeRunner/resolveActionMeta`.
    ResolveActionMeta(ActionMetas),
    /// `actions/run`.
    RunAction(RunActionResult),
    /// `actions/runHandlers`.
    RunHandlers(RunHandlersResult),
    /// `actions/mergeResults`: the `merged` member.
    MergeResults(Value),
    /// `actions/getPayloadSchemas`.
    GetPayloadSchemas(PayloadSchemas),
    /// `actions/reload`: `{}`.
    ReloadAction,
    /// `actions/resolveSource`: the `canonicalSource` member.
    ResolveSource(String),
    /// `packages/resolvePath`: the `packagePath` member.
    ResolvePackagePath(String),
}

impl Reply {
    /// The method this reply answers.
    pub fn method(&self) -> Method {
        match self {
            Reply::UpdateConfig => Method::UpdateConfig,
            Reply::GetInfo(_) => Method::GetInfo,
            Reply::ResolveActionMeta(_) => Method::ResolveActionMeta,
            Reply::RunAction(_) => Method::RunAction,
            Reply::RunHandlers(_) => Method::RunHandlers,
            Reply::MergeResults(_) => Method::MergeResults,
            Reply::GetPayloadSchemas(_) => Method::GetPayloadSchemas,
            Reply::ReloadAction => Method::ReloadAction,
            Reply::ResolveSource(_) => Method::ResolveSource,
            Reply::ResolvePackagePath(_) => Method::ResolvePackagePath,
        }
    }

    /// The result as sent in `form`.
    pub fn to_value(&self, form: CallForm) -> Value {
        match self {
            Reply::UpdateConfig | Reply::ReloadAction => json!({}),
            Reply::GetInfo(r) => to_value(r),
            Reply::ResolveActionMeta(r) => to_value(r),
            Reply::RunAction(r) => match form {
                CallForm::Direct => to_value(r),
                CallForm::ExecuteCommand => json!({
                    "status": r.status,
                    "resultByFormat": r.result_by_format,
                    "returnCode": r.return_code,
                }),
            },
            Reply::RunHandlers(r) => to_value(r),
            Reply::MergeResults(merged) => json!({"merged": merged}),
            Reply::GetPayloadSchemas(r) => to_value(r),
            Reply::ResolveSource(s) => json!({"canonicalSource": s}),
            Reply::ResolvePackagePath(p) => json!({"packagePath": p}),
        }
    }

    /// Decode `method`'s result; `streaming` says whether the call passed a
    /// `partialResultToken`. `{"error": "..."}` is [`FineCodeError::Command`].
    pub fn from_value(
        method: Method,
        result: Value,
        streaming: bool,
    ) -> Result<Reply, FineCodeError> {
        if let Some(Value::String(message)) = result.get("error") {
            return Err(FineCodeError::Command {
                message: message.clone(),
            });
        }
        let bad = |reason: String| FineCodeError::BadResult {
            method: method.as_str(),
            reason,
        };
        let reply = match method {
            Method::UpdateConfig => Reply::UpdateConfig,
            Method::GetInfo => Reply::GetInfo(from_value(result).map_err(bad)?),
            Method::ResolveActionMeta => Reply::ResolveActionMeta(from_value(result).map_err(bad)?),
            Method::RunAction => {
                let r: RunActionResult = from_value(result).map_err(bad)?;
                let by_format = r
                    .decode_result_by_format()
                    .map_err(|e| bad(format!("result_by_format: {e}")))?;
                check_streamed(&r.status, by_format.is_empty(), streaming).map_err(bad)?;
                Reply::RunAction(r)
            }
            Method::RunHandlers => {
                let r: RunHandlersResult = from_value(result).map_err(bad)?;
                check_streamed(&r.status, r.result_by_format.is_empty(), streaming)
                    .or_else(|e| {
                        // Intermediate segments legitimately return `{}` (no formats asked).
                        if r.status == RunStatus::Streamed {
                            Err(e)
                        } else {
                            Ok(())
                        }
                    })
                    .map_err(bad)?;
                Reply::RunHandlers(r)
            }
            Method::MergeResults => Reply::MergeResults(member(&result, "merged").map_err(bad)?),
            Method::GetPayloadSchemas => Reply::GetPayloadSchemas(from_value(result).map_err(bad)?),
            Method::ReloadAction => Reply::ReloadAction,
            Method::ResolveSource => {
                Reply::ResolveSource(member(&result, "canonicalSource").map_err(bad)?)
            }
            Method::ResolvePackagePath => {
                Reply::ResolvePackagePath(member(&result, "packagePath").map_err(bad)?)
            }
        };
        Ok(reply)
    }
}

/// `streamed` needs a token; an empty `result_by_format` needs `streamed`.
fn check_streamed(status: &RunStatus, empty: bool, streaming: bool) -> Result<(), String> {
    match (status, empty) {
        (RunStatus::Streamed, _) if !streaming => {
            Err("status \"streamed\" but the call passed no partialResultToken".into())
        }
        (RunStatus::Streamed, _) => Ok(()),
        (_, true) => Err("empty result_by_format with a status other than \"streamed\"".into()),
        _ => Ok(()),
    }
}

/// Why a call did not produce a [`Reply`].
#[derive(Debug, Clone, PartialEq, Error)]
#[non_exhaustive]
pub enum FineCodeError {
    /// A JSON-RPC error: the runner's, `-32800` after [`Client::cancel`], or `-32603` from
    /// [`Client::fail_pending`].
    #[error("{0}")]
    Rpc(ErrorObject),
    /// A command-level failure: the call *succeeded* with `{"error": message}`.
    #[error("command failed: {message}")]
    Command {
        /// The runner's message.
        message: String,
    },
    /// A result that does not have the call's shape.
    #[error("bad {method} result: {reason}")]
    BadResult {
        /// The call.
        method: &'static str,
        /// What is wrong.
        reason: String,
    },
}

impl FineCodeError {
    /// A command-level failure.
    pub fn command(message: impl Into<String>) -> Self {
        FineCodeError::Command {
            message: message.into(),
        }
    }

    /// The JSON-RPC error, if this is one.
    pub fn rpc(&self) -> Option<&ErrorObject> {
        match self {
            FineCodeError::Rpc(e) => Some(e),
            _ => None,
        }
    }
}

impl From<ErrorObject> for FineCodeError {
    fn from(e: ErrorObject) -> Self {
        FineCodeError::Rpc(e)
    }
}

/// A request from the runner to the manager.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum RunnerRequest {
    /// `projects/getRawConfig`: answer `{"config": "<JSON string>"}`.
    GetRawConfig(GetRawConfigParams),
    /// `workspace/applyEdit` (LSP `ApplyWorkspaceEditParams`, kept as sent).
    ApplyEdit(Value),
    /// `finecode/runActionInProject`: answer `{"result", "returnCode"}`.
    RunActionInProject(RunActionInProjectParams),
    /// `finecode/runActionInWorkspace`: answer `{"resultsByProject"}`.
    RunActionInWorkspace(RunActionInWorkspaceParams),
    /// Anything else (`window/workDoneProgress/create`, …); the host decides.
    Other {
        /// The method.
        method: String,
        /// Its params.
        params: Option<Value>,
    },
}

impl RunnerRequest {
    /// The wire method.
    pub fn method(&self) -> &str {
        match self {
            RunnerRequest::GetRawConfig(_) => "projects/getRawConfig",
            RunnerRequest::ApplyEdit(_) => "workspace/applyEdit",
            RunnerRequest::RunActionInProject(_) => "finecode/runActionInProject",
            RunnerRequest::RunActionInWorkspace(_) => "finecode/runActionInWorkspace",
            RunnerRequest::Other { method, .. } => method,
        }
    }

    /// The wire params.
    pub fn params(&self) -> Option<Value> {
        match self {
            RunnerRequest::GetRawConfig(p) => Some(to_value(p)),
            RunnerRequest::ApplyEdit(p) => Some(p.clone()),
            RunnerRequest::RunActionInProject(p) => Some(to_value(p)),
            RunnerRequest::RunActionInWorkspace(p) => Some(to_value(p)),
            RunnerRequest::Other { params, .. } => params.clone(),
        }
    }

    /// Decode a request by method.
    pub fn decode(method: &str, params: Option<Value>) -> Result<RunnerRequest, String> {
        let p = || params.clone().unwrap_or(Value::Null);
        Ok(match method {
            "projects/getRawConfig" => RunnerRequest::GetRawConfig(from_value(p())?),
            "workspace/applyEdit" => RunnerRequest::ApplyEdit(p()),
            "finecode/runActionInProject" => RunnerRequest::RunActionInProject(from_value(p())?),
            "finecode/runActionInWorkspace" => {
                RunnerRequest::RunActionInWorkspace(from_value(p())?)
            }
            _ => RunnerRequest::Other {
                method: method.to_owned(),
                params,
            },
        })
    }
}

fn to_value<T: Serialize>(v: &T) -> Value {
    // The types here are maps, strings and numbers: serializing them cannot fail.
    serde_json::to_value(v).unwrap_or(Value::Null)
}

fn from_value<T: DeserializeOwned>(v: Value) -> Result<T, String> {
    serde_json::from_value(v).map_err(|e| e.to_string())
}

fn member<T: DeserializeOwned>(v: &Value, name: &str) -> Result<T, String> {
    let m = v
        .get(name)
        .cloned()
        .ok_or_else(|| format!("missing {name}"))?;
    from_value(m).map_err(|e| format!("{name}: {e}"))
}

fn id_value(id: &Id) -> Value {
    match id {
        Id::Num(n) => json!(n),
        Id::Str(s) => json!(s),
        Id::Null => Value::Null,
    }
}

fn id_from_value(v: &Value) -> Option<Id> {
    match v {
        Value::Number(n) => n.as_i64().map(Id::Num),
        Value::String(s) => Some(Id::Str(s.clone())),
        _ => None,
    }
}

/// Where the manager's side of the lifecycle is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ClientState {
    /// Nothing sent yet (or `initialize` failed).
    Start,
    /// `initialize` sent, not answered.
    Initializing,
    /// `initialize` answered; send `initialized` next.
    Initialized,
    /// Calls may be made.
    Ready,
    /// `shutdown` sent, not answered.
    ShuttingDown,
    /// `shutdown` answered; send `exit`.
    ShutDown,
    /// `exit` sent, or the runner is gone ([`Client::fail_pending`]).
    Closed,
}

impl ClientState {
    fn name(self) -> &'static str {
        match self {
            ClientState::Start => "not initialized",
            ClientState::Initializing => "waiting for the initialize result",
            ClientState::Initialized => "initialized but not yet notified",
            ClientState::Ready => "ready",
            ClientState::ShuttingDown => "shutting down",
            ClientState::ShutDown => "shut down",
            ClientState::Closed => "closed",
        }
    }
}

/// What the manager learns.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum ClientEvent {
    /// `initialize` was answered.
    Initialize {
        /// The request's id.
        id: Id,
        /// The runner's capabilities and info.
        result: Result<InitializeResult, ErrorObject>,
    },
    /// A FineCode call completed.
    Reply {
        /// The call's id.
        id: Id,
        /// The call.
        method: Method,
        /// Its typed result; command-level failures are [`FineCodeError::Command`].
        result: Result<Reply, FineCodeError>,
    },
    /// A partial result for a call in flight (`$/progress`).
    Progress {
        /// The call the token belongs to.
        id: Id,
        /// The token and the value as sent.
        params: ProgressParams,
    },
    /// The runner asks something; answer with [`Client::respond`].
    Request {
        /// Its id.
        id: Id,
        /// The request.
        request: RunnerRequest,
    },
    /// Any other notification (`window/logMessage`, …).
    Notification {
        /// The method.
        method: String,
        /// Its params.
        params: Option<Value>,
    },
    /// `shutdown` was answered.
    Shutdown {
        /// The request's id.
        id: Id,
        /// `Ok` for the expected `null`.
        result: Result<(), ErrorObject>,
    },
}

#[derive(Debug)]
struct ClientCall {
    method: Method,
    token: Option<ProgressToken>,
}

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
        crate::supervise::classify_jsonrpc_engine(frame, &["initialize", "initialized"])
    }
    fn classify_plugin(&self, frame: &[u8]) -> crate::supervise::FromPlugin {
        crate::supervise::classify_jsonrpc_plugin(frame, &[])
    }
    fn stopped_answer(&self, key: &str, _method: Option<&str>, stopped: &Stopped) -> Vec<u8> {
        crate::supervise::jsonrpc_error_answer(key, Dialect::JsonRpc2, stopped_error(stopped))
    }
}

/// The manager's (host's) side.
#[derive(Debug)]
pub struct Client {
    peer: Peer,
    form: CallForm,
    state: ClientState,
    calls: BTreeMap<Id, ClientCall>,
    tokens: BTreeMap<ProgressToken, Id>,
    initialize_id: Option<Id>,
    shutdown_id: Option<Id>,
    events: VecDeque<ClientEvent>,
}

impl Default for Client {
    fn default() -> Self {
        Self::new()
    }
}

impl Client {
    /// A client that makes calls in the direct form; request ids count from 1.
    pub fn new() -> Self {
        Self::with_call_form(CallForm::Direct)
    }

    /// A client that makes calls in `form`.
    pub fn with_call_form(form: CallForm) -> Self {
        Self {
            peer: Peer::with_first_id(Dialect::JsonRpc2, 1),
            form,
            state: ClientState::Start,
            calls: BTreeMap::new(),
            tokens: BTreeMap::new(),
            initialize_id: None,
            shutdown_id: None,
            events: VecDeque::new(),
        }
    }

    /// The call form.
    pub fn call_form(&self) -> CallForm {
        self.form
    }

    /// The lifecycle state.
    pub fn state(&self) -> ClientState {
        self.state
    }

    fn expect(&self, ok: &[ClientState], got: &str) -> Result<(), ProtocolError> {
        if ok.contains(&self.state) {
            return Ok(());
        }
        Err(ProtocolError::Unexpected {
            state: self.state.name(),
            got: got.to_owned(),
        })
    }

    /// Send `initialize`.
    pub fn initialize(&mut self, params: &InitializeParams) -> Result<Id, ProtocolError> {
        self.expect(&[ClientState::Start], "initialize")?;
        let id = self.peer.request("initialize", Some(to_value(params)));
        self.initialize_id = Some(id.clone());
        self.state = ClientState::Initializing;
        Ok(id)
    }

    /// Send the `initialized` notification once `initialize` was answered.
    pub fn initialized(&mut self) -> Result<(), ProtocolError> {
        self.expect(&[ClientState::Initialized], "initialized")?;
        self.peer.notify("initialized", Some(json!({})));
        self.state = ClientState::Ready;
        Ok(())
    }

    /// Make a FineCode call in the client's [`CallForm`]. A `partialResultToken` must not be
    /// in use by another call in flight.
    pub fn call(&mut self, call: Call) -> Result<Id, ProtocolError> {
        let method = call.method();
        self.expect(&[ClientState::Ready], method.as_str())?;
        let token = call.token().cloned();
        if let Some(t) = &token
            && self.tokens.contains_key(t)
        {
            return Err(ProtocolError::BadPayload {
                what: "partialResultToken",
                reason: format!("token {t} is already used by a call in flight"),
            });
        }
        let id = match self.form {
            CallForm::Direct => self.peer.request(method.as_str(), Some(call.to_params())),
            CallForm::ExecuteCommand => self.peer.request(
                EXECUTE_COMMAND,
                Some(json!({"command": method.as_str(), "arguments": call.to_arguments()})),
            ),
        };
        if let Some(t) = &token {
            self.tokens.insert(t.clone(), id.clone());
        }
        self.calls.insert(id.clone(), ClientCall { method, token });
        Ok(id)
    }

    /// `finecodeRunner/updateConfig`.
    pub fn update_config(&mut self, params: UpdateConfigParams) -> Result<Id, ProtocolError> {
        self.call(Call::UpdateConfig(params))
    }

    /// `finecodeRunner/resolveActionMeta`.
    pub fn resolve_action_meta(&mut self) -> Result<Id, ProtocolError> {
        self.call(Call::ResolveActionMeta)
    }

    /// `actions/run`.
    pub fn run_action(&mut self, params: RunActionParams) -> Result<Id, ProtocolError> {
        self.call(Call::RunAction(params))
    }

    /// `actions/runHandlers`.
    pub fn run_handlers(&mut self, params: RunHandlersParams) -> Result<Id, ProtocolError> {
        self.call(Call::RunHandlers(params))
    }

    /// `actions/mergeResults`.
    pub fn merge_results(&mut self, params: MergeResultsParams) -> Result<Id, ProtocolError> {
        self.call(Call::MergeResults(params))
    }

    /// `actions/getPayloadSchemas`.
    pub fn get_payload_schemas(&mut self) -> Result<Id, ProtocolError> {
        self.call(Call::GetPayloadSchemas)
    }

    /// Send a notification (`textDocument/didOpen`, …) while ready.
    pub fn notify(&mut self, method: &str, params: Value) -> Result<(), ProtocolError> {
        self.expect(&[ClientState::Ready], method)?;
        self.peer.notify(method, Some(params));
        Ok(())
    }

    /// Give up on call `id`: it completes at once with `-32800` (a late answer is dropped) and
    /// the runner is told with `$/cancelRequest`. False if `id` is not a call in flight.
    pub fn cancel(&mut self, id: &Id) -> bool {
        if !self.calls.contains_key(id) || !self.peer.cancel(id) {
            return false;
        }
        self.peer
            .notify("$/cancelRequest", Some(json!({"id": id_value(id)})));
        // A local completion is always a response to a known call.
        let _ = self.drain();
        true
    }

    /// Answer a [`ClientEvent::Request`] from the runner.
    pub fn respond(
        &mut self,
        id: Id,
        result: Result<Value, ErrorObject>,
    ) -> Result<(), ProtocolError> {
        self.peer.respond(id, result)
    }

    /// Send `shutdown`.
    pub fn shutdown(&mut self) -> Result<Id, ProtocolError> {
        self.expect(&[ClientState::Initialized, ClientState::Ready], "shutdown")?;
        let id = self.peer.request("shutdown", None);
        self.shutdown_id = Some(id.clone());
        self.state = ClientState::ShuttingDown;
        Ok(id)
    }

    /// Send `exit` after `shutdown`. The real runner may take seconds to end its process.
    pub fn exit(&mut self) -> Result<(), ProtocolError> {
        self.expect(&[ClientState::ShuttingDown, ClientState::ShutDown], "exit")?;
        self.peer.notify("exit", None);
        self.state = ClientState::Closed;
        Ok(())
    }

    /// Feed one frame (a body, without its headers).
    pub fn handle_frame(&mut self, frame: &[u8]) -> Result<(), ProtocolError> {
        self.peer.handle_frame(frame)?;
        self.drain()
    }

    /// The runner is gone: every call in flight completes with [`stopped_error`].
    pub fn fail_pending(&mut self, stopped: &Stopped) {
        self.peer.fail_pending(stopped_error(stopped));
        // Only responses to our own requests come out of fail_pending.
        let _ = self.drain();
        self.state = ClientState::Closed;
    }

    /// The next body to send.
    pub fn poll_transmit(&mut self) -> Option<Vec<u8>> {
        self.peer.poll_transmit()
    }

    /// The next event.
    pub fn poll_event(&mut self) -> Option<ClientEvent> {
        self.events.pop_front()
    }

    fn drain(&mut self) -> Result<(), ProtocolError> {
        let mut first_error = None;
        while let Some(ev) = self.peer.poll_event() {
            if let Err(e) = self.on_event(ev) {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    fn on_event(&mut self, ev: Event) -> Result<(), ProtocolError> {
        match ev {
            Event::Response { id, result, .. } => {
                if self.initialize_id.as_ref() == Some(&id) {
                    self.initialize_id = None;
                    let result = result.and_then(|v| {
                        from_value(v).map_err(|e| {
                            ErrorObject::new(INTERNAL_ERROR, format!("bad initialize result: {e}"))
                        })
                    });
                    if self.state == ClientState::Initializing {
                        self.state = if result.is_ok() {
                            ClientState::Initialized
                        } else {
                            ClientState::Start
                        };
                    }
                    self.events
                        .push_back(ClientEvent::Initialize { id, result });
                } else if self.shutdown_id.as_ref() == Some(&id) {
                    self.shutdown_id = None;
                    if self.state == ClientState::ShuttingDown {
                        self.state = ClientState::ShutDown;
                    }
                    self.events.push_back(ClientEvent::Shutdown {
                        id,
                        result: result.map(drop),
                    });
                } else if let Some(call) = self.calls.remove(&id) {
                    if let Some(t) = &call.token {
                        self.tokens.remove(t);
                    }
                    let result = result
                        .map_err(FineCodeError::Rpc)
                        .and_then(|v| Reply::from_value(call.method, v, call.token.is_some()));
                    self.events.push_back(ClientEvent::Reply {
                        id,
                        method: call.method,
                        result,
                    });
                }
            }
            Event::Request { id, method, params } => match RunnerRequest::decode(&method, params) {
                Ok(request) => self.events.push_back(ClientEvent::Request { id, request }),
                Err(reason) => {
                    let error =
                        ErrorObject::new(INVALID_PARAMS, format!("invalid params: {reason}"));
                    self.peer.respond(id, Err(error))?;
                }
            },
            Event::Notification { method, params } if method == "$/progress" => {
                let params: ProgressParams =
                    from_value(params.unwrap_or(Value::Null)).map_err(|reason| {
                        ProtocolError::BadPayload {
                            what: "$/progress",
                            reason,
                        }
                    })?;
                let Some(id) = self.tokens.get(&params.token).cloned() else {
                    return Err(ProtocolError::BadPayload {
                        what: "$/progress",
                        reason: format!("token {} matches no call in flight", params.token),
                    });
                };
                self.events.push_back(ClientEvent::Progress { id, params });
            }
            Event::Notification { method, params } => {
                self.events
                    .push_back(ClientEvent::Notification { method, params });
            }
        }
        Ok(())
    }
}

/// Where the runner's side of the lifecycle is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ServerState {
    /// Waiting for `initialize`.
    Start,
    /// `initialize` received, not yet answered.
    Initializing,
    /// Serving calls.
    Running,
    /// `shutdown` received: only `exit` is expected.
    ShutDown,
    /// `exit` received.
    Exited,
}

impl ServerState {
    fn name(self) -> &'static str {
        match self {
            ServerState::Start => "not initialized",
            ServerState::Initializing => "initializing",
            ServerState::Running => "running",
            ServerState::ShutDown => "shut down",
            ServerState::Exited => "exited",
        }
    }
}

/// What the runner is asked or told.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum ServerEvent {
    /// `initialize`: answer with [`Server::respond_initialize`].
    Initialize {
        /// The request's id.
        id: Id,
        /// Its params.
        params: InitializeParams,
    },
    /// The `initialized` notification.
    Initialized,
    /// A FineCode call: answer with [`Server::respond`].
    Call {
        /// The request's id.
        id: Id,
        /// The call.
        call: Call,
        /// The form it came in (answers use its spelling).
        form: CallForm,
    },
    /// `$/cancelRequest` for a call not yet answered: answer it with
    /// [`Server::respond_cancelled`].
    Cancel {
        /// The call's id.
        id: Id,
    },
    /// Any other notification (`textDocument/didOpen`, …).
    Notification {
        /// The method.
        method: String,
        /// Its params.
        params: Option<Value>,
    },
    /// The manager answered one of the runner's requests (or it was abandoned locally).
    Response {
        /// The request's id.
        id: Id,
        /// Its method.
        method: String,
        /// The answer.
        result: Result<Value, ErrorObject>,
    },
    /// `shutdown`: answer with [`Server::respond_shutdown`].
    Shutdown {
        /// The request's id.
        id: Id,
    },
    /// `exit`: stop serving.
    Exit,
}

#[derive(Debug)]
struct ServerCall {
    method: Method,
    form: CallForm,
    token: Option<ProgressToken>,
    cancelled: bool,
}

/// The runner's (plugin's) side.
#[derive(Debug)]
pub struct Server {
    peer: Peer,
    state: ServerState,
    calls: BTreeMap<Id, ServerCall>,
    initialize_id: Option<Id>,
    shutdown_id: Option<Id>,
    events: VecDeque<ServerEvent>,
    /// Frames the peer cannot make (answers to unreadable bodies), in send order.
    raw: VecDeque<Vec<u8>>,
}

impl Default for Server {
    fn default() -> Self {
        Self::new()
    }
}

impl Server {
    /// A runner waiting for `initialize`; its own requests' ids count from 1.
    pub fn new() -> Self {
        Self {
            peer: Peer::with_first_id(Dialect::JsonRpc2, 1),
            state: ServerState::Start,
            calls: BTreeMap::new(),
            initialize_id: None,
            shutdown_id: None,
            events: VecDeque::new(),
            raw: VecDeque::new(),
        }
    }

    /// The lifecycle state.
    pub fn state(&self) -> ServerState {
        self.state
    }

    /// Whether call `id` was cancelled by `$/cancelRequest`.
    pub fn is_cancelled(&self, id: &Id) -> bool {
        self.calls.get(id).is_some_and(|c| c.cancelled)
    }

    /// Feed one frame (a body, without its headers). Malformed calls, unknown methods and
    /// calls in the wrong state are answered here; the last also return
    /// [`ProtocolError::Unexpected`] (after the answer was queued).
    pub fn handle_frame(&mut self, frame: &[u8]) -> Result<(), ProtocolError> {
        match self.peer.handle_frame(frame) {
            Ok(()) => {}
            Err(e @ (ProtocolError::NotJson { .. } | ProtocolError::Invalid { .. })) => {
                // LSP answers a body it cannot read with a parse error to id null.
                let msg = crate::jsonrpc::Message::response(
                    Id::Null,
                    Err(ErrorObject::new(
                        crate::jsonrpc::PARSE_ERROR,
                        "invalid message",
                    )),
                );
                self.peer_transmit_raw(msg);
                return Err(e);
            }
            Err(e) => return Err(e),
        }
        let mut first_error = None;
        while let Some(ev) = self.peer.poll_event() {
            if let Err(e) = self.on_event(ev) {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    fn peer_transmit_raw(&mut self, msg: crate::jsonrpc::Message) {
        // Keep send order: whatever the peer queued first goes first.
        while let Some(frame) = self.peer.poll_transmit() {
            self.raw.push_back(frame);
        }
        self.raw.push_back(msg.encode(Dialect::JsonRpc2));
    }

    fn refuse(&mut self, id: Id, code: i64, message: String) -> Result<(), ProtocolError> {
        self.peer.respond(id, Err(ErrorObject::new(code, message)))
    }

    fn on_event(&mut self, ev: Event) -> Result<(), ProtocolError> {
        match ev {
            Event::Request { id, method, params } => self.on_request(id, method, params)?,
            Event::Notification { method, params } => match method.as_str() {
                "initialized" => self.events.push_back(ServerEvent::Initialized),
                "exit" => {
                    self.state = ServerState::Exited;
                    self.events.push_back(ServerEvent::Exit);
                }
                "$/cancelRequest" => {
                    let id = params
                        .as_ref()
                        .and_then(|p| p.get("id"))
                        .and_then(id_from_value);
                    // A cancel for a call already answered (or never made) is ignored: it
                    // crossed the answer on the wire.
                    if let Some(id) = id
                        && let Some(call) = self.calls.get_mut(&id)
                        && !call.cancelled
                    {
                        call.cancelled = true;
                        self.events.push_back(ServerEvent::Cancel { id });
                    }
                }
                _ => self
                    .events
                    .push_back(ServerEvent::Notification { method, params }),
            },
            Event::Response { id, method, result } => {
                self.events
                    .push_back(ServerEvent::Response { id, method, result });
            }
        }
        Ok(())
    }

    fn on_request(
        &mut self,
        id: Id,
        method: String,
        params: Option<Value>,
    ) -> Result<(), ProtocolError> {
        let unexpected = |state: ServerState| ProtocolError::Unexpected {
            state: state.name(),
            got: format!("request {method:?}"),
        };
        match (self.state, method.as_str()) {
            (ServerState::Start, "initialize") => {
                let params = params.unwrap_or_else(|| json!({}));
                match from_value(params) {
                    Ok(params) => {
                        self.state = ServerState::Initializing;
                        self.initialize_id = Some(id.clone());
                        self.events
                            .push_back(ServerEvent::Initialize { id, params });
                    }
                    Err(reason) => {
                        self.refuse(id, INVALID_PARAMS, format!("invalid params: {reason}"))?
                    }
                }
                Ok(())
            }
            (ServerState::Start | ServerState::Initializing, _) => {
                let e = unexpected(self.state);
                self.refuse(id, SERVER_NOT_INITIALIZED, "server not initialized".into())?;
                Err(e)
            }
            (ServerState::Running, "shutdown") => {
                self.state = ServerState::ShutDown;
                self.shutdown_id = Some(id.clone());
                self.events.push_back(ServerEvent::Shutdown { id });
                Ok(())
            }
            (ServerState::Running, _) => self.on_call(id, &method, params),
            (state, _) => {
                let e = unexpected(state);
                let message = match method.as_str() {
                    "initialize" => "initialize was already received".to_owned(),
                    _ => "server is shutting down".to_owned(),
                };
                self.refuse(id, INVALID_REQUEST, message)?;
                Err(e)
            }
        }
    }

    fn on_call(
        &mut self,
        id: Id,
        method: &str,
        params: Option<Value>,
    ) -> Result<(), ProtocolError> {
        let (form, name, decoded) = if method == EXECUTE_COMMAND {
            let command = params
                .as_ref()
                .and_then(|p| p.get("command"))
                .and_then(Value::as_str);
            let Some(command) = command.map(str::to_owned) else {
                return self.refuse(id, INVALID_PARAMS, "invalid params: missing command".into());
            };
            let args = match params.as_ref().and_then(|p| p.get("arguments")) {
                None | Some(Value::Null) => Vec::new(),
                Some(Value::Array(a)) => a.clone(),
                Some(_) => {
                    return self.refuse(
                        id,
                        INVALID_PARAMS,
                        "invalid params: arguments is not an array".into(),
                    );
                }
            };
            let decoded = Method::from_name(&command).map(|m| Call::from_arguments(m, &args));
            (CallForm::ExecuteCommand, command, decoded)
        } else {
            let decoded = Method::from_name(method).map(|m| Call::from_params(m, params));
            (CallForm::Direct, method.to_owned(), decoded)
        };
        match decoded {
            None => {
                let what = match form {
                    CallForm::Direct => "method",
                    CallForm::ExecuteCommand => "command",
                };
                self.refuse(id, METHOD_NOT_FOUND, format!("unknown {what}: {name}"))
            }
            Some(Err(reason)) => {
                self.refuse(id, INVALID_PARAMS, format!("invalid params: {reason}"))
            }
            Some(Ok(call)) => {
                let entry = ServerCall {
                    method: call.method(),
                    form,
                    token: call.token().cloned(),
                    cancelled: false,
                };
                self.calls.insert(id.clone(), entry);
                self.events.push_back(ServerEvent::Call { id, call, form });
                Ok(())
            }
        }
    }

    /// Answer `initialize`; calls are served from now on.
    pub fn respond_initialize(
        &mut self,
        id: Id,
        result: &InitializeResult,
    ) -> Result<(), ProtocolError> {
        if self.initialize_id.as_ref() != Some(&id) {
            return Err(ProtocolError::NotAwaitingResponse { id: id.to_string() });
        }
        self.peer.respond(id, Ok(to_value(result)))?;
        self.initialize_id = None;
        self.state = ServerState::Running;
        Ok(())
    }

    /// Answer call `id`. A [`FineCodeError::Command`] goes out as the successful result
    /// `{"error": message}`, [`FineCodeError::Rpc`] as a JSON-RPC error, and
    /// [`FineCodeError::BadResult`] as `-32603`. A reply for another method is
    /// [`ProtocolError::BadPayload`] and sends nothing.
    pub fn respond(
        &mut self,
        id: Id,
        result: Result<Reply, FineCodeError>,
    ) -> Result<(), ProtocolError> {
        let Some(call) = self.calls.get(&id) else {
            return Err(ProtocolError::NotAwaitingResponse { id: id.to_string() });
        };
        let result = match result {
            Ok(reply) if reply.method() != call.method => {
                return Err(ProtocolError::BadPayload {
                    what: "reply",
                    reason: format!("{} answers {}, not {}", reply.method(), id, call.method),
                });
            }
            Ok(reply) => Ok(reply.to_value(call.form)),
            Err(FineCodeError::Command { message }) => Ok(json!({"error": message})),
            Err(FineCodeError::Rpc(e)) => Err(e),
            Err(e @ FineCodeError::BadResult { .. }) => {
                Err(ErrorObject::new(INTERNAL_ERROR, e.to_string()))
            }
        };
        self.calls.remove(&id);
        self.peer.respond(id, result)
    }

    /// Answer call `id` with LSP's `-32800 request cancelled`.
    pub fn respond_cancelled(&mut self, id: Id) -> Result<(), ProtocolError> {
        let error = ErrorObject::new(REQUEST_CANCELLED, "request cancelled");
        self.respond(id, Err(FineCodeError::Rpc(error)))
    }

    /// Send a partial result for call `id` as `$/progress {token, value: "<JSON>"}`. Returns
    /// false (and sends nothing) when the call passed no `partialResultToken`.
    pub fn progress(&mut self, id: &Id, value: &Value) -> Result<bool, ProtocolError> {
        let Some(call) = self.calls.get(id) else {
            return Err(ProtocolError::NotAwaitingResponse { id: id.to_string() });
        };
        let Some(token) = call.token.clone() else {
            return Ok(false);
        };
        let params = ProgressParams {
            token,
            value: Value::String(value.to_string()),
        };
        self.peer.notify("$/progress", Some(to_value(&params)));
        Ok(true)
    }

    /// Ask the manager something; the answer arrives as [`ServerEvent::Response`].
    pub fn request(&mut self, request: &RunnerRequest) -> Result<Id, ProtocolError> {
        if self.state != ServerState::Running {
            return Err(ProtocolError::Unexpected {
                state: self.state.name(),
                got: format!("runner request {:?}", request.method()),
            });
        }
        Ok(self.peer.request(request.method(), request.params()))
    }

    /// Stop waiting for the answer to our request `id`: a [`ServerEvent::Response`] with
    /// `-32800` follows at once and a late answer is dropped. Nothing is sent.
    pub fn abandon(&mut self, id: &Id) -> bool {
        let abandoned = self.peer.cancel(id);
        while let Some(ev) = self.peer.poll_event() {
            // Only the local completion comes out of cancel.
            let _ = self.on_event(ev);
        }
        abandoned
    }

    /// Answer `shutdown` with `null`.
    pub fn respond_shutdown(&mut self, id: Id) -> Result<(), ProtocolError> {
        if self.shutdown_id.as_ref() != Some(&id) {
            return Err(ProtocolError::NotAwaitingResponse { id: id.to_string() });
        }
        self.shutdown_id = None;
        self.peer.respond(id, Ok(Value::Null))
    }

    /// The next body to send.
    pub fn poll_transmit(&mut self) -> Option<Vec<u8>> {
        self.raw.pop_front().or_else(|| self.peer.poll_transmit())
    }

    /// The next event.
    pub fn poll_event(&mut self) -> Option<ServerEvent> {
        self.events.pop_front()
    }
}

/// Fuzz body: feed each line of `data` to a client (in both call forms, with calls in flight)
/// and to a server that answers everything it is asked. Panics only if a machine panics or
/// emits a frame that is not a JSON-RPC 2.0 message.
pub fn fuzz(data: &[u8]) {
    use crate::jsonrpc::Message;
    for form in [CallForm::Direct, CallForm::ExecuteCommand] {
        let mut client = Client::with_call_form(form);
        let _ = client.initialize(&InitializeParams::default());
        // Pretend `initialize` was answered so calls can be in flight.
        let _ = client.handle_frame(br#"{"jsonrpc":"2.0","id":1,"result":{"capabilities":{}}}"#);
        let _ = client.initialized();
        let streamed = RunActionParams::new("a", Value::Null).with_options(RunOptions::streamed(1));
        let _ = client.run_action(streamed);
        let _ = client.get_payload_schemas();
        let mut server = Server::new();
        for line in data.split(|b| *b == b'\n') {
            let _ = client.handle_frame(line);
            let _ = server.handle_frame(line);
            while let Some(ev) = server.poll_event() {
                let _ = match ev {
                    ServerEvent::Initialize { id, .. } => {
                        server.respond_initialize(id, &InitializeResult::default())
                    }
                    ServerEvent::Call { id, call, .. } => {
                        let _ = server.progress(&id, &Value::Null);
                        let _ = server.request(&RunnerRequest::ApplyEdit(Value::Null));
                        match call.method() {
                            Method::RunAction => {
                                server.respond(id, Err(FineCodeError::command("x")))
                            }
                            _ => server.respond_cancelled(id),
                        }
                    }
                    ServerEvent::Shutdown { id } => server.respond_shutdown(id),
                    _ => Ok(()),
                };
            }
            while let Some(ClientEvent::Request { id, .. }) = client.poll_event() {
                let _ = client.respond(id, Ok(Value::Null));
            }
        }
        client.fail_pending(&Stopped::by_host("fuzz", Vec::new()));
        while client.poll_event().is_some() {}
        for frame in std::iter::from_fn(|| client.poll_transmit())
            .chain(std::iter::from_fn(|| server.poll_transmit()))
        {
            assert!(
                Message::decode(&frame, Dialect::JsonRpc2).is_ok(),
                "emitted an invalid frame: {}",
                String::from_utf8_lossy(&frame)
            );
        }
    }
}

#[cfg(test)]
mod tests;
