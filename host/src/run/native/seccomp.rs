//! The system calls a native plugin may make: an allow-list, compiled to seccomp BPF once per
//! process and installed in the plugin just before exec (after Landlock), so it holds for
//! everything the plugin starts.
//!
//! The model is Docker's default profile and systemd's `@system-service` set: the calls an
//! ordinary program makes are named ([`ALLOWED`], by group), and everything else is refused.
//! One program decides every call: after the architecture check it finds, by binary search
//! (`search`), the run of consecutive numbers with one verdict (`runs`) that the call's number
//! is in, and answers that verdict:
//!
//! ```text
//! not named                                                  ENOSYS  (what a kernel without
//!                                                                     it answers: libc and
//!                                                                     runtimes fall back)
//! ALLOWED, LEGACY                                            allowed
//! REFUSED (io_uring, mounts, namespaces, ptrace, BPF,        EPERM
//!          keyrings, modules, clocks, ...)
//! clone     with a CLONE_NEW* flag                           EPERM
//! ioctl     TIOCSTI / TIOCLINUX                              EPERM
//! socket    AF_UNIX                                          EACCES
//!           a family but INET, INET6, NETLINK and UNIX       EAFNOSUPPORT (as a kernel built
//!           (VSOCK, PACKET, ALG, ...)                                      without it)
//!           AF_NETLINK other than NETLINK_ROUTE              EPERM
//! personality other than Linux's own                         EPERM
//! ```
//!
//! A search over runs, not a list of names: when a filter is installed the kernel converts and
//! JIT-compiles it and runs it once for every call number to cache the answers that need no
//! argument: a list of 340 names cost each start about half a millisecond; a search with one
//! comparison per name was about 950 instructions; 87 runs are 201. The program answers exactly what the
//! four stacked seccompiler filters before it did (the unit tests run both).
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

use seccompiler::{BpfProgram, sock_filter};

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
const FAMILIES: [libc::c_int; 4] = [
    libc::AF_INET,
    libc::AF_INET6,
    libc::AF_NETLINK,
    libc::AF_UNIX,
];

/// `personality` values that change nothing a plugin could use (Docker's list): Linux's own,
/// `UNAME26`, `PER_LINUX32` with and without it, and the query `0xffffffff`.
const PERSONALITIES: &[u64] = &[0, 0x0002_0000, 0x0008, 0x0002_0008, 0xffff_ffff];

/// What the filter answers for one system call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    Allow,
    Errno(i32),
    /// Decided on the call's arguments: see [`argument_block`].
    Arguments(Checked),
}

/// The calls allowed or refused on their arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Checked {
    /// Refused (`EPERM`) with any [`CLONE_NEW`] flag.
    Clone,
    /// Refused (`EPERM`) for `TIOCSTI` and `TIOCLINUX`.
    Ioctl,
    /// [`FAMILIES`] only (`EAFNOSUPPORT`), no `AF_UNIX` (`EACCES`), and netlink for routes
    /// only (`EPERM`).
    Socket,
    /// [`PERSONALITIES`] only (`EPERM`).
    Personality,
}

/// `AUDIT_ARCH_*` of the architectures sandpipe builds for (`linux/audit.h`: the ELF machine,
/// 64-bit, little-endian).
const fn audit_arch(elf_machine: u32) -> u32 {
    elf_machine | 0x8000_0000 | 0x4000_0000
}
#[cfg(target_arch = "x86_64")]
const AUDIT_ARCH: u32 = audit_arch(62);
#[cfg(target_arch = "aarch64")]
const AUDIT_ARCH: u32 = audit_arch(183);
#[cfg(target_arch = "riscv64")]
const AUDIT_ARCH: u32 = audit_arch(243);

// `seccomp_data`: the call's number, its architecture, then six 64-bit arguments, of which
// the checks read the low 32 bits (every argument they read is an `int` to the kernel).
const NR: u32 = 0;
const ARCH: u32 = 4;
#[cfg(target_endian = "little")]
const fn arg(index: u32) -> u32 {
    16 + 8 * index
}

/// The compiled filter: one program, installed once.
#[derive(Debug)]
pub(crate) struct SyscallFilter(BpfProgram);

