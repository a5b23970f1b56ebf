//! Plugins by reference: `oci://HOST[:PORT]/REPO[:TAG][@sha256:HEX]` in an OCI registry, in
//! the CNCF Wasm OCI artifact layout.
//!
//! ```text
//!   Reference ──► Client (HTTP, Docker-config credentials, Basic/Bearer challenges)
//!                   │  manifest bytes ──► sha256 == pinned digest? ──► Manifest::parse
//!                   │  layer blob     ──► sha256 == layer digest?  ──► Store (by digest)
//!                   └  signature      ──► referrers API, else tag sha256-<hex>.sig
//! ```
//!
//! The layout: an OCI image manifest whose config has media type
//! [`WASM_CONFIG_MEDIA_TYPE`] and which has exactly one layer of media type [`WASM_LAYER_MEDIA_TYPE`]
//! (the older layer types Spin and wasmCloud push are accepted on pull, see
//! [`ACCEPTED_LAYER_MEDIA_TYPES`]). Pushes are reproducible: the config's `created` is fixed, so
//! the same file gives the same manifest digest.
//!
//! What it does not do: image indexes (multi-platform), chunked uploads, credential helpers
//! (those would spawn a process; only `auths` entries of the Docker config are read).
//!
//! Behind the default-on cargo feature `registry` (it brings in the HTTP client and rustls).

mod client;
mod credentials;
pub mod fetch;

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};
use thiserror::Error;

pub use client::{Client, ClientOptions};
pub use credentials::{Credential, Credentials};

/// The OCI image manifest media type.
pub const OCI_MANIFEST_MEDIA_TYPE: &str = "application/vnd.oci.image.manifest.v1+json";
/// The config media type of the CNCF Wasm OCI artifact layout.
pub const WASM_CONFIG_MEDIA_TYPE: &str = "application/vnd.wasm.config.v0+json";
/// The layer media type of the CNCF Wasm OCI artifact layout.
pub const WASM_LAYER_MEDIA_TYPE: &str = "application/wasm";
/// Layer media types accepted on pull: the CNCF one, Spin's and wasmCloud's (wasm-to-oci).
pub const ACCEPTED_LAYER_MEDIA_TYPES: [&str; 3] = [
    WASM_LAYER_MEDIA_TYPE,
    "application/vnd.wasm.content.layer.v1+wasm",
    "application/vnd.module.wasm.content.layer.v1+wasm",
];
/// The artifact type of a sandpipe signature (a minisign signature of the manifest bytes).
pub const SIGNATURE_ARTIFACT_TYPE: &str = "application/vnd.sandpipe.minisign.v1";
/// The layer media type holding the `.minisig` text.
pub const SIGNATURE_LAYER_MEDIA_TYPE: &str = "application/vnd.sandpipe.minisign.signature.v1";
/// The OCI empty config (`{}`), used by the signature artifact.
pub const EMPTY_CONFIG_MEDIA_TYPE: &str = "application/vnd.oci.empty.v1+json";
/// The `created` timestamp written into every pushed config, so pushes are reproducible.
pub const FIXED_CREATED: &str = "1970-01-01T00:00:00Z";

/// Largest manifest accepted (manifests of single-layer artifacts are well under 2 KiB).
pub const MAX_MANIFEST_BYTES: u64 = 4 << 20;
/// Largest plugin layer accepted (the largest polyglot component seen is about 40 MB).
pub const MAX_LAYER_BYTES: u64 = 1 << 30;
/// Largest signature accepted.
pub const MAX_SIGNATURE_BYTES: u64 = 64 << 10;

