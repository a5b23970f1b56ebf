//! The system calls a native plugin may make: an allow-list, compiled to seccomp BPF once per
//! process and installed in the plugin just before exec (after Landlock), so it holds for
//! everything the plugin starts.
//!
//! The model is Docker's default profile and systemd's `@system-service` set: the calls an
//! ordinary program makes are named ([`ALLOWED`], by group), and everything else is refused.
//! Four filters are stacked; the kernel runs all of them and the last installed one that
//! refuses decides the errno:
//!
//! ```text
//! 1  allow-list   a call not in ALLOWED                     ENOSYS  (what a kernel without
//!                                                                    it answers: libc and
//!                                                                    runtimes fall back)
//! 2  refused      REFUSED (io_uring, mounts, namespaces,     EPERM
//!                 ptrace, BPF, keyrings, modules, clocks, ...)
//!                 clone with a CLONE_NEW* flag, clone3,
//!                 ioctl TIOCSTI / TIOCLINUX,
//!                 socket(AF_NETLINK) other than NETLINK_ROUTE,
//!                 personality other than Linux's own
//! 3  families     socket() of a family but INET, INET6,      EAFNOSUPPORT (as a kernel built
//!                 NETLINK and UNIX (VSOCK, PACKET, ALG, ...)               without it)
//! 4  unix         socket(AF_UNIX)                            EACCES
//! ```
//!
//! `socketpair(AF_UNIX)` stays (runtimes talk to their own children over it); a Unix socket
//! of a path or an abstract name cannot be made, by `socket()` or by io_uring, which is
//! refused whole. The allow-list holds on every ABI: the filter kills a call made through
//! another architecture's entry (i386 `int 0x80` on x86-64), and an x32 call (its number
//! carries bit 30) is in no list, so it is refused. `clone3` is refused with `ENOSYS` because
//! its flags are behind a pointer the filter cannot read: glibc and musl fall back on `clone`,
//! whose flags it can.
//!
//! Each group in [`ALLOWED`] says why it is there; docs/native.md has the table for users.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};

/// System calls numbered alike on every architecture (the unified table from 424 on) that
/// this `libc` does not name on all of them.
mod nr {
    pub(super) const CACHESTAT: libc::c_long = 451;
    pub(super) const FCHMODAT2: libc::c_long = 452;
    pub(super) const FUTEX_WAKE: libc::c_long = 454;
    pub(super) const FUTEX_WAIT: libc::c_long = 455;
    pub(super) const FUTEX_REQUEUE: libc::c_long = 456;
    #[cfg(target_arch = "x86_64")]
    pub(super) const MAP_SHADOW_STACK: libc::c_long = 453;
}