impl SyscallFilter {
    /// The filter for this machine's architecture, compiled once per process: each native
    /// start installs the same program.
    pub(crate) fn get() -> Result<&'static SyscallFilter, String> {
        static FILTER: OnceLock<Result<SyscallFilter, String>> = OnceLock::new();
        FILTER
            .get_or_init(Self::build)
            .as_ref()
            .map_err(Clone::clone)
    }

    fn build() -> Result<SyscallFilter, String> {
        let program = program(&verdicts());
        if program.len() > BPF_MAX_LEN {
            return Err(format!(
                "the system-call filter has {} instructions, over the kernel's {BPF_MAX_LEN}",
                program.len()
            ));
        }
        Ok(SyscallFilter(program))
    }

    /// Install the filter on the calling thread. Runs in the forked plugin before exec:
    /// `prctl(PR_SET_NO_NEW_PRIVS)` and `seccomp(2)` on a program compiled before the fork.
    pub(crate) fn apply(&self) -> std::io::Result<()> {
        seccompiler::apply_filter(&self.0).map_err(|e| match e {
            seccompiler::Error::Seccomp(e) | seccompiler::Error::Prctl(e) => e,
            _ => std::io::Error::from_raw_os_error(libc::EINVAL),
        })
    }
}

/// The kernel's limit on a classic BPF program.
const BPF_MAX_LEN: usize = 4096;

/// Every call the filter names, by number; any other answers `ENOSYS`.
fn verdicts() -> BTreeMap<u32, Verdict> {
    let mut verdicts: BTreeMap<u32, Verdict> = ALLOWED
        .iter()
        .flat_map(|(_, calls)| calls.iter())
        .chain(LEGACY)
        .map(|&nr| (number(nr), Verdict::Allow))
        .collect();
    for &nr in REFUSED {
        verdicts.insert(number(nr), Verdict::Errno(libc::EPERM));
    }
    for (nr, checked) in [
        (libc::SYS_clone, Checked::Clone),
        (libc::SYS_ioctl, Checked::Ioctl),
        (libc::SYS_socket, Checked::Socket),
        (libc::SYS_personality, Checked::Personality),
    ] {
        verdicts.insert(number(nr), Verdict::Arguments(checked));
    }
    verdicts
}

#[allow(clippy::cast_sign_loss, clippy::cast_possible_truncation)]
fn number(nr: libc::c_long) -> u32 {
    // System call numbers are small and positive on every architecture.
    nr as u32
}

/// The program: kill a call made through another architecture's entry, then find the run of
/// numbers the call's number falls in by binary search and answer that run's verdict. A run is
/// a stretch of consecutive numbers with one verdict (`ENOSYS` for those no list names): the
/// allowed calls sit mostly side by side, so 87 runs stand for 340 names on x86-64, and the
/// program is a fifth of the size of one comparison per name. Its size is what each start
/// pays: the kernel checks, converts and JIT-compiles the program when the filter is
/// installed, and runs it for every call number to cache the answers that need no argument.
fn program(verdicts: &BTreeMap<u32, Verdict>) -> BpfProgram {
    let mut program = vec![
        load(ARCH),
        jump(libc::BPF_JEQ, AUDIT_ARCH, 1, 0),
        ret(libc::SECCOMP_RET_KILL_PROCESS),
        load(NR),
    ];
    program.extend(search(&runs(verdicts)));
    program
}

/// What not being named answers: what a kernel without the call answers.
const UNNAMED: Verdict = Verdict::Errno(libc::ENOSYS);

/// The verdicts as runs covering every number: each run's first number and its verdict, in
/// order, no two neighbours alike; the first starts at 0, the last runs to `u32::MAX`.
fn runs(verdicts: &BTreeMap<u32, Verdict>) -> Vec<(u32, Verdict)> {
    let mut runs: Vec<(u32, Verdict)> = Vec::new();
    let mut push = |first: u32, verdict: Verdict| {
        if runs.last().is_none_or(|&(_, last)| last != verdict) {
            runs.push((first, verdict));
        }
    };
    let mut next = 0u32;
    for (&nr, &verdict) in verdicts {
        if nr > next {
            push(next, UNNAMED);
        }
        push(nr, verdict);
        next = nr.saturating_add(1);
    }
    push(next, UNNAMED);
    runs
}

/// The runs in `runs` (sorted, the number in the accumulator at least the first's start): the
/// verdict of the run the number falls in.
fn search(runs: &[(u32, Verdict)]) -> Vec<sock_filter> {
    if let [(_, verdict)] = runs {
        return verdict_block(*verdict);
    }
    let (below, above) = runs.split_at(runs.len() / 2);
    let pivot = above[0].0;
    let (below, above) = (search(below), search(above));
    let mut out = Vec::with_capacity(below.len() + above.len() + 2);
    match u8::try_from(below.len()) {
        Ok(skip) => out.push(jump(libc::BPF_JGE, pivot, skip, 0)),
        // A conditional jump reaches 255 instructions: farther, through an unconditional one.
        Err(_) => {
            out.push(jump(libc::BPF_JGE, pivot, 0, 1));
            out.push(stmt(
                libc::BPF_JMP | libc::BPF_JA,
                u32::try_from(below.len()).unwrap_or(u32::MAX),
            ));
        }
    }
    out.extend(below);
    out.extend(above);
    out
}

