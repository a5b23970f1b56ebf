//! The command line laid over a policy file: `sandpipe run plugin.toml`, and `--policy FILE` on
//! run, call and inspect.
//!
//! The file itself is read by the library ([`PolicyFile`]: its schema, its checks, relative
//! paths resolved against the file's directory), with the parsers the flags use, so
//! `max-memory = "64MiB"` and `--max-memory 64MiB` accept exactly the same values. This module
//! is the one overlay of the command line on it, decided here and documented in
//! docs/policy.md:
//! - a flag given on the command line overrides the file's value for that key;
//! - lists (`dirs`, `env`, `allow-imports`, `net.*`, `trusted-keys`, `insecure-registries`,
//!   `tools.allow`, `tools.deny`) are the file's followed by the command line's;
//! - a switch (`restart`, `locked`, ...) is on when either turns it on;
//! - `--framing` or `--protocol` on the command line replaces whichever of the two the file
//!   names;
//! - arguments after PLUGIN replace the file's `args`;
//! - a PLUGIN given on the command line next to `--policy` replaces the file's `source` (the
//!   same limits for another build of the plugin);
//! - a `SANDPIPE_*` variable counts as the command line, and is named in a `note:` line when it
//!   overrides or adds to what the file says.

use std::path::{Path, PathBuf};

use anyhow::{Result, bail};
use clap::ArgMatches;
use clap::parser::ValueSource;

use super::Command;
use super::sandbox_args::SandboxArgs;
use crate::PolicyFile;
use crate::policy_file::{Requests, Tools};

/// Fold a manifest (named by `--policy` or given as PLUGIN) into `command`'s arguments, keeping
/// whatever the command line said itself.
pub(crate) fn apply(command: &mut Command, matches: &ArgMatches) -> Result<()> {
    let Some((_, sub)) = matches.subcommand() else {
        return Ok(());
    };
    match command {
        Command::Run(args) => {
            let folded = fold(
                args.policy.as_deref(),
                &mut args.plugin,
                &mut args.args,
                &mut args.sandbox,
                sub,
            )?;
            args.sandbox.sources = sources(sub, folded.as_ref(), &["args"]);
            let Some((m, path)) = folded else {
                return Ok(());
            };
            if !given(sub, "framing") && !given(sub, "protocol") {
                if let Some(f) = m.framing {
                    args.framing = f;
                }
                args.protocol = m.protocol;
            }
            merge_requests(&mut args.requests, &m, sub);
            merge_tools(&mut args.tools, &m, sub);
            if args.protocol.is_none() && !m.requests.is_empty() {
                bail!(
                    "{}: [requests] budgets need a protocol (`protocol = ...` or --protocol)",
                    path.display()
                );
            }
        }
        Command::Call(args) => {
            let folded = fold(
                args.policy.as_deref(),
                &mut args.plugin,
                &mut args.plugin_args,
                &mut args.sandbox,
                sub,
            )?;
            args.sandbox.sources = sources(sub, folded.as_ref(), &["plugin_args"]);
            let Some((m, _)) = folded else {
                return Ok(());
            };
            if args.protocol.is_none() {
                args.protocol = m.protocol;
            }
            merge_tools(&mut args.tools, &m, sub);
        }
        Command::Inspect(args) => {
            // inspect starts the plugin only with --protocol: the manifest's protocol is not
            // turned into a self-description run the user did not ask for.
            let folded = fold(
                args.policy.as_deref(),
                &mut args.plugin,
                &mut args.plugin_args,
                &mut args.sandbox,
                sub,
            )?;
            args.sandbox.sources = sources(sub, folded.as_ref(), &["plugin_args"]);
            if let Some((m, path)) = folded {
                args.policy_file = Some(path);
                merge_tools(&mut args.tools, &m, sub);
            }
        }
        _ => {}
    }
    Ok(())
}

/// What run, call and inspect fold alike: the plugin (when PLUGIN is the manifest), its
/// arguments (when none follow PLUGIN) and the sandbox options. Returns the manifest and its
/// path, or `None` when there is no manifest.
fn fold(
    policy: Option<&Path>,
    plugin: &mut PathBuf,
    args: &mut Vec<String>,
    sandbox: &mut SandboxArgs,
    cli: &ArgMatches,
) -> Result<Option<(PolicyFile, PathBuf)>> {
    let Some(path) = manifest_path(policy, plugin) else {
        return Ok(None);
    };
    let m = PolicyFile::load(&path)?;
    if PolicyFile::is_policy_file(plugin) {
        plugin.clone_from(&m.plugin.source);
    }
    if args.is_empty() {
        args.clone_from(&m.plugin.args);
    }
    merge_sandbox(sandbox, &m, cli)?;
    Ok(Some((m, path)))
}

