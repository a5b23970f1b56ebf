//! sandpipe's own name lookup: a name is checked against the allow-list once, resolved once,
//! and pinned; connections are admitted only to pinned addresses or addresses a rule names.

use std::collections::HashMap;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::{Arc, Mutex, PoisonError};

use super::audit::{AuditEvent, AuditLog, Decision, Via};
use super::tape::{NetReplay, NetTape};
use super::tls::SessionCa;
use super::{NetPolicy, canonical};

/// A connection sandpipe lets through: the address, the name it was reached by (if any), and
/// the rule that admits it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Admitted {
    /// Where the connection goes.
    pub addr: SocketAddr,
    /// The allowed name that resolved to `addr`, if it was reached by name.
    pub name: Option<String>,
    /// The rule, as written (`api.example.com:443`).
    pub rule: String,
}

/// A connection or lookup sandpipe refused, with the reason in one line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{host}{} refused: {reason}", port.map(|p| format!(":{p}")).unwrap_or_default())]
pub struct Refused {
    /// The name or address asked for.
    pub host: String,
    /// The port, where one was asked for (a name lookup has none).
    pub port: Option<u16>,
    /// Why, in one line (no rule matches; resolves only to private addresses; not found).
    pub reason: String,
}

/// The resolver of one session (or one host process serving several): the allow-list, the
/// pins it has made, and the audit log decisions go to.
pub struct Resolver {
    policy: NetPolicy,
    audit: Option<AuditLog>,
    /// The session's network on tape: recorded, or replayed (then no DNS, no connection).
    tape: Option<NetTape>,
    /// The session CA of `--tls-intercept`, when the proxy terminates its tunnels' TLS.
    intercept: Option<Arc<SessionCa>>,
    /// Each allowed name looked up so far, with the addresses it was pinned to.
    names: Mutex<HashMap<String, Vec<IpAddr>>>,
    /// The reverse: each pinned address, with the names that resolved to it.
    addrs: Mutex<HashMap<IpAddr, Vec<String>>>,
}

impl fmt::Debug for Resolver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Resolver")
            .field("policy", &self.policy)
            .finish_non_exhaustive()
    }
}

impl Resolver {
    /// A resolver for `policy`, recording its decisions in `audit`.
    pub fn new(policy: NetPolicy, audit: Option<AuditLog>) -> Self {
        Self {
            policy,
            audit,
            tape: None,
            intercept: None,
            names: Mutex::new(HashMap::new()),
            addrs: Mutex::new(HashMap::new()),
        }
    }

    /// Record the session's network into, or replay it from, `tape`.
    pub fn with_tape(mut self, tape: Option<NetTape>) -> Self {
        self.tape = tape;
        self
    }

    /// Terminate TLS in the proxy's tunnels with `ca` (`--tls-intercept`).
    pub fn with_intercept(mut self, ca: Option<Arc<SessionCa>>) -> Self {
        self.intercept = ca;
        self
    }

    /// The session CA, when the proxy terminates its tunnels' TLS.
    pub fn intercept(&self) -> Option<&Arc<SessionCa>> {
        self.intercept.as_ref()
    }

    /// The tape, if the session's network is recorded or replayed.
    pub fn tape(&self) -> Option<&NetTape> {
        self.tape.as_ref()
    }

    /// The recording being replayed, when this session's network is one.
    pub fn replaying(&self) -> Option<&Arc<NetReplay>> {
        match &self.tape {
            Some(NetTape::Replay(r)) => Some(r),
            _ => None,
        }
    }

    /// The allow-list this resolver enforces.
    pub fn policy(&self) -> &NetPolicy {
        &self.policy
    }

    /// The audit log, if any.
    pub fn audit(&self) -> Option<&AuditLog> {
        self.audit.as_ref()
    }

    /// Look `host` up for the plugin: a name the allow-list admits (on `port`, or on any port
    /// when `None`), resolved once and pinned, or an IP literal a rule names. The addresses are
    /// the only ones [`Resolver::admit`] will let the plugin connect to by that name.
    pub async fn lookup(
        &self,
        host: &str,
        port: Option<u16>,
        via: Via,
    ) -> Result<Vec<IpAddr>, Refused> {
        let result = self.lookup_quietly(host, port).await;
        if let Err(refused) = &result {
            self.report_refusal(refused, None, via);
        }
        result
    }

