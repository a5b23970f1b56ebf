//! The memory cap of a native plugin: resident memory, watched; writable mappings, backstopped.
//!
//! A cap on address space (`RLIMIT_AS`) breaks the runtimes that reserve more than they use:
//! Deno 2 dies at start under 256 MiB ("Oilpan: CagedHeap reservation"), and Go and the JVM
//! need gigabytes. `RLIMIT_DATA` leaves out `PROT_NONE` reservations but still counts V8's
//! writable code range: Deno 2.9 needs between 512 and 768 MiB of it to print one line, while
//! its resident set is about 50 MiB. So the cap counts what a plugin really uses:
//!
//! - **Resident memory and memfd pages, watched.** The resident set of the plugin's process
//!   and every descendant (`/proc/PID/statm`, `/proc/PID/task/*/children`), plus the pages of
//!   every memfd they hold open (`/proc/PID/fd`, each file once), is sampled, every [`SLOW`]
//!   while below half the cap and every [`FAST`] above it. Past the cap the whole group is
//!   killed and the session ends with [`crate::Exit::MemoryLimit`]. Between two samples a
//!   plugin can overshoot by what it allocates in [`FAST`]. SysV shared memory is held by the
//!   plugin's IPC namespace's `shmmax`/`shmall`, set to the cap (`namespace.rs`).
//! - **Processes and threads, watched** the same way, against `--max-processes`: past it the
//!   group is killed and the session ends with [`crate::Exit::ProcessLimit`] (a cgroup's
//!   `pids.max` would refuse the fork instead; `RLIMIT_NPROC` cannot stand in, as it counts
//!   the host user's every process and does not apply to root).
//! - **Writable mappings, backstopped.** `RLIMIT_DATA` is set to [`backstop`]: four times the
//!   cap, at least 1 GiB, so a runaway that allocates faster than the watch samples is refused
//!   by the kernel (`ENOMEM`) long before it can take the host's memory.
//!
//! Where the plugin has a cgroup of its own (`cgroup.rs`) the kernel enforces both caps
//! exactly, memfd and shared memory included, and the watch does not run: it counts a page
//! shared by N processes N times, which would end a plugin that forks many children early.

use std::time::Duration;

/// Sampling interval while the plugin holds less than half its cap.
pub(crate) const SLOW: Duration = Duration::from_millis(100);
/// Sampling interval above half the cap.
pub(crate) const FAST: Duration = Duration::from_millis(10);

/// `RLIMIT_DATA` for a resident-memory cap of `cap` bytes.
pub(crate) fn backstop(cap: u64) -> u64 {
    cap.saturating_mul(4).max(1 << 30)
}

/// The caps the watch holds a plugin to where it has no cgroup of its own.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Caps {
    /// Bytes of resident memory and memfd pages (`--max-memory`).
    pub(crate) memory: Option<u64>,
    /// Processes and threads (`--max-processes`).
    pub(crate) tasks: Option<u64>,
}

impl Caps {
    /// Whether there is anything to watch.
    pub(crate) fn any(self) -> bool {
        self.memory.is_some() || self.tasks.is_some()
    }
}

/// Which cap the watch found passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Over {
    /// Resident memory and memfd pages past `--max-memory`.
    Memory,
    /// More processes and threads than `--max-processes`.
    Tasks,
}

/// Resolves once the plugin below `pid` (`depth` levels down, see [`Sample::of`]) is past one
/// of `caps`; never while it cannot be read. Every sample raises `peak` to the largest memory
/// seen.
///
/// The peak is the plugin's own: `wait4`'s `ru_maxrss` is not, because a forked child starts
/// with its parent's resident set (`dup_mm` copies the high-water mark), so before `exec` a
/// plugin spawned from a large host process "used" the host's memory.
pub(crate) async fn exceeded(
    pid: u32,
    depth: u8,
    caps: Caps,
    peak: &std::sync::atomic::AtomicU64,
) -> Over {
    loop {
        let sample = Sample::of(pid, depth);
        peak.fetch_max(sample.memory(), std::sync::atomic::Ordering::Relaxed);
        if let Some(over) = sample.over(caps) {
            tracing::debug!(pid, ?sample, ?caps, "native plugin over a cap");
            return over;
        }
        // Only memory near its cap is sampled fast: memory can grow by gigabytes in a tick,
        // and a sample reads every thread's `children`, which costs a plugin with many
        // threads a share of a core every FAST (500 threads: about 30% of one).
        let near = caps.memory.is_some_and(|cap| sample.memory() > cap / 2);
        tokio::time::sleep(if near { FAST } else { SLOW }).await;
    }
}

/// Resident bytes of the plugin below `pid`, `depth` levels down, and all its descendants.
pub(crate) fn plugin_resident(pid: u32, depth: u8) -> u64 {
    Sample::of(pid, depth).resident
}

/// One look at a plugin's processes.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Sample {
    /// Resident bytes of its processes.
    resident: u64,
    /// Bytes of the memfds its processes hold open (each file once, however many hold it). A
    /// memfd's pages belong to no process: written with `write` and never mapped, they are in
    /// no resident set.
    memfd: u64,
    /// Its processes and their threads.
    tasks: u64,
}

