//! Per-request budgets and instance renewal: the IO loop around
//! [`sandpipe_proto::supervise::Supervisor`], between an engine and a plugin.
//!
//! ```text
//!   engine ─ frames ─► loop ─► machine.handle_engine_frame(frame, now)
//!   instance (a Session) ─ frames, end ─► machine.handle_plugin_frame / handle_plugin_stopped
//!   request timer (machine.poll_timeout) ─► machine.handle_timeout(now)
//!   machine.poll_action ─► Start (Host::start) / Retire / Kill / CloseStdin
//!                          ToPlugin / BeginRequest (SessionControl::begin_request)
//!                          ToEngine / Incident / MeasureMemory (SessionControl::memory_in_use)
//! ```
//!
//! Every decision (what is a request, the budgets, the handshake replayed to a fresh instance,
//! recycling, which requests a stop fails and with what error) is the machine's, documented in
//! [`sandpipe_proto::supervise`]; each protocol's rules live beside that protocol in
//! `sandpipe-proto`. This module only spawns and stops instances, moves frames and reads the
//! clock and the memory meter.
//!
//! The clock is tokio's ([`crate::speak::driver::now`]), so a test under a paused clock drives the
//! request timers; [`Supervisor::memory`] runs the loop over [`Session::memory`] instances
//! (the test seam), [`Supervisor::new`] over a real plugin: a stdio plugin, or a component
//! that exports functions behind its in-process server ([`crate::exports::session`]), so a
//! `wasm:` oracle or a component's MCP tools get the same budgets, restarts, poisoning,
//! recycling and stopped answers as any plugin.
//!
//! The fuel budget ([`Fuel::PerRequest`]) re-arms at the guest's first step after a
//! request is forwarded ([`SessionControl::begin_request`]). With several requests in flight it
//! re-arms at each arrival, so each request gets at least its budget. Time the guest spends
//! blocked on input is not billed.

use std::time::Duration;

use bytes::Bytes;
use sandpipe_proto::supervise::{self as machine, Action, Cause, Ended, InstanceId};
pub use sandpipe_proto::supervise::{Budgets, Incident, Recycle, Report};
use tokio::sync::mpsc;

use crate::error::{HostError, SessionError};
use crate::net::limit_of;
use crate::net::{AuditEvent, AuditLog};
use crate::run::memory_plugin::MemoryPlugin;
use crate::run::session::{Session, SessionControl, SessionOptions, SessionWriter};
use crate::speak::driver::{now, sleep_until};
use crate::speak::protocols::Protocol;
use crate::{Fuel, Host, Plugin, Policy};

/// Runs one supervised session: see the module docs.
pub struct Supervisor<'a> {
    start: Start<'a>,
    options: SessionOptions,
    protocol: Protocol,
    budgets: Budgets,
    on_incident: Option<IncidentHook<'a>>,
    /// The protocol's rules when they are not its defaults (an MCP tool filter).
    rules: Option<Box<dyn machine::SupervisedProtocol>>,
    /// Whether a plugin that stops before anything of the engine's reached it ends the run
    /// (asked when it happens); by default the engine's first request gets the stopped answer.
    end_unused: Option<UnusedHook<'a>>,
}

/// Called for each request the supervisor fails.
type IncidentHook<'a> = Box<dyn FnMut(&Incident) + Send + 'a>;

/// Asked when the plugin stopped before its first request.
type UnusedHook<'a> = Box<dyn Fn() -> bool + Send + 'a>;

/// How an instance starts.
enum Start<'a> {
    /// `host.start(plugin, policy, options)`.
    Plugin {
        host: &'a Host,
        plugin: &'a Plugin,
        policy: Box<Policy>,
    },
    /// A fresh in-memory plugin behind [`Session::memory`] each time.
    Memory(Box<dyn FnMut(&SessionOptions) -> Session + Send + 'a>),
}

impl std::fmt::Debug for Supervisor<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Supervisor")
            .field("protocol", &self.protocol)
            .field("budgets", &self.budgets)
            .finish_non_exhaustive()
    }
}

/// The running instance.
struct Instance {
    id: InstanceId,
    writer: SessionWriter,
    control: SessionControl,
}

enum PluginEvent {
    Frame(Bytes),
    End(Option<SessionError>),
}

