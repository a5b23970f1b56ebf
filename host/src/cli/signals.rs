//! Signals sent to `sandpipe run`, handled as the plugin in its place would see them.
//!
//! Engines signal their plugins: Arcaflow's deployers stop one with SIGTERM, a terminal's Ctrl-C
//! reaches the engine's whole process group. sandpipe stands in for the plugin, so:
//!
//! ```text
//!                     native plugin                     wasm plugin
//! SIGTERM SIGHUP      forwarded to its process group    stdin closed (the SIGTERM emulation);
//! SIGQUIT SIGUSR1/2   (the plugin decides)              killed after --grace; a second one
//!                                                       kills at once
//! SIGINT (--sigint)   auto: forwarded                   auto: ignored when sandpipe's stdin is
//!                     ignore: dropped                   not a terminal (an engine ends its
//!                     terminate: SIGTERM forwarded      plugins through the protocol, which is
//!                                                       why the Arcaflow SDK ignores SIGINT);
//!                                                       on a terminal, like SIGTERM
//! ```
//!
//! Either way sandpipe exits with the plugin's own status.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::signal::unix::{Signal, SignalKind, signal};
use tokio::sync::watch;

use crate::{SessionControl, SessionGroup};

/// What SIGINT does (`--sigint`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SigintMode {
    /// Native: forwarded. Wasm: ignored when stdin is not a terminal, else like SIGTERM.
    Auto,
    /// Dropped: neither sandpipe nor the plugin sees it.
    Ignore,
    /// Like SIGTERM (native: SIGTERM is forwarded).
    Terminate,
}

/// What to do with one received signal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Action {
    /// Send this signal to the native plugin's process group.
    Forward(i32),
    /// Stop the wasm plugin as SIGTERM would: close its stdin, kill it after the grace period.
    Terminate,
    /// Nothing.
    Ignore,
}

/// The signals `sandpipe run` takes over from their default (which would kill sandpipe and
/// leave the plugin unaware).
const HANDLED: [i32; 6] = [
    libc::SIGINT,
    libc::SIGTERM,
    libc::SIGHUP,
    libc::SIGQUIT,
    libc::SIGUSR1,
    libc::SIGUSR2,
];

/// The decision for `signal`, for a native plugin or not, with `stdin_is_terminal`.
pub(crate) fn action(
    signal: i32,
    native: bool,
    sigint: SigintMode,
    stdin_is_terminal: bool,
) -> Action {
    if signal != libc::SIGINT {
        return if native {
            Action::Forward(signal)
        } else {
            Action::Terminate
        };
    }
    match (sigint, native) {
        (SigintMode::Ignore, _) => Action::Ignore,
        (SigintMode::Auto, true) => Action::Forward(libc::SIGINT),
        (SigintMode::Terminate, true) => Action::Forward(libc::SIGTERM),
        (SigintMode::Terminate, false) => Action::Terminate,
        (SigintMode::Auto, false) if stdin_is_terminal => Action::Terminate,
        (SigintMode::Auto, false) => Action::Ignore,
    }
}

/// How `run` treats the signals it receives: the decision for each is [`SignalPolicy::action`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct SignalPolicy {
    pub(crate) native: bool,
    pub(crate) sigint: SigintMode,
    pub(crate) stdin_is_terminal: bool,
    pub(crate) grace: Duration,
}

impl SignalPolicy {
    /// What to do with `signal` under this policy (see the module's table).
    pub(crate) fn action(&self, signal: i32) -> Action {
        action(signal, self.native, self.sigint, self.stdin_is_terminal)
    }
}

/// A SIGTERM emulation in progress: the plugin's stdin is closed, and it is killed at `deadline`.
#[derive(Debug, Default)]
pub(crate) struct Stopping {
    deadline: Option<tokio::time::Instant>,
}

impl Stopping {
    /// Act on `sig`: forward it, start the SIGTERM emulation (a second one kills at once), or
    /// drop it.
    pub(crate) fn on_signal(
        &mut self,
        sig: i32,
        how: SignalPolicy,
        control: &SessionControl,
        close_input: &watch::Sender<bool>,
    ) {
        match how.action(sig) {
            Action::Forward(s) => {
                tracing::info!("forwarding signal {s} to the plugin");
                control.signal(s);
            }
            Action::Ignore => tracing::info!("ignoring signal {sig}"),
            Action::Terminate if self.deadline.is_some() => control.kill(),
            Action::Terminate => {
                tracing::info!(
                    "signal {sig}: closing the plugin's stdin, killing it after {:?}",
                    how.grace
                );
                let _ = close_input.send(true);
                self.deadline = Some(tokio::time::Instant::now() + how.grace);
            }
        }
    }

