//! `sandpipe replay`: check a plugin build against a recorded session, or stand in for the
//! plugin.

use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use sandpipe_proto::frame::{FrameLimits, Piece};
use sandpipe_proto::transcript::Recording;

use super::CacheArgs;
use super::engine::{EngineReader, EngineWriter, WriteError};
use super::sandbox_args::warn_if_native;
use super::status::{bad_frame_in, bad_frame_out};
use crate::net::{NetReplay, NetTape};
use crate::policy::value::parse_size;
use crate::policy_file::DEFAULT_MAX_FRAME;
use crate::replay::{self, MatchMode, ScratchDirs, StandIn};
use crate::{PluginKind, SessionOptions, StderrMode};

/// Arguments of `sandpipe replay`.
#[derive(Debug, clap::Args)]
pub struct ReplayArgs {
    /// The transcript (from `--record`, or a golden file in tests/transcripts).
    file: PathBuf,
    /// Check this plugin: feed it the recorded host→plugin frames (with the recorded policy and
    /// seed) and compare every frame it sends. Exit 0 when identical; otherwise 1 and the first
    /// divergent frame as a diff.
    #[arg(
        long,
        value_name = "PLUGIN",
        conflicts_with = "serve",
        required_unless_present_any = ["serve", "har"]
    )]
    plugin: Option<PathBuf>,
    /// Write the recording's HTTP exchanges as HAR 1.2 to this file (`-` for stdout), for the
    /// tools that show traffic; with --plugin, after the check.
    #[arg(long, value_name = "OUT.har", conflicts_with = "serve")]
    har: Option<PathBuf>,
    /// Act as the plugin on stdin/stdout: answer each incoming frame with the recorded
    /// response. An engine can put `sandpipe replay x.transcript --serve` in its plugin command.
    #[arg(long)]
    serve: bool,
    /// How --serve matches incoming frames: `strict` (in order, byte for byte) or `id` (by
    /// JSON-RPC request id, for protocols whose responses may come out of order).
    #[arg(long = "match", value_name = "MODE", default_value = "strict", value_parser = ["strict", "id"])]
    match_mode: String,
    /// Use this host directory for a recorded preopen (HOST::GUEST); recorded preopens without
    /// one get a fresh empty directory.
    #[arg(long = "dir", value_name = "HOST::GUEST")]
    dirs: Vec<String>,
    /// Largest frame accepted in either direction (e.g. 16MiB), as for `run`: with --serve, an
    /// engine frame over it ends the replay with status 123 [default: the recording's
    /// limits.max-frame, else 16MiB].
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    max_frame: Option<u64>,
    /// With --plugin: where the plugin's connections go. `recorded` (the default): nowhere;
    /// each is served from the recording (matched by host, port and order, and for HTTP by
    /// method, URL and body), and one the recording does not have is refused and reported.
    /// `live`: to the network, under the recorded allow-list, as the plugin was run.
    #[arg(long, value_name = "MODE", default_value = "recorded", value_parser = ["recorded", "live"])]
    network: String,
    /// With --plugin: how long to wait for each expected frame before calling it a divergence.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = super::parse_duration)]
    wait: std::time::Duration,
    #[command(flatten)]
    cache: CacheArgs,
    #[command(flatten)]
    dist: super::dist::DistArgs,
}