impl<'a> Supervisor<'a> {
    /// The audit log of the plugin's policy, if it has one.
    fn audit(&self) -> Option<&AuditLog> {
        match &self.start {
            Start::Plugin { policy, .. } => policy.audit.as_ref(),
            Start::Memory(_) => None,
        }
    }

    /// A supervisor for `plugin` speaking `protocol`, each instance started with `policy` and
    /// `options` (whose framing is replaced by the protocol's). A component that exports
    /// functions is served in process ([`Host::start_speaking`]); its `request_timeout` is
    /// each call's deadline inside the instance (see [`crate::exports::session`]). Per-request
    /// fuel is the policy's ([`Fuel::PerRequest`]), its one home: `budgets.fuel_per_request`
    /// is set from it, for the machine's wording.
    pub fn new(
        host: &'a Host,
        plugin: &'a Plugin,
        policy: Policy,
        options: SessionOptions,
        protocol: Protocol,
        budgets: Budgets,
    ) -> Self {
        let mut policy = policy;
        let mut budgets = budgets;
        if budgets.fuel_per_request.is_some() && !matches!(policy.fuel, Fuel::PerRequest(_)) {
            tracing::warn!(
                "Budgets::fuel_per_request arms no fuel: per-request fuel is the policy's (Fuel::PerRequest)"
            );
        }
        if plugin.exports_functions() {
            // A component's exports are called in process, each call under its own deadline
            // inside the instance (epochs): the request timeout becomes that deadline, so a
            // runaway call ends as `DeadlineExceeded` with its stderr tail, and the
            // supervisor's own timer, which would race it, is not armed.
            policy.deadline = budgets.request_timeout.take().or(policy.deadline);
        }
        // Per-request fuel is the policy's (its one home); the machine only words a request's
        // out-of-fuel reason with it.
        budgets.fuel_per_request = match policy.fuel {
            Fuel::PerRequest(f) => Some(f),
            _ => None,
        };
        let start = Start::Plugin {
            host,
            plugin,
            policy: Box::new(policy),
        };
        Self::with_start(start, options, protocol, budgets)
    }

    /// A supervisor whose instances are in-memory plugins, a fresh one from `plugin()` each
    /// time an instance starts, behind [`Session::memory`]: the supervisor loop without
    /// building or starting a plugin (fuel does not apply; the memory meter reads 0).
    pub fn memory<P: MemoryPlugin>(
        mut plugin: impl FnMut() -> P + Send + 'a,
        options: SessionOptions,
        protocol: Protocol,
        budgets: Budgets,
    ) -> Self {
        let start = Start::Memory(Box::new(move |options: &SessionOptions| {
            Session::memory(plugin(), options)
        }));
        Self::with_start(start, options, protocol, budgets)
    }

    fn with_start(
        start: Start<'a>,
        mut options: SessionOptions,
        protocol: Protocol,
        budgets: Budgets,
    ) -> Self {
        options.framing = Some(protocol.framing());
        Self {
            start,
            options,
            protocol,
            budgets,
            on_incident: None,
            rules: None,
            end_unused: None,
        }
    }

    /// Supervise with `rules` instead of the protocol's defaults ([`Protocol::supervised`]):
    /// an MCP tool filter.
    pub fn rules(mut self, rules: Box<dyn machine::SupervisedProtocol>) -> Self {
        self.rules = Some(rules);
        self
    }

    /// End the run, its report saying the plugin stopped, when the plugin stops before
    /// anything of the engine's reached it and `when()` says so then; otherwise (and by
    /// default) the session waits for the engine, whose first request gets the stopped answer.
    /// For a server kept warm for a client that may never come (`sandpipe serve --warm`).
    pub fn end_if_stopped_unused(mut self, when: impl Fn() -> bool + Send + 'a) -> Self {
        self.end_unused = Some(Box::new(when));
        self
    }

    /// Call `f` for each request the supervisor fails, as it happens.
    pub fn on_incident(mut self, f: impl FnMut(&Incident) + Send + 'a) -> Self {
        self.on_incident = Some(Box::new(f));
        self
    }

