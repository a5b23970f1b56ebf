//! Who gets in: the bearer tokens of `--auth-token-file` or the JWT access tokens of `--jwks`,
//! the `Host` and `Origin` checks that stop DNS rebinding, and the per-principal request rate.
//!
//! ```text
//!  request ─► Host allowed? ─ no ─► 403      Origin absent or allowed? ─ no ─► 403
//!          ─► Authorization: Bearer T ─► Auth::principal(T) ─ refused ─► 401 WWW-Authenticate
//!          ─► Rates::take(principal, now) ─ empty ─► 429 Retry-After
//! ```

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::jwt::AccessTokens;
use crate::error::ServeError;

/// How `serve` tells who a request is from.
#[derive(Debug, Clone, Default)]
pub enum Auth {
    /// Nobody is asked: every client is `anonymous`, and only a loopback address is served.
    #[default]
    None,
    /// `--auth-token-file`: opaque bearer tokens, each a principal's.
    Tokens(Tokens),
    /// `--jwks`: JWT access tokens of one issuer for this resource; the principal is `sub`.
    Jwt(Arc<AccessTokens>),
}

/// Why a request's credentials were refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refused {
    /// No `Authorization: Bearer` header.
    Missing,
    /// A bearer token that is not valid, and why (for JWTs; an opaque token is only wrong).
    Invalid(Option<String>),
}

impl Auth {
    /// Whether requests are authenticated (so a principal is someone, not a connection).
    pub fn identifies(&self) -> bool {
        !matches!(self, Auth::None)
    }

    /// The principal of a request whose `Authorization` header is `authorization`.
    pub fn principal(&self, authorization: Option<&str>) -> Result<String, Refused> {
        let token = authorization
            .and_then(|a| {
                a.strip_prefix("Bearer ")
                    .or_else(|| a.strip_prefix("bearer "))
            })
            .map(str::trim)
            .filter(|t| !t.is_empty());
        match (self, token) {
            (Auth::None, _) => Ok(ANONYMOUS.to_owned()),
            (_, None) => Err(Refused::Missing),
            (Auth::Tokens(tokens), Some(t)) => tokens
                .principal(t)
                .map(str::to_owned)
                .ok_or(Refused::Invalid(None)),
            (Auth::Jwt(jwt), Some(t)) => {
                jwt.principal(t).map_err(|why| Refused::Invalid(Some(why)))
            }
        }
    }

    /// The `WWW-Authenticate` challenge of a `401` (RFC 6750 §3; with JWTs, RFC 9728 §5.1's
    /// `resource_metadata` so a client can find the issuer).
    pub fn challenge(&self, refused: &Refused) -> String {
        let mut c = match self {
            Auth::Jwt(jwt) => format!("Bearer resource_metadata=\"{}\"", jwt.metadata_url()),
            _ => "Bearer realm=\"sandpipe\"".to_owned(),
        };
        if let Refused::Invalid(why) = refused {
            c.push_str(", error=\"invalid_token\"");
            if let Some(why) = why {
                c.push_str(&format!(", error_description=\"{why}\""));
            }
        }
        c
    }

    /// What the start-up line says of it.
    pub fn describe(&self) -> String {
        match self {
            Auth::None => "none (loopback only; every client is anonymous)".to_owned(),
            Auth::Tokens(t) => format!("bearer tokens ({} principals)", t.count()),
            Auth::Jwt(j) => format!(
                "JWT access tokens of {} for {} ({} keys; the principal is `sub`)",
                j.issuer(),
                j.resource(),
                j.key_count()
            ),
        }
    }
}

/// The principal of every request when nobody is asked.
pub const ANONYMOUS: &str = "anonymous";

/// The principals of a token file: one `PRINCIPAL TOKEN` pair a line, `#` comments and blank
/// lines ignored. A token names one principal; a principal may hold several tokens.
#[derive(Clone)]
pub struct Tokens {
    pairs: Vec<(String, String)>,
}

