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
use crate::policy::value::{Quantity, parse_cap, parse_count_cap, parse_duration, parse_size};
use crate::policy::{DocumentError, Policy, PolicyDocument};
use crate::speak::protocols::Protocol;

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

/// `[limits]`. A size is a number of bytes or text (`"64MiB"`); `Some(None)` is the file's
/// `"none"`, no cap, where the flag takes it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
#[non_exhaustive]
pub struct Limits {
    /// Fuel for the whole session (`--fuel`).
    pub fuel: Option<u64>,
    /// The memory cap (`--max-memory`).
    #[serde(default, deserialize_with = "cap")]
    pub max_memory: Option<Option<u64>>,
    /// The session's wall-clock deadline (`--timeout`).
    #[serde(default, deserialize_with = "duration")]
    pub timeout: Option<Duration>,
    /// A native plugin's CPU time (`--max-cpu-time`).
    #[serde(default, deserialize_with = "duration")]
    pub max_cpu_time: Option<Duration>,
    /// Most files open at once (`--max-open-files`).
    #[serde(default, deserialize_with = "count_cap")]
    pub max_open_files: Option<Option<u64>>,
    /// Bytes a component may write through its preopens (`--max-disk-write`).
    #[serde(default, deserialize_with = "size")]
    pub max_disk_write: Option<u64>,
    /// The largest frame either way (`--max-frame`).
    #[serde(default, deserialize_with = "size")]
    pub max_frame: Option<u64>,
}

/// `[grants]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
#[non_exhaustive]
pub struct Grants {
    /// Preopened directories: `HOST[::GUEST][:ro|:rw]` as `--dir` takes it, or a table
    /// `{ host, guest, read-only }`. The guest path defaults to the host path as written.
    #[serde(default, deserialize_with = "dirs")]
    pub dirs: Vec<Dir>,
    /// `NAME=VALUE`, or `NAME` for sandpipe's own value (`--env`).
    #[serde(default)]
    pub env: Vec<String>,
    /// Strict imports when not empty (`--allow-import`).
    #[serde(default)]
    pub allow_imports: Vec<String>,
    /// A native plugin's start-up grants; `Some(false)` is `--no-startup-grants`.
    pub startup_grants: Option<bool>,
}

/// `[requests]`: per-request budgets and instance renewal (`run --protocol`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
#[non_exhaustive]
pub struct Requests {
    /// `--fuel-per-request`.
    pub fuel: Option<u64>,
    /// `--request-timeout`.
    #[serde(default, deserialize_with = "duration")]
    pub timeout: Option<Duration>,
    /// `--restart`.
    #[serde(default)]
    pub restart: bool,
    /// `--recycle-after`.
    pub recycle_after: Option<u64>,
    /// `--recycle-memory`.
    #[serde(default, deserialize_with = "parsed")]
    pub recycle_memory: Option<RecycleMemory>,
    /// `--recycle-grace`.
    #[serde(default, deserialize_with = "duration")]
    pub recycle_grace: Option<Duration>,
    /// `--start-timeout`.
    #[serde(default, deserialize_with = "duration")]
    pub start_timeout: Option<Duration>,
}

impl Requests {
    /// Whether the file sets any per-request budget.
    pub fn is_empty(&self) -> bool {
        *self == Requests::default()
    }
}

/// `[tools]`: MCP tool filters, as `--allow-tool` and `--deny-tool`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
#[non_exhaustive]
pub struct Tools {
    /// Tools to keep.
    #[serde(default)]
    pub allow: Vec<String>,
    /// Tools to hide.
    #[serde(default)]
    pub deny: Vec<String>,
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
        let mut doc = PolicyDocument::default();
        let l = &self.limits;
        doc.limits.fuel = l.fuel.or(doc.limits.fuel);
        doc.limits.max_memory = l.max_memory.unwrap_or(doc.limits.max_memory);
        doc.limits.timeout = l.timeout.or(doc.limits.timeout);
        doc.limits.max_cpu_time = l.max_cpu_time.or(doc.limits.max_cpu_time);
        doc.limits.max_open_files = l.max_open_files.unwrap_or(doc.limits.max_open_files);
        doc.limits.max_disk_write = l.max_disk_write.or(doc.limits.max_disk_write);
        let g = &self.grants;
        doc.grants.dirs.clone_from(&g.dirs);
        let (names, values) = env_grants(&g.env);
        doc.grants.env = names;
        if !g.allow_imports.is_empty() {
            doc.grants.allow_imports = Some(g.allow_imports.clone());
        }
        doc.grants.startup_grants = g.startup_grants.unwrap_or(doc.grants.startup_grants);
        doc.net = self.net.clone();
        doc.args.clone_from(&self.plugin.args);
        doc.seed = self.seed();
        doc.audit.clone_from(&self.audit);
        Ok(policy_with_values(doc, &values, env)?)
    }
}

/// The policy `doc` describes, with the `NAME=VALUE` grants in `values` given literally and
/// every other variable (a bare `NAME` grant, an `env:VAR` header's secret) from `env`: the one
/// path from a policy file, or from the command line's flags, to a [`Policy`].
pub fn policy_with_values(
    mut doc: PolicyDocument,
    values: &[(String, String)],
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Policy, DocumentError> {
    doc.grants
        .env
        .retain(|name| !values.iter().any(|(given, _)| given == name));
    let mut policy = Policy::from_document(&doc, env)?;
    for (name, value) in values {
        policy = policy.env(name, value);
    }
    Ok(policy)
}

/// `grants.env` (or `--env`) entries: the names, in order, and the values given as
/// `NAME=VALUE`; a bare `NAME` takes sandpipe's own value.
pub fn env_grants(entries: &[String]) -> (Vec<String>, Vec<(String, String)>) {
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

fn cap<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Option<u64>>, D::Error> {
    Quantity::deserialize(d)?
        .parse(parse_cap, Some)
        .map(Some)
        .map_err(serde::de::Error::custom)
}

fn count_cap<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Option<u64>>, D::Error> {
    Quantity::deserialize(d)?
        .parse(parse_count_cap, Some)
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
        assert_eq!(f.limits.max_memory, Some(Some(64 << 20)));
        assert_eq!(f.limits.max_open_files, Some(Some(64)));
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
