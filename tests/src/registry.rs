//! A real OCI registry for tests: Debian's `docker-registry` (CNCF distribution 2.8) started on
//! 127.0.0.1 with a temporary storage dir, without auth or with htpasswd; and minisign key
//! pairs made by minisign itself. Used by the registry tests and the container
//! image tests.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use crate::peers;

/// A registry process on a free loopback port, killed on drop.
#[derive(Debug)]
pub struct Registry {
    child: Option<Child>,
    /// Its loopback port.
    pub port: u16,
    storage: PathBuf,
    _dir: tempfile::TempDir,
}

impl Registry {
    /// Start one; with `user`, htpasswd auth with that user and password.
    pub fn start(user: Option<(&str, &str)>) -> Registry {
        let dir = tempfile::tempdir().expect("tempdir");
        let storage = dir.path().join("storage");
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("free port")
            .port();
        let mut config = format!(
            "version: 0.1\nlog:\n  level: info\nstorage:\n  filesystem:\n    rootdirectory: {}\nhttp:\n  addr: 127.0.0.1:{port}\n  secret: sandpipe-test\n",
            storage.display()
        );
        if let Some((u, p)) = user {
            let out = Command::new(peers::debian("htpasswd"))
                .args(["-Bbn", u, p])
                .output()
                .expect("htpasswd");
            assert!(out.status.success(), "htpasswd failed");
            let htpasswd = dir.path().join("htpasswd");
            std::fs::write(&htpasswd, &out.stdout).expect("write htpasswd");
            config.push_str(&format!(
                "auth:\n  htpasswd:\n    realm: sandpipe-test\n    path: {}\n",
                htpasswd.display()
            ));
        }
        let config_path = dir.path().join("config.yml");
        std::fs::write(&config_path, config).expect("write config");
        let mut child = Command::new(peers::debian("docker-registry"))
            .arg("serve")
            .arg(&config_path)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start docker-registry");
        // Ready when it logs "listening on"; keep draining its log afterwards.
        let (tx, rx) = mpsc::channel();
        let stderr = child.stderr.take().expect("stderr");
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if line.contains("listening on") {
                    let _ = tx.send(());
                }
            }
        });
        rx.recv_timeout(Duration::from_secs(60))
            .expect("docker-registry did not start listening");
        Registry {
            child: Some(child),
            port,
            storage,
            _dir: dir,
        }
    }

    /// `127.0.0.1:PORT`.
    pub fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// `oci://127.0.0.1:PORT/REPO:TAG`.
    pub fn reference(&self, repo_tag: &str) -> String {
        format!("oci://{}/{repo_tag}", self.host())
    }

    /// Kill it (a registry gone mid-test); dropping does the same.
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// The registry's file for blob `digest` (distribution's filesystem layout).
    pub fn blob_file(&self, digest: &str) -> PathBuf {
        let hex = digest.trim_start_matches("sha256:");
        self.storage
            .join("docker/registry/v2/blobs/sha256")
            .join(&hex[..2])
            .join(hex)
            .join("data")
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The password of the keys [`minisign_keypair`] makes.
pub const PASSWORD: &str = "correct horse";

/// A minisign key pair `DIR/NAME.key` (password [`PASSWORD`]) and `DIR/NAME.pub`, made by
/// minisign itself.
pub fn minisign_keypair(dir: &Path, name: &str) -> (PathBuf, PathBuf) {
    let sk = dir.join(format!("{name}.key"));
    let pk = dir.join(format!("{name}.pub"));
    // minisign reads the new key's password (twice) from stdin when it is not a terminal.
    let mut child = Command::new(peers::debian("minisign"))
        .args(["-G", "-p"])
        .arg(&pk)
        .arg("-s")
        .arg(&sk)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("minisign -G");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(format!("{PASSWORD}\n{PASSWORD}\n").as_bytes())
        .expect("password");
    let out = child.wait_with_output().expect("minisign -G");
    assert!(
        out.status.success(),
        "minisign -G: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    (sk, pk)
}