    /// Resolves when the grace period of a SIGTERM emulation is over; never otherwise.
    pub(crate) async fn expired(&self) {
        match self.deadline {
            Some(at) => tokio::time::sleep_until(at).await,
            None => std::future::pending().await,
        }
    }
}

/// Drive `served` (a session answering the engine's frames: the supervisor, a `wasm:` oracle)
/// to its end, with the signals sandpipe receives meanwhile. The first one `on_signal` does not
/// ignore:
/// - while the engine's input is open, ends it (`input`, the engine reader, is aborted, which
///   the session takes as EOF), so the plugin's stdin closes and it ends through its protocol;
/// - once the input has ended (`input_ended`), the plugin's stdin is already closed and an
///   engine that signals now is escalating, as an MCP client does after closing stdin: the
///   signal reaches the plugins of `group` as it would without sandpipe (forwarded to a native
///   one; for wasm, the SIGTERM emulation's grace starts).
///
/// A second one ends sandpipe at once, `Err(128 + signal)`.
pub(crate) async fn serve_until_done<T>(
    served: impl std::future::Future<Output = T>,
    signals: &mut Signals,
    on_signal: &SignalPolicy,
    input: &tokio::task::AbortHandle,
    input_ended: &AtomicBool,
    group: &SessionGroup,
) -> Result<T, i32> {
    tokio::pin!(served);
    let mut ending = false;
    loop {
        tokio::select! {
            done = &mut served => return Ok(done),
            sig = signals.recv() => {
                let action = on_signal.action(sig);
                if action == Action::Ignore {
                    continue;
                }
                if ending {
                    eprintln!("sandpipe: second signal {sig}: ending now");
                    return Err(128 + sig);
                }
                ending = true;
                if !input_ended.load(Ordering::SeqCst) {
                    input.abort();
                    continue;
                }
                match action {
                    Action::Forward(s) => {
                        tracing::info!("input has ended: forwarding signal {s} to the plugin");
                        group.signal(s);
                    }
                    Action::Terminate => {
                        tracing::info!(
                            "input has ended: killing the plugin after {:?}",
                            on_signal.grace
                        );
                        group.kill_after(on_signal.grace);
                    }
                    Action::Ignore => {}
                }
            }
        }
    }
}

/// The handled signals as one stream.
#[derive(Debug)]
pub(crate) struct Signals(Vec<(i32, Signal)>);

impl Signals {
    /// Take over the handled signals. Must run inside the runtime.
    pub(crate) fn install() -> std::io::Result<Signals> {
        HANDLED
            .iter()
            .map(|&s| Ok((s, signal(SignalKind::from_raw(s))?)))
            .collect::<std::io::Result<_>>()
            .map(Signals)
    }

    /// The next signal received.
    pub(crate) async fn recv(&mut self) -> i32 {
        let waits = self.0.iter_mut().map(|(n, s)| {
            Box::pin(async move {
                s.recv().await;
                *n
            })
        });
        futures_select_all(waits).await
    }
}

/// The first of `futures` to finish (a small `select_all`, to avoid a dependency for it).
async fn futures_select_all<F: std::future::Future<Output = i32> + Unpin>(
    futures: impl IntoIterator<Item = F>,
) -> i32 {
    let mut futures: Vec<F> = futures.into_iter().collect();
    std::future::poll_fn(move |cx| {
        for f in &mut futures {
            if let std::task::Poll::Ready(n) = std::pin::Pin::new(f).poll(cx) {
                return std::task::Poll::Ready(n);
            }
        }
        std::task::Poll::Pending
    })
    .await
}

/// Whether sandpipe's stdin is a terminal.
pub(crate) fn stdin_is_terminal() -> bool {
    use std::io::IsTerminal;
    std::io::stdin().is_terminal()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_signal_gets_the_documented_action() {
        use Action::{Forward, Ignore, Terminate};
        use SigintMode as M;
        for s in [
            libc::SIGTERM,
            libc::SIGHUP,
            libc::SIGQUIT,
            libc::SIGUSR1,
            libc::SIGUSR2,
        ] {
            assert_eq!(action(s, true, M::Auto, false), Forward(s));
            assert_eq!(action(s, false, M::Auto, false), Terminate);
            assert_eq!(action(s, false, M::Ignore, true), Terminate);
        }
        let int = libc::SIGINT;
        assert_eq!(action(int, true, M::Auto, false), Forward(int));
        assert_eq!(action(int, true, M::Auto, true), Forward(int));
        assert_eq!(action(int, false, M::Auto, false), Ignore);
        assert_eq!(action(int, false, M::Auto, true), Terminate);
        assert_eq!(action(int, true, M::Ignore, true), Ignore);
        assert_eq!(action(int, false, M::Ignore, true), Ignore);
        assert_eq!(
            action(int, true, M::Terminate, false),
            Forward(libc::SIGTERM)
        );
        assert_eq!(action(int, false, M::Terminate, false), Terminate);
    }
}
