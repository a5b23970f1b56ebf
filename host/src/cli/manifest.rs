//! Policy as data: `sandpipe run plugin.toml`, and `--policy FILE` on run, call and inspect.
//!
//! A manifest holds everything the command line can say about a plugin (where it comes from
//! and its digest, framing or protocol, limits, grants, per-request budgets, trust), so an
//! engine's command line becomes `sandpipe run oracle.toml`. The format, with every key, is in
//! docs/policy.md; unknown keys are errors, so a misspelt limit never goes
//! unnoticed.
//!
//! Merging, decided here and documented in the README:
//! - a flag given on the command line overrides the file's value for that key;
//! - lists (`dirs`, `env`, `allow-imports`, `trusted-keys`, `insecure-registries`, `tools.allow`, `tools.deny`) are the
//!   file's followed by the command line's;
//! - a switch (`restart`, `locked`, ...) is on when either turns it on;
//! - `--framing` or `--protocol` on the command line replaces whichever of the two the file
//!   names;
//! - arguments after PLUGIN replace the file's `args`;
//! - a PLUGIN given on the command line next to `--policy` replaces the file's `source` (the
//!   same limits for another build of the plugin);
//! - relative paths in the file (the plugin, `dirs`, keys, the lock file) are relative to the
//!   file's directory, as in Cargo.toml, never to the working directory of the engine.
//!
//! Parsing reuses the command line's own value parsers, so `max-memory = "64MiB"` and
//! `--max-memory 64MiB` accept exactly the same values.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use clap::ArgMatches;
use clap::parser::ValueSource;
use serde::Deserialize;

use super::run::FramingArg;
use super::sandbox_args::{SandboxArgs, parse_open_files};
use super::{Command, parse_duration, parse_memory, parse_size, parse_value};
use crate::speak::protocols::Protocol;

/// A policy manifest, as read from TOML.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(crate) struct Manifest {
    /// Where the plugin comes from.
    plugin: PluginSection,
    /// `raw`, `lines`, `cbor` or `content-length` (run only).
    framing: Option<String>,
    /// The protocol the engine speaks (`run --protocol`, `call`, `inspect`).
    protocol: Option<String>,
    /// Deterministic mode (wasm): clocks and random from the seed.
    #[serde(default)]
    deterministic: bool,
    /// The seed for deterministic mode (implies it).
    seed: Option<u64>,
    #[serde(default)]
    limits: Limits,
    #[serde(default)]
    grants: Grants,
    #[serde(default)]
    requests: Requests,
    /// MCP tool filters (`run --protocol mcp`, `call`, `inspect`).
    #[serde(default)]
    tools: Tools,
    #[serde(default)]
    trust: Trust,
    /// The network allow-list, as `--allow-net`, `--resolve` and `--http-header`.
    #[serde(default)]
    net: Net,
    /// The audit log, as `--audit` (relative to the file's directory).
    audit: Option<String>,
}

/// `[net]`: what the plugin may reach.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct Net {
    #[serde(default)]
    allow: Vec<String>,
    #[serde(default)]
    resolve: Vec<String>,
    #[serde(default)]
    http_headers: Vec<String>,
}

