//! Container images `FROM scratch`: the OCI image `sandpipe image` builds around a plugin.
//!
//! ```text
//!   layers (files: path, mode, bytes) ──► tar (fixed mtime, uid/gid 0, sorted) ──► sha256
//!   config (entrypoint, env, diff_ids; fixed `created`) ──► manifest ──► manifest digest
//!   write_archive: oci-layout, index.json, blobs/sha256/*, and Docker's manifest.json
//! ```
//!
//! Layers are uncompressed tars (`application/vnd.oci.image.layer.v1.tar`): the plugin and its
//! compiled artifact barely compress, the tar's layout is ours to fix byte for byte, and no
//! compression crate is needed. The archive is both an OCI image layout (`podman load`, skopeo,
//! `docker load` from Docker 25) and a Docker archive (`manifest.json`, which the Docker 20.10
//! daemon reads), over the same blobs.
//!
//! Reproducible: the same files, entrypoint, environment and tag give the same bytes, so the
//! same manifest digest (mtimes 0, uid/gid 0, no user or group names, entries in the order
//! given, `created` fixed at [`FIXED_CREATED`]).
//!
//! What it does not do: compressed layers, multi-platform indexes, base images.

use std::io::{self, Write};

use serde_json::json;
use sha2::{Digest, Sha256};
use thiserror::Error;

/// The `created` timestamp of every image config (reproducible builds).
pub const FIXED_CREATED: &str = "1970-01-01T00:00:00Z";
/// The OCI image manifest media type.
pub const MANIFEST_MEDIA_TYPE: &str = "application/vnd.oci.image.manifest.v1+json";
/// The OCI image config media type.
pub const CONFIG_MEDIA_TYPE: &str = "application/vnd.oci.image.config.v1+json";
/// The media type of an uncompressed layer.
pub const LAYER_MEDIA_TYPE: &str = "application/vnd.oci.image.layer.v1.tar";

/// Why an image cannot be built.
#[derive(Debug, Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum ImageError {
    /// The executable meant to run in an empty image needs a dynamic loader.
    #[error(
        "{path} is dynamically linked (it names the loader {interpreter}); an image FROM scratch needs a static sandpipe: scripts/build-static, or --sandpipe BIN"
    )]
    NotStatic {
        /// The executable.
        path: String,
        /// Its PT_INTERP.
        interpreter: String,
    },
    /// The executable is not a 64-bit little-endian ELF file.
    #[error("{path} is not a 64-bit little-endian ELF executable")]
    NotElf {
        /// The file.
        path: String,
    },
    /// A path cannot be stored in a ustar header.
    #[error(
        "path {path:?} is too long for a tar header (100 bytes, or 155 + 100 split at a slash)"
    )]
    PathTooLong {
        /// The path.
        path: String,
    },
}

/// One file or directory in a layer. Paths are relative to `/`, without a leading slash;
/// a directory's path ends with `/` and has no bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageFile {
    /// e.g. `plugin.wasm`, `cache/`.
    pub path: String,
    /// Permission bits, e.g. `0o755`.
    pub mode: u32,
    /// The contents (empty for a directory).
    pub bytes: Vec<u8>,
}

impl ImageFile {
    /// A regular file.
    pub fn file(path: impl Into<String>, mode: u32, bytes: Vec<u8>) -> ImageFile {
        ImageFile {
            path: path.into(),
            mode,
            bytes,
        }
    }

    /// A directory (`path` gets a trailing `/`).
    pub fn dir(path: impl Into<String>) -> ImageFile {
        let mut path = path.into();
        if !path.ends_with('/') {
            path.push('/');
        }
        ImageFile {
            path,
            mode: 0o755,
            bytes: Vec::new(),
        }
    }
}

/// What goes into an image.
#[derive(Debug, Clone, Default)]
pub struct ImageSpec {
    /// Layers, bottom first, each a list of files in the order they are written.
    pub layers: Vec<Vec<ImageFile>>,
    /// The entrypoint (argv); the container's arguments follow it.
    pub entrypoint: Vec<String>,
    /// `NAME=VALUE` entries of the image's environment.
    pub env: Vec<String>,
    /// The name `docker load` and `podman load` give it, e.g. `localhost/echo:latest`.
    pub tag: String,
}

