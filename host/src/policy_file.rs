//! A policy file: the TOML that `sandpipe run oracle.toml` and `--policy FILE` read
//! (docs/policy.md), parsed here in the library, so an engine that embeds sandpipe loads the
//! same file, with the same checks and the same meaning, as the command line:
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let file = sandpipe::PolicyFile::load("oracle.toml".as_ref())?;
//! let host = sandpipe::Host::new()?;
//! let plugin = host.load(&file.plugin.source)?;
//! let session = host
//!     .start(&plugin, &file.policy()?, &sandpipe::SessionOptions::default())
//!     .await?;
//! # drop(session); Ok(()) }
//! ```
//!
//! [`PolicyFile`] is what the file says, key by key: `None` (or an empty list, or `false`)
//! where the file leaves a key to the command line or the default. Relative paths (the plugin,
//! `grants.dirs`, `audit`, `trust.trusted-keys`, `trust.lockfile`) are resolved against the
//! file's directory as it is read, as in Cargo.toml, never against an engine's working
//! directory. Unknown keys are errors, so a misspelt limit never goes unnoticed; values take
//! exactly what the matching flag takes (`max-memory = "64MiB"` or `"none"`, `timeout = "30s"`).
//!
//! [`PolicyFile::policy`] is the [`Policy`] the file alone describes. The command line lays
//! its flags over the same values one key at a time (a flag replaces the file's value, a list
//! adds to the file's), which `sandpipe::cli` does and docs/policy.md documents.

use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use sandpipe_proto::frame::Framing;
use serde::{Deserialize, Deserializer};

use crate::policy::document::{Dir, Net};
use crate::policy::value::{Cap, Quantity, parse_duration, parse_size};
use crate::policy::{DocumentError, Policy, PolicyDocument};
use crate::protocol::Protocol;

/// A policy file, as read (see the module documentation).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
#[non_exhaustive]
pub struct PolicyFile {
    /// Where the plugin comes from.
    pub plugin: PluginSection,
    /// How `run` frames both directions (`raw`, `lines`, `cbor`, `content-length`); excludes
    /// `protocol`.
    pub framing: Option<FramingName>,
    /// The protocol the engine speaks (`run --protocol`, `call`, `inspect`).
    #[serde(default, deserialize_with = "parsed")]
    pub protocol: Option<Protocol>,
    /// Deterministic mode (wasm): clocks and random from `seed`, or from 0.
    #[serde(default)]
    pub deterministic: bool,
    /// The seed for deterministic mode (implies it).
    pub seed: Option<u64>,
    /// `[limits]`.
    #[serde(default)]
    pub limits: Limits,
    /// `[grants]`.
    #[serde(default)]
    pub grants: Grants,
    /// `[requests]`: per-request budgets, which need a protocol.
    #[serde(default)]
    pub requests: Requests,
    /// `[tools]`: MCP tool filters.
    #[serde(default)]
    pub tools: Tools,
    /// `[trust]`: where the plugin may come from.
    #[serde(default)]
    pub trust: Trust,
    /// `[net]`: the network allow-list, each entry as its flag takes it.
    #[serde(default)]
    pub net: Net,
    /// The audit log (`--audit`).
    pub audit: Option<PathBuf>,
}

/// `[plugin]`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
#[non_exhaustive]
pub struct PluginSection {
    /// A path (resolved against the file's directory) or an `oci://` reference.
    pub source: PathBuf,
    /// The sha256 of the plugin file, or of an `oci://` reference's wasm layer (`--sha256`).
    pub sha256: Option<String>,
    /// Arguments after argv\[0\].
    #[serde(default)]
    pub args: Vec<String>,
}

/// `framing` in a policy file and `run --framing`: how both directions are split into frames,
/// or not at all.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
#[serde(rename_all = "kebab-case")]
pub enum FramingName {
    /// Bytes pass through unframed.
    Raw,
    /// JSON Lines: one JSON value per line.
    Lines,
    /// A CBOR sequence (RFC 8742).
    Cbor,
    /// LSP's `Content-Length` headers.
    ContentLength,
}

impl FramingName {
    /// The framing, or `None` for raw bytes.
    pub fn framing(self) -> Option<Framing> {
        match self {
            FramingName::Raw => None,
            FramingName::Lines => Some(Framing::JsonLines),
            FramingName::Cbor => Some(Framing::CborSeq),
            FramingName::ContentLength => Some(Framing::ContentLength),
        }
    }
}

