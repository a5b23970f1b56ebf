//! The policy as data: one serde schema for a [`Policy`], written in a recording's header,
//! shown by `inspect --json`, and read back by replay.
//!
//! The document has the tables of a policy file (docs/policy.md): `[limits]`, `[grants]` and
//! `[net]`, plus `args`, `seed` and `audit`, with the same key names, so a reader meets one
//! vocabulary everywhere. Sizes are bytes, durations humantime text (`30s`, `1m 30s`); on the way
//! in, sizes may also be text (`"64MiB"`, `"none"`), as in a policy file.
//!
//! Two things are never written, because they are secrets: an environment variable's value
//! (`grants.env` holds names), and an HTTP header's value (`net.http-headers` holds
//! `HOST:NAME=env:VAR`, the variable it is read from). Reading a document back takes both from
//! the reader's own environment, as `--env NAME` and `--http-header` do.
//!
//! [`Policy::document`] destructures every field, so a field added to [`Policy`] does not
//! compile until it has a key here, and the round-trip test in `tests/tests/policy_document.rs`
//! checks every key through a policy file, a recording and `inspect --json`.

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{Access, Fuel, ImportPolicy, Policy};
use crate::net::{HttpHeader, NetPolicy, NetSpecError};

/// A [`Policy`] as data (see the module documentation).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields, default)]
#[non_exhaustive]
pub struct PolicyDocument {
    /// Arguments after argv\[0\].
    pub args: Vec<String>,
    /// Deterministic mode's seed (`None`: real clocks and random).
    pub seed: Option<u64>,
    /// Limits.
    pub limits: Limits,
    /// What the plugin may see.
    pub grants: Grants,
    /// What the plugin may reach.
    pub net: Net,
    /// Where enforcement decisions are written.
    pub audit: Option<PathBuf>,
}

/// `[limits]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields, default)]
#[non_exhaustive]
pub struct Limits {
    /// Fuel for the whole session.
    pub fuel: Option<u64>,
    /// Fuel for each request ([`Fuel::PerRequest`]).
    pub fuel_per_request: Option<u64>,
    /// The memory cap in bytes; `None` is no cap.
    #[serde(with = "size")]
    pub max_memory: Option<u64>,
    /// The session's wall-clock deadline.
    #[serde(with = "duration")]
    pub timeout: Option<Duration>,
    /// A native plugin's CPU time.
    #[serde(with = "duration")]
    pub max_cpu_time: Option<Duration>,
    /// Most files open at once; `None` keeps sandpipe's own limit.
    #[serde(with = "size")]
    pub max_open_files: Option<u64>,
    /// A native plugin's processes and threads; `None` is no limit.
    #[serde(with = "size")]
    pub max_processes: Option<u64>,
    /// Bytes a component may write through its preopens.
    #[serde(with = "size")]
    pub max_disk_write: Option<u64>,
}

/// `[grants]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields, default)]
#[non_exhaustive]
pub struct Grants {
    /// Preopened directories.
    pub dirs: Vec<Dir>,
    /// Names of the environment variables the plugin sees (values are never written).
    pub env: Vec<String>,
    /// Strict imports; `None` links everything ([`ImportPolicy::LinkAll`]).
    pub allow_imports: Option<Vec<String>>,
    /// A native plugin's read-only start-up grants.
    pub startup_grants: bool,
}

/// A key left out means the policy's default (so `{}` is [`Policy::default`]); `null` means
/// none.
impl Default for PolicyDocument {
    fn default() -> Self {
        Policy::default().document()
    }
}

impl Default for Limits {
    fn default() -> Self {
        Policy::default().document().limits
    }
}

impl Default for Grants {
    fn default() -> Self {
        Policy::default().document().grants
    }
}

/// One preopened directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
#[non_exhaustive]
pub struct Dir {
    /// The directory on the host.
    pub host: PathBuf,
    /// Where the plugin sees it.
    pub guest: String,
    /// Whether writes are refused.
    #[serde(default)]
    pub read_only: bool,
}