/// A layer: its tar bytes and digest.
#[derive(Debug, Clone)]
pub struct Layer {
    /// The uncompressed tar.
    pub tar: Vec<u8>,
    /// `sha256:<hex>` of `tar` (also its diff_id: it is not compressed).
    pub digest: String,
}

/// A built image: blobs and the manifest that names them.
#[derive(Debug, Clone)]
pub struct Image {
    /// The layers, bottom first.
    pub layers: Vec<Layer>,
    /// The config blob.
    pub config: Vec<u8>,
    /// The manifest bytes (what the digest and a signature cover).
    pub manifest: Vec<u8>,
    /// `sha256:<hex>` of `manifest`.
    pub manifest_digest: String,
    /// The tag given.
    pub tag: String,
}

/// `sha256:<hex>` of `bytes`.
fn digest(bytes: &[u8]) -> String {
    let hash = Sha256::digest(bytes);
    let hex: String = hash.iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256:{hex}")
}

/// The OCI architecture name of this build (`amd64`, `arm64`, or Rust's own name).
pub fn oci_architecture() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    }
}

impl Image {
    /// Lay out `spec`: tar each layer, write the config and the manifest.
    pub fn build(spec: &ImageSpec) -> Result<Image, ImageError> {
        let layers = spec
            .layers
            .iter()
            .map(|files| {
                let tar = tar(files)?;
                Ok(Layer {
                    digest: digest(&tar),
                    tar,
                })
            })
            .collect::<Result<Vec<_>, ImageError>>()?;
        let diff_ids: Vec<&str> = layers.iter().map(|l| l.digest.as_str()).collect();
        let config = json!({
            "created": FIXED_CREATED,
            "architecture": oci_architecture(),
            "os": "linux",
            "config": {
                "Entrypoint": spec.entrypoint,
                "Env": spec.env,
                "WorkingDir": "/",
            },
            "rootfs": {"type": "layers", "diff_ids": diff_ids},
        });
        let config = serde_json::to_vec(&config).unwrap_or_default();
        let layer_descriptors: Vec<_> = layers
            .iter()
            .map(
                |l| json!({"mediaType": LAYER_MEDIA_TYPE, "digest": l.digest, "size": l.tar.len()}),
            )
            .collect();
        let manifest = json!({
            "schemaVersion": 2,
            "mediaType": MANIFEST_MEDIA_TYPE,
            "config": {"mediaType": CONFIG_MEDIA_TYPE, "digest": digest(&config), "size": config.len()},
            "layers": layer_descriptors,
        });
        let manifest = serde_json::to_vec(&manifest).unwrap_or_default();
        Ok(Image {
            manifest_digest: digest(&manifest),
            layers,
            config,
            manifest,
            tag: spec.tag.clone(),
        })
    }

    /// `sha256:<hex>` of the config: the image ID podman and Docker show.
    pub fn config_digest(&self) -> String {
        digest(&self.config)
    }

    /// The bytes of every blob, config and manifest included.
    pub fn size(&self) -> u64 {
        (self.config.len()
            + self.manifest.len()
            + self.layers.iter().map(|l| l.tar.len()).sum::<usize>()) as u64
    }

