//! Registry credentials from the Docker config (`auths` entries), as `docker login`,
//! `oras login` and `skopeo login --authfile` write them.
//!
//! Credential helpers (`credsStore`, `credHelpers`) are not run: they are programs, and only
//! `native/` starts programs. A registry reached through one gets no credentials and answers
//! 401, which the error explains.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use base64::Engine as _;
use serde::Deserialize;

use super::RegistryError;

/// A username and password (or identity token as password).
#[derive(Clone, PartialEq, Eq)]
pub struct Credential {
    /// The user name.
    pub username: String,
    /// The password or token.
    pub password: String,
}

impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credential")
            .field("username", &self.username)
            .field("password", &"<redacted>")
            .finish()
    }
}

/// The `auths` of one Docker config, by registry host.
#[derive(Debug, Clone, Default)]
pub struct Credentials {
    by_registry: HashMap<String, Credential>,
}

#[derive(Deserialize)]
struct ConfigFile {
    #[serde(default)]
    auths: HashMap<String, AuthEntry>,
}

#[derive(Deserialize)]
struct AuthEntry {
    #[serde(default)]
    auth: Option<String>,
    #[serde(default)]
    username: Option<String>,
    #[serde(default)]
    password: Option<String>,
}

impl Credentials {
    /// The Docker config's path: `$DOCKER_CONFIG/config.json`, else `~/.docker/config.json`.
    pub fn default_path() -> Option<PathBuf> {
        if let Some(d) = std::env::var_os("DOCKER_CONFIG") {
            return Some(PathBuf::from(d).join("config.json"));
        }
        std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".docker").join("config.json"))
    }

    /// Read the default Docker config; a missing file means no credentials.
    pub fn from_default_config() -> Result<Credentials, RegistryError> {
        match Self::default_path() {
            Some(p) => Self::from_file(&p),
            None => Ok(Credentials::default()),
        }
    }

    /// Read `path`; a missing file means no credentials.
    pub fn from_file(path: &Path) -> Result<Credentials, RegistryError> {
        let bad = |reason: String| RegistryError::Credentials {
            path: path.display().to_string(),
            reason,
        };
        let text = match std::fs::read(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(Credentials::default());
            }
            Err(e) => return Err(bad(e.to_string())),
        };
        let file: ConfigFile = serde_json::from_slice(&text).map_err(|e| bad(e.to_string()))?;
        let mut by_registry = HashMap::new();
        for (key, entry) in file.auths {
            let cred = match (entry.auth, entry.username, entry.password) {
                (Some(auth), _, _) if !auth.is_empty() => {
                    let decoded = base64::engine::general_purpose::STANDARD
                        .decode(auth.trim())
                        .map_err(|e| bad(format!("auths.{key}.auth: {e}")))?;
                    let decoded = String::from_utf8(decoded)
                        .map_err(|_| bad(format!("auths.{key}.auth is not UTF-8")))?;
                    let (u, p) = decoded
                        .split_once(':')
                        .ok_or_else(|| bad(format!("auths.{key}.auth is not user:password")))?;
                    Credential {
                        username: u.to_owned(),
                        password: p.to_owned(),
                    }
                }
                (_, Some(username), Some(password)) => Credential { username, password },
                _ => continue,
            };
            by_registry.insert(normalize(&key), cred);
        }
        Ok(Credentials { by_registry })
    }

    /// The credential for `registry` (`HOST[:PORT]`), if any.
    pub fn get(&self, registry: &str) -> Option<&Credential> {
        self.by_registry.get(&normalize(registry))
    }
}

/// `https://host:port/v1/` and `host:port` name the same registry.
fn normalize(key: &str) -> String {
    let k = key
        .trim_start_matches("https://")
        .trim_start_matches("http://");
    let k = k.split('/').next().unwrap_or(k);
    if k == "index.docker.io" || k == "registry-1.docker.io" {
        "docker.io".to_owned()
    } else {
        k.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auths_entries_in_both_spellings() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("config.json");
        std::fs::write(
            &path,
            r#"{"auths":{
                "127.0.0.1:5000":{"auth":"dXNlcjpwYXNz"},
                "https://r.example/v1/":{"username":"u","password":"p"},
                "empty.example":{}
            },"credsStore":"desktop"}"#,
        )
        .expect("write");
        let c = Credentials::from_file(&path).expect("read");
        assert_eq!(
            c.get("127.0.0.1:5000"),
            Some(&Credential {
                username: "user".into(),
                password: "pass".into()
            })
        );
        assert_eq!(c.get("r.example").map(|c| c.username.as_str()), Some("u"));
        assert!(c.get("empty.example").is_none());
        assert!(
            Credentials::from_file(&dir.path().join("missing.json"))
                .expect("missing is empty")
                .get("x")
                .is_none()
        );
    }
}