impl std::fmt::Debug for Tokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The tokens themselves are never printed.
        let names: Vec<&str> = self.pairs.iter().map(|(p, _)| p.as_str()).collect();
        f.debug_struct("Tokens")
            .field("principals", &names)
            .finish()
    }
}

impl Tokens {
    /// Read `path`.
    pub fn load(path: &Path) -> Result<Self, ServeError> {
        let text = std::fs::read_to_string(path).map_err(|source| ServeError::TokenFile {
            path: path.to_owned(),
            source,
        })?;
        Self::parse(&text).map_err(|(line, reason)| ServeError::TokenLine {
            path: path.to_owned(),
            line,
            reason,
        })
    }

    /// Parse a token file's text; a bad line is its number (from 1) and what is wrong.
    pub fn parse(text: &str) -> Result<Self, (usize, String)> {
        let mut pairs: Vec<(String, String)> = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let mut words = line.split_whitespace();
            let (Some(principal), Some(token), None) = (words.next(), words.next(), words.next())
            else {
                return Err((i + 1, "expected `PRINCIPAL TOKEN`".into()));
            };
            if pairs.iter().any(|(_, t)| t == token) {
                return Err((i + 1, format!("this token is already {}'s", principal)));
            }
            pairs.push((principal.to_owned(), token.to_owned()));
        }
        if pairs.is_empty() {
            return Err((0, "no `PRINCIPAL TOKEN` line: nobody could get in".into()));
        }
        Ok(Tokens { pairs })
    }

    /// How many tokens there are.
    pub fn count(&self) -> usize {
        self.pairs.len()
    }

    /// The principal holding `token`. Every token is compared in full, so the time taken
    /// tells nothing about how much of a guess was right.
    pub fn principal(&self, token: &str) -> Option<&str> {
        let mut found = None;
        for (principal, t) in &self.pairs {
            if same(t.as_bytes(), token.as_bytes()) {
                found = Some(principal.as_str());
            }
        }
        found
    }
}