    /// Write the image as one tar: an OCI image layout and a Docker archive over the same blobs.
    pub fn write_archive(&self, out: &mut impl Write) -> io::Result<()> {
        let blob = |d: &str| format!("blobs/sha256/{}", d.trim_start_matches("sha256:"));
        let index = json!({
            "schemaVersion": 2,
            "manifests": [{
                "mediaType": MANIFEST_MEDIA_TYPE,
                "digest": self.manifest_digest,
                "size": self.manifest.len(),
                "annotations": {"org.opencontainers.image.ref.name": self.tag},
            }],
        });
        let docker = json!([{
            "Config": blob(&self.config_digest()),
            "RepoTags": [self.tag],
            "Layers": self.layers.iter().map(|l| blob(&l.digest)).collect::<Vec<_>>(),
        }]);
        let mut entries: Vec<(String, &[u8])> = Vec::new();
        let oci_layout = br#"{"imageLayoutVersion":"1.0.0"}"#;
        let index = serde_json::to_vec(&index).unwrap_or_default();
        let docker = serde_json::to_vec(&docker).unwrap_or_default();
        entries.push(("oci-layout".into(), oci_layout));
        entries.push(("index.json".into(), &index));
        entries.push(("manifest.json".into(), &docker));
        entries.push((blob(&self.manifest_digest), &self.manifest));
        entries.push((blob(&self.config_digest()), &self.config));
        for l in &self.layers {
            entries.push((blob(&l.digest), &l.tar));
        }
        for dir in ["blobs/", "blobs/sha256/"] {
            out.write_all(&header(dir, 0o755, 0, b'5').map_err(io::Error::other)?)?;
        }
        for (path, bytes) in entries {
            write_entry(out, &path, 0o644, bytes).map_err(io::Error::other)?;
        }
        out.write_all(&[0u8; 1024])
    }
}

/// A layer as an uncompressed tar.
fn tar(files: &[ImageFile]) -> Result<Vec<u8>, ImageError> {
    let mut out = Vec::new();
    for f in files {
        if f.path.ends_with('/') {
            out.extend_from_slice(&header(&f.path, f.mode, 0, b'5')?);
        } else {
            write_entry(&mut out, &f.path, f.mode, &f.bytes).map_err(|_| {
                ImageError::PathTooLong {
                    path: f.path.clone(),
                }
            })?;
        }
    }
    out.extend_from_slice(&[0u8; 1024]);
    Ok(out)
}

/// One regular file: its header, its bytes, padding to 512.
fn write_entry(out: &mut impl Write, path: &str, mode: u32, bytes: &[u8]) -> io::Result<()> {
    let h = header(path, mode, bytes.len() as u64, b'0').map_err(io::Error::other)?;
    out.write_all(&h)?;
    out.write_all(bytes)?;
    let pad = (512 - bytes.len() % 512) % 512;
    out.write_all(&vec![0u8; pad])
}

/// A ustar header with mtime 0, uid/gid 0 and no owner names.
fn header(path: &str, mode: u32, size: u64, kind: u8) -> Result<[u8; 512], ImageError> {
    let too_long = || ImageError::PathTooLong {
        path: path.to_owned(),
    };
    let (prefix, name) = if path.len() <= 100 {
        ("", path)
    } else {
        // Split at a slash so that the name part fits 100 bytes and the prefix 155.
        let cut = path
            .match_indices('/')
            .map(|(i, _)| i)
            .filter(|&i| i > 0 && i <= 155 && path.len() - i - 1 <= 100)
            .max()
            .ok_or_else(too_long)?;
        (&path[..cut], &path[cut + 1..])
    };
    let mut h = [0u8; 512];
    h[..name.len()].copy_from_slice(name.as_bytes());
    octal(&mut h[100..108], u64::from(mode));
    octal(&mut h[108..116], 0);
    octal(&mut h[116..124], 0);
    octal(&mut h[124..136], size);
    octal(&mut h[136..148], 0);
    h[156] = kind;
    h[257..263].copy_from_slice(b"ustar\0");
    h[263..265].copy_from_slice(b"00");
    h[345..345 + prefix.len()].copy_from_slice(prefix.as_bytes());
    // The checksum is computed with its own field as eight spaces.
    h[148..156].fill(b' ');
    let sum: u32 = h.iter().map(|&b| u32::from(b)).sum();
    let text = format!("{sum:06o}\0 ");
    h[148..156].copy_from_slice(text.as_bytes());
    Ok(h)
}

/// `value` in octal, zero-padded, NUL-terminated, filling `field`.
fn octal(field: &mut [u8], value: u64) {
    let width = field.len() - 1;
    let text = format!("{value:0width$o}");
    field[..width].copy_from_slice(&text.as_bytes()[text.len() - width..]);
    field[width] = 0;
}

