//! The FineCode host client against real runners, each case as wasm and native: the example
//! runner's whole lifecycle in both call forms (streamed results, a runner → manager request,
//! a command-level failure), cancellation of a call in flight, and a runner stopped with
//! calls pending.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use sandpipe::protocols::finecode::{
    CallForm, FineCodeClient, FineCodeError, FineCodeFailure, MergeResultsParams, NoRunnerRequests,
    RunActionParams, RunHandlersParams, RunnerRequest, RunnerRequests, SyncRequests,
    UpdateConfigParams,
};
use sandpipe::{Exit, Host, Policy, Session};
use sandpipe_proto::finecode::{GetRawConfigParams, RunOptions, RunStatus};
use sandpipe_proto::frame::Framing;
use sandpipe_proto::jsonrpc::{ErrorCode, ErrorObject, INTERNAL_ERROR, REQUEST_CANCELLED};
use sandpipe_tests::Target;
use serde_json::{Value, json};
use tokio::sync::mpsc;

/// Generous bound for a step that must not hang (the runners answer in milliseconds).
const STEP: Duration = Duration::from_secs(60);

async fn start(host: &Host, bin: &str, target: Target, policy: &Policy) -> Session {
    common::start(host, bin, target, policy, Framing::ContentLength).await
}

const DEF_PATH: &str = "/work/demo/finecode.toml";

fn update_params() -> UpdateConfigParams {
    UpdateConfigParams {
        working_dir: "/work/demo".into(),
        project_name: "demo".into(),
        project_def_path: DEF_PATH.into(),
        config: json!({"actions": {}}),
    }
}

fn raw_config(config: &Value) -> Result<Value, ErrorObject> {
    Ok(json!({"config": config.to_string()}))
}

/// `result_by_format["json"]` of a successful run.
fn json_result(r: &sandpipe_proto::finecode::RunActionResult) -> Value {
    let by_format = r.decode_result_by_format().expect("result_by_format");
    by_format.get("json").cloned().expect("json format")
}

fn sorted_keys(v: &Value) -> Vec<String> {
    let mut keys: Vec<String> = v["keys"]
        .as_array()
        .expect("keys")
        .iter()
        .map(|k| k.as_str().expect("key").to_owned())
        .collect();
    keys.sort();
    keys
}