    async fn spawn(
        &mut self,
        id: InstanceId,
        events: &mpsc::Sender<(InstanceId, PluginEvent)>,
    ) -> Result<Instance, HostError> {
        let session = match &mut self.start {
            Start::Plugin {
                host,
                plugin,
                policy,
            } => {
                host.start_speaking(plugin, policy, &self.options, self.protocol)
                    .await?
            }
            Start::Memory(make) => make(&self.options),
        };
        let (writer, mut reader, control) = session.into_split();
        let tx = events.clone();
        tokio::spawn(async move {
            loop {
                let event = match reader.recv().await {
                    Ok(Some(frame)) => PluginEvent::Frame(frame),
                    Ok(None) => PluginEvent::End(None),
                    Err(e) => PluginEvent::End(Some(e)),
                };
                let end = matches!(event, PluginEvent::End(_));
                if tx.send((id, event)).await.is_err() || end {
                    return;
                }
            }
        });
        Ok(Instance {
            id,
            writer,
            control,
        })
    }

    /// Run until the engine closes `from_engine` and the plugin ends, or until an instance
    /// stops and `restart` is off. Frames for the engine go to `to_engine`.
    pub async fn run(
        mut self,
        mut from_engine: mpsc::Receiver<Vec<u8>>,
        to_engine: mpsc::Sender<Vec<u8>>,
    ) -> Result<Report, HostError> {
        let rules = self
            .rules
            .take()
            .unwrap_or_else(|| self.protocol.supervised());
        let mut sup = machine::Supervisor::new(rules, self.budgets.clone());
        let (events_tx, mut events) = mpsc::channel::<(InstanceId, PluginEvent)>(64);
        let mut current: Option<Instance> = None;
        let mut engine_open = true;
        loop {
            while let Some(action) = sup.poll_action() {
                self.act(action, &mut sup, &mut current, &events_tx, &to_engine)
                    .await?;
            }
            if sup.is_done() {
                break;
            }
            let timer = sleep_until(sup.poll_timeout());
            tokio::select! {
                frame = from_engine.recv(), if engine_open && sup.accepts_engine_frames() => {
                    match frame {
                        Some(frame) => sup.handle_engine_frame(frame, now()),
                        None => {
                            engine_open = false;
                            sup.handle_engine_closed(now());
                        }
                    }
                }
                Some((id, event)) = events.recv() => match event {
                    PluginEvent::Frame(frame) => sup.handle_plugin_frame(id, &frame, now()),
                    PluginEvent::End(error) => {
                        // A retired or stopped instance's end is not the machine's business.
                        let Some(inst) = current.take_if(|i| i.id == id) else {
                            continue;
                        };
                        if error.is_some() {
                            inst.control.kill();
                        }
                        let ended = Ended {
                            exit: inst.control.wait().await,
                            stderr_tail: inst.control.stderr_tail(),
                            framing_error: error.map(|e| e.to_string()),
                        };
                        sup.handle_plugin_stopped(id, ended, now());
                        if let Some(when) = &self.end_unused {
                            sup.end_if_stopped_unused(when);
                        }
                    }
                },
                () = timer => sup.handle_timeout(now()),
            }
        }
        Ok(sup.into_report())
    }

