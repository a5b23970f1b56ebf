//! The typed ATP client against real plugins, each case under wasm and native: runs in flight
//! with results out of order, declared error outputs, signals both ways, v1; every run in
//! flight failing with an ATP error when the plugin is stopped; and the SIGTERM emulation of
//! `done`.

mod common;

use std::time::Duration;

use sandpipe::Stopped;
use sandpipe::protocols::atp::{AtpClient, AtpFailure, AtpRunError, ErrorOrigin, Value, Version};
use sandpipe::{Exit, Host, Policy, Session};
use sandpipe_proto::atp::AtpError;
use sandpipe_proto::frame::Framing;
use sandpipe_tests::Target;
use serde_json::json;

/// Generous: a well-behaved plugin exits long before; a stubborn one is killed after it.
const GRACE: Duration = Duration::from_secs(10);

async fn start(host: &Host, bin: &str, target: Target, policy: &Policy) -> Session {
    common::start(host, bin, target, policy, Framing::CborSeq).await
}

fn cbor(v: serde_json::Value) -> Value {
    Value::serialized(&v).expect("JSON converts to CBOR")
}

fn to_json(v: &Value) -> serde_json::Value {
    v.deserialized()
        .expect("CBOR without JSON-incompatible parts")
}

#[tokio::test]
async fn example_runs_out_of_order_with_error_outputs_and_signals() {
    let host = common::host();
    for target in [Target::Wasm, Target::Native] {
        let session = start(&host, "example-atp", target, &Policy::default()).await;
        let (client, hello) = AtpClient::connect(session).await.expect("hello");
        assert_eq!(hello.version, Version::V3, "{target:?}");
        assert_eq!(client.version(), Version::V3);
        let steps: Vec<String> = hello.step_ids().into_iter().collect();
        assert_eq!(steps, ["greet", "wait"], "{target:?}");

        // `a` is deferred until the plugin handles the next frame (`b`'s start), so `b`'s
        // result comes back first; each run still gets its own.
        let a = client
            .start("a", "greet", cbor(json!({"name": "Ada", "defer": true})))
            .await
            .expect("start a");
        let b = client
            .start("b", "greet", cbor(json!({"name": "Bob"})))
            .await
            .expect("start b");
        let b = b.result().await.expect("b");
        assert_eq!(b.output_id, "success", "{target:?}");
        assert_eq!(to_json(&b.output_data), json!({"message": "Hello, Bob!"}));
        let a = a.result().await.expect("a");
        assert_eq!(to_json(&a.output_data), json!({"message": "Hello, Ada!"}));

        // A declared error output is a normal work done.
        let empty = client
            .start("e", "greet", cbor(json!({"name": ""})))
            .await
            .expect("start e");
        let empty = empty.result().await.expect("error output is not a failure");
        assert_eq!(empty.output_id, "error", "{target:?}");
        assert_eq!(
            to_json(&empty.output_data),
            json!({"reason": "name must not be empty"})
        );

        // A config the step cannot use is an ATP error message from the plugin.
        let bad = client
            .start("x", "greet", cbor(json!({"name": 7})))
            .await
            .expect("start x");
        let err = bad.result().await.expect_err("atp error");
        assert_eq!(err.origin, ErrorOrigin::Plugin, "{err:?}");
        assert!(err.step_fatal && !err.server_fatal, "{err:?}");
        assert!(err.error.contains("needs a text name"), "{err:?}");

        // Signals both ways.
        let mut wait = client
            .start("w", "wait", cbor(json!({})))
            .await
            .expect("start w");
        let (signal_id, data) = wait.next_signal().await.expect("ready");
        assert_eq!(signal_id, "ready");
        assert_eq!(to_json(&data), json!({}));
        client
            .signal("w", "go", cbor(json!({"n": 1})))
            .await
            .expect("go");
        let done = wait.result().await.expect("wait");
        assert_eq!(to_json(&done.output_data), json!({"received": {"n": 1}}));

        // The machine's rules hold on the host side: nothing is sent for these.
        assert!(matches!(
            client.start("y", "nope", Value::Null).await,
            Err(AtpFailure::Refused(AtpError::UnknownStep { .. }))
        ));
        assert!(matches!(
            client.signal("w", "go", Value::Null).await,
            Err(AtpFailure::Refused(AtpError::UnknownRun { .. }))
        ));
        assert!(client.in_flight().is_empty());

        assert_eq!(client.done(GRACE).await, Exit::Exited(0), "{target:?}");
    }
}

#[tokio::test]
async fn example_speaks_v1_when_asked() {
    let host = common::host();
    for target in [Target::Wasm, Target::Native] {
        let policy = Policy::default().arg("--v1");
        let session = start(&host, "example-atp", target, &policy).await;
        let (client, hello) = AtpClient::connect(session).await.expect("hello");
        assert_eq!(hello.version, Version::V1, "{target:?}");
        let steps: Vec<String> = hello.step_ids().into_iter().collect();
        assert_eq!(steps, ["greet", "wait"], "{target:?}");
        let run = client
            .start("only", "greet", cbor(json!({"name": "Ada"})))
            .await
            .expect("start");
        assert_eq!(run.id(), "only");
        let out = run.result().await.expect("greet");
        assert_eq!(out.output_id, "success");
        assert_eq!(to_json(&out.output_data), json!({"message": "Hello, Ada!"}));
        // One run per v1 plugin.
        assert!(matches!(
            client.start("again", "greet", Value::Null).await,
            Err(AtpFailure::Refused(_)) | Err(AtpFailure::Stopped(_))
        ));
        assert_eq!(client.done(GRACE).await, Exit::Exited(0), "{target:?}");
    }
}