/// What went wrong talking to a registry or reading what it sent.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum RegistryError {
    /// The reference does not parse.
    #[error("bad reference {reference:?}: {reason}")]
    BadReference {
        /// The text given.
        reference: String,
        /// Why.
        reason: &'static str,
    },
    /// The registry could not be reached.
    #[error("registry {registry} is unreachable: {reason}")]
    Unreachable {
        /// HOST[:PORT].
        registry: String,
        /// The transport's reason.
        reason: String,
    },
    /// The registry wants credentials, and none (or wrong ones) were found.
    #[error(
        "registry {registry} refused access (401 unauthorized){}",
        if *had_credentials { "; the credentials in the Docker config were refused" } else { "; no credentials for it in the Docker config ($DOCKER_CONFIG/config.json or ~/.docker/config.json)" }
    )]
    Unauthorized {
        /// HOST[:PORT].
        registry: String,
        /// Whether credentials were sent.
        had_credentials: bool,
    },
    /// The manifest or blob does not exist.
    #[error("{what} not found in {registry}")]
    NotFound {
        /// HOST[:PORT].
        registry: String,
        /// e.g. `manifest echo:1`.
        what: String,
    },
    /// Any other unexpected HTTP status.
    #[error("{method} {url}: HTTP {status}{}", if body.is_empty() { String::new() } else { format!(": {body}") })]
    Status {
        /// The request's method.
        method: &'static str,
        /// The URL.
        url: String,
        /// The status code.
        status: u16,
        /// The first bytes of the response body.
        body: String,
    },
    /// Content did not hash to the digest it was asked for by.
    #[error("{what} has digest {got}, expected {expected}")]
    DigestMismatch {
        /// What was checked (`manifest`, `layer`, `file`).
        what: String,
        /// The digest asked for.
        expected: String,
        /// The digest of the bytes received.
        got: String,
    },
    /// A blob's length differs from its descriptor.
    #[error("{what} is {got} bytes, its descriptor says {expected}")]
    SizeMismatch {
        /// What was checked.
        what: String,
        /// The descriptor's size.
        expected: u64,
        /// The bytes received.
        got: u64,
    },
    /// Something is larger than the cap for its kind.
    #[error("{what} of {got} bytes exceeds the limit of {limit} bytes")]
    TooLarge {
        /// What.
        what: &'static str,
        /// The cap.
        limit: u64,
        /// The size announced or read.
        got: u64,
    },
    /// The manifest is not a single-component Wasm artifact.
    #[error("not a wasm artifact: {reason}")]
    NotWasm {
        /// Why.
        reason: String,
    },
    /// The Docker config could not be read.
    #[error("reading the Docker config {path}: {reason}")]
    Credentials {
        /// Its path.
        path: String,
        /// Why.
        reason: String,
    },
    /// The local store failed.
    #[error(transparent)]
    Store(#[from] crate::dist::store::StoreError),
}

/// `oci://HOST[:PORT]/REPO[:TAG][@sha256:HEX]`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Reference {
    /// `HOST[:PORT]`.
    pub registry: String,
    /// The repository path, e.g. `plugins/echo`.
    pub repository: String,
    /// The tag, if given (a reference with neither tag nor digest means `latest`).
    pub tag: Option<String>,
    /// The pinned manifest digest, `sha256:<64 hex>`, if given.
    pub digest: Option<String>,
}

/// The scheme prefix of a reference.
pub const SCHEME: &str = "oci://";

impl Reference {
    /// Whether `s` is meant as a reference (starts with `oci://`).
    pub fn is_reference(s: &str) -> bool {
        s.starts_with(SCHEME)
    }

    /// The tag or digest to ask the registry for.
    pub fn manifest_ref(&self) -> &str {
        self.digest
            .as_deref()
            .or(self.tag.as_deref())
            .unwrap_or("latest")
    }

    /// This reference pinned to `digest` (the tag is kept, for display).
    pub fn pinned(&self, digest: &str) -> Reference {
        Reference {
            digest: Some(digest.to_owned()),
            ..self.clone()
        }
    }

    /// The reference without its digest: what a lock file entry is keyed by.
    pub fn unpinned(&self) -> Reference {
        Reference {
            digest: None,
            ..self.clone()
        }
    }

