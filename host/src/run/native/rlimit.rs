//! The resource limits a native plugin starts under, computed in the host and set in the forked
//! child before exec (so the plugin, and every process it starts, inherits them).

use std::time::Duration;

use crate::policy::Policy;

/// The limits to set, each as `(soft, hard)`. `None` keeps what sandpipe itself runs under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Limits {
    /// `RLIMIT_DATA`, the backstop of [`Policy::max_memory`] (see `native/memory.rs`): private
    /// writable memory, not address space a runtime only reserves.
    pub(crate) data: Option<(u64, u64)>,
    /// `RLIMIT_CPU` in seconds, from [`Policy::max_cpu_time`]: SIGXCPU at the soft limit, SIGKILL
    /// one second later at the hard limit for a plugin that ignores SIGXCPU.
    pub(crate) cpu_seconds: Option<(u64, u64)>,
    /// `RLIMIT_NOFILE`, from [`Policy::max_open_files`].
    pub(crate) open_files: Option<(u64, u64)>,
}

impl Limits {
    /// The limits `policy` asks for, never above the hard limits sandpipe itself has: an
    /// unprivileged process cannot raise a hard limit, and asking would fail the spawn.
    pub(crate) fn for_policy(policy: &Policy) -> Limits {
        Limits {
            data: policy
                .max_memory
                .map(super::memory::backstop)
                .map(|b| (b, b)),
            cpu_seconds: policy.max_cpu_time.map(|d| {
                let soft = cpu_seconds(d);
                clamp((soft, soft.saturating_add(1)), hard_limit(Resource::Cpu))
            }),
            open_files: policy
                .max_open_files
                .map(|n| clamp((n, n), hard_limit(Resource::OpenFiles))),
        }
    }

    /// The CPU time the kernel will actually allow (the soft limit), if limited.
    pub(crate) fn cpu_time(&self) -> Option<Duration> {
        self.cpu_seconds.map(|(soft, _)| Duration::from_secs(soft))
    }

    /// Set every limit on the calling process, and `RLIMIT_CORE` to 0 (a plugin killed by
    /// SIGXCPU or a crash signal must not leave a core file in the working directory).
    ///
    /// Runs in the forked child before exec: only `setrlimit` on values already computed, no
    /// allocation, no locks.
    pub(crate) fn apply(&self) -> std::io::Result<()> {
        set(Resource::Core, (0, 0))?;
        if let Some(v) = self.data {
            set(Resource::Data, v)?;
        }
        if let Some(v) = self.cpu_seconds {
            set(Resource::Cpu, v)?;
        }
        if let Some(v) = self.open_files {
            set(Resource::OpenFiles, v)?;
        }
        Ok(())
    }
}

/// `RLIMIT_CPU` counts whole seconds: round up, and never 0 (which the kernel reads as "already
/// over").
pub(crate) fn cpu_seconds(d: Duration) -> u64 {
    let whole = d.as_secs() + u64::from(d.subsec_nanos() > 0);
    whole.max(1)
}

fn clamp((soft, hard): (u64, u64), ceiling: Option<u64>) -> (u64, u64) {
    match ceiling {
        Some(ceiling) => (soft.min(ceiling), hard.min(ceiling)),
        None => (soft, hard),
    }
}

#[derive(Debug, Clone, Copy)]
enum Resource {
    Data,
    Cpu,
    OpenFiles,
    Core,
}

// glibc and musl type the resource argument differently; a macro keeps one spelling.
macro_rules! with_resource {
    ($r:expr, |$id:ident| $body:expr) => {
        match $r {
            Resource::Data => {
                let $id = libc::RLIMIT_DATA;
                $body
            }
            Resource::Cpu => {
                let $id = libc::RLIMIT_CPU;
                $body
            }
            Resource::OpenFiles => {
                let $id = libc::RLIMIT_NOFILE;
                $body
            }
            Resource::Core => {
                let $id = libc::RLIMIT_CORE;
                $body
            }
        }
    };
}

/// sandpipe's own hard limit for `r`, `None` when unlimited (or unreadable).
#[allow(unsafe_code)]
// `rlim_t` is u64 on Linux but not on every Unix.
#[allow(clippy::unnecessary_cast)]
fn hard_limit(r: Resource) -> Option<u64> {
    let mut current = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one `rlimit` into memory we own and keep alive for the call.
    let ok = with_resource!(r, |id| unsafe { libc::getrlimit(id, &mut current) }) == 0;
    (ok && current.rlim_max != libc::RLIM_INFINITY).then_some(current.rlim_max as u64)
}

#[allow(unsafe_code)]
fn set(r: Resource, (soft, hard): (u64, u64)) -> std::io::Result<()> {
    let limit = libc::rlimit {
        rlim_cur: soft as libc::rlim_t,
        rlim_max: hard as libc::rlim_t,
    };
    // SAFETY: setrlimit reads one `rlimit` from our stack; it is async-signal-safe, so it may
    // run between fork and exec.
    if with_resource!(r, |id| unsafe { libc::setrlimit(id, &limit) }) != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_time_rounds_up_to_whole_seconds_and_never_to_zero() {
        let cases = [
            (Duration::ZERO, 1),
            (Duration::from_millis(1), 1),
            (Duration::from_secs(1), 1),
            (Duration::from_millis(1500), 2),
            (Duration::from_secs(60), 60),
        ];
        for (d, want) in cases {
            assert_eq!(cpu_seconds(d), want, "{d:?}");
        }
    }

    #[test]
    fn limits_never_exceed_the_hosts_hard_limit() {
        assert_eq!(clamp((10, 11), None), (10, 11));
        assert_eq!(clamp((10, 11), Some(10)), (10, 10));
        assert_eq!(clamp((4096, 4096), Some(1024)), (1024, 1024));
    }

    #[test]
    fn policy_maps_to_limits() {
        let policy = Policy::default()
            .max_cpu_time(Some(Duration::from_millis(2500)))
            .max_open_files(Some(64));
        let limits = Limits::for_policy(&policy);
        assert_eq!(limits.data, Some((1 << 30, 1 << 30)));
        // This test process's hard limits are far above 3 s and 64 files.
        assert_eq!(limits.cpu_seconds, Some((3, 4)));
        assert_eq!(limits.cpu_time(), Some(Duration::from_secs(3)));
        assert_eq!(limits.open_files, Some((64, 64)));
        let none = Limits::for_policy(
            &Policy::default()
                .max_memory(None)
                .max_open_files(None)
                .max_cpu_time(None),
        );
        assert_eq!(none.data, None);
        assert_eq!(none.cpu_seconds, None);
        assert_eq!(none.open_files, None);
    }
}
