//! The typed params and results of the FineCode WM ↔ ER calls.
//!
//! Every object keeps the members the seed does not name in `extra` (flattened), so nothing a
//! peer sends is lost and a newer runner's additions pass through.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// An LSP `initialize` request's params (the members FineCode's WM sends).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InitializeParams {
    /// The WM's process id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub process_id: Option<i64>,
    /// `{"name", "version"}` of the WM.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_info: Option<Value>,
    /// LSP client capabilities.
    #[serde(default)]
    pub capabilities: Value,
    /// `[{"uri", "name"}]`: the project the runner serves.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace_folders: Option<Vec<Value>>,
    /// `"off" | "messages" | "verbose"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<String>,
    /// Every other member, kept as sent.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// An LSP `initialize` result.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InitializeResult {
    /// Server capabilities.
    #[serde(default)]
    pub capabilities: Value,
    /// `{"name", "version"}` of the runner.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_info: Option<Value>,
    /// Every other member, kept as sent.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl InitializeResult {
    /// A result naming the runner and advertising every call as an `executeCommand` command
    /// (what the released runner registers), so both call forms are discoverable.
    pub fn new(name: &str, version: &str) -> Self {
        let commands: Vec<&str> = super::Method::ALL.iter().map(|m| m.as_str()).collect();
        Self {
            capabilities: serde_json::json!({"executeCommandProvider": {"commands": commands}}),
            server_info: Some(serde_json::json!({"name": name, "version": version})),
            extra: Map::new(),
        }
    }
}

/// `finecodeRunner/updateConfig` params.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UpdateConfigParams {
    /// The project directory.
    pub working_dir: String,
    /// The project's name.
    pub project_name: String,
    /// The project's definition file (`finecode.toml` / `pyproject.toml`).
    pub project_def_path: String,
    /// `{actions, action_handler_configs, services?, handlers_to_initialize?}`, as sent.
    #[serde(default)]
    pub config: Value,
}

/// `finecodeRunner/getInfo` result.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunnerInfo {
    /// The runner's log file, or `null` when it does not log to a file.
    pub log_file_path: Option<String>,
    /// Every other member, kept as sent.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// One entry of the `finecodeRunner/resolveActionMeta` result (keys are snake_case on the
/// wire, as the seed shows).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ActionMeta {
    /// The fully qualified class path.
    pub canonical_source: String,
    /// Whether the action's handlers run concurrently.
    #[serde(default)]
    pub runs_concurrently: bool,
    /// Every other member, kept as sent.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// A `partialResultToken`: an integer or a string.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ProgressToken {
    /// An integer token.
    Int(i64),
    /// A string token.
    Str(String),
}

impl fmt::Display for ProgressToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProgressToken::Int(n) => write!(f, "{n}"),
            ProgressToken::Str(s) => write!(f, "{s:?}"),
        }
    }
}

impl From<i64> for ProgressToken {
    fn from(n: i64) -> Self {
        ProgressToken::Int(n)
    }
}

impl From<&str> for ProgressToken {
    fn from(s: &str) -> Self {
        ProgressToken::Str(s.to_owned())
    }
}

/// `options.meta` of `actions/run` and `actions/runHandlers`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunMeta {
    /// `"user" | "system" | "unknown"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trigger: Option<String>,
    /// `"ide" | "cli" | "ai" | "git_hook" | "ci"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dev_env: Option<String>,
    /// Cross-boundary hop counter; the runner propagates it unchanged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub orchestration_depth: Option<i64>,
    /// Every other member, kept as sent.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// `options` of `actions/run` and `actions/runHandlers`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunOptions {
    /// Who asked, from where.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<RunMeta>,
    /// Set to have partial results streamed as `$/progress` with this token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partial_result_token: Option<ProgressToken>,
    /// `["json", "string"]`; absent means `["json"]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result_formats: Option<Vec<String>>,
    /// Every other member (`walRunId`, …), kept as sent.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl RunOptions {
    /// Options that ask for streamed results under `token`.
    pub fn streamed(token: impl Into<ProgressToken>) -> Self {
        Self {
            partial_result_token: Some(token.into()),
            ..Self::default()
        }
    }
}

/// `actions/run` params.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunActionParams {
    /// The action's name, as registered by `finecodeRunner/updateConfig`.
    pub action_name: String,
    /// The action's payload.
    #[serde(default)]
    pub params: Value,
    /// Options, or `null`.
    #[serde(default)]
    pub options: Option<RunOptions>,
}

impl RunActionParams {
    /// Run `action_name` with `params` and no options.
    pub fn new(action_name: impl Into<String>, params: Value) -> Self {
        Self {
            action_name: action_name.into(),
            params,
            options: None,
        }
    }

    /// Set the options.
    pub fn with_options(mut self, options: RunOptions) -> Self {
        self.options = Some(options);
        self
    }

    /// The `partialResultToken`, if any.
    pub fn token(&self) -> Option<&ProgressToken> {
        self.options.as_ref()?.partial_result_token.as_ref()
    }
}

/// How a run ended.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RunStatus {
    /// The result is in the response.
    Success,
    /// Every result went out as `$/progress`; the response only signals completion.
    Streamed,
    /// A handler stopped the run (`return_code` is usually 1).
    Stopped,
    /// A status this crate does not know, kept as sent.
    #[serde(untagged)]
    Other(String),
}

