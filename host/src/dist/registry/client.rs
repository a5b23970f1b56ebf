//! A small blocking client for the OCI distribution API: manifests and blobs by digest,
//! monolithic blob uploads, the referrers API, and Basic or Bearer-token authentication.
//!
//! Loopback registries are spoken to over plain HTTP, others over HTTPS (rustls, webpki roots)
//! unless named in [`ClientOptions::insecure_registries`].

use std::collections::HashMap;
use std::io::Read;
use std::sync::Mutex;
use std::time::Duration;

use base64::Engine as _;
use ureq::Agent;
use ureq::http::Response;

use super::{Credentials, Descriptor, Reference, RegistryError, sha256_digest};

/// How a [`Client`] reaches registries.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct ClientOptions {
    /// Registries (`HOST[:PORT]`) spoken to over plain HTTP although not on loopback.
    pub insecure_registries: Vec<String>,
    /// Credentials by registry.
    pub credentials: Credentials,
}

impl ClientOptions {
    /// Options with `credentials` and no insecure registries.
    pub fn new(credentials: Credentials) -> ClientOptions {
        ClientOptions {
            insecure_registries: Vec::new(),
            credentials,
        }
    }
}

/// A registry client. Cheap to keep; remembers the tokens it was given.
#[derive(Debug)]
pub struct Client {
    agent: Agent,
    options: ClientOptions,
    /// The Authorization header that worked, by registry and scope.
    auth: Mutex<HashMap<String, String>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Method {
    Get,
    Head,
    Post,
    Put,
}

impl Method {
    fn name(self) -> &'static str {
        match self {
            Method::Get => "GET",
            Method::Head => "HEAD",
            Method::Post => "POST",
            Method::Put => "PUT",
        }
    }
}

/// What a request needs from the registry: read, or read and write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Access {
    Pull,
    Push,
}

const MANIFEST_ACCEPT: &str = "application/vnd.oci.image.manifest.v1+json, \
     application/vnd.docker.distribution.manifest.v2+json";

impl Client {
    /// A client with `options`.
    pub fn new(options: ClientOptions) -> Client {
        let agent: Agent = Agent::config_builder()
            .http_status_as_error(false)
            .timeout_connect(Some(Duration::from_secs(15)))
            .user_agent(concat!("sandpipe/", env!("CARGO_PKG_VERSION")))
            .build()
            .into();
        Client {
            agent,
            options,
            auth: Mutex::new(HashMap::new()),
        }
    }

    fn base(&self, r: &Reference) -> String {
        let plain = r.is_loopback() || self.options.insecure_registries.contains(&r.registry);
        let scheme = if plain { "http" } else { "https" };
        format!("{scheme}://{}/v2/{}", r.registry, r.repository)
    }

    /// The manifest `r` names (its digest if pinned, else its tag), with its digest. A pinned
    /// reference's bytes must hash to the pin.
    pub fn manifest(&self, r: &Reference) -> Result<(Vec<u8>, String), RegistryError> {
        let url = format!("{}/manifests/{}", self.base(r), r.manifest_ref());
        let resp = self.send(
            r,
            Method::Get,
            &url,
            &[("Accept", MANIFEST_ACCEPT)],
            None,
            Access::Pull,
        )?;
        let resp = expect_ok(resp, Method::Get, &url, r, || {
            format!("manifest {}:{}", r.repository, r.manifest_ref())
        })?;
        let announced = header(&resp, "docker-content-digest");
        let bytes = read_limited(resp, "manifest", super::MAX_MANIFEST_BYTES, &r.registry)?;
        let digest = sha256_digest(&bytes);
        let expected = r.digest.clone().or(announced);
        if let Some(expected) = expected
            && expected != digest
        {
            return Err(RegistryError::DigestMismatch {
                what: "manifest".into(),
                expected,
                got: digest,
            });
        }
        Ok((bytes, digest))
    }

