//! `sandpipe run`: bridge sandpipe's stdin/stdout to a plugin's.

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use anyhow::{Context, Result};
use bytes::BytesMut;
use sandpipe_proto::frame::{EngineSplitter, FrameError, FrameLimits, Framer, Framing, Piece};
use tokio::sync::watch;

use super::sandbox_args::{SandboxArgs, warn_if_native};
use super::signals::{self, Action, SigintMode, Signals};
use super::stdio::{EngineStdin, EngineStdout};
use super::{exit_code, parse_duration};
use crate::{
    Exit, PluginKind, SessionControl, SessionError, SessionOptions, SessionReader, SessionWriter,
    StderrMode,
};

/// Arguments of `sandpipe run`.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// Framing of both directions: raw passes bytes through. With a framing, what the plugin
    /// writes is validated (the first bad frame ends the session with a one-line reason);
    /// what the engine writes is split into frames and capped by --max-frame, but passed on
    /// unjudged: the plugin answers malformed input as it would without sandpipe.
    #[arg(long, value_enum, value_name = "FRAMING", default_value_t = FramingArg::Raw)]
    pub(super) framing: FramingArg,
    /// Speak protocol P with the engine on stdin/stdout: frames use the protocol's framing,
    /// requests are tracked, and the per-request options below apply. A request the plugin
    /// cannot answer gets the protocol's error. With `oracle`, a component that exports
    /// functions instead of wasi:cli/run (a Cairo wasm: oracle) is served as a stdio: oracle:
    /// each invoke calls its export.
    #[arg(long, value_enum, value_name = "P", conflicts_with = "framing")]
    pub(super) protocol: Option<crate::protocols::Protocol>,
    /// Read the plugin, its limits, grants and budgets from a policy file (TOML; see the
    /// README's "Policy files"); flags given here override it. `sandpipe run FILE.toml` is
    /// the same with the file's plugin.
    #[arg(long, value_name = "FILE")]
    pub(super) policy: Option<PathBuf>,
    #[command(flatten)]
    pub(super) sandbox: SandboxArgs,
    #[command(flatten)]
    pub(super) budgets: super::proxy::BudgetArgs,
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
    /// one, or any other executable (run natively, NOT sandboxed).
    pub(super) plugin: PathBuf,
    /// Arguments for the plugin: everything after PLUGIN goes to the plugin, as with
    /// `wasmtime run` (a leading `--` is dropped).
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    pub(super) args: Vec<String>,
}

/// `run --framing`: how both directions are split into frames, or not at all.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum FramingArg {
    /// Bytes pass through unframed.
    Raw,
    /// JSON Lines: one JSON value per line.
    Lines,
    /// A CBOR sequence (RFC 8742).
    Cbor,
    /// LSP's `Content-Length` headers.
    ContentLength,
}

impl FramingArg {
    /// The framing, or `None` for raw bytes.
    pub(crate) fn framing(self) -> Option<Framing> {
        match self {
            FramingArg::Raw => None,
            FramingArg::Lines => Some(Framing::JsonLines),
            FramingArg::Cbor => Some(Framing::CborSeq),
            FramingArg::ContentLength => Some(Framing::ContentLength),
        }
    }
}

/// Why the bridge stopped early.
#[derive(Debug)]
enum BridgeEnd {
    /// The plugin wrote a bad frame.
    BadOutput(FrameError),
    /// sandpipe's stdout went away.
    StdoutClosed,
}