/// `[limits]`, and the command line's limit flags (the field docs are their `--help`). A size
/// is a number of bytes or text (`"64MiB"`); a [`Cap`] of `None` is `"none"`, no cap. A key
/// left out is `None`: the default, which [`Policy::default`] holds and `--help` names.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
#[non_exhaustive]
pub struct Limits {
    /// Total fuel (about one unit per wasm instruction) for the whole session [default: unlimited].
    #[cfg_attr(feature = "cli", arg(long, value_name = "N"))]
    pub fuel: Option<u64>,
    /// Memory cap (e.g. 64MiB, or none): linear memory for wasm; for native, RLIMIT_DATA (heap
    /// and other writable memory, not address space V8, Go or the JVM only reserve)
    /// [default: 256MiB].
    #[serde(default, deserialize_with = "cap")]
    #[cfg_attr(feature = "cli", arg(long, value_name = "SIZE", value_parser = Cap::size))]
    pub max_memory: Option<Cap>,
    /// Wall-clock deadline for the whole session (e.g. 2s, 500ms) [default: none].
    #[serde(default, deserialize_with = "duration")]
    #[cfg_attr(feature = "cli", arg(long, value_name = "DURATION", value_parser = parse_duration))]
    pub timeout: Option<Duration>,
    /// CPU time for a native plugin (RLIMIT_CPU, whole seconds rounded up, e.g. 30s); past it
    /// the kernel stops the plugin (exit status 121). Wasm plugins use --fuel [default: unlimited].
    #[serde(default, deserialize_with = "duration")]
    #[cfg_attr(feature = "cli", arg(long, value_name = "DURATION", value_parser = parse_duration))]
    pub max_cpu_time: Option<Duration>,
    /// Most files a plugin may have open at once, or none for sandpipe's own limit. Wasm: host
    /// descriptors the session holds (its --dir preopens plus what it opened); past it an open
    /// fails (p2 error-code quota, EDQUOT; p1 EMFILE) and the plugin runs on. Native:
    /// RLIMIT_NOFILE, stdio included (EMFILE) [default: 1024].
    #[serde(default, deserialize_with = "count_cap")]
    #[cfg_attr(feature = "cli", arg(long, value_name = "N", value_parser = Cap::count))]
    pub max_open_files: Option<Cap>,
    /// Native only: most processes and threads the plugin may have at once, or none. Past it
    /// fork and thread creation fail with EAGAIN (the plugin's cgroup pids.max: not enforced
    /// where no cgroup can be had, as the start-up line then says) [default: 512].
    #[serde(default, deserialize_with = "count_cap")]
    #[cfg_attr(feature = "cli", arg(long, value_name = "N", value_parser = Cap::count))]
    pub max_processes: Option<Cap>,
    /// Bytes a wasm component may write to files through its --dir grants, in all (e.g.
    /// 100MiB); every write counts, an overwrite again. Past it a write fails with ENOSPC
    /// (insufficient-space) and the plugin runs on [default: none]. Not for native plugins.
    #[serde(default, deserialize_with = "size")]
    #[cfg_attr(feature = "cli", arg(long, value_name = "SIZE", value_parser = parse_size))]
    pub max_disk_write: Option<u64>,
    /// Largest frame accepted in either direction (e.g. 16MiB) [default: 16MiB].
    #[serde(default, deserialize_with = "size")]
    #[cfg_attr(feature = "cli", arg(long, value_name = "SIZE", value_parser = parse_size))]
    pub max_frame: Option<u64>,
}

impl Limits {
    /// The largest frame either way: `max_frame`, or [`DEFAULT_MAX_FRAME`].
    pub fn max_frame(&self) -> u64 {
        self.max_frame.unwrap_or(DEFAULT_MAX_FRAME)
    }

    /// Lay these limits over `doc`'s: each key set here replaces the document's.
    fn apply(&self, doc: &mut crate::policy::document::Limits) {
        doc.fuel = self.fuel.or(doc.fuel);
        doc.max_memory = self.max_memory.map_or(doc.max_memory, |c| c.0);
        doc.timeout = self.timeout.or(doc.timeout);
        doc.max_cpu_time = self.max_cpu_time.or(doc.max_cpu_time);
        doc.max_open_files = self.max_open_files.map_or(doc.max_open_files, |c| c.0);
        doc.max_processes = self.max_processes.map_or(doc.max_processes, |c| c.0);
        doc.max_disk_write = self.max_disk_write.or(doc.max_disk_write);
    }
}

