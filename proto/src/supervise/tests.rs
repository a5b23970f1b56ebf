//! The supervisor on a virtual clock: an engine script on one side, a fake plugin per protocol
//! on the other (it answers everything but a frame naming `spin`), time advanced by hand.

use std::collections::VecDeque;

use serde_json::json;

use super::*;
use crate::{atp, denobridge, finecode, jsonrpc, oracle, orchard};

/// A plugin in memory: what it says when it starts, and its answers to a frame.
#[derive(Clone, Copy)]
struct Fake {
    start: fn(InstanceId) -> Vec<Vec<u8>>,
    answer: fn(&[u8]) -> Vec<Vec<u8>>,
}

fn silent(_: InstanceId) -> Vec<Vec<u8>> {
    Vec::new()
}

/// JSON-RPC: every request gets `{"result": {"ok": method}}` unless it names `spin`.
fn answers_requests(frame: &[u8]) -> Vec<Vec<u8>> {
    if contains(frame, b"spin") {
        return Vec::new();
    }
    let Ok(v) = serde_json::from_slice::<Value>(frame) else {
        return Vec::new();
    };
    match (v.get("id"), v.get("method")) {
        (Some(id), Some(method)) => {
            vec![to_vec(
                json!({"jsonrpc":"2.0","id":id,"result":{"ok":method}}),
            )]
        }
        _ => Vec::new(),
    }
}

/// The Cairo oracle: `ready` (id 100 + instance) first, then invokes answered.
fn oracle_ready(instance: InstanceId) -> Vec<Vec<u8>> {
    vec![to_vec(
        json!({"jsonrpc":"2.0","id":100 + instance.0,"method":"ready","params":{}}),
    )]
}

fn oracle_answers(frame: &[u8]) -> Vec<Vec<u8>> {
    let v: Value = serde_json::from_slice(frame).unwrap_or(Value::Null);
    if v.get("method") == Some(&json!("invoke")) && !contains(frame, b"spin") {
        return vec![to_vec(
            json!({"jsonrpc":"2.0","id":v["id"],"result":["0x1"]}),
        )];
    }
    Vec::new()
}

/// ATP v3: the start item gets the hello; a work start its work done unless it names `spin`.
fn atp_answers(frame: &[u8]) -> Vec<Vec<u8>> {
    if frame == atp::START_ITEM {
        return vec![hello()];
    }
    match atp::Message::decode(frame) {
        Ok(atp::Message::WorkStart { run_id, .. }) if !contains(frame, b"spin") => {
            vec![work_done(&run_id)]
        }
        _ => Vec::new(),
    }
}

fn hello() -> Vec<u8> {
    atp::Hello {
        version: atp::Version::V3,
        schema: atp::Value::Map(vec![(
            atp::Value::Text("steps".into()),
            atp::Value::Map(vec![]),
        )]),
        extra: Vec::new(),
    }
    .encode()
}

fn work_done(run_id: &str) -> Vec<u8> {
    atp::Message::WorkDone {
        run_id: run_id.into(),
        output: atp::Output::new("success", atp::Value::Null),
    }
    .encode()
}

fn work_start(run_id: &str, step: &str) -> Vec<u8> {
    atp::Message::WorkStart {
        run_id: run_id.into(),
        step_id: step.into(),
        config: atp::Value::Null,
    }
    .encode()
}

fn contains(frame: &[u8], what: &[u8]) -> bool {
    frame.windows(what.len()).any(|w| w == what)
}

fn to_vec(v: Value) -> Vec<u8> {
    serde_json::to_vec(&v).expect("json")
}

fn json_of(frame: &[u8]) -> Value {
    serde_json::from_slice(frame).unwrap_or_else(|e| panic!("{e}: {frame:?}"))
}

/// The supervisor, its fake plugin and the engine's view, on a clock that moves by hand.
struct Harness {
    sup: Supervisor,
    fake: Fake,
    now: Instant,
    /// What each `MeasureMemory` reads.
    memory: Option<u64>,
    /// Frames the fake plugin has written and the supervisor has not read yet.
    from_plugin: VecDeque<(InstanceId, Vec<u8>)>,
    to_engine: Vec<Vec<u8>>,
    to_plugin: Vec<(InstanceId, Vec<u8>)>,
    started: Vec<(InstanceId, Cause)>,
    begun: Vec<InstanceId>,
    killed: Vec<InstanceId>,
    retired: Vec<InstanceId>,
    closed: Vec<InstanceId>,
    incidents: Vec<Incident>,
}

impl Harness {
    fn new(rules: Box<dyn SupervisedProtocol>, fake: Fake, budgets: Budgets) -> Self {
        let mut h = Harness {
            sup: Supervisor::new(rules, budgets),
            fake,
            now: Instant::now(),
            memory: None,
            from_plugin: VecDeque::new(),
            to_engine: Vec::new(),
            to_plugin: Vec::new(),
            started: Vec::new(),
            begun: Vec::new(),
            killed: Vec::new(),
            retired: Vec::new(),
            closed: Vec::new(),
            incidents: Vec::new(),
        };
        h.run();
        h
    }

    /// Carry out actions, and feed the fake plugin's output back, until both are quiet.
    fn run(&mut self) {
        loop {
            while let Some(action) = self.sup.poll_action() {
                match action {
                    Action::Start { instance, cause } => {
                        self.started.push((instance, cause));
                        for f in (self.fake.start)(instance) {
                            self.from_plugin.push_back((instance, f));
                        }
                    }
                    Action::BeginRequest { instance } => self.begun.push(instance),
                    Action::ToPlugin { instance, frame } => {
                        for f in (self.fake.answer)(&frame) {
                            self.from_plugin.push_back((instance, f));
                        }
                        self.to_plugin.push((instance, frame));
                    }
                    Action::ToEngine(frame) => self.to_engine.push(frame),
                    Action::Incident(i) => self.incidents.push(i),
                    Action::Refused { .. } => {}
                    Action::MeasureMemory { instance } => {
                        self.sup.handle_memory(instance, self.memory, self.now)
                    }
                    Action::Kill { instance } => self.killed.push(instance),
                    Action::CloseStdin { instance } => self.closed.push(instance),
                    Action::Retire { instance, .. } => self.retired.push(instance),
                }
            }
            match self.from_plugin.pop_front() {
                Some((instance, frame)) => self.sup.handle_plugin_frame(instance, &frame, self.now),
                None => return,
            }
        }
    }

