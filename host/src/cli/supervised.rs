//! `sandpipe run --protocol P`: the protocol-aware bridge, with per-request budgets, restarts
//! and recycling (see [`crate::speak::supervise`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::Result;
use tokio::sync::mpsc;

use super::engine::{read_engine, write_engine};
use super::signals::{Bridge, SignalPolicy, Signals, Stoppable, Stopping};
use super::status::{failed_by_itself, own_kill};
use crate::Fuel;
use crate::policy::sections::DEFAULT_START_TIMEOUT;
use crate::policy_file::{RecycleMemory, Requests, Tools};
use crate::speak::protocols::Protocol;
use crate::speak::supervise::{Budgets, Incident, Supervisor};
use crate::{Host, Plugin, PluginKind, Policy, SessionGroup, SessionOptions};

/// The option that needs `--protocol`, if one was given.
pub(super) fn needs_protocol(requests: &Requests, tools: &Tools) -> Option<&'static str> {
    let r = requests;
    if r.fuel.is_some() {
        Some("--fuel-per-request")
    } else if r.timeout.is_some() {
        Some("--request-timeout")
    } else if r.restart {
        Some("--restart")
    } else if r.recycle_after.is_some() {
        Some("--recycle-after")
    } else if matches!(r.recycle_memory, Some(RecycleMemory::Above(_))) {
        Some("--recycle-memory")
    } else if !tools.is_empty() {
        Some("--allow-tool/--deny-tool")
    } else {
        None
    }
}

/// The budgets `policy.requests` set for `plugin` (`auto` recycling needs wasm and a memory
/// cap); per-request fuel is the policy's own, armed by the host.
pub(super) fn budgets(plugin: &Plugin, policy: &Policy) -> Budgets {
    let r = &policy.requests;
    let mut b = Budgets {
        request_timeout: r.timeout,
        restart: r.restart,
        // Scarb's semantics for a `wasm:` oracle: after a stop, every later call fails.
        poison: plugin.exports_functions(),
        start_timeout: Some(r.start_timeout.unwrap_or(DEFAULT_START_TIMEOUT)),
        ..Budgets::default()
    };
    b.grace = r.recycle_grace.unwrap_or(b.grace);
    b.recycle.after_requests = r.recycle_after;
    match r.recycle_memory.unwrap_or(RecycleMemory::Auto) {
        RecycleMemory::Above(n) => b.recycle.above_memory = Some(n),
        RecycleMemory::Auto if plugin.kind() != PluginKind::NativeUnsandboxed => {
            b.recycle.before_cap = policy.max_memory;
        }
        RecycleMemory::Auto | RecycleMemory::Never => {}
    }
    b
}

/// Bridge sandpipe's stdin/stdout to a supervised plugin speaking `protocol`, with the signal
/// policy and the exit mapping of every bridge (`signals.rs`'s table, `status.rs`'s).
pub(crate) async fn run_supervised(
    host: &Host,
    plugin: &Plugin,
    policy: Policy,
    options: SessionOptions,
    protocol: Protocol,
    mut signals: Signals,
    on_signal: SignalPolicy,
) -> Result<i32> {
    if plugin.kind() == PluginKind::NativeUnsandboxed && matches!(policy.fuel, Fuel::PerRequest(_))
    {
        eprintln!(
            "sandpipe: note: --fuel-per-request has no effect on a native plugin (use --request-timeout)"
        );
    }
    let framing = protocol.framing();
    let limits = options.frame_limits;
    let (in_tx, in_rx) = mpsc::channel::<Vec<u8>>(16);
    let (out_tx, out_rx) = mpsc::channel::<Vec<u8>>(16);
    let input_ended = Arc::new(AtomicBool::new(false));
    let input = tokio::spawn(read_engine(in_tx, framing, limits, input_ended.clone()));
    let output = tokio::spawn(write_engine(out_rx, framing, limits));
    let budgets = budgets(plugin, &policy);
    let filter = policy.tools.filter();
    let filtered = match (filter.is_open(), protocol.spec().tool_filter) {
        (true, _) => None,
        (false, Some(rules)) => Some(rules(filter)),
        (false, None) => {
            eprintln!("sandpipe: --allow-tool and --deny-tool need --protocol mcp");
            return Ok(2);
        }
    };
    let poison = budgets.poison;
    // Every instance joins the group, so that a signal after the input ended reaches it.
    let group = SessionGroup::new();
    let mut options = options;
    options.group = Some(group.clone());
    let mut supervisor = Supervisor::new(host, plugin, policy.clone(), options, protocol, budgets)
        .on_incident(move |i| print_incident(i, poison));
    if let Some(rules) = filtered {
        supervisor = supervisor.rules(rules);
    }
    let supervised = supervisor.run(in_rx, out_tx);
    let target = Instances {
        input: input.abort_handle(),
        input_ended: &input_ended,
        group: &group,
    };
    let mut stopping = Stopping::default();
    let report = match stopping
        .serve(supervised, &mut signals, &on_signal, &target)
        .await
    {
        Ok(report) => report?,
        Err(status) => return Ok(status),
    };
    // The supervisor dropped its sender: the writer finishes what is queued.
    let _ = output.await;
    input.abort();
    let bad_input = match input.await {
        Ok(Err(e)) => Some(e),
        _ => None,
    };
    tracing::info!(
        requests = report.requests,
        answered = report.answered,
        failed = report.incidents.len(),
        restarts = report.restarts,
        recycles = report.recycles,
        "supervised session ended"
    );
    // A plugin that died by itself before answering anything may have been refused a file it
    // needs at start-up, as under plain `run`.
    if report.answered == 0
        && let Some((exit, tail)) = group.last_ended()
        && failed_by_itself(&exit)
    {
        super::sandbox_args::explain_failed_start(plugin, &policy, true, &tail);
    }
    // The plugin's bad frames are the supervisor's (each fails its request, as an incident);
    // what is left is the engine's input and how the last instance ended: the same mapping
    // as the pass-through's.
    let exit = own_kill(report.exit, stopping.killed());
    Ok(super::status::report(None, bad_input.as_ref(), &exit))
}

/// The supervisor's signals act on the engine's input and on every instance.
struct Instances<'a> {
    /// The engine reader: aborting it ends the input, which the supervisor takes as EOF.
    input: tokio::task::AbortHandle,
    input_ended: &'a AtomicBool,
    group: &'a SessionGroup,
}

impl Stoppable for Instances<'_> {
    fn bridge(&self) -> Bridge {
        Bridge::Supervised
    }

    fn input_open(&self) -> bool {
        !self.input_ended.load(Ordering::SeqCst) && !self.input.is_finished()
    }

    fn end_input(&self) {
        self.input.abort();
    }

    fn forward(&self, signal: i32) {
        self.group.signal(signal);
    }

    fn kill(&self) {
        self.group.kill_after(Duration::ZERO);
    }
}

/// The one line each failed request gets on stderr, for every plugin kind.
fn print_incident(i: &Incident, poison: bool) {
    let what = match &i.method {
        Some(m) => format!("request {} ({m})", i.request),
        None => format!("run {}", i.request),
    };
    let next = if i.restarting {
        "; the next request gets a fresh instance"
    } else if i
        .reason
        .starts_with(&sandpipe_proto::supervise::poisoned(""))
    {
        // A later request of a poisoned session: the first stop's line said what follows.
        ""
    } else if poison {
        "; the instance stays poisoned (use --restart for a fresh one)"
    } else {
        "; ending the session"
    };
    eprintln!("sandpipe: {what} failed: {}{next}", i.reason);
}