/// The largest frame sandpipe accepts either way unless `max-frame` says otherwise: 16 MiB.
pub const DEFAULT_MAX_FRAME: u64 = 16 << 20;

/// `[grants]`, and the command line's grant flags.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
#[non_exhaustive]
pub struct Grants {
    /// Preopen a host directory: HOST[::GUEST][:ro]. GUEST defaults to HOST; `:ro` makes it
    /// read-only. Without --dir the plugin sees no filesystem.
    // In a file, also a table `{ host, guest, read-only }`.
    #[serde(default, deserialize_with = "dirs")]
    #[cfg_attr(feature = "cli", arg(long = "dir", value_name = "HOST[::GUEST][:ro]"))]
    pub dirs: Vec<Dir>,
    /// Pass an environment variable: NAME=VALUE, or NAME to copy sandpipe's own value.
    /// Nothing else is inherited.
    #[serde(default)]
    #[cfg_attr(feature = "cli", arg(long = "env", value_name = "NAME[=VALUE]"))]
    pub env: Vec<String>,
    /// Strict imports: refuse a component importing anything not listed (repeatable;
    /// e.g. wasi:cli/stdin@0.2; patch versions are ignored).
    #[serde(default)]
    #[cfg_attr(feature = "cli", arg(long = "allow-import", value_name = "INTERFACE"))]
    pub allow_imports: Vec<String>,
    /// Native only: do not grant, read-only, what the plugin needs to start (its resolved
    /// executable, a script's interpreter, the interpreter's install prefix, a venv, script
    /// files named in its arguments); it then sees only the system directories and --dir.
    // In a file, `startup-grants = false`; the flag is `Some(false)`.
    #[cfg_attr(
        feature = "cli",
        arg(
            id = "no_startup_grants",
            long = "no-startup-grants",
            num_args = 0,
            default_missing_value = "true",
            value_parser = clap::builder::TypedValueParser::map(
                clap::builder::FalseyValueParser::new(),
                |off: bool| !off
            ),
        )
    )]
    pub startup_grants: Option<bool>,
}

impl Grants {
    /// These grants as `doc`'s, returning the values given as `NAME=VALUE` (the document holds
    /// names only).
    fn apply(&self, doc: &mut crate::policy::document::Grants) -> Vec<(String, String)> {
        doc.dirs.clone_from(&self.dirs);
        let (names, values) = env_grants(&self.env);
        doc.env = names;
        if !self.allow_imports.is_empty() {
            doc.allow_imports = Some(self.allow_imports.clone());
        }
        doc.startup_grants = self.startup_grants.unwrap_or(doc.startup_grants);
        values
    }
}