    /// Carry out one of the machine's actions.
    async fn act(
        &mut self,
        action: Action,
        sup: &mut machine::Supervisor,
        current: &mut Option<Instance>,
        events: &mpsc::Sender<(InstanceId, PluginEvent)>,
        to_engine: &mpsc::Sender<Vec<u8>>,
    ) -> Result<(), HostError> {
        match action {
            Action::Start { instance, cause } => match self.spawn(instance, events).await {
                Ok(fresh) => *current = Some(fresh),
                Err(e) if cause == Cause::Restart => {
                    sup.handle_start_failed(instance, &e.to_string(), now());
                }
                Err(e) => return Err(e),
            },
            Action::BeginRequest { instance } => {
                if let Some(i) = on(instance, current) {
                    i.control.begin_request();
                }
            }
            Action::ToPlugin { instance, frame } => {
                if let Some(i) = on(instance, current)
                    && let Err(e) = i.writer.send(&frame).await
                {
                    // The plugin stopped reading: its end (and the reason) arrives as an event.
                    tracing::debug!("plugin stopped reading stdin: {e}");
                }
            }
            Action::ToEngine(frame) => {
                if to_engine.send(frame).await.is_err() {
                    sup.handle_engine_gone(now());
                }
            }
            Action::Incident(incident) => {
                tracing::debug!(request = %incident.request, reason = %incident.reason, "request failed");
                if let (Some(audit), Some(limit)) =
                    (self.audit(), incident.exit.as_ref().and_then(limit_of))
                {
                    audit.record(&AuditEvent::Limit {
                        limit: limit.to_owned(),
                        detail: Some(incident.reason.clone()),
                        request_id: Some(incident.request.clone()),
                    });
                }
                if let Some(f) = &mut self.on_incident {
                    f(&incident);
                }
            }
            Action::Refused {
                request,
                method,
                name,
            } => {
                if let Some(audit) = self.audit() {
                    audit.record(&AuditEvent::Refused {
                        what: if name.is_some() { "tool" } else { "request" }.to_owned(),
                        name: name.or(method).unwrap_or_default(),
                        request_id: Some(request),
                    });
                }
            }
            Action::MeasureMemory { instance } => {
                let used = on(instance, current).and_then(|i| i.control.memory_in_use());
                sup.handle_memory(instance, used, now());
            }
            Action::Kill { instance } => {
                if let Some(i) = on(instance, current) {
                    i.control.kill();
                }
            }
            Action::CloseStdin { instance } => {
                if let Some(i) = on(instance, current) {
                    i.writer.close().await;
                }
            }
            Action::Retire { instance, grace } => {
                let memory = on(instance, current).and_then(|i| i.control.memory_in_use());
                tracing::info!(
                    instance = instance.0,
                    memory,
                    "recycling the instance between requests; a fresh one takes over"
                );
                if let Some(old) = current.take_if(|i| i.id == instance) {
                    retire(old, grace);
                }
            }
            _ => tracing::warn!(?action, "supervisor action not carried out"),
        }
        Ok(())
    }
}

/// The instance `id` if it is the current one: actions for an instance that is gone (it
/// failed to start, or ended) are dropped.
fn on(id: InstanceId, current: &mut Option<Instance>) -> Option<&mut Instance> {
    current.as_mut().filter(|i| i.id == id)
}

/// Close a retired instance's stdin and give it `grace` to exit, in the background.
fn retire(inst: Instance, grace: Duration) {
    tokio::spawn(async move {
        let Instance {
            mut writer,
            control,
            ..
        } = inst;
        writer.close().await;
        let exit = control.wait_or_stop(grace).await;
        tracing::debug!(?exit, "recycled instance ended");
    });
}