    fn engine(&mut self, frame: Vec<u8>) {
        assert!(
            self.sup.accepts_engine_frames(),
            "the engine is not read now"
        );
        self.sup.handle_engine_frame(frame, self.now);
        self.run();
    }

    fn engine_json(&mut self, v: Value) {
        self.engine(to_vec(v));
    }

    fn close_engine(&mut self) {
        self.sup.handle_engine_closed(self.now);
        self.run();
    }

    /// The plugin writes `frame` (outside the fake's script).
    fn plugin(&mut self, instance: InstanceId, frame: Vec<u8>) {
        self.sup.handle_plugin_frame(instance, &frame, self.now);
        self.run();
    }

    fn stop(&mut self, instance: InstanceId, exit: Exit, tail: &[&str]) {
        let ended = Ended {
            exit,
            stderr_tail: tail.iter().map(|s| s.to_string()).collect(),
            framing_error: None,
        };
        self.sup.handle_plugin_stopped(instance, ended, self.now);
        self.run();
    }

    /// Move the clock, firing the timeout when it is due on the way.
    fn advance(&mut self, by: Duration) {
        let until = self.now + by;
        while let Some(due) = self.sup.poll_timeout().filter(|due| *due <= until) {
            self.now = due;
            self.sup.handle_timeout(self.now);
            self.run();
        }
        self.now = until;
    }

    fn current(&self) -> InstanceId {
        self.started.last().expect("an instance").0
    }

    fn take_engine(&mut self) -> Vec<Vec<u8>> {
        std::mem::take(&mut self.to_engine)
    }

    fn take_plugin(&mut self) -> Vec<(InstanceId, Vec<u8>)> {
        std::mem::take(&mut self.to_plugin)
    }

    fn report(&self) -> &Report {
        self.sup.report()
    }
}

fn restarting(fuel: u64) -> Budgets {
    Budgets {
        restart: true,
        fuel_per_request: Some(fuel),
        ..Budgets::default()
    }
}

/// One protocol's script for `every_protocol_…`.
struct Case {
    name: &'static str,
    rules: Box<dyn SupervisedProtocol>,
    fake: Fake,
    /// The engine's handshake, as it sends it (the oracle's is its answer to `ready`).
    handshake: fn(&mut Harness),
    /// Request `n`, spinning or not.
    request: fn(n: i64, spin: bool) -> Vec<u8>,
    /// Check the error for request `n`, whose reason contains `reason`.
    check_error: fn(frame: &[u8], n: i64, reason: &str),
    /// Check the answer to request `n`.
    check_answer: fn(frame: &[u8], n: i64),
}

fn jsonrpc_request(method: &'static str) -> fn(i64, bool) -> Vec<u8> {
    match method {
        "create" => |n, spin| {
            to_vec(json!({"jsonrpc":"2.0","id":n,"method":"create",
                "params":{"props":{"hog": if spin {"spin"} else {"no"}}}}))
        },
        "execute" => |n, spin| {
            to_vec(json!({"id":n,"method":"execute",
                "params":{"action": if spin {"spin"} else {"ok"},"attrs":{}}}))
        },
        "actions/run" => |n, spin| {
            to_vec(json!({"jsonrpc":"2.0","id":n,"method":"actions/run",
                "params":{"actionName": if spin {"spin"} else {"fine"}}}))
        },
        "invoke" => |n, spin| {
            to_vec(json!({"jsonrpc":"2.0","id":n,"method":"invoke",
                "params":{"selector": if spin {"spin"} else {"echo"},"calldata":["0x1"]}}))
        },
        _ => |n, spin| {
            to_vec(json!({"jsonrpc":"2.0","id":n,"method": if spin {"spin"} else {"work"}}))
        },
    }
}

/// A JSON-RPC 2.0 error with the internal-error code, the reason in its message and data.
fn internal_error(frame: &[u8], n: i64, reason: &str) {
    let v = json_of(frame);
    assert_eq!(v["id"], json!(n), "{v}");
    assert_eq!(v["error"]["code"], json!(-32603), "{v}");
    let message = v["error"]["message"].as_str().expect("a message");
    assert!(message.contains(reason), "{v}");
    assert_eq!(
        v["error"]["data"]["stderr"],
        json!(["hog: spin starting"]),
        "{v}"
    );
}

fn answer_with_id(frame: &[u8], n: i64) {
    let v = json_of(frame);
    assert_eq!(v["id"], json!(n), "{v}");
    assert!(v.get("result").is_some(), "{v}");
}