/// `[requests]`: per-request budgets and instance renewal (`run --protocol` only), and their
/// flags.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
#[non_exhaustive]
pub struct Requests {
    /// Fuel for each request instead of the whole session (wasm only). Re-armed when a request
    /// (a JSON-RPC id, an ATP run, an oracle invoke) reaches the plugin; idle time is not billed.
    #[cfg_attr(
        feature = "cli",
        arg(
            id = "fuel_per_request",
            long = "fuel-per-request",
            value_name = "N",
            conflicts_with = "fuel"
        )
    )]
    pub fuel: Option<u64>,
    /// Wall-clock limit from a request reaching a started plugin to its response (e.g. 2s);
    /// neither start-up nor the time between requests is counted. A request that runs over
    /// gets the protocol's error at once. MCP: the server is sent notifications/cancelled and
    /// keeps serving; only if it then stays deaf for --recycle-grace is it replaced, with or
    /// without --restart. Other protocols: the plugin is stopped. For a component that exports
    /// functions, each call's deadline inside the instance.
    #[serde(default, deserialize_with = "duration")]
    #[cfg_attr(
        feature = "cli",
        arg(id = "request_timeout", long = "request-timeout", value_name = "DURATION", value_parser = parse_duration)
    )]
    pub timeout: Option<Duration>,
    /// How long a fresh instance gets to answer its handshake (MCP: initialize or
    /// server/discover, or the discover sandpipe sends before a 2026-07-28 client's first
    /// request), from when it was sent. Start-up is bounded by this, never billed to a request
    /// [default: 60s].
    #[serde(default, deserialize_with = "duration")]
    #[cfg_attr(feature = "cli", arg(long, value_name = "DURATION", value_parser = parse_duration))]
    pub start_timeout: Option<Duration>,
    /// After a request's budget stops the plugin (or it dies), give the next request a fresh
    /// instance, replaying the protocol's handshake to it, instead of ending the session (for a
    /// component that exports functions: instead of poisoning it, where every later request
    /// fails with the first stop's reason, as in Scarb).
    #[serde(default)]
    #[cfg_attr(feature = "cli", arg(long))]
    pub restart: bool,
    /// Replace the plugin with a fresh instance, between requests, after N answered requests.
    #[cfg_attr(feature = "cli", arg(long, value_name = "N"))]
    pub recycle_after: Option<u64>,
    /// Replace the plugin with a fresh instance, between requests, once it holds more than
    /// SIZE of memory (wasm: linear memory; native: resident set), e.g. 64MiB. auto (wasm with
    /// a --max-memory): once it has used half of its headroom below the cap, measured from its
    /// size after the first request (linear memory never shrinks, so a heap that grows per
    /// request would otherwise meet the cap mid-request). none: never [default: auto].
    #[serde(default, deserialize_with = "parsed")]
    #[cfg_attr(feature = "cli", arg(long, value_name = "SIZE|auto|none", value_parser = <RecycleMemory as FromStr>::from_str))]
    pub recycle_memory: Option<RecycleMemory>,
    /// How long a recycled instance gets to exit after its stdin closes, and how long an MCP
    /// server gets to answer sandpipe's probe after a request was cancelled for its timeout
    /// [default: 2s].
    #[serde(default, deserialize_with = "duration")]
    #[cfg_attr(feature = "cli", arg(long, value_name = "DURATION", value_parser = parse_duration))]
    pub recycle_grace: Option<Duration>,
}

impl Requests {
    /// Whether any per-request budget is set.
    pub fn is_empty(&self) -> bool {
        *self == Requests::default()
    }
}

/// `[tools]`: MCP tool filters, and `--allow-tool` and `--deny-tool`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
#[non_exhaustive]
pub struct Tools {
    /// MCP: only this tool is listed and callable (repeat for more; default: every tool).
    #[serde(default)]
    #[cfg_attr(
        feature = "cli",
        arg(id = "allow_tools", long = "allow-tool", value_name = "NAME")
    )]
    pub allow: Vec<String>,
    /// MCP: this tool is taken out of tools/list and a tools/call of it is refused as if the
    /// server did not have it (repeatable).
    #[serde(default)]
    #[cfg_attr(
        feature = "cli",
        arg(id = "deny_tools", long = "deny-tool", value_name = "NAME")
    )]
    pub deny: Vec<String>,
}

impl Tools {
    /// True when a tool is named.
    pub fn is_empty(&self) -> bool {
        self.allow.is_empty() && self.deny.is_empty()
    }

    /// The filter these lists say.
    pub fn filter(&self) -> sandpipe_proto::mcp::ToolFilter {
        sandpipe_proto::mcp::ToolFilter {
            allow: self.allow.clone(),
            deny: self.deny.clone(),
        }
    }
}

/// `[trust]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
#[non_exhaustive]
pub struct Trust {
    /// minisign public keys (`--trusted-key`).
    #[serde(default)]
    pub trusted_keys: Vec<PathBuf>,
    /// `--require-signature`.
    #[serde(default)]
    pub require_signature: bool,
    /// `--lockfile`.
    pub lockfile: Option<PathBuf>,
    /// `--locked`.
    #[serde(default)]
    pub locked: bool,
    /// `--offline`.
    #[serde(default)]
    pub offline: bool,
    /// `--insecure-registry`.
    #[serde(default)]
    pub insecure_registries: Vec<String>,
}

/// `--recycle-memory` and `requests.recycle-memory`: `auto`, `none`, or a size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecycleMemory {
    /// Half the headroom below the memory cap (wasm with a cap).
    Auto,
    /// Never for memory.
    Never,
    /// Above this many bytes.
    Above(u64),
}

impl FromStr for RecycleMemory {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(RecycleMemory::Auto),
            "none" | "never" => Ok(RecycleMemory::Never),
            _ => parse_size(s).map(RecycleMemory::Above),
        }
    }
}