/// `[tools]`: `allow` and `deny` lists, as `--allow-tool` and `--deny-tool`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct Tools {
    #[serde(default)]
    allow: Vec<String>,
    #[serde(default)]
    deny: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct PluginSection {
    /// A path (relative to the manifest) or an `oci://` reference.
    source: String,
    /// The sha256 of the plugin file (or the oci:// wasm layer): `--sha256`.
    sha256: Option<String>,
    /// Arguments after argv[0].
    #[serde(default)]
    args: Vec<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct Limits {
    fuel: Option<u64>,
    max_memory: Option<Quantity>,
    timeout: Option<String>,
    max_cpu_time: Option<String>,
    max_open_files: Option<Quantity>,
    max_disk_write: Option<Quantity>,
    max_frame: Option<Quantity>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct Grants {
    #[serde(default)]
    dirs: Vec<DirGrant>,
    #[serde(default)]
    env: Vec<String>,
    #[serde(default)]
    allow_imports: Vec<String>,
    /// Native only: `false` is `--no-startup-grants`.
    startup_grants: Option<bool>,
}

/// A directory: the command line's `HOST[::GUEST][:ro]`, or a table.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum DirGrant {
    Spec(String),
    Table(DirTable),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct DirTable {
    host: String,
    guest: Option<String>,
    #[serde(default)]
    read_only: bool,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct Requests {
    fuel: Option<u64>,
    timeout: Option<String>,
    #[serde(default)]
    restart: bool,
    recycle_after: Option<u64>,
    recycle_memory: Option<Quantity>,
    recycle_grace: Option<String>,
    start_timeout: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct Trust {
    #[serde(default)]
    trusted_keys: Vec<String>,
    #[serde(default)]
    require_signature: bool,
    lockfile: Option<String>,
    #[serde(default)]
    locked: bool,
    #[serde(default)]
    offline: bool,
    #[serde(default)]
    insecure_registries: Vec<String>,
}

/// A size or count: a number, or text the command line accepts (`"64MiB"`, `"none"`).
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
enum Quantity {
    Number(u64),
    Text(String),
}

impl Quantity {
    fn text(&self) -> String {
        match self {
            Quantity::Number(n) => n.to_string(),
            Quantity::Text(t) => t.clone(),
        }
    }
}

impl Manifest {
    /// Read and check a manifest file.
    pub(crate) fn load(path: &Path) -> Result<Manifest> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading the policy file {}", path.display()))?;
        Manifest::parse(&text).with_context(|| format!("in the policy file {}", path.display()))
    }

    fn parse(text: &str) -> Result<Manifest> {
        let m: Manifest = toml::from_str(text).map_err(|e| anyhow::anyhow!("{}", e.message()))?;
        if m.framing.is_some() && m.protocol.is_some() {
            bail!("`framing` and `protocol` exclude each other (a protocol has its own framing)");
        }
        if let Some(f) = &m.framing {
            parse_value::<FramingArg>(f).map_err(|e| key_error("framing", e))?;
        }
        if let Some(p) = &m.protocol {
            parse_value::<Protocol>(p).map_err(|e| key_error("protocol", e))?;
        }
        Ok(m)
    }

    /// `framing`, checked by [`Manifest::parse`].
    fn framing(&self) -> Option<FramingArg> {
        self.framing.as_deref().and_then(|f| parse_value(f).ok())
    }

    /// `protocol`, checked by [`Manifest::parse`].
    fn protocol(&self) -> Option<Protocol> {
        self.protocol.as_deref().and_then(|p| parse_value(p).ok())
    }

    /// The plugin, resolved against the manifest's directory unless it is a reference.
    fn source(&self, base: &Path) -> PathBuf {
        if self.plugin.source.starts_with("oci://") {
            PathBuf::from(&self.plugin.source)
        } else {
            base.join(&self.plugin.source)
        }
    }
}

/// Whether `path` names a manifest rather than a plugin: `sandpipe run oracle.toml`.
fn is_manifest(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == "toml")
}

/// The directory relative paths in `manifest_path` are relative to.
fn base_dir(manifest_path: &Path) -> PathBuf {
    match manifest_path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_owned(),
        _ => PathBuf::from("."),
    }
}

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
                if let Some(f) = m.framing() {
                    args.framing = f;
                }
                args.protocol = m.protocol();
            }
            merge_budgets(&mut args.budgets, &m, sub)?;
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
                args.protocol = m.protocol();
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
) -> Result<Option<(Manifest, PathBuf)>> {
    let Some(path) = manifest_path(policy, plugin) else {
        return Ok(None);
    };
    let m = Manifest::load(&path)?;
    let base = base_dir(&path);
    if is_manifest(plugin) {
        *plugin = m.source(&base);
    }
    if args.is_empty() {
        args.clone_from(&m.plugin.args);
    }
    merge_sandbox(sandbox, &m, &base, cli)?;
    Ok(Some((m, path)))
}