fn manifest_path(policy: Option<&Path>, plugin: &Path) -> Option<PathBuf> {
    match policy {
        Some(p) => Some(p.to_owned()),
        None if PolicyFile::is_policy_file(plugin) => Some(plugin.to_owned()),
        None => None,
    }
}

/// Whether the command line (or its `SANDPIPE_*` environment variable) set `id`: both win
/// over the file.
fn given(m: &ArgMatches, id: &str) -> bool {
    matches!(
        m.value_source(id),
        Some(ValueSource::CommandLine | ValueSource::EnvVariable)
    )
}

/// The plugin a policy file names (`sandpipe image --policy FILE` without PLUGIN).
pub(crate) fn plugin_of(policy: &Path) -> Result<PathBuf> {
    Ok(PolicyFile::load(policy)?.plugin.source)
}

/// One key of the policy document (see [`crate::PolicyDocument`]): the flags that set it,
/// whether the file's value and the command line's add up (a list) or one replaces the other,
/// and whether a policy file sets it.
struct PolicyKey {
    key: &'static str,
    flags: &'static [&'static str],
    list: bool,
    in_file: fn(&PolicyFile) -> bool,
}

impl PolicyKey {
    const fn one(
        key: &'static str,
        flag: &'static [&'static str],
        in_file: fn(&PolicyFile) -> bool,
    ) -> Self {
        Self {
            key,
            flags: flag,
            list: false,
            in_file,
        }
    }

    const fn list(
        key: &'static str,
        flag: &'static [&'static str],
        in_file: fn(&PolicyFile) -> bool,
    ) -> Self {
        Self {
            list: true,
            ..Self::one(key, flag, in_file)
        }
    }
}

/// Every key of the policy document but `args`, whose flag differs per command.
const POLICY_KEYS: [PolicyKey; 16] = [
    PolicyKey::one("limits.fuel", &["fuel"], |m| m.limits.fuel.is_some()),
    PolicyKey::one("limits.max-memory", &["max_memory"], |m| {
        m.limits.max_memory.is_some()
    }),
    PolicyKey::one("limits.timeout", &["timeout"], |m| {
        m.limits.timeout.is_some()
    }),
    PolicyKey::one("limits.max-cpu-time", &["max_cpu_time"], |m| {
        m.limits.max_cpu_time.is_some()
    }),
    PolicyKey::one("limits.max-open-files", &["max_open_files"], |m| {
        m.limits.max_open_files.is_some()
    }),
    PolicyKey::one("limits.max-processes", &["max_processes"], |m| {
        m.limits.max_processes.is_some()
    }),
    PolicyKey::one("limits.max-disk-write", &["max_disk_write"], |m| {
        m.limits.max_disk_write.is_some()
    }),
    PolicyKey::list("grants.dirs", &["dirs"], |m| !m.grants.dirs.is_empty()),
    PolicyKey::list("grants.env", &["env"], |m| !m.grants.env.is_empty()),
    PolicyKey::list("grants.allow-imports", &["allow_imports"], |m| {
        !m.grants.allow_imports.is_empty()
    }),
    PolicyKey::one("grants.startup-grants", &["no_startup_grants"], |m| {
        m.grants.startup_grants.is_some()
    }),
    PolicyKey::list("net.allow", &["allow_net"], |m| !m.net.allow.is_empty()),
    PolicyKey::list("net.resolve", &["resolve"], |m| !m.net.resolve.is_empty()),
    PolicyKey::list("net.http-headers", &["http_headers"], |m| {
        !m.net.http_headers.is_empty()
    }),
    PolicyKey::one("seed", &["seed", "deterministic"], |m| {
        m.seed.is_some() || m.deterministic
    }),
    PolicyKey::one("audit", &["audit"], |m| m.audit.is_some()),
];

