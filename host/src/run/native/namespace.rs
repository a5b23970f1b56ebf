//! A native plugin's own namespaces, root and process tree, where the kernel allows them.
//!
//! Everything below runs in the child sandpipe forked for the plugin, before exec, from values
//! computed before the fork ([`Jail::plan`]): the child of a multi-threaded process may only
//! make async-signal-safe calls, so the child code makes system calls on prepared C strings
//! and buffers and never allocates.
//!
//! ```text
//! sandpipe ─ fork ─► monitor   unshare(user, mount, pid, ipc, net, uts); uid/gid map to
//!                    │         itself; lo up; the proxy listener to sandpipe (SCM_RIGHTS)
//!                    │         waits, then ends as the plugin ended (exit code or signal)
//!                    └─ fork ─► init (PID 1)  a tmpfs root with read-only binds of the system
//!                               │             paths, the start-up grants and --dir at its
//!                               │             guest path; a fresh /proc; pivot_root; reaps,
//!                               │             reports the plugin's wait status to the monitor
//!                               └─ fork ─► plugin (PID 2)  no capabilities, Landlock,
//!                                                          seccomp ─► exec
//! ```
//!
//! The monitor stays outside the PID namespace, so sandpipe waits on it as on any child and
//! signals its process group (the plugin keeps it) as before. A PID 1 would ignore the
//! default-action signals sandpipe sends, which is why the plugin is PID 2.

use std::ffi::{CStr, CString};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};
use std::sync::OnceLock;

use super::paths::{PROXY_PORT, SINK_DEVICES, SYSTEM_DIRS, SYSTEM_FILES};
use super::pause::{Pause, Step};
use super::startup::StartupGrant;
use crate::error::HostError;
use crate::policy::{Access, Preopen};

/// The namespaces a native plugin gets.
const NAMESPACES: libc::c_int = libc::CLONE_NEWUSER
    | libc::CLONE_NEWNS
    | libc::CLONE_NEWPID
    | libc::CLONE_NEWIPC
    | libc::CLONE_NEWNET
    | libc::CLONE_NEWUTS;

/// Where the new root is assembled before `pivot_root`: a directory every Linux system has,
/// hidden only inside the plugin's own mount namespace. Each source is copied (`open_tree`)
/// before it is covered, so a grant of it, below it or above it sees the host's.
const STAGING: &str = "/tmp";

/// Whether this kernel lets sandpipe give a native plugin its own namespaces.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum NamespaceSupport {
    /// User, mount, PID, IPC, network and UTS namespaces, a tmpfs root and a fresh `/proc`.
    Available,
    /// Not here (most containers, or user namespaces disabled): the plugin runs under
    /// Landlock alone.
    Unavailable {
        /// Why, in words.
        reason: String,
    },
}

impl NamespaceSupport {
    /// Try, once per process, what a native plugin's start needs in a throwaway child, or take
    /// the answer a run before this one found (`probe_cache`).
    pub fn detect() -> NamespaceSupport {
        match REPROBED.get() {
            Some(fresh) => fresh.clone(),
            None => Self::probed().support.clone(),
        }
    }

    /// The answer, how long finding it took, and whether it was remembered.
    fn probed() -> &'static Probed {
        static SUPPORT: OnceLock<Probed> = OnceLock::new();
        SUPPORT.get_or_init(|| {
            let started = std::time::Instant::now();
            let key = super::probe_cache::key();
            if key.as_deref().is_some_and(super::probe_cache::remembered) {
                return Probed {
                    support: NamespaceSupport::Available,
                    took: started.elapsed(),
                    remembered: true,
                };
            }
            Probed {
                support: probe_and_remember(key.as_deref()),
                took: started.elapsed(),
                remembered: false,
            }
        })
    }

    /// After a start whose jail failed on a remembered answer: forget that answer and probe
    /// now. `None` when the answer was this process's own probe's (the failure is real).
    pub(crate) fn reprobe_if_remembered() -> Option<NamespaceSupport> {
        if !Self::probed().remembered {
            return None;
        }
        Some(
            REPROBED
                .get_or_init(|| {
                    super::probe_cache::forget();
                    probe_and_remember(super::probe_cache::key().as_deref())
                })
                .clone(),
        )
    }

    /// How long this process's probe took, or reading the remembered answer (it runs once,
    /// on the first [`Self::detect`]).
    pub(crate) fn probe_time() -> std::time::Duration {
        Self::probed().took
    }

    /// Whether native plugins get their own namespaces.
    pub fn is_available(&self) -> bool {
        matches!(self, NamespaceSupport::Available)
    }

    /// The namespaces, in words, or why there are none.
    pub fn describe(&self) -> String {
        match self {
            NamespaceSupport::Available => "namespaces: user, mount, pid, ipc, net, uts".to_owned(),
            NamespaceSupport::Unavailable { reason } => format!("no namespaces ({reason})"),
        }
    }
}

/// Probe, and keep a positive answer under `key` for the runs after this one.
fn probe_and_remember(key: Option<&str>) -> NamespaceSupport {
    let support = probe();
    if let (NamespaceSupport::Available, Some(key)) = (&support, key) {
        super::probe_cache::remember(key);
    }
    support
}

/// [`NamespaceSupport::detect`]'s first answer.
struct Probed {
    support: NamespaceSupport,
    took: std::time::Duration,
    /// Read from `probe_cache`, not probed by this process.
    remembered: bool,
}

/// The probe's answer after a remembered one failed (`reprobe_if_remembered`).
static REPROBED: OnceLock<NamespaceSupport> = OnceLock::new();

/// The steps of [`probe`], named in its answer.
const PROBE_STEPS: &[&str] = &[
    "unshare",
    "setgroups",
    "uid_map",
    "gid_map",
    "making / private",
    "mounting a tmpfs",
    "fork",
    "mounting /proc",
];