    /// The blob `d` in `r`'s repository, checked against its size and digest.
    pub fn blob(
        &self,
        r: &Reference,
        d: &Descriptor,
        what: &'static str,
        limit: u64,
    ) -> Result<Vec<u8>, RegistryError> {
        if d.size > limit {
            return Err(RegistryError::TooLarge {
                what,
                limit,
                got: d.size,
            });
        }
        let url = format!("{}/blobs/{}", self.base(r), d.digest);
        let resp = self.send(r, Method::Get, &url, &[], None, Access::Pull)?;
        let resp = expect_ok(resp, Method::Get, &url, r, || {
            format!("{what} {}", d.digest)
        })?;
        let bytes = read_limited(resp, what, d.size, &r.registry)?;
        if bytes.len() as u64 != d.size {
            return Err(RegistryError::SizeMismatch {
                what: what.into(),
                expected: d.size,
                got: bytes.len() as u64,
            });
        }
        let got = sha256_digest(&bytes);
        if got != d.digest {
            return Err(RegistryError::DigestMismatch {
                what: what.into(),
                expected: d.digest.clone(),
                got,
            });
        }
        Ok(bytes)
    }

    /// Upload `bytes` as a blob (skipped when the registry has it already).
    pub fn push_blob(&self, r: &Reference, bytes: &[u8]) -> Result<String, RegistryError> {
        let digest = sha256_digest(bytes);
        let head = format!("{}/blobs/{digest}", self.base(r));
        let resp = self.send(r, Method::Head, &head, &[], None, Access::Push)?;
        if resp.status().as_u16() == 200 {
            return Ok(digest);
        }
        let start = format!("{}/blobs/uploads/", self.base(r));
        let resp = self.send(r, Method::Post, &start, &[], Some(&[]), Access::Push)?;
        if resp.status().as_u16() != 202 {
            return Err(status_error(resp, Method::Post, &start));
        }
        let location = header(&resp, "location").ok_or_else(|| RegistryError::Status {
            method: "POST",
            url: start.clone(),
            status: 202,
            body: "no Location header".into(),
        })?;
        let location = if location.starts_with("http://") || location.starts_with("https://") {
            location
        } else {
            let origin = self.base(r);
            let origin = &origin[..origin.find("/v2/").unwrap_or(origin.len())];
            format!("{origin}{location}")
        };
        let sep = if location.contains('?') { '&' } else { '?' };
        let put = format!("{location}{sep}digest={digest}");
        let resp = self.send(
            r,
            Method::Put,
            &put,
            &[("Content-Type", "application/octet-stream")],
            Some(bytes),
            Access::Push,
        )?;
        if resp.status().as_u16() != 201 {
            return Err(status_error(resp, Method::Put, &put));
        }
        Ok(digest)
    }

    /// Upload a manifest under `reference` (a tag or a digest); returns its digest.
    pub fn push_manifest(
        &self,
        r: &Reference,
        reference: &str,
        bytes: &[u8],
        media_type: &str,
    ) -> Result<String, RegistryError> {
        let url = format!("{}/manifests/{reference}", self.base(r));
        let resp = self.send(
            r,
            Method::Put,
            &url,
            &[("Content-Type", media_type)],
            Some(bytes),
            Access::Push,
        )?;
        if resp.status().as_u16() != 201 {
            return Err(status_error(resp, Method::Put, &url));
        }
        let digest = sha256_digest(bytes);
        if let Some(announced) = header(&resp, "docker-content-digest")
            && announced != digest
        {
            return Err(RegistryError::DigestMismatch {
                what: "pushed manifest".into(),
                expected: digest,
                got: announced,
            });
        }
        Ok(digest)
    }

    /// The manifests that refer to `digest` with `artifact_type`, by the referrers API;
    /// `None` when the registry does not offer it.
    pub fn referrers(
        &self,
        r: &Reference,
        digest: &str,
        artifact_type: &str,
    ) -> Result<Option<Vec<Descriptor>>, RegistryError> {
        let url = format!("{}/referrers/{digest}", self.base(r));
        let resp = self.send(
            r,
            Method::Get,
            &url,
            &[("Accept", "application/vnd.oci.image.index.v1+json")],
            None,
            Access::Pull,
        )?;
        // Registries without the API answer 404 (distribution 2.8) or 405.
        if matches!(resp.status().as_u16(), 404 | 405 | 400) {
            return Ok(None);
        }
        let resp = expect_ok(resp, Method::Get, &url, r, || {
            format!("referrers of {digest}")
        })?;
        let bytes = read_limited(
            resp,
            "referrers index",
            super::MAX_MANIFEST_BYTES,
            &r.registry,
        )?;
        #[derive(serde::Deserialize)]
        struct Index {
            #[serde(default)]
            manifests: Vec<Descriptor>,
        }
        let Ok(index) = serde_json::from_slice::<Index>(&bytes) else {
            return Ok(None);
        };
        Ok(Some(
            index
                .manifests
                .into_iter()
                .filter(|d| d.artifact_type.as_deref() == Some(artifact_type))
                .collect(),
        ))
    }

