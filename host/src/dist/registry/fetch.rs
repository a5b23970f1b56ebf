//! Push a plugin; fetch one by reference into the [`Store`], checking its digests, its
//! signature and its lock entry before anything is compiled.
//!
//! ```text
//!   reference ─► pin? (@sha256, or the lock entry with --offline)
//!     online:  manifest from the registry ─► --locked: same digest as the lock entry?
//!     offline: manifest from the store by digest
//!   ─► one wasm layer ─► signature (referrers API, else tag sha256-<hex>.sig) verified
//!   ─► layer from the store, else the registry ─► Fetched { wasm_path, digests, signer }
//! ```

use std::path::{Path, PathBuf};

use thiserror::Error;

use super::{
    Artifact, Client, Descriptor, MAX_LAYER_BYTES, MAX_SIGNATURE_BYTES, Manifest,
    OCI_MANIFEST_MEDIA_TYPE, Reference, RegistryError, SIGNATURE_ARTIFACT_TYPE, signature_tag,
};
use crate::dist::lock::LockEntry;
use crate::dist::signing::{SignError, TrustedKey};
use crate::dist::store::{Store, StoreError};

/// Why a plugin could not be fetched, or was refused.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum FetchError {
    /// Talking to the registry failed.
    #[error(transparent)]
    Registry(#[from] RegistryError),
    /// The local store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The signature was refused.
    #[error("{reference}: {error}")]
    Signature {
        /// The reference.
        reference: String,
        /// Why.
        error: SignError,
    },
    /// `--require-signature`, and there is none.
    #[error("{reference} is not signed (--require-signature)")]
    Unsigned {
        /// The reference.
        reference: String,
    },
    /// `--locked`, and the tag now names another manifest.
    #[error("{reference} moved: the lock file has {locked}, the registry now has {now} (--locked)")]
    LockMoved {
        /// The reference.
        reference: String,
        /// The locked digest.
        locked: String,
        /// The digest it resolves to now.
        now: String,
    },
    /// `--locked`, and the reference is not in the lock file.
    #[error("{reference} is not in the lock file (--locked)")]
    NotLocked {
        /// The reference.
        reference: String,
    },
    /// `--offline` with neither a digest nor a lock entry.
    #[error("{reference} is not pinned: --offline needs @sha256:… or a --lockfile entry")]
    OfflineUnpinned {
        /// The reference.
        reference: String,
    },
    /// `--offline`, and the store lacks something.
    #[error("{what} {digest} of {reference} is not in the local store (--offline)")]
    OfflineMissing {
        /// The reference.
        reference: String,
        /// `manifest` or `layer`.
        what: &'static str,
        /// Its digest.
        digest: String,
    },
}

/// How to fetch.
#[derive(Debug, Clone, Copy, Default)]
pub struct FetchOptions<'a> {
    /// Use only the local store.
    pub offline: bool,
    /// Keys whose signatures are accepted.
    pub trusted_keys: &'a [TrustedKey],
    /// Refuse an unsigned plugin.
    pub require_signature: bool,
    /// Fetch the signature even when nothing requires it (`pull --signature`).
    pub want_signature: bool,
    /// The lock file's entry for this reference.
    pub locked: Option<&'a LockEntry>,
    /// `--locked`: the entry must exist and match.
    pub enforce_lock: bool,
}

/// A plugin fetched and checked.
#[derive(Debug, Clone)]
pub struct Fetched {
    /// The reference pinned to the manifest digest.
    pub reference: Reference,
    /// The manifest's bytes (what the signature covers).
    pub manifest: Vec<u8>,
    /// The manifest's digest.
    pub manifest_digest: String,
    /// The wasm layer.
    pub layer: Descriptor,
    /// The verified layer in the store.
    pub wasm_path: PathBuf,
    /// The `.minisig` text, when fetched.
    pub signature: Option<String>,
    /// The key id that signed it, when verified against a trusted key.
    pub signer: Option<String>,
}

impl Fetched {
    /// The lock file entry for this fetch.
    pub fn lock_entry(&self) -> LockEntry {
        LockEntry {
            reference: self.reference.unpinned().to_string(),
            manifest: self.manifest_digest.clone(),
            layer: self.layer.digest.clone(),
            size: self.layer.size,
            signer: self.signer.clone(),
        }
    }
}