#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
fn probe() -> NamespaceSupport {
    let maps = IdMaps::current();
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: pipe2 writes two descriptors into `fds`, which lives across the call.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return NamespaceSupport::Unavailable {
            reason: format!("pipe2: {}", std::io::Error::last_os_error()),
        };
    }
    let [read_end, write_end] = fds;
    // SAFETY: the child makes only async-signal-safe system calls on values prepared above
    // (`maps`, C string literals) and its own stack, and ends with _exit.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        unsafe {
            libc::close(read_end);
            let step = probe_in_child(&maps);
            let answer = match step {
                Ok(()) => [0i32, 0],
                Err((step, errno)) => [step as i32 + 1, errno],
            };
            libc::write(
                write_end,
                answer.as_ptr().cast(),
                std::mem::size_of_val(&answer),
            );
            libc::_exit(0);
        }
    }
    // SAFETY: our own descriptors, closed once.
    unsafe { libc::close(write_end) };
    if pid < 0 {
        unsafe { libc::close(read_end) };
        return NamespaceSupport::Unavailable {
            reason: format!("fork: {}", std::io::Error::last_os_error()),
        };
    }
    let mut answer = [0i32; 2];
    // SAFETY: read fills at most `answer`'s bytes; waitpid reaps our own child.
    let got = unsafe {
        let n = libc::read(
            read_end,
            answer.as_mut_ptr().cast(),
            std::mem::size_of_val(&answer),
        );
        libc::close(read_end);
        let mut status = 0;
        while libc::waitpid(pid, &mut status, 0) < 0 && *libc::__errno_location() == libc::EINTR {}
        n
    };
    match (got, answer) {
        (8, [0, _]) => NamespaceSupport::Available,
        (8, [step, errno]) => NamespaceSupport::Unavailable {
            reason: format!(
                "{} is refused: {}",
                PROBE_STEPS
                    .get(usize::try_from(step - 1).unwrap_or(0))
                    .unwrap_or(&"a step"),
                std::io::Error::from_raw_os_error(errno)
            ),
        },
        _ => NamespaceSupport::Unavailable {
            reason: "the probe ended without an answer".to_owned(),
        },
    }
}

#[cfg(not(target_os = "linux"))]
fn probe() -> NamespaceSupport {
    NamespaceSupport::Unavailable {
        reason: "not Linux".to_owned(),
    }
}

/// In the probe's child: the namespaces, the id maps, a private tmpfs and, in a PID namespace,
/// a fresh `/proc`. The mount namespace and everything in it vanish with the child.
#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
fn probe_in_child(maps: &IdMaps) -> Result<(), (usize, i32)> {
    let fail = |step: usize| (step, errno());
    // SAFETY: system calls on C string literals, prepared buffers and integers.
    unsafe {
        if libc::unshare(NAMESPACES) != 0 {
            return Err(fail(0));
        }
        maps.write().map_err(|(step, e)| (step + 1, e))?;
        if libc::mount(
            std::ptr::null(),
            c"/".as_ptr(),
            std::ptr::null(),
            libc::MS_REC | libc::MS_PRIVATE,
            std::ptr::null(),
        ) != 0
        {
            return Err(fail(4));
        }
        if libc::mount(
            c"tmpfs".as_ptr(),
            c"/tmp".as_ptr(),
            c"tmpfs".as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV,
            c"size=64k".as_ptr().cast(),
        ) != 0
        {
            return Err(fail(5));
        }
        let pid = libc::fork();
        if pid < 0 {
            return Err(fail(6));
        }
        if pid == 0 {
            let r = libc::mount(
                c"proc".as_ptr(),
                c"/tmp".as_ptr(),
                c"proc".as_ptr(),
                libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                std::ptr::null(),
            );
            libc::_exit(if r == 0 { 0 } else { errno().clamp(1, 255) });
        }
        let mut status = 0;
        while libc::waitpid(pid, &mut status, 0) < 0 && errno() == libc::EINTR {}
        match libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status)) {
            Some(0) => Ok(()),
            Some(errno) => Err((7, errno)),
            None => Err((7, libc::EINTR)),
        }
    }
}

fn errno() -> i32 {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// `setgroups`, `uid_map` and `gid_map` contents: the plugin keeps sandpipe's ids.
#[derive(Debug)]
struct IdMaps {
    uid: Vec<u8>,
    gid: Vec<u8>,
}

impl IdMaps {
    #[allow(unsafe_code)]
    fn current() -> IdMaps {
        // SAFETY: getuid and getgid cannot fail.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        IdMaps {
            uid: format!("{uid} {uid} 1\n").into_bytes(),
            gid: format!("{gid} {gid} 1\n").into_bytes(),
        }
    }

    /// Write the maps for the calling process; the failed step (0 setgroups, 1 uid_map, 2
    /// gid_map) and its errno otherwise. Async-signal-safe.
    fn write(&self) -> Result<(), (usize, i32)> {
        write_file(c"/proc/self/setgroups", b"deny").map_err(|e| (0, e))?;
        write_file(c"/proc/self/uid_map", &self.uid).map_err(|e| (1, e))?;
        write_file(c"/proc/self/gid_map", &self.gid).map_err(|e| (2, e))
    }
}

/// Write `bytes` to an existing file in one call. Async-signal-safe.
#[allow(unsafe_code)]
fn write_file(path: &CStr, bytes: &[u8]) -> Result<(), i32> {
    // SAFETY: open, write and close on a C string and a buffer that outlive the calls.
    unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return Err(errno());
        }
        let n = libc::write(fd, bytes.as_ptr().cast(), bytes.len());
        let e = errno();
        libc::close(fd);
        if usize::try_from(n).ok() != Some(bytes.len()) {
            return Err(e);
        }
    }
    Ok(())
}

/// What one entry of the new root is.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Kind {
    /// A directory bound (with what is mounted below it) at its guest path.
    Dir,
    /// A single file bound at its guest path.
    File,
    /// A symbolic link, as on the host (`/bin -> usr/bin`).
    Symlink(CString),
    /// A fresh `/proc` of the plugin's PID namespace (Landlock's rule for it, when a `--dir`
    /// grants it, is added in the plugin once it is mounted).
    Proc,
}

