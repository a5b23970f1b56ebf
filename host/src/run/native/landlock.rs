//! Landlock confinement of a native plugin, where the kernel has it.
//!
//! The ruleset is built in the host (opening each allowed path), then the forked child calls
//! `landlock_restrict_self` just before exec, so the plugin and everything it starts run
//! confined, and sandpipe itself never is. What the ruleset allows:
//!
//! ```text
//! read + execute    /usr /bin /sbin /lib /lib32 /lib64 /etc/ld.so.cache /etc/ld.so.preload
//!                   /etc/localtime /etc/ssl/openssl.cnf /dev/urandom /dev/random
//!                   (the system's programs and libraries; `node` reads openssl.cnf at start
//!                   and exits when it cannot)
//! read + write      /dev/null /dev/zero /dev/full
//! read + execute    the plugin's own file
//! read + execute    its start-up grants: interpreter, install prefix, venv, scripts
//!                   (see `startup.rs`; off with `Policy::startup_grants(false)`)
//! --dir HOST:ro     read, list and execute beneath HOST
//! --dir HOST        everything beneath HOST
//! network           no TCP bind or connect (ABI 4)
//! scope             no signals to, and no abstract Unix sockets of, processes outside (ABI 6)
//! ```
//!
//! Everything else on the filesystem (home, /tmp, /etc, /proc, ...) is refused with `EACCES`.
//! On a kernel with an older ABI what that ABI lacks stays unrestricted ([`LandlockSupport`]
//! says what); without Landlock nothing is restricted, and sandpipe says so.

use std::path::Path;
use std::sync::OnceLock;

use super::paths::{SINK_DEVICES, SYSTEM_DIRS, SYSTEM_FILES};
use super::startup::StartupGrant;
use crate::error::HostError;
use crate::policy::{Access, Preopen};

/// The newest Landlock ABI whose rights sandpipe asks for. Newer kernels enforce exactly these,
/// older ones what they can (see [`LandlockSupport::Partial`]).
pub const LANDLOCK_TARGET_ABI: i32 = 6;

/// What this kernel's Landlock can enforce on a native plugin.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum LandlockSupport {
    /// Everything sandpipe asks for is enforced.
    Full {
        /// The kernel's Landlock ABI version.
        abi: i32,
    },
    /// Landlock works, but this kernel's ABI predates some of what sandpipe asks for: the
    /// filesystem is confined, the listed rights are not.
    Partial {
        /// The kernel's Landlock ABI version.
        abi: i32,
        /// What stays unrestricted, in words.
        unrestricted: Vec<&'static str>,
    },
    /// No Landlock: a native plugin can reach everything its user can.
    Unavailable {
        /// Why, in words.
        reason: String,
    },
}

impl LandlockSupport {
    /// Ask the kernel (once per process; the answer cannot change while it runs).
    pub fn detect() -> LandlockSupport {
        static SUPPORT: OnceLock<LandlockSupport> = OnceLock::new();
        SUPPORT
            .get_or_init(|| Self::from_query(query_abi()))
            .clone()
    }

    /// Interpret the answer of `landlock_create_ruleset(NULL, 0, VERSION)`: the ABI version, or
    /// the errno of the failed call.
    pub(crate) fn from_query(answer: Result<i32, i32>) -> LandlockSupport {
        match answer {
            Ok(abi) if abi >= LANDLOCK_TARGET_ABI => LandlockSupport::Full { abi },
            Ok(abi) if abi >= 1 => LandlockSupport::Partial {
                abi,
                unrestricted: [
                    (3, "truncating files outside --dir"),
                    (4, "TCP bind and connect"),
                    (5, "ioctl on devices"),
                    (
                        6,
                        "signals and abstract Unix sockets to processes outside the sandbox",
                    ),
                ]
                .into_iter()
                .filter(|(since, _)| abi < *since)
                .map(|(_, what)| what)
                .collect(),
            },
            Ok(abi) => LandlockSupport::Unavailable {
                reason: format!("the kernel answered ABI version {abi}"),
            },
            Err(libc::ENOSYS) => LandlockSupport::Unavailable {
                reason: "the kernel is built without it".to_owned(),
            },
            Err(libc::EOPNOTSUPP) => LandlockSupport::Unavailable {
                reason: "it is not enabled at boot (see the lsm= kernel parameter)".to_owned(),
            },
            Err(errno) => LandlockSupport::Unavailable {
                reason: format!(
                    "landlock_create_ruleset is refused ({}), e.g. by a container's seccomp filter",
                    std::io::Error::from_raw_os_error(errno)
                ),
            },
        }
    }