/// What a plugin may call, by group. Calls that only exist on x86-64 (the pre-`*at` file
/// calls, `fork`, `arch_prctl`, ...) are in [`LEGACY`].
const ALLOWED: &[(&str, &[libc::c_long])] = &[
    (
        // Threads, processes and their ids. `clone`'s namespace flags and `clone3` are
        // refused by filter 2; `setuid` and friends change nothing a plugin without
        // capabilities could not already be.
        "processes",
        &[
            libc::SYS_clone,
            libc::SYS_execve,
            libc::SYS_execveat,
            libc::SYS_exit,
            libc::SYS_exit_group,
            libc::SYS_wait4,
            libc::SYS_waitid,
            libc::SYS_kill,
            libc::SYS_tkill,
            libc::SYS_tgkill,
            libc::SYS_rt_sigqueueinfo,
            libc::SYS_rt_tgsigqueueinfo,
            libc::SYS_pidfd_open,
            libc::SYS_pidfd_send_signal,
            libc::SYS_pidfd_getfd,
            libc::SYS_getpid,
            libc::SYS_getppid,
            libc::SYS_gettid,
            libc::SYS_getpgid,
            libc::SYS_setpgid,
            libc::SYS_getsid,
            libc::SYS_setsid,
            libc::SYS_getuid,
            libc::SYS_geteuid,
            libc::SYS_getgid,
            libc::SYS_getegid,
            libc::SYS_getresuid,
            libc::SYS_getresgid,
            libc::SYS_getgroups,
            libc::SYS_setuid,
            libc::SYS_setgid,
            libc::SYS_setreuid,
            libc::SYS_setregid,
            libc::SYS_setresuid,
            libc::SYS_setresgid,
            libc::SYS_setfsuid,
            libc::SYS_setfsgid,
            libc::SYS_setgroups,
            libc::SYS_capget,
            libc::SYS_capset,
            libc::SYS_prctl,
            libc::SYS_personality,
            libc::SYS_set_tid_address,
            libc::SYS_set_robust_list,
            libc::SYS_get_robust_list,
            libc::SYS_rseq,
            libc::SYS_restart_syscall,
            libc::SYS_umask,
            libc::SYS_uname,
            libc::SYS_sysinfo,
            libc::SYS_getrusage,
            libc::SYS_times,
            libc::SYS_getrlimit,
            libc::SYS_setrlimit,
            libc::SYS_prlimit64,
            libc::SYS_getcpu,
            libc::SYS_getrandom,
            // Only ever narrow what the plugin may do.
            libc::SYS_seccomp,
            libc::SYS_landlock_create_ruleset,
            libc::SYS_landlock_add_rule,
            libc::SYS_landlock_restrict_self,
        ],
    ),
    (
        // Scheduling of the plugin's own threads.
        "scheduling",
        &[
            libc::SYS_sched_yield,
            libc::SYS_sched_getaffinity,
            libc::SYS_sched_setaffinity,
            libc::SYS_sched_getparam,
            libc::SYS_sched_setparam,
            libc::SYS_sched_getscheduler,
            libc::SYS_sched_setscheduler,
            libc::SYS_sched_get_priority_max,
            libc::SYS_sched_get_priority_min,
            libc::SYS_sched_rr_get_interval,
            libc::SYS_sched_getattr,
            libc::SYS_sched_setattr,
            libc::SYS_getpriority,
            libc::SYS_setpriority,
            libc::SYS_ioprio_get,
            libc::SYS_ioprio_set,
            libc::SYS_futex,
            libc::SYS_futex_waitv,
            nr::FUTEX_WAKE,
            nr::FUTEX_WAIT,
            nr::FUTEX_REQUEUE,
            libc::SYS_membarrier,
        ],
    ),
    (
        "signals",
        &[
            libc::SYS_rt_sigaction,
            libc::SYS_rt_sigprocmask,
            libc::SYS_rt_sigreturn,
            libc::SYS_rt_sigpending,
            libc::SYS_rt_sigtimedwait,
            libc::SYS_rt_sigsuspend,
            libc::SYS_sigaltstack,
            libc::SYS_signalfd4,
        ],
    ),
    (
        // Reading clocks and sleeping; setting a clock is refused.
        "time",
        &[
            libc::SYS_clock_gettime,
            libc::SYS_clock_getres,
            libc::SYS_clock_nanosleep,
            libc::SYS_nanosleep,
            libc::SYS_gettimeofday,
            libc::SYS_getitimer,
            libc::SYS_setitimer,
            libc::SYS_timer_create,
            libc::SYS_timer_settime,
            libc::SYS_timer_gettime,
            libc::SYS_timer_getoverrun,
            libc::SYS_timer_delete,
            libc::SYS_timerfd_create,
            libc::SYS_timerfd_settime,
            libc::SYS_timerfd_gettime,
        ],
    ),
    (
        // The plugin's own memory. memfd and SysV shared memory are counted by the plugin's
        // cgroup where it has one (`cgroup.rs`).
        "memory",
        &[
            libc::SYS_brk,
            libc::SYS_mmap,
            libc::SYS_munmap,
            libc::SYS_mremap,
            libc::SYS_mprotect,
            libc::SYS_madvise,
            libc::SYS_msync,
            libc::SYS_mincore,
            libc::SYS_mlock,
            libc::SYS_mlock2,
            libc::SYS_munlock,
            libc::SYS_mlockall,
            libc::SYS_munlockall,
            libc::SYS_mbind,
            libc::SYS_get_mempolicy,
            libc::SYS_set_mempolicy,
            libc::SYS_set_mempolicy_home_node,
            libc::SYS_memfd_create,
            libc::SYS_pkey_alloc,
            libc::SYS_pkey_free,
            libc::SYS_pkey_mprotect,
            libc::SYS_mseal,
            libc::SYS_remap_file_pages,
        ],
    ),
    (
        // Files, as Landlock and the plugin's root let it see them.
        "files",
        &[
            libc::SYS_read,
            libc::SYS_write,
            libc::SYS_readv,
            libc::SYS_writev,
            libc::SYS_pread64,
            libc::SYS_pwrite64,
            libc::SYS_preadv,
            libc::SYS_pwritev,
            libc::SYS_preadv2,
            libc::SYS_pwritev2,
            libc::SYS_openat,
            libc::SYS_openat2,
            libc::SYS_close,
            libc::SYS_close_range,
            libc::SYS_dup,
            libc::SYS_dup3,
            libc::SYS_fcntl,
            libc::SYS_ioctl,
            libc::SYS_flock,
            libc::SYS_lseek,
            libc::SYS_fstat,
            libc::SYS_newfstatat,
            libc::SYS_statx,
            libc::SYS_statfs,
            libc::SYS_fstatfs,
            libc::SYS_faccessat,
            libc::SYS_faccessat2,
            libc::SYS_readlinkat,
            libc::SYS_getdents64,
            libc::SYS_getcwd,
            libc::SYS_chdir,
            libc::SYS_fchdir,
            libc::SYS_mkdirat,
            libc::SYS_mknodat,
            libc::SYS_unlinkat,
            libc::SYS_renameat,
            libc::SYS_renameat2,
            libc::SYS_linkat,
            libc::SYS_symlinkat,
            libc::SYS_fchmod,
            libc::SYS_fchmodat,
            nr::FCHMODAT2,
            libc::SYS_fchown,
            libc::SYS_fchownat,
            libc::SYS_truncate,
            libc::SYS_ftruncate,
            libc::SYS_fallocate,
            libc::SYS_fsync,
            libc::SYS_fdatasync,
            libc::SYS_sync,
            libc::SYS_syncfs,
            libc::SYS_sync_file_range,
            libc::SYS_fadvise64,
            libc::SYS_readahead,
            libc::SYS_utimensat,
            libc::SYS_pipe2,
            libc::SYS_sendfile,
            libc::SYS_splice,
            libc::SYS_tee,
            libc::SYS_vmsplice,
            libc::SYS_copy_file_range,
            nr::CACHESTAT,
            libc::SYS_getxattr,
            libc::SYS_lgetxattr,
            libc::SYS_fgetxattr,
            libc::SYS_listxattr,
            libc::SYS_llistxattr,
            libc::SYS_flistxattr,
            libc::SYS_setxattr,
            libc::SYS_lsetxattr,
            libc::SYS_fsetxattr,
            libc::SYS_removexattr,
            libc::SYS_lremovexattr,
            libc::SYS_fremovexattr,
            libc::SYS_inotify_init1,
            libc::SYS_inotify_add_watch,
            libc::SYS_inotify_rm_watch,
            libc::SYS_eventfd2,
            // Linux AIO (databases): it reads and writes descriptors the plugin already has.
            libc::SYS_io_setup,
            libc::SYS_io_destroy,
            libc::SYS_io_submit,
            libc::SYS_io_getevents,
            libc::SYS_io_cancel,
        ],
    ),
    (
        "polling",
        &[
            libc::SYS_pselect6,
            libc::SYS_ppoll,
            libc::SYS_epoll_create1,
            libc::SYS_epoll_ctl,
            libc::SYS_epoll_pwait,
            libc::SYS_epoll_pwait2,
        ],
    ),
    (
        // Sockets of the families filters 3 and 4 leave: TCP and UDP in the plugin's own
        // network namespace (loopback and sandpipe's proxy), netlink route (`getifaddrs`),
        // and `socketpair`.
        "network",
        &[
            libc::SYS_socket,
            libc::SYS_socketpair,
            libc::SYS_bind,
            libc::SYS_listen,
            libc::SYS_accept,
            libc::SYS_accept4,
            libc::SYS_connect,
            libc::SYS_getsockname,
            libc::SYS_getpeername,
            libc::SYS_sendto,
            libc::SYS_recvfrom,
            libc::SYS_sendmsg,
            libc::SYS_recvmsg,
            libc::SYS_sendmmsg,
            libc::SYS_recvmmsg,
            libc::SYS_shutdown,
            libc::SYS_setsockopt,
            libc::SYS_getsockopt,
        ],
    ),
    (
        // SysV and POSIX IPC, inside the plugin's own IPC namespace.
        "ipc",
        &[
            libc::SYS_shmget,
            libc::SYS_shmat,
            libc::SYS_shmdt,
            libc::SYS_shmctl,
            libc::SYS_semget,
            libc::SYS_semop,
            libc::SYS_semtimedop,
            libc::SYS_semctl,
            libc::SYS_msgget,
            libc::SYS_msgsnd,
            libc::SYS_msgrcv,
            libc::SYS_msgctl,
            libc::SYS_mq_open,
            libc::SYS_mq_unlink,
            libc::SYS_mq_timedsend,
            libc::SYS_mq_timedreceive,
            libc::SYS_mq_notify,
            libc::SYS_mq_getsetattr,
        ],
    ),
];

