//! JWT access tokens: the MCP authorization spec's resource-server profile. `serve` is the
//! resource server; an authorization server the operator runs (Keycloak, Auth0, Entra, …)
//! issues the tokens, and `serve` checks each one against that issuer's public keys (a JWKS
//! file), its issuer (`iss`), its audience (`aud`, which must name this endpoint: RFC 8707)
//! and its times (`exp` required, `nbf` when present, 60 s of leeway for clocks).
//!
//! ```text
//!  Authorization: Bearer JWT ─► header: alg, kid ─► the JWKS key with that kid
//!     (the only key when the token names none; an unknown kid re-reads the file once it
//!      changed, for key rotation)
//!  ─► alg one of the key's (its `alg`, or its type's: RS*/PS* for RSA, ES256/ES384 by curve,
//!     EdDSA) ─► signature ─► iss, aud ∋ resource, exp, nbf, sub ─► principal = sub
//!  anything else ─► 401, WWW-Authenticate: Bearer resource_metadata="…", error="invalid_token"
//! ```
//!
//! Symmetric (`oct`) keys are refused when the file is read: a resource server that holds the
//! issuer's signing secret could mint tokens, and HMAC keys are what the classic algorithm
//! confusion attack swaps in. `none` is never an algorithm. The endpoint publishes what a
//! client needs to find the issuer (RFC 9728) at `/.well-known/oauth-protected-resource`.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};
use std::time::SystemTime;

use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, Jwk, KeyAlgorithm, PublicKeyUse};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};

use crate::error::ServeError;

/// The well-known path of the protected resource's metadata (RFC 9728 §3); the endpoint's own
/// path follows it (`…/mcp`), and the bare path is served too.
pub const METADATA_PATH: &str = "/.well-known/oauth-protected-resource";

/// How JWT access tokens are checked: the issuer's keys, the issuer and the resource (the
/// audience a token must name).
#[derive(Debug)]
pub struct AccessTokens {
    jwks: PathBuf,
    issuer: String,
    /// Given, or set when the endpoint is bound on loopback ([`AccessTokens::bound`]); until
    /// then no token names it.
    resource: OnceLock<String>,
    keys: Mutex<Keys>,
}

/// The keys of the JWKS file as last read.
#[derive(Debug)]
struct Keys {
    keys: Vec<Key>,
    modified: Option<SystemTime>,
}

/// One verification key and the algorithms it may be used with.
struct Key {
    kid: Option<String>,
    algorithms: Vec<Algorithm>,
    key: DecodingKey,
}

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Key")
            .field("kid", &self.kid)
            .field("algorithms", &self.algorithms)
            .finish_non_exhaustive()
    }
}

/// The claims `serve` reads itself; the others are the library's (`exp`, `nbf`, `iss`, `aud`).
#[derive(serde::Deserialize)]
struct Claims {
    /// Optional here so that a token without it is the library's `MissingRequiredClaim`
    /// (required below), not a failure to read the claims.
    sub: Option<String>,
}

impl AccessTokens {
    /// Read the JWKS file `jwks`; tokens must be `issuer`'s and name `resource` (the endpoint's
    /// URL as its clients use it, e.g. `https://mcp.example.com/mcp`) in their audience. Without
    /// `resource`, the endpoint's own URL once it is bound on loopback.
    pub fn load(jwks: &Path, issuer: String, resource: Option<String>) -> Result<Self, ServeError> {
        let keys = read_keys(jwks)?;
        let cell = OnceLock::new();
        if let Some(r) = resource {
            let _ = cell.set(r);
        }
        Ok(AccessTokens {
            jwks: jwks.to_owned(),
            issuer,
            resource: cell,
            keys: Mutex::new(keys),
        })
    }

    /// The endpoint is bound at `addr`: without a resource given, its URL is the resource when
    /// `addr` is loopback; elsewhere clients reach it by a name only the operator knows.
    pub fn bound(&self, addr: std::net::SocketAddr) -> Result<(), ServeError> {
        if self.resource.get().is_some() {
            return Ok(());
        }
        if !addr.ip().is_loopback() {
            return Err(ServeError::AuthOptions(format!(
                "--jwks on {addr} (not loopback) needs --resource: the URL clients reach the endpoint at, which tokens must name in `aud`"
            )));
        }
        let _ = self.resource.set(format!("http://{addr}/mcp"));
        Ok(())
    }