#[cfg(test)]
mod tests {
    //! The IO loop over in-memory plugins ([`Supervisor::memory`]) under tokio's paused
    //! clock: request timeouts fire on virtual time, so no test waits for real.

    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};

    use serde_json::{Value, json};

    use super::*;
    use crate::run::memory_plugin::MemoryPlugin;

    /// A Cairo oracle: `ready` first; then `invoke` answered with its calldata, except a
    /// selector `hang` (never answered) and `crash` (the plugin ends with exit 1).
    struct Oracle;

    impl MemoryPlugin for Oracle {
        fn start(&mut self) -> Vec<Vec<u8>> {
            vec![frame(json!({"jsonrpc": "2.0", "id": 0, "method": "ready"}))]
        }
        fn handle(&mut self, frame_in: &[u8]) -> Result<Vec<Vec<u8>>, String> {
            let v: Value = serde_json::from_slice(frame_in).map_err(|e| e.to_string())?;
            if v["method"] != "invoke" {
                return Ok(Vec::new());
            }
            match v["params"]["selector"].as_str() {
                Some("hang") => Ok(Vec::new()),
                Some("crash") => Err("oracle: crashing on request".into()),
                _ => Ok(vec![frame(
                    json!({"jsonrpc": "2.0", "id": v["id"], "result": v["params"]["calldata"]}),
                )]),
            }
        }
    }

    fn frame(v: Value) -> Vec<u8> {
        serde_json::to_vec(&v).expect("json")
    }

    fn invoke(id: i64, selector: &str) -> Vec<u8> {
        frame(json!({"jsonrpc": "2.0", "id": id, "method": "invoke",
            "params": {"selector": selector, "calldata": [format!("0x{id:x}")]}}))
    }

    /// An engine that acknowledges `ready` and sends `script`'s invokes one at a time, each
    /// after the previous answer; what it read, and the report.
    async fn engine(budgets: Budgets, script: &[(i64, &str)]) -> (Vec<Value>, Report, u64) {
        let started = Arc::new(AtomicU64::new(0));
        let count = started.clone();
        let sup = Supervisor::memory(
            move || {
                count.fetch_add(1, Ordering::SeqCst);
                Oracle
            },
            SessionOptions::default(),
            Protocol::Oracle,
            budgets,
        );
        let (to_sup, from_engine) = mpsc::channel(8);
        let (to_engine, mut from_sup) = mpsc::channel(8);
        let run = tokio::spawn(sup.run(from_engine, to_engine));
        let mut seen = Vec::new();
        let mut read = async || {
            let f = from_sup.recv().await.expect("a frame for the engine");
            let v: Value = serde_json::from_slice(&f).expect("json");
            seen.push(v.clone());
            v
        };
        assert_eq!(read().await["method"], "ready");
        to_sup
            .send(frame(json!({"jsonrpc": "2.0", "id": 0, "result": {}})))
            .await
            .expect("sent");
        for (id, selector) in script {
            to_sup.send(invoke(*id, selector)).await.expect("sent");
            assert_eq!(read().await["id"], *id);
        }
        drop(to_sup);
        let report = run.await.expect("joined").expect("supervised");
        (seen, report, started.load(Ordering::SeqCst))
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_past_its_timeout_gets_the_oracle_error_and_the_next_a_fresh_instance() {
        let budgets = Budgets {
            request_timeout: Some(Duration::from_secs(30)),
            restart: true,
            ..Budgets::default()
        };
        let (seen, report, started) = engine(budgets, &[(1, "hang"), (2, "f")]).await;
        // The fresh instance's `ready` is answered by the supervisor, not seen again.
        assert_eq!(seen.len(), 3, "{seen:?}");
        assert_eq!(seen[1]["error"]["code"], -32603, "{seen:?}");
        let message = seen[1]["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains("timed out after 30s"), "{message}");
        assert_eq!(seen[2]["result"], json!(["0x2"]));
        assert_eq!((report.restarts, report.incidents.len()), (1, 1));
        assert_eq!((report.requests, report.answered), (2, 1));
        assert_eq!(started, 2);
    }

    #[tokio::test(start_paused = true)]
    async fn recycling_after_two_requests_is_invisible_to_the_engine() {
        let budgets = Budgets {
            recycle: Recycle {
                after_requests: Some(2),
                ..Recycle::default()
            },
            ..Budgets::default()
        };
        let script: Vec<(i64, &str)> = (1..=5).map(|id| (id, "f")).collect();
        let (seen, report, started) = engine(budgets, &script).await;
        for (id, answer) in (1..=5).zip(&seen[1..]) {
            assert_eq!(answer["result"], json!([format!("0x{id:x}")]), "{seen:?}");
        }
        assert_eq!((report.recycles, report.restarts), (2, 0));
        assert!(report.incidents.is_empty() && !report.stopped, "{report:?}");
        assert_eq!(started, 3);
    }

    #[tokio::test(start_paused = true)]
    async fn a_crash_without_restart_answers_the_request_and_ends_the_session() {
        let (to_sup, from_engine) = mpsc::channel(8);
        let (to_engine, mut from_sup) = mpsc::channel(8);
        let sup = Supervisor::memory(
            || Oracle,
            SessionOptions::default(),
            Protocol::Oracle,
            Budgets::default(),
        );
        let run = tokio::spawn(sup.run(from_engine, to_engine));
        let ready = from_sup.recv().await.expect("ready");
        assert!(String::from_utf8_lossy(&ready).contains("ready"));
        for f in [
            frame(json!({"jsonrpc": "2.0", "id": 0, "result": {}})),
            invoke(1, "crash"),
        ] {
            to_sup.send(f).await.expect("sent");
        }
        let answer: Value =
            serde_json::from_slice(&from_sup.recv().await.expect("answer")).expect("json");
        assert_eq!(answer["id"], 1);
        assert_eq!(answer["error"]["code"], -32603);
        let stderr = &answer["error"]["data"]["stderr"];
        assert_eq!(*stderr, json!(["oracle: crashing on request"]), "{answer}");
        // The session ends without the engine closing its side.
        let report = run.await.expect("joined").expect("supervised");
        assert!(report.stopped, "{report:?}");
        assert_eq!(report.exit, crate::Exit::Exited(1));
        drop(to_sup);
    }
}