    /// `full`, `partial` or `unavailable`.
    pub fn name(&self) -> &'static str {
        match self {
            LandlockSupport::Full { .. } => "full",
            LandlockSupport::Partial { .. } => "partial",
            LandlockSupport::Unavailable { .. } => "unavailable",
        }
    }

    /// The kernel's Landlock ABI version, when it has Landlock.
    pub fn abi(&self) -> Option<i32> {
        match self {
            LandlockSupport::Full { abi } | LandlockSupport::Partial { abi, .. } => Some(*abi),
            LandlockSupport::Unavailable { .. } => None,
        }
    }

    /// What a native plugin is confined to, in one line.
    pub fn describe(&self) -> String {
        match self {
            LandlockSupport::Full { abi } => format!(
                "Landlock ABI {abi}: files limited to --dir and the system's programs and libraries (read-only), no TCP, no signals outside"
            ),
            LandlockSupport::Partial { abi, unrestricted } => format!(
                "Landlock ABI {abi} (sandpipe asks for {LANDLOCK_TARGET_ABI}): files limited to --dir and the system's programs and libraries; not restricted: {}",
                unrestricted.join(", ")
            ),
            LandlockSupport::Unavailable { reason } => format!(
                "Landlock is not available on this kernel ({reason}); the native plugin can reach the whole filesystem and the network"
            ),
        }
    }

    /// The one `sandpipe:` line to print when a native plugin starts, unless everything is
    /// enforced.
    pub fn warning(&self) -> Option<String> {
        match self {
            LandlockSupport::Full { .. } => None,
            _ => Some(format!("sandpipe: warning: {}", self.describe())),
        }
    }
}

#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
fn query_abi() -> Result<i32, i32> {
    const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;
    // SAFETY: with a null attribute pointer, size 0 and the VERSION flag the kernel only
    // returns a number; it reads and writes no memory of ours.
    let answer = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    if answer < 0 {
        Err(std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::ENOSYS))
    } else {
        Ok(i32::try_from(answer).unwrap_or(i32::MAX))
    }
}

#[cfg(not(target_os = "linux"))]
fn query_abi() -> Result<i32, i32> {
    Err(libc::ENOSYS)
}

/// A built ruleset, waiting to be applied in the child: its descriptor, and the fresh `/proc`
/// mounts of a namespaced plugin granted with `--dir /proc`, each a guest path and its rights,
/// whose rules can only be added once they are mounted.
#[cfg(target_os = "linux")]
#[derive(Debug)]
pub(crate) struct Confinement {
    ruleset: Option<std::os::fd::OwnedFd>,
    proc_rules: Vec<(std::ffi::CString, u64)>,
}

#[cfg(not(target_os = "linux"))]
#[derive(Debug)]
pub(crate) struct Confinement;

