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
//! The fuel budget ([`Fuel::PerRequest`]) re-arms at the guest's first step after a
//! request is forwarded ([`SessionControl::begin_request`]). With several requests in flight it
//! re-arms at each arrival, so each request gets at least its budget. Time the guest spends
//! blocked on input is not billed.

use std::time::{Duration, Instant};

use bytes::Bytes;
use sandpipe_proto::supervise::{self as machine, Action, Cause, Ended, InstanceId};
pub use sandpipe_proto::supervise::{Budgets, Incident, Report};
use tokio::sync::mpsc;

use crate::error::{HostError, SessionError};
use crate::protocols::Protocol;
use crate::session::{SessionControl, SessionOptions, SessionWriter};
use crate::{Fuel, Host, Plugin, Policy};

/// Runs one supervised session: see the module docs.
pub struct Supervisor<'a> {
    host: &'a Host,
    plugin: &'a Plugin,
    policy: Policy,
    options: SessionOptions,
    protocol: Protocol,
    budgets: Budgets,
    on_incident: Option<IncidentHook<'a>>,
    /// The protocol's rules when they are not its defaults (an MCP tool filter).
    rules: Option<Box<dyn machine::SupervisedProtocol>>,
}

/// Called for each request the supervisor fails.
type IncidentHook<'a> = Box<dyn FnMut(&Incident) + Send + 'a>;

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
    /// A supervisor for `plugin` speaking `protocol`, each instance started with `policy` and
    /// `options` (whose framing is replaced by the protocol's).
    pub fn new(
        host: &'a Host,
        plugin: &'a Plugin,
        policy: Policy,
        options: SessionOptions,
        protocol: Protocol,
        budgets: Budgets,
    ) -> Self {
        let mut policy = policy;
        if let Some(f) = budgets.fuel_per_request {
            policy.fuel = Fuel::PerRequest(f);
        }
        let mut budgets = budgets;
        // The machine words a request's out-of-fuel reason with it, whoever armed it.
        budgets.fuel_per_request = match policy.fuel {
            Fuel::PerRequest(f) => Some(f),
            _ => None,
        };
        let mut options = options;
        options.framing = Some(protocol.framing());
        Self {
            host,
            plugin,
            policy,
            options,
            protocol,
            budgets,
            on_incident: None,
            rules: None,
        }
    }

    /// Supervise with `rules` instead of the protocol's defaults ([`Protocol::supervised`]):
    /// an MCP tool filter.
    pub fn rules(mut self, rules: Box<dyn machine::SupervisedProtocol>) -> Self {
        self.rules = Some(rules);
        self
    }

    /// Call `f` for each request the supervisor fails, as it happens.
    pub fn on_incident(mut self, f: impl FnMut(&Incident) + Send + 'a) -> Self {
        self.on_incident = Some(Box::new(f));
        self
    }

    async fn spawn(
        &self,
        id: InstanceId,
        events: &mpsc::Sender<(InstanceId, PluginEvent)>,
    ) -> Result<Instance, HostError> {
        let session = self
            .host
            .start(self.plugin, &self.policy, &self.options)
            .await?;
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
                        Some(frame) => sup.handle_engine_frame(frame, Instant::now()),
                        None => {
                            engine_open = false;
                            sup.handle_engine_closed(Instant::now());
                        }
                    }
                }
                Some((id, event)) = events.recv() => match event {
                    PluginEvent::Frame(frame) => sup.handle_plugin_frame(id, &frame, Instant::now()),
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
                        sup.handle_plugin_stopped(id, ended, Instant::now());
                    }
                },
                () = timer => sup.handle_timeout(Instant::now()),
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
        let now = Instant::now;
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
                if let Some(f) = &mut self.on_incident {
                    f(&incident);
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

/// When the machine's next timeout is due (never, without one).
async fn sleep_until(due: Option<Instant>) {
    match due {
        Some(due) => tokio::time::sleep_until(due.into()).await,
        None => std::future::pending().await,
    }
}