    async fn lookup_quietly(&self, host: &str, port: Option<u16>) -> Result<Vec<IpAddr>, Refused> {
        let refuse = |reason: String| Refused {
            host: host.to_owned(),
            port,
            reason,
        };
        let literal = host.trim_start_matches('[').trim_end_matches(']');
        if let Ok(ip) = literal.parse::<IpAddr>() {
            let ip = canonical(ip);
            return match self.policy.rule_for_addr(ip, port) {
                Some(_) => Ok(vec![ip]),
                None => Err(refuse("no --allow-net rule names this address".into())),
            };
        }
        let name = host.strip_suffix('.').unwrap_or(host).to_ascii_lowercase();
        if self.policy.rule_for_name(&name, port).is_none() {
            return Err(refuse("no --allow-net rule matches this name".into()));
        }
        if let Some(pinned) = lock(&self.names).get(&name) {
            return Ok(pinned.clone());
        }
        let addrs = if let Some(pin) = self.policy.resolve.iter().find(|p| p.name == name) {
            // The user's own word (`--resolve`): no DNS, no range check.
            pin.addrs.clone()
        } else if let Some(replay) = self.replaying() {
            // A replay has no network: a name resolves to what it resolved to when recorded.
            let recorded = replay.addresses(&name);
            if recorded.is_empty() {
                return Err(refuse(
                    "replay: the recording has no connection to this name".into(),
                ));
            }
            recorded
        } else {
            let answers: Vec<IpAddr> = tokio::net::lookup_host((name.as_str(), 0))
                .await
                .map_err(|e| refuse(format!("the name does not resolve ({e})")))?
                .map(|a| canonical(a.ip()))
                .collect();
            let (kept, dropped): (Vec<IpAddr>, Vec<IpAddr>) = answers
                .into_iter()
                .partition(|ip| is_public(*ip) || self.policy.rule_for_addr(*ip, None).is_some());
            if kept.is_empty() {
                let dropped: Vec<String> = dropped.iter().map(IpAddr::to_string).collect();
                return Err(refuse(format!(
                    "it resolves only to addresses that are not public ({}); name them with --allow-net to allow them",
                    dropped.join(", ")
                )));
            }
            kept
        };
        let mut names = lock(&self.names);
        // Two lookups may race: the first pin wins, so a name never has two answers.
        let pinned = names.entry(name.clone()).or_insert(addrs).clone();
        drop(names);
        let mut by_addr = lock(&self.addrs);
        for ip in &pinned {
            let names = by_addr.entry(*ip).or_default();
            if !names.contains(&name) {
                names.push(name.clone());
            }
        }
        Ok(pinned)
    }

    /// Whether the plugin may connect to `addr`: an address a rule names, or one an allowed
    /// name was pinned to (with a rule admitting that name on this port). `name` is the name
    /// the connection was asked for, when the caller knows it (a proxy's CONNECT, a wasi:http
    /// authority); without it any name pinned to `addr` will do.
    pub fn admit(
        &self,
        addr: SocketAddr,
        name: Option<&str>,
        via: Via,
    ) -> Result<Admitted, Refused> {
        let ip = canonical(addr.ip());
        let port = Some(addr.port());
        match self.admission(addr, name) {
            Some(a) => {
                tracing::info!(
                    "allowed a connection to {}{} by --allow-net {} ({via})",
                    a.name
                        .as_deref()
                        .map(|n| format!("{n} = "))
                        .unwrap_or_default(),
                    a.addr,
                    a.rule
                );
                if let Some(audit) = &self.audit {
                    audit.record(&AuditEvent::Net {
                        decision: Decision::Allow,
                        via,
                        name: a.name.clone(),
                        addr: Some(a.addr.ip().to_string()),
                        port: a.addr.port(),
                        rule: Some(a.rule.clone()),
                        reason: None,
                    });
                }
                Ok(a)
            }
            None => {
                let refused = Refused {
                    host: name.map_or_else(|| ip.to_string(), str::to_owned),
                    port,
                    reason: match name {
                        Some(_) => "the name was not looked up through sandpipe, or no --allow-net rule admits it on this port".into(),
                        None => "no --allow-net rule admits this address and port".into(),
                    },
                };
                self.report_refusal(&refused, Some(ip), via);
                Err(refused)
            }
        }
    }

