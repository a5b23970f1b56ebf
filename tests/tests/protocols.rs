//! Protocol-correct failure: a plugin stopped mid-request gives every pending request the
//! protocol's own error, carrying the reason and the plugin's stderr tail. And text on stdout
//! before the first frame is a precise error that quotes it, not a hang.

mod common;

use sandpipe_proto::denobridge::ProviderKind;
use std::time::Duration;

use sandpipe::protocols::denobridge::DenoBridgeClient;
use sandpipe::protocols::jsonrpc::RpcError;
use sandpipe::protocols::oracle::OracleClient;
use sandpipe::{Host, Policy, Session};
use sandpipe_proto::frame::Framing;
use sandpipe_proto::jsonrpc::{ErrorCode, INTERNAL_ERROR};
use sandpipe_proto::oracle::ErrorOrigin;
use sandpipe_tests::Target;
use serde_json::json;

async fn start(host: &Host, bin: &str, target: Target, policy: &Policy) -> Session {
    common::start(host, bin, target, policy, Framing::JsonLines).await
}

/// (target, misbehaviour, policy, the reason the error must name)
fn stops() -> Vec<(Target, &'static str, Policy, &'static str)> {
    common::stops()
}

#[tokio::test]
async fn oracle_stopped_mid_invoke_gets_an_oracle_error_with_the_stderr_tail() {
    let host = common::host();
    for (target, how, policy, reason) in stops() {
        let session = start(&host, "oracle-hog", target, &policy).await;
        let mut client = OracleClient::connect(session).await.expect("ready");
        // A well-behaved call first: the session works until the bad one.
        let one = sandpipe_proto::oracle::Felt::from(1u128);
        assert_eq!(
            client
                .invoke("echo", std::slice::from_ref(&one))
                .await
                .expect("echo"),
            vec![one.clone()]
        );
        let err = client.invoke(how, &[]).await.expect_err("stopped");
        assert_eq!(err.origin, ErrorOrigin::Host, "{target:?} {how}: {err:?}");
        assert_eq!(err.code, ErrorCode::Int(INTERNAL_ERROR));
        assert!(
            err.message.contains(reason),
            "{target:?} {how}: {}",
            err.message
        );
        let data = err.data.expect("data");
        let line = json!(format!("hog: {how} starting"));
        assert!(
            data["stderr"].as_array().is_some_and(|l| l.contains(&line)),
            "{target:?} {how}: {data}"
        );
        // The session is over: a further invoke is an error value too, not a hang.
        assert!(client.invoke("echo", &[]).await.is_err());
    }
}

#[tokio::test]
async fn denobridge_stopped_with_two_requests_pending_fails_both_with_json_rpc_errors() {
    let host = common::host();
    for (target, how, policy, reason) in stops() {
        let session = start(&host, "denobridge-hog", target, &policy).await;
        let (client, _health) = DenoBridgeClient::connect(session, ProviderKind::Resource)
            .await
            .expect("health");
        let held = sandpipe_proto::denobridge::PropsParams::new(json!({"defer": true}));
        let hog = sandpipe_proto::denobridge::PropsParams::new(json!({"hog": how}));
        // The first is held by the plugin until the second is answered; the second never is.
        let (first, second) = common::first_then(client.create(&held), client.create(&hog)).await;
        for (which, result) in [("held", first), ("hog", second)] {
            match result {
                Err(RpcError::Failed { error, stopped }) if !stopped.violation => {
                    let stderr_tail = stopped.stderr_tail;
                    assert_eq!(
                        error.code,
                        ErrorCode::Int(INTERNAL_ERROR),
                        "{target:?} {how} {which}"
                    );
                    assert!(
                        error.message.contains(reason),
                        "{target:?} {how} {which}: {}",
                        error.message
                    );
                    let data = error.data.expect("data");
                    assert!(
                        data["reason"].as_str().is_some_and(|r| r.contains(reason)),
                        "{data}"
                    );
                    let line = format!("hog: {how} starting");
                    assert!(
                        data["stderr"]
                            .as_array()
                            .is_some_and(|l| l.contains(&json!(line))),
                        "{data}"
                    );
                    assert!(stderr_tail.contains(&line), "{stderr_tail:?}");
                }
                other => {
                    panic!("{target:?} {how} {which}: expected a JSON-RPC failure, got {other:?}")
                }
            }
        }
    }
}

#[tokio::test]
async fn orchard_stopped_with_two_executes_pending_fails_both_with_execute_failed() {
    use sandpipe::protocols::orchard::OrchardClient;
    let host = common::host();
    for (target, how, policy, reason) in stops() {
        let session = start(&host, "orchard-hog", target, &policy).await;
        let client = OrchardClient::connect(session, sandpipe_proto::orchard::DESCRIBE_TIMEOUT)
            .await
            .expect("describe");
        assert_eq!(client.schema().name, "orchard-hog");
        client.configure(json!({})).await.expect("configure");
        let (held, hog) = common::first_then(
            client.execute("ok", json!({"defer": true})),
            client.execute("hog", json!({"how": how})),
        )
        .await;
        for (which, result) in [("held", held), ("hog", hog)] {
            let err = result.expect_err("stopped");
            assert_eq!(
                err.code, "execute_failed",
                "{target:?} {how} {which}: {err:?}"
            );
            assert!(!err.from_provider);
            assert!(
                err.message.contains(reason),
                "{target:?} {how} {which}: {}",
                err.message
            );
            let detail = err.detail.unwrap_or_default();
            assert!(
                detail.contains(&format!("hog: {how} starting")),
                "{target:?} {how} {which}: {detail}"
            );
        }
    }
}

#[tokio::test]
async fn orchard_refuses_a_provider_that_misses_its_describe_deadline() {
    use sandpipe::protocols::orchard::OrchardClient;
    let host = common::host();
    // sleep-stdin never answers anything.
    let session = start(&host, "sleep-stdin", Target::Wasm, &Policy::default()).await;
    let err = OrchardClient::connect(session, Duration::from_millis(300))
        .await
        .expect_err("no describe");
    assert_eq!(err.code, "internal_error");
    assert!(
        err.message.contains("describe got no answer within 300ms"),
        "{}",
        err.message
    );
}

#[tokio::test]
async fn text_before_the_first_frame_is_quoted_in_the_error() {
    let host = common::host();
    let quoted = r"warming up \x1b[1mthe\x1b[0m plugin";
    for target in [Target::Wasm, Target::Native] {
        let policy = Policy::default().arg("junk-first");
        let session = start(&host, "oracle-hog", target, &policy).await;
        let err = OracleClient::connect(session).await.expect_err("junk");
        assert!(err.message.contains(quoted), "{target:?}: {}", err.message);

        let session = start(&host, "denobridge-hog", target, &policy).await;
        match DenoBridgeClient::connect(session, ProviderKind::Resource).await {
            Err(RpcError::Failed { error, stopped }) if stopped.violation => {
                assert!(
                    error.message.contains(quoted),
                    "{target:?}: {}",
                    error.message
                );
            }
            other => panic!("{target:?}: expected a protocol failure, got {other:?}"),
        }
    }
}
