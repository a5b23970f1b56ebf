//! An example FineCode extension runner (the plugin side of the WM ↔ ER protocol).
//!
//! Actions:
//! - `lint {files: [..]}`: one message per file. With a `partialResultToken` each message is
//!   streamed as its own `$/progress` and the run ends `streamed`; without one the messages come
//!   back in `result_by_format`.
//! - `config_summary {}`: asks the manager for the project's raw config
//!   (`projects/getRawConfig`) and answers its sorted top-level keys.
//! - `broken {}`: always fails at the command level (`{"error": ..}`).
//!
//! `actions/runHandlers` appends one entry per handler to the previous result's `handlers`;
//! `actions/mergeResults` concatenates the results' `messages`.

use std::io::Write;

use sandpipe_guest::finecode::{
    ActionMeta, ActionMetas, Context, FineCodeError, InitializeParams, InitializeResult,
    MergeResultsParams, PayloadSchema, PayloadSchemas, RunActionParams, RunActionResult,
    RunHandlersParams, RunHandlersResult, RunStatus, Runner, UpdateConfigParams, Value, json,
    serde_json, serve,
};
use sandpipe_guest::{Framed, GuestError};

/// The example runner's state: what `finecodeRunner/updateConfig` told it.
#[derive(Debug, Default)]
pub struct ExampleRunner {
    project_def_path: String,
}

impl Runner for ExampleRunner {
    fn initialize(&mut self, _params: &InitializeParams) -> InitializeResult {
        InitializeResult::new("example-finecode", "0.1.0")
    }

    fn update_config(
        &mut self,
        _: &mut Context<'_>,
        p: UpdateConfigParams,
    ) -> Result<(), FineCodeError> {
        self.project_def_path = p.project_def_path;
        Ok(())
    }

    fn resolve_action_meta(&mut self, _: &mut Context<'_>) -> Result<ActionMetas, FineCodeError> {
        let meta = |class: &str, concurrent| ActionMeta {
            canonical_source: format!("example_finecode.actions.{class}"),
            runs_concurrently: concurrent,
            extra: Default::default(),
        };
        // `broken` cannot be imported in this env, so it is left out.
        Ok(ActionMetas::from([
            (
                "example_finecode.LintAction".into(),
                meta("lint.LintAction", true),
            ),
            (
                "example_finecode.ConfigSummaryAction".into(),
                meta("config.ConfigSummaryAction", false),
            ),
        ]))
    }

    fn get_payload_schemas(
        &mut self,
        _: &mut Context<'_>,
    ) -> Result<PayloadSchemas, FineCodeError> {
        let lint = PayloadSchema {
            properties: json!({"files": {"type": "array", "items": {"type": "string"}}})
                .as_object()
                .cloned()
                .unwrap_or_default(),
            required: vec!["files".into()],
            extra: Default::default(),
        };
        Ok(PayloadSchemas::from([
            ("broken".into(), None),
            ("config_summary".into(), Some(PayloadSchema::default())),
            ("lint".into(), Some(lint)),
        ]))
    }

    fn run_action(
        &mut self,
        ctx: &mut Context<'_>,
        p: RunActionParams,
    ) -> Result<RunActionResult, FineCodeError> {
        match p.action_name.as_str() {
            "lint" => {
                let files = p
                    .params
                    .get("files")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default();
                let messages: Vec<Value> = files
                    .iter()
                    .map(|f| json!({"file": f, "message": "line too long"}))
                    .collect();
                if p.token().is_some() {
                    for m in &messages {
                        ctx.progress(&json!({"messages": [m]}));
                    }
                    return Ok(RunActionResult::streamed());
                }
                Ok(RunActionResult::success(
                    &json!({"json": {"messages": messages}}),
                ))
            }
            "config_summary" => {
                let path = self.project_def_path.clone();
                let raw = ctx.get_raw_config(&path).map_err(|e| {
                    FineCodeError::command(format!("cannot read config: {}", e.message))
                })?;
                let config: serde_json::Map<String, Value> =
                    serde_json::from_str(&raw).map_err(|e| {
                        FineCodeError::command(format!("config is not a JSON object: {e}"))
                    })?;
                let keys: Vec<&String> = config.keys().collect();
                Ok(RunActionResult::success(
                    &json!({"json": {"projectDefPath": path, "keys": keys}}),
                ))
            }
            "broken" => Err(FineCodeError::command("broken: this action always fails")),
            other => Err(FineCodeError::command(format!("unknown action: {other}"))),
        }
    }

    fn run_handlers(
        &mut self,
        _: &mut Context<'_>,
        p: RunHandlersParams,
    ) -> Result<RunHandlersResult, FineCodeError> {
        let mut handlers = p
            .previous_result
            .as_ref()
            .and_then(|r| r.get("handlers"))
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        handlers.extend(
            p.handler_names
                .iter()
                .map(|h| json!(format!("{}:{h}", p.action_name))),
        );
        let result = json!({"handlers": handlers});
        let formats = p.options.and_then(|o| o.result_formats).unwrap_or_default();
        let mut result_by_format = serde_json::Map::new();
        if formats.iter().any(|f| f == "json") {
            result_by_format.insert("json".into(), result.clone());
        }
        Ok(RunHandlersResult {
            status: RunStatus::Success,
            result,
            result_by_format,
            return_code: 0,
        })
    }

    fn merge_results(
        &mut self,
        _: &mut Context<'_>,
        p: MergeResultsParams,
    ) -> Result<Value, FineCodeError> {
        let mut messages = Vec::new();
        for (i, r) in p.results.iter().enumerate() {
            let Some(ms) = r.get("messages").and_then(Value::as_array) else {
                return Err(FineCodeError::command(format!(
                    "results[{i}] has no messages"
                )));
            };
            messages.extend(ms.iter().cloned());
        }
        Ok(json!({"messages": messages}))
    }
}

/// The whole plugin minus stdio: serve the manager on `io` until `exit` or EOF.
pub fn main_with<R: sandpipe_guest::Input, W: Write>(
    io: &mut Framed<R, W>,
    _args: &[String],
) -> Result<(), GuestError> {
    serve(io, &mut ExampleRunner::default())
}
