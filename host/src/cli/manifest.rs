//! Policy as data: `sandpipe run plugin.toml`, and `--policy FILE` on run, call and inspect.
//!
//! A manifest holds everything the command line can say about a plugin (where it comes from
//! and its digest, framing or protocol, limits, grants, per-request budgets, trust), so an
//! engine's command line becomes `sandpipe run oracle.toml`. The format, with every key, is in
//! the README ("Policy files"); unknown keys are errors, so a misspelt limit never goes
//! unnoticed.
//!
//! Merging, decided here and documented in the README:
//! - a flag given on the command line overrides the file's value for that key;
//! - lists (`dirs`, `env`, `allow-imports`, `trusted-keys`, `insecure-registries`) are the
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

use super::sandbox_args::{FileCap, SandboxArgs, parse_open_files};
use super::{Command, parse_duration, parse_memory, parse_size};
use crate::protocols::Protocol;

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
    #[serde(default)]
    trust: Trust,
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
        if let Some(f) = &m.framing
            && !["raw", "lines", "cbor", "content-length"].contains(&f.as_str())
        {
            bail!("framing {f:?} is not one of raw, lines, cbor, content-length");
        }
        if let Some(p) = &m.protocol {
            p.parse::<Protocol>().map_err(anyhow::Error::msg)?;
        }
        Ok(m)
    }

    fn protocol(&self) -> Option<Protocol> {
        self.protocol.as_deref().and_then(|p| p.parse().ok())
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
    let Some((name, sub)) = matches.subcommand() else {
        return Ok(());
    };
    match command {
        Command::Run(args) => {
            let Some(path) = manifest_path(args.policy.as_deref(), &args.plugin) else {
                return Ok(());
            };
            let m = Manifest::load(&path)?;
            let base = base_dir(&path);
            if is_manifest(&args.plugin) {
                args.plugin = m.source(&base);
            }
            if args.args.is_empty() {
                args.args = m.plugin.args.clone();
            }
            let framing_given = given(sub, "framing");
            let protocol_given = given(sub, "protocol");
            if !framing_given && !protocol_given {
                if let Some(f) = &m.framing {
                    args.framing = f.clone();
                }
                args.protocol = m.protocol();
            }
            merge_sandbox(&mut args.sandbox, &m, &base, sub)?;
            merge_budgets(&mut args.budgets, &m, sub)?;
            if args.protocol.is_none() && !m.requests.is_empty() {
                bail!(
                    "{}: [requests] budgets need a protocol (`protocol = ...` or --protocol)",
                    path.display()
                );
            }
        }
        Command::Call(args) => {
            let Some(path) = manifest_path(args.policy.as_deref(), &args.plugin) else {
                return Ok(());
            };
            let m = Manifest::load(&path)?;
            let base = base_dir(&path);
            if is_manifest(&args.plugin) {
                args.plugin = m.source(&base);
            }
            if args.plugin_args.is_empty() {
                args.plugin_args = m.plugin.args.clone();
            }
            if args.protocol.is_none() {
                args.protocol = m.protocol();
            }
            merge_sandbox(&mut args.sandbox, &m, &base, sub)?;
        }
        Command::Inspect(args) => {
            let Some(path) = manifest_path(args.policy.as_deref(), &args.plugin) else {
                return Ok(());
            };
            let m = Manifest::load(&path)?;
            let base = base_dir(&path);
            if is_manifest(&args.plugin) {
                args.plugin = m.source(&base);
            }
            if args.plugin_args.is_empty() {
                args.plugin_args = m.plugin.args.clone();
            }
            // inspect starts the plugin only with --protocol: the manifest's protocol is not
            // turned into a self-description run the user did not ask for.
            merge_sandbox(&mut args.sandbox, &m, &base, sub)?;
            args.policy_file = Some(path);
        }
        _ => {
            let _ = name;
        }
    }
    Ok(())
}

fn manifest_path(policy: Option<&Path>, plugin: &Path) -> Option<PathBuf> {
    match policy {
        Some(p) => Some(p.to_owned()),
        None if is_manifest(plugin) => Some(plugin.to_owned()),
        None => None,
    }
}

/// Whether the command line itself set `id` (not its default).
fn given(m: &ArgMatches, id: &str) -> bool {
    matches!(m.value_source(id), Some(ValueSource::CommandLine))
}

impl Requests {
    fn is_empty(&self) -> bool {
        self.fuel.is_none()
            && self.timeout.is_none()
            && !self.restart
            && self.recycle_after.is_none()
            && self.recycle_memory.is_none()
            && self.recycle_grace.is_none()
    }
}