/// `HOST[::GUEST][:ro|:rw]`, as `--dir` and a policy file's `grants.dirs` take it: the guest
/// path defaults to the host path as written, and access to read-write.
impl std::str::FromStr for Dir {
    type Err = String;
    fn from_str(spec: &str) -> Result<Dir, String> {
        let (rest, read_only) = if let Some(r) = spec.strip_suffix(":ro") {
            (r, true)
        } else if let Some(r) = spec.strip_suffix(":rw") {
            (r, false)
        } else {
            (spec, false)
        };
        let (host, guest) = rest.split_once("::").unwrap_or((rest, rest));
        if host.is_empty() || guest.is_empty() {
            return Err(format!(
                "invalid --dir {spec:?}: expected HOST[::GUEST][:ro]"
            ));
        }
        Ok(Dir {
            host: PathBuf::from(host),
            guest: guest.to_owned(),
            read_only,
        })
    }
}

/// As `--dir` takes it: `HOST[::GUEST][:ro]`.
impl std::fmt::Display for Dir {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.host.display())?;
        if self.host.to_str() != Some(self.guest.as_str()) {
            write!(f, "::{}", self.guest)?;
        }
        if self.read_only {
            f.write_str(":ro")?;
        }
        Ok(())
    }
}

/// `[net]`, each entry as its command-line flag takes it (the field docs are the flags'
/// `--help`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
#[serde(rename_all = "kebab-case", deny_unknown_fields, default)]
#[non_exhaustive]
pub struct Net {
    /// Allow connections to HOST[:PORT] (repeatable, or comma-separated): a name, a wildcard
    /// (*.example.com), an IP address ([::1]:8080) or a range (10.0.0.0/8). sandpipe resolves
    /// names itself; a name resolving to a loopback, private or link-local address is refused
    /// unless a rule names that address. Without it the plugin has no network at all. Native
    /// plugins reach allowed hosts through sandpipe's proxy (HTTP_PROXY, ALL_PROXY).
    #[cfg_attr(
        feature = "cli",
        arg(
            id = "allow_net",
            long = "allow-net",
            value_name = "HOST[:PORT]",
            value_delimiter = ','
        )
    )]
    pub allow: Vec<String>,
    /// Resolve NAME to these addresses without DNS, as curl's --resolve (repeatable):
    /// NAME=ADDR[,ADDR...]. The name must still be allowed by --allow-net.
    #[cfg_attr(
        feature = "cli",
        arg(long = "resolve", value_name = "NAME=ADDR[,ADDR]")
    )]
    pub resolve: Vec<String>,
    /// Add a header to every wasi:http request a wasm plugin sends to HOST, its value read
    /// from sandpipe's own environment: HOST:NAME=env:VAR (repeatable). The plugin never sees it.
    #[cfg_attr(
        feature = "cli",
        arg(long = "http-header", value_name = "HOST:NAME=env:VAR")
    )]
    pub http_headers: Vec<String>,
}

