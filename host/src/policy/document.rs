//! The policy as data: one serde schema for a [`Policy`], written in a recording's header,
//! shown by `inspect --json`, and read back by replay.
//!
//! The document is the sections of a policy file (docs/policy.md), the same types: `[limits]`,
//! `[grants]`, `[net]`, `[requests]` and `[tools]`, plus `args`, `seed` and `audit`, so a reader meets one
//! vocabulary everywhere, and a recording holds every key the policy ran under. Sizes are bytes, durations humantime text (`30s`, `1m 30s`); on the way
//! in, sizes may also be text (`"64MiB"`, `"none"`), as in a policy file.
//!
//! Two things are never written, because they are secrets: an environment variable's value
//! (`grants.env` holds names), and an HTTP header's value (`net.http-headers` holds
//! `HOST:NAME=env:VAR`, the variable it is read from). Reading a document back takes both from
//! the reader's own environment, as `--env NAME` and `--http-header` do.
//!
//! A key declared with `=> field` in its section maps to that [`Policy`] field both ways without
//! a line here; the rest (fuel, directories, environment, imports, the network) are written and
//! read below. The round-trip test in `tests/tests/policy_document.rs` walks every declared key
//! through a flag, a policy file, the environment, a recording and `inspect --json`.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

pub use super::sections::Dir;
use super::sections::{Grants, Limits, Net, Requests, Tools};
use super::{Access, Fuel, ImportPolicy, Policy};
use crate::net::{HttpHeader, NetPolicy, NetSpecError};

/// A [`Policy`] as data (see the module documentation): the sections of a policy file
/// ([`super::sections`]) with `args`, `seed` and `audit`. Read, a key left out is unset (the
/// policy's default); written by [`Policy::document`], every key is set.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
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
    /// Per-request budgets, and per-request fuel.
    pub requests: Requests,
    /// MCP tool filters.
    pub tools: Tools,
    /// Where enforcement decisions are written.
    pub audit: Option<PathBuf>,
}

impl PolicyDocument {
    /// A document from the sections as given (a policy file's, or the command line's laid over
    /// one). Per-request fuel, when given, replaces the session's, as `run --protocol` always
    /// did: the two exclude each other in one policy.
    pub fn given(
        limits: &Limits,
        grants: &Grants,
        net: &Net,
        requests: &Requests,
        tools: &Tools,
    ) -> Self {
        let mut limits = limits.clone();
        if requests.fuel.is_some() {
            limits.fuel = None;
        }
        PolicyDocument {
            limits,
            grants: grants.clone(),
            net: net.clone(),
            requests: requests.clone(),
            tools: tools.clone(),
            ..PolicyDocument::default()
        }
    }

    /// A document from its JSON, in this shape or the older one whose `limits` held
    /// `fuel-per-request` (now `requests.fuel`).
    pub fn from_json(text: &str) -> Result<PolicyDocument, serde_json::Error> {
        let mut value: serde_json::Value = serde_json::from_str(text)?;
        let old = value
            .get_mut("limits")
            .and_then(|l| l.as_object_mut())
            .and_then(|l| l.remove("fuel-per-request"))
            .filter(|fuel| !fuel.is_null());
        if let Some(fuel) = old
            && let Some(doc) = value.as_object_mut()
        {
            let requests = doc
                .entry("requests")
                .or_insert_with(|| serde_json::json!({}));
            if let Some(requests) = requests.as_object_mut() {
                requests.insert("fuel".into(), fuel);
            }
        }
        serde_json::from_value(value)
    }
}

