//! A soak of one long-lived `sandpipe run`: round trips in lockstep, as an engine makes them,
//! with the resident memory and open descriptors of sandpipe and its native plugin read from
//! `/proc` every tenth of the way.
//!
//! ```text
//!  engine ── line / invoke ──► sandpipe run (--framing lines | --protocol oracle) ──► plugin
//!         ◄───── answer ──────                                                      ◄──
//!  every 10 %: VmRSS and /proc/PID/fd of sandpipe and of its plugin (native only)
//! ```
//!
//! The bars: the resident memory at the end within 10 % (+4 MiB) of what it was at
//! the first tenth, and the descriptor counts flat.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, Command};

use crate::Target;

/// What the soak drives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Soak {
    /// `run --framing lines cat`: each round trip a JSON line echoed back.
    Lines(Target),
    /// `run --protocol oracle oracle-hog`: each round trip an invoke; every tenth an unknown
    /// method, which the oracle answers with its error.
    Oracle(Target),
}

impl std::fmt::Display for Soak {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Soak::Lines(t) => write!(f, "run --framing lines, cat ({t:?})"),
            Soak::Oracle(t) => write!(f, "run --protocol oracle, oracle-hog ({t:?})"),
        }
    }
}

/// One reading.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sample {
    /// Round trips done.
    pub done: u64,
    /// sandpipe's resident memory, bytes.
    pub rss: u64,
    /// sandpipe's open descriptors.
    pub fds: usize,
    /// The native plugin's resident memory and open descriptors.
    pub plugin: Option<(u64, usize)>,
}

/// `VmRSS` of `pid` in bytes, and its open descriptors.
pub fn usage(pid: u32) -> Option<(u64, usize)> {
    let rss = proc_kb(pid, "status", "VmRSS:")?;
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count();
    Some((rss, fds))
}

/// The proportional set size of `pid` in bytes (`Pss:` of `/proc/PID/smaps_rollup`): a page
/// shared by n processes counts 1/n to each, so a process tree's sum is the memory it holds.
pub fn pss(pid: u32) -> Option<u64> {
    proc_kb(pid, "smaps_rollup", "Pss:")
}

/// The `KEY  N kB` line of `/proc/PID/FILE`, in bytes.
fn proc_kb(pid: u32, file: &str, key: &str) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/{file}")).ok()?;
    let kb: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix(key))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kb * 1024)
}

/// The children of `pid` (every thread's), from `/proc`.
pub fn children(pid: u32) -> Vec<u32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    let mut kids = Vec::new();
    for task in tasks.flatten() {
        if let Ok(list) = std::fs::read_to_string(task.path().join("children")) {
            kids.extend(
                list.split_whitespace()
                    .filter_map(|p| p.parse::<u32>().ok()),
            );
        }
    }
    kids
}

fn sample(child: &Child, done: u64) -> Result<Sample, String> {
    let (rss, fds) = usage(child.id()).ok_or("sandpipe is gone")?;
    let plugin = children(child.id()).first().and_then(|&p| usage(p));
    Ok(Sample {
        done,
        rss,
        fds,
        plugin,
    })
}

/// Run `round_trips` round trips through one `sandpipe` (`sandpipe` binary, artifacts cached
/// in `cache_dir`) as `what` says, sampling every tenth; then end it with EOF (status 0).
pub fn soak(
    sandpipe: &Path,
    cache_dir: &Path,
    what: Soak,
    round_trips: u64,
) -> Result<Vec<Sample>, String> {
    let mut cmd = Command::new(sandpipe);
    cmd.arg("run").arg("--cache-dir").arg(cache_dir);
    let oracle = match what {
        Soak::Lines(t) => {
            cmd.args(["--framing", "lines"])
                .arg(crate::plugin("cat", t));
            false
        }
        Soak::Oracle(t) => {
            cmd.args(["--protocol", "oracle"])
                .arg(crate::plugin("oracle-hog", t));
            true
        }
    };
    let mut child = crate::cli::spawn(&mut cmd);
    // The child is waited on in every path, a failed round trip included (after a kill), so a
    // failing soak leaves no process behind.
    let samples = round_trips_through(&mut child, oracle, round_trips);
    if samples.is_err() {
        let _ = child.kill();
    }
    let status = child.wait().map_err(|e| e.to_string())?;
    let samples = samples?;
    if !status.success() {
        return Err(format!("sandpipe ended with {status}"));
    }
    Ok(samples)
}