pub(crate) async fn run(args: RunArgs) -> Result<i32> {
    // Take the signals over first: from here on a SIGTERM or SIGINT is the plugin's to see.
    if args.protocol.is_none()
        && let Some(flag) = args.budgets.needs_protocol()
    {
        // A usage error, with clap's status: the flag alone means nothing.
        eprintln!(
            "sandpipe: {flag} needs --protocol (per-request budgets follow the protocol's requests)"
        );
        return Ok(2);
    }
    let mut signals = Signals::install().context("installing signal handlers")?;
    let host = super::host(args.sandbox.cache.dir())?;
    let plugin =
        super::dist::load(&host, &args.plugin, &args.sandbox.dist, &args.sandbox.cache).await?;
    super::dist::note_slow_compile(&plugin, &args.plugin);
    let policy = args.sandbox.policy(super::plugin_args(&args.args))?;
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
    // `stdio:` oracle protocol; MCP: each function a tool), supervised like any plugin.
    if args.protocol.is_some() && plugin.exports_functions() && args.record.is_some() {
        anyhow::bail!(
            "--record does not apply to a component that exports functions (no stdio to record)"
        );
    }
    if let Some(protocol) = args.protocol {
        let mut options = SessionOptions::default()
            .frame_limits(args.sandbox.frame_limits())
            .stderr(StderrMode::Inherit);
        options.record = super::sandbox_args::recorder(
            args.record.as_deref(),
            &plugin,
            &policy,
            protocol.framing(),
            Some(protocol.name()),
        )?;
        return super::proxy::run_proxy(
            &host,
            &plugin,
            policy,
            options,
            protocol,
            &args.budgets,
            signals,
            on_signal,
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
        options.record =
            super::sandbox_args::recorder(args.record.as_deref(), &plugin, &policy, f, None)?;
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
    if inherit {
        let close_input = watch::channel(false).0;
        let mut stopping = Stopping::default();
        let mut killed = false;
        let exit = loop {
            tokio::select! {
                exit = control.wait() => break exit,
                sig = signals.recv() => stopping.on_signal(sig, on_signal, &control, &close_input),
                () = stopping.expired() => {
                    killed = true;
                    control.kill();
                }
            }
        };
        drop((writer, reader));
        let exit = own_kill(exit, killed);
        if failed_by_itself(&exit) {
            // Its output went straight to the engine: whether it wrote any is unknown here.
            super::sandbox_args::explain_failed_start(&plugin, &policy, false);
        }
        if let Exit::Killed { signal: Some(sig) } = exit {
            super::end_by_signal_like_the_plugin(sig);
        }
        return Ok(exit_status(&exit));
    }

    // The input's error is kept here before the plugin's stdin is closed, so it is seen however
    // the plugin's exit and the input task's end race.
    let bad_input: Arc<OnceLock<FrameError>> = Arc::default();
    let (close_input, close_rx) = watch::channel(false);
    let input = tokio::spawn(pump_in(
        writer,
        framing,
        limits,
        bad_input.clone(),
        close_rx,
    ));
    let written = std::cell::Cell::new(0u64);
    let output = pump_out(reader, framing, limits, &written);
    tokio::pin!(output);
    let mut end: Option<BridgeEnd> = None;
    let mut stopping = Stopping::default();
    // Whether sandpipe threw the kill switch itself: the plugin's death by that SIGKILL is then
    // sandpipe's doing, to report with sandpipe's status, never to mirror (see `own_kill`).
    let mut killed = false;
    loop {
        tokio::select! {
            out = &mut output => {
                if let Err(e) = out { end = Some(e); }
                break;
            }
            sig = signals.recv() => stopping.on_signal(sig, on_signal, &control, &close_input),
            () = stopping.expired() => {
                killed = true;
                control.kill();
            }
        }
    }
    // The engine closed its end of our stdout: the plugin's stdout reader is gone with
    // `output`, so its next write fails as it would without sandpipe (EPIPE for a wasm guest,
    // SIGPIPE or EPIPE natively), and it decides. Only a bad frame is sandpipe's to end.
    if matches!(end, Some(BridgeEnd::BadOutput(_))) {
        killed = true;
        control.kill();
    }
    // The plugin closed its stdout; it may still be running, and signals still reach it.
    let exit = loop {
        tokio::select! {
            exit = control.wait() => break exit,
            sig = signals.recv() => stopping.on_signal(sig, on_signal, &control, &close_input),
            () = stopping.expired() => {
                killed = true;
                control.kill();
            }
        }
    };
    input.abort();
    let exit = own_kill(exit, killed);
    // A plugin that dies by itself before its first byte may have been refused a file it needs.
    if failed_by_itself(&exit) && written.get() == 0 && end.is_none() && bad_input.get().is_none() {
        super::sandbox_args::explain_failed_start(&plugin, &policy, true);
    }
    Ok(report(end, bad_input.get(), &exit))
}

/// `exit`, with a death by sandpipe's own kill (`killed`: sandpipe threw the kill switch, and
/// the plugin died of SIGKILL) made [`Exit::Killed`] without a signal, as for a wasm plugin: status
/// 137 (or the bad frame's 123), never mirrored onto sandpipe, which would otherwise end itself
/// by a SIGKILL it sent. A SIGKILL from anyone else is the plugin's end, mirrored.
fn own_kill(exit: Exit, killed: bool) -> Exit {
    match exit {
        Exit::Killed {
            signal: Some(libc::SIGKILL),
        } if killed => Exit::Killed { signal: None },
        exit => exit,
    }
}

/// A crash or a non-zero exit, not a limit or a kill.
fn failed_by_itself(exit: &Exit) -> bool {
    matches!(exit, Exit::Trap { .. }) || matches!(exit, Exit::Exited(c) if *c != 0)
}

/// How `run` treats the signals it receives (see [`super::signals`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct SignalPolicy {
    pub(crate) native: bool,
    pub(crate) sigint: SigintMode,
    pub(crate) stdin_is_terminal: bool,
    pub(crate) grace: Duration,
}

/// A SIGTERM emulation in progress: the plugin's stdin is closed, and it is killed at `deadline`.
#[derive(Debug, Default)]
pub(crate) struct Stopping {
    deadline: Option<tokio::time::Instant>,
}

impl Stopping {
    /// Act on `sig`: forward it, start the SIGTERM emulation (a second one kills at once), or
    /// drop it.
    pub(crate) fn on_signal(
        &mut self,
        sig: i32,
        how: SignalPolicy,
        control: &SessionControl,
        close_input: &watch::Sender<bool>,
    ) {
        match signals::action(sig, how.native, how.sigint, how.stdin_is_terminal) {
            Action::Forward(s) => {
                tracing::info!("forwarding signal {s} to the plugin");
                control.signal(s);
            }
            Action::Ignore => tracing::info!("ignoring signal {sig}"),
            Action::Terminate if self.deadline.is_some() => control.kill(),
            Action::Terminate => {
                tracing::info!(
                    "signal {sig}: closing the plugin's stdin, killing it after {:?}",
                    how.grace
                );
                let _ = close_input.send(true);
                self.deadline = Some(tokio::time::Instant::now() + how.grace);
            }
        }
    }

    /// Resolves when the grace period of a SIGTERM emulation is over; never otherwise.
    pub(crate) async fn expired(&self) {
        match self.deadline {
            Some(at) => tokio::time::sleep_until(at).await,
            None => std::future::pending().await,
        }
    }
}

/// How `run` ends: its exit status, and the plugin's signal to end by instead (mirrored).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Ending {
    status: i32,
    by_signal: Option<i32>,
}