/// `actions/run` success result. The seed spells the keys `result_by_format`/`return_code`;
/// the released runner spells them `resultByFormat`/`returnCode`. Both are accepted; the
/// server writes the seed's spelling for the direct form and the released one for
/// `workspace/executeCommand`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunActionResult {
    /// How the run ended.
    pub status: RunStatus,
    /// A JSON-encoded string: `{"json": {...}, "string": "..."}`; `"{}"` when streamed.
    #[serde(alias = "resultByFormat")]
    pub result_by_format: String,
    /// 0 on success.
    #[serde(alias = "returnCode", default)]
    pub return_code: i64,
}

impl RunActionResult {
    /// A `success` result carrying `result_by_format` (encoded here).
    pub fn success(result_by_format: &Value) -> Self {
        Self {
            status: RunStatus::Success,
            result_by_format: result_by_format.to_string(),
            return_code: 0,
        }
    }

    /// The `streamed` completion signal: empty `result_by_format`, return code 0.
    pub fn streamed() -> Self {
        Self {
            status: RunStatus::Streamed,
            result_by_format: "{}".into(),
            return_code: 0,
        }
    }

    /// A `stopped` result.
    pub fn stopped(result_by_format: &Value, return_code: i64) -> Self {
        Self {
            status: RunStatus::Stopped,
            result_by_format: result_by_format.to_string(),
            return_code,
        }
    }

    /// `result_by_format` decoded.
    pub fn decode_result_by_format(&self) -> Result<Map<String, Value>, String> {
        serde_json::from_str(&self.result_by_format).map_err(|e| e.to_string())
    }
}

/// `actions/runHandlers` params.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunHandlersParams {
    /// The action's name.
    pub action_name: String,
    /// The handlers to run, in order; all in this runner's env.
    pub handler_names: Vec<String>,
    /// The previous segment's serialized result, or `null` for the first segment.
    #[serde(default)]
    pub previous_result: Option<Value>,
    /// Same keys as `actions/run`.
    #[serde(default)]
    pub options: Option<RunOptions>,
}

/// `actions/runHandlers` success result (camelCase keys on the wire).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunHandlersResult {
    /// How the segment ended.
    pub status: RunStatus,
    /// The serialized run result, to pass as the next segment's `previousResult`.
    #[serde(default)]
    pub result: Value,
    /// Formatted results (an object here, unlike `actions/run`); `{}` when none were asked.
    #[serde(default, alias = "result_by_format")]
    pub result_by_format: Map<String, Value>,
    /// 0 on success.
    #[serde(default, alias = "return_code")]
    pub return_code: i64,
}

/// `actions/mergeResults` params.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MergeResultsParams {
    /// The action's name.
    pub action_name: String,
    /// Serialized run results, one per concurrent segment.
    pub results: Vec<Value>,
}

/// One action's payload schema in the `actions/getPayloadSchemas` result.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PayloadSchema {
    /// Field name → JSON Schema type object.
    #[serde(default)]
    pub properties: Map<String, Value>,
    /// Fields without defaults.
    #[serde(default)]
    pub required: Vec<String>,
    /// Every other member, kept as sent.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// `projects/getRawConfig` params (ER → WM).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GetRawConfigParams {
    /// The project definition file whose config is wanted.
    pub project_def_path: String,
}

/// `projects/getRawConfig` result.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RawConfig {
    /// The config as a JSON-encoded string.
    pub config: String,
}

/// `finecode/runActionInProject` params (ER → WM).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunActionInProjectParams {
    /// The action class's fully qualified import path.
    pub action_source: String,
    /// The serialized payload.
    #[serde(default)]
    pub payload: Value,
    /// `{trigger, devEnv, orchestrationDepth}`.
    #[serde(default)]
    pub meta: RunMeta,
}

/// `finecode/runActionInWorkspace` params (ER → WM).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunActionInWorkspaceParams {
    /// The action class's fully qualified import path.
    pub action_source: String,
    /// The serialized payload.
    #[serde(default)]
    pub payload: Value,
    /// `{trigger, devEnv, orchestrationDepth}`.
    #[serde(default)]
    pub meta: RunMeta,
    /// Explicit project paths, or `null` for every project that declares the action.
    #[serde(default)]
    pub project_paths: Option<Vec<String>>,
    /// Run the projects concurrently (default true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrently: Option<bool>,
}

/// `$/progress` params (ER → WM).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProgressParams {
    /// The `partialResultToken` of the call the partial result belongs to.
    pub token: ProgressToken,
    /// The partial result: a JSON-encoded string per the seed (kept as sent).
    pub value: Value,
}

impl ProgressParams {
    /// The partial result decoded: a string value is parsed as JSON, anything else is
    /// returned as is.
    pub fn decode_value(&self) -> Result<Value, String> {
        match &self.value {
            Value::String(s) => serde_json::from_str(s).map_err(|e| e.to_string()),
            other => Ok(other.clone()),
        }
    }
}

/// `{ "<action name>": schema | null }`.
pub type PayloadSchemas = BTreeMap<String, Option<PayloadSchema>>;

/// `{ "<configSource>": ActionMeta }`.
pub type ActionMetas = BTreeMap<String, ActionMeta>;