/// One entry of the new root, prepared for the child.
#[derive(Debug)]
struct Entry {
    /// Where it comes from (unused for a symlink and a bare `/proc`).
    source: CString,
    /// Its guest path under [`STAGING`].
    target: CString,
    /// Directories to create under [`STAGING`] before it, outermost first.
    parents: Vec<CString>,
    kind: Kind,
    /// `MOUNT_ATTR_*` flags to set on it and everything below it once mounted.
    attr: u64,
    /// Whether the spawn fails when it cannot be mounted.
    required: bool,
    /// Opened with `RESOLVE_NO_SYMLINKS`: a `--dir` grant, resolved before (see
    /// `grant_path`), which a link planted since must not redirect.
    no_symlinks: bool,
}

/// A plan entry before it is turned into C strings.
#[derive(Debug, Clone)]
struct Planned {
    host: PathBuf,
    guest: PathBuf,
    kind: Kind,
    access: Access,
    /// Device nodes keep their mount's flags: `nodev` would make them unusable.
    device: bool,
    required: bool,
    no_symlinks: bool,
}

const OPEN_TREE_CLONE: libc::c_uint = 1;
const RESOLVE_NO_SYMLINKS: u64 = 0x04;

/// `struct open_how` of `openat2(2)`.
#[repr(C)]
struct OpenHow {
    flags: u64,
    mode: u64,
    resolve: u64,
}
const AT_RECURSIVE: libc::c_uint = 0x8000;
const MOVE_MOUNT_F_EMPTY_PATH: libc::c_uint = 0x4;
const MOUNT_ATTR_RDONLY: u64 = 0x1;
const MOUNT_ATTR_NOSUID: u64 = 0x2;
const MOUNT_ATTR_NODEV: u64 = 0x4;

/// `struct mount_attr` of `mount_setattr(2)`.
#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

/// Everything the child needs to put a native plugin in its own namespaces and root,
/// computed before the fork.
#[derive(Debug)]
pub(crate) struct Jail {
    maps: IdMaps,
    entries: Vec<Entry>,
    /// One slot per entry for the source descriptor the child opens.
    fds: Vec<RawFd>,
    staging: CString,
    /// The working directory, recreated (empty unless granted) in the new root.
    cwd: Option<(Vec<CString>, CString)>,
    /// sandpipe's end stays in sandpipe; the child sends the proxy listener through this one.
    proxy: Option<OwnedFd>,
    /// The plugin's IPC namespace's `kernel.shmmax` and `kernel.shmall`, from the memory cap:
    /// SysV shared memory outlives the processes that made it, so even without a cgroup
    /// (which counts its pages) the namespace cannot hold more than the cap.
    shm_limits: Vec<(&'static CStr, Vec<u8>)>,
    /// Where sandpipe's own command line lies in its memory (`arg_start`, `arg_end` of
    /// `/proc/self/stat`). PID 1 is a fork of sandpipe, so its `/proc/1/cmdline` would be
    /// sandpipe's, `--dir HOST::GUEST` and all, for a plugin granted `/proc`: PID 1 blanks it.
    argv: Option<(usize, usize)>,
    /// The entry granted at `/` (`--dir /`, `--dir /srv/root::/`), which is then the new root
    /// itself instead of a tmpfs, with the other entries mounted on it.
    root: Option<usize>,
}

/// `arg_start` and `arg_end` of this process (fields 48 and 49 of `/proc/self/stat`).
fn argv_range() -> Option<(usize, usize)> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name, which may hold spaces, start with the third.
    let mut fields = stat
        .get(stat.rfind(')')? + 1..)?
        .split_whitespace()
        .skip(45);
    let start = fields.next()?.parse().ok()?;
    let end = fields.next()?.parse().ok()?;
    (start < end).then_some((start, end))
}