impl Sample {
    /// The processes from `depth` levels below `pid` down (`depth` skips sandpipe's own
    /// processes above the plugin: a namespaced plugin's monitor and PID 1 are forks of
    /// sandpipe that never exec, and their resident set is sandpipe's). Found through each
    /// thread's `children`, so a process the plugin started and left is still found: in its
    /// PID namespace an orphan is reparented to PID 1, which is below `pid`.
    fn of(pid: u32, depth: u8) -> Sample {
        let mut sample = Sample::default();
        let mut resident_pages = 0u64;
        let mut memfds = std::collections::HashSet::new();
        let mut todo = vec![(pid, 0u8)];
        // Bounded: past this many processes the walk stops, and what it counted stands (more
        // than any cap on processes the watch is given).
        let mut visited = 0;
        while let Some((p, level)) = todo.pop() {
            visited += 1;
            if visited > LIMIT {
                sample.tasks = sample.tasks.max(LIMIT);
                break;
            }
            let Ok(tasks) = std::fs::read_dir(format!("/proc/{p}/task")) else {
                continue;
            };
            let mut threads = 0;
            for task in tasks.flatten() {
                threads += 1;
                if let Ok(children) = std::fs::read_to_string(task.path().join("children")) {
                    todo.extend(
                        children
                            .split_whitespace()
                            .filter_map(|c| c.parse::<u32>().ok())
                            .map(|c| (c, level.saturating_add(1))),
                    );
                }
            }
            if level >= depth {
                sample.tasks += threads;
                resident_pages += resident_pages_of(p).unwrap_or(0);
                if let Ok(fds) = std::fs::read_dir(format!("/proc/{p}/fd")) {
                    sample.memfd += memfd_bytes_of(fds.flatten().map(|e| e.path()), &mut memfds);
                }
            }
        }
        sample.resident = resident_pages.saturating_mul(page_size());
        sample
    }

    /// Bytes counted against `--max-memory`: the resident set and the memfds.
    fn memory(self) -> u64 {
        self.resident.saturating_add(self.memfd)
    }

    /// The first of `caps` this sample is past.
    fn over(self, caps: Caps) -> Option<Over> {
        // Processes first: many of them are many resident sets, and the one cap passed is the
        // cause of the other.
        if caps.tasks.is_some_and(|cap| self.tasks > cap) {
            Some(Over::Tasks)
        } else if caps.memory.is_some_and(|cap| self.memory() > cap) {
            Some(Over::Memory)
        } else {
            None
        }
    }
}

/// Most processes one sample walks.
const LIMIT: u64 = 8192;

/// The bytes of the memfds among `fds` (paths of `/proc/PID/fd` entries) not yet in `seen`,
/// which gains them: a memfd's link reads `/memfd:NAME (deleted)`, and its allocated blocks
/// are its pages (a sparse memfd counts what was written, as the kernel charges it).
fn memfd_bytes_of(
    fds: impl Iterator<Item = std::path::PathBuf>,
    seen: &mut std::collections::HashSet<(u64, u64)>,
) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let mut bytes = 0u64;
    for fd in fds {
        let is_memfd = std::fs::read_link(&fd).is_ok_and(|target| {
            target
                .as_os_str()
                .as_encoded_bytes()
                .starts_with(b"/memfd:")
        });
        if !is_memfd {
            continue;
        }
        let Ok(meta) = std::fs::metadata(&fd) else {
            continue;
        };
        if seen.insert((meta.dev(), meta.ino())) {
            bytes = bytes.saturating_add(meta.blocks().saturating_mul(512));
        }
    }
    bytes
}

fn resident_pages_of(pid: u32) -> Option<u64> {
    let statm = std::fs::read_to_string(format!("/proc/{pid}/statm")).ok()?;
    statm.split_whitespace().nth(1)?.parse().ok()
}

/// The system page size.
pub(crate) fn page_size() -> u64 {
    // SAFETY: sysconf has no preconditions.
    #[allow(unsafe_code)]
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    u64::try_from(size).ok().filter(|s| *s > 0).unwrap_or(4096)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_backstop_leaves_room_for_reservations() {
        assert_eq!(backstop(256 << 20), 1 << 30);
        assert_eq!(backstop(1 << 30), 4 << 30);
        assert_eq!(backstop(u64::MAX), u64::MAX);
    }

    #[test]
    fn this_process_has_a_resident_set_and_its_threads() {
        let sample = Sample::of(std::process::id(), 0);
        assert!(sample.resident > 0, "{sample:?}");
        assert!(sample.tasks >= 1, "{sample:?}");
        assert_eq!(sample.over(Caps::default()), None);
        let tight = Caps {
            memory: None,
            tasks: Some(0),
        };
        assert_eq!(sample.over(tight), Some(Over::Tasks));
    }

    #[test]
    #[allow(unsafe_code)]
    fn a_memfd_is_counted_once_however_many_descriptors_hold_it() {
        use std::io::Write;
        use std::os::fd::{AsRawFd, FromRawFd};
        // SAFETY: memfd_create takes a NUL-terminated name and flags; the descriptor it returns
        // is owned by the File from here on.
        let fd = unsafe { libc::memfd_create(c"sandpipe-test".as_ptr(), libc::MFD_CLOEXEC) };
        assert!(fd >= 0, "{}", std::io::Error::last_os_error());
        let mut file = unsafe { std::fs::File::from_raw_fd(fd) };
        file.write_all(&vec![1u8; 1 << 20]).expect("write");
        let twice = file.try_clone().expect("dup");
        let paths = [file.as_raw_fd(), twice.as_raw_fd()]
            .map(|fd| std::path::PathBuf::from(format!("/proc/self/fd/{fd}")));
        let not_memfd = std::path::PathBuf::from("/proc/self/fd/0");
        let mut seen = std::collections::HashSet::new();
        let bytes = memfd_bytes_of(paths.iter().cloned().chain([not_memfd]), &mut seen);
        assert_eq!(bytes, 1 << 20);
        assert_eq!(
            memfd_bytes_of(paths.into_iter(), &mut seen),
            0,
            "seen already"
        );
    }
}
