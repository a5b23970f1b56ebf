//! Options every subcommand that starts a plugin shares: the sandbox policy and the cache.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Result;
use sandpipe_proto::frame::FrameLimits;

use super::{CacheArgs, MemoryCap, parse_duration, parse_memory, parse_size};
use crate::policy::document::Dir;
use crate::{
    Access, DocumentError, LandlockSupport, NamespaceSupport, Plugin, PluginKind, Policy,
    PolicyDocument,
};

/// The sandbox policy on the command line.
#[derive(Debug, Clone, clap::Args)]
pub struct SandboxArgs {
    /// Total fuel (about one unit per wasm instruction) for the whole session [default: unlimited].
    #[arg(long, value_name = "N")]
    pub(crate) fuel: Option<u64>,
    /// Memory cap (e.g. 64MiB, or none): linear memory for wasm; for native, RLIMIT_DATA (heap
    /// and other writable memory, not address space V8, Go or the JVM only reserve).
    #[arg(long, value_name = "SIZE", default_value = "256MiB", value_parser = parse_memory)]
    pub(crate) max_memory: MemoryCap,
    /// Wall-clock deadline for the whole session (e.g. 2s, 500ms) [default: none].
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub(crate) timeout: Option<Duration>,
    /// Preopen a host directory: HOST[::GUEST][:ro]. GUEST defaults to HOST; `:ro` makes it
    /// read-only. Without --dir the plugin sees no filesystem.
    #[arg(long = "dir", value_name = "HOST[::GUEST][:ro]")]
    pub(crate) dirs: Vec<String>,
    /// Pass an environment variable: NAME=VALUE, or NAME to copy sandpipe's own value.
    /// Nothing else is inherited.
    #[arg(long = "env", value_name = "NAME[=VALUE]")]
    pub(crate) envs: Vec<String>,
    /// CPU time for a native plugin (RLIMIT_CPU, whole seconds rounded up, e.g. 30s); past it
    /// the kernel stops the plugin (exit status 121). Wasm plugins use --fuel [default: unlimited].
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub(crate) max_cpu_time: Option<Duration>,
    /// Most files a plugin may have open at once, or none for sandpipe's own limit. Wasm: host
    /// descriptors the session holds (its --dir preopens plus what it opened); past it an open
    /// fails (p2 error-code quota, EDQUOT; p1 EMFILE) and the plugin runs on. Native:
    /// RLIMIT_NOFILE, stdio included (EMFILE).
    #[arg(long, value_name = "N", default_value = "1024", value_parser = parse_open_files)]
    pub(crate) max_open_files: FileCap,
    /// Bytes a wasm component may write to files through its --dir grants, in all (e.g.
    /// 100MiB); every write counts, an overwrite again. Past it a write fails with ENOSPC
    /// (insufficient-space) and the plugin runs on [default: none]. Not for native plugins.
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub(crate) max_disk_write: Option<u64>,
    /// Largest frame accepted in either direction (e.g. 16MiB).
    #[arg(long, value_name = "SIZE", default_value = "16MiB", value_parser = parse_size)]
    pub(crate) max_frame: u64,
    /// Strict imports: refuse a component importing anything not listed (repeatable;
    /// e.g. wasi:cli/stdin@0.2; patch versions are ignored).
    #[arg(long = "allow-import", value_name = "INTERFACE")]
    pub(crate) allow_imports: Vec<String>,
    /// Deterministic mode (wasm only): clocks that advance 1 ms per read from
    /// 2000-01-01T00:00:00Z, random from the seed. Two runs give byte-identical output.
    #[arg(long)]
    pub(crate) deterministic: bool,
    /// The seed for --deterministic [default: 0; implies --deterministic].
    #[arg(long, value_name = "N")]
    pub(crate) seed: Option<u64>,
    /// Native only: do not grant, read-only, what the plugin needs to start (its resolved
    /// executable, a script's interpreter, the interpreter's install prefix, a venv, script
    /// files named in its arguments); it then sees only the system directories and --dir.
    #[arg(long)]
    pub(crate) no_startup_grants: bool,
    /// Allow connections to HOST[:PORT] (repeatable, or comma-separated): a name, a wildcard
    /// (*.example.com), an IP address ([::1]:8080) or a range (10.0.0.0/8). sandpipe resolves
    /// names itself; a name resolving to a loopback, private or link-local address is refused
    /// unless a rule names that address. Without it the plugin has no network at all. Native
    /// plugins reach allowed hosts through sandpipe's proxy (HTTP_PROXY, ALL_PROXY).
    #[arg(long = "allow-net", value_name = "HOST[:PORT]", value_delimiter = ',')]
    pub(crate) allow_net: Vec<String>,
    /// Resolve NAME to these addresses without DNS, as curl's --resolve (repeatable):
    /// NAME=ADDR[,ADDR...]. The name must still be allowed by --allow-net.
    #[arg(long = "resolve", value_name = "NAME=ADDR[,ADDR]")]
    pub(crate) resolve: Vec<String>,
    /// Add a header to every wasi:http request a wasm plugin sends to HOST, its value read
    /// from sandpipe's own environment: HOST:NAME=env:VAR (repeatable). The plugin never sees it.
    #[arg(long = "http-header", value_name = "HOST:NAME=env:VAR")]
    pub(crate) http_headers: Vec<String>,
    /// Append one JSON line per enforcement decision to FILE: connections allowed and refused,
    /// limits reached, tools and requests refused (format: docs/network.md).
    #[arg(long, value_name = "FILE")]
    pub(crate) audit: Option<PathBuf>,
    #[command(flatten)]
    pub(crate) cache: CacheArgs,
    #[command(flatten)]
    pub(crate) dist: super::dist::DistArgs,
    /// Where each policy value came from (flag, env, file, default), by the policy document's
    /// key: set when the command line is read, shown by `inspect --json`.
    #[arg(skip)]
    pub(crate) sources: std::collections::BTreeMap<String, String>,
}