fn cases() -> Vec<Case> {
    vec![
        Case {
            name: "jsonrpc",
            rules: Box::new(jsonrpc::Supervised),
            fake: Fake {
                start: silent,
                answer: answers_requests,
            },
            handshake: |_| {},
            request: jsonrpc_request("work"),
            check_error: internal_error,
            check_answer: answer_with_id,
        },
        Case {
            name: "oracle",
            rules: Box::new(oracle::Supervised),
            fake: Fake {
                start: oracle_ready,
                answer: oracle_answers,
            },
            handshake: |h| {
                let ready = json_of(&h.take_engine().pop().expect("ready"));
                assert_eq!(ready["method"], "ready");
                h.engine_json(json!({"jsonrpc":"2.0","id":ready["id"],"result":{}}));
            },
            request: jsonrpc_request("invoke"),
            check_error: |frame, n, reason| {
                internal_error(frame, n, reason);
                let message = json_of(frame)["error"]["message"].to_string();
                assert!(message.contains("oracle failed"), "{message}");
            },
            check_answer: |frame, n| {
                assert_eq!(
                    json_of(frame),
                    json!({"jsonrpc":"2.0","id":n,"result":["0x1"]})
                );
            },
        },
        Case {
            name: "orchard",
            rules: Box::new(orchard::Supervised),
            fake: Fake {
                start: silent,
                answer: answers_requests,
            },
            handshake: |h| {
                h.engine_json(json!({"id":1,"method":"describe","params":{}}));
                h.engine_json(json!({"id":2,"method":"configure","params":{"config":{}}}));
                let ids: Vec<Value> = h
                    .take_engine()
                    .iter()
                    .map(|f| json_of(f)["id"].clone())
                    .collect();
                assert_eq!(ids, [json!(1), json!(2)]);
            },
            request: jsonrpc_request("execute"),
            check_error: |frame, n, reason| {
                let v = json_of(frame);
                assert_eq!(v["id"], json!(n), "{v}");
                assert!(v.get("jsonrpc").is_none(), "the Orchard dialect: {v}");
                assert_eq!(v["error"]["code"], "execute_failed", "{v}");
                assert!(
                    v["error"]["message"]
                        .as_str()
                        .expect("a message")
                        .contains(reason)
                );
            },
            check_answer: answer_with_id,
        },
        Case {
            name: "denobridge",
            rules: Box::new(denobridge::Supervised),
            fake: Fake {
                start: silent,
                answer: answers_requests,
            },
            handshake: |h| {
                h.engine_json(json!({"jsonrpc":"2.0","id":0,"method":"health"}));
                assert_eq!(json_of(&h.take_engine()[0])["id"], json!(0));
            },
            request: jsonrpc_request("create"),
            check_error: |frame, n, reason| {
                internal_error(frame, n, reason);
                let v = json_of(frame);
                assert!(
                    v["error"]["data"]["reason"]
                        .as_str()
                        .expect("a reason")
                        .contains(reason)
                );
            },
            check_answer: answer_with_id,
        },
        Case {
            name: "finecode",
            rules: Box::new(finecode::Supervised),
            fake: Fake {
                start: silent,
                answer: answers_requests,
            },
            handshake: |h| {
                h.engine_json(json!({"jsonrpc":"2.0","id":-1,"method":"initialize",
                    "params":{"processId":1,"capabilities":{}}}));
                h.engine_json(json!({"jsonrpc":"2.0","method":"initialized","params":{}}));
                assert_eq!(h.take_engine().len(), 1, "the initialize result");
            },
            request: jsonrpc_request("actions/run"),
            check_error: internal_error,
            check_answer: answer_with_id,
        },
        Case {
            name: "atp",
            rules: Box::new(atp::Supervised),
            fake: Fake {
                start: silent,
                answer: atp_answers,
            },
            handshake: |h| {
                h.engine(atp::START_ITEM.to_vec());
                let hello = atp::Hello::decode(&h.take_engine()[0]).expect("hello");
                assert_eq!(hello.version, atp::Version::V3);
            },
            request: |n, spin| work_start(&format!("r{n}"), if spin { "spin" } else { "ok" }),
            check_error: |frame, n, reason| match atp::Message::decode(frame) {
                Ok(atp::Message::Error {
                    run_id,
                    error,
                    step_fatal,
                    server_fatal,
                }) => {
                    assert_eq!(run_id, format!("r{n}"));
                    assert!(error.contains(reason), "{error}");
                    assert!(error.ends_with("stderr:\nhog: spin starting"), "{error}");
                    assert!(step_fatal && !server_fatal);
                }
                other => panic!("an error for r{n}, got {other:?}"),
            },
            check_answer: |frame, n| match atp::Message::decode(frame) {
                Ok(atp::Message::WorkDone { run_id, .. }) => assert_eq!(run_id, format!("r{n}")),
                other => panic!("r{n}'s work done, got {other:?}"),
            },
        },
    ]
}

