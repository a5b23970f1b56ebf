//! Options every subcommand that starts a plugin shares: the sandbox policy and the cache.

use std::path::PathBuf;

use anyhow::Result;
use sandpipe_proto::frame::FrameLimits;

use super::CacheArgs;
use crate::policy::sections::{Grants, Limits, Net, Requests, Tools};
use crate::{
    Access, LandlockSupport, NamespaceSupport, Plugin, PluginKind, Policy, PolicyDocument,
};

/// The sandbox policy on the command line: the library's policy-file sections
/// ([`Limits`], [`Grants`], [`Net`]), flattened, so a flag and its policy-file key are one
/// field with one parser, and the overlay of one on the other is a field at a time
/// (`manifest.rs`).
#[derive(Debug, Clone, clap::Args)]
pub struct SandboxArgs {
    #[command(flatten)]
    pub(crate) limits: Limits,
    #[command(flatten)]
    pub(crate) grants: Grants,
    /// Deterministic mode (wasm only): clocks that advance 1 ms per read from
    /// 2000-01-01T00:00:00Z, random from the seed. Two runs give byte-identical output.
    #[arg(long)]
    pub(crate) deterministic: bool,
    /// The seed for --deterministic [default: 0; implies --deterministic].
    #[arg(long, value_name = "N")]
    pub(crate) seed: Option<u64>,
    #[command(flatten)]
    pub(crate) net: Net,
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
    /// The host with the engine these options and `requests` run under (fuel metering only
    /// when they set a fuel budget, [`crate::policy::sections::meters_fuel`]), and `plugin`
    /// loaded by it, a slow compile noted: `run`'s and `serve`'s start.
    pub(crate) async fn load(
        &self,
        requests: &Requests,
        plugin: &std::path::Path,
    ) -> Result<(crate::Host, crate::Plugin)> {
        let fuel = crate::policy::sections::meters_fuel(&self.limits, requests);
        let host = super::host_metered(self.cache.dir(), crate::Metering::default().fuel(fuel))?;
        let loaded = super::dist::load(&host, plugin, &self.dist, &self.cache).await?;
        super::dist::note_slow_compile(&loaded, plugin);
        Ok((host, loaded))
    }

    /// The policy these options, `requests` and `tools` describe (a policy file's values
    /// already laid under them), with `args` after argv[0], made as a policy file's and a
    /// recording's are ([`Policy::from_document`]).
    pub(crate) fn policy(
        &self,
        args: Vec<String>,
        requests: &Requests,
        tools: &Tools,
    ) -> Result<Policy> {
        let mut net = self.net.clone();
        net.allow = net
            .allow
            .iter()
            .map(|rule| rule.trim().to_owned())
            .filter(|rule| !rule.is_empty())
            .collect();
        if net.allow.is_empty()
            && !(net.resolve.is_empty() && net.http_headers.is_empty() && !net.tls_intercept)
        {
            anyhow::bail!(
                "--resolve, --http-header and --tls-intercept need --allow-net: the network is closed"
            );
        }
        let mut doc = PolicyDocument::given(&self.limits, &self.grants, &net, requests, tools);
        doc.args = args;
        doc.seed = (self.deterministic || self.seed.is_some()).then(|| self.seed.unwrap_or(0));
        doc.audit.clone_from(&self.audit);
        let env = |name: &str| std::env::var(name).ok();
        // A `[net]` entry's error is its own message, as the flag's parser gives it.
        Policy::from_document(&doc, &env).map_err(anyhow::Error::new)
    }

    /// Frame limits from `--max-frame`.
    pub(crate) fn frame_limits(&self) -> FrameLimits {
        FrameLimits::with_max_frame_bytes(
            usize::try_from(self.limits.max_frame()).unwrap_or(usize::MAX),
        )
    }
}

/// Open a recording for `plugin` under `policy`, if `--record` was given, and put the
/// policy's network on it: each admitted `wasi:http` exchange is recorded among the frames.
/// `limits` gives `--max-frame` (the session's, written into the header) and `--max-record`.
pub(crate) fn recorder(
    path: Option<&std::path::Path>,
    plugin: &Plugin,
    policy: &mut Policy,
    framing: sandpipe_proto::frame::Framing,
    protocol: Option<&str>,
    limits: &crate::policy::Limits,
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
        max_frame: Some(limits.max_frame()),
        max_record: Some(limits.max_record()),
    };
    let r = crate::run::record::Recorder::create(path, &header)
        .map_err(|e| anyhow::anyhow!("creating the recording {}: {e}", path.display()))?;
    if plugin.kind() == PluginKind::NativeUnsandboxed && policy.deterministic.is_some() {
        eprintln!(
            "sandpipe: note: --deterministic has no effect on a native plugin; its replay may differ"
        );
    }
    let r = std::sync::Arc::new(r);
    policy.tape = Some(crate::net::NetTape::Record(r.clone()));
    // One recording per process: `cli::main` asks it, once the command is done, whether it
    // was cut short, and then fails the command (a recording is never silently incomplete).
    super::common::remember_recording(&r);
    Ok(Some(r))
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
        parts.push(crate::CgroupSupport::detect().describe());
        if !policy.preopens.is_empty() {
            parts.push(format!(
                "granted: {}",
                crate::run::native::describe_grants(&policy.preopens)
            ));
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
        if policy.net.tls_intercept && namespaces.is_available() && !policy.net.is_closed() {
            parts.push("its TLS read by the proxy with a session CA (--tls-intercept)".to_owned());
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
    let confined = if NamespaceSupport::detect().is_available() {
        "in its sandbox"
    } else {
        "under Landlock"
    };
    eprintln!(
        "sandpipe: note: {when}; {confined} it could read only {}; {advice}",
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
