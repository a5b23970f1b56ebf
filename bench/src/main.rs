//! sandpipe's macro benchmarks: round-trip latency and start-up time, measured in one run and
//! written to `BENCHMARKS.md` at the workspace root.
//!
//! ```sh
//! cargo run --release -p sandpipe-bench            # 1-2 minutes on 2 cores; writes BENCHMARKS.md
//! cargo run --release -p sandpipe-bench -- --quick # smoke mode: every figure, a few iterations,
//!                                                  # prints the tables, writes nothing
//! cargo run --release -p sandpipe-bench -- --process-only  # only `sandpipe run` over pipes
//! cargo run --release -p sandpipe-bench -- --net   # only the network allow-list, printed
//! cargo run --release -p sandpipe-bench -- --net-record  # recording, replay, --tls-intercept
//! cargo run --release -p sandpipe-bench -- --serve # `sandpipe serve` against supergateway, mcp-proxy
//! cargo run --release -p sandpipe-bench -- --frames          # 64 KiB frames vs the wasmtime CLI
//! cargo run --release -p sandpipe-bench -- --profile-frames  # where a 64 KiB round trip goes
//! ```
//!
//! ```text
//!  sandpipe-bench ─ builds echo-lines (wasm32-wasip2 and native) via sandpipe_tests::plugin
//!    ├─ sandpipe-bench --phase pinned    CPU 0 for the process and its children,
//!    │                                   current_thread runtime ─┐
//!    ├─ sandpipe-bench --phase unpinned  no affinity,            ├─ "figure <id> <n> <p50> <p99>"
//!    │                                   multi-thread runtime ───┘    lines on stdout
//!    └─ report: machine, command, figures with CPU placement, targets met / missed
//! ```
//!
//! Each phase measures, per frame size (100 B and 64 KiB JSON Lines):
//! - the plain-function floor (sandpipe-proto's JSON Lines framer doing a round trip's four
//!   steps, no transport) and, for reference, a `serde_json::Value` parse + re-serialize;
//! - the hand-written baseline: the native `echo-lines` under `std::process::Command`, one
//!   blocking write and one `BufReader` line read per round trip;
//! - sandpipe's native fallback and sandpipe's wasm sandbox (`Host::start` on each build);
//!
//! and start to first response: native spawn, wasm cold compile, wasm from the on-disk cache,
//! wasm with the reused pre-instance (plus both with a `Plugin` already in hand).
//!
//! Then the process-level section (`process.rs`, alone with `--process-only`): a driver child
//! spawns `sandpipe run` (the `sandpipe` binary built with this bench's profile) and talks to
//! it over pipes as an engine does, against the native plugin run directly: round trips per
//! framing, pinned and unpinned, throughput, spawn to first response, and the componentize-py
//! oracle's cached start against CPython and its cold compile with and without fuel and epochs.
//!
//! What it does not do: assert any speed (a missed target is reported, never an error), or
//! measure many-session scale, throughput, framer throughput or fuel/epoch overhead.
//! No cargo features.

mod aliasing;
mod copies;
mod frames;
mod framings;
mod fuel;
mod machine;
mod measure;
mod net;
mod net_record;
mod pin;
mod process;
mod report;
mod roundtrip;
mod scale;
mod serve;
mod start_profile;
mod startup;

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::Duration;

use anyhow::{Context, bail, ensure};
use sandpipe::{Host, HostOptions, Pooling};
use sandpipe_tests::Target;

use measure::{Plan, Stats};
use report::{Figure, Rate, Run, SIZES};

/// The command that produces BENCHMARKS.md, as written into it.
const COMMAND: &str = "cargo run --release -p sandpipe-bench";

/// Where the two kinds of figure run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// The process (and its children) on CPU 0, a current_thread runtime.
    Pinned,
    /// No affinity, the default multi-thread runtime.
    Unpinned,
}

impl Phase {
    const ALL: [Phase; 2] = [Phase::Pinned, Phase::Unpinned];

    pub fn name(self) -> &'static str {
        match self {
            Phase::Pinned => "pinned",
            Phase::Unpinned => "unpinned",
        }
    }
}

#[derive(Debug, Default)]
struct Args {
    quick: bool,
    process_only: bool,
    net: bool,
    frames: bool,
    profile_frames: bool,
    profile_start: bool,
    net_record: bool,
    serve: bool,
    static_build: bool,
    phase: Option<Phase>,
    wasm: Option<PathBuf>,
    native: Option<PathBuf>,
    profile: Option<String>,
}

