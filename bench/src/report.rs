//! The markdown report: machine, command, every figure with its CPU placement, and the
//! issue's targets with the measured ratio and whether each was met.

use std::fmt::Write as _;
use std::time::Duration;

use crate::Phase;
use crate::measure::Stats;

/// Header of the figures table (the smoke test looks for it).
pub const FIGURES_HEADER: &str =
    "| figure | frame | n | p50 | p99 | vs baseline child (p50) | CPU placement |";
/// Header of the targets table (the smoke test looks for it).
pub const TARGETS_HEADER: &str = "| target | measured p50 | against p50 | ratio | goal | result |";

/// Header of the streaming-throughput table (the smoke test looks for it).
pub const THROUGHPUT_HEADER: &str =
    "| stream | frame | frames | time | frames/s | MB/s | CPU placement |";

/// Everything in BENCHMARKS.md from this line on is hand-written and kept by a rerun.
pub const KEEP_MARKER: &str = "<!-- Hand-written below this line; sandpipe-bench keeps it when it rewrites the figures above. -->";

/// Round-trip frame sizes, in bytes.
pub const SIZES: [usize; 2] = [100, 64 * 1024];

#[derive(Debug, Clone)]
pub struct Figure {
    pub phase: Phase,
    pub id: String,
    pub stats: Stats,
}

/// One streaming-throughput measurement.
#[derive(Debug, Clone)]
pub struct Rate {
    pub phase: Phase,
    pub id: String,
    pub frames: u64,
    pub bytes: u64,
    pub took: Duration,
}

/// Everything one run produced.
#[derive(Debug)]
pub struct Run {
    pub quick: bool,
    pub release: bool,
    pub command: String,
    pub argv: String,
    pub cpu_model: String,
    pub cpus: usize,
    pub kernel: String,
    pub date: String,
    pub load1_before: Option<f64>,
    /// Other processes' CPU use during each phase, in CPUs.
    pub other_load: Vec<(Phase, Option<f64>)>,
    pub figures: Vec<Figure>,
    pub rates: Vec<Rate>,
}

impl Run {
    fn get(&self, phase: Phase, id: &str) -> Option<Stats> {
        self.figures
            .iter()
            .find(|f| f.phase == phase && f.id == id)
            .map(|f| f.stats)
    }
}

fn size_name(size: usize) -> String {
    if size >= 1024 && size.is_multiple_of(1024) {
        format!("{} KiB", size / 1024)
    } else {
        format!("{size} B")
    }
}

/// What a per-framing (`fr.`), throughput (`tp.`) or metering (`lim.`) id measures.
fn describe_variant(what: &str) -> Option<String> {
    let parts: Vec<&str> = what.split('.').collect();
    match parts[..] {
        ["fr" | "tp", framing, kind] => Some(format!(
            "{framing}: sandpipe {} (`echo-{}`)",
            if kind == "wasm" {
                "wasm (wasm32-wasip2)"
            } else {
                "native fallback"
            },
            if framing == "content-length" {
                "content-length"
            } else {
                framing
            }
        )),
        ["lim", label] => Some(format!(
            "lines, wasm, engine with {}",
            match label {
                "all" => "fuel and epochs (the default)",
                "no-fuel" => "epochs only (fuel metering off)",
                "no-epochs" => "fuel only (epoch checks off)",
                _ => "neither fuel nor epochs",
            }
        )),
        _ => None,
    }
}

/// What a figure id measures, and its frame size.
fn describe(id: &str) -> (String, String) {
    let (what, size) = match id.rsplit_once('.') {
        Some((what, size)) if size.parse::<usize>().is_ok() => (what, size.parse::<usize>().ok()),
        _ => (id, None),
    };
    let frame = size.map_or_else(|| "100 B".to_owned(), size_name);
    if let Some(text) = describe_variant(what) {
        return (text, frame);
    }
    let text = match what {
        "rt.floor" => {
            "plain-function floor: JSON Lines framer encode, decode, echo, encode, decode"
        }
        "rt.value" => "serde_json `Value` parse + re-serialize (informational)",
        "rt.baseline" => "hand-written baseline: native child, blocking std pipes",
        "rt.native" => "sandpipe native fallback (`Host::start`, native build)",
        "rt.wasm" => "sandpipe wasm (`Host::start`, wasm32-wasip2 build)",
        "rt.blocks.baseline" => {
            "in blocks: hand-written baseline child (all three alive, timed in blocks in turn)"
        }
        "rt.blocks.native" => "in blocks: sandpipe native fallback",
        "rt.blocks.wasm" => "in blocks: sandpipe wasm",
        "start.native" => "start: native spawn (load + start + first response)",
        "start.native.preloaded" => {
            "start: native spawn, `Plugin` in hand (start + first response)"
        }
        "start.wasm.cold" => "start: wasm cold compile (load compiles and writes the cache)",
        "start.wasm.disk" => {
            "start: wasm from on-disk cache (fresh `Host`, load + start + response)"
        }
        "start.wasm.memory" => {
            "start: wasm reused pre-instance (`Host::load` again + start + response)"
        }
        "start.wasm.preloaded" => "start: wasm, `Plugin` in hand (start + first response)",
        "start.wasm.pooled" => {
            "start: wasm reused pre-instance, pooling allocator (load again + start + response)"
        }
        "start.wasm.pooled.warm" => {
            "start: wasm reused pre-instance, pooling allocator, warm slots (1.125 MiB memory + 64 KiB stack kept resident)"
        }
        _ => "unknown figure",
    };
    (text.to_owned(), frame)
}