pub(crate) async fn replay(args: ReplayArgs) -> Result<i32> {
    let text = std::fs::read_to_string(&args.file)
        .with_context(|| format!("reading {}", args.file.display()))?;
    let recording =
        Recording::parse(&text).with_context(|| format!("parsing {}", args.file.display()))?;
    let transcript = &recording.transcript;
    // The recording's own cap unless one is given: replay runs under the recorded policy.
    let recorded_max_frame = replay::document_of(transcript)
        .ok()
        .and_then(|doc| doc.limits.max_frame);
    let max_frame = args
        .max_frame
        .or(recorded_max_frame)
        .unwrap_or(DEFAULT_MAX_FRAME);
    let limits =
        FrameLimits::with_max_frame_bytes(usize::try_from(max_frame).unwrap_or(usize::MAX));
    if let Some(out) = &args.har {
        let har = serde_json::to_string_pretty(&replay::har(&recording))?;
        if out.as_os_str() == "-" {
            println!("{har}");
        } else {
            std::fs::write(out, har + "\n")
                .with_context(|| format!("writing {}", out.display()))?;
        }
        if args.plugin.is_none() {
            return Ok(0);
        }
    }
    if args.serve {
        let mode = if args.match_mode == "id" {
            MatchMode::ById
        } else {
            MatchMode::Strict
        };
        let stand_in = StandIn::new(transcript, mode).map_err(anyhow::Error::msg)?;
        return Ok(serve(stand_in, limits).await);
    }
    let Some(plugin_path) = &args.plugin else {
        bail!("give --plugin PLUGIN or --serve")
    };
    let host = super::host(args.cache.dir())?;
    let plugin = super::dist::load(&host, plugin_path, &args.dist, &args.cache).await?;
    if let Some(sha) = transcript.header("sha256")
        && sha != plugin.sha256()
    {
        eprintln!(
            "sandpipe: note: the plugin's sha256 differs from the recording's (a different build)"
        );
    }
    let mut given = Vec::new();
    for spec in &args.dirs {
        let dir: crate::policy::document::Dir = spec.parse().map_err(anyhow::Error::msg)?;
        given.push((dir.guest, dir.host));
    }
    let scratch = ScratchDirs::new()?;
    let host_dir = |guest: &str| {
        given
            .iter()
            .find(|(g, _)| g == guest)
            .map(|(_, h)| h.clone())
            .unwrap_or_else(|| scratch.dir_for(guest))
    };
    let native = plugin.kind() == PluginKind::NativeUnsandboxed;
    let mut policy =
        replay::recorded_policy(transcript, native, &host_dir).map_err(anyhow::Error::msg)?;
    // A live network needs every recorded header's secret; offline, nothing is sent.
    if args.network != "recorded"
        && replay::recorded_headers(transcript).map_err(anyhow::Error::msg)?
            != policy.net.http_headers.len()
    {
        anyhow::bail!(
            "replay --network live: set the variables of the recorded --http-headers (their values are never recorded)"
        );
    }
    // Offline unless told otherwise: the recording is the plugin's network.
    let net = (args.network == "recorded").then(|| std::sync::Arc::new(NetReplay::new(&recording)));
    if let Some(net) = &net {
        policy.tape = Some(NetTape::Replay(net.clone()));
    }
    warn_if_native(&plugin, &policy);
    let framing = replay::framing_of(transcript).map_err(anyhow::Error::msg)?;
    let options = SessionOptions::framed(framing)
        .frame_limits(limits)
        .stderr(StderrMode::Inherit);
    // A recording names its protocol when `run --protocol` made it; a component that exports
    // functions is started speaking it, as `run` did ([`crate::Host::start_speaking`]).
    let mut session = match replay::protocol_of(transcript) {
        Some(protocol) => {
            host.start_speaking(&plugin, &policy, &options, protocol)
                .await?
        }
        None => host.start(&plugin, &policy, &options).await?,
    };
    let checked = match &net {
        Some(net) => replay::check_recording(&mut session, &recording, net, args.wait).await,
        None => replay::check(&mut session, transcript, args.wait)
            .await
            .map_err(replay::Mismatch::frames),
    };
    match checked {
        Ok(exit) => {
            let frames = transcript.entries.len();
            let exchanges = net.as_ref().map_or(0, |n| n.len());
            let network = match exchanges {
                0 => String::new(),
                n => format!(" and {n} network exchanges"),
            };
            say(&format!(
                "sandpipe: replay matched all {frames} frames{network}; {exit}\n"
            ));
            Ok(0)
        }
        Err(d) => {
            session.kill();
            say(&format!("sandpipe: {d}"));
            Ok(1)
        }
    }
}

/// `--serve`: the recording stands in for the plugin on sandpipe's stdin and stdout, read and
/// written as `run` reads and writes them ([`EngineReader`], [`EngineWriter`]) under
/// `--max-frame`. The status: 0 when every frame matched, 1 when one did not (it got the
/// protocol's error), 123 for an engine frame over the cap or a stream that lost its framing
/// (`run --protocol`'s rule: the replay needs frames), and for a recorded frame over the cap.
async fn serve(mut stand_in: StandIn<'_>, limits: FrameLimits) -> i32 {
    let framing = stand_in.framing();
    let mut reader = EngineReader::open(Some(framing), limits);
    let mut writer = EngineWriter::open(Some(framing), limits);
    let mut out = stand_in.leading();
    loop {
        for frame in out.drain(..) {
            match writer.write(&frame, None).await {
                Ok(()) => {}
                Err(WriteError::Frame(e)) => return bad_frame_out(&e),
                // The engine is gone: nobody reads what else the recording says.
                Err(WriteError::Closed) => return verdict(&stand_in),
            }
        }
        match reader.next().await {
            Some(Piece::Frame { frame, .. }) => {
                let answer = stand_in.answer(&frame);
                if let Some(message) = &answer.unexpected {
                    eprintln!("sandpipe: {message}");
                }
                out = answer.frames;
            }
            // A blank JSON Lines line: no frame.
            Some(Piece::Raw(_)) => {}
            Some(Piece::TooLarge(e) | Piece::LostFraming(e)) => return bad_frame_in(&e),
            None => return verdict(&stand_in),
        }
    }
}

/// 0 when every engine frame matched the recording, else 1.
fn verdict(stand_in: &StandIn<'_>) -> i32 {
    i32::from(stand_in.report().unexpected != 0)
}

/// Write the verdict to stderr in one `write`. The plugin's stderr is forwarded to the same
/// descriptor, as it comes, until it ends; `eprint!` writes each piece of its format
/// separately, so a plugin's line could land inside the verdict (it did: "first divergence at
/// frame hog: sqrt starting\n3: …").
fn say(report: &str) {
    use std::io::Write as _;
    let _ = std::io::stderr().lock().write_all(report.as_bytes());
}
