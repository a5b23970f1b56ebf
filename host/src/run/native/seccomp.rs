//! The system calls a native plugin is refused, compiled to seccomp BPF before the fork and
//! installed in the plugin just before exec (after Landlock), so it holds for everything the
//! plugin starts.
//!
//! ```text
//! EACCES   socket(AF_UNIX, ...)          pathname and abstract Unix sockets (the Docker socket,
//!                                        a session bus); socketpair stays allowed
//! ENOSYS   clone3                        its flags are behind a pointer seccomp cannot read;
//!                                        libc falls back to clone
//! EPERM    clone with any CLONE_NEW*, unshare, setns, mount and the new mount API, umount2,
//!          pivot_root, ptrace, process_vm_readv/writev, bpf, perf_event_open, keyctl,
//!          add_key, request_key, kexec_load, kexec_file_load, init_module, finit_module,
//!          delete_module, userfaultfd
//! ```
//!
//! Everything else is allowed: this is a list of what a plugin has no business doing, not an
//! allow-list of what it may (that would break every interpreter in turn).

use std::collections::BTreeMap;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};

/// Namespace flags `clone` must not carry (`CLONE_NEWTIME` shares its bit with the exit
/// signal in `clone`'s flags, so it is left to `unshare`, refused outright).
const CLONE_NEW: &[libc::c_int] = &[
    libc::CLONE_NEWNS,
    libc::CLONE_NEWCGROUP,
    libc::CLONE_NEWUTS,
    libc::CLONE_NEWIPC,
    libc::CLONE_NEWUSER,
    libc::CLONE_NEWPID,
    libc::CLONE_NEWNET,
];

/// Refused outright with `EPERM`.
const REFUSED: &[libc::c_long] = &[
    libc::SYS_unshare,
    libc::SYS_setns,
    libc::SYS_mount,
    libc::SYS_umount2,
    libc::SYS_pivot_root,
    libc::SYS_open_tree,
    libc::SYS_move_mount,
    libc::SYS_fsopen,
    libc::SYS_fsconfig,
    libc::SYS_fsmount,
    libc::SYS_fspick,
    libc::SYS_mount_setattr,
    libc::SYS_ptrace,
    libc::SYS_process_vm_readv,
    libc::SYS_process_vm_writev,
    libc::SYS_bpf,
    libc::SYS_perf_event_open,
    libc::SYS_keyctl,
    libc::SYS_add_key,
    libc::SYS_request_key,
    libc::SYS_kexec_load,
    libc::SYS_kexec_file_load,
    libc::SYS_init_module,
    libc::SYS_finit_module,
    libc::SYS_delete_module,
    libc::SYS_userfaultfd,
];

/// The compiled filters, one per errno (a seccomp filter has one action on a match; the
/// kernel runs every installed filter and, as each allows what it does not name, the one that
/// matches decides).
#[derive(Debug)]
pub(crate) struct SyscallFilter(Vec<BpfProgram>);

impl SyscallFilter {
    /// Compile the filters for this machine's architecture (x86_64 or aarch64).
    pub(crate) fn build() -> Result<SyscallFilter, String> {
        let arch = TargetArch::try_from(std::env::consts::ARCH).map_err(|e| e.to_string())?;
        let dword = |index: u8, op: SeccompCmpOp, value: u64| {
            SeccompCondition::new(index, SeccompCmpArgLen::Dword, op, value)
                .map_err(|e| e.to_string())
        };
        let rule = |conditions| SeccompRule::new(conditions).map_err(|e| e.to_string());
        let unix = rule(vec![dword(0, SeccompCmpOp::Eq, libc::AF_UNIX as u64)?])?;
        let mut eperm: BTreeMap<i64, Vec<SeccompRule>> =
            REFUSED.iter().map(|&nr| (nr, Vec::new())).collect();
        let mut clone_rules = Vec::new();
        for &flag in CLONE_NEW {
            let flag = flag as u64;
            clone_rules.push(rule(vec![dword(0, SeccompCmpOp::MaskedEq(flag), flag)?])?);
        }
        eperm.insert(libc::SYS_clone, clone_rules);
        let filters = [
            (
                BTreeMap::from([(libc::SYS_socket, vec![unix])]),
                libc::EACCES,
            ),
            (
                BTreeMap::from([(libc::SYS_clone3, Vec::new())]),
                libc::ENOSYS,
            ),
            (eperm, libc::EPERM),
        ];
        let mut programs = Vec::with_capacity(filters.len());
        for (rules, errno) in filters {
            let filter = SeccompFilter::new(
                rules,
                SeccompAction::Allow,
                SeccompAction::Errno(errno as u32),
                arch,
            )
            .map_err(|e| e.to_string())?;
            programs.push(BpfProgram::try_from(filter).map_err(|e| e.to_string())?);
        }
        Ok(SyscallFilter(programs))
    }

    /// Install every filter on the calling thread. Runs in the forked plugin before exec:
    /// `prctl(PR_SET_NO_NEW_PRIVS)` and `seccomp(2)` on programs compiled before the fork.
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
    fn the_filters_compile_for_this_machine() {
        let filter = SyscallFilter::build().expect("filters");
        assert_eq!(filter.0.len(), 3);
        assert!(filter.0.iter().all(|p| !p.is_empty()));
    }
}