    /// What [`Resolver::admit`] decides for `addr`, without logging or auditing it: for a
    /// caller that reports the decision it already had admitted (a connection's recording).
    pub fn admission(&self, addr: SocketAddr, name: Option<&str>) -> Option<Admitted> {
        let ip = canonical(addr.ip());
        let addr = SocketAddr::new(ip, addr.port());
        let port = Some(addr.port());
        let by_rule = self.policy.rule_for_addr(ip, port).map(|r| Admitted {
            addr,
            name: name.map(str::to_owned),
            rule: r.to_string(),
        });
        by_rule.or_else(|| {
            let by_addr = lock(&self.addrs);
            let names = by_addr.get(&ip)?;
            names
                .iter()
                .filter(|n| name.is_none_or(|want| want.eq_ignore_ascii_case(n)))
                .find_map(|n| {
                    self.policy.rule_for_name(n, port).map(|r| Admitted {
                        addr,
                        name: Some(n.clone()),
                        rule: r.to_string(),
                    })
                })
        })
    }

    /// Resolve `host` and admit each of its addresses on `port`: what a proxy or an outgoing
    /// HTTP request connects to, in the resolver's order.
    pub async fn targets(&self, host: &str, port: u16, via: Via) -> Result<Vec<Admitted>, Refused> {
        let ips = self.lookup(host, Some(port), via).await?;
        let literal = host.trim_start_matches('[').trim_end_matches(']');
        let name = literal
            .parse::<IpAddr>()
            .is_err()
            .then(|| literal.to_ascii_lowercase());
        ips.into_iter()
            .map(|ip| self.admit(SocketAddr::new(ip, port), name.as_deref(), via))
            .collect()
    }

    fn report_refusal(&self, refused: &Refused, addr: Option<IpAddr>, via: Via) {
        tracing::warn!("{refused} ({via})");
        let name =
            (addr.is_none_or(|a| a.to_string() != refused.host)).then(|| refused.host.clone());
        self.audit_refusal(
            via,
            name,
            addr,
            refused.port.unwrap_or(0),
            refused.reason.clone(),
        );
    }