fn manifest_path(policy: Option<&Path>, plugin: &Path) -> Option<PathBuf> {
    match policy {
        Some(p) => Some(p.to_owned()),
        None if is_manifest(plugin) => Some(plugin.to_owned()),
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
    let m = Manifest::load(policy)?;
    Ok(m.source(&base_dir(policy)))
}

impl Requests {
    fn is_empty(&self) -> bool {
        self.fuel.is_none()
            && self.timeout.is_none()
            && !self.restart
            && self.recycle_after.is_none()
            && self.recycle_memory.is_none()
            && self.recycle_grace.is_none()
            && self.start_timeout.is_none()
    }
}

/// One key of the policy document (see [`crate::PolicyDocument`]): the flags that set it,
/// whether the file's value and the command line's add up (a list) or one replaces the other,
/// and whether a policy file sets it.
struct PolicyKey {
    key: &'static str,
    flags: &'static [&'static str],
    list: bool,
    in_file: fn(&Manifest) -> bool,
}

impl PolicyKey {
    const fn one(
        key: &'static str,
        flag: &'static [&'static str],
        in_file: fn(&Manifest) -> bool,
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
        in_file: fn(&Manifest) -> bool,
    ) -> Self {
        Self {
            key,
            flags: flag,
            list: true,
            in_file,
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
    manifest: Option<&(Manifest, PathBuf)>,
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

fn merge_sandbox(s: &mut SandboxArgs, m: &Manifest, base: &Path, cli: &ArgMatches) -> Result<()> {
    let l = &m.limits;
    let text = Quantity::text;
    if let Some(v) = from_file(cli, "fuel", "limits.fuel", l.fuel.as_ref(), |n| Ok(*n))? {
        s.fuel = Some(v);
    }
    if let Some(v) = from_file(
        cli,
        "max_memory",
        "limits.max-memory",
        l.max_memory.as_ref(),
        |q| parse_memory(&text(q)),
    )? {
        s.max_memory = v;
    }
    if let Some(v) = from_file(cli, "timeout", "limits.timeout", l.timeout.as_ref(), |t| {
        parse_duration(t)
    })? {
        s.timeout = Some(v);
    }
    if let Some(v) = from_file(
        cli,
        "max_cpu_time",
        "limits.max-cpu-time",
        l.max_cpu_time.as_ref(),
        |t| parse_duration(t),
    )? {
        s.max_cpu_time = Some(v);
    }
    if let Some(v) = from_file(
        cli,
        "max_open_files",
        "limits.max-open-files",
        l.max_open_files.as_ref(),
        |q| parse_open_files(&text(q)),
    )? {
        s.max_open_files = v;
    }
    if let Some(v) = from_file(
        cli,
        "max_disk_write",
        "limits.max-disk-write",
        l.max_disk_write.as_ref(),
        |q| parse_size(&text(q)),
    )? {
        s.max_disk_write = Some(v);
    }
    if let Some(v) = from_file(
        cli,
        "max_frame",
        "limits.max-frame",
        l.max_frame.as_ref(),
        |q| parse_size(&text(q)),
    )? {
        s.max_frame = v;
    }
    let g = &m.grants;
    let dirs = g
        .dirs
        .iter()
        .map(|d| dir_spec(d, base))
        .collect::<Result<Vec<_>>>()?;
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
    for rule in &n.allow {
        rule.parse::<crate::net::NetRule>()
            .map_err(|e| key_error("net.allow", e.to_string()))?;
    }
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
    if let Some(v) = from_file(
        cli,
        "audit",
        "audit",
        m.audit.as_ref(),
        |a| Ok(base.join(a)),
    )? {
        s.audit = Some(v);
    }
    s.deterministic |= m.deterministic;
    if let Some(v) = from_file(cli, "seed", "seed", m.seed.as_ref(), |n| Ok(*n))? {
        s.seed = Some(v);
    }
    let d = &mut s.dist;
    let t = &m.trust;
    if let Some(v) = from_file(
        cli,
        "sha256",
        "plugin.sha256",
        m.plugin.sha256.as_ref(),
        |h| Ok(h.clone()),
    )? {
        d.sha256 = Some(v);
    }
    let keys: Vec<PathBuf> = t.trusted_keys.iter().map(|k| base.join(k)).collect();
    widen(
        cli,
        ("trusted_keys", "SANDPIPE_TRUSTED_KEY", "trust.trusted-keys"),
        &mut d.trusted_keys,
        &keys,
        |k: &PathBuf| k.display().to_string(),
    );
    d.require_signature |= t.require_signature;
    if let Some(v) = from_file(
        cli,
        "lockfile",
        "trust.lockfile",
        t.lockfile.as_ref(),
        |l| Ok(base.join(l)),
    )? {
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

fn merge_budgets(
    b: &mut super::supervised::BudgetArgs,
    m: &Manifest,
    cli: &ArgMatches,
) -> Result<()> {
    let r = &m.requests;
    if let Some(v) = from_file(
        cli,
        "fuel_per_request",
        "requests.fuel",
        r.fuel.as_ref(),
        |n| Ok(*n),
    )? {
        b.fuel_per_request = Some(v);
    }
    if let Some(v) = from_file(
        cli,
        "request_timeout",
        "requests.timeout",
        r.timeout.as_ref(),
        |t| parse_duration(t),
    )? {
        b.request_timeout = Some(v);
    }
    b.restart |= r.restart;
    if let Some(v) = from_file(
        cli,
        "recycle_after",
        "requests.recycle-after",
        r.recycle_after.as_ref(),
        |n| Ok(*n),
    )? {
        b.recycle_after = Some(v);
    }
    if let Some(v) = from_file(
        cli,
        "recycle_memory",
        "requests.recycle-memory",
        r.recycle_memory.as_ref(),
        |q| super::supervised::parse_recycle_memory(&q.text()),
    )? {
        b.recycle_memory = v;
    }
    if let Some(v) = from_file(
        cli,
        "recycle_grace",
        "requests.recycle-grace",
        r.recycle_grace.as_ref(),
        |t| parse_duration(t),
    )? {
        b.recycle_grace = v;
    }
    if let Some(v) = from_file(
        cli,
        "start_timeout",
        "requests.start-timeout",
        r.start_timeout.as_ref(),
        |t| parse_duration(t),
    )? {
        b.start_timeout = v;
    }
    Ok(())
}

/// The file's `value` for the flag `id`, through the flag's own `parse`, unless the command
/// line gave the flag itself (which wins). Errors name the file's `key`.
///
/// One rule for the environment: a `SANDPIPE_*` variable counts as the command line, so it
/// wins too, but never silently: a note names the variable and the file's key it overrides (a
/// limit raised, a pin replaced), so a policy file read by a reviewer is not quietly loosened.
fn from_file<V, T>(
    cli: &ArgMatches,
    id: &str,
    key: &str,
    value: Option<&V>,
    parse: impl FnOnce(&V) -> Result<T, String>,
) -> Result<Option<T>> {
    match value {
        Some(v) if !given(cli, id) => parse(v).map(Some).map_err(|e| key_error(key, e)),
        Some(_) if from_env(cli, id) => {
            let var = format!("SANDPIPE_{}", id.to_uppercase());
            eprintln!("sandpipe: note: {var} overrides the policy file's {key}");
            Ok(None)
        }
        _ => Ok(None),
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

fn key_error(key: &str, e: String) -> anyhow::Error {
    anyhow::anyhow!("{key}: {e}")
}

/// A `--dir` spec for a manifest's directory grant, its host side resolved against `base`.
/// The guest path defaults to the host path as written in the file, as `--dir HOST` does.
fn dir_spec(d: &DirGrant, base: &Path) -> Result<String> {
    let (host, guest, read_only) = match d {
        DirGrant::Spec(spec) => {
            let (host, guest, access) =
                super::sandbox_args::parse_dir(spec).map_err(|e| key_error("grants.dirs", e))?;
            (
                host.to_string_lossy().into_owned(),
                guest,
                access == crate::Access::ReadOnly,
            )
        }
        DirGrant::Table(t) => (
            t.host.clone(),
            t.guest.clone().unwrap_or_else(|| t.host.clone()),
            t.read_only,
        ),
    };
    // `components` drops the `.` of `dirs = ["."]`: the file's own directory.
    let host: PathBuf = base.join(&host).components().collect();
    let host = host
        .to_str()
        .with_context(|| format!("grants.dirs: {} is not UTF-8", host.display()))?;
    Ok(format!(
        "{host}::{guest}{}",
        if read_only { ":ro" } else { ":rw" }
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    const FULL: &str = r#"
protocol = "oracle"
seed = 7

[plugin]
source = "oracle.wasm"
sha256 = "ab12"
args = ["--verbose"]

[limits]
fuel = 5000000
max-memory = "64MiB"
timeout = "30s"
max-cpu-time = "10s"
max-open-files = 64
max-frame = 1048576

[grants]
dirs = ["data::/data:ro", { host = "state", guest = "/state" }]
env = ["LANG=C.UTF-8"]
allow-imports = ["wasi:cli/stdin@0.2"]
startup-grants = false

[net]
allow = ["api.example.com:443", "10.0.0.0/8"]
resolve = ["api.example.com=203.0.113.7"]
http-headers = ["api.example.com:Authorization=env:API_TOKEN"]

[requests]
fuel = 1000000
timeout = "2s"
restart = true
recycle-after = 1000
recycle-memory = "128MiB"
recycle-grace = "1s"

[trust]
trusted-keys = ["keys/oracle.pub"]
require-signature = true
lockfile = "sandpipe.lock"
locked = true
offline = true
insecure-registries = ["registry.local:5000"]
"#;

    #[test]
    fn an_mcp_policy_names_its_tool_filter() {
        let m = Manifest::parse(
            "protocol = \"mcp\"\n[plugin]\nsource = \"s.js\"\n[tools]\nallow = [\"echo\"]\ndeny = [\"get-env\"]\n",
        )
        .expect("parses");
        assert_eq!(m.protocol(), Some(Protocol::Mcp));
        assert_eq!(
            (m.tools.allow, m.tools.deny),
            (vec!["echo".to_owned()], vec!["get-env".to_owned()])
        );
        assert!(Manifest::parse("[plugin]\nsource = \"s\"\n[tools]\nhide = []\n").is_err());
    }

    #[test]
    fn the_full_example_parses() {
        let m = Manifest::parse(FULL).expect("parses");
        assert_eq!(m.protocol(), Some(Protocol::Oracle));
        assert_eq!(m.plugin.args, ["--verbose"]);
        assert_eq!(m.grants.dirs.len(), 2);
        assert_eq!(m.net.allow, ["api.example.com:443", "10.0.0.0/8"]);
        assert_eq!(m.net.resolve.len(), 1);
        assert_eq!(
            dir_spec(&m.grants.dirs[0], Path::new("/etc/oracles")).expect("dir"),
            "/etc/oracles/data::/data:ro"
        );
        assert_eq!(
            dir_spec(&m.grants.dirs[1], Path::new("/etc/oracles")).expect("dir"),
            "/etc/oracles/state::/state:rw"
        );
        assert_eq!(
            m.source(Path::new("/etc/oracles")),
            Path::new("/etc/oracles/oracle.wasm")
        );
    }

    #[test]
    fn mistakes_are_named() {
        let typo = "[plugin]\nsource = \"a.wasm\"\n[limits]\nfule = 3\n";
        let e = Manifest::parse(typo).expect_err("refused").to_string();
        assert!(e.contains("unknown field `fule`"), "{e}");
        let both = "framing = \"lines\"\nprotocol = \"atp\"\n[plugin]\nsource = \"a.wasm\"\n";
        let e = Manifest::parse(both).expect_err("refused").to_string();
        assert!(e.contains("exclude each other"), "{e}");
        let proto = "protocol = \"smtp\"\n[plugin]\nsource = \"a.wasm\"\n";
        let e = Manifest::parse(proto).expect_err("refused").to_string();
        assert!(
            e.contains("protocol: \"smtp\" is not one of jsonrpc, oracle, orchard"),
            "{e}"
        );
        let framing = "framing = \"json\"\n[plugin]\nsource = \"a.wasm\"\n";
        let e = Manifest::parse(framing).expect_err("refused").to_string();
        assert!(
            e.contains("framing: \"json\" is not one of raw, lines, cbor, content-length"),
            "{e}"
        );
        let ok = "framing = \"content-length\"\n[plugin]\nsource = \"a.wasm\"\n";
        let m = Manifest::parse(ok).expect("parses");
        assert_eq!(m.framing(), Some(FramingArg::ContentLength));
        let missing = "framing = \"lines\"\n";
        let e = Manifest::parse(missing).expect_err("refused").to_string();
        assert!(e.contains("missing field `plugin`"), "{e}");
    }

    #[test]
    fn references_stay_references() {
        let m =
            Manifest::parse("[plugin]\nsource = \"oci://127.0.0.1:5000/a/b:1\"\n").expect("parses");
        assert_eq!(
            m.source(Path::new("/x")),
            Path::new("oci://127.0.0.1:5000/a/b:1")
        );
    }
}