impl SandboxArgs {
    /// The policy these options describe, with `args` after argv[0]: the flags as the policy
    /// document a policy file and a recording's header fill, and the policy through the same
    /// path ([`crate::policy_file::policy_with_values`]).
    pub(crate) fn policy(&self, args: Vec<String>) -> Result<Policy> {
        let mut doc = PolicyDocument {
            args,
            seed: (self.deterministic || self.seed.is_some()).then(|| self.seed.unwrap_or(0)),
            audit: self.audit.clone(),
            ..PolicyDocument::default()
        };
        let l = &mut doc.limits;
        l.fuel = self.fuel;
        l.max_memory = self.max_memory.0;
        l.timeout = self.timeout;
        l.max_cpu_time = self.max_cpu_time;
        l.max_open_files = self.max_open_files.0;
        l.max_disk_write = self.max_disk_write;
        let g = &mut doc.grants;
        g.dirs = self
            .dirs
            .iter()
            .map(|spec| spec.parse::<Dir>())
            .collect::<Result<_, _>>()
            .map_err(anyhow::Error::msg)?;
        let (names, values) = crate::policy_file::env_grants(&self.envs);
        g.env = names;
        g.allow_imports = (!self.allow_imports.is_empty()).then(|| self.allow_imports.clone());
        g.startup_grants = !self.no_startup_grants;
        doc.net.allow = self
            .allow_net
            .iter()
            .map(|rule| rule.trim().to_owned())
            .filter(|rule| !rule.is_empty())
            .collect();
        doc.net.resolve.clone_from(&self.resolve);
        doc.net.http_headers.clone_from(&self.http_headers);
        if doc.net.allow.is_empty() && !(self.resolve.is_empty() && self.http_headers.is_empty()) {
            anyhow::bail!("--resolve and --http-header need --allow-net: the network is closed");
        }
        let env = |name: &str| std::env::var(name).ok();
        crate::policy_file::policy_with_values(doc, &values, &env).map_err(|e| match e {
            // The entry's own message, as the flag's parser gives it.
            DocumentError::Net(e) => anyhow::Error::new(e),
            e => anyhow::Error::new(e),
        })
    }

