//! The network allow-list: which hosts and ports a plugin may reach, wasm and native alike, and
//! the resolver that checks each name once and pins it to the addresses it resolved to.
//!
//! ```text
//!   --allow-net RULE  ─► NetPolicy ─► Resolver ─┬─ wasi:sockets  (name lookup, socket_addr_check)
//!   --resolve N=ADDR                            ├─ wasi:http     (authority and port; --http-header)
//!   [net] allow = []                            └─ native proxy  (HTTP CONNECT, SOCKS5)
//! ```
//!
//! A rule is `HOST[:PORT]`: a name (`api.example.com`), a wildcard (`*.example.com`, which
//! matches names below `example.com` but not `example.com` itself; `*` alone matches any name),
//! an IP literal (`203.0.113.7`, `[2001:db8::1]:443`) or a CIDR range (`10.0.0.0/8`,
//! `[fd00::/8]:443`). Without a port every port is allowed. Names are compared in lower case,
//! without a trailing dot.
//!
//! Names are resolved by sandpipe, never by the plugin: the [`Resolver`] looks a name up once
//! (the system resolver, or a `--resolve` pin), and a connection is admitted only to an address
//! that an allowed name resolved to, or that an IP or CIDR rule names. A name whose DNS answer
//! is loopback, private, link-local or otherwise not public is refused (DNS rebinding) unless a
//! rule names that address or range; a `--resolve` pin is the user's own word and is trusted.
//!
//! A session's network can be on tape ([`NetTape`]): each admitted `wasi:http` exchange
//! written into its recording, or, in a replay, served from the recording with no network
//! at all (the resolver then answers names from the recording and never asks DNS).
//!
//! What this does not do: filter by URL path or method (only names, addresses and ports), or
//! UDP (no plugin gets UDP; DNS goes through sandpipe's resolver).

mod audit;
mod intercept;
mod proxy;
mod resolve;
mod tape;
mod tls;

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

use ipnet::IpNet;

pub(crate) use audit::limit_of;
pub use audit::{AuditEvent, AuditLog, Decision, PrincipalSlot, Via};
pub(crate) use intercept::{HyperIo, header_list};
pub use proxy::{MAX_CONNECTIONS, MAX_HEAD_BYTES, MAX_HEADERS, ProxyHandle, spawn as spawn_proxy};
pub use resolve::{Admitted, Refused, Resolver, is_public};
pub(crate) use tape::{AnswerHead, answer_head, reason_phrase};
pub use tape::{
    ByteRead, ByteTape, NetProblem, NetReplay, NetSink, NetTape, Played, PlayedBytes, Strayed,
};
pub use tls::{SessionCa, SessionCaError, VALIDITY as SESSION_CA_VALIDITY, client_config};

/// One allow-list entry: a host pattern and, optionally, a port.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct NetRule {
    host: HostPattern,
    port: Option<u16>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum HostPattern {
    /// Exactly this name (lower case, no trailing dot).
    Name(String),
    /// Any name ending in this suffix, which starts with a dot (`*.example.com`).
    Below(String),
    /// Any name at all (`*`).
    AnyName,
    /// An address or a range (a literal is a /32 or /128).
    Addresses(IpNet),
}