/// Fetch `r` (a registry is only contacted when `options.offline` is false).
pub fn fetch(
    client: &Client,
    store: &Store,
    r: &Reference,
    options: &FetchOptions<'_>,
) -> Result<Fetched, FetchError> {
    let name = r.to_string();
    if options.enforce_lock && options.locked.is_none() {
        return Err(FetchError::NotLocked { reference: name });
    }
    let locked_digest = options.locked.map(|e| e.manifest.clone());
    let (manifest, digest) = if options.offline {
        let digest = r.digest.clone().or(locked_digest.clone()).ok_or_else(|| {
            FetchError::OfflineUnpinned {
                reference: name.clone(),
            }
        })?;
        let bytes = store
            .get(&digest)?
            .ok_or_else(|| FetchError::OfflineMissing {
                reference: name.clone(),
                what: "manifest",
                digest: digest.clone(),
            })?;
        (bytes, digest)
    } else {
        let (bytes, digest) = client.manifest(r)?;
        store.put(&digest, &bytes)?;
        (bytes, digest)
    };
    if options.enforce_lock
        && let Some(locked) = &locked_digest
        && *locked != digest
    {
        return Err(FetchError::LockMoved {
            reference: name,
            locked: locked.clone(),
            now: digest,
        });
    }
    let parsed = Manifest::parse(&manifest)?;
    let layer = parsed.wasm_layer()?.clone();
    let pinned = r.pinned(&digest);

    // The signature is checked before the layer is downloaded, let alone compiled.
    let checking = options.require_signature || !options.trusted_keys.is_empty();
    let (signature, signer) = if checking || options.want_signature {
        let sig = find_signature(client, store, &pinned, options.offline)?;
        match (&sig, checking) {
            (None, _) if options.require_signature => {
                return Err(FetchError::Unsigned { reference: name });
            }
            (Some(text), true) => {
                let id = crate::dist::signing::verify(options.trusted_keys, text, &manifest)
                    .map_err(|error| FetchError::Signature {
                        reference: name.clone(),
                        error,
                    })?;
                (sig, Some(id))
            }
            _ => (sig, None),
        }
    } else {
        (None, None)
    };

    let wasm_path = match store.get_path(&layer.digest)? {
        Some(p) => p,
        None if options.offline => {
            return Err(FetchError::OfflineMissing {
                reference: name,
                what: "layer",
                digest: layer.digest.clone(),
            });
        }
        None => {
            let bytes = client.blob(r, &layer, "layer", MAX_LAYER_BYTES)?;
            store.put(&layer.digest, &bytes)?
        }
    };
    if let Some(tag) = &r.tag {
        store.set_tag(&r.registry, &r.repository, tag, &digest)?;
    }
    Ok(Fetched {
        reference: pinned,
        manifest,
        manifest_digest: digest,
        layer,
        wasm_path,
        signature,
        signer,
    })
}

/// The `.minisig` text for the manifest `r` pins: by the referrers API, else the
/// `sha256-<hex>.sig` tag; offline, from the store.
fn find_signature(
    client: &Client,
    store: &Store,
    r: &Reference,
    offline: bool,
) -> Result<Option<String>, FetchError> {
    let digest = r.digest.clone().unwrap_or_default();
    let tag = signature_tag(&digest);
    if offline {
        let Some(layer_digest) = store.tag(&r.registry, &r.repository, &tag) else {
            return Ok(None);
        };
        return Ok(store
            .get(&layer_digest)?
            .map(|b| String::from_utf8_lossy(&b).into_owned()));
    }
    let mut candidates = Vec::new();
    if let Some(found) = client.referrers(r, &digest, SIGNATURE_ARTIFACT_TYPE)? {
        for d in found {
            candidates.push(client.manifest(&r.pinned(&d.digest))?);
        }
    }
    if candidates.is_empty()
        && let Some(m) = client.manifest_if_tagged(r, &tag)?
    {
        candidates.push(m);
    }
    for (bytes, _) in candidates {
        let m = Manifest::parse(&bytes)?;
        // Only a signature whose subject is this very manifest counts.
        if m.artifact_type.as_deref() != Some(SIGNATURE_ARTIFACT_TYPE)
            || m.subject.as_ref().map(|s| s.digest.as_str()) != Some(digest.as_str())
            || m.layers.len() != 1
        {
            continue;
        }
        let sig = client.blob(r, &m.layers[0], "signature", MAX_SIGNATURE_BYTES)?;
        store.put(&m.layers[0].digest, &sig)?;
        store.set_tag(&r.registry, &r.repository, &tag, &m.layers[0].digest)?;
        return Ok(Some(String::from_utf8_lossy(&sig).into_owned()));
    }
    Ok(None)
}