/// Why a policy file cannot be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PolicyFileError {
    /// The file cannot be read.
    #[error("reading the policy file {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not a policy: bad TOML, an unknown key, a value its flag would refuse.
    #[error("in the policy file {}: {message}", path.display())]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong, naming the key.
        message: String,
    },
    /// The values parse but do not make a policy (a `[net]` entry, the audit log).
    #[error(transparent)]
    Policy(#[from] DocumentError),
}

impl PolicyFile {
    /// Read and check the policy file at `path`, resolving its relative paths against its
    /// directory.
    pub fn load(path: &Path) -> Result<PolicyFile, PolicyFileError> {
        let text = std::fs::read_to_string(path).map_err(|source| PolicyFileError::Read {
            path: path.to_owned(),
            source,
        })?;
        PolicyFile::parse(&text, &base_dir(path)).map_err(|message| PolicyFileError::Invalid {
            path: path.to_owned(),
            message,
        })
    }

    /// Check a policy file's `text`, resolving relative paths against `base`; the error names
    /// the key.
    pub fn parse(text: &str, base: &Path) -> Result<PolicyFile, String> {
        let mut file: PolicyFile = toml::from_str(text).map_err(|e| e.message().to_owned())?;
        if file.framing.is_some() && file.protocol.is_some() {
            return Err(
                "`framing` and `protocol` exclude each other (a protocol has its own framing)"
                    .into(),
            );
        }
        for rule in &file.net.allow {
            rule.parse::<crate::net::NetRule>()
                .map_err(|e| format!("net.allow: {e}"))?;
        }
        if !file
            .plugin
            .source
            .to_str()
            .is_some_and(|s| s.starts_with("oci://"))
        {
            file.plugin.source = base.join(&file.plugin.source);
        }
        for dir in &mut file.grants.dirs {
            // `components` drops the `.` of `dirs = ["."]`: the file's own directory.
            dir.host = base.join(&dir.host).components().collect();
        }
        for path in file
            .audit
            .iter_mut()
            .chain(&mut file.trust.trusted_keys)
            .chain(&mut file.trust.lockfile)
        {
            *path = base.join(&*path);
        }
        Ok(file)
    }

    /// Whether `path` names a policy file rather than a plugin: `sandpipe run oracle.toml`.
    pub fn is_policy_file(path: &Path) -> bool {
        path.extension().is_some_and(|e| e == "toml")
    }

    /// The file's deterministic-mode seed: `seed`, or 0 for `deterministic = true`.
    pub fn seed(&self) -> Option<u64> {
        self.seed.or(self.deterministic.then_some(0))
    }

    /// The [`Policy`] this file alone describes: its keys over [`Policy::default`]. `NAME`
    /// entries of `grants.env` and the `env:VAR` of an HTTP header take this process's
    /// environment, as their flags do.
    pub fn policy(&self) -> Result<Policy, PolicyFileError> {
        self.policy_with_env(&|name| std::env::var(name).ok())
    }

    /// [`PolicyFile::policy`], with the values of `NAME` entries and `env:VAR` headers from
    /// `env` (an engine's own map of what its plugins may see).
    pub fn policy_with_env(
        &self,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Policy, PolicyFileError> {
        let doc = PolicyDocument {
            args: self.plugin.args.clone(),
            seed: self.seed(),
            audit: self.audit.clone(),
            ..PolicyDocument::default()
        };
        Ok(policy_from(
            doc,
            &self.limits,
            &self.grants,
            &self.net,
            env,
        )?)
    }
}

/// The policy `limits`, `grants` and `net` lay over `doc` (which holds the plugin's arguments,
/// the seed and the audit log): the one path from a policy file, or from the command line's
/// flags (the same structs, flattened), to a [`Policy`]. `NAME=VALUE` grants are given
/// literally; every other variable (a bare `NAME` grant, an `env:VAR` header's secret) comes
/// from `env`.
pub(crate) fn policy_from(
    mut doc: PolicyDocument,
    limits: &Limits,
    grants: &Grants,
    net: &Net,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Policy, DocumentError> {
    limits.apply(&mut doc.limits);
    let values = grants.apply(&mut doc.grants);
    doc.net = net.clone();
    doc.grants
        .env
        .retain(|name| !values.iter().any(|(given, _)| given == name));
    let mut policy = Policy::from_document(&doc, env)?;
    for (name, value) in values {
        policy = policy.env(&name, &value);
    }
    Ok(policy)
}

/// `grants.env` (or `--env`) entries: the names, in order, and the values given as
/// `NAME=VALUE`; a bare `NAME` takes sandpipe's own value.
fn env_grants(entries: &[String]) -> (Vec<String>, Vec<(String, String)>) {
    let mut names = Vec::new();
    let mut values = Vec::new();
    for entry in entries {
        match entry.split_once('=') {
            Some((name, value)) => {
                names.push(name.to_owned());
                values.push((name.to_owned(), value.to_owned()));
            }
            None => names.push(entry.clone()),
        }
    }
    (names, values)
}

/// The directory relative paths in the policy file at `path` are relative to.
fn base_dir(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_owned(),
        _ => PathBuf::from("."),
    }
}

fn cap<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Cap>, D::Error> {
    Quantity::deserialize(d)?
        .parse(Cap::size, |n| Cap(Some(n)))
        .map(Some)
        .map_err(serde::de::Error::custom)
}

fn count_cap<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Cap>, D::Error> {
    Quantity::deserialize(d)?
        .parse(Cap::count, |n| Cap(Some(n)))
        .map(Some)
        .map_err(serde::de::Error::custom)
}

fn size<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    Quantity::deserialize(d)?
        .parse(parse_size, |n| n)
        .map(Some)
        .map_err(serde::de::Error::custom)
}