#[test]
fn every_protocol_fails_a_runaway_request_with_its_own_error_and_the_next_succeeds_on_a_fresh_instance()
 {
    const REASON: &str = "request ran out of fuel (limit 100 per request)";
    for case in cases() {
        let name = case.name;
        let mut h = Harness::new(case.rules, case.fake, restarting(100));
        (case.handshake)(&mut h);
        let first = h.current();
        let handshake: Vec<Vec<u8>> = h
            .take_plugin()
            .into_iter()
            .filter(|(_, f)| !contains(f, b"\"result\"")) // the oracle's `ready` answer is not replayed
            .map(|(_, f)| f)
            .collect();

        // The runaway request: forwarded after its budget is re-armed, then the instance stops.
        h.engine((case.request)(10, true));
        assert_eq!(h.begun, [first], "{name}");
        assert_eq!(h.take_plugin().len(), 1, "{name}");
        assert!(h.take_engine().is_empty(), "{name}");
        h.stop(
            first,
            Exit::OutOfFuel { limit: 100 },
            &["hog: spin starting"],
        );
        let failed = h.take_engine();
        assert_eq!(failed.len(), 1, "{name}: one error, once");
        (case.check_error)(&failed[0], 10, REASON);
        assert!(h.sup.accepts_engine_frames(), "{name}");

        // The next request starts a fresh instance lazily; the handshake is replayed to it and
        // its answers (and the oracle's `ready`, the ATP hello) stay here.
        h.engine((case.request)(11, false));
        let fresh = h.current();
        assert_eq!(
            h.started,
            [(first, Cause::First), (fresh, Cause::Restart)],
            "{name}"
        );
        let sent: Vec<Vec<u8>> = h
            .take_plugin()
            .into_iter()
            .map(|(i, f)| {
                assert_eq!(i, fresh, "{name}");
                f
            })
            .collect();
        let replayed = &sent[..sent.len() - 1];
        let replayed: Vec<&Vec<u8>> = replayed
            .iter()
            .filter(|f| !contains(f, b"\"result\""))
            .collect();
        assert_eq!(replayed.len(), handshake.len(), "{name}: {sent:?}");
        for (a, b) in replayed.iter().zip(&handshake) {
            assert_eq!(*a, b, "{name}");
        }
        assert_eq!(sent.last(), Some(&(case.request)(11, false)), "{name}");
        let answers = h.take_engine();
        assert_eq!(answers.len(), 1, "{name}: only the answer, {answers:?}");
        (case.check_answer)(&answers[0], 11);
        assert_eq!(h.begun, [first, fresh], "{name}");

        h.close_engine();
        assert_eq!(h.closed, [fresh], "{name}");
        h.stop(fresh, Exit::Exited(0), &[]);
        assert!(h.sup.is_done(), "{name}");
        let report = h.sup.into_report();
        assert_eq!(report.incidents.len(), 1, "{name}: {report:?}");
        assert_eq!(report.incidents[0].reason, REASON, "{name}");
        assert!(report.incidents[0].restarting, "{name}");
        assert_eq!(
            report.incidents[0].exit,
            Some(Exit::OutOfFuel { limit: 100 })
        );
        assert_eq!((report.requests, report.answered), (2, 1), "{name}");
        assert_eq!((report.restarts, report.recycles), (1, 0), "{name}");
        assert!(!report.stopped, "{name}");
        assert_eq!(report.exit, Exit::Exited(0), "{name}");
    }
}

#[test]
fn a_fresh_oracle_gets_the_engines_recorded_ready_answer_under_its_own_id() {
    let fake = Fake {
        start: oracle_ready,
        answer: oracle_answers,
    };
    let mut h = Harness::new(Box::new(oracle::Supervised), fake, restarting(100));
    let ready = json_of(&h.take_engine()[0]);
    assert_eq!(ready["id"], json!(100));
    h.engine_json(json!({"jsonrpc":"2.0","id":100,"result":{"v":7}}));
    h.engine(jsonrpc_request("invoke")(1, true));
    h.stop(InstanceId(0), Exit::OutOfFuel { limit: 100 }, &[]);
    h.take_engine();
    h.take_plugin();
    h.engine(jsonrpc_request("invoke")(2, false));
    let sent = h.take_plugin();
    assert_eq!(
        json_of(&sent[0].1),
        json!({"jsonrpc":"2.0","id":101,"result":{"v":7}}),
        "the recorded answer, under the fresh instance's id"
    );
    assert_eq!(sent[1].1, jsonrpc_request("invoke")(2, false));
    let to_engine: Vec<Value> = h.take_engine().iter().map(|f| json_of(f)).collect();
    assert_eq!(
        to_engine,
        [json!({"jsonrpc":"2.0","id":2,"result":["0x1"]})]
    );
}

#[test]
fn an_engine_that_answers_ready_before_reading_it_is_still_recorded() {
    let fake = Fake {
        start: silent,
        answer: oracle_answers,
    };
    let mut h = Harness::new(Box::new(oracle::Supervised), fake, restarting(100));
    h.engine_json(json!({"jsonrpc":"2.0","id":100,"result":{}}));
    h.plugin(InstanceId(0), oracle_ready(InstanceId(0)).remove(0));
    h.engine(jsonrpc_request("invoke")(1, true));
    h.stop(InstanceId(0), Exit::Exited(1), &[]);
    h.take_plugin();
    h.engine(jsonrpc_request("invoke")(2, false));
    // The fresh instance must say `ready` first: the invoke waits for it.
    assert!(!h.sup.accepts_engine_frames());
    assert!(h.take_plugin().is_empty());
    h.plugin(InstanceId(1), oracle_ready(InstanceId(1)).remove(0));
    let sent = h.take_plugin();
    assert_eq!(json_of(&sent[0].1)["id"], json!(101));
    assert_eq!(sent[1].1, jsonrpc_request("invoke")(2, false));
}

/// The replay waits for each handshake answer before the next frame, and the engine frames
/// that arrive meanwhile wait too.
#[test]
fn the_handshake_is_replayed_one_answer_at_a_time() {
    let fake = Fake {
        start: silent,
        answer: |_| Vec::new(), // answers by hand
    };
    let mut h = Harness::new(Box::new(orchard::Supervised), fake, restarting(1));
    let describe = to_vec(json!({"id":1,"method":"describe","params":{}}));
    let configure = to_vec(json!({"id":2,"method":"configure","params":{}}));
    h.engine(describe.clone());
    h.plugin(InstanceId(0), to_vec(json!({"id":1,"result":{}})));
    h.engine(configure.clone());
    h.plugin(InstanceId(0), to_vec(json!({"id":2,"result":{}})));
    h.stop(InstanceId(0), Exit::Exited(0), &[]);
    h.take_plugin();
    h.take_engine();

    let execute = jsonrpc_request("execute")(3, false);
    h.engine(execute.clone());
    let fresh = InstanceId(1);
    assert_eq!(h.take_plugin(), [(fresh, describe)]);
    h.plugin(fresh, to_vec(json!({"id":1,"result":{}})));
    assert_eq!(h.take_plugin(), [(fresh, configure)]);
    // A stray answer under another id is the engine's business.
    h.plugin(fresh, to_vec(json!({"id":9,"result":{}})));
    assert_eq!(h.take_engine().len(), 1);
    h.plugin(fresh, to_vec(json!({"id":2,"result":{}})));
    assert_eq!(h.take_plugin(), [(fresh, execute)]);
    assert!(h.take_engine().is_empty(), "the replayed answers stay here");
    assert!(h.sup.accepts_engine_frames());
}