    /// Write the audit line of a refusal (when there is an audit log): the allow-list's own,
    /// and the proxy's of what it does not serve (a malformed request, SOCKS5 BIND).
    pub(crate) fn audit_refusal(
        &self,
        via: Via,
        name: Option<String>,
        addr: Option<IpAddr>,
        port: u16,
        reason: String,
    ) {
        if let Some(audit) = &self.audit {
            audit.record(&AuditEvent::Net {
                decision: Decision::Refuse,
                via,
                name,
                addr: addr.map(|a| a.to_string()),
                port,
                rule: None,
                reason: Some(reason),
            });
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Whether `ip` is a public unicast address: not loopback, private (RFC 1918, unique local),
/// link-local (which holds cloud metadata endpoints), shared (100.64.0.0/10), unspecified,
/// broadcast, multicast or documentation. A DNS answer outside this set is refused unless a
/// rule names the address (DNS rebinding).
pub fn is_public(ip: IpAddr) -> bool {
    match canonical(ip) {
        IpAddr::V4(v4) => is_public_v4(v4),
        IpAddr::V6(v6) => is_public_v6(v6),
    }
}

fn is_public_v4(ip: Ipv4Addr) -> bool {
    let [a, b, ..] = ip.octets();
    !(ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local()
        || ip.is_unspecified()
        || ip.is_broadcast()
        || ip.is_multicast()
        || ip.is_documentation()
        || a == 0
        || (a == 100 && (64..128).contains(&b))
        || (a == 192 && b == 0 && ip.octets()[2] == 0)
        || (a == 198 && (18..20).contains(&b))
        || a >= 240)
}

fn is_public_v6(ip: Ipv6Addr) -> bool {
    let first = ip.segments()[0];
    !(ip.is_loopback()
        || ip.is_unspecified()
        || ip.is_multicast()
        || (first & 0xfe00) == 0xfc00
        || (first & 0xffc0) == 0xfe80
        || (first == 0x2001 && ip.segments()[1] == 0x0db8)
        || (first == 0x64 && ip.segments()[1] == 0xff9b))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolver(rules: &[&str], pins: &[&str]) -> Resolver {
        let mut policy = NetPolicy::default();
        for r in rules {
            policy = policy.allow(r).expect("rule");
        }
        policy.resolve = pins.iter().map(|p| p.parse().expect("pin")).collect();
        Resolver::new(policy, None)
    }

    fn sa(s: &str) -> SocketAddr {
        s.parse().expect("socket address")
    }

    #[test]
    fn public_ranges() {
        for ip in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.100.100.200",
            "0.0.0.0",
            "255.255.255.255",
            "224.0.0.1",
            "::1",
            "::",
            "fd00:ec2::254",
            "fe80::1",
            "::ffff:127.0.0.1",
            "64:ff9b::7f00:1",
        ] {
            assert!(!is_public(ip.parse().expect("ip")), "{ip}");
        }
        for ip in ["93.184.215.14", "1.1.1.1", "2606:4700::1111"] {
            assert!(is_public(ip.parse().expect("ip")), "{ip}");
        }
    }

    #[tokio::test]
    async fn a_pinned_name_admits_its_addresses_and_nothing_else() {
        let r = resolver(&["api.test:8443"], &["api.test=127.0.0.1"]);
        let ips = r
            .lookup("API.test.", None, Via::WasiSockets)
            .await
            .expect("lookup");
        assert_eq!(ips, ["127.0.0.1".parse::<IpAddr>().expect("ip")]);
        let a = r
            .admit(sa("127.0.0.1:8443"), None, Via::WasiSockets)
            .expect("admitted");
        assert_eq!(
            (a.name.as_deref(), a.rule.as_str()),
            (Some("api.test"), "api.test:8443")
        );
        // Another port of the same name, and another address, are refused.
        assert!(r.admit(sa("127.0.0.1:22"), None, Via::WasiSockets).is_err());
        assert!(
            r.admit(sa("127.0.0.2:8443"), None, Via::WasiSockets)
                .is_err()
        );
        // A name the connection claims must be the one that was pinned.
        assert!(
            r.admit(sa("127.0.0.1:8443"), Some("other.test"), Via::Proxy)
                .is_err()
        );
        let t = r
            .targets("api.test", 8443, Via::Proxy)
            .await
            .expect("targets");
        assert_eq!(t.len(), 1);
    }

    #[tokio::test]
    async fn names_off_the_list_and_literals_off_the_list_are_refused() {
        let r = resolver(&["api.test", "10.0.0.0/8:80"], &["api.test=127.0.0.1"]);
        let e = r
            .lookup("evil.test", None, Via::Proxy)
            .await
            .expect_err("refused");
        assert!(e.reason.contains("no --allow-net rule"), "{e}");
        assert!(r.lookup("127.0.0.1", Some(80), Via::Proxy).await.is_err());
        assert!(r.lookup("10.2.3.4", Some(80), Via::Proxy).await.is_ok());
        assert!(r.lookup("10.2.3.4", Some(81), Via::Proxy).await.is_err());
        assert!(r.admit(sa("10.2.3.4:80"), None, Via::WasiSockets).is_ok());
        assert!(
            r.admit(sa("[::ffff:10.2.3.4]:80"), None, Via::WasiSockets)
                .is_ok()
        );
        assert!(r.admit(sa("1.1.1.1:80"), None, Via::WasiSockets).is_err());
    }

    #[tokio::test]
    async fn a_name_the_system_resolves_to_loopback_is_refused_unless_its_address_is_named() {
        // `localhost` is in /etc/hosts on every machine this runs on: DNS-rebinding's shape.
        let r = resolver(&["localhost"], &[]);
        let e = r
            .lookup("localhost", Some(80), Via::Proxy)
            .await
            .expect_err("refused");
        assert!(e.reason.contains("not public"), "{e}");
        let r = resolver(&["localhost", "127.0.0.0/8"], &[]);
        let ips = r
            .lookup("localhost", Some(80), Via::Proxy)
            .await
            .expect("allowed");
        assert!(ips.iter().all(|ip| ip.is_loopback()), "{ips:?}");
    }
}
