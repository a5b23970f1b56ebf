//! A cgroup of its own for each native plugin, where one can be had: the kernel then counts
//! every page the plugin's processes are charged for (memfd, SysV shared memory and tmpfs
//! pages included, which belong to no process and which a resident-set watch never sees) and
//! every process and thread it makes.
//!
//! ```text
//! v2  (systemd's user delegation, a container's own cgroup)
//!     sandpipe's cgroup, with memory and pids among its cgroup.controllers and writable:
//!     sandpipe moves itself into a leaf `sandpipe` below it (a cgroup whose children have
//!     controllers may hold no process), enables +memory +pids in its subtree_control, and
//!     makes `plugin-PID-N` beside that leaf for each plugin:
//!       memory.max = --max-memory, memory.swap.max = 0, pids.max = --max-processes + 2
//! v1  (a hybrid layout, as root): `plugin-PID-N` below sandpipe's own cgroup in the memory
//!     and pids hierarchies:
//!       memory.limit_in_bytes = --max-memory (memsw too where swap accounting is on),
//!       pids.max = --max-processes + 2
//! ```
//!
//! The `+ 2` are sandpipe's own monitor and PID 1 of the plugin's namespaces, which are in the
//! cgroup with it. The forked child joins the cgroup (writes `0` to v2's `cgroup.procs`, to
//! each v1 `tasks`) before anything else it does, so all it starts is in it. A memory charge
//! past the limit makes the kernel's OOM killer end a process of the cgroup, and the session
//! ends as [`crate::Exit::MemoryLimit`] (status 122) when the cgroup's `oom_kill` count
//! moved; a fork past `pids.max` fails with `EAGAIN`, as under `ulimit -u`. The cgroup is
//! removed once the plugin is reaped; ones left by a sandpipe that was killed are removed by
//! the next.
//!
//! Where none can be had (no writable hierarchy with both controllers), [`CgroupSupport`]
//! says why, the start-up line says so, and what holds is the watch (`memory.rs`: resident
//! memory and open memfds against the memory cap, processes and threads against
//! `--max-processes`, sampled, the plugin stopped past either) and the IPC namespace's
//! `shmmax`/`shmall` at the cap. What the watch cannot do is in SECURITY.md.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

/// What this machine lets sandpipe give a native plugin.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum CgroupSupport {
    /// cgroup v2: plugins' cgroups are made below `parent`.
    V2 {
        /// The delegated cgroup sandpipe's plugins are made in.
        parent: PathBuf,
    },
    /// cgroup v1: plugins' cgroups are made below these, one per controller.
    V1 {
        /// sandpipe's own cgroup in the memory hierarchy.
        memory: PathBuf,
        /// sandpipe's own cgroup in the pids hierarchy.
        pids: PathBuf,
    },
    /// No cgroup can be had here.
    Unavailable {
        /// Why, in words.
        reason: String,
    },
}

impl CgroupSupport {
    /// Find out, once per process, where plugins' cgroups can be made.
    pub fn detect() -> CgroupSupport {
        static SUPPORT: OnceLock<CgroupSupport> = OnceLock::new();
        SUPPORT.get_or_init(detect).clone()
    }

    /// Whether native plugins get a cgroup of their own.
    pub fn is_available(&self) -> bool {
        !matches!(self, CgroupSupport::Unavailable { .. })
    }

    /// The start-up line's words for it.
    pub fn describe(&self) -> String {
        match self {
            CgroupSupport::V2 { .. } => "cgroup v2 (memory, pids)".to_owned(),
            CgroupSupport::V1 { .. } => "cgroup v1 (memory, pids)".to_owned(),
            CgroupSupport::Unavailable { reason } => {
                format!("no cgroup ({reason}): memory, memfd pages and processes watched")
            }
        }
    }
}

/// One plugin's cgroup: made before the fork, joined by the child, removed on drop.
#[derive(Debug)]
pub(crate) struct PluginCgroup {
    /// The cgroup's directories (one for v2, memory and pids for v1).
    dirs: Vec<PathBuf>,
    /// The file of each directory the child writes itself into (`cgroup.procs`; v1 `tasks`).
    procs: Vec<CString>,
    /// The file whose `oom_kill` line counts the OOM killer's kills in it.
    events: PathBuf,
}