/// Where each value of the policy came from, by the policy document's key: `flag`, `env` (a
/// `SANDPIPE_*` variable), `file`, `default`, or, for a list the file and the command line
/// both add to, `file+flag` or `file+env`. `inspect --json` shows it as `policy_sources`.
fn sources(
    cli: &ArgMatches,
    manifest: Option<&(PolicyFile, PathBuf)>,
    args_flag: &'static [&'static str],
) -> std::collections::BTreeMap<String, String> {
    let m = manifest.map(|(m, _)| m);
    // Arguments after PLUGIN replace the file's `args`.
    let args = PolicyKey {
        key: "args",
        flags: args_flag,
        list: false,
        in_file: |m| !m.plugin.args.is_empty(),
    };
    POLICY_KEYS
        .iter()
        .chain([&args])
        .map(|k| {
            let given = k.flags.iter().find_map(|id| match cli.value_source(id) {
                Some(ValueSource::CommandLine) => Some("flag"),
                Some(ValueSource::EnvVariable) => Some("env"),
                _ => None,
            });
            let file = m.is_some_and(k.in_file);
            let source = match (file, given) {
                (true, Some(g)) if k.list => format!("file+{g}"),
                (_, Some(g)) => g.to_owned(),
                (true, None) => "file".to_owned(),
                (false, None) => "default".to_owned(),
            };
            (k.key.to_owned(), source)
        })
        .collect()
}

fn merge_sandbox(s: &mut SandboxArgs, m: &PolicyFile, cli: &ArgMatches) -> Result<()> {
    let (l, f) = (&mut s.limits, &m.limits);
    layer(cli, ("fuel", "limits.fuel"), &mut l.fuel, &f.fuel);
    layer(
        cli,
        ("max_memory", "limits.max-memory"),
        &mut l.max_memory,
        &f.max_memory,
    );
    layer(
        cli,
        ("timeout", "limits.timeout"),
        &mut l.timeout,
        &f.timeout,
    );
    let key = ("max_cpu_time", "limits.max-cpu-time");
    layer(cli, key, &mut l.max_cpu_time, &f.max_cpu_time);
    let key = ("max_open_files", "limits.max-open-files");
    layer(cli, key, &mut l.max_open_files, &f.max_open_files);
    let key = ("max_processes", "limits.max-processes");
    layer(cli, key, &mut l.max_processes, &f.max_processes);
    let key = ("max_disk_write", "limits.max-disk-write");
    layer(cli, key, &mut l.max_disk_write, &f.max_disk_write);
    layer(
        cli,
        ("max_frame", "limits.max-frame"),
        &mut l.max_frame,
        &f.max_frame,
    );
    let (g, f) = (&mut s.grants, &m.grants);
    widen(
        cli,
        ("dirs", "SANDPIPE_DIR", "grants.dirs"),
        &mut g.dirs,
        &f.dirs,
        ToString::to_string,
    );
    widen(
        cli,
        ("env", "SANDPIPE_ENV", "grants.env"),
        &mut g.env,
        &f.env,
        ToString::to_string,
    );
    let key = (
        "allow_imports",
        "SANDPIPE_ALLOW_IMPORT",
        "grants.allow-imports",
    );
    widen(
        cli,
        key,
        &mut g.allow_imports,
        &f.allow_imports,
        ToString::to_string,
    );
    let key = ("no_startup_grants", "grants.startup-grants");
    layer(cli, key, &mut g.startup_grants, &f.startup_grants);
    let (n, f) = (&mut s.net, &m.net);
    let key = ("allow_net", "SANDPIPE_ALLOW_NET", "[net] allow list");
    widen(cli, key, &mut n.allow, &f.allow, ToString::to_string);
    let key = ("resolve", "SANDPIPE_RESOLVE", "net.resolve");
    widen(cli, key, &mut n.resolve, &f.resolve, ToString::to_string);
    let key = ("http_headers", "SANDPIPE_HTTP_HEADER", "net.http-headers");
    widen(
        cli,
        key,
        &mut n.http_headers,
        &f.http_headers,
        ToString::to_string,
    );
    layer(cli, ("audit", "audit"), &mut s.audit, &m.audit);
    s.deterministic |= m.deterministic;
    layer(cli, ("seed", "seed"), &mut s.seed, &m.seed);
    let (d, t) = (&mut s.dist, &m.trust);
    layer(
        cli,
        ("sha256", "plugin.sha256"),
        &mut d.sha256,
        &m.plugin.sha256,
    );
    let key = ("trusted_keys", "SANDPIPE_TRUSTED_KEY", "trust.trusted-keys");
    widen(cli, key, &mut d.trusted_keys, &t.trusted_keys, |k| {
        k.display().to_string()
    });
    d.require_signature |= t.require_signature;
    layer(
        cli,
        ("lockfile", "trust.lockfile"),
        &mut d.lockfile,
        &t.lockfile,
    );
    if (t.locked || d.locked) && d.lockfile.is_none() {
        bail!("`locked` needs a lock file (`trust.lockfile` or --lockfile)");
    }
    d.locked |= t.locked;
    d.offline |= t.offline;
    let key = (
        "insecure_registries",
        "SANDPIPE_INSECURE_REGISTRY",
        "trust.insecure-registries",
    );
    widen(
        cli,
        key,
        &mut d.insecure_registries,
        &t.insecure_registries,
        ToString::to_string,
    );
    Ok(())
}