const USAGE: &str = "usage: sandpipe-bench [--quick] [--process-only] [--net] [--net-record] [--serve] [--frames] [--profile-frames] [--profile-start] [--static]\n\
    \x20      --frames: 100 B and 64 KiB round trips and a 64 KiB stream through `sandpipe run`, against the plugin direct, the relay and the wasmtime CLI, printed\n\
    \x20      --profile-frames: system calls (strace) and large user-space copies (bench/copy-count) per 64 KiB round trip, the guest's wasm operators per byte (fuel) and a 64 KiB copy by where it lands, printed\n\
    \x20      --profile-start: `sandpipe run /bin/true` against bubblewrap with the same namespaces, alternated, and where sandpipe's native start goes, phase by phase; printed, and written into BENCHMARKS.md unless --quick\n\
    \x20      --process-only: only the process-level section (`sandpipe run` over pipes), printed, not written\n\
    \x20      --net: only the network section (the allow-list's proxy per connection and per request, a native start), printed\n\
    \x20      --net-record: a plugin's requests (native through the proxy, wasm through wasi:http) live, under --record and replayed, and --tls-intercept against a CONNECT tunnel; printed, and written into BENCHMARKS.md unless --quick\n\
    \x20      --serve: `sandpipe serve` against supergateway, mcp-proxy and the server's own HTTP mode at 1 to 1,000 concurrent sessions (calls/s, latency, first answer, memory per client); printed, and written into BENCHMARKS.md unless --quick\n\
    \x20      --static: also build the static non-PIE sandpipe and measure its start (a full build of its own)\n\
    \x20      (internal) sandpipe-bench --phase pinned|unpinned --wasm PATH --native PATH [--quick]\n\
    \x20      (profiling) ... --phase pinned --wasm PATH --native PATH --profile start|start-pooled|start-warm|rt100|rt64k|native100|native64k\n\
    \x20                  loops one scenario for 10 s under `perf record`, measuring nothing";

fn parse_args() -> anyhow::Result<Args> {
    let mut args = Args::default();
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = || {
            it.next()
                .with_context(|| format!("{arg} needs a value\n{USAGE}"))
        };
        match arg.as_str() {
            "--quick" => args.quick = true,
            "--process-only" => args.process_only = true,
            "--net" => args.net = true,
            "--net-record" => args.net_record = true,
            "--serve" => args.serve = true,
            "--frames" => args.frames = true,
            "--profile-frames" => args.profile_frames = true,
            "--profile-start" => args.profile_start = true,
            "--static" => args.static_build = true,
            "--phase" => {
                args.phase = Some(match value()?.as_str() {
                    "pinned" => Phase::Pinned,
                    "unpinned" => Phase::Unpinned,
                    other => bail!("unknown phase {other:?}\n{USAGE}"),
                })
            }
            "--wasm" => args.wasm = Some(value()?.into()),
            "--profile" => args.profile = Some(value()?),
            "--native" => args.native = Some(value()?.into()),
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            other => bail!("unknown argument {other:?}\n{USAGE}"),
        }
    }
    Ok(args)
}

/// A child mode's main, given the arguments after its flag.
type ChildMain = fn(&[String]) -> anyhow::Result<()>;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    // A child the bench starts with a hidden flag: what it does, and its name in errors.
    let children: [(&str, &str, ChildMain); 4] = [
        (net::CLIENT_FLAG, "net client", net::client),
        (
            net_record::CLIENT_FLAG,
            "net-record client",
            net_record::client,
        ),
        (frames::CHECKS_FLAG, "checks", frames::checks_child),
        (process::RELAY_FLAG, "relay", process::relay_floor),
    ];
    for (flag, what, child) in children {
        if args.first().map(String::as_str) == Some(flag) {
            return match child(&args[1..]) {
                Ok(()) => ExitCode::SUCCESS,
                Err(err) => {
                    eprintln!("sandpipe-bench: {what}: {err:#}");
                    ExitCode::FAILURE
                }
            };
        }
    }
    let result = match (scale::child_args(), process::child_args()) {
        (Some(child), _) => scale::child_main(&child),
        (None, Some(driver)) => process::child_main(&driver),
        (None, None) => parse_args().and_then(|args| match args.phase {
            Some(phase) => run_phase(phase, &args),
            None => run_all(&args),
        }),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("sandpipe-bench: {err:#}");
            ExitCode::FAILURE
        }
    }
}