/// The x86-64 calls that newer architectures only have as their `*at` or `2` forms.
#[cfg(target_arch = "x86_64")]
const LEGACY: &[libc::c_long] = &[
    libc::SYS_fork,
    libc::SYS_vfork,
    libc::SYS_arch_prctl,
    libc::SYS_open,
    libc::SYS_creat,
    libc::SYS_stat,
    libc::SYS_lstat,
    libc::SYS_access,
    libc::SYS_readlink,
    libc::SYS_getdents,
    libc::SYS_mkdir,
    libc::SYS_rmdir,
    libc::SYS_unlink,
    libc::SYS_rename,
    libc::SYS_link,
    libc::SYS_symlink,
    libc::SYS_chmod,
    libc::SYS_chown,
    libc::SYS_lchown,
    libc::SYS_mknod,
    libc::SYS_utime,
    libc::SYS_utimes,
    libc::SYS_futimesat,
    libc::SYS_dup2,
    libc::SYS_pipe,
    libc::SYS_select,
    libc::SYS_poll,
    libc::SYS_epoll_create,
    libc::SYS_epoll_wait,
    libc::SYS_inotify_init,
    libc::SYS_eventfd,
    libc::SYS_signalfd,
    libc::SYS_pause,
    libc::SYS_alarm,
    libc::SYS_time,
    libc::SYS_getpgrp,
    nr::MAP_SHADOW_STACK,
];
#[cfg(not(target_arch = "x86_64"))]
const LEGACY: &[libc::c_long] = &[];