fn merge_requests(r: &mut Requests, m: &PolicyFile, cli: &ArgMatches) {
    let f = &m.requests;
    layer(
        cli,
        ("fuel_per_request", "requests.fuel"),
        &mut r.fuel,
        &f.fuel,
    );
    layer(
        cli,
        ("request_timeout", "requests.timeout"),
        &mut r.timeout,
        &f.timeout,
    );
    r.restart |= f.restart;
    let key = ("recycle_after", "requests.recycle-after");
    layer(cli, key, &mut r.recycle_after, &f.recycle_after);
    let key = ("recycle_memory", "requests.recycle-memory");
    layer(cli, key, &mut r.recycle_memory, &f.recycle_memory);
    let key = ("recycle_grace", "requests.recycle-grace");
    layer(cli, key, &mut r.recycle_grace, &f.recycle_grace);
    let key = ("start_timeout", "requests.start-timeout");
    layer(cli, key, &mut r.start_timeout, &f.start_timeout);
}

/// MCP tool filters: the file's, then the command line's.
fn merge_tools(t: &mut Tools, m: &PolicyFile, cli: &ArgMatches) {
    let key = ("allow_tools", "SANDPIPE_ALLOW_TOOL", "tools.allow");
    widen(cli, key, &mut t.allow, &m.tools.allow, ToString::to_string);
    let key = ("deny_tools", "SANDPIPE_DENY_TOOL", "tools.deny");
    widen(cli, key, &mut t.deny, &m.tools.deny, ToString::to_string);
}

/// A key the flag and the file hold in the same type: the flag's value if given, else the
/// file's (`flag.or(file)`).
///
/// One rule for the environment: a `SANDPIPE_*` variable counts as the command line, so it
/// wins too, but never silently: a note names the variable and the file's `key` it overrides
/// (a limit raised, a pin replaced), so a policy file read by a reviewer is not quietly
/// loosened.
fn layer<T: Clone>(
    cli: &ArgMatches,
    (id, key): (&str, &str),
    flag: &mut Option<T>,
    file: &Option<T>,
) {
    match (&*flag, file) {
        (None, Some(v)) => *flag = Some(v.clone()),
        (Some(_), Some(_)) if from_env(cli, id) => {
            let var = format!("SANDPIPE_{}", id.to_uppercase());
            eprintln!("sandpipe: note: {var} overrides the policy file's {key}");
        }
        _ => {}
    }
}

/// A list the file sets and a `SANDPIPE_*` variable adds to (`var`, for the flag `id`): the
/// file's entries first, then the variable's, with a note naming what the variable adds.
fn widen<T: Clone>(
    cli: &ArgMatches,
    (id, var, key): (&str, &str, &str),
    list: &mut Vec<T>,
    from_file: &[T],
    show: impl Fn(&T) -> String,
) {
    if !from_file.is_empty() && !list.is_empty() && from_env(cli, id) {
        let added: Vec<String> = list.iter().map(show).collect();
        eprintln!(
            "sandpipe: note: {var} adds {} to the policy file's {key}",
            added.join(",")
        );
    }
    prepend(list, from_file);
}

/// Whether `id`'s value came from its `SANDPIPE_*` variable rather than the command line.
fn from_env(cli: &ArgMatches, id: &str) -> bool {
    cli.value_source(id) == Some(ValueSource::EnvVariable)
}

/// Lists: the file's entries first, then the command line's.
fn prepend<T: Clone>(list: &mut Vec<T>, from_file: &[T]) {
    list.splice(0..0, from_file.iter().cloned());
}

