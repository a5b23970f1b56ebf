//! `sandpipe run`: bridge sandpipe's stdin/stdout to a plugin's.

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use anyhow::{Context, Result};
use sandpipe_proto::frame::{FrameError, FrameLimits, Framing, Piece};
use tokio::sync::watch;

use super::engine::{EngineReader, EngineWriter, WriteError};
use super::parse_duration;
use super::sandbox_args::{SandboxArgs, warn_if_native};
use super::signals::{self, Bridge, SigintMode, SignalPolicy, Signals, Stoppable, Stopping};
use super::status::{BridgeEnd, failed_by_itself, own_kill, report};
use crate::policy_file::FramingName;
use crate::{
    PluginKind, SessionControl, SessionError, SessionOptions, SessionReader, SessionWriter,
    StderrMode,
};

/// Arguments of `sandpipe run`.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// Framing of both directions: raw passes bytes through. With a framing, what the plugin
    /// writes is validated (the first bad frame ends the session with a one-line reason);
    /// what the engine writes is split into frames and capped by --max-frame, but passed on
    /// unjudged: the plugin answers malformed input as it would without sandpipe.
    #[arg(long, value_enum, value_name = "FRAMING", default_value_t = FramingName::Raw)]
    pub(super) framing: FramingName,
    /// Speak protocol P with the engine on stdin/stdout: frames use the protocol's framing,
    /// requests are tracked, and the per-request options below apply. A request the plugin
    /// cannot answer gets the protocol's error. With `oracle`, a component that exports
    /// functions instead of wasi:cli/run (a Cairo wasm: oracle) is served as a stdio: oracle:
    /// each invoke calls its export.
    #[arg(long, value_enum, value_name = "P", conflicts_with = "framing")]
    pub(super) protocol: Option<crate::speak::protocols::Protocol>,
    /// Read the plugin, its limits, grants and budgets from a policy file (TOML; see
    /// docs/policy.md); flags given here override it. `sandpipe run FILE.toml` is
    /// the same with the file's plugin.
    #[arg(long, value_name = "FILE")]
    pub(super) policy: Option<PathBuf>,
    #[command(flatten)]
    pub(super) sandbox: SandboxArgs,
    #[command(flatten)]
    pub(super) requests: crate::policy_file::Requests,
    #[command(flatten)]
    pub(super) tools: crate::policy_file::Tools,
    /// SIGINT: auto forwards it to a native plugin, and for wasm ignores it when stdin is not a
    /// terminal (engines end plugins through the protocol) or acts as SIGTERM on a terminal.
    /// SIGTERM, SIGHUP, SIGQUIT, SIGUSR1/2 are forwarded to a native plugin; a wasm plugin's
    /// stdin is closed and it is killed after --grace.
    #[arg(long, value_enum, default_value = "auto", value_name = "MODE")]
    sigint: SigintMode,
    /// How long a wasm plugin has to exit after a SIGTERM closed its stdin.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, default_value = "2s")]
    grace: Duration,
    /// Write sandpipe's own messages and the plugin's stderr to FILE (appended) instead of
    /// stderr: under a deployer that takes any stderr for a broken stream (Arcaflow's Docker
    /// deployer), SANDPIPE_STDERR=/dev/null or a file on a volume.
    /// An empty FILE keeps stderr (`-e SANDPIPE_STDERR=` over an image's default).
    #[arg(long, value_name = "FILE")]
    pub(super) stderr: Option<String>,
    /// Record the session (every frame both ways, the policy, the outcome) as a transcript;
    /// needs --framing or --protocol (under --protocol, what each instance sees: a fresh
    /// instance's replayed handshake is recorded too).
    #[arg(long, value_name = "FILE")]
    record: Option<PathBuf>,
    /// The plugin: a .wasm component or p1 module (sandboxed), an
    /// oci://HOST[:PORT]/REPO[:TAG][@sha256:HEX] reference, a policy file (*.toml) naming
    /// one, or any other executable (run natively, in a sandbox of namespaces, seccomp and
    /// Landlock where the kernel allows; see SECURITY.md).
    pub(super) plugin: PathBuf,
    /// Arguments for the plugin: everything after PLUGIN goes to the plugin, as with
    /// `wasmtime run` (a leading `--` is dropped).
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    pub(super) args: Vec<String>,
}