fn duration<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
    parse_duration(&String::deserialize(d)?)
        .map(Some)
        .map_err(serde::de::Error::custom)
}

/// A value through its `FromStr`, the parser its flag uses.
fn parsed<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: FromStr<Err = String>,
{
    String::deserialize(d)?
        .parse()
        .map(Some)
        .map_err(serde::de::Error::custom)
}

fn dirs<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Dir>, D::Error> {
    /// A directory: `--dir`'s spec, or a table.
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum DirGrant {
        Spec(String),
        Table(DirTable),
    }
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields, rename_all = "kebab-case")]
    struct DirTable {
        host: String,
        guest: Option<String>,
        #[serde(default)]
        read_only: bool,
    }
    Vec::<DirGrant>::deserialize(d)?
        .into_iter()
        .map(|g| match g {
            DirGrant::Spec(spec) => spec.parse::<Dir>(),
            DirGrant::Table(t) => Ok(Dir {
                guest: t.guest.unwrap_or_else(|| t.host.clone()),
                host: t.host.into(),
                read_only: t.read_only,
            }),
        })
        .collect::<Result<_, _>>()
        .map_err(serde::de::Error::custom)
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
dirs = ["data::/data:ro", { host = "state", guest = "/state" }, "."]
env = ["LANG=C.UTF-8"]
allow-imports = ["wasi:cli/stdin@0.2"]
startup-grants = false