/// The README's exit-status table for `run`, as a pure function of how the bridge and the
/// plugin ended (`exit` already through [`own_kill`]).
fn ending(end: Option<&BridgeEnd>, bad_input: bool, exit: &Exit) -> Ending {
    let bad_frame = Ending {
        status: exit_code::BAD_FRAME,
        by_signal: None,
    };
    if bad_input {
        return bad_frame;
    }
    if let Some(BridgeEnd::BadOutput(e)) = end
        && !cut_by_a_crash(e, exit)
    {
        return bad_frame;
    }
    let by_signal = match exit {
        Exit::Killed { signal: Some(sig) } if super::TERMINATING.contains(sig) => Some(*sig),
        _ => None,
    };
    Ending {
        status: status_for(exit),
        by_signal,
    }
}

/// A frame cut off by the plugin's crash is a casualty of the crash: the crash is reported.
fn cut_by_a_crash(e: &FrameError, exit: &Exit) -> bool {
    let abnormal = !matches!(exit, Exit::Exited(_) | Exit::Killed { signal: None });
    matches!(e, FrameError::Truncated { .. }) && abnormal
}

/// Print the one-line reason and choose the exit status.
fn report(end: Option<BridgeEnd>, bad_input: Option<&FrameError>, exit: &Exit) -> i32 {
    let decided = ending(end.as_ref(), bad_input.is_some(), exit);
    if let Some(e) = bad_input {
        eprintln!("sandpipe: bad frame on stdin: {e}");
        return decided.status;
    }
    match &end {
        Some(BridgeEnd::BadOutput(e @ FrameError::Truncated { got, .. }))
            if cut_by_a_crash(e, exit) =>
        {
            eprintln!("sandpipe: dropped an incomplete frame of {got} bytes");
        }
        Some(BridgeEnd::BadOutput(e)) => {
            eprintln!("sandpipe: bad frame from plugin: {e}");
            return decided.status;
        }
        Some(BridgeEnd::StdoutClosed) | None => {}
    }
    if let Some(sig) = decided.by_signal {
        super::end_by_signal_like_the_plugin(sig);
    }
    exit_status(exit);
    decided.status
}