/// Check that `bytes` (the file `path`) is an ELF executable that runs without a dynamic
/// loader: no `PT_INTERP` program header.
pub fn check_static_elf(path: &str, bytes: &[u8]) -> Result<(), ImageError> {
    let not_elf = || ImageError::NotElf {
        path: path.to_owned(),
    };
    // e_ident: magic, ELFCLASS64 (2), ELFDATA2LSB (1).
    if bytes.get(..6) != Some(b"\x7fELF\x02\x01") {
        return Err(not_elf());
    }
    let u16_at = |o: usize| -> Option<usize> {
        let b = bytes.get(o..o.checked_add(2)?)?;
        Some(usize::from(u16::from_le_bytes([b[0], b[1]])))
    };
    let u64_at = |o: usize| -> Option<usize> {
        let b: [u8; 8] = bytes.get(o..o.checked_add(8)?)?.try_into().ok()?;
        usize::try_from(u64::from_le_bytes(b)).ok()
    };
    let phoff = u64_at(0x20).ok_or_else(not_elf)?;
    let phentsize = u16_at(0x36).ok_or_else(not_elf)?;
    let phnum = u16_at(0x38).ok_or_else(not_elf)?;
    for i in 0..phnum {
        let at = phoff.saturating_add(i.saturating_mul(phentsize));
        let kind = bytes
            .get(at..at.saturating_add(4))
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .ok_or_else(not_elf)?;
        const PT_INTERP: u32 = 3;
        if kind == PT_INTERP {
            let off = u64_at(at + 8).ok_or_else(not_elf)?;
            let len = u64_at(at + 32).ok_or_else(not_elf)?;
            let interpreter = bytes
                .get(off..off.saturating_add(len))
                .map(|b| String::from_utf8_lossy(b).trim_end_matches('\0').to_owned())
                .unwrap_or_default();
            return Err(ImageError::NotStatic {
                path: path.to_owned(),
                interpreter,
            });
        }
    }
    Ok(())
}

/// The memory limit of the cgroup this process runs in (v2 `memory.max`, else v1
/// `memory.limit_in_bytes`), or `None` when there is none. Inside a container these files are
/// the container's own; on a host without a limit they read `max` or a number near `i64::MAX`.
pub fn cgroup_memory_limit() -> Option<u64> {
    let own = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let mut candidates = Vec::new();
    for line in own.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(_), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        let path = path.trim_start_matches('/');
        if controllers.is_empty() {
            candidates.push(format!("/sys/fs/cgroup/{path}/memory.max"));
        } else if controllers.split(',').any(|c| c == "memory") {
            candidates.push(format!(
                "/sys/fs/cgroup/memory/{path}/memory.limit_in_bytes"
            ));
        }
    }
    // In a container the cgroup's own files are mounted at the root of the hierarchy, while
    // /proc/self/cgroup may still name the host's path for it.
    candidates.push("/sys/fs/cgroup/memory.max".into());
    candidates.push("/sys/fs/cgroup/memory/memory.limit_in_bytes".into());
    candidates
        .iter()
        .filter_map(|p| std::fs::read_to_string(p).ok())
        .filter_map(|text| text.trim().parse::<u64>().ok())
        // v1 says "no limit" with a page-aligned i64::MAX.
        .find(|&limit| limit < 1 << 60)
}

/// The default memory cap under a cgroup memory `limit`, when it differs from `default`:
/// [`memory_cap_under`] the limit, when that is lower than the default, or whenever `raise`
/// (an image, whose container limit is the plugin's to use).
pub fn default_memory_cap(limit: u64, default: u64, raise: bool) -> Option<u64> {
    let cap = memory_cap_under(limit);
    (cap < default || (raise && cap != default)).then_some(cap)
}