#[test]
fn a_request_over_its_timeout_stops_the_instance_and_reports_the_deadline() {
    let b = Budgets {
        restart: true,
        request_timeout: Some(Duration::from_millis(500)),
        ..Budgets::default()
    };
    let fake = Fake {
        start: silent,
        answer: answers_requests,
    };
    let mut h = Harness::new(Box::new(jsonrpc::Supervised), fake, b);
    assert_eq!(h.sup.poll_timeout(), None, "nothing pending, no deadline");
    let t0 = h.now;
    h.engine(jsonrpc_request("work")(1, true));
    assert_eq!(h.sup.poll_timeout(), Some(t0 + Duration::from_millis(500)));
    h.advance(Duration::from_millis(499));
    assert!(h.killed.is_empty());
    h.advance(Duration::from_millis(1));
    assert_eq!(h.killed, [InstanceId(0)]);
    assert_eq!(h.sup.poll_timeout(), None, "once is enough");
    h.stop(InstanceId(0), Exit::Killed { signal: None }, &[]);
    let err = json_of(&h.take_engine()[0]);
    assert_eq!(
        err["error"]["message"],
        "request 1 timed out after 500ms (request timeout)"
    );
    let limit = Duration::from_millis(500);
    assert_eq!(h.report().exit, Exit::DeadlineExceeded { limit });
    assert_eq!(
        h.report().incidents[0].exit,
        Some(Exit::DeadlineExceeded { limit })
    );
    // The next request runs on a fresh instance with its own deadline.
    h.engine(jsonrpc_request("work")(2, false));
    assert_eq!(json_of(&h.take_engine()[0])["id"], json!(2));
    assert_eq!(h.report().restarts, 1);
}

#[test]
fn idle_time_between_requests_is_not_billed() {
    let b = Budgets {
        request_timeout: Some(Duration::from_millis(400)),
        ..Budgets::default()
    };
    let fake = Fake {
        start: silent,
        answer: |_| Vec::new(),
    };
    let mut h = Harness::new(Box::new(jsonrpc::Supervised), fake, b);
    for id in 1..=3 {
        // Idle for longer than the request timeout, three times over.
        h.advance(Duration::from_millis(600));
        h.engine(jsonrpc_request("work")(id, false));
        h.advance(Duration::from_millis(399));
        h.plugin(
            InstanceId(0),
            to_vec(json!({"jsonrpc":"2.0","id":id,"result":1})),
        );
    }
    assert!(h.killed.is_empty());
    assert_eq!(h.report().answered, 3);
    assert!(h.report().incidents.is_empty());
}

#[test]
fn the_oldest_pending_request_sets_the_deadline_and_its_answer_moves_it() {
    let b = Budgets {
        request_timeout: Some(Duration::from_secs(1)),
        ..Budgets::default()
    };
    let fake = Fake {
        start: silent,
        answer: |_| Vec::new(),
    };
    let mut h = Harness::new(Box::new(jsonrpc::Supervised), fake, b);
    let t0 = h.now;
    h.engine(jsonrpc_request("work")(1, false));
    h.advance(Duration::from_millis(300));
    h.engine(jsonrpc_request("work")(2, false));
    assert_eq!(h.sup.poll_timeout(), Some(t0 + Duration::from_secs(1)));
    h.plugin(
        InstanceId(0),
        to_vec(json!({"jsonrpc":"2.0","id":1,"result":1})),
    );
    assert_eq!(h.sup.poll_timeout(), Some(t0 + Duration::from_millis(1300)));
    // Each request re-arms the fuel budget as it is forwarded.
    assert_eq!(h.begun, [InstanceId(0), InstanceId(0)]);
    h.advance(Duration::from_secs(1));
    assert_eq!(h.killed, [InstanceId(0)]);
    h.stop(InstanceId(0), Exit::Killed { signal: None }, &[]);
    assert!(
        h.report().incidents[0]
            .reason
            .starts_with("request 2 timed out")
    );
}

#[test]
fn requests_in_flight_when_the_plugin_dies_are_answered_once_each_in_order() {
    let fake = Fake {
        start: silent,
        answer: |_| Vec::new(),
    };
    let mut h = Harness::new(Box::new(denobridge::Supervised), fake, restarting(5));
    for id in [3, 1, 2] {
        h.engine(jsonrpc_request("create")(id, false));
        h.advance(Duration::from_millis(10));
    }
    h.plugin(
        InstanceId(0),
        to_vec(json!({"jsonrpc":"2.0","id":1,"result":{}})),
    );
    h.stop(
        InstanceId(0),
        Exit::Trap {
            message: "boom".into(),
            stderr_tail: vec![],
        },
        &["x"],
    );
    // A late frame from the dead instance, and its end reported twice, change nothing.
    h.plugin(
        InstanceId(0),
        to_vec(json!({"jsonrpc":"2.0","id":2,"result":{}})),
    );
    h.stop(InstanceId(0), Exit::Exited(0), &[]);
    let ids: Vec<Value> = h
        .take_engine()
        .iter()
        .map(|f| json_of(f)["id"].clone())
        .collect();
    assert_eq!(
        ids,
        [json!(1), json!(3), json!(2)],
        "the answer, then the errors in arrival order"
    );
    let failed: Vec<&str> = h.incidents.iter().map(|i| i.request.as_str()).collect();
    assert_eq!(failed, ["3", "2"]);
    assert_eq!(h.report().incidents.len(), 2);
    assert!(
        h.report()
            .incidents
            .iter()
            .all(|i| i.reason == "plugin trapped: boom")
    );
}