impl Jail {
    /// The new root of `program` (as executed: `exec_path`) with `preopens` and start-up
    /// `grants`, and whether to make a proxy listener (sent through `proxy`).
    pub(crate) fn plan(
        program: &Path,
        exec_path: &Path,
        preopens: &[Preopen],
        grants: &[StartupGrant],
        proxy: Option<OwnedFd>,
        max_memory: Option<u64>,
    ) -> Result<Jail, HostError> {
        let mut planned = Vec::new();
        let ro = |host: &Path, required: bool, device: bool| -> Option<Planned> {
            let meta = std::fs::metadata(host).ok()?;
            Some(Planned {
                host: host.to_owned(),
                guest: host.to_owned(),
                kind: if meta.is_dir() { Kind::Dir } else { Kind::File },
                access: Access::ReadOnly,
                device,
                required,
                no_symlinks: false,
            })
        };
        for dir in SYSTEM_DIRS {
            let path = Path::new(dir);
            match std::fs::symlink_metadata(path) {
                Ok(meta) if meta.file_type().is_symlink() => {
                    if let Ok(link) = std::fs::read_link(path) {
                        planned.push(Planned {
                            host: path.to_owned(),
                            guest: path.to_owned(),
                            kind: Kind::Symlink(c_path(&link)?),
                            access: Access::ReadOnly,
                            device: false,
                            required: false,
                            no_symlinks: false,
                        });
                    }
                }
                Ok(_) => planned.extend(ro(path, false, false)),
                Err(_) => {}
            }
        }
        for file in SYSTEM_FILES {
            let path = Path::new(file);
            let device = file.starts_with("/dev/");
            match (std::fs::read_link(path), path.canonicalize()) {
                // A link stays a link (`/etc/localtime` names the zone a plugin reports), its
                // target bound where it is unless a system directory already shows it.
                (Ok(link), Ok(real)) => {
                    planned.push(Planned {
                        host: path.to_owned(),
                        guest: path.to_owned(),
                        kind: Kind::Symlink(c_path(&link)?),
                        access: Access::ReadOnly,
                        device,
                        required: false,
                        no_symlinks: false,
                    });
                    planned.extend(ro(&real, false, device));
                }
                _ => planned.extend(ro(path, false, device)),
            }
        }
        for dev in SINK_DEVICES {
            planned.extend(ro(Path::new(dev), false, true));
        }
        let real = program
            .canonicalize()
            .map_err(|e| spawn_error(program, e))?;
        planned.extend(ro(&real, true, false));
        if exec_path != real {
            // The plugin is executed by the name it was given, which may be a link (an npm
            // bin link): the same link in the new root keeps what the program resolves.
            planned.push(Planned {
                host: exec_path.to_owned(),
                guest: exec_path.to_owned(),
                kind: Kind::Symlink(c_path(&real)?),
                access: Access::ReadOnly,
                device: false,
                required: false,
                no_symlinks: false,
            });
        }
        for grant in grants {
            planned.extend(ro(&grant.path, false, false));
        }
        let mut proc_granted = false;
        for preopen in preopens {
            let fail = |message: String| HostError::Preopen {
                host: preopen.host.clone(),
                message,
            };
            let host = preopen
                .host
                .canonicalize()
                .map_err(|e| fail(e.to_string()))?;
            let guest = guest_path(&preopen.guest).map_err(fail)?;
            let meta = std::fs::metadata(&host).map_err(|e| fail(e.to_string()))?;
            let kind = if host == Path::new("/proc") {
                proc_granted |= guest == Path::new("/proc");
                Kind::Proc
            } else if meta.is_dir() {
                Kind::Dir
            } else {
                Kind::File
            };
            planned.push(Planned {
                host,
                guest,
                kind,
                access: preopen.access,
                device: false,
                required: true,
                no_symlinks: true,
            });
        }
        if !proc_granted {
            planned.push(Planned {
                host: PathBuf::from("/proc"),
                guest: PathBuf::from("/proc"),
                kind: Kind::Proc,
                access: Access::ReadOnly,
                device: false,
                required: true,
                no_symlinks: false,
            });
        }
        let planned = without_covered(planned);
        let staging = Path::new(STAGING);
        let mut entries = Vec::with_capacity(planned.len());
        for p in planned {
            let attr = match (&p.kind, p.access, p.device) {
                (Kind::Symlink(_), _, _) | (_, _, true) => 0,
                (_, Access::ReadOnly, false) => {
                    MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV
                }
                (_, Access::ReadWrite, false) => MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
            };
            let (parents, target) = staged(staging, &p.guest)?;
            entries.push(Entry {
                source: c_path(&p.host)?,
                target,
                parents,
                kind: p.kind,
                attr,
                required: p.required,
                no_symlinks: p.no_symlinks,
            });
        }
        let cwd = match std::env::current_dir() {
            Ok(dir) if dir.is_absolute() => {
                let (mut dirs, staged_dir) = staged(staging, &dir)?;
                dirs.push(staged_dir);
                Some((dirs, c_path(&dir)?))
            }
            _ => None,
        };
        let root = entries
            .iter()
            .position(|e| e.kind == Kind::Dir && e.target.as_bytes() == STAGING.as_bytes());
        Ok(Jail {
            root,
            maps: IdMaps::current(),
            fds: vec![-1; entries.len()],
            entries,
            staging: c_path(staging)?,
            cwd,
            proxy,
            argv: argv_range(),
            shm_limits: max_memory
                .map(|cap| {
                    let pages = cap / super::memory::page_size();
                    vec![
                        (c"/proc/sys/kernel/shmmax", cap.to_string().into_bytes()),
                        (c"/proc/sys/kernel/shmall", pages.to_string().into_bytes()),
                    ]
                })
                .unwrap_or_default(),
        })
    }

    /// In the forked child, after rlimits: become the monitor, fork PID 1 (which builds the
    /// root) and the plugin. Returns only in the plugin, ready for its last confinement and
    /// exec; an error returned in PID 1 or the plugin reaches `spawn` through std's exec-error
    /// pipe. Async-signal-safe: system calls on what [`Jail::plan`] prepared.
    #[allow(unsafe_code)]
    pub(crate) fn enter(&mut self, pause: Pause) -> std::io::Result<()> {
        let os = std::io::Error::last_os_error;
        // SAFETY: system calls on integers, prepared C strings and buffers, and this
        // process's own descriptors.
        unsafe {
            if libc::unshare(NAMESPACES) != 0 {
                return Err(os());
            }
            self.maps
                .write()
                .map_err(|(_, e)| std::io::Error::from_raw_os_error(e))?;
            pause.at(Step::Unshared);
            loopback_up()?;
            // The host's /proc shows the calling process's IPC namespace, which is new.
            for (file, value) in &self.shm_limits {
                write_file(file, value).map_err(std::io::Error::from_raw_os_error)?;
            }
            if let Some(channel) = self.proxy.take() {
                send_listener(channel.as_raw_fd())?;
                drop(channel);
            }
            // No signal may land between the fork and the monitor's handlers.
            let mut all: libc::sigset_t = std::mem::zeroed();
            let mut before: libc::sigset_t = std::mem::zeroed();
            libc::sigfillset(&mut all);
            libc::sigprocmask(libc::SIG_BLOCK, &all, &mut before);
            let mut status_pipe = [0 as libc::c_int; 2];
            if libc::pipe2(status_pipe.as_mut_ptr(), libc::O_CLOEXEC) != 0 {
                return Err(os());
            }
            let [status_read, status_write] = status_pipe;
            let init = libc::fork();
            if init < 0 {
                return Err(os());
            }
            if init > 0 {
                monitor(init, status_read);
            }
            pause.at(Step::Init);
            libc::prctl(
                libc::PR_SET_PDEATHSIG,
                libc::SIGKILL as libc::c_ulong,
                0,
                0,
                0,
            );
            libc::close(status_read);
            // The monitor may have died before the request took effect (sandpipe killed in
            // between, under load): then nobody will ever send it, and this PID 1 would build
            // the root and start the plugin with no parent to end them. `getppid` cannot tell
            // (the monitor is outside this PID namespace, so it reads 0 either way), but the
            // monitor holds the status pipe's only read end now: a write end without a reader
            // polls as an error.
            if !monitor_alive(status_write) {
                libc::_exit(137);
            }
            self.build_root()?;
            pause.at(Step::Root);
            let plugin = libc::fork();
            if plugin < 0 {
                return Err(os());
            }
            if plugin > 0 {
                init_process(plugin, status_write, self.argv);
            }
            pause.at(Step::Plugin);
            libc::prctl(
                libc::PR_SET_PDEATHSIG,
                libc::SIGKILL as libc::c_ulong,
                0,
                0,
                0,
            );
            if libc::getppid() != 1 {
                libc::_exit(137);
            }
            libc::close(status_write);
            libc::sigprocmask(libc::SIG_SETMASK, &before, std::ptr::null_mut());
            drop_capabilities()
        }
    }

