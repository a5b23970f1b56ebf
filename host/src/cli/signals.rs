//! Signals sent to `sandpipe run`, handled as the plugin in its place would see them: one
//! policy and one loop ([`Stopping::serve`]) for both bridges, the pass-through of `run`
//! (raw or framed) and the supervisor of `run --protocol`.
//!
//! Engines signal their plugins: Arcaflow's deployers stop one with SIGTERM, a terminal's Ctrl-C
//! reaches the engine's whole process group. sandpipe stands in for the plugin, so each signal
//! first gets its [`Action`] from the plugin's kind:
//!
//! ```text
//!                     native plugin                     wasm plugin
//! SIGTERM SIGHUP      Forward: to its process group     Terminate: the SIGTERM emulation
//! SIGQUIT SIGUSR1/2   (the plugin decides)              (stdin closed, killed after --grace)
//! SIGINT (--sigint)   auto: forwarded                   auto: ignored when sandpipe's stdin is
//!                     ignore: dropped                   not a terminal (an engine ends its
//!                     terminate: SIGTERM forwarded      plugins through the protocol, which is
//!                                                       why the Arcaflow SDK ignores SIGINT);
//!                                                       on a terminal, like SIGTERM
//! ```
//!
//! and then its [`Step`] from the bridge ([`step`]):
//!
//! ```text
//!              pass-through (run)           supervised (run --protocol)
//! Forward      forwarded, every time        input open: the engine's input ends, as EOF, and
//!                                           the plugin ends through its protocol; input ended:
//!                                           forwarded to every instance
//! Terminate    stdin closed, killed after   the same (the engine's input ends, every instance
//!              --grace                      is killed after --grace)
//! a second     Terminate: killed at once    sandpipe ends at once (128 + N); the instances, as
//! one                                       its children, with it
//! ```
//!
//! The supervisor's first step differs from the pass-through's for a native plugin because it
//! stands between the engine and the plugin's requests: ending the input lets it answer what is
//! in flight, and an engine that signals once the input has ended (an MCP client escalating
//! after closing stdin) reaches the plugin as without sandpipe. Either way sandpipe exits with
//! the plugin's own status ([`super::status::report`]).

use std::time::Duration;

use tokio::signal::unix::{Signal, SignalKind, signal};

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

/// Which bridge a signal reaches (see the module's second table).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Bridge {
    /// `run`, raw or framed: one plugin, its stdin fed by the engine's.
    PassThrough,
    /// `run --protocol`: the supervisor, between the engine's requests and its instances.
    Supervised,
}

/// What the bridge does with one signal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    /// Nothing.
    Nothing,
    /// Send this signal to the native plugin.
    Forward(i32),
    /// End the engine's input, as EOF.
    EndInput,
    /// The SIGTERM emulation: end the input, kill the plugin after the grace period.
    Stop,
    /// Kill the plugin now.
    KillNow,
    /// End sandpipe now.
    EndNow,
}

/// The step for `action` on `bridge`, with the engine's input open or not, after an earlier
/// signal started the end (`stopping`) or not: the module's second table.
pub(crate) fn step(action: Action, bridge: Bridge, input_open: bool, stopping: bool) -> Step {
    match (action, bridge) {
        (Action::Ignore, _) => Step::Nothing,
        (_, Bridge::Supervised) if stopping => Step::EndNow,
        (Action::Forward(_), Bridge::Supervised) if input_open => Step::EndInput,
        (Action::Forward(s), _) => Step::Forward(s),
        (Action::Terminate, Bridge::PassThrough) if stopping => Step::KillNow,
        (Action::Terminate, _) => Step::Stop,
    }
}

/// What a bridge's signals act on.
pub(crate) trait Stoppable {
    /// Which bridge this is.
    fn bridge(&self) -> Bridge;
    /// Whether the engine's input still reaches the plugin.
    fn input_open(&self) -> bool;
    /// End the engine's input, as if the engine had closed sandpipe's stdin.
    fn end_input(&self);
    /// Send `signal` to the native plugin.
    fn forward(&self, signal: i32);
    /// Kill the plugin now.
    fn kill(&self);
}

