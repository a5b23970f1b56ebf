//! The supervisor's fuzz body: an engine, plugin instances and the clock driven by the input.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use super::Choices;
use crate::stopped::Exit;
use crate::supervise::{
    Action, Budgets, Ended, FromPlugin, Incident, InstanceId, Recycle, Report, SupervisedProtocol,
    Supervisor,
};
use crate::{atp, jsonrpc, oracle, orchard};

/// Drive one supervisor through a sequence the input chooses: engine frames (requests with a
/// few ids, answers, notifications, garbage), frames from the current instance or a stale one
/// (answers to those ids, a `ready`, an ATP hello and work done, garbage), instance ends,
/// failed starts, memory readings, the engine closing, and time passing.
///
/// Checks, besides never panicking:
/// - the engine never gets more answers under a key than it sent requests with that key, and
///   every incident is followed by its error answer;
/// - every action names an instance the supervisor started, and none after the session is done;
/// - a memory reading asked for is given before anything else, as the host's loop does.
pub fn supervisor(data: &[u8]) {
    run(data);
}

/// [`supervisor`], returning its report (the corpus test checks what it reached).
pub(crate) fn run(data: &[u8]) -> Report {
    let mut input = Choices::new(data);
    // Bare JSON-RPC, the oracle (a plugin-side handshake) and Orchard (an engine-side one)
    // cover the JSON-RPC family's classifiers; ATP its own.
    let protocol = input.below(4);
    let rules = || -> Box<dyn SupervisedProtocol> {
        match protocol {
            0 => Box::new(jsonrpc::Supervised),
            1 => Box::new(oracle::Supervised),
            2 => Box::new(orchard::Supervised),
            _ => Box::new(atp::Supervised),
        }
    };
    let (engine, plugin) = match protocol {
        3 => (atp_engine(), atp_plugin()),
        _ => (json_engine(), json_plugin()),
    };
    let classify = rules();
    let budgets = Budgets {
        request_timeout: input
            .byte()
            .is_multiple_of(2)
            .then(|| Duration::from_millis(500)),
        restart: !input.byte().is_multiple_of(4),
        poison: input.byte().is_multiple_of(5),
        recycle: Recycle {
            after_requests: input.byte().is_multiple_of(3).then_some(2),
            above_memory: input.byte().is_multiple_of(3).then_some(1 << 20),
            before_cap: None,
        },
        ..Budgets::default()
    };
    let epoch = Instant::now();
    let mut now = epoch;
    let mut sup = Supervisor::new(rules(), budgets);
    let mut check = Check::default();
    check.drain(&mut sup, &*classify, now);
    while !input.is_empty() && !sup.is_done() {
        let live = check.live.iter().copied().max();
        match input.below(10) {
            0..=2 if sup.accepts_engine_frames() => {
                let frame = pick(&mut input, &engine);
                check.sent(&*classify, &frame);
                sup.handle_engine_frame(frame, now);
            }
            3..=5 => {
                let frame = pick(&mut input, &plugin);
                // Mostly the current instance; sometimes one long gone.
                let instance = match (live, input.byte() % 8) {
                    (Some(id), 1..) => id,
                    _ => InstanceId(u64::from(input.byte() % 4)),
                };
                sup.handle_plugin_frame(instance, &frame, now);
            }
            6 => {
                if let Some(id) = live {
                    let exit = match input.byte() % 3 {
                        0 => Exit::Exited(0),
                        1 => Exit::OutOfFuel { limit: 1 },
                        _ => Exit::Trap {
                            message: "boom".into(),
                            stderr_tail: Vec::new(),
                        },
                    };
                    check.live.remove(&id);
                    let ended = Ended {
                        exit,
                        stderr_tail: vec!["tail".into()],
                        framing_error: None,
                    };
                    sup.handle_plugin_stopped(id, ended, now);
                }
            }
            7 => now += Duration::from_millis(u64::from(input.byte()) * 10),
            8 => {
                if let Some(id) = live.filter(|_| input.byte().is_multiple_of(4)) {
                    check.live.remove(&id);
                    sup.handle_start_failed(id, "no slot", now);
                }
            }
            _ => match input.byte() % 8 {
                0 => sup.handle_engine_closed(now),
                1 => sup.handle_engine_gone(now),
                _ => {}
            },
        }
        if sup.poll_timeout().is_some_and(|t| t <= now) {
            sup.handle_timeout(now);
        }
        check.drain(&mut sup, &*classify, now);
    }
    sup.into_report()
}

/// What the fuzz body remembers to check the supervisor's actions.
#[derive(Default)]
struct Check {
    started: HashSet<InstanceId>,
    /// Started and not yet ended, killed or retired, as far as this body knows.
    live: HashSet<InstanceId>,
    requests: HashMap<String, usize>,
    /// Engine requests written to an instance, by key.
    delivered: HashMap<String, usize>,
    /// Answers the engine got that matched a request it sent.
    answers: HashMap<String, usize>,
    incident_waiting: Option<String>,
}