pub(crate) async fn run(args: RunArgs) -> Result<i32> {
    // Take the signals over first: from here on a SIGTERM or SIGINT is the plugin's to see.
    if args.protocol.is_none()
        && let Some(flag) = super::supervised::needs_protocol(&args.requests, &args.tools)
    {
        // A usage error, with clap's status: the flag alone means nothing.
        eprintln!(
            "sandpipe: {flag} needs --protocol (per-request budgets follow the protocol's requests)"
        );
        return Ok(2);
    }
    let mut signals = Signals::install().context("installing signal handlers")?;
    // Fuel metering compiled in only when this run sets a fuel budget; epoch checks stay, for
    // deadlines and kills.
    let (host, plugin) = args.sandbox.load(&args.requests, &args.plugin).await?;
    let mut policy =
        args.sandbox
            .policy(super::plugin_args(&args.args), &args.requests, &args.tools)?;
    let how = match plugin.load_source() {
        Some(crate::LoadSource::Compiled) => "compiled",
        Some(crate::LoadSource::DiskCache) => "loaded from the disk cache",
        Some(crate::LoadSource::Memory) | None => "loaded",
    };
    tracing::info!(
        "{} ({}, {} bytes, sha256 {}) {how} in {:.1?}",
        plugin.path().display(),
        plugin.kind().name(),
        plugin.size(),
        &plugin.sha256()[..12],
        plugin.load_time()
    );
    warn_if_native(&plugin, &policy);
    let native = plugin.kind() == PluginKind::NativeUnsandboxed;
    let on_signal = SignalPolicy {
        native,
        sigint: args.sigint,
        stdin_is_terminal: signals::stdin_is_terminal(),
        grace: args.grace,
    };
    // A component that exports functions instead of `wasi:cli/run` has no stdio to speak a
    // protocol on: sandpipe speaks it in process, with the exports behind it (oracle: the
    // `stdio:` oracle protocol; MCP: each function a tool), supervised like any plugin, and
    // recorded like one: the frames of the protocol sandpipe speaks for it.
    if let Some(protocol) = args.protocol {
        let mut options = SessionOptions::default()
            .frame_limits(args.sandbox.frame_limits())
            .stderr(StderrMode::Inherit);
        options.record = super::sandbox_args::recorder(
            args.record.as_deref(),
            &plugin,
            &mut policy,
            protocol.framing(),
            Some(protocol.name()),
            &args.sandbox.limits,
        )?;
        return super::supervised::run_supervised(
            &host, &plugin, policy, options, protocol, signals, on_signal,
        )
        .await;
    }
    let framing = args.framing.framing();
    let limits = args.sandbox.frame_limits();
    let mut options = SessionOptions::default()
        .frame_limits(limits)
        .stderr(StderrMode::Inherit);
    options.framing = framing;
    if args.record.is_some() && framing.is_none() {
        anyhow::bail!("--record needs --framing (raw bytes have no frames to record)");
    }
    if let Some(f) = framing {
        options.record = super::sandbox_args::recorder(
            args.record.as_deref(),
            &plugin,
            &mut policy,
            f,
            None,
            &args.sandbox.limits,
        )?;
    }
    // Raw bytes to a native plugin need no bridge at all: it gets sandpipe's own stdin and
    // stdout, so the engine talks to it exactly as it would without sandpipe (no copy, no
    // hop); limits, Landlock, signals and the exit status work the same. Not from a terminal:
    // the plugin leads its own process group, which is not the terminal's foreground group, so
    // its reads would stop it (SIGTTIN).
    let inherit = native && framing.is_none() && !on_signal.stdin_is_terminal;
    if inherit {
        options.native_stdio = crate::NativeStdio::Inherit;
    }
    let session = host
        .start(&plugin, &policy, &options)
        .await
        .with_context(|| format!("starting plugin {}", plugin.path().display()))?;
    let (writer, reader, control) = session.into_split();
    let (close_input, close_rx) = watch::channel(false);
    let target = PassThrough {
        control: &control,
        close_input: &close_input,
    };
    let mut stopping = Stopping::default();
    if inherit {
        let exit = stopping
            .serve(control.wait(), &mut signals, &on_signal, &target)
            .await;
        let exit = match exit {
            Ok(exit) => own_kill(exit, stopping.killed()),
            Err(status) => return Ok(status),
        };
        drop((writer, reader));
        if failed_by_itself(&exit) {
            // Its output went straight to the engine: whether it wrote any is unknown here.
            let tail = control.stderr_tail();
            super::sandbox_args::explain_failed_start(&plugin, &policy, false, &tail);
        }
        return Ok(report(None, None, &exit));
    }

    // The input's error is kept here before the plugin's stdin is closed, so it is seen however
    // the plugin's exit and the input task's end race.
    let bad_input: Arc<OnceLock<FrameError>> = Arc::default();
    let input = tokio::spawn(pump_in(
        writer,
        framing,
        limits,
        bad_input.clone(),
        close_rx,
    ));
    let written = std::cell::Cell::new(0u64);
    let output = pump_out(reader, framing, limits, &written);
    let end = match stopping
        .serve(output, &mut signals, &on_signal, &target)
        .await
    {
        Ok(out) => out.err(),
        Err(status) => return Ok(status),
    };
    // The engine closed its end of our stdout: the plugin's stdout reader is gone with
    // `output`, so its next write fails as it would without sandpipe (EPIPE for a wasm guest,
    // SIGPIPE or EPIPE natively), and it decides. Only a bad frame is sandpipe's to end.
    if matches!(end, Some(BridgeEnd::BadOutput(_))) {
        stopping.kill(&target);
    }
    // The plugin closed its stdout; it may still be running, and signals still reach it.
    let exit = match stopping
        .serve(control.wait(), &mut signals, &on_signal, &target)
        .await
    {
        Ok(exit) => own_kill(exit, stopping.killed()),
        Err(status) => return Ok(status),
    };
    input.abort();
    // A plugin that dies by itself before its first byte may have been refused a file it needs.
    if failed_by_itself(&exit) && written.get() == 0 && end.is_none() && bad_input.get().is_none() {
        let tail = control.stderr_tail();
        super::sandbox_args::explain_failed_start(&plugin, &policy, true, &tail);
    }
    Ok(report(end, bad_input.get(), &exit))
}