/// The bridge's end, once a signal started it: the grace period of a SIGTERM emulation, and
/// whether sandpipe killed the plugin itself.
#[derive(Debug, Default)]
pub(crate) struct Stopping {
    deadline: Option<tokio::time::Instant>,
    stopping: bool,
    killed: bool,
}

impl Stopping {
    /// Drive `served` (a pump, the plugin's exit, the supervisor) to its end, taking each
    /// signal received meanwhile through [`step`] to `target`. `Err(128 + N)` when a signal
    /// ends sandpipe at once ([`Step::EndNow`]).
    pub(crate) async fn serve<T>(
        &mut self,
        served: impl std::future::Future<Output = T>,
        signals: &mut Signals,
        how: &SignalPolicy,
        target: &impl Stoppable,
    ) -> Result<T, i32> {
        tokio::pin!(served);
        loop {
            tokio::select! {
                done = &mut served => return Ok(done),
                sig = signals.recv() => {
                    let step = step(how.action(sig), target.bridge(), target.input_open(), self.stopping);
                    match step {
                        Step::Nothing => tracing::info!("ignoring signal {sig}"),
                        Step::Forward(s) => {
                            tracing::info!("forwarding signal {s} to the plugin");
                            target.forward(s);
                        }
                        Step::EndInput => {
                            tracing::info!("signal {sig}: ending the plugin's input");
                            target.end_input();
                        }
                        Step::Stop => {
                            tracing::info!(
                                "signal {sig}: closing the plugin's stdin, killing it after {:?}",
                                how.grace
                            );
                            target.end_input();
                            self.deadline = Some(tokio::time::Instant::now() + how.grace);
                        }
                        Step::KillNow => {
                            self.killed = true;
                            target.kill();
                        }
                        Step::EndNow => {
                            eprintln!("sandpipe: second signal {sig}: ending now");
                            return Err(128 + sig);
                        }
                    }
                    self.stopping |= step != Step::Nothing;
                }
                () = self.expired() => {
                    self.deadline = None;
                    self.killed = true;
                    target.kill();
                }
            }
        }
    }

    /// Whether sandpipe killed the plugin itself (see [`super::status::own_kill`]).
    pub(crate) fn killed(&self) -> bool {
        self.killed
    }

    /// Kill the plugin now, as sandpipe's own doing (a bad frame from it).
    pub(crate) fn kill(&mut self, target: &impl Stoppable) {
        self.killed = true;
        target.kill();
    }

    /// Resolves when the grace period of a SIGTERM emulation is over; never otherwise.
    async fn expired(&self) {
        match self.deadline {
            Some(at) => tokio::time::sleep_until(at).await,
            None => std::future::pending().await,
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

    #[test]
    fn each_bridge_takes_the_documented_step() {
        use Bridge::{PassThrough, Supervised};
        let (term, fwd) = (Action::Terminate, Action::Forward(libc::SIGTERM));
        for open in [false, true] {
            for stopping in [false, true] {
                for bridge in [PassThrough, Supervised] {
                    assert_eq!(step(Action::Ignore, bridge, open, stopping), Step::Nothing);
                }
                let forwarded = step(fwd, PassThrough, open, stopping);
                assert_eq!(forwarded, Step::Forward(libc::SIGTERM));
            }
            assert_eq!(step(term, PassThrough, open, false), Step::Stop);
            assert_eq!(step(term, PassThrough, open, true), Step::KillNow);
            assert_eq!(step(term, Supervised, open, false), Step::Stop);
            assert_eq!(step(term, Supervised, open, true), Step::EndNow);
            assert_eq!(step(fwd, Supervised, open, true), Step::EndNow);
        }
        assert_eq!(step(fwd, Supervised, true, false), Step::EndInput);
        assert_eq!(
            step(fwd, Supervised, false, false),
            Step::Forward(libc::SIGTERM)
        );
    }
}