impl PluginCgroup {
    /// A new cgroup capping memory at `memory` bytes (none: uncapped) and the plugin's
    /// processes and threads at `processes`. `None` where cgroups cannot be had, or when
    /// making this one failed (logged; the start-up line has said what is in force).
    pub(crate) fn create(memory: Option<u64>, processes: Option<u64>) -> Option<PluginCgroup> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let name = format!(
            "plugin-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let pids = processes.map(|n| n.saturating_add(2));
        let made = match CgroupSupport::detect() {
            CgroupSupport::V2 { parent } => {
                let dir = parent.join(&name);
                let events = dir.join("memory.events");
                make(
                    std::slice::from_ref(&dir),
                    &[
                        (&dir, "memory.max", memory),
                        (&dir, "memory.swap.max", memory.map(|_| 0)),
                        (&dir, "pids.max", pids),
                    ],
                )
                .map(|()| PluginCgroup {
                    procs: vec![c_file(&dir, "cgroup.procs")],
                    dirs: vec![dir],
                    events,
                })
            }
            CgroupSupport::V1 { memory: m, pids: p } => {
                let (mdir, pdir) = (m.join(&name), p.join(&name));
                let events = mdir.join("memory.oom_control");
                make(
                    &[mdir.clone(), pdir.clone()],
                    &[
                        (&mdir, "memory.limit_in_bytes", memory),
                        (&pdir, "pids.max", pids),
                    ],
                )
                .map(|()| {
                    // Swap accounting may be off: then there is no such file, and no swap
                    // to count.
                    if let Some(cap) = memory {
                        let _ = std::fs::write(
                            mdir.join("memory.memsw.limit_in_bytes"),
                            cap.to_string(),
                        );
                    }
                    // The child joins through `tasks`: it is single-threaded then, and moving
                    // the calling thread alone skips the global lock a `cgroup.procs` write
                    // takes (an RCU grace period: 6 to 25 ms of every start here).
                    PluginCgroup {
                        procs: vec![c_file(&mdir, "tasks"), c_file(&pdir, "tasks")],
                        dirs: vec![mdir, pdir],
                        events,
                    }
                })
            }
            CgroupSupport::Unavailable { .. } => return None,
        };
        match made {
            Ok(cgroup) => Some(cgroup),
            Err(e) => {
                tracing::warn!("no cgroup for this plugin: {e}");
                None
            }
        }
    }

    /// What the forked child needs to join the cgroup (the cgroup itself stays with the
    /// session, which removes it).
    pub(crate) fn joiner(&self) -> Joiner {
        Joiner(self.procs.clone())
    }

    /// Whether the kernel's OOM killer has killed a process of this cgroup.
    pub(crate) fn oom_killed(&self) -> bool {
        std::fs::read_to_string(&self.events).is_ok_and(|text| {
            text.lines()
                .filter_map(|l| l.strip_prefix("oom_kill "))
                .any(|n| n.trim().parse::<u64>().is_ok_and(|n| n > 0))
        })
    }
}

/// The files of a plugin's cgroup the forked child writes itself into.
#[derive(Debug)]
pub(crate) struct Joiner(Vec<CString>);