[net]
allow = ["api.example.com:443", "10.0.0.0/8"]
resolve = ["api.example.com=203.0.113.7"]

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

    fn parse(text: &str) -> Result<PolicyFile, String> {
        PolicyFile::parse(text, Path::new("/etc/oracles"))
    }

    #[test]
    fn the_full_example_parses_with_paths_resolved() {
        let f = parse(FULL).expect("parses");
        assert_eq!(f.protocol, Some(Protocol::Oracle));
        assert_eq!(f.plugin.source, Path::new("/etc/oracles/oracle.wasm"));
        assert_eq!(f.plugin.args, ["--verbose"]);
        assert_eq!(f.limits.max_memory, Some(Cap(Some(64 << 20))));
        assert_eq!(f.limits.max_open_files, Some(Cap(Some(64))));
        let dirs: Vec<(String, &str, bool)> = f
            .grants
            .dirs
            .iter()
            .map(|d| (d.host.display().to_string(), d.guest.as_str(), d.read_only))
            .collect();
        assert_eq!(
            dirs,
            [
                ("/etc/oracles/data".into(), "/data", true),
                ("/etc/oracles/state".into(), "/state", false),
                ("/etc/oracles".into(), ".", false),
            ]
        );
        assert_eq!(
            f.requests.recycle_memory,
            Some(RecycleMemory::Above(128 << 20))
        );
        assert_eq!(
            f.trust.lockfile.as_deref(),
            Some(Path::new("/etc/oracles/sandpipe.lock"))
        );
        assert_eq!(
            f.trust.trusted_keys,
            [Path::new("/etc/oracles/keys/oracle.pub")]
        );
    }

    #[test]
    fn the_policy_is_the_files_keys_over_the_default() {
        let f = parse(FULL).expect("parses");
        let p = f.policy().expect("a policy");
        let doc = p.document();
        assert_eq!(doc.limits.fuel, Some(5_000_000));
        assert_eq!(doc.limits.max_memory, Some(64 << 20));
        assert_eq!(doc.limits.timeout, Some(Duration::from_secs(30)));
        assert_eq!(doc.seed, Some(7));
        assert_eq!(doc.args, ["--verbose"]);
        assert!(!doc.grants.startup_grants);
        assert_eq!(p.env, [("LANG".to_owned(), "C.UTF-8".to_owned())]);
        assert_eq!(doc.net.allow.len(), 2);
        // Nothing set: the library's default policy.
        let bare = parse("[plugin]\nsource = \"a.wasm\"\n").expect("parses");
        assert_eq!(bare.policy().expect("a policy"), Policy::default());
        let none = parse("[plugin]\nsource = \"a.wasm\"\n[limits]\nmax-memory = \"none\"\n")
            .expect("parses");
        assert_eq!(none.policy().expect("a policy").max_memory, None);
        let det = parse("deterministic = true\n[plugin]\nsource = \"a.wasm\"\n").expect("parses");
        assert_eq!(det.seed(), Some(0));
    }

    #[test]
    fn mistakes_name_the_key() {
        let cases = [
            (
                "[plugin]\nsource = \"a.wasm\"\n[limits]\nfule = 3\n",
                "unknown field `fule`",
            ),
            (
                "framing = \"lines\"\nprotocol = \"atp\"\n[plugin]\nsource = \"a.wasm\"\n",
                "exclude each other",
            ),
            (
                "protocol = \"smtp\"\n[plugin]\nsource = \"a.wasm\"\n",
                "unknown protocol \"smtp\"",
            ),
            (
                "framing = \"json\"\n[plugin]\nsource = \"a.wasm\"\n",
                "unknown variant `json`",
            ),
            ("framing = \"lines\"\n", "missing field `plugin`"),
            (
                "[plugin]\nsource = \"a\"\n[limits]\nmax-memory = \"lots\"\n",
                "invalid size \"lots\"",
            ),
            (
                "[plugin]\nsource = \"a\"\n[limits]\ntimeout = \"soon\"\n",
                "invalid duration",
            ),
            (
                "[plugin]\nsource = \"a\"\n[grants]\ndirs = [\"::/x\"]\n",
                "expected HOST[::GUEST][:ro]",
            ),
            (
                "[plugin]\nsource = \"a\"\n[net]\nallow = [\"a b\"]\n",
                "net.allow",
            ),
            (
                "[plugin]\nsource = \"a\"\n[tools]\nhide = []\n",
                "unknown field `hide`",
            ),
        ];
        for (text, want) in cases {
            let e = parse(text).expect_err(text);
            assert!(e.contains(want), "{text}: {e}");
        }
        let f =
            parse("framing = \"content-length\"\n[plugin]\nsource = \"a.wasm\"\n").expect("parses");
        assert_eq!(
            f.framing.and_then(FramingName::framing),
            Some(Framing::ContentLength)
        );
    }

    #[test]
    fn a_literal_env_value_is_the_plugins_and_a_header_secret_the_engines() {
        let f = parse(
            "[plugin]\nsource = \"a\"\n[grants]\nenv = [\"TOKEN=for-the-plugin\", \"HOME\", \"UNSET\"]\n\
             [net]\nallow = [\"api.test:443\"]\nhttp-headers = [\"api.test:X-Key=env:TOKEN\"]\n",
        )
        .expect("parses");
        let env = |name: &str| match name {
            "TOKEN" => Some("engine-secret".to_owned()),
            "HOME" => Some("/home/e".to_owned()),
            _ => None,
        };
        let p = f.policy_with_env(&env).expect("a policy");
        let vars: Vec<(&str, &str)> = p
            .env
            .iter()
            .map(|(n, v)| (n.as_str(), v.as_str()))
            .collect();
        // A bare name the environment lacks is left out, as `--env NAME` leaves it out.
        assert_eq!(vars, [("HOME", "/home/e"), ("TOKEN", "for-the-plugin")]);
        assert_eq!(p.net.http_headers[0].value, "engine-secret");
    }

    #[test]
    fn references_stay_references() {
        let f = parse("[plugin]\nsource = \"oci://127.0.0.1:5000/a/b:1\"\n").expect("parses");
        assert_eq!(f.plugin.source, Path::new("oci://127.0.0.1:5000/a/b:1"));
    }
}