    /// Whether the registry is on the loopback interface (spoken to over plain HTTP).
    pub fn is_loopback(&self) -> bool {
        let host = match self.registry.rsplit_once(':') {
            Some((h, port)) if port.bytes().all(|b| b.is_ascii_digit()) => h,
            _ => self.registry.as_str(),
        };
        let host = host.trim_start_matches('[').trim_end_matches(']');
        host == "localhost"
            || host
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback())
    }
}

impl FromStr for Reference {
    type Err = RegistryError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = |reason| RegistryError::BadReference {
            reference: s.to_owned(),
            reason,
        };
        let rest = s
            .strip_prefix(SCHEME)
            .ok_or_else(|| bad("it does not start with oci://"))?;
        let (rest, digest) = match rest.split_once('@') {
            Some((r, d)) => {
                let hex = d
                    .strip_prefix("sha256:")
                    .ok_or_else(|| bad("the digest must be sha256:<64 hex digits>"))?;
                if !is_sha256_hex(hex) {
                    return Err(bad("the digest must be sha256:<64 lowercase hex digits>"));
                }
                (r, Some(d.to_owned()))
            }
            None => (rest, None),
        };
        let (registry, path) = rest
            .split_once('/')
            .ok_or_else(|| bad("expected oci://HOST[:PORT]/REPO"))?;
        if registry.is_empty() {
            return Err(bad("the registry host is empty"));
        }
        // A ':' after the last '/' separates the tag.
        let (repository, tag) = match path.rsplit_once(':') {
            Some((repo, tag)) if !tag.contains('/') => (repo, Some(tag.to_owned())),
            _ => (path, None),
        };
        let repo_ok = !repository.is_empty()
            && repository.split('/').all(|c| {
                !c.is_empty()
                    && c.bytes().all(|b| {
                        b.is_ascii_lowercase() || b.is_ascii_digit() || b"._-".contains(&b)
                    })
            });
        if !repo_ok {
            return Err(bad(
                "the repository must be lowercase letters, digits, '.', '_', '-' and '/'",
            ));
        }
        if let Some(t) = &tag {
            let tag_ok = !t.is_empty()
                && t.len() <= 128
                && t.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
            if !tag_ok {
                return Err(bad("the tag must be letters, digits, '.', '_' and '-'"));
            }
        }
        Ok(Reference {
            registry: registry.to_owned(),
            repository: repository.to_owned(),
            tag,
            digest,
        })
    }
}

impl fmt::Display for Reference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{SCHEME}{}/{}", self.registry, self.repository)?;
        if let Some(t) = &self.tag {
            write!(f, ":{t}")?;
        }
        if let Some(d) = &self.digest {
            write!(f, "@{d}")?;
        }
        Ok(())
    }
}

/// Whether `s` is 64 lowercase hex digits.
pub fn is_sha256_hex(s: &str) -> bool {
    s.len() == 64
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// `sha256:<hex>` of `bytes`.
pub fn sha256_digest(bytes: &[u8]) -> String {
    format!("sha256:{}", hex(&Sha256::digest(bytes)))
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// An OCI content descriptor.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Descriptor {
    /// The content's media type.
    pub media_type: String,
    /// `sha256:<hex>`.
    pub digest: String,
    /// Bytes.
    pub size: u64,
    /// The artifact type (descriptors in a referrers index).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub artifact_type: Option<String>,
}

impl Descriptor {
    fn of(media_type: &str, bytes: &[u8]) -> Descriptor {
        Descriptor {
            media_type: media_type.to_owned(),
            digest: sha256_digest(bytes),
            size: bytes.len() as u64,
            artifact_type: None,
        }
    }
}

/// An OCI image manifest (the fields sandpipe reads and writes).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Manifest {
    /// Always 2.
    pub schema_version: u32,
    /// [`OCI_MANIFEST_MEDIA_TYPE`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub media_type: Option<String>,
    /// Set on signature artifacts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub artifact_type: Option<String>,
    /// The config blob.
    pub config: Descriptor,
    /// The layers.
    pub layers: Vec<Descriptor>,
    /// The manifest this one refers to (signatures).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject: Option<Descriptor>,
}