impl Joiner {
    /// In the forked child, first of all: move the calling process into the cgroup.
    /// Async-signal-safe: open, write and close on paths prepared before the fork.
    #[allow(unsafe_code)]
    pub(crate) fn join(&self) -> std::io::Result<()> {
        for procs in &self.0 {
            // SAFETY: open, write and close on a C string and a literal that outlive them.
            unsafe {
                let fd = libc::open(procs.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
                if fd < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                let n = libc::write(fd, c"0".as_ptr().cast(), 1);
                let e = std::io::Error::last_os_error();
                libc::close(fd);
                if n != 1 {
                    return Err(e);
                }
            }
        }
        Ok(())
    }
}

impl Drop for PluginCgroup {
    /// Kill what is left in it (a daemon that left the plugin's process group, outside a PID
    /// namespace), then remove it.
    fn drop(&mut self) {
        for dir in &self.dirs {
            if std::fs::write(dir.join("cgroup.kill"), "1").is_err() {
                for pid in std::fs::read_to_string(dir.join("cgroup.procs"))
                    .unwrap_or_default()
                    .split_whitespace()
                    .filter_map(|p| p.parse::<libc::pid_t>().ok())
                {
                    // SAFETY: kill takes integers; these processes are the plugin's own.
                    #[allow(unsafe_code)]
                    unsafe {
                        libc::kill(pid, libc::SIGKILL);
                    }
                }
            }
            remove(dir);
        }
    }
}

/// Make `dirs` and write each limit that is set; on failure, remove what was made.
fn make(dirs: &[PathBuf], limits: &[(&PathBuf, &str, Option<u64>)]) -> std::io::Result<()> {
    let result = (|| {
        for dir in dirs {
            std::fs::create_dir(dir)?;
        }
        for (dir, file, value) in limits {
            if let Some(value) = value {
                std::fs::write(dir.join(file), value.to_string())
                    .map_err(|e| std::io::Error::new(e.kind(), format!("{file}: {e}")))?;
            }
        }
        Ok(())
    })();
    if result.is_err() {
        for dir in dirs {
            remove(dir);
        }
    }
    result
}

/// Remove a plugin's cgroup. Its processes are reaped by now, but the kernel may still be
/// taking the last of them out (`EBUSY`): a few tries, then it is left for the next sandpipe's
/// sweep.
fn remove(dir: &Path) {
    for _ in 0..100 {
        match std::fs::remove_dir(dir) {
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) => std::thread::yield_now(),
            _ => return,
        }
    }
}

fn c_file(dir: &Path, file: &str) -> CString {
    CString::new(dir.join(file).as_os_str().as_bytes())
        .unwrap_or_else(|_| c"/nonexistent".to_owned())
}

/// Where this process's cgroups are: `(hierarchy id, controllers, path)` for each line of
/// `/proc/self/cgroup`.
fn own_cgroups() -> Vec<(String, String, String)> {
    std::fs::read_to_string("/proc/self/cgroup")
        .unwrap_or_default()
        .lines()
        .filter_map(|line| {
            let mut parts = line.splitn(3, ':');
            Some((
                parts.next()?.to_owned(),
                parts.next()?.to_owned(),
                parts.next()?.to_owned(),
            ))
        })
        .collect()
}

/// Mount points of cgroup file systems: `(fstype, super options, mount point)`.
fn cgroup_mounts() -> Vec<(String, String, PathBuf)> {
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .filter_map(|line| {
            let (left, right) = line.split_once(" - ")?;
            let point = left.split(' ').nth(4)?;
            let mut right = right.split(' ');
            let fstype = right.next()?;
            let options = right.nth(1)?;
            fstype.starts_with("cgroup").then(|| {
                (
                    fstype.to_owned(),
                    options.to_owned(),
                    PathBuf::from(unescape_mount_path(point)),
                )
            })
        })
        .collect()
}

/// `/proc/self/mountinfo` writes a space, tab, newline and backslash as `\ooo`.
fn unescape_mount_path(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    let mut rest = path;
    while let Some(i) = rest.find('\\') {
        out.push_str(&rest[..i]);
        let code = rest
            .get(i + 1..i + 4)
            .and_then(|o| u8::from_str_radix(o, 8).ok());
        match code {
            Some(c) => {
                out.push(char::from(c));
                rest = &rest[i + 4..];
            }
            None => {
                out.push('\\');
                rest = &rest[i + 1..];
            }
        }
    }
    out.push_str(rest);
    out
}

