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

use anyhow::{Context, Result, bail};
use clap::ArgMatches;
use clap::parser::ValueSource;

use super::sandbox_args::{FileCap, SandboxArgs};
use super::{Command, MemoryCap};
use crate::PolicyFile;
use crate::policy::document::Dir;

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
            merge_budgets(&mut args.budgets, &m, sub);
            // Lists: the file's, then the command line's.
            widen(
                sub,
                ("allow_tools", "SANDPIPE_ALLOW_TOOL", "tools.allow"),
                &mut args.budgets.tools.allow_tools,
                &m.tools.allow,
                String::clone,
            );
            prepend(&mut args.budgets.tools.deny_tools, &m.tools.deny);
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
            prepend(&mut args.tools.allow_tools, &m.tools.allow);
            prepend(&mut args.tools.deny_tools, &m.tools.deny);
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
                prepend(&mut args.tools.allow_tools, &m.tools.allow);
                prepend(&mut args.tools.deny_tools, &m.tools.deny);
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
const POLICY_KEYS: [PolicyKey; 15] = [
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
    PolicyKey::one("limits.max-disk-write", &["max_disk_write"], |m| {
        m.limits.max_disk_write.is_some()
    }),
    PolicyKey::list("grants.dirs", &["dirs"], |m| !m.grants.dirs.is_empty()),
    PolicyKey::list("grants.env", &["envs"], |m| !m.grants.env.is_empty()),
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
    let l = &m.limits;
    if let Some(v) = from_file(cli, "fuel", "limits.fuel", l.fuel) {
        s.fuel = Some(v);
    }
    if let Some(v) = from_file(cli, "max_memory", "limits.max-memory", l.max_memory) {
        s.max_memory = MemoryCap(v);
    }
    if let Some(v) = from_file(cli, "timeout", "limits.timeout", l.timeout) {
        s.timeout = Some(v);
    }
    if let Some(v) = from_file(cli, "max_cpu_time", "limits.max-cpu-time", l.max_cpu_time) {
        s.max_cpu_time = Some(v);
    }
    if let Some(v) = from_file(
        cli,
        "max_open_files",
        "limits.max-open-files",
        l.max_open_files,
    ) {
        s.max_open_files = FileCap(v);
    }
    if let Some(v) = from_file(
        cli,
        "max_disk_write",
        "limits.max-disk-write",
        l.max_disk_write,
    ) {
        s.max_disk_write = Some(v);
    }
    if let Some(v) = from_file(cli, "max_frame", "limits.max-frame", l.max_frame) {
        s.max_frame = v;
    }
    let g = &m.grants;
    let dirs = g.dirs.iter().map(dir_spec).collect::<Result<Vec<_>>>()?;
    let same = String::clone;
    widen(
        cli,
        ("dirs", "SANDPIPE_DIR", "grants.dirs"),
        &mut s.dirs,
        &dirs,
        same,
    );
    widen(
        cli,
        ("envs", "SANDPIPE_ENV", "grants.env"),
        &mut s.envs,
        &g.env,
        same,
    );
    widen(
        cli,
        (
            "allow_imports",
            "SANDPIPE_ALLOW_IMPORT",
            "grants.allow-imports",
        ),
        &mut s.allow_imports,
        &g.allow_imports,
        same,
    );
    if g.startup_grants == Some(false) {
        s.no_startup_grants = true;
    }
    let n = &m.net;
    widen(
        cli,
        ("allow_net", "SANDPIPE_ALLOW_NET", "[net] allow list"),
        &mut s.allow_net,
        &n.allow,
        same,
    );
    widen(
        cli,
        ("resolve", "SANDPIPE_RESOLVE", "net.resolve"),
        &mut s.resolve,
        &n.resolve,
        same,
    );
    widen(
        cli,
        ("http_headers", "SANDPIPE_HTTP_HEADER", "net.http-headers"),
        &mut s.http_headers,
        &n.http_headers,
        same,
    );
    if let Some(v) = from_file(cli, "audit", "audit", m.audit.clone()) {
        s.audit = Some(v);
    }
    s.deterministic |= m.deterministic;
    if let Some(v) = from_file(cli, "seed", "seed", m.seed) {
        s.seed = Some(v);
    }
    let d = &mut s.dist;
    let t = &m.trust;
    if let Some(v) = from_file(cli, "sha256", "plugin.sha256", m.plugin.sha256.clone()) {
        d.sha256 = Some(v);
    }
    widen(
        cli,
        ("trusted_keys", "SANDPIPE_TRUSTED_KEY", "trust.trusted-keys"),
        &mut d.trusted_keys,
        &t.trusted_keys,
        |k: &PathBuf| k.display().to_string(),
    );
    d.require_signature |= t.require_signature;
    if let Some(v) = from_file(cli, "lockfile", "trust.lockfile", t.lockfile.clone()) {
        d.lockfile = Some(v);
    }
    if (t.locked || d.locked) && d.lockfile.is_none() {
        bail!("`locked` needs a lock file (`trust.lockfile` or --lockfile)");
    }
    d.locked |= t.locked;
    d.offline |= t.offline;
    widen(
        cli,
        (
            "insecure_registries",
            "SANDPIPE_INSECURE_REGISTRY",
            "trust.insecure-registries",
        ),
        &mut d.insecure_registries,
        &t.insecure_registries,
        String::clone,
    );
    Ok(())
}