fn placement(phase: Phase, id: &str, cpus: usize) -> String {
    let child = id.contains("baseline") || id.contains(".native");
    let in_process = id.starts_with("rt.floor") || id.starts_with("rt.value");
    match phase {
        Phase::Pinned if in_process => "CPU 0 (process pinned), one thread".to_owned(),
        Phase::Pinned if id.contains("baseline") => {
            "CPU 0: bench thread and child (child inherits the mask)".to_owned()
        }
        Phase::Pinned if child => "CPU 0: current_thread runtime and child".to_owned(),
        Phase::Pinned => "CPU 0: current_thread runtime, guest in-process".to_owned(),
        Phase::Unpinned if in_process => format!("unpinned ({cpus} CPUs), one thread"),
        Phase::Unpinned if id.contains("baseline") => {
            format!("unpinned ({cpus} CPUs): bench thread and child placed by the scheduler")
        }
        Phase::Unpinned if child => {
            format!("unpinned ({cpus} CPUs): multi-thread runtime, child placed by the scheduler")
        }
        Phase::Unpinned => {
            format!("unpinned ({cpus} CPUs): multi-thread runtime, guest in-process")
        }
    }
}

pub fn fmt_duration(d: Duration) -> String {
    let us = d.as_secs_f64() * 1e6;
    if us < 10.0 {
        format!("{us:.2} µs")
    } else if us < 1000.0 {
        format!("{us:.1} µs")
    } else {
        format!("{:.2} ms", us / 1000.0)
    }
}

enum Goal {
    /// measured / against ≤ this.
    RatioAtMost(f64),
    /// measured < this (no `against`).
    Under(Duration),
}

struct Target {
    name: String,
    measured: (Phase, String),
    against: Option<(Phase, String)>,
    goal: Goal,
}

fn targets() -> Vec<Target> {
    use Phase::{Pinned, Unpinned};
    let fig = |phase: Phase, id: &str| (phase, id.to_owned());
    let ratio = |name: &str, measured, against, at_most| Target {
        name: name.to_owned(),
        measured,
        against: Some(against),
        goal: Goal::RatioAtMost(at_most),
    };
    let mut t = vec![
        ratio(
            "100 B wasm vs native child, pinned to one core (in blocks)",
            fig(Pinned, "rt.blocks.wasm.100"),
            fig(Pinned, "rt.blocks.baseline.100"),
            0.7,
        ),
        ratio(
            "100 B wasm vs native child, unpinned, multi-thread runtime (in blocks)",
            fig(Unpinned, "rt.blocks.wasm.100"),
            fig(Unpinned, "rt.blocks.baseline.100"),
            0.15,
        ),
        ratio(
            "100 B wasm vs plain-function floor, pinned",
            fig(Pinned, "rt.wasm.100"),
            fig(Pinned, "rt.floor.100"),
            3.0,
        ),
        ratio(
            "64 KiB wasm vs plain-function floor, pinned",
            fig(Pinned, "rt.wasm.65536"),
            fig(Pinned, "rt.floor.65536"),
            3.0,
        ),
        ratio(
            "64 KiB wasm vs native child, pinned (in blocks)",
            fig(Pinned, "rt.blocks.wasm.65536"),
            fig(Pinned, "rt.blocks.baseline.65536"),
            1.2,
        ),
    ];
    for phase in [Pinned, Unpinned] {
        for size in SIZES {
            t.push(ratio(
                &format!(
                    "{} native fallback no slower than the hand-written baseline, {} (in blocks)",
                    size_name(size),
                    phase.name()
                ),
                fig(phase, &format!("rt.blocks.native.{size}")),
                fig(phase, &format!("rt.blocks.baseline.{size}")),
                1.0,
            ));
        }
    }
    for size in SIZES {
        t.push(ratio(
            &format!(
                "{} fuel overhead: fuel on vs off (epochs on), pinned",
                size_name(size)
            ),
            fig(Pinned, &format!("lim.all.{size}")),
            fig(Pinned, &format!("lim.no-fuel.{size}")),
            1.1,
        ));
    }
    for phase in [Pinned, Unpinned] {
        for (id, what) in [
            ("start.wasm.memory", "on-demand allocator"),
            ("start.wasm.pooled", "pooling allocator"),
            ("start.wasm.pooled.warm", "pooling allocator, warm slots"),
        ] {
            t.push(Target {
                name: format!(
                    "reused pre-instance to first response, {what}, {}",
                    phase.name()
                ),
                measured: fig(phase, id),
                against: None,
                goal: Goal::Under(Duration::from_micros(50)),
            });
        }
        t.push(ratio(
            &format!("start from disk cache vs native spawn, {}", phase.name()),
            fig(phase, "start.wasm.disk"),
            fig(phase, "start.native"),
            0.3,
        ));
    }
    t
}

