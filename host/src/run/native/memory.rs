//! The memory cap of a native plugin: resident memory, watched; writable mappings, backstopped.
//!
//! A cap on address space (`RLIMIT_AS`) breaks the runtimes that reserve more than they use:
//! Deno 2 dies at start under 256 MiB ("Oilpan: CagedHeap reservation"), and Go and the JVM
//! need gigabytes. `RLIMIT_DATA` leaves out `PROT_NONE` reservations but still counts V8's
//! writable code range: Deno 2.9 needs between 512 and 768 MiB of it to print one line, while
//! its resident set is about 50 MiB. So the cap counts what a plugin really uses:
//!
//! - **Resident memory, watched.** The resident set of the plugin's process and every
//!   descendant (`/proc/PID/statm`, `/proc/PID/task/*/children`) is sampled, every
//!   [`SLOW`] while below half the cap and every [`FAST`] above it. Past the cap the whole group
//!   is killed and the session ends with [`crate::Exit::MemoryLimit`]. Between two samples a
//!   plugin can overshoot by what it allocates in [`FAST`].
//! - **Writable mappings, backstopped.** `RLIMIT_DATA` is set to [`backstop`]: four times the
//!   cap, at least 1 GiB, so a runaway that allocates faster than the watch samples is refused
//!   by the kernel (`ENOMEM`) long before it can take the host's memory.
//!
//! Where the plugin has a cgroup of its own (`cgroup.rs`) the kernel enforces the cap exactly,
//! memfd and shared memory included, and the watch does not run: it counts a page shared by N
//! processes N times, which would end a plugin that forks many children early.

use std::time::Duration;

/// Sampling interval while the plugin holds less than half its cap.
pub(crate) const SLOW: Duration = Duration::from_millis(100);
/// Sampling interval above half the cap.
pub(crate) const FAST: Duration = Duration::from_millis(10);

/// `RLIMIT_DATA` for a resident-memory cap of `cap` bytes.
pub(crate) fn backstop(cap: u64) -> u64 {
    cap.saturating_mul(4).max(1 << 30)
}

/// Resolves once the resident set of `pid`'s descendants `depth` levels down and below exceeds
/// `cap`; never while it cannot be read. Every sample raises `peak` to the largest resident set
/// seen. `depth` skips sandpipe's own processes above the plugin (a namespaced plugin's monitor
/// and PID 1 are forks of sandpipe that never exec: their resident set is sandpipe's).
///
/// The peak is the plugin's own: `wait4`'s `ru_maxrss` is not, because a forked child starts
/// with its parent's resident set (`dup_mm` copies the high-water mark), so before `exec` a
/// plugin spawned from a large host process "used" the host's memory.
pub(crate) async fn exceeded(pid: u32, depth: u8, cap: u64, peak: &std::sync::atomic::AtomicU64) {
    let page = page_size();
    loop {
        let resident = group_resident_pages(pid, depth).saturating_mul(page);
        peak.fetch_max(resident, std::sync::atomic::Ordering::Relaxed);
        if resident > cap {
            tracing::debug!(pid, resident, cap, "native plugin over its memory cap");
            return;
        }
        tokio::time::sleep(if resident > cap / 2 { FAST } else { SLOW }).await;
    }
}

/// Resident bytes of the plugin below `pid`, `depth` levels down, and all its descendants.
pub(crate) fn plugin_resident(pid: u32, depth: u8) -> u64 {
    group_resident_pages(pid, depth).saturating_mul(page_size())
}

/// Resident pages of `pid`'s descendants from `depth` levels down (0 for processes already
/// gone).
fn group_resident_pages(pid: u32, depth: u8) -> u64 {
    let mut total = 0;
    let mut todo = vec![(pid, 0u8)];
    // Bounded: a process tree deeper or wider than this is counted as far as this goes.
    let mut visited = 0;
    while let Some((p, level)) = todo.pop() {
        visited += 1;
        if visited > 4096 {
            break;
        }
        if level >= depth {
            total += resident_pages(p).unwrap_or(0);
        }
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{p}/task")) else {
            continue;
        };
        for task in tasks.flatten() {
            if let Ok(children) = std::fs::read_to_string(task.path().join("children")) {
                todo.extend(
                    children
                        .split_whitespace()
                        .filter_map(|c| c.parse::<u32>().ok())
                        .map(|c| (c, level.saturating_add(1))),
                );
            }
        }
    }
    total
}

fn resident_pages(pid: u32) -> Option<u64> {
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
    fn this_process_has_a_resident_set() {
        assert!(group_resident_pages(std::process::id(), 0) > 0);
    }
}
