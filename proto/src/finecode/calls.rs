//! FineCode's calls and their answers in both forms, its errors, and the runner's requests.

use std::fmt;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use thiserror::Error;

use super::types::*;
use crate::jsonrpc::{ErrorObject, Id};

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
    /// A JSON-RPC error: the runner's, `-32800` after
    /// [`Client::cancel`](super::Client::cancel), or `-32603` from
    /// [`Client::fail_pending`](super::Client::fail_pending).
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

pub(super) fn to_value<T: Serialize>(v: &T) -> Value {
    // The types here are maps, strings and numbers: serializing them cannot fail.
    serde_json::to_value(v).unwrap_or(Value::Null)
}

pub(super) fn from_value<T: DeserializeOwned>(v: Value) -> Result<T, String> {
    serde_json::from_value(v).map_err(|e| e.to_string())
}

pub(super) fn member<T: DeserializeOwned>(v: &Value, name: &str) -> Result<T, String> {
    let m = v
        .get(name)
        .cloned()
        .ok_or_else(|| format!("missing {name}"))?;
    from_value(m).map_err(|e| format!("{name}: {e}"))
}

pub(super) fn id_value(id: &Id) -> Value {
    match id {
        Id::Num(n) => json!(n),
        Id::Str(s) => json!(s),
        Id::Null => Value::Null,
    }
}

pub(super) fn id_from_value(v: &Value) -> Option<Id> {
    match v {
        Value::Number(n) => n.as_i64().map(Id::Num),
        Value::String(s) => Some(Id::Str(s.clone())),
        _ => None,
    }
}