fn verdict_block(verdict: Verdict) -> Vec<sock_filter> {
    match verdict {
        Verdict::Allow => vec![ret(libc::SECCOMP_RET_ALLOW)],
        Verdict::Errno(e) => vec![errno(e)],
        Verdict::Arguments(checked) => argument_block(checked),
    }
}

/// The checks on one call's arguments, each ending in its answers.
#[allow(clippy::cast_sign_loss)]
fn argument_block(checked: Checked) -> Vec<sock_filter> {
    let allow = ret(libc::SECCOMP_RET_ALLOW);
    match checked {
        Checked::Clone => vec![
            load(arg(0)),
            jump(libc::BPF_JSET, CLONE_NEW as u32, 0, 1),
            errno(libc::EPERM),
            allow,
        ],
        // `libc::Ioctl` is a `c_ulong` on glibc and a `c_int` on musl.
        #[allow(clippy::unnecessary_cast)]
        Checked::Ioctl => vec![
            load(arg(1)),
            jump(libc::BPF_JEQ, libc::TIOCSTI as u32, 1, 0),
            jump(libc::BPF_JEQ, libc::TIOCLINUX as u32, 0, 1),
            errno(libc::EPERM),
            allow,
        ],
        Checked::Socket => {
            let [inet, inet6, netlink, unix] = FAMILIES;
            vec![
                load(arg(0)),
                jump(libc::BPF_JEQ, unix as u32, 0, 1),
                errno(libc::EACCES),
                jump(libc::BPF_JEQ, inet as u32, 6, 0),
                jump(libc::BPF_JEQ, inet6 as u32, 5, 0),
                jump(libc::BPF_JEQ, netlink as u32, 1, 0),
                errno(libc::EAFNOSUPPORT),
                load(arg(2)),
                jump(libc::BPF_JEQ, libc::NETLINK_ROUTE as u32, 1, 0),
                errno(libc::EPERM),
                allow,
            ]
        }
        Checked::Personality => {
            let n = PERSONALITIES.len();
            let mut out = vec![load(arg(0))];
            for (i, &p) in PERSONALITIES.iter().enumerate() {
                // Past the remaining checks and the refusal, to the allow.
                out.push(jump(
                    libc::BPF_JEQ,
                    u32::try_from(p).unwrap_or(u32::MAX),
                    offset(n - i),
                    0,
                ));
            }
            out.extend([errno(libc::EPERM), allow]);
            out
        }
    }
}

fn offset(n: usize) -> u8 {
    u8::try_from(n).unwrap_or(u8::MAX)
}

#[allow(clippy::cast_possible_truncation)]
fn stmt(code: u32, k: u32) -> sock_filter {
    sock_filter {
        code: code as u16,
        jt: 0,
        jf: 0,
        k,
    }
}

#[allow(clippy::cast_possible_truncation)]
fn jump(op: u32, k: u32, jt: u8, jf: u8) -> sock_filter {
    sock_filter {
        code: (libc::BPF_JMP | op | libc::BPF_K) as u16,
        jt,
        jf,
        k,
    }
}

fn load(offset: u32) -> sock_filter {
    stmt(libc::BPF_LD | libc::BPF_W | libc::BPF_ABS, offset)
}

fn ret(action: u32) -> sock_filter {
    stmt(libc::BPF_RET | libc::BPF_K, action)
}