/// Why a rule, a pin or a header did not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum NetSpecError {
    /// The text is not `HOST[:PORT]`.
    #[error("`{spec}` is not HOST[:PORT] ({why})")]
    Rule { spec: String, why: &'static str },
    /// The text is not `NAME=ADDR[,ADDR...]`.
    #[error("`{spec}` is not NAME=ADDR[,ADDR...] ({why})")]
    Pin { spec: String, why: &'static str },
    /// The text is not `HOST:NAME=VALUE`.
    #[error("`{spec}` is not HOST:NAME=env:VAR ({why})")]
    Header { spec: String, why: &'static str },
}

impl NetRule {
    /// Whether this rule admits a connection to `name` (already lower case) on `port`; `None`
    /// asks whether any port of the name is allowed (a name lookup, which has no port yet).
    pub fn matches_name(&self, name: &str, port: Option<u16>) -> bool {
        self.port_ok(port)
            && match &self.host {
                HostPattern::Name(n) => n == name,
                HostPattern::Below(suffix) => {
                    name.len() > suffix.len() && name.ends_with(suffix.as_str())
                }
                HostPattern::AnyName => true,
                HostPattern::Addresses(_) => false,
            }
    }

    /// Whether this rule names `addr` itself (an IP literal or a range holding it) on `port`.
    pub fn matches_addr(&self, addr: IpAddr, port: Option<u16>) -> bool {
        self.port_ok(port)
            && match &self.host {
                HostPattern::Addresses(net) => net.contains(&canonical(addr)),
                _ => false,
            }
    }

    fn port_ok(&self, port: Option<u16>) -> bool {
        match (self.port, port) {
            (Some(want), Some(got)) => want == got,
            _ => true,
        }
    }
}

impl FromStr for NetRule {
    type Err = NetSpecError;

    fn from_str(spec: &str) -> Result<Self, Self::Err> {
        let bad = |why| NetSpecError::Rule {
            spec: spec.to_owned(),
            why,
        };
        let (host, port) = if let Some(rest) = spec.strip_prefix('[') {
            let (inside, after) = rest.split_once(']').ok_or_else(|| bad("no closing `]`"))?;
            let port = match after {
                "" => None,
                p => Some(p.strip_prefix(':').ok_or_else(|| bad("text after `]`"))?),
            };
            (inside, port)
        } else if spec.matches(':').count() > 1 {
            // A bare IPv6 address or range: no port (bracket it to give one).
            (spec, None)
        } else {
            match spec.rsplit_once(':') {
                Some((h, p)) => (h, Some(p)),
                None => (spec, None),
            }
        };
        let port = match port {
            None => None,
            Some(p) => Some(
                p.parse::<u16>()
                    .ok()
                    .filter(|p| *p != 0)
                    .ok_or_else(|| bad("the port is not 1-65535"))?,
            ),
        };
        if host.is_empty() {
            return Err(bad("no host"));
        }
        let host = if let Ok(net) = host.parse::<IpNet>() {
            HostPattern::Addresses(net.trunc())
        } else if let Ok(ip) = host.parse::<IpAddr>() {
            HostPattern::Addresses(IpNet::from(canonical(ip)))
        } else if host == "*" {
            HostPattern::AnyName
        } else if let Some(below) = host.strip_prefix("*.") {
            HostPattern::Below(format!(".{}", check_name(below).map_err(bad)?))
        } else {
            HostPattern::Name(check_name(host).map_err(bad)?)
        };
        Ok(Self { host, port })
    }
}

impl fmt::Display for NetRule {
    /// The rule as `--allow-net` takes it (`api.example.com:443`, `*.example.com`,
    /// `10.0.0.0/8`, `[::1]:8080`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let host = match &self.host {
            HostPattern::Name(n) => n.clone(),
            HostPattern::Below(suffix) => format!("*{suffix}"),
            HostPattern::AnyName => "*".to_owned(),
            HostPattern::Addresses(net) if net.prefix_len() == net.max_prefix_len() => {
                net.addr().to_string()
            }
            HostPattern::Addresses(net) => net.to_string(),
        };
        let v6 = matches!(&self.host, HostPattern::Addresses(IpNet::V6(_)));
        match (self.port, v6) {
            (Some(p), true) => write!(f, "[{host}]:{p}"),
            (Some(p), false) => write!(f, "{host}:{p}"),
            (None, _) => f.write_str(&host),
        }
    }
}

impl serde::Serialize for NetRule {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// A name, lower-cased, without its trailing dot, checked to be a host name.
fn check_name(name: &str) -> Result<String, &'static str> {
    let name = name.strip_suffix('.').unwrap_or(name).to_ascii_lowercase();
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && l.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    };
    if name.is_empty() || name.len() > 253 || !name.split('.').all(label_ok) {
        return Err("not a host name, an address or a range");
    }
    Ok(name)
}

/// An IPv4-mapped IPv6 address as the IPv4 address it carries: one address, one rule.
pub(crate) fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6
            .to_ipv4_mapped()
            .map(IpAddr::V4)
            .unwrap_or(IpAddr::V6(v6)),
        v4 => v4,
    }
}

/// A name pinned to addresses without DNS (`--resolve NAME=ADDR[,ADDR...]`, as curl's
/// `--resolve`): the plugin's lookups of `name` get exactly these, private or not.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Pin {
    /// The name, lower case.
    pub name: String,
    /// Its addresses, in order.
    pub addrs: Vec<IpAddr>,
}

impl FromStr for Pin {
    type Err = NetSpecError;