    /// In PID 1: the tmpfs root, its binds and `/proc`, then `pivot_root` into it.
    #[allow(unsafe_code)]
    fn build_root(&mut self) -> std::io::Result<()> {
        let os = std::io::Error::last_os_error;
        let null = std::ptr::null::<libc::c_char>();
        // SAFETY: system calls on prepared C strings, integers and stack buffers.
        unsafe {
            if libc::mount(
                null,
                c"/".as_ptr(),
                null,
                libc::MS_REC | libc::MS_PRIVATE,
                std::ptr::null(),
            ) != 0
            {
                return Err(os());
            }
            // Sources first, while nothing covers them: each a detached copy of its mount tree
            // as it is now, so a grant of the staging directory itself (`--dir /tmp`) or of one
            // above it does not take in the root being built there.
            for (entry, fd) in self.entries.iter().zip(self.fds.iter_mut()) {
                if matches!(entry.kind, Kind::Dir | Kind::File) {
                    // The path first (a `--dir` grant's without following any link, see
                    // `no_symlinks`), then a copy of the mount tree there.
                    let how = OpenHow {
                        flags: (libc::O_PATH | libc::O_CLOEXEC) as u64,
                        mode: 0,
                        resolve: if entry.no_symlinks {
                            RESOLVE_NO_SYMLINKS
                        } else {
                            0
                        },
                    };
                    let path = libc::syscall(
                        libc::SYS_openat2,
                        libc::AT_FDCWD,
                        entry.source.as_ptr(),
                        &raw const how,
                        std::mem::size_of::<OpenHow>(),
                    ) as RawFd;
                    *fd = if path < 0 {
                        -1
                    } else {
                        let tree = libc::syscall(
                            libc::SYS_open_tree,
                            path,
                            c"".as_ptr(),
                            OPEN_TREE_CLONE
                                | libc::O_CLOEXEC as libc::c_uint
                                | AT_RECURSIVE
                                | libc::AT_EMPTY_PATH as libc::c_uint,
                        ) as RawFd;
                        libc::close(path);
                        tree
                    };
                    if *fd < 0 && entry.required {
                        return Err(os());
                    }
                }
            }
            let root_attr = match self.root {
                // `--dir /`: that grant is the root, and stays as writable as it was granted.
                Some(i) => {
                    let (entry, fd) = (&self.entries[i], self.fds[i]);
                    if libc::syscall(
                        libc::SYS_move_mount,
                        fd,
                        c"".as_ptr(),
                        libc::AT_FDCWD,
                        self.staging.as_ptr(),
                        MOVE_MOUNT_F_EMPTY_PATH,
                    ) != 0
                    {
                        return Err(os());
                    }
                    set_mount_attr(self.staging.as_ptr(), entry.attr, true)?;
                    entry.attr
                }
                None => {
                    if libc::mount(
                        c"tmpfs".as_ptr(),
                        self.staging.as_ptr(),
                        c"tmpfs".as_ptr(),
                        libc::MS_NOSUID | libc::MS_NODEV,
                        c"mode=0755,size=1m".as_ptr().cast(),
                    ) != 0
                    {
                        return Err(os());
                    }
                    MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV
                }
            };
            for (i, (entry, &fd)) in self.entries.iter().zip(self.fds.iter()).enumerate() {
                if Some(i) == self.root {
                    continue;
                }
                for dir in &entry.parents {
                    libc::mkdir(dir.as_ptr(), 0o755);
                }
                let done = match &entry.kind {
                    Kind::Symlink(link) => {
                        libc::symlink(link.as_ptr(), entry.target.as_ptr());
                        continue;
                    }
                    Kind::Dir | Kind::File if fd < 0 => continue,
                    Kind::Dir | Kind::File => {
                        if entry.kind == Kind::Dir {
                            libc::mkdir(entry.target.as_ptr(), 0o755);
                        } else {
                            let f = libc::open(
                                entry.target.as_ptr(),
                                libc::O_CREAT | libc::O_WRONLY | libc::O_CLOEXEC,
                                0o644,
                            );
                            if f >= 0 {
                                libc::close(f);
                            }
                        }
                        libc::syscall(
                            libc::SYS_move_mount,
                            fd,
                            c"".as_ptr(),
                            libc::AT_FDCWD,
                            entry.target.as_ptr(),
                            MOVE_MOUNT_F_EMPTY_PATH,
                        ) == 0
                    }
                    Kind::Proc => {
                        libc::mkdir(entry.target.as_ptr(), 0o755);
                        let ro = if entry.attr & MOUNT_ATTR_RDONLY != 0 {
                            libc::MS_RDONLY
                        } else {
                            0
                        };
                        libc::mount(
                            c"proc".as_ptr(),
                            entry.target.as_ptr(),
                            c"proc".as_ptr(),
                            libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC | ro,
                            std::ptr::null(),
                        ) == 0
                    }
                };
                if !done {
                    if entry.required {
                        return Err(os());
                    }
                    continue;
                }
                if entry.attr != 0 && entry.kind != Kind::Proc {
                    set_mount_attr(entry.target.as_ptr(), entry.attr, true)?;
                }
            }
            for fd in &mut self.fds {
                if *fd >= 0 {
                    libc::close(*fd);
                    *fd = -1;
                }
            }
            if let Some((dirs, _)) = &self.cwd {
                for dir in dirs {
                    libc::mkdir(dir.as_ptr(), 0o755);
                }
            }
            if libc::chdir(self.staging.as_ptr()) != 0
                || libc::syscall(libc::SYS_pivot_root, c".".as_ptr(), c".".as_ptr()) != 0
                || libc::umount2(c".".as_ptr(), libc::MNT_DETACH) != 0
                || libc::chdir(c"/".as_ptr()) != 0
            {
                return Err(os());
            }
            set_mount_attr(c"/".as_ptr(), root_attr, false)?;
            if let Some((_, cwd)) = &self.cwd {
                libc::chdir(cwd.as_ptr());
            }
        }
        Ok(())
    }
}