/// The parent: build the plugins, run each phase in a child process, report.
fn run_all(args: &Args) -> anyhow::Result<()> {
    if args.net || args.net_record || args.profile_start || args.serve {
        eprintln!("sandpipe-bench: building the sandpipe binary (this bench's profile)");
        let sandpipe = process::build_sandpipe()?;
        if args.serve {
            return serve::run(&sandpipe, args.quick);
        }
        if args.net_record {
            return net_record::run(&sandpipe, args.quick);
        }
        if args.profile_start {
            return start_profile::run(&sandpipe, args.quick);
        }
        return net::run(&sandpipe, args.quick);
    }
    let load1_before = machine::load1();
    eprintln!("sandpipe-bench: building the echo-lines plugin (wasm and native)");
    let wasm = sandpipe_tests::plugin("echo-lines", Target::Wasm);
    let native = sandpipe_tests::plugin("echo-lines", Target::Native);
    for p in [&wasm, &native] {
        ensure!(p.is_file(), "plugin {} was not built", p.display());
    }
    let exe = std::env::current_exe().context("finding the bench binary")?;
    eprintln!("sandpipe-bench: building the sandpipe binary (this bench's profile)");
    let sandpipe = process::build_sandpipe()?;
    if args.frames || args.profile_frames {
        let inputs = frames::Inputs {
            sandpipe,
            wasm,
            native,
        };
        if args.profile_frames {
            let target = exe
                .parent()
                .and_then(Path::parent)
                .context("the target directory")?
                .join("no-simd128");
            eprintln!("sandpipe-bench: building the echo plugins without simd128");
            let nosimd = frames::build_without_simd(&target);
            eprintln!("sandpipe-bench: building the copy counter (bench/copy-count)");
            return frames::profile(&inputs, nosimd, copies::build());
        }
        return frames::run(&inputs);
    }
    let python = process::python_plugins(args.quick);
    let oracle = process::oracle_plugins();
    let static_sandpipe = if args.static_build {
        eprintln!("sandpipe-bench: building the static non-PIE sandpipe binary");
        Some(process::build_static_sandpipe()?)
    } else {
        None
    };
    let inputs = process::Inputs {
        static_sandpipe,
        sandpipe,
        wasm: wasm.clone(),
        native: native.clone(),
        python,
        oracle,
    };
    if args.process_only {
        let results = process::run(&exe, &inputs, args.quick)?;
        print!("{}", process::render(&results));
        return Ok(());
    }
    let cpus = machine::cpus();
    let mut figures = Vec::new();
    let mut rates = Vec::new();
    let mut other_load = Vec::new();
    for phase in Phase::ALL {
        eprintln!("sandpipe-bench: {} phase", phase.name());
        let before = machine::CpuTicks::now();
        let mut cmd = Command::new(&exe);
        cmd.args(["--phase", phase.name()])
            .arg("--wasm")
            .arg(&wasm)
            .arg("--native")
            .arg(&native)
            .stdin(Stdio::null())
            .stderr(Stdio::inherit());
        if args.quick {
            cmd.arg("--quick");
        }
        let out = cmd.output().context("running a phase")?;
        let after = machine::CpuTicks::now();
        ensure!(
            out.status.success(),
            "the {} phase failed ({})",
            phase.name(),
            out.status
        );
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            if line.starts_with("throughput\t") {
                rates.push(parse_rate(phase, line)?);
            } else {
                figures.push(parse_figure(phase, line)?);
            }
        }
        other_load.push((
            phase,
            before.zip(after).and_then(|(b, a)| b.other_load(&a, cpus)),
        ));
    }
    let run = Run {
        quick: args.quick,
        release: !cfg!(debug_assertions),
        command: if args.quick {
            format!("{COMMAND} -- --quick")
        } else {
            COMMAND.to_owned()
        },
        argv: std::env::args().collect::<Vec<_>>().join(" "),
        cpu_model: machine::cpu_model(),
        cpus,
        kernel: machine::kernel(),
        date: machine::now_utc(),
        load1_before,
        other_load,
        figures,
        rates,
    };
    let scale = scale::run(&exe, &wasm, &native, args.quick)?;
    let proc_results = process::run(&exe, &inputs, args.quick)?;
    let mut text = report::render(&run);
    text.push_str(&scale::render(&scale));
    text.push_str(&process::render(&proc_results));
    print!("{text}");
    if !args.quick {
        let path = sandpipe_tests::workspace_root().join("BENCHMARKS.md");
        // The method and the other generators' sections, below the marker, survive a rerun.
        let kept = std::fs::read_to_string(&path)
            .ok()
            .and_then(|old| old.find(report::KEEP_MARKER).map(|i| old[i..].to_owned()))
            .unwrap_or_else(|| format!("{}\n", report::KEEP_MARKER));
        let text = format!("{}\n{text}{}\n\n{kept}", report::BEGIN, report::END);
        std::fs::write(&path, &text).with_context(|| format!("writing {}", path.display()))?;
        eprintln!("sandpipe-bench: wrote {}", path.display());
    }
    Ok(())
}