/// Why a document does not make a policy.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DocumentError {
    /// `limits.fuel` and `requests.fuel` both set.
    #[error("limits.fuel and requests.fuel exclude each other")]
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
    /// This policy as data (see [`PolicyDocument`]): every key of every section set.
    pub fn document(&self) -> PolicyDocument {
        let (fuel, fuel_per_request) = match self.fuel {
            Fuel::Unlimited => (None, None),
            Fuel::PerSession(n) => (Some(n), None),
            Fuel::PerRequest(n) => (None, Some(n)),
        };
        let mut limits = Limits::from_policy(self);
        limits.fuel = fuel;
        let mut grants = Grants::from_policy(self);
        grants.dirs = self
            .preopens
            .iter()
            .map(|p| Dir {
                host: p.host.clone(),
                guest: p.guest.clone(),
                read_only: p.access == Access::ReadOnly,
            })
            .collect();
        grants.env = self.env.iter().map(|(name, _)| name.clone()).collect();
        grants.allow_imports = match &self.imports {
            ImportPolicy::LinkAll => Vec::new(),
            ImportPolicy::Strict(list) => list.clone(),
        };
        let mut net = Net::from_policy(self);
        net.allow = self.net.allow.iter().map(ToString::to_string).collect();
        net.resolve = self.net.resolve.iter().map(ToString::to_string).collect();
        net.http_headers = self.net.http_headers.iter().map(HttpHeader::spec).collect();
        net.tls_intercept = self.net.tls_intercept;
        let mut requests = self.requests.resolved();
        requests.fuel = fuel_per_request;
        PolicyDocument {
            args: self.args.clone(),
            seed: self.deterministic,
            limits,
            grants,
            net,
            requests,
            tools: self.tools.clone(),
            audit: self.audit.as_ref().map(|a| a.path().to_owned()),
        }
    }

    /// The policy `doc` describes, its unset keys at [`Policy::default`]'s values: the one
    /// path from a policy file, the command line's flags and a recording to a policy. A
    /// `grants.env` entry `NAME=VALUE` is given literally; every other variable (a bare `NAME`,
    /// an `env:VAR` header's secret) comes from `env` (the reader's own environment, for a
    /// replay), and one `env` does not have is left out, as `--env NAME` leaves it out. The
    /// audit log is opened for appending.
    pub fn from_document(
        doc: &PolicyDocument,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Policy, DocumentError> {
        let mut policy = Policy::default();
        doc.limits.resolve_into(&mut policy);
        doc.grants.resolve_into(&mut policy);
        doc.net.resolve_into(&mut policy);
        doc.requests.resolve_into(&mut policy);
        policy.fuel = match (doc.limits.fuel, doc.requests.fuel) {
            (Some(_), Some(_)) => return Err(DocumentError::TwoFuels),
            (Some(n), None) => Fuel::PerSession(n),
            (None, Some(n)) => Fuel::PerRequest(n),
            (None, None) => Fuel::Unlimited,
        };
        policy.requests = doc.requests.resolved();
        policy.tools = doc.tools.clone();
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
        // The environment's values first, then the literal ones, each in the order given.
        let entries = &doc.grants.env;
        let literal = |name: &str| {
            entries
                .iter()
                .any(|e| e.split_once('=').is_some_and(|(n, _)| n == name))
        };
        for name in entries.iter().filter(|e| !e.contains('=')) {
            if !literal(name)
                && let Some(value) = env(name)
            {
                policy = policy.env(name, value);
            }
        }
        for (name, value) in entries.iter().filter_map(|e| e.split_once('=')) {
            policy = policy.env(name, value);
        }
        if !doc.grants.allow_imports.is_empty() {
            policy = policy.imports(ImportPolicy::Strict(doc.grants.allow_imports.clone()));
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
        net.tls_intercept = doc.net.tls_intercept;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::sections::RecycleMemory;
    use crate::policy::value::Cap;
    use std::time::Duration;

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
        p.net.tls_intercept = true;
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
        let none = |_: &str| None;
        assert_eq!(
            Policy::from_document(&doc, &none).expect("a policy"),
            Policy::default()
        );
        let written = Policy::default().document();
        assert_eq!(
            Policy::from_document(&written, &none).expect("a policy"),
            Policy::default()
        );
        let none: PolicyDocument =
            serde_json::from_str(r#"{"limits":{"max-memory":"none","timeout":"2s"}}"#)
                .expect("parses");
        assert_eq!(none.limits.max_memory, Some(Cap(None)));
        assert_eq!(none.limits.timeout, Some(Duration::from_secs(2)));
        let null: PolicyDocument =
            serde_json::from_str(r#"{"limits":{"max-memory":null}}"#).expect("parses");
        assert_eq!(null.limits.max_memory, Some(Cap(None)));
        let text: PolicyDocument =
            serde_json::from_str(r#"{"limits":{"max-memory":"64MiB"}}"#).expect("parses");
        assert_eq!(text.limits.max_memory, Some(Cap(Some(64 << 20))));
    }

    #[test]
    fn per_request_fuel_and_budgets_round_trip_in_one_home() {
        let requests = Requests {
            fuel: Some(7_000),
            timeout: Some(Duration::from_secs(2)),
            restart: true,
            recycle_after: Some(3),
            recycle_memory: Some(RecycleMemory::Above(1 << 20)),
            ..Requests::default()
        };
        let p = Policy::default().requests(&requests);
        assert_eq!(p.fuel, Fuel::PerRequest(7_000));
        assert_eq!(p.requests.fuel, None, "the policy's fuel is its one home");
        let json = serde_json::to_value(p.document()).expect("serializes");
        assert_eq!(json["requests"]["fuel"], 7_000);
        assert_eq!(json["limits"]["fuel"], serde_json::Value::Null);
        assert_eq!(json["requests"]["recycle-memory"], 1 << 20);
        assert_eq!(json["requests"]["start-timeout"], "1m");
        let back = PolicyDocument::from_json(&json.to_string()).expect("parses");
        assert_eq!(
            Policy::from_document(&back, &|_| None).expect("a policy"),
            p
        );
        // A recording from before `[requests]` was recorded: per-request fuel in `limits`.
        let old = PolicyDocument::from_json(r#"{"limits":{"fuel":null,"fuel-per-request":9}}"#)
            .expect("the old shape reads");
        let old = Policy::from_document(&old, &|_| None).expect("a policy");
        assert_eq!(old.fuel, Fuel::PerRequest(9));
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
        let two = PolicyDocument::from_json(r#"{"limits":{"fuel":1,"fuel-per-request":2}}"#)
            .expect("parses");
        assert!(matches!(
            Policy::from_document(&two, &|_| None),
            Err(DocumentError::TwoFuels)
        ));
    }
}