impl Manifest {
    /// Parse manifest bytes.
    pub fn parse(bytes: &[u8]) -> Result<Manifest, RegistryError> {
        serde_json::from_slice(bytes).map_err(|e| RegistryError::NotWasm {
            reason: format!("the manifest is not an OCI image manifest: {e}"),
        })
    }

    /// The one wasm layer of a plugin manifest.
    pub fn wasm_layer(&self) -> Result<&Descriptor, RegistryError> {
        let wasm: Vec<&Descriptor> = self
            .layers
            .iter()
            .filter(|l| ACCEPTED_LAYER_MEDIA_TYPES.contains(&l.media_type.as_str()))
            .collect();
        match wasm.as_slice() {
            [one] if self.layers.len() == 1 => Ok(one),
            [] => Err(RegistryError::NotWasm {
                reason: format!(
                    "no layer of media type {} (layers: {})",
                    ACCEPTED_LAYER_MEDIA_TYPES.join(", "),
                    self.layers
                        .iter()
                        .map(|l| l.media_type.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            }),
            _ => Err(RegistryError::NotWasm {
                reason: format!(
                    "{} layers; a plugin artifact has exactly one wasm layer",
                    self.layers.len()
                ),
            }),
        }
    }
}

/// The config, manifest and their bytes for pushing `wasm` in the CNCF layout. Deterministic:
/// the same `wasm` always gives the same bytes.
#[derive(Debug, Clone)]
pub struct Artifact {
    /// The config blob.
    pub config: Vec<u8>,
    /// The manifest bytes (what the digest and the signature cover).
    pub manifest: Vec<u8>,
    /// `sha256:<hex>` of `manifest`.
    pub manifest_digest: String,
    /// The layer's descriptor.
    pub layer: Descriptor,
}

/// The config blob of the CNCF layout (`created`, `architecture`, `os`, `layerDigests`).
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct WasmConfig<'a> {
    created: &'a str,
    architecture: &'a str,
    os: &'a str,
    layer_digests: Vec<String>,
}

impl Artifact {
    /// Lay out `wasm` as a plugin artifact.
    pub fn plugin(wasm: &[u8]) -> Artifact {
        let layer = Descriptor::of(WASM_LAYER_MEDIA_TYPE, wasm);
        // A component (layer 0x0d 0x00 0x01 0x00) targets WASI p2; a core module p1.
        let os = if wasm.get(4..8) == Some(&[0x0d, 0x00, 0x01, 0x00]) {
            "wasip2"
        } else {
            "wasip1"
        };
        let config = serde_json::to_vec(&WasmConfig {
            created: FIXED_CREATED,
            architecture: "wasm",
            os,
            layer_digests: vec![layer.digest.clone()],
        })
        .unwrap_or_default();
        let manifest = Manifest {
            schema_version: 2,
            media_type: Some(OCI_MANIFEST_MEDIA_TYPE.to_owned()),
            artifact_type: None,
            config: Descriptor::of(WASM_CONFIG_MEDIA_TYPE, &config),
            layers: vec![layer.clone()],
            subject: None,
        };
        Self::finish(config, &manifest, layer)
    }

    /// The signature artifact for the manifest `subject`: an empty config and one layer with
    /// the `.minisig` text.
    pub fn signature(subject: Descriptor, minisig: &[u8]) -> Artifact {
        let config = b"{}".to_vec();
        let layer = Descriptor::of(SIGNATURE_LAYER_MEDIA_TYPE, minisig);
        let manifest = Manifest {
            schema_version: 2,
            media_type: Some(OCI_MANIFEST_MEDIA_TYPE.to_owned()),
            artifact_type: Some(SIGNATURE_ARTIFACT_TYPE.to_owned()),
            config: Descriptor::of(EMPTY_CONFIG_MEDIA_TYPE, &config),
            layers: vec![layer.clone()],
            subject: Some(subject),
        };
        Self::finish(config, &manifest, layer)
    }