/// `mount_setattr(2)` on `target` (and, `recursive`, every mount below it): flags are only
/// added, so those the kernel locks in a user namespace stay as they are.
#[allow(unsafe_code)]
fn set_mount_attr(target: *const libc::c_char, attr: u64, recursive: bool) -> std::io::Result<()> {
    let attr = MountAttr {
        attr_set: attr,
        attr_clr: 0,
        propagation: 0,
        userns_fd: 0,
    };
    let flags = if recursive { libc::AT_RECURSIVE } else { 0 };
    // SAFETY: the kernel reads `attr`, of the size given, and the C string `target`.
    let r = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            libc::AT_FDCWD,
            target,
            flags,
            &raw const attr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Bring up `lo` in the new network namespace (`ioctl(SIOCSIFFLAGS)`).
#[allow(unsafe_code)]
fn loopback_up() -> std::io::Result<()> {
    // SAFETY: a socket of our own, and an ifreq on our stack the kernel reads.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let mut ifr: libc::ifreq = std::mem::zeroed();
        ifr.ifr_name[0] = b'l' as libc::c_char;
        ifr.ifr_name[1] = b'o' as libc::c_char;
        ifr.ifr_ifru.ifru_flags = (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short;
        let r = libc::ioctl(fd, libc::SIOCSIFFLAGS as _, &raw const ifr);
        let e = std::io::Error::last_os_error();
        libc::close(fd);
        if r != 0 {
            return Err(e);
        }
    }
    Ok(())
}

/// Listen on `127.0.0.1:PROXY_PORT` in the new network namespace and send the listener to
/// sandpipe over `channel` (SCM_RIGHTS); the child keeps no copy.
#[allow(unsafe_code)]
fn send_listener(channel: RawFd) -> std::io::Result<()> {
    let os = std::io::Error::last_os_error;
    // SAFETY: a socket of our own; sockaddr_in, iovec, msghdr and the control buffer live on
    // our stack for the calls that read them.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return Err(os());
        }
        let one: libc::c_int = 1;
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_REUSEADDR,
            (&raw const one).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
        let mut addr: libc::sockaddr_in = std::mem::zeroed();
        addr.sin_family = libc::AF_INET as libc::sa_family_t;
        addr.sin_port = PROXY_PORT.to_be();
        addr.sin_addr.s_addr = u32::from(std::net::Ipv4Addr::LOCALHOST).to_be();
        if libc::bind(
            fd,
            (&raw const addr).cast(),
            std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
        ) != 0
            || libc::listen(fd, 128) != 0
        {
            let e = os();
            libc::close(fd);
            return Err(e);
        }
        let mut byte = [0u8; 1];
        let mut iov = libc::iovec {
            iov_base: byte.as_mut_ptr().cast(),
            iov_len: 1,
        };
        // Room for one descriptor, aligned for cmsghdr.
        let mut control = [0u64; 4];
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &raw mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = libc::CMSG_SPACE(std::mem::size_of::<RawFd>() as u32) as _;
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<RawFd>() as u32) as _;
        std::ptr::write_unaligned(libc::CMSG_DATA(cmsg).cast::<RawFd>(), fd);
        let sent = libc::sendmsg(channel, &msg, libc::MSG_NOSIGNAL);
        let e = os();
        libc::close(fd);
        if sent != 1 {
            return Err(e);
        }
    }
    Ok(())
}

/// In sandpipe, after the spawn: the listener the child sent, already queued (the child sends
/// it before the plugin's exec, which `spawn` waited for).
#[allow(unsafe_code)]
pub(crate) fn receive_listener(channel: &OwnedFd) -> std::io::Result<std::net::TcpListener> {
    use std::os::fd::FromRawFd;
    // SAFETY: iovec, msghdr and the control buffer live on our stack across recvmsg; the
    // descriptor read from SCM_RIGHTS is new and ours alone.
    unsafe {
        let mut byte = [0u8; 1];
        let mut iov = libc::iovec {
            iov_base: byte.as_mut_ptr().cast(),
            iov_len: 1,
        };
        let mut control = [0u64; 4];
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &raw mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = std::mem::size_of_val(&control) as _;
        let got = libc::recvmsg(
            channel.as_raw_fd(),
            &mut msg,
            libc::MSG_DONTWAIT | libc::MSG_CMSG_CLOEXEC,
        );
        if got < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        if cmsg.is_null()
            || (*cmsg).cmsg_level != libc::SOL_SOCKET
            || (*cmsg).cmsg_type != libc::SCM_RIGHTS
        {
            return Err(std::io::Error::other(
                "the plugin's proxy listener did not arrive",
            ));
        }
        let fd = std::ptr::read_unaligned(libc::CMSG_DATA(cmsg).cast::<RawFd>());
        Ok(std::net::TcpListener::from_raw_fd(fd))
    }
}