fn parse_figure(phase: Phase, line: &str) -> anyhow::Result<Figure> {
    let bad = || format!("unexpected phase output line {line:?}");
    let fields: Vec<&str> = line.split('\t').collect();
    let ["figure", id, n, p50, p99] = fields[..] else {
        bail!(bad());
    };
    let ns = |s: &str| s.parse::<u64>().map(Duration::from_nanos).with_context(bad);
    Ok(Figure {
        phase,
        id: id.to_owned(),
        stats: Stats {
            n: n.parse().with_context(bad)?,
            p50: ns(p50)?,
            p99: ns(p99)?,
        },
    })
}

fn parse_rate(phase: Phase, line: &str) -> anyhow::Result<Rate> {
    let bad = || format!("unexpected phase output line {line:?}");
    let fields: Vec<&str> = line.split('\t').collect();
    let ["throughput", id, frames, bytes, nanos] = fields[..] else {
        bail!(bad());
    };
    Ok(Rate {
        phase,
        id: id.to_owned(),
        frames: frames.parse().with_context(bad)?,
        bytes: bytes.parse().with_context(bad)?,
        took: Duration::from_nanos(nanos.parse().with_context(bad)?),
    })
}

/// Iteration plans for one mode.
struct Plans {
    round_trip: [Plan; 2],
    /// Per-framing and per-metering round trips (pinned only).
    variant: [Plan; 2],
    /// Frames per streaming-throughput run, per size.
    stream: [u64; 2],
    floor: [Plan; 2],
    start: startup::Plans,
}

impl Plans {
    fn new(quick: bool) -> Plans {
        if quick {
            let tiny = Plan::new(1, 5, 2_000);
            return Plans {
                round_trip: [tiny; 2],
                variant: [tiny; 2],
                stream: [20, 5],
                floor: [tiny; 2],
                start: startup::Plans {
                    native: tiny,
                    cold: Plan::new(0, 1, 60_000),
                    disk: tiny,
                    memory: tiny,
                },
            };
        }
        Plans {
            // [100 B, 64 KiB]; the time budgets keep the whole run to a few minutes even when
            // a round trip is slow (an idle vCPU to wake, a busy machine).
            round_trip: [
                Plan::new(2_000, 20_000, 4_000),
                Plan::new(200, 3_000, 4_000),
            ],
            variant: [
                Plan::new(1_000, 10_000, 2_000),
                Plan::new(100, 1_000, 4_000),
            ],
            stream: [50_000, 1_000],
            floor: [
                Plan::new(10_000, 100_000, 1_500),
                Plan::new(500, 5_000, 1_500),
            ],
            start: startup::Plans {
                native: Plan::new(5, 300, 3_000),
                cold: Plan::new(1, 12, 6_000),
                disk: Plan::new(5, 300, 3_000),
                memory: Plan::new(50, 2_000, 3_000),
            },
        }
    }
}