/// The memory cap under a cgroup limit of `limit` bytes: what sandpipe itself needs (its code,
/// the compiled plugin, buffers; about 20 MiB measured in a container) is kept free, or a
/// quarter of the limit if that is more; under a tiny limit, half of it.
pub fn memory_cap_under(limit: u64) -> u64 {
    const HEADROOM: u64 = 24 << 20;
    limit.saturating_sub(HEADROOM.max(limit / 4)).max(limit / 2)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> ImageSpec {
        ImageSpec {
            layers: vec![
                vec![ImageFile::file("sandpipe", 0o755, b"\x7fELF".to_vec())],
                vec![
                    ImageFile::file("plugin.wasm", 0o644, b"\0asm".to_vec()),
                    ImageFile::dir("cache"),
                    ImageFile::file(
                        format!(
                            "cache/wasmtime-48.0.8/{}-{}.cwasm",
                            "a".repeat(64),
                            "b".repeat(16)
                        ),
                        0o644,
                        vec![1; 600],
                    ),
                ],
            ],
            entrypoint: vec!["/sandpipe".into(), "run".into(), "/plugin.wasm".into()],
            env: vec!["SANDPIPE_CACHE_DIR=/cache".into()],
            tag: "localhost/echo:latest".into(),
        }
    }

    #[test]
    fn the_cap_leaves_headroom_under_a_cgroup_limit() {
        assert_eq!(memory_cap_under(64 << 20), 40 << 20);
        assert_eq!(memory_cap_under(1 << 30), 768 << 20);
        assert_eq!(memory_cap_under(16 << 20), 8 << 20);
    }

    #[test]
    fn a_cgroup_limit_only_lowers_the_default_cap_outside_an_image() {
        let default = 256 << 20;
        // A container or CI job with 128 MiB: lowered, to stay under it.
        assert_eq!(
            default_memory_cap(128 << 20, default, false),
            Some(96 << 20)
        );
        // A CI runner or systemd unit with 16 GiB: the default stays.
        assert_eq!(default_memory_cap(16 << 30, default, false), None);
        // An image asks for its container's limit, up as well as down.
        assert_eq!(default_memory_cap(16 << 30, default, true), Some(12 << 30));
        assert_eq!(default_memory_cap(128 << 20, default, true), Some(96 << 20));
    }

    #[test]
    fn the_same_spec_gives_the_same_digest() {
        let a = Image::build(&spec()).expect("build");
        let b = Image::build(&spec()).expect("build");
        assert_eq!(a.manifest_digest, b.manifest_digest);
        let mut other = spec();
        other.env.push("SANDPIPE_MAX_MEMORY=64MiB".into());
        assert_ne!(
            Image::build(&other).expect("build").manifest_digest,
            a.manifest_digest
        );
        let (mut x, mut y) = (Vec::new(), Vec::new());
        a.write_archive(&mut x).expect("archive");
        b.write_archive(&mut y).expect("archive");
        assert_eq!(x, y);
        assert_eq!(x.len() % 512, 0);
    }

    #[test]
    fn tar_headers_are_valid_ustar_with_long_paths_split() {
        let layer = tar(&spec().layers[1]).expect("tar");
        // The third header: the long cache path, split into prefix and name.
        let h = &layer[512 + 512 + 512..][..512];
        assert_eq!(&h[345..366], b"cache/wasmtime-48.0.8");
        assert!(h[..100].starts_with(&b"aaaa"[..]));
        let sum: u32 = h
            .iter()
            .enumerate()
            .map(|(i, &b)| {
                if (148..156).contains(&i) {
                    32
                } else {
                    u32::from(b)
                }
            })
            .sum();
        let stored = std::str::from_utf8(&h[148..154]).expect("octal");
        assert_eq!(u32::from_str_radix(stored, 8), Ok(sum));
        let long = "x/".repeat(200);
        assert!(matches!(
            tar(&[ImageFile::file(long, 0o644, Vec::new())]),
            Err(ImageError::PathTooLong { .. })
        ));
    }

    #[test]
    fn a_dynamic_executable_is_refused_by_name() {
        let me = std::env::current_exe().expect("exe");
        let bytes = std::fs::read(&me).expect("read");
        // Test binaries are built dynamic (the static build is scripts/build-static).
        match check_static_elf("t", &bytes) {
            Err(ImageError::NotStatic { interpreter, .. }) => {
                assert!(interpreter.contains("ld-"), "{interpreter}")
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            check_static_elf("w", b"\0asm\x01\0\0\0"),
            Err(ImageError::NotElf { path: "w".into() })
        );
    }
}