#[tokio::test]
async fn the_example_runner_serves_a_whole_session_in_both_call_forms() {
    let host = common::host();
    for target in [Target::Wasm, Target::Native] {
        for form in [CallForm::Direct, CallForm::ExecuteCommand] {
            let case = format!("{target:?} {form:?}");
            let session = start(&host, "example-finecode", target, &Policy::default()).await;
            let asked: Arc<Mutex<Vec<RunnerRequest>>> = Arc::default();
            let seen = asked.clone();
            let handler = SyncRequests(move |request: RunnerRequest| {
                seen.lock().expect("lock").push(request.clone());
                match request {
                    RunnerRequest::GetRawConfig(_) => {
                        raw_config(&json!({"zeta": 1, "alpha": {"x": true}, "mid": []}))
                    }
                    other => Err(sandpipe::protocols::finecode::not_served(other.method())),
                }
            });
            let (client, init) = FineCodeClient::connect(session, form, handler)
                .await
                .expect("initialize");
            assert_eq!(client.call_form(), form);
            assert_eq!(
                init.server_info,
                Some(json!({"name": "example-finecode", "version": "0.1.0"})),
                "{case}"
            );

            client
                .update_config(update_params())
                .await
                .expect("updateConfig");

            let metas = client
                .resolve_action_meta()
                .await
                .expect("resolveActionMeta");
            let lint = &metas["example_finecode.LintAction"];
            assert_eq!(
                lint.canonical_source,
                "example_finecode.actions.lint.LintAction"
            );
            assert!(lint.runs_concurrently, "{case}");
            assert!(!metas["example_finecode.ConfigSummaryAction"].runs_concurrently);

            let schemas = client.get_payload_schemas().await.expect("schemas");
            assert_eq!(schemas["broken"], None, "{case}");
            assert_eq!(
                schemas["lint"].as_ref().expect("lint schema").required,
                ["files"]
            );

            // Streamed: every message arrives as its own `$/progress`, in order, before the
            // `streamed` completion.
            let mut progress = Vec::new();
            let params = RunActionParams::new("lint", json!({"files": ["a.py", "b.py", "c.py"]}))
                .with_options(RunOptions::streamed("lint-1"));
            let streamed = client
                .run_action(params, |v| progress.push(v))
                .await
                .expect("streamed lint");
            assert_eq!(streamed.status, RunStatus::Streamed, "{case}");
            let expected: Vec<Value> = ["a.py", "b.py", "c.py"]
                .iter()
                .map(|f| json!({"messages": [{"file": f, "message": "line too long"}]}))
                .collect();
            assert_eq!(progress, expected, "{case}");

            // The same run without a token answers in the result, and reports no progress.
            let mut none = 0;
            let whole = client
                .run_action(
                    RunActionParams::new("lint", json!({"files": ["a.py"]})),
                    |_| none += 1,
                )
                .await
                .expect("lint");
            assert_eq!(none, 0);
            assert_eq!(whole.status, RunStatus::Success);
            assert_eq!(
                json_result(&whole),
                json!({"messages": [{"file": "a.py", "message": "line too long"}]})
            );

            // config_summary asks the manager; the answer is built from what the handler said.
            assert!(asked.lock().expect("lock").is_empty());
            let summary = client
                .run_action(RunActionParams::new("config_summary", json!({})), |_| {})
                .await
                .expect("config_summary");
            assert_eq!(
                *asked.lock().expect("lock"),
                [RunnerRequest::GetRawConfig(GetRawConfigParams {
                    project_def_path: DEF_PATH.into()
                })],
                "{case}"
            );
            let summary = json_result(&summary);
            assert_eq!(summary["projectDefPath"], DEF_PATH, "{case}");
            assert_eq!(sorted_keys(&summary), ["alpha", "mid", "zeta"], "{case}");

            // A command-level failure is an error, not a result.
            let broken = client
                .run_action(RunActionParams::new("broken", json!({})), |_| {})
                .await
                .expect_err("broken fails");
            assert_eq!(
                broken,
                FineCodeFailure::Call(FineCodeError::Command {
                    message: "broken: this action always fails".into()
                }),
                "{case}"
            );
            assert_eq!(
                broken.command_message(),
                Some("broken: this action always fails")
            );

            let handlers = client
                .run_handlers(RunHandlersParams {
                    action_name: "lint".into(),
                    handler_names: vec!["h1".into(), "h2".into()],
                    previous_result: Some(json!({"handlers": ["lint:h0"]})),
                    options: Some(RunOptions {
                        result_formats: Some(vec!["json".into()]),
                        ..RunOptions::default()
                    }),
                })
                .await
                .expect("runHandlers");
            assert_eq!(
                handlers.result,
                json!({"handlers": ["lint:h0", "lint:h1", "lint:h2"]}),
                "{case}"
            );
            assert_eq!(handlers.result_by_format["json"], handlers.result);

            let merged = client
                .merge_results(MergeResultsParams {
                    action_name: "lint".into(),
                    results: vec![json!({"messages": [1]}), json!({"messages": [2, 3]})],
                })
                .await
                .expect("mergeResults");
            assert_eq!(merged, json!({"messages": [1, 2, 3]}), "{case}");

            let exit = client.shutdown(Duration::from_secs(20)).await;
            assert_eq!(exit, Exit::Exited(0), "{case}");
        }
    }
}

/// Tells the test when a runner request arrived, and answers it only when the test says so.
struct Gate {
    arrived: mpsc::UnboundedSender<RunnerRequest>,
    answers: mpsc::UnboundedReceiver<Result<Value, ErrorObject>>,
}

impl RunnerRequests for Gate {
    async fn handle(&mut self, request: RunnerRequest) -> Result<Value, ErrorObject> {
        let _ = self.arrived.send(request);
        self.answers
            .recv()
            .await
            .unwrap_or_else(|| Err(ErrorObject::new(INTERNAL_ERROR, "test over")))
    }
}