/// Named refusals (`EPERM`): what a plugin has no business doing, whether or not it is in the
/// allow-list, so the answer is "not permitted" rather than "no such call".
const REFUSED: &[libc::c_long] = &[
    // io_uring opens files and makes sockets without the system calls a filter sees.
    libc::SYS_io_uring_setup,
    libc::SYS_io_uring_enter,
    libc::SYS_io_uring_register,
    // Namespaces and mounts: the plugin's own are made for it.
    libc::SYS_unshare,
    libc::SYS_setns,
    libc::SYS_mount,
    libc::SYS_umount2,
    libc::SYS_pivot_root,
    libc::SYS_chroot,
    libc::SYS_open_tree,
    libc::SYS_move_mount,
    libc::SYS_fsopen,
    libc::SYS_fsconfig,
    libc::SYS_fsmount,
    libc::SYS_fspick,
    libc::SYS_mount_setattr,
    libc::SYS_name_to_handle_at,
    libc::SYS_open_by_handle_at,
    // Other processes' memory.
    libc::SYS_ptrace,
    libc::SYS_process_vm_readv,
    libc::SYS_process_vm_writev,
    libc::SYS_process_madvise,
    libc::SYS_kcmp,
    // The kernel's own interfaces.
    libc::SYS_bpf,
    libc::SYS_perf_event_open,
    libc::SYS_fanotify_init,
    libc::SYS_keyctl,
    libc::SYS_add_key,
    libc::SYS_request_key,
    libc::SYS_kexec_load,
    libc::SYS_kexec_file_load,
    libc::SYS_init_module,
    libc::SYS_finit_module,
    libc::SYS_delete_module,
    libc::SYS_userfaultfd,
    libc::SYS_syslog,
    libc::SYS_acct,
    libc::SYS_quotactl,
    libc::SYS_swapon,
    libc::SYS_swapoff,
    libc::SYS_reboot,
    libc::SYS_sethostname,
    libc::SYS_setdomainname,
    libc::SYS_settimeofday,
    libc::SYS_clock_settime,
    libc::SYS_clock_adjtime,
    libc::SYS_adjtimex,
    libc::SYS_vhangup,
    libc::SYS_memfd_secret,
    // Flags behind a pointer (see the module docs): ENOSYS in filter 1, kept out of here.
];