/// The exit status for `exit`, printing the one-line reason for sandpipe-made ones.
pub(crate) fn exit_status(exit: &Exit) -> i32 {
    let code = status_for(exit);
    if !matches!(exit, Exit::Exited(_)) {
        eprintln!("sandpipe: {exit}");
    }
    code
}

/// The exit status for `exit` (see `sandpipe --help`).
pub(crate) fn status_for(exit: &Exit) -> i32 {
    match exit {
        Exit::Exited(code) => *code & 0xff,
        Exit::OutOfFuel { .. } | Exit::CpuTimeLimit { .. } => exit_code::OUT_OF_FUEL,
        Exit::MemoryLimit { .. } => exit_code::MEMORY_LIMIT,
        Exit::DeadlineExceeded { .. } => exit_code::DEADLINE,
        Exit::Trap { .. } => exit_code::TRAP,
        Exit::Killed { signal: Some(sig) } => 128 + sig,
        Exit::Killed { signal: None } => exit_code::KILLED,
        _ => exit_code::KILLED,
    }
}

/// Engine → plugin. What the engine writes is passed on byte for byte, never judged (see
/// [`EngineSplitter`]): frames are split (so they can be recorded and tracked) and capped by
/// `--max-frame`, a JSON Lines line is not parsed, and a CBOR or `Content-Length` stream that
/// loses its framing is passed through as bytes from there on. Only a frame over the cap ends the input, like EOF (the plugin still
/// answers what came before), and is kept in `bad_input` before the plugin's stdin closes.
async fn pump_in(
    mut writer: SessionWriter,
    framing: Option<Framing>,
    limits: FrameLimits,
    bad_input: Arc<OnceLock<FrameError>>,
    mut close: watch::Receiver<bool>,
) {
    let mut stdin = EngineStdin::open();
    let mut splitter = framing.map(|f| EngineSplitter::new(f, limits));
    let mut buf = BytesMut::with_capacity(64 * 1024);
    let mut eof = false;
    loop {
        while let Some(piece) = match &mut splitter {
            Some(split) => split.next(&mut buf, eof),
            None => (!buf.is_empty()).then(|| Piece::Raw(buf.split().freeze())),
        } {
            let sent = match piece {
                // What the engine wrote, byte for byte; the frame is what is recorded.
                Piece::Frame { frame, wire } => writer.send_wire(&frame, &wire).await,
                Piece::Raw(bytes) => writer.send_raw(&bytes).await,
                Piece::TooLarge(e) => {
                    let _ = bad_input.set(e);
                    writer.close().await;
                    return;
                }
                Piece::LostFraming(e) => {
                    tracing::warn!(
                        "the engine's stream lost its framing ({e}); passing it on unframed"
                    );
                    continue;
                }
            };
            if let Err(e) = sent {
                tracing::debug!("plugin stopped reading stdin: {e}");
                return;
            }
        }
        if eof {
            writer.close().await;
            return;
        }
        buf.reserve(64 * 1024);
        tokio::select! {
            read = stdin.read_buf(&mut buf) => match read {
                Ok(0) | Err(_) => eof = true,
                Ok(_) => {}
            },
            // The SIGTERM emulation: the plugin's stdin closes as if the engine had closed ours.
            () = closed(&mut close) => {
                writer.close().await;
                return;
            }
        }
    }
}

/// Resolves once the input is to be closed (or its sender is gone).
async fn closed(close: &mut watch::Receiver<bool>) {
    // The guard `wait_for` returns is not Send: drop it here, inside this function.
    let _ = close.wait_for(|c| *c).await.map(|_| ());
}