/// (target, misbehaviour, policy, the reason the error must name)
fn stops() -> Vec<(Target, &'static str, Policy, &'static str)> {
    let mut rows = common::stops();
    rows.push((Target::Wasm, "trap", Policy::default(), "plugin trapped"));
    rows.push((Target::Native, "trap", Policy::default(), "plugin trapped"));
    rows
}

#[tokio::test]
async fn stopped_mid_run_fails_every_run_in_flight_with_an_atp_error() {
    let host = common::host();
    for (target, how, policy, reason) in stops() {
        let case = format!("{target:?} {how}");
        let session = start(&host, "atp-hog", target, &policy).await;
        let (client, hello) = AtpClient::connect(session).await.expect("hello");
        assert_eq!(hello.version, Version::V3);
        // A well-behaved run first: the session works until the bad one.
        let ok = client
            .start("ok", "ok", cbor(json!({"k": 1})))
            .await
            .expect("start ok");
        assert_eq!(
            to_json(&ok.result().await.expect("ok").output_data),
            json!({"k": 1})
        );
        // Two runs in flight: one held, one that stops the plugin.
        let held = client
            .start("held", "hold", Value::Null)
            .await
            .expect("start held");
        let hog = client
            .start("hog", "hog", cbor(json!({"how": how})))
            .await
            .expect("start hog");
        for (which, run) in [("held", held), ("hog", hog)] {
            let err: AtpRunError = run.result().await.expect_err("stopped");
            assert_eq!(err.run_id, which, "{case}");
            assert!(
                err.step_fatal && err.server_fatal,
                "{case} {which}: {err:?}"
            );
            assert_eq!(err.origin, ErrorOrigin::Host, "{case} {which}");
            assert!(err.error.contains(reason), "{case} {which}: {}", err.error);
            let line = format!("hog: {how} starting");
            assert!(err.error.contains(&line), "{case} {which}: {}", err.error);
            let stopped = err.stopped.expect("the host made the error");
            assert!(stopped.stderr_tail.contains(&line), "{case} {which}");
            assert!(stopped.exit.is_some_and(|e| !e.success()), "{case} {which}");
        }
        // The session is over: a further call is an error value too, not a hang.
        match client.start("late", "ok", Value::Null).await {
            Err(AtpFailure::Stopped(s)) if !s.violation => {
                assert!(s.reason.contains(reason), "{case}: {}", s.reason);
            }
            other => panic!("{case}: expected Stopped, got {other:?}"),
        }
        assert!(!client.done(GRACE).await.success(), "{case}");
    }
}

#[tokio::test]
async fn done_lets_a_well_behaved_plugin_exit_and_kills_a_stubborn_one() {
    let host = common::host();
    for target in [Target::Wasm, Target::Native] {
        // Well behaved: client done, stdin closes, it exits 0 within the grace period. The
        // deferred run finishes when the plugin handles client done (stdin closing alone
        // would drop it), so its result proves client done went out first.
        let session = start(&host, "example-atp", target, &Policy::default()).await;
        let (client, _) = AtpClient::connect(session).await.expect("hello");
        let run = client
            .start("a", "greet", cbor(json!({"name": "Ada", "defer": true})))
            .await
            .expect("start");
        assert_eq!(client.done(GRACE).await, Exit::Exited(0), "{target:?}");
        let out = run.result().await.expect("finished after client done");
        assert_eq!(to_json(&out.output_data), json!({"message": "Hello, Ada!"}));

        // Stubborn: it ignores client done and stdin closing. Native gets a real SIGTERM
        // after the grace period, whose default action ends it; wasm cannot take signals and
        // is killed. A run left in flight learns how the plugin ended.
        let policy = Policy::default().arg("stubborn");
        let session = start(&host, "atp-hog", target, &policy).await;
        let (client, _) = AtpClient::connect(session).await.expect("hello");
        let held = client
            .start("held", "hold", Value::Null)
            .await
            .expect("start held");
        let exit = client.done(Duration::from_millis(300)).await;
        match target {
            Target::Native => assert_eq!(exit, Exit::Killed { signal: Some(15) }),
            _ => assert!(matches!(exit, Exit::Killed { .. }), "{target:?}: {exit:?}"),
        }
        let err = held.result().await.expect_err("killed");
        assert!(err.step_fatal && err.server_fatal, "{err:?}");
        assert_eq!(err.stopped.and_then(|s| s.exit), Some(exit), "{target:?}");
        assert!(err.error.contains("killed"), "{target:?}: {}", err.error);
    }
}

#[tokio::test]
async fn a_plugin_that_does_not_speak_atp_is_refused_at_connect() {
    let host = common::host();
    for target in [Target::Wasm, Target::Native] {
        // The oracle plugin greets with a JSON line: its first byte `{` reads as the head of
        // a CBOR text string whose 8-byte length (`"jsonrpc`) is far beyond the frame limit.
        let session = start(&host, "oracle-hog", target, &Policy::default()).await;
        match AtpClient::connect(session).await {
            Err(AtpFailure::Stopped(Stopped {
                reason,
                violation: true,
                exit: Some(exit),
                ..
            })) => {
                assert!(
                    reason.contains("bad frame from plugin: frame of")
                        && reason.contains("exceeds max_frame_bytes"),
                    "{target:?}: {reason}"
                );
                assert!(!exit.success(), "{target:?}: {exit:?}");
            }
            other => panic!("{target:?}: expected a protocol violation, got {other:?}"),
        }
    }
}