fn merge_sandbox(s: &mut SandboxArgs, m: &Manifest, base: &Path, cli: &ArgMatches) -> Result<()> {
    let l = &m.limits;
    if !given(cli, "fuel") && l.fuel.is_some() {
        s.fuel = l.fuel;
    }
    if !given(cli, "max_memory")
        && let Some(q) = &l.max_memory
    {
        s.max_memory = parse_memory(&q.text()).map_err(|e| key_error("limits.max-memory", e))?;
    }
    if !given(cli, "timeout")
        && let Some(t) = &l.timeout
    {
        s.timeout = Some(parse_duration(t).map_err(|e| key_error("limits.timeout", e))?);
    }
    if !given(cli, "max_cpu_time")
        && let Some(t) = &l.max_cpu_time
    {
        s.max_cpu_time = Some(parse_duration(t).map_err(|e| key_error("limits.max-cpu-time", e))?);
    }
    if !given(cli, "max_open_files")
        && let Some(q) = &l.max_open_files
    {
        let FileCap(n) =
            parse_open_files(&q.text()).map_err(|e| key_error("limits.max-open-files", e))?;
        s.max_open_files = FileCap(n);
    }
    if !given(cli, "max_frame")
        && let Some(q) = &l.max_frame
    {
        s.max_frame = parse_size(&q.text()).map_err(|e| key_error("limits.max-frame", e))?;
    }
    let g = &m.grants;
    let mut dirs = Vec::with_capacity(g.dirs.len() + s.dirs.len());
    for d in &g.dirs {
        dirs.push(dir_spec(d, base)?);
    }
    dirs.append(&mut s.dirs);
    s.dirs = dirs;
    s.envs = g.env.iter().cloned().chain(s.envs.drain(..)).collect();
    s.allow_imports = g
        .allow_imports
        .iter()
        .cloned()
        .chain(s.allow_imports.drain(..))
        .collect();
    if g.startup_grants == Some(false) {
        s.no_startup_grants = true;
    }
    s.deterministic |= m.deterministic;
    if !given(cli, "seed") && m.seed.is_some() {
        s.seed = m.seed;
    }
    let d = &mut s.dist;
    let t = &m.trust;
    if !given(cli, "sha256") && m.plugin.sha256.is_some() {
        d.sha256 = m.plugin.sha256.clone();
    }
    d.trusted_keys = t
        .trusted_keys
        .iter()
        .map(|k| base.join(k))
        .chain(d.trusted_keys.drain(..))
        .collect();
    d.require_signature |= t.require_signature;
    if !given(cli, "lockfile")
        && let Some(l) = &t.lockfile
    {
        d.lockfile = Some(base.join(l));
    }
    if (t.locked || d.locked) && d.lockfile.is_none() {
        bail!("`locked` needs a lock file (`trust.lockfile` or --lockfile)");
    }
    d.locked |= t.locked;
    d.offline |= t.offline;
    d.insecure_registries = t
        .insecure_registries
        .iter()
        .cloned()
        .chain(d.insecure_registries.drain(..))
        .collect();
    Ok(())
}

fn merge_budgets(b: &mut super::proxy::BudgetArgs, m: &Manifest, cli: &ArgMatches) -> Result<()> {
    let r = &m.requests;
    if !given(cli, "fuel_per_request") && r.fuel.is_some() {
        b.fuel_per_request = r.fuel;
    }
    if !given(cli, "request_timeout")
        && let Some(t) = &r.timeout
    {
        b.request_timeout = Some(parse_duration(t).map_err(|e| key_error("requests.timeout", e))?);
    }
    b.restart |= r.restart;
    if !given(cli, "recycle_after") && r.recycle_after.is_some() {
        b.recycle_after = r.recycle_after;
    }
    if !given(cli, "recycle_memory")
        && let Some(q) = &r.recycle_memory
    {
        b.recycle_memory = super::proxy::parse_recycle_memory(&q.text())
            .map_err(|e| key_error("requests.recycle-memory", e))?;
    }
    if !given(cli, "recycle_grace")
        && let Some(t) = &r.recycle_grace
    {
        b.recycle_grace = parse_duration(t).map_err(|e| key_error("requests.recycle-grace", e))?;
    }
    Ok(())
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
    fn the_full_example_parses() {
        let m = Manifest::parse(FULL).expect("parses");
        assert_eq!(m.protocol(), Some(Protocol::Oracle));
        assert_eq!(m.plugin.args, ["--verbose"]);
        assert_eq!(m.grants.dirs.len(), 2);
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
        assert!(Manifest::parse(proto).is_err());
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