/// A child: place itself, measure every figure, print one line per figure.
fn run_phase(phase: Phase, args: &Args) -> anyhow::Result<()> {
    let wasm = args.wasm.as_deref().context("--phase needs --wasm")?;
    let native = args.native.as_deref().context("--phase needs --native")?;
    // Pin first, while this is the only thread: everything created later inherits CPU 0.
    let runtime = match phase {
        Phase::Pinned => {
            pin::to_cpu0().context("pinning to CPU 0")?;
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?
        }
        Phase::Unpinned => tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()?,
    };
    let scratch = std::env::temp_dir().join(format!("sandpipe-bench-{}", std::process::id()));
    std::fs::create_dir_all(&scratch).with_context(|| format!("creating {}", scratch.display()))?;
    if let Some(what) = &args.profile {
        return runtime.block_on(profile(what.clone(), wasm.to_owned(), native.to_owned()));
    }
    let plans = Plans::new(args.quick);
    // The driver runs as a spawned task, as a sandpipe host's sessions do, not on the
    // `block_on` thread: under the multi-thread runtime that puts it on a worker next to the
    // plugin's tasks.
    let task = measure_all(
        phase,
        plans,
        wasm.to_owned(),
        native.to_owned(),
        scratch.clone(),
    );
    let result = runtime
        .block_on(runtime.spawn(task))
        .context("the measuring task panicked")
        .and_then(|r| r);
    let _ = std::fs::remove_dir_all(&scratch);
    result
}

/// Loop one scenario for 10 s so a profiler attached to this process sees only it.
async fn profile(what: String, wasm: PathBuf, native: PathBuf) -> anyhow::Result<()> {
    let host = if what == "start-pooled" {
        Host::with_options(
            &HostOptions::default()
                .cache_dir(None)
                .allow_native_unsandboxed(true)
                .pooling(Pooling::new(16)),
        )?
    } else if what == "start-warm" {
        Host::with_options(
            &HostOptions::default()
                .cache_dir(None)
                .allow_native_unsandboxed(true)
                .pooling(startup::warm_pool(16)),
        )?
    } else {
        Host::with_options(
            &HostOptions::default()
                .cache_dir(None)
                .allow_native_unsandboxed(true),
        )?
    };
    let until = std::time::Instant::now() + Duration::from_secs(10);
    let plan = Plan::new(0, 2_000_000, 10_000);
    let (plugin, size) = match what.as_str() {
        "start" | "start-pooled" | "start-warm" | "rt100" => (&wasm, SIZES[0]),
        "rt64k" => (&wasm, SIZES[1]),
        "native100" => (&native, SIZES[0]),
        "native64k" => (&native, SIZES[1]),
        other => bail!("unknown profile scenario {other:?}\n{USAGE}"),
    };
    let frame = roundtrip::frame(size)?;
    if what.starts_with("start") {
        let loaded = host.load(plugin)?;
        let mut n = 0u64;
        while std::time::Instant::now() < until {
            let mut session = host
                .start(
                    &loaded,
                    &sandpipe::Policy::default(),
                    &roundtrip::session_options(),
                )
                .await?;
            roundtrip::session_round_trip(&mut session, &frame).await?;
            session.shutdown(Duration::from_secs(2)).await;
            n += 1;
        }
        eprintln!("profile start: {n} starts");
        return Ok(());
    }
    let stats = roundtrip::sandpipe(&plan, &host, plugin, &frame).await?;
    emit(&format!("profile.{what}"), stats);
    Ok(())
}

fn emit_rate(id: &str, t: framings::Throughput) {
    let secs = t.took.as_secs_f64().max(1e-9);
    eprintln!(
        "  {id}: {} frames, {} bytes in {} ({:.0} frames/s, {:.1} MB/s)",
        t.frames,
        t.bytes,
        report::fmt_duration(t.took),
        t.frames as f64 / secs,
        t.bytes as f64 / secs / 1e6
    );
    let mut out = std::io::stdout().lock();
    let _ = writeln!(
        out,
        "throughput\t{id}\t{}\t{}\t{}",
        t.frames,
        t.bytes,
        t.took.as_nanos()
    );
    let _ = out.flush();
}

fn emit(id: &str, stats: Stats) {
    eprintln!(
        "  {id}: n={} p50={} p99={}",
        stats.n,
        report::fmt_duration(stats.p50),
        report::fmt_duration(stats.p99)
    );
    let mut out = std::io::stdout().lock();
    let _ = writeln!(
        out,
        "figure\t{id}\t{}\t{}\t{}",
        stats.n,
        stats.p50.as_nanos(),
        stats.p99.as_nanos()
    );
    let _ = out.flush();
}