#[test]
fn without_restart_a_stop_ends_the_session_with_its_limit() {
    let b = Budgets {
        fuel_per_request: Some(7),
        ..Budgets::default()
    };
    let fake = Fake {
        start: silent,
        answer: answers_requests,
    };
    let mut h = Harness::new(Box::new(jsonrpc::Supervised), fake, b);
    h.engine(jsonrpc_request("work")(1, true));
    h.stop(InstanceId(0), Exit::OutOfFuel { limit: 7 }, &[]);
    assert!(h.sup.is_done());
    assert!(!h.sup.accepts_engine_frames());
    let report = h.sup.into_report();
    assert!(report.stopped);
    assert_eq!(report.exit, Exit::OutOfFuel { limit: 7 });
    assert!(!report.incidents[0].restarting);
    assert_eq!(report.restarts, 0);
}

#[test]
fn poisoning_fails_every_later_request_with_the_first_stops_reason_until_the_engine_closes() {
    let b = Budgets {
        poison: true,
        request_timeout: Some(Duration::from_secs(2)),
        ..Budgets::default()
    };
    let fake = Fake {
        start: oracle_ready,
        answer: oracle_answers,
    };
    let mut h = Harness::new(Box::new(oracle::Supervised), fake, b);
    let ready = json_of(&h.take_engine()[0]);
    h.engine_json(json!({"jsonrpc":"2.0","id":ready["id"],"result":{}}));
    h.engine(jsonrpc_request("invoke")(1, false));
    assert_eq!(json_of(&h.take_engine()[0])["result"], json!(["0x1"]));
    // A runaway invoke: the timer stops the instance on virtual time.
    h.engine(jsonrpc_request("invoke")(2, true));
    h.advance(Duration::from_secs(2));
    assert_eq!(h.killed, [InstanceId(0)]);
    h.stop(
        InstanceId(0),
        Exit::Killed { signal: None },
        &["hog: spin starting"],
    );
    let first = h.take_engine();
    internal_error(
        &first[0],
        2,
        "request 2 timed out after 2s (request timeout)",
    );
    // Later requests: the stopped answer with the first stop's reason, no fresh instance, and
    // the session goes on (a notification in between changes nothing).
    h.engine_json(json!({"jsonrpc":"2.0","method":"shutdown-not-yet"}));
    for id in 3..=4 {
        h.engine(jsonrpc_request("invoke")(id, false));
        let answer = h.take_engine();
        assert_eq!(answer.len(), 1, "{answer:?}");
        internal_error(
            &answer[0],
            id,
            "the instance is poisoned by an earlier failure: request 2 timed out after 2s (request timeout)",
        );
    }
    assert_eq!(h.started.len(), 1, "no fresh instance");
    assert!(!h.sup.is_done() && h.sup.accepts_engine_frames());
    assert_eq!(
        h.sup.poll_timeout(),
        None,
        "nothing is timed while poisoned"
    );
    h.close_engine();
    assert!(h.sup.is_done());
    let report = h.report();
    assert_eq!(
        report.exit,
        Exit::Exited(0),
        "every request was answered in-band"
    );
    assert!(!report.stopped);
    assert_eq!(
        (report.requests, report.answered, report.incidents.len()),
        (4, 1, 3)
    );
    assert!(report.incidents.iter().all(|i| !i.restarting));
    assert!(
        report.incidents[2].exit
            == Some(Exit::DeadlineExceeded {
                limit: Duration::from_secs(2)
            })
    );
}

/// With both, restart wins: poisoning is what happens when no fresh instance is due.
#[test]
fn restart_wins_over_poison() {
    let b = Budgets {
        poison: true,
        ..restarting(5)
    };
    let fake = Fake {
        start: silent,
        answer: answers_requests,
    };
    let mut h = Harness::new(Box::new(jsonrpc::Supervised), fake, b);
    h.engine(jsonrpc_request("work")(1, true));
    h.stop(InstanceId(0), Exit::OutOfFuel { limit: 5 }, &[]);
    h.take_engine();
    h.engine(jsonrpc_request("work")(2, false));
    assert_eq!(
        json_of(&h.take_engine()[0])["result"],
        json!({"ok": "work"})
    );
    assert_eq!(h.report().restarts, 1);
}

/// A FineCode session whose first instance answered `initialize` and then exited: the next
/// request starts a fresh instance and replays the handshake to it.
fn finecode_after_a_crash() -> Harness {
    let fake = Fake {
        start: silent,
        answer: |_| Vec::new(),
    };
    let mut h = Harness::new(Box::new(finecode::Supervised), fake, restarting(5));
    h.engine_json(json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}));
    h.plugin(
        InstanceId(0),
        to_vec(json!({"jsonrpc":"2.0","id":1,"result":{}})),
    );
    h.stop(InstanceId(0), Exit::Exited(3), &[]);
    h.take_engine();
    h
}

#[test]
fn a_fresh_instance_that_dies_during_the_handshake_fails_what_it_held_and_the_next_gets_another() {
    let mut h = finecode_after_a_crash();
    // Killed from outside while its handshake is replayed: the held request fails, the session
    // goes on.
    h.engine(jsonrpc_request("actions/run")(2, false));
    h.stop(InstanceId(1), Exit::Killed { signal: Some(9) }, &["bad"]);
    let err = json_of(&h.take_engine()[0]);
    assert_eq!(err["id"], json!(2));
    assert_eq!(
        err["error"]["message"],
        "the restarted plugin stopped during the handshake: plugin was killed by signal 9"
    );
    assert!(!h.sup.is_done());
    assert!(h.report().incidents.last().expect("incident").restarting);
    // The next request gets a third instance, which is restored and answers.
    h.engine(jsonrpc_request("actions/run")(3, false));
    h.plugin(
        InstanceId(2),
        to_vec(json!({"jsonrpc":"2.0","id":1,"result":{}})),
    );
    h.plugin(
        InstanceId(2),
        to_vec(json!({"jsonrpc":"2.0","id":3,"result":"ok"})),
    );
    let out: Vec<Value> = h.take_engine().iter().map(|f| json_of(f)).collect();
    assert_eq!(out, vec![json!({"jsonrpc":"2.0","id":3,"result":"ok"})]);
    assert_eq!(h.report().restarts, 2);
}