/// Build the confinement of `program` with `preopens` and the read-only start-up `grants`, or
/// none when the kernel has no Landlock.
#[cfg(target_os = "linux")]
pub(crate) fn confinement(
    program: &Path,
    preopens: &[Preopen],
    grants: &[StartupGrant],
    namespaced: bool,
    proxied: bool,
) -> Result<Confinement, HostError> {
    use landlock::{
        ABI, Access as _, AccessFs, AccessNet, BitFlags, PathBeneath, PathFd, Ruleset, RulesetAttr,
        RulesetCreatedAttr, Scope,
    };

    check_preopens(preopens)?;
    if matches!(
        LandlockSupport::detect(),
        LandlockSupport::Unavailable { .. }
    ) {
        return Ok(Confinement {
            ruleset: None,
            proc_rules: Vec::new(),
        });
    }
    let fail = |message: String| HostError::Landlock {
        program: program.to_owned(),
        message,
    };
    let abi = ABI::V6;
    let read: BitFlags<AccessFs> = AccessFs::from_read(abi);
    let file = AccessFs::from_file(abi);
    let mut ruleset = Ruleset::default()
        .handle_access(AccessFs::from_all(abi))
        .and_then(|r| r.handle_access(AccessNet::from_all(abi)))
        .and_then(|r| r.scope(Scope::from_all(abi)))
        .and_then(|r| r.create())
        .map_err(|e| fail(e.to_string()))?;
    // One rule: `path` with `access`; a missing path is an error only when `required`.
    let rule = |path: &Path, access: BitFlags<AccessFs>, required: bool| match PathFd::new(path) {
        // Directory rights on a file are invalid: keep those that apply to files.
        Ok(fd) => {
            let access = if path.is_dir() { access } else { access & file };
            Ok(Some((path.to_owned(), PathBeneath::new(fd, access))))
        }
        // A system path this distribution does not have.
        Err(_) if !required => Ok(None),
        Err(e) => Err(e.to_string()),
    };
    let mut rules = Vec::new();
    for path in SYSTEM_DIRS.iter().chain(SYSTEM_FILES) {
        rules.extend(rule(Path::new(path), read, false).map_err(&fail)?);
    }
    for dev in SINK_DEVICES {
        rules.extend(rule(Path::new(dev), file & !AccessFs::Execute, false).map_err(&fail)?);
    }
    rules.extend(rule(program, AccessFs::ReadFile | AccessFs::Execute, true).map_err(&fail)?);
    for grant in grants {
        // A grant that vanished since it was computed is simply not granted.
        rules.extend(rule(&grant.path, read, false).map_err(&fail)?);
    }
    let mut proc_rules = Vec::new();
    for preopen in preopens {
        let access = match preopen.access {
            Access::ReadOnly => read,
            Access::ReadWrite => AccessFs::from_all(abi),
        };
        if namespaced && super::namespace::is_host_proc(&preopen.host) {
            // The plugin gets a fresh /proc of its own there, not the host's: its rule is on
            // that mount, added in the child (read rights: /proc is not for writing).
            let guest = super::namespace::guest_path(&preopen.guest)
                .ok()
                .and_then(|g| std::ffi::CString::new(g.into_os_string().into_encoded_bytes()).ok())
                .ok_or_else(|| HostError::Preopen {
                    host: preopen.host.clone(),
                    message: format!("invalid guest path {}", preopen.guest),
                })?;
            proc_rules.push((guest, read.bits()));
            continue;
        }
        let preopen_error = |message: String| HostError::Preopen {
            host: preopen.host.clone(),
            message,
        };
        rules.extend(rule(&preopen.host, access, true).map_err(preopen_error)?);
    }
    if proxied {
        // The plugin's network namespace has loopback alone, and on this port sandpipe's
        // proxy: the one TCP connection it may make.
        ruleset = ruleset
            .add_rule(landlock::NetPort::new(
                super::paths::PROXY_PORT,
                AccessNet::ConnectTcp,
            ))
            .map_err(|e| fail(format!("the proxy port: {e}")))?;
    }
    for (path, rule) in rules {
        ruleset = ruleset
            .add_rule(rule)
            .map_err(|e| fail(format!("{}: {e}", path.display())))?;
    }
    Ok(Confinement {
        ruleset: Option::<std::os::fd::OwnedFd>::from(ruleset),
        proc_rules,
    })
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn confinement(
    _program: &Path,
    preopens: &[Preopen],
    _grants: &[StartupGrant],
    _namespaced: bool,
    _proxied: bool,
) -> Result<Confinement, HostError> {
    check_preopens(preopens)?;
    Ok(Confinement)
}

/// Every preopen must exist, with or without Landlock: a directory, or (natively only) a
/// single file.
fn check_preopens(preopens: &[Preopen]) -> Result<(), HostError> {
    for preopen in preopens {
        let message = match std::fs::metadata(&preopen.host) {
            Ok(_) => continue,
            Err(e) => e.to_string(),
        };
        return Err(HostError::Preopen {
            host: preopen.host.clone(),
            message,
        });
    }
    Ok(())
}

impl Confinement {
    /// Confine the calling process. Runs in the forked child before exec: `open`,
    /// `landlock_add_rule` for a fresh `/proc`, `prctl` and `landlock_restrict_self` on a
    /// ruleset built before the fork; no allocation.
    #[cfg(target_os = "linux")]
    #[allow(unsafe_code)]
    pub(crate) fn apply(&mut self) -> std::io::Result<()> {
        use std::os::fd::AsRawFd;
        /// `struct landlock_path_beneath_attr`, packed as the kernel declares it.
        #[repr(C, packed)]
        struct PathBeneath {
            allowed_access: u64,
            parent_fd: i32,
        }
        const LANDLOCK_RULE_PATH_BENEATH: libc::c_int = 1;
        let Some(ruleset) = self.ruleset.take() else {
            return Ok(());
        };
        let os = std::io::Error::last_os_error;
        // SAFETY: open, close, prctl and the Landlock system calls on C strings prepared
        // before the fork, a packed attribute on our stack and descriptors we own.
        unsafe {
            for (path, access) in &self.proc_rules {
                let fd = libc::open(path.as_ptr(), libc::O_PATH | libc::O_CLOEXEC);
                if fd < 0 {
                    return Err(os());
                }
                let attr = PathBeneath {
                    allowed_access: *access,
                    parent_fd: fd,
                };
                let r = libc::syscall(
                    libc::SYS_landlock_add_rule,
                    ruleset.as_raw_fd(),
                    LANDLOCK_RULE_PATH_BENEATH,
                    &raw const attr,
                    0u32,
                );
                let e = os();
                libc::close(fd);
                if r != 0 {
                    return Err(e);
                }
            }
            if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0
                || libc::syscall(libc::SYS_landlock_restrict_self, ruleset.as_raw_fd(), 0u32) != 0
            {
                return Err(os());
            }
        }
        Ok(())
    }

    #[cfg(not(target_os = "linux"))]
    pub(crate) fn apply(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kernels_answer_maps_to_a_support_level() {
        assert_eq!(
            LandlockSupport::from_query(Ok(7)),
            LandlockSupport::Full { abi: 7 }
        );
        assert_eq!(
            LandlockSupport::from_query(Ok(6)),
            LandlockSupport::Full { abi: 6 }
        );
        assert_eq!(
            LandlockSupport::from_query(Ok(4)),
            LandlockSupport::Partial {
                abi: 4,
                unrestricted: vec![
                    "ioctl on devices",
                    "signals and abstract Unix sockets to processes outside the sandbox"
                ],
            }
        );
        match LandlockSupport::from_query(Ok(1)) {
            LandlockSupport::Partial { unrestricted, .. } => assert_eq!(unrestricted.len(), 4),
            other => panic!("{other:?}"),
        }
        for errno in [libc::ENOSYS, libc::EOPNOTSUPP, libc::EPERM] {
            let s = LandlockSupport::from_query(Err(errno));
            assert_eq!(s.name(), "unavailable", "{errno}");
            assert_eq!(s.abi(), None);
        }
    }

    #[test]
    fn only_a_fully_enforcing_kernel_starts_without_a_warning() {
        assert_eq!(LandlockSupport::from_query(Ok(6)).warning(), None);
        let none = LandlockSupport::from_query(Err(libc::ENOSYS));
        let warning = none.warning().expect("a warning");
        assert!(
            warning.starts_with(
                "sandpipe: warning: Landlock is not available on this kernel (the kernel is built without it); the native plugin can reach the whole filesystem"
            ),
            "{warning}"
        );
        assert!(!warning.contains('\n'));
        let partial = LandlockSupport::from_query(Ok(3))
            .warning()
            .expect("a warning");
        assert!(
            partial.starts_with("sandpipe: warning: Landlock ABI 3 (sandpipe asks for 6)"),
            "{partial}"
        );
        assert!(partial.contains("TCP bind and connect"), "{partial}");
    }
}