async fn measure_all(
    phase: Phase,
    plans: Plans,
    wasm: PathBuf,
    native: PathBuf,
    scratch: PathBuf,
) -> anyhow::Result<()> {
    let (plans, wasm, native, scratch) = (&plans, wasm.as_path(), native.as_path(), &scratch);
    // Round trips need no disk cache: the one compile happens before any timing.
    let host = Host::with_options(
        &HostOptions::default()
            .cache_dir(None)
            .allow_native_unsandboxed(true),
    )?;
    for (i, size) in SIZES.into_iter().enumerate() {
        let frame = roundtrip::frame(size)?;
        let (rt, floor) = (&plans.round_trip[i], &plans.floor[i]);
        emit(
            &format!("rt.floor.{size}"),
            roundtrip::floor(floor, &frame)?,
        );
        emit(
            &format!("rt.value.{size}"),
            roundtrip::value_floor(floor, &frame)?,
        );
        emit(
            &format!("rt.baseline.{size}"),
            roundtrip::baseline(rt, native, &frame).context("baseline child")?,
        );
        emit(
            &format!("rt.native.{size}"),
            roundtrip::sandpipe(rt, &host, native, &frame)
                .await
                .context("native fallback")?,
        );
        emit(
            &format!("rt.wasm.{size}"),
            roundtrip::sandpipe(rt, &host, wasm, &frame)
                .await
                .context("wasm")?,
        );
        let contestants = vec![
            roundtrip::Contestant::child(native, &frame)?,
            roundtrip::Contestant::session(&host, native).await?,
            roundtrip::Contestant::session(&host, wasm).await?,
        ];
        let stats = roundtrip::in_blocks(rt, roundtrip::block_for(size), contestants, &frame)
            .await
            .context("round trips in blocks")?;
        for (who, stats) in ["baseline", "native", "wasm"].into_iter().zip(stats) {
            emit(&format!("rt.blocks.{who}.{size}"), stats);
        }
    }
    measure_framings(phase, plans, &host, wasm, native).await?;
    let frame = roundtrip::frame(SIZES[0])?;
    startup::all(&plans.start, wasm, native, scratch, &frame, emit).await
}

/// Streaming throughput per framing (both phases); round trips per framing and per metering
/// (pinned only: the comparisons need one core).
async fn measure_framings(
    phase: Phase,
    plans: &Plans,
    host: &Host,
    wasm: &std::path::Path,
    native: &std::path::Path,
) -> anyhow::Result<()> {
    for (framing, bin) in framings::FRAMINGS {
        let name = framing.name();
        for (i, size) in SIZES.into_iter().enumerate() {
            let frame = framings::frame_for(framing, size)?;
            for (kind, lines_build) in [("wasm", wasm), ("native", native)] {
                let plugin = framings::sibling(lines_build, bin);
                if phase == Phase::Pinned {
                    emit(
                        &format!("fr.{name}.{kind}.{size}"),
                        framings::round_trips(&plans.variant[i], host, &plugin, framing, &frame)
                            .await
                            .with_context(|| format!("{name} round trips, {kind}"))?,
                    );
                }
                emit_rate(
                    &format!("tp.{name}.{kind}.{size}"),
                    framings::throughput(host, &plugin, framing, &frame, plans.stream[i])
                        .await
                        .with_context(|| format!("{name} throughput, {kind}"))?,
                );
            }
        }
    }
    if phase != Phase::Pinned {
        return Ok(());
    }
    // Every metering's engine and session alive at once, timed in blocks (see
    // `roundtrip::in_blocks`), so the overheads compare like with like.
    let mut hosts = Vec::new();
    for (_, fuel, epochs) in framings::METERINGS {
        hosts.push(framings::metered_host(fuel, epochs)?);
    }
    for (i, size) in SIZES.into_iter().enumerate() {
        let frame = roundtrip::frame(size)?;
        let mut contestants = Vec::new();
        for host in &hosts {
            contestants.push(roundtrip::Contestant::session(host, wasm).await?);
        }
        let stats = roundtrip::in_blocks(
            &plans.variant[i],
            roundtrip::block_for(size),
            contestants,
            &frame,
        )
        .await
        .context("round trips per metering")?;
        for ((label, _, _), stats) in framings::METERINGS.into_iter().zip(stats) {
            emit(&format!("lim.{label}.{size}"), stats);
        }
    }
    Ok(())
}