#[test]
fn fresh_instances_that_keep_dying_during_the_handshake_end_the_session() {
    let mut h = finecode_after_a_crash();
    for n in 1..=MAX_FAILED_RESTORES {
        assert!(!h.sup.is_done());
        h.engine(jsonrpc_request("actions/run")(i64::from(n) + 1, false));
        h.stop(InstanceId(u64::from(n)), Exit::Exited(4), &["bad"]);
        let err = json_of(&h.take_engine()[0]);
        assert_eq!(err["id"], json!(n + 1));
    }
    let last = h.report().incidents.last().expect("incident").clone();
    assert_eq!(
        last.reason,
        format!(
            "the restarted plugin stopped during the handshake ({MAX_FAILED_RESTORES} times in a row): plugin exited with status 4 before answering"
        )
    );
    assert!(!last.restarting);
    assert!(h.sup.is_done());
    assert!(h.report().stopped);
}

#[test]
fn a_restart_that_cannot_start_fails_the_waiting_request() {
    let fake = Fake {
        start: silent,
        answer: |_| Vec::new(),
    };
    let mut h = Harness::new(Box::new(jsonrpc::Supervised), fake, restarting(5));
    h.stop(InstanceId(0), Exit::Exited(0), &[]);
    h.sup
        .handle_engine_frame(jsonrpc_request("work")(1, false), h.now);
    assert!(matches!(
        h.sup.poll_action(),
        Some(Action::Start {
            instance: InstanceId(1),
            cause: Cause::Restart
        })
    ));
    h.sup
        .handle_start_failed(InstanceId(1), "no such file", h.now);
    h.run();
    assert!(
        h.to_plugin.is_empty(),
        "nothing for the instance that never started"
    );
    let err = json_of(&h.take_engine()[0]);
    assert_eq!(
        err["error"]["message"],
        "could not restart the plugin: no such file"
    );
    assert!(h.sup.is_done());
    assert_eq!((h.report().restarts, h.report().stopped), (0, true));
}

#[test]
fn the_engine_closing_after_a_stop_ends_the_session_cleanly() {
    let fake = Fake {
        start: silent,
        answer: |_| Vec::new(),
    };
    let mut h = Harness::new(Box::new(jsonrpc::Supervised), fake, restarting(5));
    h.engine(jsonrpc_request("work")(1, true));
    h.stop(InstanceId(0), Exit::OutOfFuel { limit: 5 }, &[]);
    h.close_engine();
    assert!(h.sup.is_done());
    assert_eq!(h.report().exit, Exit::Exited(0));
    assert!(!h.report().stopped);
}

#[test]
fn a_plugin_that_breaks_the_framing_is_named_so() {
    let fake = Fake {
        start: silent,
        answer: |_| Vec::new(),
    };
    let mut h = Harness::new(Box::new(jsonrpc::Supervised), fake, Budgets::default());
    h.engine(jsonrpc_request("work")(1, false));
    let ended = Ended {
        exit: Exit::Killed { signal: None },
        stderr_tail: vec![],
        framing_error: Some("frame of 9 bytes exceeds max_frame_bytes 8".into()),
    };
    h.sup.handle_plugin_stopped(InstanceId(0), ended, h.now);
    h.run();
    assert_eq!(
        h.report().incidents[0].reason,
        "plugin broke the framing: frame of 9 bytes exceeds max_frame_bytes 8"
    );
}

#[test]
fn the_engine_gone_stops_the_plugin_and_its_end_ends_the_session() {
    let fake = Fake {
        start: silent,
        answer: answers_requests,
    };
    let mut h = Harness::new(Box::new(jsonrpc::Supervised), fake, restarting(5));
    h.sup.handle_engine_gone(h.now);
    h.run();
    assert_eq!(h.killed, [InstanceId(0)]);
    h.stop(InstanceId(0), Exit::Killed { signal: None }, &[]);
    assert!(h.sup.is_done());
    assert_eq!(h.report().restarts, 0);
}

/// Seven invokes on an oracle; what each recycling rule makes of them.
fn seven_invokes(budgets: Budgets, memory: impl Fn(u64) -> Option<u64>) -> Harness {
    let fake = Fake {
        start: oracle_ready,
        answer: oracle_answers,
    };
    let mut h = Harness::new(Box::new(oracle::Supervised), fake, budgets);
    let ready = json_of(&h.take_engine()[0]);
    h.engine_json(json!({"jsonrpc":"2.0","id":ready["id"],"result":{}}));
    for id in 1..=7 {
        h.memory = memory(id as u64);
        h.engine(jsonrpc_request("invoke")(id, false));
        // Only answers: no second `ready` ever reaches the engine.
        let answers = h.take_engine();
        assert_eq!(answers.len(), 1, "{answers:?}");
        assert_eq!(json_of(&answers[0])["id"], json!(id));
    }
    assert_eq!(h.report().answered, 7);
    assert!(h.report().incidents.is_empty());
    h
}