fn merge_budgets(b: &mut super::supervised::BudgetArgs, m: &PolicyFile, cli: &ArgMatches) {
    let r = &m.requests;
    if let Some(v) = from_file(cli, "fuel_per_request", "requests.fuel", r.fuel) {
        b.fuel_per_request = Some(v);
    }
    if let Some(v) = from_file(cli, "request_timeout", "requests.timeout", r.timeout) {
        b.request_timeout = Some(v);
    }
    b.restart |= r.restart;
    if let Some(v) = from_file(
        cli,
        "recycle_after",
        "requests.recycle-after",
        r.recycle_after,
    ) {
        b.recycle_after = Some(v);
    }
    if let Some(v) = from_file(
        cli,
        "recycle_memory",
        "requests.recycle-memory",
        r.recycle_memory,
    ) {
        b.recycle_memory = v;
    }
    if let Some(v) = from_file(
        cli,
        "recycle_grace",
        "requests.recycle-grace",
        r.recycle_grace,
    ) {
        b.recycle_grace = v;
    }
    if let Some(v) = from_file(
        cli,
        "start_timeout",
        "requests.start-timeout",
        r.start_timeout,
    ) {
        b.start_timeout = v;
    }
}

/// The file's `value` for the flag `id`, unless the command line gave the flag itself (which
/// wins).
///
/// One rule for the environment: a `SANDPIPE_*` variable counts as the command line, so it
/// wins too, but never silently: a note names the variable and the file's `key` it overrides
/// (a limit raised, a pin replaced), so a policy file read by a reviewer is not quietly
/// loosened.
fn from_file<T>(cli: &ArgMatches, id: &str, key: &str, value: Option<T>) -> Option<T> {
    match value {
        Some(v) if !given(cli, id) => Some(v),
        Some(_) if from_env(cli, id) => {
            let var = format!("SANDPIPE_{}", id.to_uppercase());
            eprintln!("sandpipe: note: {var} overrides the policy file's {key}");
            None
        }
        _ => None,
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

/// The `--dir` spec of a file's directory grant (its host side already resolved).
fn dir_spec(d: &Dir) -> Result<String> {
    let host = d
        .host
        .to_str()
        .with_context(|| format!("grants.dirs: {} is not UTF-8", d.host.display()))?;
    let access = if d.read_only { ":ro" } else { ":rw" };
    Ok(format!("{host}::{}{access}", d.guest))
}
