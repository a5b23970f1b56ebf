//! A test's hold on a native start, in debug builds only: `SANDPIPE_START_PAUSE=STEP` makes
//! the process at that step name itself `sandpipe-paused` and wait for a `SIGCONT`, so a test
//! can SIGKILL sandpipe exactly there, let the process go on, and count what is left
//! (`tests/tests/native_escapes.rs`, no orphan at any step). Not `SIGSTOP`: a PID 1 ignores
//! the signals its own namespace sends it, its own included, while a handler's signal from
//! outside reaches it. Release builds read no variable and never wait.

/// The steps of a native start, in order, by the name the variable gives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    /// The monitor, just forked: before its parent-death signal.
    Forked,
    /// The monitor, in the plugin's cgroup.
    Joined,
    /// The monitor, in its new namespaces with its id maps.
    Unshared,
    /// PID 1, just forked: before its parent-death signal.
    Init,
    /// PID 1, its root built and entered.
    Root,
    /// The plugin, just forked: before its parent-death signal.
    Plugin,
    /// The plugin, confined, about to exec.
    Exec,
}

impl Step {
    const ALL: [(&'static str, Step); 7] = [
        ("forked", Step::Forked),
        ("joined", Step::Joined),
        ("unshared", Step::Unshared),
        ("init", Step::Init),
        ("root", Step::Root),
        ("plugin", Step::Plugin),
        ("exec", Step::Exec),
    ];
}

/// Where this start stops, read before the fork (the child only compares).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Pause(Option<Step>);

impl Pause {
    pub(crate) fn from_env() -> Pause {
        if !cfg!(debug_assertions) {
            return Pause(None);
        }
        let wanted = std::env::var("SANDPIPE_START_PAUSE").unwrap_or_default();
        Pause(
            Step::ALL
                .iter()
                .find(|(name, _)| *name == wanted)
                .map(|&(_, step)| step),
        )
    }

    /// Wait here for a `SIGCONT` if this is the step. Async-signal-safe: prctl, sigaction,
    /// sigprocmask and sigsuspend on the stack's own values.
    #[allow(unsafe_code)]
    pub(crate) fn at(self, step: Step) {
        if self.0 != Some(step) {
            return;
        }
        extern "C" fn woken(_: libc::c_int) {}
        // SAFETY: system calls on zeroed or filled stack values and a C string literal.
        unsafe {
            // Blocked first: a SIGCONT sent once the name shows waits for sigsuspend.
            let mut cont: libc::sigset_t = std::mem::zeroed();
            let mut before: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut cont);
            libc::sigaddset(&mut cont, libc::SIGCONT);
            libc::sigprocmask(libc::SIG_BLOCK, &cont, &mut before);
            let mut action: libc::sigaction = std::mem::zeroed();
            let mut old: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = woken as *const () as libc::sighandler_t;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(libc::SIGCONT, &action, &mut old);
            libc::prctl(libc::PR_SET_NAME, c"sandpipe-paused".as_ptr(), 0, 0, 0);
            let mut waiting = before;
            libc::sigdelset(&mut waiting, libc::SIGCONT);
            libc::sigsuspend(&waiting);
            libc::sigaction(libc::SIGCONT, &old, std::ptr::null_mut());
            libc::sigprocmask(libc::SIG_SETMASK, &before, std::ptr::null_mut());
        }
    }
}