/// The round trips of [`soak`] on a started `sandpipe`; ends its input (EOF) when done.
fn round_trips_through(
    child: &mut std::process::Child,
    oracle: bool,
    round_trips: u64,
) -> Result<Vec<Sample>, String> {
    let mut input = std::io::BufWriter::new(child.stdin.take().expect("stdin"));
    let mut output = BufReader::new(child.stdout.take().expect("stdout"));
    let stderr = child.stderr.take().expect("stderr");
    // Drain stderr so a chatty plugin can never block on it.
    std::thread::spawn(move || std::io::copy(&mut { stderr }, &mut std::io::sink()));
    let mut line = String::new();
    let read = |output: &mut BufReader<_>, line: &mut String| -> Result<(), String> {
        line.clear();
        match output.read_line(line) {
            Ok(0) => Err("sandpipe closed its stdout".to_owned()),
            Ok(_) => Ok(()),
            Err(e) => Err(format!("reading sandpipe's stdout: {e}")),
        }
    };
    if oracle {
        read(&mut output, &mut line)?;
        writeln!(input, "{}", crate::peers::ORACLE_READY_ACK).map_err(|e| e.to_string())?;
    }
    let step = (round_trips / 10).max(1);
    let mut samples = Vec::new();
    for i in 1..=round_trips {
        let fails = oracle && i % 10 == 0;
        let sent = if !oracle {
            writeln!(input, "{{\"n\":{i}}}")
        } else if fails {
            writeln!(
                input,
                r#"{{"jsonrpc":"2.0","id":{i},"method":"nope","params":{{}}}}"#
            )
        } else {
            writeln!(
                input,
                "{}",
                crate::peers::oracle_invoke(i, "echo", &["0x1"])
            )
        };
        sent.and_then(|()| input.flush())
            .map_err(|e| format!("round trip {i}: writing: {e}"))?;
        read(&mut output, &mut line).map_err(|e| format!("round trip {i}: {e}"))?;
        let ok = if !oracle {
            line == format!("{{\"n\":{i}}}\n")
        } else if fails {
            line.contains(&format!(r#""id":{i},"#)) && line.contains(r#""error":"#)
        } else {
            line == format!("{{\"jsonrpc\":\"2.0\",\"id\":{i},\"result\":[\"0x1\"]}}\n")
        };
        if !ok {
            return Err(format!("round trip {i}: unexpected answer {line:?}"));
        }
        if i % step == 0 {
            samples.push(sample(child, i)?);
        }
    }
    drop(input);
    Ok(samples)
}

/// The bars: resident memory at the end within 10 % (+4 MiB) of the first sample's, for
/// sandpipe and its plugin; descriptor counts the same at every sample.
pub fn judge(samples: &[Sample]) -> Result<(), String> {
    let (Some(first), Some(last)) = (samples.first(), samples.last()) else {
        return Err("no samples".to_owned());
    };
    let within = |start: u64, end: u64| end <= start + start / 10 + (4 << 20);
    if !within(first.rss, last.rss) {
        return Err(format!(
            "sandpipe's RSS grew from {} to {} bytes",
            first.rss, last.rss
        ));
    }
    if let (Some((start, _)), Some((end, _))) = (first.plugin, last.plugin)
        && !within(start, end)
    {
        return Err(format!("the plugin's RSS grew from {start} to {end} bytes"));
    }
    for s in samples {
        if s.fds != first.fds || s.plugin.map(|p| p.1) != first.plugin.map(|p| p.1) {
            return Err(format!(
                "descriptors moved: {:?} at {}, {:?} at {}",
                (first.fds, first.plugin),
                first.done,
                (s.fds, s.plugin),
                s.done
            ));
        }
    }
    Ok(())
}

/// `samples` as a Markdown table (MiB, descriptors).
pub fn table(samples: &[Sample]) -> String {
    let mib = |b: u64| format!("{:.1}", b as f64 / f64::from(1 << 20));
    let mut s = String::from(
        "| round trips | sandpipe RSS MiB | sandpipe fds | plugin RSS MiB | plugin fds |\n\
         |---:|---:|---:|---:|---:|\n",
    );
    for x in samples {
        let (prss, pfds) = match x.plugin {
            Some((r, f)) => (mib(r), f.to_string()),
            None => ("(in sandpipe)".to_owned(), "-".to_owned()),
        };
        s.push_str(&format!(
            "| {} | {} | {} | {prss} | {pfds} |\n",
            x.done,
            mib(x.rss),
            x.fds
        ));
    }
    s
}
