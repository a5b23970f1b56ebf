//! `sandpipe run`: bridge sandpipe's stdin/stdout to a plugin's.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};
use bytes::BytesMut;
use sandpipe_proto::frame::{FrameError, FrameLimits, Framer, Framing};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::{CacheArgs, MemoryCap, exit_code, parse_duration, parse_memory, parse_size};
use crate::{
    Access, Exit, Host, ImportPolicy, PluginKind, Policy, SessionError, SessionOptions,
    SessionReader, SessionWriter, StderrMode,
};

/// Arguments of `sandpipe run`.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// Framing of both directions: raw passes bytes through; the others validate every frame
    /// and end the session with a one-line reason on the first bad one.
    #[arg(long, default_value = "raw", value_parser = ["raw", "lines", "cbor", "content-length"])]
    framing: String,
    /// Total fuel (about one unit per wasm instruction) for the whole run [default: unlimited].
    #[arg(long, value_name = "N")]
    fuel: Option<u64>,
    /// Memory cap: linear memory for wasm, RLIMIT_AS for native (e.g. 64MiB, or none).
    #[arg(long, value_name = "SIZE", default_value = "256MiB", value_parser = parse_memory)]
    max_memory: MemoryCap,
    /// Wall-clock deadline for the whole run (e.g. 2s, 500ms) [default: none].
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    timeout: Option<Duration>,
    /// Preopen a host directory: HOST[::GUEST][:ro]. GUEST defaults to HOST; `:ro` makes it
    /// read-only. Without --dir the plugin sees no filesystem.
    #[arg(long = "dir", value_name = "HOST[::GUEST][:ro]")]
    dirs: Vec<String>,
    /// Pass an environment variable: NAME=VALUE, or NAME to copy sandpipe's own value.
    /// Nothing else is inherited.
    #[arg(long = "env", value_name = "NAME[=VALUE]")]
    envs: Vec<String>,
    /// Largest frame accepted in either direction (e.g. 16MiB).
    #[arg(long, value_name = "SIZE", default_value = "16MiB", value_parser = parse_size)]
    max_frame: u64,
    /// Strict imports: refuse a component importing anything not listed (repeatable;
    /// e.g. wasi:cli/stdin@0.2; patch versions are ignored).
    #[arg(long = "allow-import", value_name = "INTERFACE")]
    allow_imports: Vec<String>,
    #[command(flatten)]
    cache: CacheArgs,
    /// The plugin: a .wasm component or p1 module (sandboxed), or any other executable (run
    /// natively, NOT sandboxed).
    plugin: PathBuf,
    /// Arguments for the plugin: everything after PLUGIN goes to the plugin, as with
    /// `wasmtime run` (a leading `--` is dropped).
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    args: Vec<String>,
}

/// Parse `HOST[::GUEST][:ro|:rw]`.
pub(crate) fn parse_dir(spec: &str) -> Result<(PathBuf, String, Access), String> {
    let (rest, access) = if let Some(r) = spec.strip_suffix(":ro") {
        (r, Access::ReadOnly)
    } else if let Some(r) = spec.strip_suffix(":rw") {
        (r, Access::ReadWrite)
    } else {
        (spec, Access::ReadWrite)
    };
    let (host, guest) = match rest.split_once("::") {
        Some((h, g)) => (h, g.to_owned()),
        None => (rest, rest.to_owned()),
    };
    if host.is_empty() || guest.is_empty() {
        return Err(format!(
            "invalid --dir {spec:?}: expected HOST[::GUEST][:ro]"
        ));
    }
    Ok((PathBuf::from(host), guest, access))
}

impl RunArgs {
    fn policy(&self) -> Result<Policy> {
        let mut policy = Policy::default().max_memory(self.max_memory.0);
        policy.fuel = self.fuel;
        policy.deadline = self.timeout;
        for spec in &self.dirs {
            let (host, guest, access) = parse_dir(spec).map_err(anyhow::Error::msg)?;
            policy = policy.preopen(host, guest, access);
        }
        for spec in &self.envs {
            match spec.split_once('=') {
                Some((k, v)) => policy = policy.env(k, v),
                None => {
                    if let Ok(v) = std::env::var(spec) {
                        policy = policy.env(spec.as_str(), v);
                    }
                }
            }
        }
        let args = self
            .args
            .strip_prefix(&["--".to_owned()])
            .unwrap_or(&self.args);
        policy.args = args.to_vec();
        if !self.allow_imports.is_empty() {
            policy = policy.imports(ImportPolicy::Strict(self.allow_imports.clone()));
        }
        Ok(policy)
    }

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
    let host = Host::with_cache_dir(args.cache.dir().as_deref())?;
    let plugin = host
        .load(&args.plugin)
        .with_context(|| format!("loading plugin {}", args.plugin.display()))?;
    let policy = args.policy()?;
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
    if plugin.kind() == PluginKind::NativeUnsandboxed {
        eprintln!(
            "sandpipe: {} is not wasm; running it natively, NOT sandboxed (fuel, filesystem and network are not restricted)",
            plugin.path().display()
        );
    }
    let framing = args.framing();
    let limits =
        FrameLimits::with_max_frame_bytes(usize::try_from(args.max_frame).unwrap_or(usize::MAX));
    let mut options = SessionOptions::default()
        .frame_limits(limits)
        .stderr(StderrMode::Inherit);
    options.framing = framing;
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
    let code = match exit {
        Exit::Exited(code) => return *code & 0xff,
        Exit::OutOfFuel { .. } => exit_code::OUT_OF_FUEL,
        Exit::MemoryLimit { .. } => exit_code::MEMORY_LIMIT,
        Exit::DeadlineExceeded { .. } => exit_code::DEADLINE,
        Exit::Trap { .. } => exit_code::TRAP,
        Exit::Killed { signal: Some(sig) } => 128 + sig,
        Exit::Killed { signal: None } => exit_code::KILLED,
    };
    eprintln!("sandpipe: {exit}");
    code
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dir_specs() {
        assert_eq!(
            parse_dir("/tmp/x"),
            Ok((
                PathBuf::from("/tmp/x"),
                "/tmp/x".to_owned(),
                Access::ReadWrite
            ))
        );
        assert_eq!(
            parse_dir("/tmp/x::/data:ro"),
            Ok((
                PathBuf::from("/tmp/x"),
                "/data".to_owned(),
                Access::ReadOnly
            ))
        );
        assert_eq!(
            parse_dir("./d::/d:rw"),
            Ok((PathBuf::from("./d"), "/d".to_owned(), Access::ReadWrite))
        );
        assert!(parse_dir("::/x").is_err());
    }
}
