//! `sandpipe run`: bridge sandpipe's stdin/stdout to a plugin's.

use std::path::PathBuf;

use anyhow::{Context, Result};
use bytes::BytesMut;
use sandpipe_proto::frame::{FrameError, FrameLimits, Framer, Framing};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::exit_code;
use super::sandbox_args::{SandboxArgs, warn_if_native};
use crate::{Exit, Host, SessionError, SessionOptions, SessionReader, SessionWriter, StderrMode};

/// Arguments of `sandpipe run`.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// Framing of both directions: raw passes bytes through; the others validate every frame
    /// and end the session with a one-line reason on the first bad one.
    #[arg(long, default_value = "raw", value_parser = ["raw", "lines", "cbor", "content-length"])]
    framing: String,
    /// Speak protocol P (jsonrpc, oracle, orchard, denobridge, atp, finecode) with the engine on
    /// stdin/stdout: frames use the protocol's framing, requests are tracked, and the per-request
    /// options below apply. A request the plugin cannot answer gets the protocol's error.
    #[arg(long, value_name = "P", conflicts_with_all = ["framing", "record"])]
    protocol: Option<crate::protocols::Protocol>,
    #[command(flatten)]
    sandbox: SandboxArgs,
    #[command(flatten)]
    budgets: super::proxy::BudgetArgs,
    /// Record the session (every frame both ways, the policy, the outcome) as a transcript;
    /// needs --framing.
    #[arg(long, value_name = "FILE")]
    record: Option<PathBuf>,
    /// The plugin: a .wasm component or p1 module (sandboxed), an
    /// oci://HOST[:PORT]/REPO[:TAG][@sha256:HEX] reference, or any other executable (run
    /// natively, NOT sandboxed).
    plugin: PathBuf,
    /// Arguments for the plugin: everything after PLUGIN goes to the plugin, as with
    /// `wasmtime run` (a leading `--` is dropped).
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    args: Vec<String>,
}

impl RunArgs {
    fn framing(&self) -> Option<Framing> {
        match self.framing.as_str() {
            "raw" => None,
            other => other.parse().ok(),
        }
    }
}

/// Why the bridge stopped early.
enum BridgeEnd {
    /// sandpipe's own stdin had a bad frame.
    BadInput(FrameError),
    /// The plugin wrote a bad frame.
    BadOutput(FrameError),
    /// sandpipe's stdout went away.
    StdoutClosed,
}

pub(crate) async fn run(args: RunArgs) -> Result<i32> {
    let host = Host::with_cache_dir(args.sandbox.cache.dir().as_deref())?;
    let plugin =
        super::dist::load(&host, &args.plugin, &args.sandbox.dist, &args.sandbox.cache).await?;
    let args_for_plugin = args
        .args
        .strip_prefix(&["--".to_owned()])
        .unwrap_or(&args.args)
        .to_vec();
    let policy = args.sandbox.policy(args_for_plugin)?;
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
    warn_if_native(&plugin);
    if let Some(protocol) = args.protocol {
        let options = SessionOptions::default()
            .frame_limits(args.sandbox.frame_limits())
            .stderr(StderrMode::Inherit);
        return super::proxy::run_proxy(&host, &plugin, policy, options, protocol, &args.budgets)
            .await;
    }
    let framing = args.framing();
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
    let session = host
        .start(&plugin, &policy, &options)
        .await
        .with_context(|| format!("starting plugin {}", plugin.path().display()))?;
    let (writer, reader, control) = session.into_split();

    let input = tokio::spawn(pump_in(writer, framing, limits));
    let output = pump_out(reader, framing, limits);
    tokio::pin!(output);
    let mut input = Some(input);
    let mut end: Option<BridgeEnd> = None;
    loop {
        tokio::select! {
            out = &mut output => {
                if let Err(e) = out { end.get_or_insert(e); }
                break;
            }
            joined = async { input.as_mut().expect("guarded by the if").await }, if input.is_some() => {
                input = None;
                // A bad frame on our stdin ends the input like EOF does (the pump closed the
                // plugin's stdin), so the plugin still answers every frame sent before it.
                if let Ok(Err(e)) = joined {
                    end = Some(e);
                }
            }
        }
    }
    if matches!(end, Some(BridgeEnd::BadOutput(_) | BridgeEnd::StdoutClosed)) {
        control.kill();
    }
    let exit = control.wait().await;
    Ok(report(end, &exit))
}

/// Print the one-line reason and choose the exit status.
fn report(end: Option<BridgeEnd>, exit: &Exit) -> i32 {
    let abnormal = !matches!(exit, Exit::Exited(_) | Exit::Killed { signal: None });
    match end {
        Some(BridgeEnd::BadInput(e)) => {
            eprintln!("sandpipe: bad frame on stdin: {e}");
            return exit_code::BAD_FRAME;
        }
        // A frame cut off by the plugin's crash is a casualty of the crash: report the crash.
        Some(BridgeEnd::BadOutput(FrameError::Truncated { got, .. })) if abnormal => {
            eprintln!("sandpipe: dropped an incomplete frame of {got} bytes");
        }
        Some(BridgeEnd::BadOutput(e)) => {
            eprintln!("sandpipe: bad frame from plugin: {e}");
            return exit_code::BAD_FRAME;
        }
        Some(BridgeEnd::StdoutClosed) | None => {}
    }
    exit_status(exit)
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
    }
}

async fn pump_in(
    mut writer: SessionWriter,
    framing: Option<Framing>,
    limits: FrameLimits,
) -> Result<(), BridgeEnd> {
    let mut stdin = tokio::io::stdin();
    let mut framer = framing.map(|f| f.framer(limits));
    let mut buf = BytesMut::with_capacity(64 * 1024);
    let mut eof = false;
    loop {
        if let Some(framer) = &mut framer {
            loop {
                let next = if eof {
                    framer.decode_eof(&mut buf)
                } else {
                    framer.decode(&mut buf)
                };
                let next = match next {
                    Ok(next) => next,
                    Err(e) => {
                        writer.close().await;
                        return Err(BridgeEnd::BadInput(e));
                    }
                };
                match next {
                    Some(frame) => {
                        if send(&mut writer, &frame).await.is_err() {
                            return Ok(());
                        }
                    }
                    None => break,
                }
            }
        } else if !buf.is_empty() {
            let chunk = buf.split();
            if send(&mut writer, &chunk).await.is_err() {
                return Ok(());
            }
        }
        if eof {
            writer.close().await;
            return Ok(());
        }
        buf.reserve(64 * 1024);
        match stdin.read_buf(&mut buf).await {
            Ok(0) | Err(_) => eof = true,
            Ok(_) => {}
        }
    }
}

/// Send; a plugin that stopped reading ends the input side quietly (its exit tells why).
async fn send(writer: &mut SessionWriter, frame: &[u8]) -> Result<(), SessionError> {
    writer
        .send(frame)
        .await
        .inspect_err(|e| tracing::debug!("plugin stopped reading stdin: {e}"))
}

async fn pump_out(
    mut reader: SessionReader,
    framing: Option<Framing>,
    limits: FrameLimits,
) -> Result<(), BridgeEnd> {
    let mut stdout = tokio::io::stdout();
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
        let bytes: &[u8] = match &mut encoder {
            Some(enc) => {
                out.clear();
                // The frame was just decoded with the same limits, so this cannot fail.
                enc.encode(&frame, &mut out).map_err(BridgeEnd::BadOutput)?;
                &out
            }
            None => &frame,
        };
        if stdout.write_all(bytes).await.is_err() || stdout.flush().await.is_err() {
            return Err(BridgeEnd::StdoutClosed);
        }
    }
}
