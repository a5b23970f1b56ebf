//! `sandpipe run --protocol P`: the protocol-aware bridge, with per-request budgets, restarts
//! and recycling (see [`crate::speak::supervise`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::Result;
use tokio::sync::mpsc;

use super::engine::{read_engine, write_engine};
use super::parse_duration;
use super::signals::{Bridge, SignalPolicy, Signals, Stoppable, Stopping};
use super::status::{failed_by_itself, own_kill};
use crate::policy_file::RecycleMemory;
use crate::speak::protocols::Protocol;
use crate::speak::supervise::{Budgets, Incident, Supervisor};
use crate::{Host, Plugin, PluginKind, Policy, SessionGroup, SessionOptions};

/// Per-request limits and instance renewal (`run --protocol` only).
#[derive(Debug, Clone, clap::Args)]
pub struct BudgetArgs {
    /// Fuel for each request instead of the whole session (wasm only). Re-armed when a request
    /// (a JSON-RPC id, an ATP run, an oracle invoke) reaches the plugin; idle time is not billed.
    #[arg(long, value_name = "N", conflicts_with = "fuel")]
    pub(crate) fuel_per_request: Option<u64>,
    /// Wall-clock limit from a request reaching a started plugin to its response (e.g. 2s);
    /// neither start-up nor the time between requests is counted. A request that runs over
    /// gets the protocol's error at once. MCP: the server is sent notifications/cancelled and
    /// keeps serving; only if it then stays deaf for --recycle-grace is it replaced, with or
    /// without --restart. Other protocols: the plugin is stopped. For a component that exports
    /// functions, each call's deadline inside the instance.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub(crate) request_timeout: Option<Duration>,
    /// How long a fresh instance gets to answer its handshake (MCP: initialize or
    /// server/discover, or the discover sandpipe sends before a 2026-07-28 client's first
    /// request), from when it was sent. Start-up is bounded by this, never billed to a request.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, default_value = "60s")]
    pub(crate) start_timeout: Duration,
    /// After a request's budget stops the plugin (or it dies), give the next request a fresh
    /// instance, replaying the protocol's handshake to it, instead of ending the session (for a
    /// component that exports functions: instead of poisoning it, where every later request
    /// fails with the first stop's reason, as in Scarb).
    #[arg(long)]
    pub(crate) restart: bool,
    /// Replace the plugin with a fresh instance, between requests, after N answered requests.
    #[arg(long, value_name = "N")]
    pub(crate) recycle_after: Option<u64>,
    /// Replace the plugin with a fresh instance, between requests, once it holds more than
    /// SIZE of memory (wasm: linear memory; native: resident set), e.g. 64MiB. auto (wasm with
    /// a --max-memory): once it has used half of its headroom below the cap, measured from its
    /// size after the first request (linear memory never shrinks, so a heap that grows per
    /// request would otherwise meet the cap mid-request). none: never.
    #[arg(long, value_name = "SIZE|auto|none", default_value = "auto", value_parser = <RecycleMemory as std::str::FromStr>::from_str)]
    pub(crate) recycle_memory: RecycleMemory,
    /// How long a recycled instance gets to exit after its stdin closes, and how long an MCP
    /// server gets to answer sandpipe's probe after a request was cancelled for its timeout.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, default_value = "2s")]
    pub(crate) recycle_grace: Duration,
    #[command(flatten)]
    pub(crate) tools: super::tool_args::ToolArgs,
}

impl BudgetArgs {
    /// The option that needs `--protocol`, if one was given.
    pub(super) fn needs_protocol(&self) -> Option<&'static str> {
        if self.fuel_per_request.is_some() {
            Some("--fuel-per-request")
        } else if self.request_timeout.is_some() {
            Some("--request-timeout")
        } else if self.restart {
            Some("--restart")
        } else if self.recycle_after.is_some() {
            Some("--recycle-after")
        } else if matches!(self.recycle_memory, RecycleMemory::Above(_)) {
            Some("--recycle-memory")
        } else if self.tools.given() {
            Some("--allow-tool/--deny-tool")
        } else {
            None
        }
    }

    /// The budgets for `plugin` under `policy` (`auto` recycling needs wasm and a memory cap).
    fn budgets(&self, plugin: &Plugin, policy: &Policy) -> Budgets {
        let mut b = Budgets {
            fuel_per_request: self.fuel_per_request,
            request_timeout: self.request_timeout,
            restart: self.restart,
            // Scarb's semantics for a `wasm:` oracle: after a stop, every later call fails.
            poison: plugin.exports_functions(),
            start_timeout: Some(self.start_timeout),
            grace: self.recycle_grace,
            ..Budgets::default()
        };
        b.recycle.after_requests = self.recycle_after;
        match self.recycle_memory {
            RecycleMemory::Above(n) => b.recycle.above_memory = Some(n),
            RecycleMemory::Auto if plugin.kind() != PluginKind::NativeUnsandboxed => {
                b.recycle.before_cap = policy.max_memory;
            }
            RecycleMemory::Auto | RecycleMemory::Never => {}
        }
        b
    }
}

/// Bridge sandpipe's stdin/stdout to a supervised plugin speaking `protocol`, with the signal
/// policy and the exit mapping of every bridge (`signals.rs`'s table, `status.rs`'s).
#[allow(clippy::too_many_arguments)]
pub(crate) async fn run_supervised(
    host: &Host,
    plugin: &Plugin,
    policy: Policy,
    options: SessionOptions,
    protocol: Protocol,
    args: &BudgetArgs,
    mut signals: Signals,
    on_signal: SignalPolicy,
) -> Result<i32> {
    if plugin.kind() == PluginKind::NativeUnsandboxed && args.fuel_per_request.is_some() {
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
    let budgets = args.budgets(plugin, &policy);
    let filter = args.tools.filter();
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