    fn finish(config: Vec<u8>, manifest: &Manifest, layer: Descriptor) -> Artifact {
        let manifest = serde_json::to_vec(manifest).unwrap_or_default();
        Artifact {
            manifest_digest: sha256_digest(&manifest),
            config,
            manifest,
            layer,
        }
    }
}

/// The fallback tag under which the signature of `manifest_digest` is pushed (cosign's
/// convention), for registries without the referrers API.
pub fn signature_tag(manifest_digest: &str) -> String {
    format!("{}.sig", manifest_digest.replacen(':', "-", 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_parse_and_print() {
        let hex = "a".repeat(64);
        let cases = [
            (
                "oci://127.0.0.1:5000/echo:1",
                "127.0.0.1:5000",
                "echo",
                Some("1"),
                None,
            ),
            (
                "oci://localhost/a/b/echo",
                "localhost",
                "a/b/echo",
                None,
                None,
            ),
            (
                &*format!("oci://r.example/echo:v2@sha256:{hex}"),
                "r.example",
                "echo",
                Some("v2"),
                Some(format!("sha256:{hex}")),
            ),
        ];
        for (text, registry, repo, tag, digest) in cases {
            let r: Reference = text.parse().expect(text);
            assert_eq!(r.registry, registry);
            assert_eq!(r.repository, repo);
            assert_eq!(r.tag.as_deref(), tag);
            assert_eq!(r.digest, digest);
            assert_eq!(r.to_string(), text);
        }
        for bad in [
            "echo.wasm",
            "oci://",
            "oci://host",
            "oci:///echo",
            "oci://h/Echo",
            "oci://h/echo@sha256:abc",
            "oci://h/echo@md5:abc",
            "oci://h/echo:",
        ] {
            assert!(
                matches!(
                    bad.parse::<Reference>(),
                    Err(RegistryError::BadReference { .. })
                ),
                "{bad}"
            );
        }
    }

    #[test]
    fn loopback_is_told_apart() {
        for (r, lo) in [
            ("oci://127.0.0.1:5000/x", true),
            ("oci://localhost:5000/x", true),
            ("oci://[::1]:5000/x", true),
            ("oci://ghcr.io/x", false),
            ("oci://10.0.0.1:5000/x", false),
        ] {
            assert_eq!(r.parse::<Reference>().expect(r).is_loopback(), lo, "{r}");
        }
    }

    #[test]
    fn pushes_are_reproducible_and_in_the_cncf_layout() {
        let wasm = b"\0asm\x0d\x00\x01\x00rest";
        let a = Artifact::plugin(wasm);
        let b = Artifact::plugin(wasm);
        assert_eq!(a.manifest, b.manifest);
        assert_eq!(a.manifest_digest, b.manifest_digest);
        let m = Manifest::parse(&a.manifest).expect("parse");
        assert_eq!(m.config.media_type, WASM_CONFIG_MEDIA_TYPE);
        assert_eq!(m.wasm_layer().expect("layer").digest, sha256_digest(wasm));
        let config: serde_json::Value = serde_json::from_slice(&a.config).expect("config");
        assert_eq!(config["created"], FIXED_CREATED);
        assert_eq!(config["os"], "wasip2");
    }

    #[test]
    fn two_layers_or_none_are_not_a_plugin() {
        let mut m = Manifest::parse(&Artifact::plugin(b"\0asm").manifest).expect("parse");
        m.layers.push(m.layers[0].clone());
        assert!(matches!(m.wasm_layer(), Err(RegistryError::NotWasm { .. })));
        m.layers.clear();
        assert!(matches!(m.wasm_layer(), Err(RegistryError::NotWasm { .. })));
    }

    #[test]
    fn signature_tags_follow_cosign() {
        assert_eq!(signature_tag("sha256:ab"), "sha256-ab.sig");
    }
}