    /// How many keys the file holds.
    pub fn key_count(&self) -> usize {
        self.lock().keys.len()
    }

    /// The issuer tokens must come from.
    pub fn issuer(&self) -> &str {
        &self.issuer
    }

    /// The resource: the audience a token must name, and the metadata's `resource`.
    pub fn resource(&self) -> &str {
        self.resource.get().map_or("", String::as_str)
    }

    /// The principal (`sub`) of a valid `token`, or why it is not valid (ASCII, without
    /// quotes: it goes into `WWW-Authenticate`'s `error_description`).
    pub fn principal(&self, token: &str) -> Result<String, String> {
        let header = jsonwebtoken::decode_header(token)
            .map_err(|e| format!("not a signed JWT ({})", describe(&e)))?;
        let kid = header.kid.as_deref();
        let (algorithms, key) = match self.find(kid) {
            Some(found) => found,
            None => {
                self.reload_if_changed();
                self.find(kid).ok_or_else(|| match kid {
                    Some(kid) => format!("no key in the JWKS has kid {}", printable(kid)),
                    None => "the token names no kid and the JWKS has more than one key".into(),
                })?
            }
        };
        if !algorithms.contains(&header.alg) {
            return Err(format!(
                "alg {:?} is not one its key may be used with",
                header.alg
            ));
        }
        let mut validation = Validation::new(header.alg);
        validation.set_issuer(&[&self.issuer]);
        validation.set_audience(&[self.resource()]);
        validation.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
        validation.validate_nbf = true;
        let data =
            jsonwebtoken::decode::<Claims>(token, &key, &validation).map_err(|e| describe(&e))?;
        data.claims
            .sub
            .ok_or_else(|| "the token has no sub claim".to_owned())
    }

    /// The key for `kid` and its algorithms (cloned out of the lock).
    fn find(&self, kid: Option<&str>) -> Option<(Vec<Algorithm>, DecodingKey)> {
        let keys = self.lock();
        let key = match kid {
            Some(kid) => keys.keys.iter().find(|k| k.kid.as_deref() == Some(kid)),
            None if keys.keys.len() == 1 => keys.keys.first(),
            None => None,
        }?;
        Some((key.algorithms.clone(), key.key.clone()))
    }