/// Why a document does not make a policy.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DocumentError {
    /// `fuel` and `fuel-per-request` both set.
    #[error("limits.fuel and limits.fuel-per-request exclude each other")]
    TwoFuels,
    /// A `[net]` entry that does not parse, or a header whose variable is not set.
    #[error("net: {0}")]
    Net(#[from] NetSpecError),
    /// The audit log cannot be opened.
    #[error("opening the audit log {path}: {source}")]
    Audit {
        /// The log.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

impl Policy {
    /// This policy as data (see [`PolicyDocument`]).
    pub fn document(&self) -> PolicyDocument {
        let Policy {
            fuel,
            max_memory,
            deadline,
            preopens,
            env,
            args,
            imports,
            deterministic,
            max_cpu_time,
            max_open_files,
            max_processes,
            max_disk_write,
            startup_grants,
            net,
            audit,
        } = self;
        let (fuel, fuel_per_request) = match *fuel {
            Fuel::Unlimited => (None, None),
            Fuel::PerSession(n) => (Some(n), None),
            Fuel::PerRequest(n) => (None, Some(n)),
        };
        PolicyDocument {
            args: args.clone(),
            seed: *deterministic,
            limits: Limits {
                fuel,
                fuel_per_request,
                max_memory: *max_memory,
                timeout: *deadline,
                max_cpu_time: *max_cpu_time,
                max_open_files: *max_open_files,
                max_processes: *max_processes,
                max_disk_write: *max_disk_write,
            },
            grants: Grants {
                dirs: preopens
                    .iter()
                    .map(|p| Dir {
                        host: p.host.clone(),
                        guest: p.guest.clone(),
                        read_only: p.access == Access::ReadOnly,
                    })
                    .collect(),
                env: env.iter().map(|(name, _)| name.clone()).collect(),
                allow_imports: match imports {
                    ImportPolicy::LinkAll => None,
                    ImportPolicy::Strict(list) => Some(list.clone()),
                },
                startup_grants: *startup_grants,
            },
            net: Net {
                allow: net.allow.iter().map(ToString::to_string).collect(),
                resolve: net.resolve.iter().map(ToString::to_string).collect(),
                http_headers: net.http_headers.iter().map(HttpHeader::spec).collect(),
            },
            audit: audit.as_ref().map(|a| a.path().to_owned()),
        }
    }

    /// The policy `doc` describes. Environment values and HTTP header values come from `env`
    /// (the reader's own environment, for a replay); a variable `env` does not have is left
    /// out, as `--env NAME` leaves it out. The audit log is opened for appending.
    pub fn from_document(
        doc: &PolicyDocument,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Policy, DocumentError> {
        let l = &doc.limits;
        let fuel = match (l.fuel, l.fuel_per_request) {
            (Some(_), Some(_)) => return Err(DocumentError::TwoFuels),
            (Some(n), None) => Fuel::PerSession(n),
            (None, Some(n)) => Fuel::PerRequest(n),
            (None, None) => Fuel::Unlimited,
        };
        let mut policy = Policy::default()
            .fuel(fuel)
            .max_memory(l.max_memory)
            .max_cpu_time(l.max_cpu_time)
            .max_open_files(l.max_open_files)
            .max_processes(l.max_processes)
            .max_disk_write(l.max_disk_write)
            .startup_grants(doc.grants.startup_grants);
        policy.deadline = l.timeout;
        policy.deterministic = doc.seed;
        policy.args.clone_from(&doc.args);
        for d in &doc.grants.dirs {
            let access = if d.read_only {
                Access::ReadOnly
            } else {
                Access::ReadWrite
            };
            policy = policy.preopen(&d.host, &d.guest, access);
        }
        for name in &doc.grants.env {
            if let Some(value) = env(name) {
                policy = policy.env(name, value);
            }
        }
        if let Some(list) = &doc.grants.allow_imports {
            policy = policy.imports(ImportPolicy::Strict(list.clone()));
        }
        let mut net = NetPolicy::default();
        for rule in &doc.net.allow {
            net = net.allow(rule)?;
        }
        for pin in &doc.net.resolve {
            net.resolve.push(pin.parse()?);
        }
        for spec in &doc.net.http_headers {
            net.http_headers.push(HttpHeader::parse(spec, env)?);
        }
        policy.net = net;
        if let Some(path) = &doc.audit {
            let log = crate::net::AuditLog::open(path).map_err(|source| DocumentError::Audit {
                path: path.clone(),
                source,
            })?;
            policy.audit = Some(log);
        }
        Ok(policy)
    }
}

/// `Option<u64>` sizes: written as numbers (`null` for none); read as numbers or as text a
/// policy file takes (`"64MiB"`, `"none"`).
mod size {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    use crate::policy::value::{Quantity, parse_cap};

    pub(super) fn serialize<S: Serializer>(v: &Option<u64>, s: S) -> Result<S::Ok, S::Error> {
        v.serialize(s)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
        match Option::<Quantity>::deserialize(d)? {
            None => Ok(None),
            Some(q) => q.parse(parse_cap, Some).map_err(serde::de::Error::custom),
        }
    }
}

/// `Option<Duration>` as humantime text (`30s`, `1m 30s`).
mod duration {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    use crate::policy::value::parse_duration;

    pub(super) fn serialize<S: Serializer>(v: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            Some(d) => s.collect_str(&humantime::format_duration(*d)),
            None => s.serialize_none(),
        }
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<Duration>, D::Error> {
        Option::<String>::deserialize(d)?
            .map(|t| parse_duration(&t).map_err(serde::de::Error::custom))
            .transpose()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A policy with every field away from its default.
    fn everything() -> Policy {
        let mut p = Policy::default()
            .fuel(Fuel::PerSession(5_000_000))
            .max_memory(Some(64 << 20))
            .max_cpu_time(Some(Duration::from_secs(10)))
            .max_open_files(Some(64))
            .max_disk_write(Some(1 << 20))
            .startup_grants(false)
            .deadline(Duration::from_millis(1500))
            .preopen("/srv/data", "/data", Access::ReadOnly)
            .env("LANG", "C.UTF-8")
            .arg("--verbose")
            .deterministic(7)
            .imports(ImportPolicy::Strict(vec!["wasi:cli/stdin@0.2".into()]));
        p.net = NetPolicy::default()
            .allow("api.example.com:443")
            .and_then(|n| {
                n.resolve(
                    "api.example.com",
                    &["203.0.113.7".parse().expect("an address")],
                )
            })
            .expect("net");
        p.net.http_headers.push(
            HttpHeader::parse("api.example.com:Authorization=env:TOKEN", |_| {
                Some("s3cret".into())
            })
            .expect("header"),
        );
        p
    }

    #[test]
    fn a_document_round_trips_through_json_and_back_to_the_policy() {
        let p = everything();
        let doc = p.document();
        let json = serde_json::to_string(&doc).expect("serializes");
        assert!(
            !json.contains("s3cret") && !json.contains("C.UTF-8"),
            "{json}"
        );
        let back: PolicyDocument = serde_json::from_str(&json).expect("parses");
        assert_eq!(back, doc);
        let env = |name: &str| match name {
            "LANG" => Some("C.UTF-8".to_owned()),
            "TOKEN" => Some("s3cret".to_owned()),
            _ => None,
        };
        let again = Policy::from_document(&back, &env).expect("a policy");
        assert_eq!(again, p);
    }

    #[test]
    fn the_default_document_is_the_default_policy() {
        let doc: PolicyDocument = serde_json::from_str("{}").expect("parses");
        assert_eq!(doc, Policy::default().document());
        let none: PolicyDocument =
            serde_json::from_str(r#"{"limits":{"max-memory":"none","timeout":"2s"}}"#)
                .expect("parses");
        assert_eq!(none.limits.max_memory, None);
        assert_eq!(none.limits.timeout, Some(Duration::from_secs(2)));
        let text: PolicyDocument =
            serde_json::from_str(r#"{"limits":{"max-memory":"64MiB"}}"#).expect("parses");
        assert_eq!(text.limits.max_memory, Some(64 << 20));
    }

    #[test]
    fn dir_specs() {
        let dir = |host: &str, guest: &str, read_only| Dir {
            host: PathBuf::from(host),
            guest: guest.to_owned(),
            read_only,
        };
        assert_eq!("/tmp/x".parse(), Ok(dir("/tmp/x", "/tmp/x", false)));
        assert_eq!("/tmp/x::/data:ro".parse(), Ok(dir("/tmp/x", "/data", true)));
        assert_eq!("./d::/d:rw".parse(), Ok(dir("./d", "/d", false)));
        assert!("::/x".parse::<Dir>().is_err());
    }

    #[test]
    fn mistakes_are_refused() {
        let e = serde_json::from_str::<PolicyDocument>(r#"{"limits":{"fule":1}}"#)
            .expect_err("refused")
            .to_string();
        assert!(e.contains("unknown field `fule`"), "{e}");
        let two: PolicyDocument =
            serde_json::from_str(r#"{"limits":{"fuel":1,"fuel-per-request":2}}"#).expect("parses");
        assert!(matches!(
            Policy::from_document(&two, &|_| None),
            Err(DocumentError::TwoFuels)
        ));
    }
}