impl Check {
    fn sent(&mut self, classify: &dyn SupervisedProtocol, frame: &[u8]) {
        if let crate::supervise::FromEngine::Request { key, .. } = classify.classify_engine(frame) {
            *self.requests.entry(key).or_default() += 1;
        }
    }

    fn drain(&mut self, sup: &mut Supervisor, classify: &dyn SupervisedProtocol, now: Instant) {
        while let Some(action) = sup.poll_action() {
            match action {
                Action::Start { instance, .. } => {
                    assert!(self.started.insert(instance), "{instance:?} started twice");
                    self.live.insert(instance);
                }
                Action::MeasureMemory { instance } => {
                    self.known(instance);
                    sup.handle_memory(instance, Some(4 << 20), now);
                }
                Action::ToPlugin { instance, frame } => {
                    self.known(instance);
                    if let crate::supervise::FromEngine::Request { key, .. } =
                        classify.classify_engine(&frame)
                    {
                        *self.delivered.entry(key).or_default() += 1;
                    }
                }
                Action::BeginRequest { instance } | Action::CloseStdin { instance } => {
                    self.known(instance);
                }
                Action::Kill { instance } => {
                    self.known(instance);
                    // Its end is fed back, as the host's loop does.
                    self.live.remove(&instance);
                    let ended = Ended {
                        exit: Exit::Killed { signal: None },
                        stderr_tail: Vec::new(),
                        framing_error: None,
                    };
                    sup.handle_plugin_stopped(instance, ended, now);
                }
                Action::Retire { instance, .. } => {
                    self.known(instance);
                    self.live.remove(&instance);
                }
                Action::Incident(Incident { request, .. }) | Action::Refused { request, .. } => {
                    assert!(
                        self.incident_waiting.is_none(),
                        "two incidents without an answer between them"
                    );
                    self.incident_waiting = Some(request);
                }
                Action::ToEngine(frame) => {
                    if let FromPlugin::Answer { key } = classify.classify_plugin(&frame) {
                        let asked = self.requests.get(&key).copied().unwrap_or(0);
                        let answers = self.answers.entry(key.clone()).or_default();
                        if let Some(waiting) = self.incident_waiting.take() {
                            // The supervisor's own answer: for a request still unanswered.
                            assert_eq!(waiting, key, "an incident's answer is for its request");
                            assert!(
                                *answers < asked,
                                "an error answer under {key}, answered {answers} of {asked} times"
                            );
                            *answers += 1;
                        } else if *answers < self.delivered.get(&key).copied().unwrap_or(0) {
                            // A plugin's answer to a request it was given, forwarded. A plugin
                            // may also answer what it was never given: that is forwarded too
                            // (the supervisor is transparent) and matches nothing.
                            *answers += 1;
                        }
                    }
                }
            }
        }
        assert!(
            self.incident_waiting.is_none(),
            "an incident was not followed by its answer"
        );
    }

    fn known(&self, instance: InstanceId) {
        assert!(
            self.started.contains(&instance),
            "action for {instance:?}, never started"
        );
    }
}

fn pick(input: &mut Choices<'_>, palette: &[Vec<u8>]) -> Vec<u8> {
    let i = input.below(palette.len() + 1);
    match palette.get(i) {
        Some(frame) => frame.clone(),
        None => input.bytes(8).to_vec(),
    }
}

fn json_engine() -> Vec<Vec<u8>> {
    let mut frames: Vec<Vec<u8>> = (0..3)
        .map(|id| format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"invoke","params":{{}}}}"#))
        .map(String::into_bytes)
        .collect();
    frames.push(br#"{"jsonrpc":"2.0","id":100,"result":{}}"#.to_vec());
    frames.push(br#"{"jsonrpc":"2.0","method":"note"}"#.to_vec());
    frames
}

fn json_plugin() -> Vec<Vec<u8>> {
    let mut frames: Vec<Vec<u8>> = (0..3)
        .map(|id| format!(r#"{{"jsonrpc":"2.0","id":{id},"result":["0x1"]}}"#))
        .map(String::into_bytes)
        .collect();
    frames.push(br#"{"jsonrpc":"2.0","id":100,"method":"ready","params":{}}"#.to_vec());
    frames.push(br#"{"jsonrpc":"2.0","id":1,"error":{"code":-1,"message":"no"}}"#.to_vec());
    frames
}

fn atp_engine() -> Vec<Vec<u8>> {
    let mut frames = vec![atp::START_ITEM.to_vec(), atp::Message::ClientDone.encode()];
    frames.extend(["a", "b", "c"].map(|run_id| {
        atp::Message::WorkStart {
            run_id: run_id.into(),
            step_id: "s".into(),
            config: atp::Value::Null,
        }
        .encode()
    }));
    frames
}

fn atp_plugin() -> Vec<Vec<u8>> {
    let hello = atp::Hello {
        version: atp::Version::V3,
        schema: atp::Value::Map(Vec::new()),
        extra: Vec::new(),
    }
    .encode();
    let mut frames = vec![hello];
    frames.extend(["a", "b", "c"].map(|run_id| {
        atp::Message::WorkDone {
            run_id: run_id.into(),
            output: atp::Output::new("success", atp::Value::Null),
        }
        .encode()
    }));
    frames
}
