//! minisign (Ed25519) signatures over manifest bytes, in the formats the `minisign` CLI reads
//! and writes: password-protected secret keys from `minisign -G` (the password in
//! `SANDPIPE_MINISIGN_PASSWORD`), public keys, and `.minisig` files that `minisign -V`
//! verifies. Keys made with `minisign -G -W` (no password) are read too: minisign leaves their
//! checksum zeroed, which the `minisign` crate 0.7.9 takes for a wrong password, so they are
//! decoded here without it (see [`unencrypted_secret_key`]).

use std::io::Cursor;
use std::path::{Path, PathBuf};

use thiserror::Error;

/// What went wrong signing or verifying.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum SignError {
    /// A key file could not be read or parsed (or its password was wrong).
    #[error("key {path}: {reason}")]
    Key {
        /// The key file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// The signature text is not a minisign signature.
    #[error("malformed signature: {reason}")]
    Malformed {
        /// Why.
        reason: String,
    },
    /// Signed by a key that is not among the trusted ones.
    #[error("signed by key {key_id}, which is not a --trusted-key (trusted: {trusted})")]
    UntrustedKey {
        /// The signer's key id.
        key_id: String,
        /// The trusted key ids.
        trusted: String,
    },
    /// The signature does not verify with the key it names.
    #[error("the signature by key {key_id} does not verify: {reason}")]
    BadSignature {
        /// The key id.
        key_id: String,
        /// minisign's reason.
        reason: String,
    },
    /// Signing failed.
    #[error("signing failed: {reason}")]
    Sign {
        /// Why.
        reason: String,
    },
}

/// A public key trusted to sign plugins.
#[derive(Debug, Clone)]
pub struct TrustedKey {
    key_id: String,
    key: minisign::PublicKey,
}

impl TrustedKey {
    /// Read a minisign public key file (`minisign.pub`: a comment line and the base64 key).
    pub fn from_file(path: &Path) -> Result<TrustedKey, SignError> {
        let key = minisign::PublicKey::from_file(path).map_err(|e| SignError::Key {
            path: path.to_owned(),
            reason: e.to_string(),
        })?;
        Ok(TrustedKey {
            key_id: key_id(key.keynum()),
            key,
        })
    }

    /// The key id as minisign prints it (16 uppercase hex digits).
    pub fn key_id(&self) -> &str {
        &self.key_id
    }
}

/// minisign's key id: the 8-byte key number as a little-endian integer in uppercase hex.
fn key_id(keynum: &[u8]) -> String {
    let mut n = [0u8; 8];
    for (d, s) in n.iter_mut().zip(keynum) {
        *d = *s;
    }
    format!("{:016X}", u64::from_le_bytes(n))
}

/// Sign `data` with the secret key at `path`. The key's password comes from
/// `SANDPIPE_MINISIGN_PASSWORD`. Returns the
/// `.minisig` text and the key id.
pub fn sign(path: &Path, data: &[u8], comment: &str) -> Result<(String, String), SignError> {
    let password = std::env::var("SANDPIPE_MINISIGN_PASSWORD").unwrap_or_default();
    sign_with_password(path, &password, data, comment)
}

/// [`sign`] with the key's password given.
pub fn sign_with_password(
    path: &Path,
    password: &str,
    data: &[u8],
    comment: &str,
) -> Result<(String, String), SignError> {
    let password = password.to_owned();
    let key_err = |reason: String| SignError::Key {
        path: path.to_owned(),
        reason,
    };
    let text = std::fs::read_to_string(path).map_err(|e| key_err(e.to_string()))?;
    let sk = match unencrypted_secret_key(&text) {
        Some(sk) => sk,
        None => minisign::SecretKeyBox::from_string(&text)
            .and_then(|b| b.into_secret_key(Some(password)))
            .map_err(|e| {
                key_err(format!(
                    "{e} (set SANDPIPE_MINISIGN_PASSWORD for an encrypted key)"
                ))
            })?,
    };
    let sig = minisign::sign(None, &sk, Cursor::new(data), Some(comment), None).map_err(|e| {
        SignError::Sign {
            reason: e.to_string(),
        }
    })?;
    let id = key_id(sig_keynum(&sig.to_string())?.as_slice());
    Ok((sig.into_string(), id))
}