/// Namespace flags `clone` must not carry (`CLONE_NEWTIME` shares its bit with the exit
/// signal in `clone`'s flags, so it is left to `unshare`, refused outright).
const CLONE_NEW: libc::c_int = libc::CLONE_NEWNS
    | libc::CLONE_NEWCGROUP
    | libc::CLONE_NEWUTS
    | libc::CLONE_NEWIPC
    | libc::CLONE_NEWUSER
    | libc::CLONE_NEWPID
    | libc::CLONE_NEWNET;

/// Socket families a plugin may make with `socket()` (filter 3 refuses the others).
const FAMILIES: &[libc::c_int] = &[
    libc::AF_INET,
    libc::AF_INET6,
    libc::AF_NETLINK,
    libc::AF_UNIX,
];

/// `personality` values that change nothing a plugin could use (Docker's list): Linux's own,
/// `UNAME26`, `PER_LINUX32` with and without it, and the query `0xffffffff`.
const PERSONALITIES: &[u64] = &[0, 0x0002_0000, 0x0008, 0x0002_0008, 0xffff_ffff];

/// The compiled filters, in the order they are installed.
#[derive(Debug)]
pub(crate) struct SyscallFilter(Vec<BpfProgram>);

impl SyscallFilter {
    /// The filters for this machine's architecture (x86_64 or aarch64), compiled once per
    /// process: each native start installs the same programs.
    pub(crate) fn get() -> Result<&'static SyscallFilter, String> {
        static FILTER: OnceLock<Result<SyscallFilter, String>> = OnceLock::new();
        FILTER
            .get_or_init(Self::build)
            .as_ref()
            .map_err(Clone::clone)
    }

    // `libc::Ioctl` is a `c_ulong` on glibc and a `c_int` on musl.
    #[allow(clippy::unnecessary_cast)]
    fn build() -> Result<SyscallFilter, String> {
        let arch = TargetArch::try_from(std::env::consts::ARCH).map_err(|e| e.to_string())?;
        let dword = |index: u8, op: SeccompCmpOp, value: u64| {
            SeccompCondition::new(index, SeccompCmpArgLen::Dword, op, value)
                .map_err(|e| e.to_string())
        };
        let rule = |conditions| SeccompRule::new(conditions).map_err(|e| e.to_string());

        let allowed: BTreeMap<i64, Vec<SeccompRule>> = ALLOWED
            .iter()
            .flat_map(|(_, calls)| calls.iter())
            .chain(LEGACY)
            .map(|&nr| (nr, Vec::new()))
            .collect();

        let mut refused: BTreeMap<i64, Vec<SeccompRule>> =
            REFUSED.iter().map(|&nr| (nr, Vec::new())).collect();
        let clone_new = CLONE_NEW as u64;
        // Any namespace flag at all: a match on any one bit.
        let clone_rules = (0..32)
            .map(|bit| 1u64 << bit)
            .filter(|bit| clone_new & bit != 0)
            .map(|bit| rule(vec![dword(0, SeccompCmpOp::MaskedEq(bit), bit)?]))
            .collect::<Result<Vec<_>, _>>()?;
        refused.insert(libc::SYS_clone, clone_rules);
        refused.insert(
            libc::SYS_ioctl,
            vec![
                rule(vec![dword(1, SeccompCmpOp::Eq, libc::TIOCSTI as u64)?])?,
                rule(vec![dword(1, SeccompCmpOp::Eq, libc::TIOCLINUX as u64)?])?,
            ],
        );
        refused.insert(
            libc::SYS_socket,
            vec![rule(vec![
                dword(0, SeccompCmpOp::Eq, libc::AF_NETLINK as u64)?,
                dword(2, SeccompCmpOp::Ne, libc::NETLINK_ROUTE as u64)?,
            ])?],
        );
        refused.insert(
            libc::SYS_personality,
            vec![rule(
                PERSONALITIES
                    .iter()
                    .map(|&p| dword(0, SeccompCmpOp::Ne, p))
                    .collect::<Result<Vec<_>, _>>()?,
            )?],
        );

        let families = BTreeMap::from([(
            libc::SYS_socket,
            vec![rule(
                FAMILIES
                    .iter()
                    .map(|&f| dword(0, SeccompCmpOp::Ne, f as u64))
                    .collect::<Result<Vec<_>, _>>()?,
            )?],
        )]);
        let unix = BTreeMap::from([(
            libc::SYS_socket,
            vec![rule(vec![dword(
                0,
                SeccompCmpOp::Eq,
                libc::AF_UNIX as u64,
            )?])?],
        )]);

        let compile = |rules, mismatch, matched| -> Result<BpfProgram, String> {
            let filter =
                SeccompFilter::new(rules, mismatch, matched, arch).map_err(|e| e.to_string())?;
            BpfProgram::try_from(filter).map_err(|e| e.to_string())
        };
        let errno = |e: libc::c_int| SeccompAction::Errno(e as u32);
        Ok(SyscallFilter(vec![
            compile(allowed, errno(libc::ENOSYS), SeccompAction::Allow)?,
            compile(refused, SeccompAction::Allow, errno(libc::EPERM))?,
            compile(families, SeccompAction::Allow, errno(libc::EAFNOSUPPORT))?,
            compile(unix, SeccompAction::Allow, errno(libc::EACCES))?,
        ]))
    }

    /// Install every filter on the calling thread, in order. Runs in the forked plugin before
    /// exec: `prctl(PR_SET_NO_NEW_PRIVS)` and `seccomp(2)` on programs compiled before the fork.
    pub(crate) fn apply(&self) -> std::io::Result<()> {
        for program in &self.0 {
            seccompiler::apply_filter(program).map_err(|e| match e {
                seccompiler::Error::Seccomp(e) | seccompiler::Error::Prctl(e) => e,
                _ => std::io::Error::from_raw_os_error(libc::EINVAL),
            })?;
        }
        Ok(())
    }
}

