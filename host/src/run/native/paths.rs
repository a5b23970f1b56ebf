//! The paths and the port every part of the native sandbox agrees on: what a plugin may always
//! read and write (Landlock grants them, the jail binds them, start-up skips them) and where
//! its proxy listens inside its network namespace.

use std::path::Path;

/// The port sandpipe's proxy listens on inside a native plugin's network namespace
/// (`127.0.0.1`, HTTP `CONNECT` and SOCKS5; the plugin's `HTTP_PROXY` and `ALL_PROXY`).
pub const PROXY_PORT: u16 = 3128;

/// Paths every program needs to start and run, granted read-only when they exist.
pub(super) const SYSTEM_DIRS: &[&str] = &["/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64"];
pub(super) const SYSTEM_FILES: &[&str] = &[
    "/etc/ld.so.cache",
    "/etc/ld.so.preload",
    "/etc/localtime",
    "/etc/ssl/openssl.cnf",
    "/dev/urandom",
    "/dev/random",
];
/// Devices a shell redirection or a library may open for writing.
pub(super) const SINK_DEVICES: &[&str] = &["/dev/null", "/dev/zero", "/dev/full"];

/// Whether `path` lies under a system directory every plugin may already read.
pub(super) fn is_system_path(path: &Path) -> bool {
    SYSTEM_DIRS.iter().any(|dir| path.starts_with(dir))
}