fn detect() -> CgroupSupport {
    let own = own_cgroups();
    let mounts = cgroup_mounts();
    let mut why = Vec::new();
    // v2 first: where the unified hierarchy has the controllers, it is the one in charge.
    if let (Some((_, _, path)), Some((_, _, point))) = (
        own.iter().find(|(id, c, _)| id == "0" && c.is_empty()),
        mounts.iter().find(|(t, _, _)| t == "cgroup2"),
    ) {
        match delegate_v2(&point.join(path.trim_start_matches('/'))) {
            Ok(parent) => {
                sweep(&parent);
                return CgroupSupport::V2 { parent };
            }
            Err(e) => why.push(format!("v2: {e}")),
        }
    }
    let v1 = |controller: &str| -> Result<PathBuf, String> {
        let (_, _, path) = own
            .iter()
            .find(|(_, c, _)| c.split(',').any(|c| c == controller))
            .ok_or_else(|| format!("no {controller} hierarchy"))?;
        let (_, _, point) = mounts
            .iter()
            .find(|(t, o, _)| t == "cgroup" && o.split(',').any(|o| o == controller))
            .ok_or_else(|| format!("the {controller} hierarchy is not mounted"))?;
        let dir = point.join(path.trim_start_matches('/'));
        writable(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        Ok(dir)
    };
    match (v1("memory"), v1("pids")) {
        (Ok(memory), Ok(pids)) => {
            sweep(&memory);
            sweep(&pids);
            CgroupSupport::V1 { memory, pids }
        }
        (m, p) => {
            why.extend(
                m.err()
                    .into_iter()
                    .chain(p.err())
                    .map(|e| format!("v1: {e}")),
            );
            CgroupSupport::Unavailable {
                reason: why.join("; "),
            }
        }
    }
}

/// sandpipe's own v2 cgroup `own`, made ready to hold plugins' cgroups: `own` itself when its
/// children already have memory and pids, else `own` after sandpipe moved into a leaf below it.
fn delegate_v2(own: &Path) -> Result<PathBuf, String> {
    let read = |file: &str| std::fs::read_to_string(own.join(file)).unwrap_or_default();
    let has = |text: &str| {
        ["memory", "pids"]
            .iter()
            .all(|c| text.split_whitespace().any(|w| w == *c))
    };
    if !has(&read("cgroup.controllers")) {
        return Err(format!(
            "{} does not have the memory and pids controllers",
            own.display()
        ));
    }
    writable(own).map_err(|e| format!("{}: {e}", own.display()))?;
    if has(&read("cgroup.subtree_control")) {
        return Ok(own.to_owned());
    }
    // A cgroup whose children have controllers holds no process: sandpipe moves into a leaf.
    let leaf = own.join("sandpipe");
    match std::fs::create_dir(&leaf) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(format!("{}: {e}", leaf.display())),
    }
    std::fs::write(leaf.join("cgroup.procs"), std::process::id().to_string())
        .map_err(|e| format!("moving sandpipe into {}: {e}", leaf.display()))?;
    std::fs::write(own.join("cgroup.subtree_control"), "+memory +pids")
        .map_err(|e| format!("enabling memory and pids in {}: {e}", own.display()))?;
    Ok(own.to_owned())
}

/// Whether sandpipe may make a cgroup in `dir`: the directory and its `cgroup.procs` are
/// writable.
fn writable(dir: &Path) -> std::io::Result<()> {
    let path = CString::new(dir.as_os_str().as_bytes()).map_err(std::io::Error::other)?;
    let procs = CString::new(dir.join("cgroup.procs").as_os_str().as_bytes())
        .map_err(std::io::Error::other)?;
    // SAFETY: access on C strings that outlive the calls.
    #[allow(unsafe_code)]
    let ok = unsafe {
        libc::access(path.as_ptr(), libc::W_OK) == 0
            && libc::access(procs.as_ptr(), libc::W_OK) == 0
    };
    if ok {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Remove the empty cgroups of sandpipes that are gone (killed before they could).
fn sweep(parent: &Path) {
    let Ok(entries) = std::fs::read_dir(parent) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix("plugin-"))
            .and_then(|n| n.split('-').next())
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_dir(entry.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mount_points_are_unescaped() {
        assert_eq!(unescape_mount_path(r"/sys/fs/a\040b"), "/sys/fs/a b");
        assert_eq!(unescape_mount_path(r"/x\\"), r"/x\\");
        assert_eq!(unescape_mount_path("/plain"), "/plain");
    }
}