/// The monitor: hold nothing, outlive every signal sandpipe forwards to the group, wait for
/// PID 1 and end exactly as the plugin ended.
#[allow(unsafe_code)]
fn monitor(init: libc::pid_t, status_read: libc::c_int) -> ! {
    extern "C" fn ignore(_: libc::c_int) {}
    // SAFETY: close_range, sigaction, read, waitpid, kill and _exit on integers and our stack.
    unsafe {
        let r = status_read as libc::c_uint;
        // Not std's exec-error pipe, not the plugin's stdio: only the status pipe stays.
        if r > 0 {
            libc::syscall(libc::SYS_close_range, 0u32, r - 1, 0u32);
        }
        libc::syscall(libc::SYS_close_range, r + 1, u32::MAX, 0u32);
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = ignore as *const () as libc::sighandler_t;
        action.sa_flags = libc::SA_RESTART;
        libc::sigemptyset(&mut action.sa_mask);
        for sig in 1..32 {
            if !matches!(
                sig,
                libc::SIGKILL
                    | libc::SIGSTOP
                    | libc::SIGCHLD
                    | libc::SIGSEGV
                    | libc::SIGBUS
                    | libc::SIGILL
                    | libc::SIGFPE
            ) {
                libc::sigaction(sig, &action, std::ptr::null_mut());
            }
        }
        let mut none: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut none);
        libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
        let mut reported: libc::c_int = 0;
        let mut got = 0usize;
        let size = std::mem::size_of::<libc::c_int>();
        while got < size {
            let n = libc::read(
                status_read,
                (&raw mut reported).cast::<u8>().add(got).cast(),
                size - got,
            );
            if n > 0 {
                got += n as usize;
            } else if n == 0 || errno() != libc::EINTR {
                break;
            }
        }
        let mut status = 0;
        while libc::waitpid(init, &mut status, 0) < 0 && errno() == libc::EINTR {}
        if got == size {
            status = reported;
        }
        if libc::WIFEXITED(status) {
            libc::_exit(libc::WEXITSTATUS(status));
        }
        let sig = if libc::WIFSIGNALED(status) {
            libc::WTERMSIG(status)
        } else {
            libc::SIGKILL
        };
        let mut default: libc::sigaction = std::mem::zeroed();
        default.sa_sigaction = libc::SIG_DFL;
        libc::sigaction(sig, &default, std::ptr::null_mut());
        libc::kill(libc::getpid(), sig);
        libc::_exit(128 + sig);
    }
}

/// Whether the status pipe's read end, which only the monitor holds once PID 1 has closed its
/// copy, is still open. Async-signal-safe: one `poll` that does not wait.
#[allow(unsafe_code)]
fn monitor_alive(status_write: libc::c_int) -> bool {
    let mut fd = libc::pollfd {
        fd: status_write,
        events: 0,
        revents: 0,
    };
    // SAFETY: poll on one pollfd on our stack, with no timeout.
    let ready = unsafe { libc::poll(&raw mut fd, 1, 0) };
    !(ready > 0 && fd.revents & libc::POLLERR != 0)
}

/// PID 1 of the namespace: hold only the status pipe, reap every orphan, and report the
/// plugin's raw wait status. Its end takes every other process of the namespace with it.
#[allow(unsafe_code)]
fn init_process(plugin: libc::pid_t, status_write: libc::c_int, argv: Option<(usize, usize)>) -> ! {
    // SAFETY: close_range, waitpid, write and _exit on integers and our stack; the command
    // line's bytes are this process's own copy of sandpipe's initial stack, which nothing in
    // PID 1 reads again.
    unsafe {
        if let Some((start, end)) = argv {
            const NAME: &[u8] = b"sandpipe-init\0";
            let area = start as *mut u8;
            std::ptr::write_bytes(area, 0, end - start);
            std::ptr::copy_nonoverlapping(NAME.as_ptr(), area, NAME.len().min(end - start));
        }
        let w = status_write as libc::c_uint;
        if w > 0 {
            libc::syscall(libc::SYS_close_range, 0u32, w - 1, 0u32);
        }
        libc::syscall(libc::SYS_close_range, w + 1, u32::MAX, 0u32);
        // Its memory is a copy of sandpipe's: nobody may read it through /proc.
        libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0);
        loop {
            let mut status = 0;
            let pid = libc::waitpid(-1, &mut status, 0);
            if pid == plugin {
                libc::write(
                    status_write,
                    (&raw const status).cast(),
                    std::mem::size_of::<libc::c_int>(),
                );
                libc::_exit(0);
            }
            if pid < 0 && errno() != libc::EINTR {
                libc::_exit(1);
            }
        }
    }
}

/// The plugin is root in its own user namespace when sandpipe runs as root: it keeps the uid
/// but gets no capability there (`SECBIT_NOROOT`, an empty bounding set and capability sets).
#[allow(unsafe_code)]
fn drop_capabilities() -> std::io::Result<()> {
    const SECBIT_NOROOT: libc::c_ulong = 1 << 0;
    const SECBIT_NOROOT_LOCKED: libc::c_ulong = 1 << 1;
    const SECBIT_NO_SETUID_FIXUP: libc::c_ulong = 1 << 2;
    const SECBIT_NO_SETUID_FIXUP_LOCKED: libc::c_ulong = 1 << 3;
    const SECBIT_KEEP_CAPS_LOCKED: libc::c_ulong = 1 << 5;
    const SECBIT_NO_CAP_AMBIENT_RAISE: libc::c_ulong = 1 << 6;
    const SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED: libc::c_ulong = 1 << 7;
    #[repr(C)]
    struct Header {
        version: u32,
        pid: libc::c_int,
    }
    #[repr(C)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;
    // SAFETY: prctl on integers; capset reads a header and two data records on our stack.
    unsafe {
        if libc::prctl(
            libc::PR_SET_SECUREBITS,
            SECBIT_NOROOT
                | SECBIT_NOROOT_LOCKED
                | SECBIT_NO_SETUID_FIXUP
                | SECBIT_NO_SETUID_FIXUP_LOCKED
                | SECBIT_KEEP_CAPS_LOCKED
                | SECBIT_NO_CAP_AMBIENT_RAISE
                | SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED,
            0,
            0,
            0,
        ) != 0
        {
            return Err(std::io::Error::last_os_error());
        }
        for cap in 0..64 {
            // EINVAL past the kernel's last capability.
            libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0);
        }
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL,
            0,
            0,
            0,
        );
        let header = Header {
            version: LINUX_CAPABILITY_VERSION_3,
            pid: 0,
        };
        let data = [
            Data {
                effective: 0,
                permitted: 0,
                inheritable: 0,
            },
            Data {
                effective: 0,
                permitted: 0,
                inheritable: 0,
            },
        ];
        if libc::syscall(libc::SYS_capset, &raw const header, data.as_ptr()) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Whether `host` is the host's `/proc`, which a namespaced plugin gets a fresh one of instead.