    /// Frame limits from `--max-frame`.
    pub(crate) fn frame_limits(&self) -> FrameLimits {
        FrameLimits::with_max_frame_bytes(usize::try_from(self.max_frame).unwrap_or(usize::MAX))
    }
}

/// Open a recording for `plugin` under `policy`, if `--record` was given.
pub(crate) fn recorder(
    path: Option<&std::path::Path>,
    plugin: &Plugin,
    policy: &Policy,
    framing: sandpipe_proto::frame::Framing,
    protocol: Option<&str>,
) -> Result<Option<std::sync::Arc<crate::run::record::Recorder>>> {
    let Some(path) = path else { return Ok(None) };
    let name = plugin
        .path()
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let header = crate::run::record::RecordHeader {
        plugin: &name,
        sha256: plugin.sha256(),
        framing,
        protocol,
        policy,
    };
    let r = crate::run::record::Recorder::create(path, &header)
        .map_err(|e| anyhow::anyhow!("creating the recording {}: {e}", path.display()))?;
    if plugin.kind() == PluginKind::NativeUnsandboxed && policy.deterministic.is_some() {
        eprintln!(
            "sandpipe: note: --deterministic has no effect on a native plugin; its replay may differ"
        );
    }
    Ok(Some(std::sync::Arc::new(r)))
}

/// The one-line notice printed whenever a plugin runs natively: what confines it (namespaces,
/// seccomp, Landlock, and what it may read to start) or what is missing, and the one-line
/// warning when Landlock cannot confine it (fully).
pub(crate) fn warn_if_native(plugin: &Plugin, policy: &Policy) {
    if plugin.kind() == PluginKind::NativeUnsandboxed {
        let support = LandlockSupport::detect();
        let namespaces = NamespaceSupport::detect();
        let mut parts = vec![namespaces.describe()];
        if crate::run::native::seccomp_available() {
            parts.push("seccomp".to_owned());
        } else {
            parts.push("no system-call filter".to_owned());
        }
        match &support {
            LandlockSupport::Unavailable { .. } => parts.push("no Landlock".to_owned()),
            _ => parts.push(format!("Landlock ABI {}", support.abi().unwrap_or(0))),
        }
        let grants = native_grants(plugin, policy);
        if !grants.is_empty() {
            parts.push(format!("read-only for start-up: {grants}"));
        }
        if !namespaces.is_available() {
            parts.push(match support {
                LandlockSupport::Unavailable { .. } => {
                    "files, network, UDP and /proc are not restricted".to_owned()
                }
                _ => "files limited to --dir and TCP refused, but UDP, other processes' /proc and --dir's guest paths are not".to_owned(),
            });
        }
        parts.push("no fuel".to_owned());
        let how = if namespaces.is_available() {
            "in a sandbox"
        } else {
            "partly sandboxed"
        };
        eprintln!(
            "sandpipe: {} is not wasm; running it natively {how} ({})",
            plugin.path().display(),
            parts.join("; ")
        );
        if let Some(warning) = support.warning() {
            eprintln!("{warning}");
        }
        if policy.startup_grants {
            for w in crate::withheld_startup_grants(plugin.path(), &policy.args) {
                eprintln!(
                    "sandpipe: note: {} (the plugin's {}) is not granted: {}; if the plugin needs more of it, grant the narrower directory with --dir PATH:ro",
                    w.path.display(),
                    w.reason,
                    w.why
                );
            }
        }
        if policy.max_disk_write.is_some() {
            eprintln!(
                "sandpipe: note: --max-disk-write has no effect on a native plugin (see SECURITY.md, \"disk writes\")"
            );
        }
    }
}