/// Byte strings compared without an early exit.
fn same(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The `Host` names and `Origin`s a request may carry: the bound address, `localhost` and the
/// loopback addresses at its port when it is a loopback one, and those given.
#[derive(Debug, Clone)]
pub struct Hosts {
    hosts: Vec<String>,
    origins: Vec<String>,
}

impl Hosts {
    /// The names allowed for an endpoint bound to `addr`, with `extra_hosts` (`NAME` or
    /// `NAME:PORT`) and `extra_origins` (`scheme://host[:port]`).
    pub fn new(addr: SocketAddr, extra_hosts: &[String], extra_origins: &[String]) -> Self {
        let port = addr.port();
        let mut hosts = vec![match addr {
            SocketAddr::V4(a) => format!("{}:{port}", a.ip()),
            SocketAddr::V6(a) => format!("[{}]:{port}", a.ip()),
        }];
        if addr.ip().is_loopback() {
            for h in ["localhost", "127.0.0.1", "[::1]"] {
                hosts.push(format!("{h}:{port}"));
            }
        }
        for h in extra_hosts {
            let h = h.to_ascii_lowercase();
            if h.contains(':') && !h.ends_with(']') {
                hosts.push(h);
            } else {
                hosts.push(format!("{h}:{port}"));
                hosts.push(h);
            }
        }
        hosts.dedup();
        let mut origins: Vec<String> = hosts.iter().map(|h| format!("http://{h}")).collect();
        origins.extend(
            extra_origins
                .iter()
                .map(|o| o.trim_end_matches('/').to_ascii_lowercase()),
        );
        Hosts { hosts, origins }
    }

    /// Whether a request's `Host` header is one of the endpoint's names (HTTP/1.1 requires
    /// one; a missing one is refused).
    pub fn host_allowed(&self, host: Option<&str>) -> bool {
        host.is_some_and(|h| self.hosts.iter().any(|a| a.eq_ignore_ascii_case(h)))
    }

    /// Whether a request's `Origin` is allowed: absent (not a browser), or one of the
    /// endpoint's own origins or those given.
    pub fn origin_allowed(&self, origin: Option<&str>) -> bool {
        origin.is_none_or(|o| {
            let o = o.trim_end_matches('/');
            self.origins.iter().any(|a| a.eq_ignore_ascii_case(o))
        })
    }
}

/// Requests per minute per principal: a bucket of `per_minute` requests that refills evenly.
#[derive(Debug)]
pub struct Rates {
    per_minute: u32,
    buckets: HashMap<String, Bucket>,
}

#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

impl Rates {
    /// At most `per_minute` requests a minute for each principal (a burst of that many).
    pub fn new(per_minute: u32) -> Self {
        Rates {
            per_minute: per_minute.max(1),
            buckets: HashMap::new(),
        }
    }

    /// Take one request of `principal`'s at `now`; `Err(wait)` when there is none left, with
    /// how long until there is.
    pub fn take(&mut self, principal: &str, now: Instant) -> Result<(), Duration> {
        let cap = f64::from(self.per_minute);
        let per_second = cap / 60.0;
        let b = self.buckets.entry(principal.to_owned()).or_insert(Bucket {
            tokens: cap,
            at: now,
        });
        let elapsed = now.saturating_duration_since(b.at).as_secs_f64();
        b.tokens = (b.tokens + elapsed * per_second).min(cap);
        b.at = now;
        if b.tokens >= 1.0 {
            b.tokens -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64((1.0 - b.tokens) / per_second))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_file_names_principals_and_refuses_bad_lines() {
        let t = Tokens::parse("# team\nalice s3cret\n\nbob  other \n").expect("parses");
        assert_eq!(t.principal("s3cret"), Some("alice"));
        assert_eq!(t.principal("other"), Some("bob"));
        assert_eq!(t.principal("s3cre"), None);
        assert_eq!(t.principal(""), None);
        for (text, line) in [
            ("alice\n", 1),
            ("a t\nb t\n", 2),
            ("a b c\n", 1),
            ("# only\n", 0),
        ] {
            assert_eq!(
                Tokens::parse(text).map(|_| ()).map_err(|e| e.0),
                Err(line),
                "{text:?}"
            );
        }
        assert!(!format!("{t:?}").contains("s3cret"));
    }

    #[test]
    fn hosts_and_origins_are_the_endpoints_own() {
        let addr: SocketAddr = "127.0.0.1:8080".parse().expect("addr");
        let h = Hosts::new(
            addr,
            &["mcp.example.com".into()],
            &["https://app.example.com".into()],
        );
        for ok in [
            "127.0.0.1:8080",
            "localhost:8080",
            "LOCALHOST:8080",
            "mcp.example.com",
        ] {
            assert!(h.host_allowed(Some(ok)), "{ok}");
        }
        for bad in ["evil.test:8080", "127.0.0.1:9090", "localhost"] {
            assert!(!h.host_allowed(Some(bad)), "{bad}");
        }
        assert!(!h.host_allowed(None));
        assert!(h.origin_allowed(None));
        assert!(h.origin_allowed(Some("http://localhost:8080")));
        assert!(h.origin_allowed(Some("https://app.example.com/")));
        assert!(!h.origin_allowed(Some("http://evil.test")));
        assert!(!h.origin_allowed(Some("null")));
    }

    #[test]
    fn the_rate_refills_evenly_and_says_how_long_to_wait() {
        let mut r = Rates::new(2);
        let t0 = Instant::now();
        assert_eq!(r.take("a", t0), Ok(()));
        assert_eq!(r.take("a", t0), Ok(()));
        let wait = r.take("a", t0).expect_err("empty");
        assert_eq!(wait.as_secs(), 30);
        // Another principal has its own bucket.
        assert_eq!(r.take("b", t0), Ok(()));
        assert_eq!(r.take("a", t0 + Duration::from_secs(30)), Ok(()));
    }
}