#[test]
fn recycling_after_n_answers_is_invisible_to_the_engine() {
    let b = Budgets {
        recycle: Recycle {
            after_requests: Some(3),
            ..Recycle::default()
        },
        ..Budgets::default()
    };
    let h = seven_invokes(b, |_| None);
    assert_eq!(h.report().recycles, 2);
    assert_eq!(h.retired, [InstanceId(0), InstanceId(1)]);
    let causes: Vec<Cause> = h.started.iter().map(|s| s.1).collect();
    assert_eq!(causes, [Cause::First, Cause::Recycle, Cause::Recycle]);
}

#[test]
fn recycling_by_memory_follows_each_reading() {
    let b = Budgets {
        recycle: Recycle {
            above_memory: Some(1000),
            ..Recycle::default()
        },
        ..Budgets::default()
    };
    // Over the limit after the 2nd and 5th answers only.
    let h = seven_invokes(b, |n| Some(if n == 2 || n == 5 { 1001 } else { 1000 }));
    assert_eq!(h.report().recycles, 2);
    assert_eq!(h.retired, [InstanceId(0), InstanceId(1)]);
    // Nothing to read: no recycling.
    let b = Budgets {
        recycle: Recycle {
            above_memory: Some(1),
            ..Recycle::default()
        },
        ..Budgets::default()
    };
    assert_eq!(seven_invokes(b, |_| None).report().recycles, 0);
}

#[test]
fn the_auto_rule_recycles_once_half_the_headroom_above_the_first_answer_is_used() {
    const MIB: u64 = 1 << 20;
    let b = Budgets {
        recycle: Recycle {
            before_cap: Some(64 * MIB),
            ..Recycle::default()
        },
        ..Budgets::default()
    };
    // 8 MiB after the first answer, 8 MiB more per answer: base 8, recycle above 8 + 28 = 36.
    let h = seven_invokes(b, |n| Some(8 * MIB * n));
    assert_eq!(h.report().recycles, 1, "after the 5th answer, at 40 MiB");
    assert_eq!(h.retired, [InstanceId(0)]);
    // A fresh instance measures its own base: 48 MiB at its first answer is its base.
    assert_eq!(h.started.len(), 2);
}

#[test]
fn recycling_waits_until_no_request_is_pending() {
    let b = Budgets {
        recycle: Recycle {
            after_requests: Some(1),
            ..Recycle::default()
        },
        ..Budgets::default()
    };
    let fake = Fake {
        start: silent,
        answer: |_| Vec::new(),
    };
    let mut h = Harness::new(Box::new(jsonrpc::Supervised), fake, b);
    h.engine(jsonrpc_request("work")(1, false));
    h.engine(jsonrpc_request("work")(2, false));
    h.plugin(
        InstanceId(0),
        to_vec(json!({"jsonrpc":"2.0","id":1,"result":1})),
    );
    assert!(h.retired.is_empty(), "request 2 is still pending");
    h.plugin(
        InstanceId(0),
        to_vec(json!({"jsonrpc":"2.0","id":2,"result":1})),
    );
    assert_eq!(h.retired, [InstanceId(0)]);
    // The retired instance's output is dropped.
    h.plugin(
        InstanceId(0),
        to_vec(json!({"jsonrpc":"2.0","method":"late"})),
    );
    assert_eq!(h.take_engine().len(), 2);
}

#[test]
fn classification_per_protocol() {
    let deno = denobridge::Supervised;
    assert_eq!(
        deno.classify_engine(br#"{"jsonrpc":"2.0","id":1,"method":"health"}"#),
        FromEngine::Handshake {
            awaits: Some("1".into())
        }
    );
    assert_eq!(
        jsonrpc::Supervised.classify_engine(br#"{"jsonrpc":"2.0","id":"1","method":"x"}"#),
        FromEngine::Request {
            key: "\"1\"".into(),
            method: Some("x".into())
        }
    );
    assert_eq!(
        jsonrpc::Supervised.classify_engine(br#"{"jsonrpc":"2.0","method":"note"}"#),
        FromEngine::Other
    );
    assert_eq!(
        jsonrpc::Supervised.classify_engine(b"not json"),
        FromEngine::Other
    );
    assert_eq!(
        oracle::Supervised.classify_plugin(br#"{"jsonrpc":"2.0","id":4,"method":"ready"}"#),
        FromPlugin::HandshakeRequest {
            id: json!(4),
            method: "ready".into()
        }
    );
    assert_eq!(
        finecode::Supervised.classify_plugin(br#"{"jsonrpc":"2.0","id":4,"error":{}}"#),
        FromPlugin::Answer { key: "4".into() }
    );
    assert_eq!(atp::Supervised.classify_plugin(&hello()), FromPlugin::Hello);
    assert_eq!(
        atp::Supervised.classify_engine(&atp::START_ITEM),
        FromEngine::Handshake { awaits: None }
    );
    assert_eq!(
        atp::Supervised.classify_plugin(&work_done("r")),
        FromPlugin::Answer { key: "r".into() }
    );
}

/// The fuzz body over a pseudo-random corpus (the same on every run): 4,000 programs of up to
/// 400 choices, every protocol and budget mix the first bytes pick. The corpus must reach
/// answers, incidents, restarts and recycles, or its checks would check nothing.
#[test]
fn fuzz_body_over_a_generated_corpus() {
    let mut state = 0x9e37_79b9_7f4a_7c15_u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let (mut answered, mut incidents, mut restarts, mut recycles) = (0, 0, 0, 0);
    for _ in 0..4_000 {
        let len = (next() % 400) as usize;
        let input: Vec<u8> = (0..len).map(|_| next() as u8).collect();
        let report = crate::fuzz::supervise::run(&input);
        answered += report.answered;
        incidents += report.incidents.len();
        restarts += report.restarts;
        recycles += report.recycles;
    }
    assert!(
        answered > 0 && incidents > 0 && restarts > 0 && recycles > 0,
        "answered {answered}, incidents {incidents}, restarts {restarts}, recycles {recycles}"
    );
}
