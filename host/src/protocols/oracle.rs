//! The Cairo oracle `stdio:` protocol, host side: wait for `ready`, ack it, `invoke` one
//! selector at a time, `shutdown`. The machine (`sandpipe_proto::oracle::OracleClient`) holds
//! the rules (the first byte `{`, one invoke at a time, a result is an array of felts); the
//! [`Driver`] runs it.

use std::time::Duration;

use sandpipe_proto::oracle::{self as machine, ClientEvent, ErrorOrigin, Felt, OracleError};

use crate::driver::{Driver, Refused};
use crate::error::{Exit, Stopped};
use crate::session::{Session, SessionControl};

/// An oracle process after its handshake. Invocations are sequential by construction
/// (`invoke` takes `&mut self`), as the protocol requires.
#[derive(Debug)]
pub struct OracleClient {
    driver: Driver<machine::OracleClient>,
}

impl OracleClient {
    /// Wait for the plugin's `ready` request (the machine acknowledges it). The first byte the
    /// plugin writes must be `{`, as the real executor checks.
    pub async fn connect(session: Session) -> Result<Self, OracleError> {
        let driver = Driver::new(session, machine::OracleClient::new());
        loop {
            match driver.next_event().await.map(|c| c.event) {
                Some(ClientEvent::Ready) => return Ok(OracleClient { driver }),
                Some(_) => {}
                None => return Err(machine::stopped_error(&stopped(&driver))),
            }
        }
    }

    /// Invoke `selector` with `calldata`. A plugin error, a bad result, or the plugin being
    /// stopped all come back as an [`OracleError`] value, never a panic or a hang.
    pub async fn invoke(
        &mut self,
        selector: &str,
        calldata: &[Felt],
    ) -> Result<Vec<Felt>, OracleError> {
        let pending = self
            .driver
            .request(|m| m.invoke(selector, calldata))
            .map_err(|refused| match refused {
                Refused::Stopped(s) => machine::stopped_error(&s),
                Refused::Machine(e) => OracleError {
                    origin: ErrorOrigin::Host,
                    ..machine::stopped_error(&Stopped::by_host(e.to_string(), Vec::new()))
                },
            })?;
        match pending.wait().await {
            Ok(c) => match c.event {
                ClientEvent::Invoked { result, .. } => result,
                other => unreachable!("only Invoked completes an invoke: {other:?}"),
            },
            Err(s) => Err(machine::stopped_error(&s)),
        }
    }

    /// Send the `shutdown` notification, then give the plugin `grace` to exit before killing
    /// it (the real executor kills at once: pass `Duration::ZERO`).
    pub async fn shutdown(self, grace: Duration) -> Exit {
        let _ = self.driver.act(machine::OracleClient::shutdown);
        self.driver.shutdown(grace).await
    }

    /// The session's control half, for its stderr tail or exit.
    pub fn control(&self) -> &SessionControl {
        self.driver.control()
    }

    /// Why the plugin will never answer again, once that is so: an invoke's
    /// [`ErrorOrigin::Host`] error carries the stop only in its wire form.
    pub fn stopped(&self) -> Option<Stopped> {
        self.driver.stopped()
    }
}

/// Why the driver ended; it has, once `next_event` returned `None`.
fn stopped<M: sandpipe_proto::machine::ClientMachine>(driver: &Driver<M>) -> Stopped {
    driver
        .stopped()
        .unwrap_or_else(|| Stopped::by_host("the session ended", Vec::new()))
}
