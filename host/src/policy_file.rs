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
//! Its sections (`[limits]`, `[grants]`, `[net]`, `[requests]`, `[tools]`) are declared once, in
//! [`crate::policy::sections`], with their flags. [`PolicyFile::policy`] is the [`Policy`] the
//! file alone describes. The command line lays
//! its flags over the same values one key at a time (a flag replaces the file's value, a list
//! adds to the file's), which `sandpipe::cli` does and docs/policy.md documents.

use std::path::{Path, PathBuf};
use std::str::FromStr;

use sandpipe_proto::frame::Framing;
use serde::{Deserialize, Deserializer};

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
    /// `[serve]`: `sandpipe serve`'s endpoint.
    #[serde(default)]
    pub serve: Serve,
    /// `[principals.NAME]`: what `sandpipe serve` gives one principal's instances beyond the
    /// rest of the file (its `tools`, which narrow `[tools]`).
    #[serde(default)]
    pub principals: std::collections::BTreeMap<String, PrincipalSection>,
}

/// `[principals.NAME]`: one principal's own settings under `sandpipe serve`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
#[non_exhaustive]
pub struct PrincipalSection {
    /// `[principals.NAME.tools]`: this principal's tool filter, laid over `[tools]` (and
    /// `--allow-tool`, `--deny-tool`) so that it hides more, never shows more: a tool is listed
    /// and callable when both let it through.
    #[serde(default)]
    pub tools: Tools,
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

pub use crate::policy::sections::{
    DEFAULT_MAX_FRAME, Grants, Limits, Net, RecycleMemory, Requests, Serve, Tools, Trust,
};

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
    /// Each `[principals.NAME.tools]` as its filter, by principal.
    pub fn principal_tools(
        &self,
    ) -> std::collections::BTreeMap<String, sandpipe_proto::mcp::ToolFilter> {
        self.principals
            .iter()
            .map(|(name, p)| (name.clone(), p.tools.filter()))
            .collect()
    }

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
            .chain(&mut file.serve.auth_token_file)
            .chain(&mut file.serve.jwks)
            .chain(&mut file.serve.record_dir)
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
        let mut doc = PolicyDocument::given(
            &self.limits,
            &self.grants,
            &self.net,
            &self.requests,
            &self.tools,
        );
        doc.args.clone_from(&self.plugin.args);
        doc.seed = self.seed();
        doc.audit.clone_from(&self.audit);
        Ok(Policy::from_document(&doc, env)?)
    }
}

/// The directory relative paths in the policy file at `path` are relative to.
fn base_dir(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_owned(),
        _ => PathBuf::from("."),
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::value::Cap;
    use std::time::Duration;

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
        // `[requests] fuel` is per-request fuel, which replaces the session's.
        assert_eq!(p.fuel, crate::Fuel::PerRequest(1_000_000));
        assert_eq!(doc.requests.fuel, Some(1_000_000));
        assert_eq!(doc.requests.recycle_after, Some(1000));
        assert_eq!(doc.limits.max_memory, Some(Cap(Some(64 << 20))));
        assert_eq!(doc.limits.timeout, Some(Duration::from_secs(30)));
        assert_eq!(doc.seed, Some(7));
        assert_eq!(doc.args, ["--verbose"]);
        assert_eq!(doc.grants.startup_grants, Some(false));
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