    fn from_str(spec: &str) -> Result<Self, Self::Err> {
        let bad = |why| NetSpecError::Pin {
            spec: spec.to_owned(),
            why,
        };
        let (name, addrs) = spec.split_once('=').ok_or_else(|| bad("no `=`"))?;
        let name = check_name(name).map_err(bad)?;
        let addrs = addrs
            .split(',')
            .map(|a| {
                let a = a.trim_start_matches('[').trim_end_matches(']');
                a.parse::<IpAddr>()
                    .map(canonical)
                    .map_err(|_| bad("an address is not an IP address"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self { name, addrs })
    }
}

impl fmt::Display for Pin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let addrs: Vec<String> = self.addrs.iter().map(IpAddr::to_string).collect();
        write!(f, "{}={}", self.name, addrs.join(","))
    }
}

impl serde::Serialize for Pin {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// A header sandpipe adds to every outgoing `wasi:http` request to `host`, with a value the
/// guest never sees (`--http-header HOST:NAME=env:VAR` reads it from sandpipe's own
/// environment). A header of the same name that the guest set is replaced.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct HttpHeader {
    /// The host the header goes to (lower case; the request's authority without its port).
    pub host: String,
    /// The header's name.
    pub name: String,
    /// Its value: a secret, never printed (`Debug` and `Display` show `<redacted>`).
    pub value: String,
    /// The variable the value was read from (`env:VAR`), when it was.
    pub var: Option<String>,
}

impl HttpHeader {
    /// Parse `HOST:NAME=env:VAR`, reading `VAR` through `env` (sandpipe's own environment).
    /// A literal value is refused: a secret on the command line is in every process listing.
    pub fn parse(
        spec: &str,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<HttpHeader, NetSpecError> {
        let bad = |why| NetSpecError::Header {
            spec: spec.to_owned(),
            why,
        };
        let (host, rest) = spec.split_once(':').ok_or_else(|| bad("no `:`"))?;
        let (name, source) = rest.split_once('=').ok_or_else(|| bad("no `=`"))?;
        let host = check_name(host)
            .or_else(|e| {
                host.parse::<IpAddr>()
                    .map(|ip| ip.to_string())
                    .map_err(|_| e)
            })
            .map_err(bad)?;
        if name.is_empty() || !name.bytes().all(|b| b.is_ascii_graphic() && b != b':') {
            return Err(bad("not a header name"));
        }
        let var = source
            .strip_prefix("env:")
            .ok_or_else(|| bad("the value must be env:VAR"))?;
        let value = env(var).ok_or_else(|| bad("the variable is not set"))?;
        Ok(HttpHeader {
            host,
            name: name.to_owned(),
            value,
            var: Some(var.to_owned()),
        })
    }

    /// The header as `--http-header` takes it, `HOST:NAME=env:VAR`; a value given directly
    /// (not read from a variable) is shown as `<redacted>`.
    pub fn spec(&self) -> String {
        match &self.var {
            Some(var) => format!("{}:{}=env:{var}", self.host, self.name),
            None => self.to_string(),
        }
    }
}

impl fmt::Debug for HttpHeader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self}")
    }
}

impl fmt::Display for HttpHeader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}=<redacted>", self.host, self.name)
    }
}

impl serde::Serialize for HttpHeader {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// What a plugin may reach on the network. Empty (the default): nothing at all, no name
/// lookup, no connection, no socket of any kind.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct NetPolicy {
    /// The allow-list (`--allow-net`).
    pub allow: Vec<NetRule>,
    /// Names pinned to addresses without DNS (`--resolve`).
    pub resolve: Vec<Pin>,
    /// Headers added to a wasm plugin's `wasi:http` requests, and under `tls_intercept` to a
    /// native plugin's requests in its tunnels (`--http-header`).
    pub http_headers: Vec<HttpHeader>,
    /// Native plugins: terminate TLS in the proxy's tunnels with a CA made for the session,
    /// which the plugin is told to trust, so that their requests are read, recorded, replayed
    /// and given `http_headers` (`--tls-intercept`). Wasm plugins are unaffected: sandpipe
    /// does their TLS already.
    pub tls_intercept: bool,
}

impl NetPolicy {
    /// No network at all: the allow-list is empty.
    pub fn is_closed(&self) -> bool {
        self.allow.is_empty()
    }

    /// Allow `rule` (see [`NetRule`] for the syntax).
    pub fn allow(mut self, rule: &str) -> Result<Self, NetSpecError> {
        self.allow.push(rule.parse()?);
        Ok(self)
    }

    /// Pin `name` to `addrs` (see [`Pin`]).
    pub fn resolve(mut self, name: &str, addrs: &[IpAddr]) -> Result<Self, NetSpecError> {
        let pin = Pin {
            name: check_name(name).map_err(|why| NetSpecError::Pin {
                spec: name.to_owned(),
                why,
            })?,
            addrs: addrs.iter().copied().map(canonical).collect(),
        };
        self.resolve.push(pin);
        Ok(self)
    }

    /// Add a header to every `wasi:http` request to `host`.
    pub fn http_header(
        mut self,
        host: &str,
        name: impl Into<String>,
        value: impl Into<String>,
    ) -> Self {
        self.http_headers.push(HttpHeader {
            host: host.to_ascii_lowercase(),
            name: name.into(),
            value: value.into(),
            var: None,
        });
        self
    }