async fn pump_out(
    mut reader: SessionReader,
    framing: Option<Framing>,
    limits: FrameLimits,
    written: &std::cell::Cell<u64>,
) -> Result<(), BridgeEnd> {
    let mut stdout = EngineStdout::open();
    let mut encoder = framing.map(|f| f.framer(limits));
    let mut out = BytesMut::new();
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
        let bytes: &[u8] = match (&mut encoder, reader.last_headers()) {
            // The plugin's own header block (Content-Type included), already checked.
            (Some(_), Some(headers)) => {
                out.clear();
                out.extend_from_slice(headers);
                out.extend_from_slice(&frame);
                &out
            }
            (Some(enc), None) => {
                out.clear();
                // The frame was just decoded with the same limits, so this cannot fail.
                enc.encode(&frame, &mut out).map_err(BridgeEnd::BadOutput)?;
                &out
            }
            (None, _) => &frame,
        };
        written.set(written.get() + bytes.len() as u64);
        if stdout.write_all(bytes).await.is_err() {
            return Err(BridgeEnd::StdoutClosed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every way a plugin can end, with every signal number Linux has.
    fn exits() -> Vec<Exit> {
        let mut all = vec![
            Exit::OutOfFuel { limit: 1 },
            Exit::MemoryLimit { limit: 1 },
            Exit::CpuTimeLimit {
                limit: Duration::from_secs(1),
            },
            Exit::DeadlineExceeded {
                limit: Duration::from_secs(1),
            },
            Exit::Trap {
                message: "trap".into(),
                stderr_tail: Vec::new(),
            },
            Exit::Killed { signal: None },
        ];
        all.extend([0, 1, 2, 3, 100, 121, 123, 137, 255, 256, 257, -1].map(Exit::Exited));
        all.extend((1..=64).map(|s| Exit::Killed { signal: Some(s) }));
        all
    }

    fn ends() -> Vec<Option<BridgeEnd>> {
        vec![
            None,
            Some(BridgeEnd::StdoutClosed),
            Some(BridgeEnd::BadOutput(FrameError::Truncated {
                got: 3,
                snippet: String::new(),
            })),
            Some(BridgeEnd::BadOutput(FrameError::TooLarge {
                limit: 1,
                got: 2,
            })),
        ]
    }

    /// The README's table: the plugin's own code, a sandpipe code, or 128 + a signal.
    fn documented(status: i32, exit: &Exit) -> bool {
        match exit {
            Exit::Exited(code) if status == code & 0xff => true,
            _ => [121, 122, 123, 124, 134, 137].contains(&status) || (129..=192).contains(&status),
        }
    }

    /// Exhaustive over the whole input space (a few thousand cases): the exit mapping has
    /// no input a fuzzer could find beyond these.
    #[test]
    fn every_ending_is_documented_and_sandpipe_never_ends_by_its_own_kill() {
        for exit in exits() {
            for killed in [false, true] {
                let exit = own_kill(exit.clone(), killed);
                for end in ends() {
                    for bad_input in [false, true] {
                        let e = ending(end.as_ref(), bad_input, &exit);
                        let case =
                            format!("{exit:?} killed={killed} {end:?} bad_input={bad_input}");
                        assert!(documented(e.status, &exit), "{case}: status {}", e.status);
                        assert!((0..=255).contains(&e.status), "{case}");
                        if killed {
                            assert_ne!(e.by_signal, Some(libc::SIGKILL), "{case}: its own kill");
                        }
                        if let Some(sig) = e.by_signal {
                            assert_eq!(e.status, 128 + sig, "{case}");
                            assert_eq!(exit, Exit::Killed { signal: Some(sig) }, "{case}");
                            assert!(super::super::TERMINATING.contains(&sig), "{case}");
                        }
                        let bad_output = matches!(&end, Some(BridgeEnd::BadOutput(f)) if !cut_by_a_crash(f, &exit));
                        if bad_input || bad_output {
                            assert_eq!(e.status, exit_code::BAD_FRAME, "{case}");
                            assert_eq!(e.by_signal, None, "{case}");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn its_own_kill_is_137_or_the_bad_frames_123() {
        let killed = own_kill(
            Exit::Killed {
                signal: Some(libc::SIGKILL),
            },
            true,
        );
        let plain = ending(None, false, &killed);
        assert_eq!((plain.status, plain.by_signal), (137, None));
        let bad = BridgeEnd::BadOutput(FrameError::Truncated {
            got: 1,
            snippet: String::new(),
        });
        assert_eq!(ending(Some(&bad), false, &killed).status, 123);
        // A SIGKILL from anyone else is the plugin's end, mirrored.
        let foreign = Exit::Killed {
            signal: Some(libc::SIGKILL),
        };
        assert_eq!(ending(None, false, &foreign).by_signal, Some(libc::SIGKILL));
    }
}