/// What a push did.
#[derive(Debug, Clone)]
pub struct Pushed {
    /// The reference pinned to the manifest digest.
    pub reference: Reference,
    /// The manifest digest.
    pub manifest_digest: String,
    /// The signer's key id, when signed.
    pub signer: Option<String>,
}

/// Push `wasm` to `r` in the CNCF layout, signed with the minisign secret key `sign_with`.
pub fn push(
    client: &Client,
    r: &Reference,
    wasm: &[u8],
    sign_with: Option<&Path>,
) -> Result<Pushed, PushError> {
    let artifact = Artifact::plugin(wasm);
    // Sign first: a wrong key or password fails before anything is uploaded.
    let signature = sign_with
        .map(|key| {
            crate::dist::signing::sign(
                key,
                &artifact.manifest,
                &format!("sandpipe plugin manifest {}", artifact.manifest_digest),
            )
        })
        .transpose()?;
    client.push_blob(r, wasm)?;
    client.push_blob(r, &artifact.config)?;
    let tag = r.tag.clone().unwrap_or_else(|| "latest".to_owned());
    let target = r.digest.as_deref().unwrap_or(&tag);
    if let Some(pin) = &r.digest
        && *pin != artifact.manifest_digest
    {
        return Err(PushError::Registry(RegistryError::DigestMismatch {
            what: "manifest to push".into(),
            expected: pin.clone(),
            got: artifact.manifest_digest,
        }));
    }
    let digest = client.push_manifest(r, target, &artifact.manifest, OCI_MANIFEST_MEDIA_TYPE)?;
    let mut signer = None;
    if let Some((minisig, id)) = signature {
        push_signature(client, r, &digest, artifact.manifest.len(), &minisig)?;
        signer = Some(id);
    }
    Ok(Pushed {
        reference: r.pinned(&digest),
        manifest_digest: digest,
        signer,
    })
}

/// Push a container image (`sandpipe image --push`) to `r`: its layers, config and manifest,
/// and, with `sign_with`, its signature exactly as [`push`] signs a plugin.
pub fn push_image(
    client: &Client,
    r: &Reference,
    image: &crate::dist::image::Image,
    sign_with: Option<&Path>,
) -> Result<Pushed, PushError> {
    let signature = sign_with
        .map(|key| {
            crate::dist::signing::sign(
                key,
                &image.manifest,
                &format!("sandpipe image manifest {}", image.manifest_digest),
            )
        })
        .transpose()?;
    for layer in &image.layers {
        client.push_blob(r, &layer.tar)?;
    }
    client.push_blob(r, &image.config)?;
    let tag = r.tag.clone().unwrap_or_else(|| "latest".to_owned());
    let digest = client.push_manifest(r, &tag, &image.manifest, OCI_MANIFEST_MEDIA_TYPE)?;
    let signer = match signature {
        Some((minisig, id)) => {
            push_signature(client, r, &digest, image.manifest.len(), &minisig)?;
            Some(id)
        }
        None => None,
    };
    Ok(Pushed {
        reference: r.pinned(&digest),
        manifest_digest: digest,
        signer,
    })
}

/// Push the signature artifact of the manifest `digest` (`len` bytes).
fn push_signature(
    client: &Client,
    r: &Reference,
    digest: &str,
    len: usize,
    minisig: &str,
) -> Result<(), RegistryError> {
    let subject = Descriptor {
        media_type: OCI_MANIFEST_MEDIA_TYPE.to_owned(),
        digest: digest.to_owned(),
        size: len as u64,
        artifact_type: None,
    };
    let sig = Artifact::signature(subject, minisig.as_bytes());
    client.push_blob(r, minisig.as_bytes())?;
    client.push_blob(r, &sig.config)?;
    // A registry with the referrers API indexes it by its subject; the tag is the fallback.
    client.push_manifest(
        r,
        &signature_tag(digest),
        &sig.manifest,
        OCI_MANIFEST_MEDIA_TYPE,
    )?;
    Ok(())
}

/// Why a push failed.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum PushError {
    /// Talking to the registry failed.
    #[error(transparent)]
    Registry(#[from] RegistryError),
    /// Signing failed.
    #[error(transparent)]
    Sign(#[from] SignError),
}