    /// The manifest under `tag`, if the tag exists.
    pub fn manifest_if_tagged(
        &self,
        r: &Reference,
        tag: &str,
    ) -> Result<Option<(Vec<u8>, String)>, RegistryError> {
        let tagged = Reference {
            tag: Some(tag.to_owned()),
            digest: None,
            ..r.clone()
        };
        match self.manifest(&tagged) {
            Ok(m) => Ok(Some(m)),
            Err(RegistryError::NotFound { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Send a request, answering one authentication challenge.
    fn send(
        &self,
        r: &Reference,
        method: Method,
        url: &str,
        headers: &[(&str, &str)],
        body: Option<&[u8]>,
        access: Access,
    ) -> Result<Response<ureq::Body>, RegistryError> {
        let scope = format!(
            "repository:{}:{}",
            r.repository,
            match access {
                Access::Pull => "pull",
                Access::Push => "pull,push",
            }
        );
        let key = format!("{} {scope}", r.registry);
        let mut retried = false;
        loop {
            let auth = self.auth_lock().get(&key).cloned();
            let resp = self.raw(method, url, headers, body, auth.as_deref(), &r.registry)?;
            if resp.status().as_u16() != 401 {
                return Ok(resp);
            }
            let cred = self.options.credentials.get(&r.registry);
            if retried {
                return Err(RegistryError::Unauthorized {
                    registry: r.registry.clone(),
                    had_credentials: cred.is_some(),
                });
            }
            retried = true;
            let challenge = header(&resp, "www-authenticate").unwrap_or_default();
            let value = self.answer(r, &challenge, &scope)?;
            self.auth_lock().insert(key.clone(), value);
        }
    }

    fn auth_lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, String>> {
        self.auth.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The Authorization header that answers `challenge`.
    fn answer(&self, r: &Reference, challenge: &str, scope: &str) -> Result<String, RegistryError> {
        let cred = self.options.credentials.get(&r.registry);
        let basic = cred.map(|c| {
            format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD
                    .encode(format!("{}:{}", c.username, c.password))
            )
        });
        let unauthorized = || RegistryError::Unauthorized {
            registry: r.registry.clone(),
            had_credentials: cred.is_some(),
        };
        let (kind, params) = challenge.split_once(' ').unwrap_or((challenge, ""));
        if kind.eq_ignore_ascii_case("basic") {
            return basic.ok_or_else(unauthorized);
        }
        if !kind.eq_ignore_ascii_case("bearer") {
            return Err(unauthorized());
        }
        let params = challenge_params(params);
        let realm = params.get("realm").ok_or_else(unauthorized)?;
        let mut url = format!("{realm}?scope={}", urlencode(scope));
        if let Some(service) = params.get("service") {
            url.push_str(&format!("&service={}", urlencode(service)));
        }
        let resp = self.raw(Method::Get, &url, &[], None, basic.as_deref(), &r.registry)?;
        if resp.status().as_u16() != 200 {
            return Err(unauthorized());
        }
        let bytes = read_limited(resp, "token", 1 << 20, &r.registry)?;
        #[derive(serde::Deserialize)]
        struct Token {
            token: Option<String>,
            access_token: Option<String>,
        }
        let token: Token = serde_json::from_slice(&bytes).map_err(|_| unauthorized())?;
        let token = token
            .token
            .or(token.access_token)
            .ok_or_else(unauthorized)?;
        Ok(format!("Bearer {token}"))
    }

    fn raw(
        &self,
        method: Method,
        url: &str,
        headers: &[(&str, &str)],
        body: Option<&[u8]>,
        auth: Option<&str>,
        registry: &str,
    ) -> Result<Response<ureq::Body>, RegistryError> {
        tracing::debug!("{} {url}", method.name());
        let result = match method {
            Method::Get | Method::Head => {
                let mut req = if method == Method::Get {
                    self.agent.get(url)
                } else {
                    self.agent.head(url)
                };
                for (k, v) in headers {
                    req = req.header(*k, *v);
                }
                if let Some(a) = auth {
                    req = req.header("Authorization", a);
                }
                req.call()
            }
            Method::Post | Method::Put => {
                let mut req = if method == Method::Post {
                    self.agent.post(url)
                } else {
                    self.agent.put(url)
                };
                for (k, v) in headers {
                    req = req.header(*k, *v);
                }
                if let Some(a) = auth {
                    req = req.header("Authorization", a);
                }
                match body {
                    Some(b) if !b.is_empty() => req.send(b),
                    _ => req.send_empty(),
                }
            }
        };
        result.map_err(|e| RegistryError::Unreachable {
            registry: registry.to_owned(),
            reason: e.to_string(),
        })
    }
}

fn header(resp: &Response<ureq::Body>, name: &str) -> Option<String> {
    resp.headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

fn expect_ok(
    resp: Response<ureq::Body>,
    method: Method,
    url: &str,
    r: &Reference,
    what: impl FnOnce() -> String,
) -> Result<Response<ureq::Body>, RegistryError> {
    match resp.status().as_u16() {
        200 => Ok(resp),
        404 => Err(RegistryError::NotFound {
            registry: r.registry.clone(),
            what: what(),
        }),
        _ => Err(status_error(resp, method, url)),
    }
}

fn status_error(resp: Response<ureq::Body>, method: Method, url: &str) -> RegistryError {
    let status = resp.status().as_u16();
    let mut body = String::new();
    let _ = resp
        .into_body()
        .into_reader()
        .take(300)
        .read_to_string(&mut body);
    RegistryError::Status {
        method: method.name(),
        url: url.to_owned(),
        status,
        body: body.trim().to_owned(),
    }
}

/// Read at most `limit` bytes of the body; more is [`RegistryError::TooLarge`] (checked before
/// anything past the limit is kept).
fn read_limited(
    resp: Response<ureq::Body>,
    what: &'static str,
    limit: u64,
    registry: &str,
) -> Result<Vec<u8>, RegistryError> {
    if let Some(len) = resp
        .headers()
        .get("content-length")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
        && len > limit
    {
        return Err(RegistryError::TooLarge {
            what,
            limit,
            got: len,
        });
    }
    let mut out = Vec::new();
    resp.into_body()
        .into_reader()
        .take(limit + 1)
        .read_to_end(&mut out)
        .map_err(|e| RegistryError::Unreachable {
            registry: registry.to_owned(),
            reason: format!("reading the {what}: {e}"),
        })?;
    if out.len() as u64 > limit {
        return Err(RegistryError::TooLarge {
            what,
            limit,
            got: out.len() as u64,
        });
    }
    Ok(out)
}

/// `realm="https://auth",service="registry",scope="x"` as a map.
fn challenge_params(s: &str) -> HashMap<String, String> {
    let mut out = HashMap::new();
    let mut rest = s.trim();
    while let Some((key, after)) = rest.split_once('=') {
        let key = key
            .trim()
            .trim_start_matches(',')
            .trim()
            .to_ascii_lowercase();
        let after = after.trim_start();
        let (value, next) = if let Some(quoted) = after.strip_prefix('"') {
            match quoted.split_once('"') {
                Some((v, n)) => (v, n),
                None => (quoted, ""),
            }
        } else {
            match after.split_once(',') {
                Some((v, n)) => (v, n),
                None => (after, ""),
            }
        };
        out.insert(key, value.to_owned());
        rest = next.trim_start_matches(',').trim();
    }
    out
}

fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_challenges_parse() {
        let p = challenge_params(
            r#"realm="https://auth.example/token",service="registry.example",scope="repository:a:pull""#,
        );
        assert_eq!(p["realm"], "https://auth.example/token");
        assert_eq!(p["service"], "registry.example");
        assert_eq!(p["scope"], "repository:a:pull");
        assert_eq!(
            urlencode("repository:a/b:pull,push"),
            "repository%3Aa%2Fb%3Apull%2Cpush"
        );
    }
}