pub fn render(run: &Run) -> String {
    let mut out = String::new();
    let w = &mut out;
    let _ = writeln!(w, "# sandpipe benchmarks\n");
    if run.quick {
        let _ = writeln!(
            w,
            "**Smoke run (`--quick`): a handful of iterations per figure. These numbers only show \
             that every measurement runs; do not quote them.**\n"
        );
    }
    let _ = writeln!(
        w,
        "Every number below was measured in one run of one command on the machine named here; \
         none is copied from elsewhere. Re-run the command to refresh this file.\n"
    );
    let _ = writeln!(w, "- command: `{}`", run.command);
    let _ = writeln!(w, "- binary invoked as: `{}`", run.argv);
    let _ = writeln!(
        w,
        "- machine: {}, {} CPUs, Linux {}",
        run.cpu_model, run.cpus, run.kernel
    );
    let _ = writeln!(w, "- date: {}", run.date);
    let _ = writeln!(
        w,
        "- build: {}",
        if run.release {
            "release"
        } else {
            "debug (numbers are not representative)"
        }
    );
    let load = run
        .load1_before
        .map_or_else(|| "unknown".to_owned(), |l| format!("{l:.2}"));
    let _ = writeln!(
        w,
        "- 1-minute load average before the run (it lags: it can count work that ended just before): {load}"
    );
    for (phase, other) in &run.other_load {
        let other = other.map_or_else(|| "unknown".to_owned(), |o| format!("{o:.2} CPUs"));
        let _ = writeln!(
            w,
            "- CPU time used by other processes (and hypervisor steal) during the {} phase: {other}",
            phase.name()
        );
    }
    // The load average lags (it still counts the build that preceded the run), so the note
    // goes by the CPU time other processes used while the phases ran.
    let other_max = run
        .other_load
        .iter()
        .filter_map(|(_, o)| *o)
        .fold(0.0_f64, f64::max);
    if other_max > 0.1 {
        let _ = writeln!(
            w,
            "\n**The machine was under other load during this run**: other processes used up \
             to {other_max:.2} of its {} CPUs while a phase ran. Unpinned figures and p99s \
             especially are noisier than on an idle machine.",
            run.cpus
        );
    }
    let _ = writeln!(
        w,
        "\nPhases: **pinned** = the whole bench process (and so every child it spawns, which \
         inherits the mask) on CPU 0 via `sched_setaffinity`, with a current_thread tokio \
         runtime; **unpinned** = no affinity, the default multi-thread runtime. Each phase runs \
         in its own child process of the bench, and its measuring loop is a spawned tokio task \
         (on a worker thread when unpinned). Round trips are one JSON Lines frame sent and \
         its echo received on an already running plugin (`echo-lines`); ratios use p50. \
         Rows marked **in blocks** keep the baseline child, the native fallback and the wasm \
         session alive at once and time them in turn, a block of round trips each (200 at \
         100 B, 8 at 64 KiB), so all three spread over the same stretch of time: on this VM \
         the machine's own speed swings by up to a third over seconds, which figures measured \
         one after another carry into their ratios. The child-vs-sandpipe targets use the \
         in-blocks rows; the `lim.` rows are measured the same way, all four engines at once.\n"
    );

    let _ = writeln!(
        w,
        "Figure ids beginning `fr.` repeat the round trip for each framing with its own echo \
         plugin (`echo-lines`, `echo-cbor`, `echo-content-length`; CBOR frames are a map of \
         small maps plus a padding byte string, sized to the byte); `lim.` runs `echo-lines` \
         under engines with fuel metering and epoch checks compiled in or out \
         (`HostOptions::metering`), pinned only.\n"
    );
    let _ = writeln!(
        w,
        "Other generators, each printing its own section (kept below, by hand): \
         `sandpipe-bench --frames` (`bench/src/frames.rs`: 100 B and 64 KiB round trips and a \
         64 KiB stream through `sandpipe run`, against the plugin direct, the pass-through relay \
         and the wasmtime CLI), `sandpipe-bench --profile-frames` (the same file: system calls \
         per 64 KiB round trip from `strace`, large user-space copies per byte from \
         `bench/copy-count`, and the guest's wasm operators per byte from wasmtime's fuel, \
         with and without `simd128`), `sandpipe-bench --net` \
         (`bench/src/net.rs`).\n"
    );
    let _ = writeln!(w, "## Figures\n");
    let _ = writeln!(w, "{FIGURES_HEADER}");
    let _ = writeln!(w, "|---|---|---:|---:|---:|---:|---|");
    for f in &run.figures {
        let (what, frame) = describe(&f.id);
        let vs =
            f.id.rsplit_once('.')
                .filter(|_| f.id.starts_with("rt.") || f.id.starts_with("lim."))
                .and_then(|(_, size)| run.get(f.phase, &format!("rt.baseline.{size}")))
                .filter(|b| !b.p50.is_zero())
                .map_or_else(String::new, |b| {
                    format!("{:.2}×", f.stats.p50.as_secs_f64() / b.p50.as_secs_f64())
                });
        let _ = writeln!(
            w,
            "| {what} | {frame} | {} | {} | {} | {vs} | {} |",
            f.stats.n,
            fmt_duration(f.stats.p50),
            fmt_duration(f.stats.p99),
            placement(f.phase, &f.id, run.cpus)
        );
    }

    let _ = writeln!(w, "\n## Streaming throughput\n");
    let _ = writeln!(
        w,
        "One session per row: a spawned task sends the frames back to back (then closes stdin) \
         while the measuring task receives the echoes; time from the first send to the last \
         echo, after one warm-up round trip. Bytes count frame payloads one way.\n"
    );
    let _ = writeln!(w, "{THROUGHPUT_HEADER}");
    let _ = writeln!(w, "|---|---|---:|---:|---:|---:|---|");
    for r in &run.rates {
        let (what, frame) = describe(&r.id);
        let secs = r.took.as_secs_f64().max(1e-9);
        let _ = writeln!(
            w,
            "| {what} | {frame} | {} | {} | {:.0} | {:.1} | {} |",
            r.frames,
            fmt_duration(r.took),
            r.frames as f64 / secs,
            r.bytes as f64 / secs / 1e6,
            placement(r.phase, &r.id, run.cpus)
        );
    }

    let _ = writeln!(w, "\n## Targets\n");
    let _ = writeln!(
        w,
        "\"native child\" is the hand-written baseline child. A missed target is reported as \
         missed.\n"
    );
    let _ = writeln!(w, "{TARGETS_HEADER}");
    let _ = writeln!(w, "|---|---:|---:|---:|---|---|");
    for t in targets() {
        let measured = run.get(t.measured.0, &t.measured.1);
        let against = t.against.as_ref().map(|(p, id)| run.get(*p, id));
        let cell =
            |s: Option<Stats>| s.map_or_else(|| "not measured".to_owned(), |s| fmt_duration(s.p50));
        let (against_cell, ratio_cell, goal_cell, met) = match (&t.goal, against) {
            (Goal::RatioAtMost(max), Some(against)) => {
                let ratio = match (measured, against) {
                    (Some(m), Some(a)) if !a.p50.is_zero() => {
                        Some(m.p50.as_secs_f64() / a.p50.as_secs_f64())
                    }
                    _ => None,
                };
                (
                    cell(against),
                    ratio.map_or_else(|| "—".to_owned(), |r| format!("{r:.2}×")),
                    format!("≤ {max}×"),
                    ratio.map(|r| r <= *max),
                )
            }
            (Goal::Under(limit), _) => (
                "—".to_owned(),
                "—".to_owned(),
                format!("< {}", fmt_duration(*limit)),
                measured.map(|m| m.p50 < *limit),
            ),
            (Goal::RatioAtMost(_), None) => ("—".to_owned(), "—".to_owned(), "—".to_owned(), None),
        };
        let result = match met {
            Some(true) => "met",
            Some(false) => "**missed**",
            None => "not measured",
        };
        let _ = writeln!(
            w,
            "| {} | {} | {against_cell} | {ratio_cell} | {goal_cell} | {result} |",
            t.name,
            cell(measured)
        );
    }

    let _ = writeln!(
        w,
        "\nFramer throughput is measured separately by criterion: \
         `cargo bench -p sandpipe-proto --bench framers`."
    );
    out
}