pub(super) fn is_host_proc(host: &Path) -> bool {
    host.canonicalize().is_ok_and(|p| p == Path::new("/proc"))
}

/// Drop entries another directory entry already shows at the same place with at least their
/// access, and order the rest so that a directory is mounted before what lies inside it.
fn without_covered(planned: Vec<Planned>) -> Vec<Planned> {
    let covers = |outer: &Planned, inner: &Planned| {
        outer.kind == Kind::Dir
            && matches!(inner.kind, Kind::Dir | Kind::File)
            && !std::ptr::eq(outer, inner)
            && (outer.access == Access::ReadWrite || inner.access == Access::ReadOnly)
            && inner
                .host
                .strip_prefix(&outer.host)
                .is_ok_and(|rest| inner.guest == outer.guest.join(rest))
            && (outer.host != inner.host || outer.access != inner.access)
    };
    let mut kept: Vec<Planned> = Vec::new();
    for (i, p) in planned.iter().enumerate() {
        let covered = planned.iter().any(|o| covers(o, p));
        // Exact duplicates: keep the first.
        let duplicate = planned[..i].iter().any(|o| {
            o.host == p.host && o.guest == p.guest && o.access == p.access && o.kind == p.kind
        });
        if !covered && !duplicate {
            kept.push(p.clone());
        }
    }
    kept.sort_by_key(|p| p.guest.components().count());
    kept
}

/// A guest path as the plugin will see it: absolute (relative to the working directory
/// otherwise), without `.` or `..`.
pub(super) fn guest_path(guest: &str) -> Result<PathBuf, String> {
    let absolute = super::grant_path::absolute(Path::new(guest))?;
    let mut clean = PathBuf::from("/");
    for part in absolute.components() {
        match part {
            Component::Normal(p) => clean.push(p),
            Component::RootDir | Component::CurDir => {}
            Component::ParentDir | Component::Prefix(_) => {
                return Err(format!("guest path {guest} must not contain `..`"));
            }
        }
    }
    Ok(clean)
}

/// `guest` under `staging`, and the directories to create before it.
fn staged(staging: &Path, guest: &Path) -> Result<(Vec<CString>, CString), HostError> {
    let mut parents = Vec::new();
    let mut at = staging.to_owned();
    let parts: Vec<_> = guest
        .components()
        .filter_map(|c| match c {
            Component::Normal(p) => Some(p),
            _ => None,
        })
        .collect();
    for (i, part) in parts.iter().enumerate() {
        at.push(part);
        if i + 1 < parts.len() {
            parents.push(c_path(&at)?);
        }
    }
    Ok((parents, c_path(&at)?))
}

fn c_path(path: &Path) -> Result<CString, HostError> {
    CString::new(path.as_os_str().as_bytes()).map_err(|_| HostError::Preopen {
        host: path.to_owned(),
        message: "the path contains a NUL byte".to_owned(),
    })
}

fn spawn_error(program: &Path, source: std::io::Error) -> HostError {
    HostError::Spawn {
        program: program.to_owned(),
        source,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pid_1_sees_the_monitor_gone_when_the_status_pipe_has_no_reader() {
        use std::os::fd::AsRawFd;
        let (read, write) = std::io::pipe().expect("a pipe");
        assert!(monitor_alive(write.as_raw_fd()));
        drop(read);
        assert!(!monitor_alive(write.as_raw_fd()));
    }

    #[test]
    fn guest_paths_are_absolute_and_clean() {
        assert_eq!(guest_path("/data/./x"), Ok(PathBuf::from("/data/x")));
        assert!(guest_path("/data/../etc").is_err());
        assert_eq!(guest_path("/"), Ok(PathBuf::from("/")));
        let cwd = std::env::current_dir().expect("cwd");
        assert_eq!(guest_path("d"), Ok(cwd.join("d")));
    }

    fn planned(host: &str, guest: &str, kind: Kind, access: Access) -> Planned {
        Planned {
            host: host.into(),
            guest: guest.into(),
            kind,
            access,
            device: false,
            required: false,
            no_symlinks: false,
        }
    }

    #[test]
    fn an_entry_shown_by_a_directory_above_it_is_not_mounted_again() {
        let kept = without_covered(vec![
            planned("/opt/py/lib", "/opt/py/lib", Kind::Dir, Access::ReadOnly),
            planned("/opt/py", "/opt/py", Kind::Dir, Access::ReadOnly),
            planned(
                "/opt/py/bin/x",
                "/opt/py/bin/x",
                Kind::File,
                Access::ReadOnly,
            ),
            planned("/work", "/data", Kind::Dir, Access::ReadOnly),
            planned("/work/out", "/data/out", Kind::Dir, Access::ReadWrite),
            planned("/work/in", "/in", Kind::Dir, Access::ReadOnly),
        ]);
        let kept: Vec<_> = kept.iter().map(|p| p.guest.display().to_string()).collect();
        assert_eq!(kept, ["/data", "/in", "/opt/py", "/data/out"]);
    }
}
