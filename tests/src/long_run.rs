//! The command line of the fuzzers' long runs (the `bridge_fuzz` and `serve_fuzz` examples):
//!
//! ```text
//! --seconds N     how long to run [60]
//! --seed S        the first case's seed [now, in seconds since the epoch]
//! --jobs J        cases at a time [the example's own]
//! --cases N       at most this many cases (`--cases 1`: replay one seed)
//! --sandpipe PATH fuzz this binary (a copy, while the tree is rebuilt)
//! ```

use std::path::PathBuf;

/// A long run's settings.
#[derive(Debug, Clone)]
pub struct Args {
    /// How long to run, in seconds.
    pub seconds: u64,
    /// The first case's seed.
    pub seed: u64,
    /// Cases at a time.
    pub jobs: usize,
    /// The most cases to run.
    pub cases: u64,
    /// The `sandpipe` binary to fuzz, if not this workspace's.
    pub sandpipe: Option<PathBuf>,
}

impl Args {
    /// The process's arguments, with `jobs` cases at a time unless `--jobs` says otherwise.
    /// Panics with the usage on an unknown or malformed argument.
    pub fn parse(jobs: usize) -> Args {
        let mut out = Args {
            seconds: 60,
            seed: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
            jobs,
            cases: u64::MAX,
            sandpipe: None,
        };
        let mut args = std::env::args().skip(1);
        while let Some(flag) = args.next() {
            let mut value = || {
                args.next()
                    .and_then(|v| v.parse::<u64>().ok())
                    .unwrap_or_else(|| panic!("{flag} needs a number"))
            };
            match flag.as_str() {
                "--sandpipe" => {
                    out.sandpipe =
                        Some(PathBuf::from(args.next().expect("--sandpipe needs a path")));
                }
                "--seconds" => out.seconds = value(),
                "--seed" => out.seed = value(),
                "--jobs" => out.jobs = value() as usize,
                "--cases" => out.cases = value(),
                other => panic!(
                    "unknown argument {other} (--seconds N, --seed S, --jobs J, --cases N, --sandpipe PATH)"
                ),
            }
        }
        out
    }
}