    /// The headers for a request to `host`.
    pub fn headers_for<'a>(&'a self, host: &'a str) -> impl Iterator<Item = &'a HttpHeader> {
        self.http_headers
            .iter()
            .filter(move |h| h.host.eq_ignore_ascii_case(host))
    }

    /// The first rule admitting `name` on `port`.
    pub fn rule_for_name(&self, name: &str, port: Option<u16>) -> Option<&NetRule> {
        self.allow.iter().find(|r| r.matches_name(name, port))
    }

    /// The first rule naming `addr` itself on `port`.
    pub fn rule_for_addr(&self, addr: IpAddr, port: Option<u16>) -> Option<&NetRule> {
        let addr = canonical(addr);
        self.allow.iter().find(|r| r.matches_addr(addr, port))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(s: &str) -> NetRule {
        s.parse().unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    #[test]
    fn rules_parse_and_print_back() {
        for s in [
            "api.example.com",
            "api.example.com:443",
            "*.example.com",
            "*:443",
            "*",
            "203.0.113.7",
            "203.0.113.7:80",
            "10.0.0.0/8",
            "10.0.0.0/8:443",
            "2001:db8::1",
            "[2001:db8::1]:443",
            "fd00::/8",
            "[fd00::/8]:443",
        ] {
            assert_eq!(rule(s).to_string(), s, "{s}");
        }
        assert_eq!(
            rule("API.Example.COM.:8080").to_string(),
            "api.example.com:8080"
        );
        assert_eq!(rule("10.1.2.3/8").to_string(), "10.0.0.0/8");
        assert_eq!(rule("[::ffff:127.0.0.1]").to_string(), "127.0.0.1");
    }

    #[test]
    fn bad_rules_are_named() {
        for s in [
            "",
            ":80",
            "a.com:0",
            "a.com:65536",
            "a.com:http",
            "a b.com",
            "[::1",
            "[::1]x",
            "*.",
            "a..com",
            "http://a.com",
        ] {
            assert!(s.parse::<NetRule>().is_err(), "{s} parsed");
        }
    }

    #[test]
    fn names_wildcards_and_ports_match() {
        let r = rule("*.example.com:443");
        assert!(r.matches_name("a.example.com", Some(443)));
        assert!(r.matches_name("a.b.example.com", None));
        assert!(!r.matches_name("example.com", Some(443)));
        assert!(!r.matches_name("badexample.com", Some(443)));
        assert!(!r.matches_name("a.example.com", Some(80)));
        let r = rule("example.com");
        assert!(r.matches_name("example.com", Some(1)));
        assert!(!r.matches_name("a.example.com", Some(1)));
        assert!(!r.matches_addr("127.0.0.1".parse().expect("ip"), None));
    }

    #[test]
    fn addresses_and_ranges_match() {
        let r = rule("10.0.0.0/8:443");
        assert!(r.matches_addr("10.9.8.7".parse().expect("ip"), Some(443)));
        assert!(!r.matches_addr("11.0.0.1".parse().expect("ip"), Some(443)));
        assert!(!r.matches_addr("10.0.0.1".parse().expect("ip"), Some(80)));
        assert!(!r.matches_name("10.0.0.1", Some(443)));
        let mapped: IpAddr = "::ffff:10.1.1.1".parse().expect("ip");
        assert!(r.matches_addr(mapped, Some(443)));
        assert!(rule("::1").matches_addr("::1".parse().expect("ip"), Some(9)));
    }

    #[test]
    fn pins_parse() {
        let p: Pin = "Api.Test=127.0.0.1,[::1]".parse().expect("pin");
        assert_eq!(p.name, "api.test");
        assert_eq!(p.to_string(), "api.test=127.0.0.1,::1");
        assert!("api.test".parse::<Pin>().is_err());
        assert!("api.test=nope".parse::<Pin>().is_err());
    }

    #[test]
    fn headers_come_from_the_environment_and_never_print() {
        let env = |v: &str| (v == "TOKEN").then(|| "s3cret".to_owned());
        let h = HttpHeader::parse("api.test:Authorization=env:TOKEN", env).expect("header");
        assert_eq!(
            (h.host.as_str(), h.name.as_str()),
            ("api.test", "Authorization")
        );
        assert_eq!(h.value, "s3cret");
        assert!(!format!("{h:?} {h}").contains("s3cret"));
        assert!(HttpHeader::parse("api.test:Authorization=s3cret", env).is_err());
        assert!(HttpHeader::parse("api.test:Authorization=env:MISSING", env).is_err());
        let policy = NetPolicy::default().http_header("API.test", "X-Key", "v");
        assert_eq!(policy.headers_for("api.TEST").count(), 1);
        assert_eq!(policy.headers_for("other.test").count(), 0);
    }
}