#[allow(clippy::cast_sign_loss)]
fn errno(e: i32) -> sock_filter {
    ret(libc::SECCOMP_RET_ERRNO | (e as u32 & libc::SECCOMP_RET_DATA))
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

    use seccompiler::{
        SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
        SeccompRule, TargetArch,
    };

    /// Classic BPF as the kernel runs a seccomp filter: loads of `seccomp_data` words, `and`,
    /// jumps on constants and returns, the only instructions the filters here use.
    fn run(program: &[sock_filter], data: &[u32; 16]) -> u32 {
        run_counting(program, data).0
    }

    /// The answer, and how many instructions gave it.
    fn run_counting(program: &[sock_filter], data: &[u32; 16]) -> (u32, usize) {
        let (mut pc, mut a) = (0usize, 0u32);
        for steps in 1.. {
            let i = &program[pc];
            let code = u32::from(i.code);
            pc += 1;
            match code {
                c if c == libc::BPF_LD | libc::BPF_W | libc::BPF_ABS => {
                    a = data[i.k as usize / 4];
                }
                c if c == libc::BPF_RET | libc::BPF_K => return (i.k, steps),
                // seccompiler's masked comparisons.
                c if c == libc::BPF_ALU | libc::BPF_AND | libc::BPF_K => a &= i.k,
                c if c == libc::BPF_JMP | libc::BPF_JA => pc += i.k as usize,
                c if c & 0x07 == libc::BPF_JMP => {
                    let taken = match c & 0xf0 {
                        op if op == libc::BPF_JEQ => a == i.k,
                        op if op == libc::BPF_JGE => a >= i.k,
                        op if op == libc::BPF_JGT => a > i.k,
                        op if op == libc::BPF_JSET => a & i.k != 0,
                        op => panic!("jump {op:#x}"),
                    };
                    pc += usize::from(if taken { i.jt } else { i.jf });
                }
                c => panic!("instruction {c:#x}"),
            }
        }
        unreachable!("a program ends in a return")
    }

    /// The kernel's answer of a stack of filters: the most severe action wins, and of equal
    /// ones the newest filter's (`seccomp_run_filters`).
    fn run_stack(stack: &[BpfProgram], data: &[u32; 16]) -> u32 {
        let mut answer = libc::SECCOMP_RET_ALLOW;
        for program in stack.iter().rev() {
            let this = run(program, data);
            let action = |r: u32| (r & libc::SECCOMP_RET_ACTION_FULL) as i32;
            if action(this) < action(answer) {
                answer = this;
            }
        }
        answer
    }

    /// The four filters sandpipe installed before this one, built with seccompiler: the
    /// single program must answer exactly what they answered.
    #[allow(clippy::unnecessary_cast)]
    fn stacked_filters() -> Vec<BpfProgram> {
        let arch = TargetArch::try_from(std::env::consts::ARCH).expect("arch");
        let dword = |index: u8, op: SeccompCmpOp, value: u64| {
            SeccompCondition::new(index, SeccompCmpArgLen::Dword, op, value).expect("condition")
        };
        let rule = |conditions| SeccompRule::new(conditions).expect("rule");
        let allowed: BTreeMap<i64, Vec<SeccompRule>> = ALLOWED
            .iter()
            .flat_map(|(_, calls)| calls.iter())
            .chain(LEGACY)
            .map(|&nr| (nr, Vec::new()))
            .collect();
        let mut refused: BTreeMap<i64, Vec<SeccompRule>> =
            REFUSED.iter().map(|&nr| (nr, Vec::new())).collect();
        let clone_new = CLONE_NEW as u64;
        let clone_rules = (0..32)
            .map(|bit| 1u64 << bit)
            .filter(|bit| clone_new & bit != 0)
            .map(|bit| rule(vec![dword(0, SeccompCmpOp::MaskedEq(bit), bit)]))
            .collect();
        refused.insert(libc::SYS_clone, clone_rules);
        refused.insert(
            libc::SYS_ioctl,
            vec![
                rule(vec![dword(1, SeccompCmpOp::Eq, libc::TIOCSTI as u64)]),
                rule(vec![dword(1, SeccompCmpOp::Eq, libc::TIOCLINUX as u64)]),
            ],
        );
        refused.insert(
            libc::SYS_socket,
            vec![rule(vec![
                dword(0, SeccompCmpOp::Eq, libc::AF_NETLINK as u64),
                dword(2, SeccompCmpOp::Ne, libc::NETLINK_ROUTE as u64),
            ])],
        );
        refused.insert(
            libc::SYS_personality,
            vec![rule(
                PERSONALITIES
                    .iter()
                    .map(|&p| dword(0, SeccompCmpOp::Ne, p))
                    .collect(),
            )],
        );
        let families = BTreeMap::from([(
            libc::SYS_socket,
            vec![rule(
                FAMILIES
                    .iter()
                    .map(|&f| dword(0, SeccompCmpOp::Ne, f as u64))
                    .collect(),
            )],
        )]);
        let unix = BTreeMap::from([(
            libc::SYS_socket,
            vec![rule(vec![dword(0, SeccompCmpOp::Eq, libc::AF_UNIX as u64)])],
        )]);
        let compile = |rules, mismatch, matched| {
            BpfProgram::try_from(
                SeccompFilter::new(rules, mismatch, matched, arch).expect("filter"),
            )
            .expect("program")
        };
        let errno = |e: libc::c_int| SeccompAction::Errno(e as u32);
        vec![
            compile(allowed, errno(libc::ENOSYS), SeccompAction::Allow),
            compile(refused, SeccompAction::Allow, errno(libc::EPERM)),
            compile(families, SeccompAction::Allow, errno(libc::EAFNOSUPPORT)),
            compile(unix, SeccompAction::Allow, errno(libc::EACCES)),
        ]
    }

    fn data(arch: u32, nr: u32, args: [u32; 3]) -> [u32; 16] {
        let mut d = [0u32; 16];
        d[0] = nr;
        d[1] = arch;
        for (i, a) in args.iter().enumerate() {
            d[4 + 2 * i] = *a;
        }
        d
    }

    #[test]
    #[allow(clippy::unnecessary_cast, clippy::cast_sign_loss)]
    fn the_one_program_answers_what_the_four_stacked_filters_answered() {
        let filter = SyscallFilter::get().expect("filter");
        assert!(std::ptr::eq(filter, SyscallFilter::get().expect("filter")));
        let stack = stacked_filters();
        // The first arguments that tell the checked calls' answers apart, and then some.
        let mut firsts: Vec<u32> = vec![0, 1, 2, 3, 0x1_0000, 0xffff_ffff];
        firsts.extend(FAMILIES.iter().map(|&f| f as u32));
        firsts.extend([libc::AF_VSOCK, libc::AF_PACKET, libc::AF_ALG].map(|f| f as u32));
        firsts.extend(PERSONALITIES.iter().map(|&p| p as u32));
        firsts.extend((0..32).map(|bit| 1u32 << bit));
        firsts.push(CLONE_NEW as u32 | libc::SIGCHLD as u32);
        let seconds = [0, libc::TIOCSTI as u32, libc::TIOCLINUX as u32, 0x5401];
        let thirds = [0, libc::NETLINK_ROUTE as u32, 9];
        let numbers = (0..1024u32).chain((0..1024).map(|nr| nr | 0x4000_0000));
        let mut compared = 0usize;
        for nr in numbers {
            let checked = matches!(verdicts().get(&nr), Some(Verdict::Arguments(_)));
            let grid: Vec<[u32; 3]> = if checked {
                firsts
                    .iter()
                    .flat_map(|&a| seconds.iter().map(move |&b| (a, b)))
                    .flat_map(|(a, b)| thirds.iter().map(move |&c| [a, b, c]))
                    .collect()
            } else {
                vec![[0, 0, 0], [libc::AF_UNIX as u32, libc::TIOCSTI as u32, 9]]
            };
            for args in grid {
                let d = data(AUDIT_ARCH, nr, args);
                assert_eq!(
                    run(&filter.0, &d),
                    run_stack(&stack, &d),
                    "system call {nr:#x} with {args:?}"
                );
                compared += 1;
            }
        }
        assert!(compared > 2048);
        // Another architecture's entry is killed, as before.
        let other = data(audit_arch(3), 2, [0; 3]);
        assert_eq!(run(&filter.0, &other), libc::SECCOMP_RET_KILL_PROCESS);
        assert_eq!(run_stack(&stack, &other), libc::SECCOMP_RET_KILL_PROCESS);
    }

    #[test]
    fn a_call_takes_about_log2_comparisons_not_one_per_name() {
        let filter = SyscallFilter::get().expect("filter");
        assert!(filter.0.len() <= BPF_MAX_LEN);
        let names = verdicts().len();
        assert!(names > 300, "{names}");
        // Instructions run for the highest-numbered name: a list would take about `names`.
        let last = *verdicts().keys().last().expect("a name");
        let (_, steps) = run_counting(&filter.0, &data(AUDIT_ARCH, last, [0; 3]));
        assert!(steps < 40, "{steps} instructions for {names} names");
        // Runs, not names: fewer instructions in all than names.
        let runs = runs(&verdicts());
        eprintln!(
            "{names} names, {} runs, {} instructions",
            runs.len(),
            filter.0.len()
        );
        assert!(filter.0.len() < names, "{} instructions", filter.0.len());
    }

    #[test]
    fn the_runs_cover_every_number_once_and_no_two_neighbours_agree() {
        let verdicts = verdicts();
        let runs = runs(&verdicts);
        assert_eq!(runs[0].0, 0);
        for pair in runs.windows(2) {
            assert!(pair[0].0 < pair[1].0 && pair[0].1 != pair[1].1, "{pair:?}");
        }
        let verdict_of = |nr: u32| runs.iter().rev().find(|r| r.0 <= nr).map(|r| r.1);
        for nr in (0..1024).chain([0x4000_0000, u32::MAX]) {
            let named = verdicts.get(&nr).copied().unwrap_or(UNNAMED);
            assert_eq!(verdict_of(nr), Some(named), "system call {nr:#x}");
        }
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