/// A native plugin's start-up grants as `PATH (reason), ...`; empty when off or none.
pub(crate) fn native_grants(plugin: &Plugin, policy: &Policy) -> String {
    if !policy.startup_grants {
        return String::new();
    }
    crate::startup_grants(plugin.path(), &policy.args)
        .iter()
        .map(|g| format!("{} ({})", g.path.display(), g.reason))
        .collect::<Vec<_>>()
        .join(", ")
}

/// After a native plugin ended in failure (`before_output`: without writing a byte, or for a
/// protocol: without answering anything): what Landlock let it read, and how to grant more.
/// The advice follows the refusal its last stderr lines name, when they name one: read-write
/// for a write, `:ro` for a read.
pub(crate) fn explain_failed_start(
    plugin: &Plugin,
    policy: &Policy,
    before_output: bool,
    stderr_tail: &[String],
) {
    if plugin.kind() != PluginKind::NativeUnsandboxed
        || matches!(
            LandlockSupport::detect(),
            LandlockSupport::Unavailable { .. }
        )
    {
        return;
    }
    let mut allowed = vec!["the system directories (/usr /bin /sbin /lib*)".to_owned()];
    let grants = native_grants(plugin, policy);
    if !grants.is_empty() {
        allowed.push(grants);
    }
    allowed.extend(policy.preopens.iter().map(|p| {
        let ro = if p.access == Access::ReadOnly {
            ":ro"
        } else {
            ""
        };
        if p.guest == p.host.display().to_string() {
            format!("--dir {}{ro}", p.host.display())
        } else {
            format!("--dir {}::{}{ro}", p.host.display(), p.guest)
        }
    }));
    let when = if before_output {
        "the plugin failed before writing any output"
    } else {
        "the plugin failed"
    };
    let advice = match refused_access(stderr_tail) {
        Some(Refused { dir, op: Op::Write }) => {
            format!("it was refused a write under {dir}: grant it with --dir {dir}")
        }
        Some(Refused { dir, op: Op::Read }) => {
            format!("it was refused a read under {dir}: grant it with --dir {dir}:ro")
        }
        Some(Refused {
            dir,
            op: Op::Unknown,
        }) => format!(
            "it was refused {dir}: grant it with --dir {dir}:ro if it only reads there, or --dir {dir} if it writes"
        ),
        None => "if it needs more, grant it with --dir PATH:ro to read, or --dir PATH to write"
            .to_owned(),
    };
    eprintln!(
        "sandpipe: note: {when}; under Landlock it could read only {}; {advice}",
        allowed.join(", ")
    );
}

/// What a refused file operation was, as far as the message says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Read,
    Write,
    Unknown,
}

/// The directory a failed plugin was refused, and how.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Refused {
    dir: String,
    op: Op,
}