/// Whether this kernel can filter system calls (`PR_GET_SECCOMP` answers instead of `EINVAL`).
#[allow(unsafe_code)]
pub(crate) fn available() -> bool {
    // SAFETY: prctl(PR_GET_SECCOMP) takes and returns integers.
    unsafe { libc::prctl(libc::PR_GET_SECCOMP, 0, 0, 0, 0) >= 0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_filters_compile_for_this_machine_once() {
        let filter = SyscallFilter::get().expect("filters");
        assert_eq!(filter.0.len(), 4);
        assert!(filter.0.iter().all(|p| !p.is_empty()));
        // BPF programs are at most 4096 instructions.
        assert!(
            filter.0.iter().all(|p| p.len() <= 4096),
            "{:?}",
            filter.0.iter().map(Vec::len).collect::<Vec<_>>()
        );
        assert!(std::ptr::eq(filter, SyscallFilter::get().expect("filters")));
    }

    #[test]
    fn nothing_refused_is_also_allowed_by_name_but_clone_and_the_conditional_ones() {
        let allowed: Vec<_> = ALLOWED
            .iter()
            .flat_map(|(_, c)| c.iter())
            .chain(LEGACY)
            .collect();
        for nr in REFUSED {
            assert!(
                !allowed.contains(&nr),
                "system call {nr} is both allowed and refused"
            );
        }
        assert!(!allowed.contains(&&libc::SYS_clone3));
    }
}