    /// Read the file again if it changed since it was read (a rotated key); a file that no
    /// longer reads keeps the keys there were.
    fn reload_if_changed(&self) {
        let modified = std::fs::metadata(&self.jwks)
            .and_then(|m| m.modified())
            .ok();
        let mut keys = self.lock();
        if modified.is_none() || modified == keys.modified {
            return;
        }
        match read_keys(&self.jwks) {
            Ok(fresh) => {
                tracing::info!(keys = fresh.keys.len(), "re-read {}", self.jwks.display());
                *keys = fresh;
            }
            Err(e) => {
                tracing::warn!("{e}; keeping the keys read before");
                keys.modified = modified;
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Keys> {
        self.keys
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The protected resource's metadata (RFC 9728 §2): the resource, its authorization
    /// server, and that tokens come in the `Authorization` header only.
    pub fn metadata(&self) -> serde_json::Value {
        serde_json::json!({
            "resource": self.resource(),
            "authorization_servers": [self.issuer],
            "bearer_methods_supported": ["header"],
            "resource_name": "sandpipe serve",
        })
    }

    /// Where the metadata is: the well-known path put between the resource's authority and
    /// its path (RFC 9728 §3.1).
    pub fn metadata_url(&self) -> String {
        let (origin, path) = split_origin(self.resource());
        format!("{origin}{METADATA_PATH}{path}")
    }
}

/// `scheme://authority` and the path (with its query) of a URL.
fn split_origin(url: &str) -> (&str, &str) {
    let after_scheme = url.find("://").map_or(0, |i| i + 3);
    match url[after_scheme..].find('/') {
        Some(i) => url.split_at(after_scheme + i),
        None => (url, ""),
    }
}

/// A kid as it may appear in a message: printable ASCII without quotes or backslashes, at
/// most 64 characters.
fn printable(s: &str) -> String {
    s.chars()
        .filter(|c| c.is_ascii_graphic() && *c != '"' && *c != '\\')
        .take(64)
        .collect()
}

/// What is wrong with a token, in the words of a `WWW-Authenticate` description.
fn describe(e: &jsonwebtoken::errors::Error) -> String {
    use jsonwebtoken::errors::ErrorKind as K;
    match e.kind() {
        K::ExpiredSignature => "the token has expired".into(),
        K::ImmatureSignature => "the token is not valid yet (nbf)".into(),
        K::InvalidAudience => "the token is not for this resource (aud)".into(),
        K::InvalidIssuer => "the token is not from the issuer (iss)".into(),
        K::InvalidSignature => "the signature does not verify".into(),
        K::InvalidAlgorithm | K::MissingAlgorithm => "the algorithm does not fit the key".into(),
        K::MissingRequiredClaim(c) => format!("the token has no {} claim", printable(c)),
        K::InvalidClaimFormat(c) => format!("the {} claim has the wrong type", printable(c)),
        K::Json(_) | K::Utf8(_) | K::Base64(_) | K::InvalidToken => "malformed".into(),
        _ => "invalid".into(),
    }
}

/// Read and check a JWKS file: every key public, none symmetric.
fn read_keys(path: &Path) -> Result<Keys, ServeError> {
    let bad = |reason: String| ServeError::Jwks {
        path: path.to_owned(),
        reason,
    };
    let modified = std::fs::metadata(path).and_then(|m| m.modified()).ok();
    let text = std::fs::read_to_string(path).map_err(|e| bad(e.to_string()))?;
    let set: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| bad(format!("not JSON: {e}")))?;
    let entries = set
        .get("keys")
        .and_then(serde_json::Value::as_array)
        .ok_or_else(|| bad("not a JWK Set: no `keys` array".into()))?;
    let mut keys = Vec::new();
    for (i, entry) in entries.iter().enumerate() {
        let jwk: Jwk =
            serde_json::from_value(entry.clone()).map_err(|e| bad(format!("key {i}: {e}")))?;
        if jwk.common.public_key_use == Some(PublicKeyUse::Encryption) {
            continue;
        }
        let algorithms = algorithms(&jwk).map_err(|reason| bad(format!("key {i}: {reason}")))?;
        let key = DecodingKey::from_jwk(&jwk).map_err(|e| bad(format!("key {i}: {e}")))?;
        keys.push(Key {
            kid: jwk.common.key_id.clone(),
            algorithms,
            key,
        });
    }
    if keys.is_empty() {
        return Err(bad("no signing key: no token could be valid".into()));
    }
    Ok(Keys { keys, modified })
}

/// The algorithms a key may verify: its own `alg` when it names one, else every one its type
/// and curve fit.
fn algorithms(jwk: &Jwk) -> Result<Vec<Algorithm>, String> {
    use Algorithm as A;
    let by_type = match &jwk.algorithm {
        AlgorithmParameters::OctetKey(_) => {
            return Err("a symmetric (oct) key: a resource server holds public keys only".into());
        }
        AlgorithmParameters::RSA(_) => {
            vec![A::RS256, A::RS384, A::RS512, A::PS256, A::PS384, A::PS512]
        }
        AlgorithmParameters::EllipticCurve(p) => match p.curve {
            EllipticCurve::P256 => vec![A::ES256],
            EllipticCurve::P384 => vec![A::ES384],
            ref other => return Err(format!("curve {other:?} is not supported")),
        },
        AlgorithmParameters::OctetKeyPair(p) => match p.curve {
            EllipticCurve::Ed25519 => vec![A::EdDSA],
            ref other => return Err(format!("curve {other:?} is not supported")),
        },
    };
    match jwk.common.key_algorithm {
        None => Ok(by_type),
        Some(alg) => {
            let named = match alg {
                KeyAlgorithm::RS256 => A::RS256,
                KeyAlgorithm::RS384 => A::RS384,
                KeyAlgorithm::RS512 => A::RS512,
                KeyAlgorithm::PS256 => A::PS256,
                KeyAlgorithm::PS384 => A::PS384,
                KeyAlgorithm::PS512 => A::PS512,
                KeyAlgorithm::ES256 => A::ES256,
                KeyAlgorithm::ES384 => A::ES384,
                KeyAlgorithm::EdDSA => A::EdDSA,
                other => return Err(format!("alg {other:?} is not a signature algorithm")),
            };
            if by_type.contains(&named) {
                Ok(vec![named])
            } else {
                Err(format!("alg {named:?} does not fit the key's type"))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine as _;
    use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;

    const ISSUER: &str = "https://issuer.test";
    const RESOURCE: &str = "http://127.0.0.1:8080/mcp";

    /// A P-256 key pair of rcgen's (ring), as an encoding key and its public JWK.
    fn es256(kid: &str) -> (jsonwebtoken::EncodingKey, serde_json::Value) {
        let pair = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).expect("key");
        let point = pair.public_key_raw();
        assert_eq!(point.len(), 65, "an uncompressed point");
        let jwk = serde_json::json!({
            "kty": "EC", "crv": "P-256", "kid": kid, "use": "sig",
            "x": B64.encode(&point[1..33]), "y": B64.encode(&point[33..]),
        });
        let encoding = jsonwebtoken::EncodingKey::from_ec_der(&pair.serialize_der());
        (encoding, jwk)
    }

    fn now() -> u64 {
        jsonwebtoken::get_current_timestamp()
    }

    fn sign(
        key: &jsonwebtoken::EncodingKey,
        kid: Option<&str>,
        claims: serde_json::Value,
    ) -> String {
        let mut header = jsonwebtoken::Header::new(Algorithm::ES256);
        header.kid = kid.map(str::to_owned);
        jsonwebtoken::encode(&header, &claims, key).expect("signs")
    }

    fn good(sub: &str) -> serde_json::Value {
        serde_json::json!({"sub": sub, "iss": ISSUER, "aud": RESOURCE, "exp": now() + 300})
    }

    fn tokens(dir: &Path, keys: &[serde_json::Value]) -> AccessTokens {
        let path = dir.join("jwks.json");
        std::fs::write(&path, serde_json::json!({ "keys": keys }).to_string()).expect("write");
        AccessTokens::load(&path, ISSUER.into(), Some(RESOURCE.into())).expect("loads")
    }

    #[test]
    fn a_valid_token_names_its_subject_and_every_wrong_one_says_why() {
        let dir = tempfile::tempdir().expect("dir");
        let (key, jwk) = es256("k1");
        let (other, _) = es256("k1");
        let t = tokens(dir.path(), &[jwk]);
        assert_eq!(
            t.principal(&sign(&key, Some("k1"), good("alice"))),
            Ok("alice".into())
        );
        // One key: a token without kid is checked against it.
        assert_eq!(
            t.principal(&sign(&key, None, good("bob"))),
            Ok("bob".into())
        );
        let with = |f: &dyn Fn(&mut serde_json::Value)| {
            let mut c = good("alice");
            f(&mut c);
            t.principal(&sign(&key, Some("k1"), c))
                .expect_err("refused")
        };
        assert_eq!(
            with(&|c| c["exp"] = (now() - 3600).into()),
            "the token has expired"
        );
        assert_eq!(
            with(&|c| c["aud"] = "http://elsewhere/mcp".into()),
            "the token is not for this resource (aud)"
        );
        assert_eq!(
            with(&|c| c["iss"] = "https://evil.test".into()),
            "the token is not from the issuer (iss)"
        );
        assert_eq!(
            with(&|c| c["nbf"] = (now() + 3600).into()),
            "the token is not valid yet (nbf)"
        );
        assert_eq!(
            with(&|c| drop(c.as_object_mut().map(|o| o.remove("sub")))),
            "the token has no sub claim"
        );
        assert_eq!(
            with(&|c| drop(c.as_object_mut().map(|o| o.remove("exp")))),
            "the token has no exp claim"
        );
        // GHSA-h395-gr6q-cpjc: an nbf of the wrong type is not taken for an absent one.
        assert!(with(&|c| c["nbf"] = "99999999999".into()).contains("nbf"));
        // An audience list naming the resource is fine.
        let mut listed = good("carol");
        listed["aud"] = serde_json::json!(["other", RESOURCE]);
        assert_eq!(
            t.principal(&sign(&key, Some("k1"), listed)),
            Ok("carol".into())
        );
        // Another key with the same kid: the signature does not verify.
        assert_eq!(
            t.principal(&sign(&other, Some("k1"), good("alice"))),
            Err("the signature does not verify".into())
        );
        assert_eq!(
            t.principal(&sign(&key, Some("k9"), good("alice"))),
            Err("no key in the JWKS has kid k9".into())
        );
        assert!(t.principal("not.a.jwt").is_err());
        assert!(t.principal("").is_err());
    }

    #[test]
    fn none_and_hmac_tokens_are_refused() {
        let dir = tempfile::tempdir().expect("dir");
        let (_, jwk) = es256("k1");
        let t = tokens(dir.path(), std::slice::from_ref(&jwk));
        let claims = B64.encode(good("mallory").to_string());
        // alg none, no signature.
        let none = format!("{}.{claims}.", B64.encode(r#"{"alg":"none","kid":"k1"}"#));
        assert!(t.principal(&none).is_err());
        // HS256 keyed with the public key's own bytes: the algorithm confusion attack.
        let hs = jsonwebtoken::encode(
            &jsonwebtoken::Header {
                kid: Some("k1".into()),
                ..jsonwebtoken::Header::new(Algorithm::HS256)
            },
            &good("mallory"),
            &jsonwebtoken::EncodingKey::from_secret(jwk.to_string().as_bytes()),
        )
        .expect("signs");
        assert_eq!(
            t.principal(&hs),
            Err("alg HS256 is not one its key may be used with".into())
        );
        // A JWKS with a symmetric key is refused when read.
        let path = dir.path().join("oct.json");
        std::fs::write(&path, r#"{"keys":[{"kty":"oct","k":"c2VjcmV0"}]}"#).expect("write");
        let err =
            AccessTokens::load(&path, ISSUER.into(), Some(RESOURCE.into())).expect_err("refused");
        assert!(err.to_string().contains("symmetric"), "{err}");
    }

    #[test]
    fn a_rotated_key_is_read_when_a_token_names_it() {
        let dir = tempfile::tempdir().expect("dir");
        let (old, old_jwk) = es256("old");
        let (new, new_jwk) = es256("new");
        let t = tokens(dir.path(), std::slice::from_ref(&old_jwk));
        assert!(t.principal(&sign(&new, Some("new"), good("a"))).is_err());
        let path = dir.path().join("jwks.json");
        std::fs::write(
            &path,
            serde_json::json!({ "keys": [old_jwk, new_jwk] }).to_string(),
        )
        .expect("write");
        // The file's time may not have moved on a coarse clock: make it move.
        let later = SystemTime::now() + std::time::Duration::from_secs(5);
        std::fs::File::options()
            .write(true)
            .open(&path)
            .and_then(|f| f.set_modified(later))
            .expect("touch");
        assert_eq!(
            t.principal(&sign(&new, Some("new"), good("a"))),
            Ok("a".into())
        );
        assert_eq!(
            t.principal(&sign(&old, Some("old"), good("b"))),
            Ok("b".into())
        );
        assert_eq!(t.key_count(), 2);
    }

    #[test]
    fn the_metadata_sits_between_the_authority_and_the_path() {
        let dir = tempfile::tempdir().expect("dir");
        let (_, jwk) = es256("k1");
        let t = tokens(dir.path(), &[jwk]);
        assert_eq!(
            t.metadata_url(),
            "http://127.0.0.1:8080/.well-known/oauth-protected-resource/mcp"
        );
        assert_eq!(t.metadata()["resource"], RESOURCE);
        assert_eq!(t.metadata()["authorization_servers"][0], ISSUER);
        assert_eq!(split_origin("https://h.example"), ("https://h.example", ""));
    }
}