#[tokio::test]
async fn a_cancelled_call_completes_at_once_and_the_runner_moves_on() {
    let host = common::host();
    for target in [Target::Wasm, Target::Native] {
        for form in [CallForm::Direct, CallForm::ExecuteCommand] {
            let case = format!("{target:?} {form:?}");
            let session = start(&host, "example-finecode", target, &Policy::default()).await;
            let (arrived_tx, mut arrived) = mpsc::unbounded_channel();
            let (answer, answers) = mpsc::unbounded_channel();
            let gate = Gate {
                arrived: arrived_tx,
                answers,
            };
            let (client, _) = FineCodeClient::connect(session, form, gate)
                .await
                .expect("initialize");
            client.update_config(update_params()).await.expect("config");

            // The runner is now waiting for the manager's answer, which the gate holds back.
            let pending = client
                .start_run_action(RunActionParams::new("config_summary", json!({})))
                .expect("start");
            let id = pending.id().clone();
            let request = tokio::time::timeout(STEP, arrived.recv())
                .await
                .expect("the runner asks for the config")
                .expect("gate open");
            assert!(matches!(request, RunnerRequest::GetRawConfig(_)), "{case}");

            assert!(client.cancel(&id), "{case}");
            let err = tokio::time::timeout(STEP, pending)
                .await
                .expect("a cancelled call completes at once")
                .expect_err("cancelled");
            assert!(err.is_cancelled(), "{case}: {err:?}");
            assert_eq!(
                err.rpc().map(|e| &e.code),
                Some(&ErrorCode::Int(REQUEST_CANCELLED))
            );
            // Cancelling twice does nothing.
            assert!(!client.cancel(&id));

            // The runner got `$/cancelRequest` and stopped waiting: it serves the next call
            // although the manager's answer is still held back (it handles calls one at a
            // time, so without the cancel this would wait for the gate).
            let metas = tokio::time::timeout(STEP, client.resolve_action_meta())
                .await
                .expect("the runner moved on")
                .expect("resolveActionMeta");
            assert_eq!(metas.len(), 2, "{case}");

            // The held-back answer arrives late and is dropped by the runner; the same action
            // then works end to end.
            answer
                .send(raw_config(&json!({"late": true})))
                .expect("gate");
            answer
                .send(raw_config(&json!({"b": 1, "a": 2})))
                .expect("gate");
            let summary = tokio::time::timeout(
                STEP,
                client.run_action(RunActionParams::new("config_summary", json!({})), |_| {}),
            )
            .await
            .expect("answered")
            .expect("config_summary");
            assert_eq!(sorted_keys(&json_result(&summary)), ["a", "b"], "{case}");
            assert!(
                arrived.try_recv().is_ok(),
                "{case}: the second run asked again"
            );

            let exit = client.shutdown(Duration::from_secs(20)).await;
            assert_eq!(exit, Exit::Exited(0), "{case}");
        }
    }
}

/// (target, misbehaviour, policy, the reason the error must name)
fn stops() -> Vec<(Target, &'static str, Policy, &'static str)> {
    common::stops()
}

#[tokio::test]
async fn a_runner_stopped_with_two_calls_pending_fails_both_with_internal_error() {
    let host = common::host();
    for (target, how, policy, reason) in stops() {
        let case = format!("{target:?} {how}");
        let session = start(&host, "finecode-hog", target, &policy).await;
        let (client, init) = FineCodeClient::connect(session, CallForm::Direct, NoRunnerRequests)
            .await
            .expect("initialize");
        assert_eq!(init.server_info.expect("info")["name"], "finecode-hog");
        // A well-behaved call first: the session works until the bad one.
        let ok = client
            .run_action(RunActionParams::new("ok", json!({})), |_| {})
            .await
            .expect("ok");
        assert_eq!(json_result(&ok), json!({"ran": "ok"}));

        // The runner handles calls one at a time: the second waits behind the hog.
        let hog = client
            .start_run_action(RunActionParams::new(how, json!({})))
            .expect("start hog");
        let queued = client
            .start_run_action(RunActionParams::new("ok", json!({})))
            .expect("start queued");
        let (hog, queued) = tokio::join!(hog.wait(), queued.wait());
        let line = format!("hog: {how} starting");
        for (which, result) in [("hog", hog), ("queued", queued)] {
            match result {
                Err(FineCodeFailure::Stopped { error, stopped }) if !stopped.violation => {
                    let (exit, stderr_tail) = (stopped.exit, stopped.stderr_tail);
                    assert_eq!(error.code, ErrorCode::Int(INTERNAL_ERROR), "{case} {which}");
                    assert!(
                        error.message.contains(reason),
                        "{case} {which}: {}",
                        error.message
                    );
                    let data = error.data.expect("data");
                    assert!(
                        data["reason"].as_str().is_some_and(|r| r.contains(reason)),
                        "{case} {which}: {data}"
                    );
                    assert!(
                        data["stderr"]
                            .as_array()
                            .is_some_and(|l| l.contains(&json!(line))),
                        "{case} {which}: {data}"
                    );
                    assert!(stderr_tail.contains(&line), "{stderr_tail:?}");
                    assert!(
                        exit.as_ref().is_some_and(|e| !e.success()),
                        "{case} {which}: {exit:?}"
                    );
                }
                other => {
                    panic!("{case} {which}: expected -32603 for a stopped runner, got {other:?}")
                }
            }
        }
        // The session is over: a further call is the same error at once, not a hang.
        let later = client
            .resolve_action_meta()
            .await
            .expect_err("runner is gone");
        assert!(
            matches!(later, FineCodeFailure::Stopped { .. }),
            "{case}: {later:?}"
        );
        let exit = client.shutdown(Duration::from_secs(5)).await;
        assert!(!exit.success(), "{case}: {exit:?}");
    }
}