/// The last refusal in `tail` that names an absolute path. Landlock refuses with `EACCES`, and
/// a path outside the sandbox's root is not there at all (`ENOENT`): such a line counts when
/// the path is on the host (or, for a write, a directory above it is), so a file that is
/// missing everywhere is not taken for a refusal. Node's `EACCES: permission denied, mkdir
/// '/root/.npm'` names the call, so whether it read or wrote; Python's `PermissionError:
/// [Errno 13] Permission denied: '/data/x'` does not. The directory to grant is the path
/// itself for a directory, else the nearest directory above it that exists on the host.
fn refused_access(tail: &[String]) -> Option<Refused> {
    const WRITES: [&str; 12] = [
        "mkdir",
        "mkdtemp",
        "write",
        "unlink",
        "rename",
        "rmdir",
        "symlink",
        "link",
        "copyfile",
        "utime",
        "chmod",
        "appendfile",
    ];
    const READS: [&str; 7] = [
        "scandir", "opendir", "stat", "lstat", "access", "readlink", "realpath",
    ];
    tail.iter().rev().find_map(|line| {
        let lower = line.to_lowercase();
        let read_only = lower.contains("erofs") || lower.contains("read-only file system");
        let denied = lower.contains("eacces") || lower.contains("permission denied") || read_only;
        let absent = lower.contains("enoent") || lower.contains("no such file or directory");
        if !denied && !absent {
            return None;
        }
        let start = line
            .find(['\'', '"'])
            .filter(|&i| line[i + 1..].starts_with('/'))?;
        let quote = line[start..].chars().next()?;
        let rest = &line[start + 1..];
        let path = std::path::Path::new(&rest[..rest.find(quote)?]);
        // The word before the path: Node names the call there ("denied, mkdir '/x'").
        let call = lower[..start]
            .trim_end()
            .rsplit([' ', ','])
            .next()
            .unwrap_or_default()
            .to_owned();
        let op = if read_only || WRITES.contains(&call.as_str()) {
            Op::Write
        } else if READS.contains(&call.as_str()) {
            Op::Read
        } else {
            Op::Unknown
        };
        if !denied && !path.exists() && op != Op::Write {
            return None;
        }
        let dir = if path.is_dir() {
            path
        } else {
            path.ancestors().skip(1).find(|a| a.is_dir())?
        };
        // Granting the whole file system is no advice.
        if dir == std::path::Path::new("/") && path != dir {
            return None;
        }
        Some(Refused {
            dir: dir.display().to_string(),
            op,
        })
    })
}

#[cfg(test)]
mod refused_tests {
    use super::*;

    #[test]
    fn the_advice_follows_the_refusal_the_stderr_names() {
        let tail = |l: &str| vec!["starting".to_owned(), l.to_owned(), "    at x".to_owned()];
        for (line, want) in [
            (
                "Error: EACCES: permission denied, mkdir '/usr/.sp-absent'",
                Some(("/usr", Op::Write)),
            ),
            (
                "Error: EACCES: permission denied, open '/usr/share/.sp-absent.txt'",
                Some(("/usr/share", Op::Unknown)),
            ),
            (
                "Error: EACCES: permission denied, scandir '/usr'",
                Some(("/usr", Op::Read)),
            ),
            (
                "PermissionError: [Errno 13] Permission denied: '/usr/.sp-absent.json'",
                Some(("/usr", Op::Unknown)),
            ),
            (
                "OSError: [Errno 30] Read-only file system: '/usr/.sp-absent'",
                Some(("/usr", Op::Write)),
            ),
            // Outside the sandbox's root a host path is absent: a refusal all the same.
            (
                "Error: ENOENT: no such file or directory, scandir '/usr/share'",
                Some(("/usr/share", Op::Read)),
            ),
            (
                "Error: ENOENT: no such file or directory, mkdir '/usr/.sp-absent/x'",
                Some(("/usr", Op::Write)),
            ),
            // Missing on the host too: not a refusal.
            (
                "FileNotFoundError: [Errno 2] No such file or directory: '/usr/.sp-absent.json'",
                None,
            ),
            (
                "Error: EACCES: permission denied, mkdir '/.sp-absent'",
                None,
            ),
            ("Error: something else '/usr'", None),
            ("permission denied", None),
        ] {
            let got = refused_access(&tail(line)).map(|r| (r.dir, r.op));
            let want = want.map(|(d, op)| (d.to_owned(), op));
            assert_eq!(got, want, "{line}");
        }
    }
}

/// An open-file limit, or none. (A newtype for the same reason as `MemoryCap`.)
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FileCap(pub(crate) Option<u64>);

/// `64`, or `none` (the library's [`crate::policy::value::parse_count_cap`]).
pub(crate) fn parse_open_files(s: &str) -> Result<FileCap, String> {
    crate::policy::value::parse_count_cap(s).map(FileCap)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn open_file_counts() {
        assert_eq!(parse_open_files("64"), Ok(FileCap(Some(64))));
        assert_eq!(parse_open_files("none"), Ok(FileCap(None)));
        assert!(parse_open_files("-1").is_err());
        assert!(parse_open_files("lots").is_err());
    }
}