/// A secret key file written by `minisign -G -W`: no key derivation (KDF algorithm `\0\0`),
/// and, from the minisign CLI, a zeroed checksum. `None` for anything else, which then goes
/// through the crate's own (password-checking) path.
fn unencrypted_secret_key(text: &str) -> Option<minisign::SecretKey> {
    use base64::Engine as _;
    let encoded = text.lines().nth(1)?.trim();
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .ok()?;
    // sig_alg "Ed", kdf_alg, chk_alg, then salt, limits, keynum, key and checksum.
    if bytes.get(..2)? != b"Ed" || bytes.get(2..4)? != [0, 0] {
        return None;
    }
    minisign::SecretKey::from_bytes(&bytes).ok()
}

/// The key id a `.minisig` text names.
pub fn signer(minisig: &str) -> Result<String, SignError> {
    Ok(key_id(&sig_keynum(minisig)?))
}

fn sig_keynum(minisig: &str) -> Result<Vec<u8>, SignError> {
    let sig = minisign::SignatureBox::from_string(minisig).map_err(|e| SignError::Malformed {
        reason: e.to_string(),
    })?;
    Ok(sig.keynum().to_vec())
}

/// Verify `minisig` over `data` with whichever of `trusted` it names; returns the key id.
pub fn verify(trusted: &[TrustedKey], minisig: &str, data: &[u8]) -> Result<String, SignError> {
    let sig = minisign::SignatureBox::from_string(minisig).map_err(|e| SignError::Malformed {
        reason: e.to_string(),
    })?;
    let id = key_id(sig.keynum());
    let Some(key) = trusted.iter().find(|k| k.key_id == id) else {
        return Err(SignError::UntrustedKey {
            key_id: id,
            trusted: if trusted.is_empty() {
                "none".into()
            } else {
                trusted
                    .iter()
                    .map(|k| k.key_id.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            },
        });
    };
    minisign::verify(&key.key, &sig, Cursor::new(data), true, false, false).map_err(|e| {
        SignError::BadSignature {
            key_id: id.clone(),
            reason: e.to_string(),
        }
    })?;
    Ok(id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sign_then_verify_and_refuse_the_wrong_key_or_bytes() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut keys = Vec::new();
        for name in ["a", "b"] {
            let kp =
                minisign::KeyPair::generate_encrypted_keypair(Some("pw".into())).expect("keypair");
            let sk = dir.path().join(format!("{name}.key"));
            let pk = dir.path().join(format!("{name}.pub"));
            std::fs::write(&sk, kp.sk.to_box(None).expect("box").to_string()).expect("sk");
            std::fs::write(&pk, kp.pk.to_box().expect("box").to_string()).expect("pk");
            keys.push((sk, TrustedKey::from_file(&pk).expect("pub")));
        }
        let (sig, id) = sign_with_password(&keys[0].0, "pw", b"manifest", "comment").expect("sign");
        assert_eq!(id, keys[0].1.key_id());
        assert_eq!(signer(&sig).expect("signer"), id);
        assert_eq!(
            verify(&[keys[0].1.clone()], &sig, b"manifest").expect("verify"),
            id
        );
        assert!(matches!(
            verify(&[keys[1].1.clone()], &sig, b"manifest"),
            Err(SignError::UntrustedKey { .. })
        ));
        assert!(matches!(
            verify(&[keys[0].1.clone()], &sig, b"other"),
            Err(SignError::BadSignature { .. })
        ));
        assert!(matches!(
            verify(&[], "not a signature", b""),
            Err(SignError::Malformed { .. })
        ));
    }
}