/// The pass-through's signals act on its one plugin.
struct PassThrough<'a> {
    control: &'a SessionControl,
    close_input: &'a watch::Sender<bool>,
}

impl Stoppable for PassThrough<'_> {
    fn bridge(&self) -> Bridge {
        Bridge::PassThrough
    }

    fn input_open(&self) -> bool {
        !*self.close_input.borrow()
    }

    fn end_input(&self) {
        let _ = self.close_input.send(true);
    }

    fn forward(&self, signal: i32) {
        self.control.signal(signal);
    }

    fn kill(&self) {
        self.control.kill();
    }
}

/// Engine → plugin. What the engine writes is passed on byte for byte, never judged (see
/// [`EngineReader`]): frames are split (so they can be recorded and tracked) and capped by
/// `--max-frame`, a JSON Lines line is not parsed, and a CBOR or `Content-Length` stream that
/// loses its framing is passed through as bytes from there on. Only a frame over the cap ends
/// the input, like EOF (the plugin still answers what came before), and is kept in `bad_input`
/// before the plugin's stdin closes.
async fn pump_in(
    mut writer: SessionWriter,
    framing: Option<Framing>,
    limits: FrameLimits,
    bad_input: Arc<OnceLock<FrameError>>,
    mut close: watch::Receiver<bool>,
) {
    let mut stdin = EngineReader::open(framing, limits);
    loop {
        let piece = tokio::select! {
            // Pieces already read go first, as they would without the SIGTERM emulation.
            biased;
            piece = stdin.next() => piece,
            // The SIGTERM emulation: the plugin's stdin closes as if the engine had closed ours.
            () = closed(&mut close) => None,
        };
        let sent = match piece {
            // What the engine wrote, byte for byte; the frame is what is recorded.
            Some(Piece::Frame { frame, wire }) => writer.send_wire(&frame, wire).await,
            Some(Piece::Raw(bytes)) => writer.send_raw(bytes).await,
            Some(Piece::TooLarge(e)) => {
                let _ = bad_input.set(e);
                writer.close().await;
                return;
            }
            Some(Piece::LostFraming(e)) => {
                tracing::warn!(
                    "the engine's stream lost its framing ({e}); passing it on unframed"
                );
                continue;
            }
            None => {
                writer.close().await;
                return;
            }
        };
        if let Err(e) = sent {
            tracing::debug!("plugin stopped reading stdin: {e}");
            return;
        }
    }
}

/// Resolves once the input is to be closed (or its sender is gone).
async fn closed(close: &mut watch::Receiver<bool>) {
    // The guard `wait_for` returns is not Send: drop it here, inside this function.
    let _ = close.wait_for(|c| *c).await.map(|_| ());
}

/// Plugin → engine: each frame as the plugin wrote it (a `Content-Length` frame under its own
/// headers), until the plugin's stdout ends, a bad frame, or the engine closes its end.
async fn pump_out(
    mut reader: SessionReader,
    framing: Option<Framing>,
    limits: FrameLimits,
    written: &std::cell::Cell<u64>,
) -> Result<(), BridgeEnd> {
    let mut stdout = EngineWriter::open(framing, limits);
    loop {
        let frame = match reader.recv().await {
            Ok(Some(frame)) => frame,
            Ok(None) => return Ok(()),
            Err(SessionError::BadFrameFromPlugin { error, .. }) => {
                return Err(BridgeEnd::BadOutput(error));
            }
            Err(e) => {
                tracing::debug!("reading plugin stdout: {e}");
                return Ok(());
            }
        };
        let sent = stdout.write_decoded(&frame, reader.last_headers()).await;
        written.set(stdout.written());
        match sent {
            Ok(()) => {}
            // The frame was just decoded with the same limits, so this cannot happen.
            Err(WriteError::Frame(e)) => return Err(BridgeEnd::BadOutput(e)),
            Err(WriteError::Closed) => return Err(BridgeEnd::StdoutClosed),
        }
    }
}