#[cfg(test)]
mod tests {
    use clap::{CommandFactory, FromArgMatches};

    use super::*;
    use crate::cli::Cli;

    fn run_args(argv: &[&str]) -> super::super::run::RunArgs {
        let matches = super::super::with_env_names(Cli::command())
            .try_get_matches_from(argv)
            .expect("parses");
        match Cli::from_arg_matches(&matches).expect("parses").command {
            Command::Run(args) => args,
            _ => panic!("not run"),
        }
    }

    /// Each flag and its policy-file key are one field of one struct, read by one parser: the
    /// same values given both ways make equal structs, so the overlay is a field at a time.
    #[test]
    fn flags_and_policy_file_keys_fill_the_same_structs() {
        let file = PolicyFile::parse(
            r#"
[plugin]
source = "p.wasm"
[limits]
fuel = 5
max-memory = "none"
timeout = "3s"
max-cpu-time = "2s"
max-open-files = 64
max-processes = 16
max-disk-write = "1MiB"
max-frame = "1KiB"
[grants]
dirs = ["/d::/g:ro", "/e"]
env = ["A=1", "HOME"]
allow-imports = ["wasi:cli/stdin@0.2"]
startup-grants = false
[requests]
timeout = "1s"
start-timeout = "5s"
restart = true
recycle-after = 3
recycle-memory = "64MiB"
recycle-grace = "1s"
[tools]
allow = ["a"]
deny = ["b"]
[net]
allow = ["example.com:443"]
resolve = ["example.com=127.0.0.1"]
http-headers = ["example.com:X-Key=env:KEY"]
"#,
            Path::new("/"),
        )
        .expect("a policy file");
        let run = run_args(&[
            "sandpipe",
            "run",
            "--protocol",
            "mcp",
            "--fuel=5",
            "--max-memory=none",
            "--timeout=3s",
            "--max-cpu-time=2s",
            "--max-open-files=64",
            "--max-processes=16",
            "--max-disk-write=1MiB",
            "--max-frame=1KiB",
            "--dir=/d::/g:ro",
            "--dir=/e",
            "--env=A=1",
            "--env=HOME",
            "--allow-import=wasi:cli/stdin@0.2",
            "--no-startup-grants",
            "--request-timeout=1s",
            "--start-timeout=5s",
            "--restart",
            "--recycle-after=3",
            "--recycle-memory=64MiB",
            "--recycle-grace=1s",
            "--allow-tool=a",
            "--deny-tool=b",
            "--allow-net=example.com:443",
            "--resolve=example.com=127.0.0.1",
            "--http-header=example.com:X-Key=env:KEY",
            "p.wasm",
        ]);
        assert_eq!(run.sandbox.limits, file.limits);
        assert_eq!(run.sandbox.grants, file.grants);
        assert_eq!(run.sandbox.net, file.net);
        assert_eq!(run.requests, file.requests);
        assert_eq!(run.tools, file.tools);
        // `fuel` and `requests.fuel` exclude each other.
        let file = PolicyFile::parse(
            "[plugin]\nsource = \"p.wasm\"\n[requests]\nfuel = 7\n",
            Path::new("/"),
        )
        .expect("a policy file");
        let run = run_args(&["sandpipe", "run", "--fuel-per-request=7", "p.wasm"]);
        assert_eq!(run.requests, file.requests);
        // Nothing given: every key is the default's, as in an empty file.
        let file = PolicyFile::parse("[plugin]\nsource = \"p.wasm\"\n", Path::new("/"))
            .expect("a policy file");
        let run = run_args(&["sandpipe", "run", "p.wasm"]);
        assert_eq!(run.sandbox.limits, file.limits);
        assert_eq!(run.sandbox.grants, file.grants);
        assert_eq!(run.requests, file.requests);
    }

    /// The table behind `inspect`'s sources names flags `run` has: a misspelt id would read as
    /// "default" whatever the command line said.
    #[test]
    fn every_policy_key_names_flags_run_has() {
        let cli = super::super::with_env_names(Cli::command());
        let run = cli.find_subcommand("run").expect("run");
        for key in &POLICY_KEYS {
            for id in key.flags {
                assert!(
                    run.get_arguments().any(|a| a.get_id() == *id),
                    "{}: no flag {id}",
                    key.key
                );
            }
        }
    }
}
