//! Write a Cairo oracle (`stdio:` protocol): implement [`Oracle`] and call [`serve`].
//!
//! ```text
//!   serve: send ready ──► wait for the ack ──► recv invoke ──► Oracle::invoke ──► send result
//!                          (error ack: exit                ▲                          │
//!                           with an error)                 └──────────────────────────┘
//!                                               until the `shutdown` notification or stdin EOF
//! ```
//!
//! Only frames go to stdout (the protocol requires the first byte to be `{`); log to stderr.
//! The machine is [`sandpipe_proto::oracle::OracleServer`]: `invoke` requests with bad params
//! and unknown methods are answered by it, without calling the handler.
//!
//! ```no_run
//! use sandpipe_guest::oracle::{Felt, InvokeError, Oracle, serve};
//! use sandpipe_guest::{Framing, Stdio};
//!
//! struct Double;
//! impl Oracle for Double {
//!     fn invoke(&mut self, selector: &str, calldata: &[Felt]) -> Result<Vec<Felt>, InvokeError> {
//!         match (selector, calldata) {
//!             ("double", [x]) => {
//!                 let x = x.to_u128().ok_or("double: argument does not fit in 128 bits")?;
//!                 Ok(vec![Felt::from(x.checked_mul(2).ok_or("double: overflow")?)])
//!             }
//!             _ => Err(format!("unknown selector: {selector}").into()),
//!         }
//!     }
//! }
//!
//! fn main() -> Result<(), sandpipe_guest::GuestError> {
//!     serve(&mut Stdio::new(Framing::JsonLines), &mut Double)
//! }
//! ```

use std::io::{self, Write};

use sandpipe_proto::jsonrpc::{ErrorObject, INTERNAL_ERROR, ProtocolError};
pub use sandpipe_proto::oracle::Felt;
use sandpipe_proto::oracle::{OracleServer, ServerEvent};
pub use sandpipe_proto::transcript::Direction;

use crate::{Framed, GuestError};

/// A failed invoke: the JSON-RPC error the host receives (and the Cairo program sees as an
/// `oracle::Error`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvokeError {
    /// The code; `-32603` (internal error) unless chosen otherwise.
    pub code: i64,
    /// The message.
    pub message: String,
}

impl InvokeError {
    /// An error with code `-32603`.
    pub fn new(message: impl Into<String>) -> Self {
        Self::with_code(INTERNAL_ERROR, message)
    }

    /// An error with a code of the oracle's choosing.
    pub fn with_code(code: i64, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }
}

impl From<String> for InvokeError {
    fn from(message: String) -> Self {
        Self::new(message)
    }
}

impl From<&str> for InvokeError {
    fn from(message: &str) -> Self {
        Self::new(message)
    }
}

/// An oracle: one method per protocol call.
pub trait Oracle {
    /// Run `selector` on `calldata`.
    fn invoke(&mut self, selector: &str, calldata: &[Felt]) -> Result<Vec<Felt>, InvokeError>;

    /// Called with every frame received ([`Direction::ToPlugin`]) and sent
    /// ([`Direction::FromPlugin`]), for logging to stderr. Does nothing by default.
    fn on_frame(&mut self, dir: Direction, frame: &[u8]) {
        let _ = (dir, frame);
    }
}

/// Announce `ready`, wait for the ack, then answer invokes until the `shutdown` notification
/// or the end of input. An error ack, or a host that breaks the protocol, ends the loop with
/// an error (as [`GuestError::Io`], kind `ConnectionRefused` and `InvalidData`).
pub fn serve<R: crate::Input, W: Write, O: Oracle + ?Sized>(
    io: &mut Framed<R, W>,
    oracle: &mut O,
) -> Result<(), GuestError> {
    let mut server = OracleServer::new();
    flush(io, &mut server, oracle)?;
    while let Some(frame) = io.recv()? {
        oracle.on_frame(Direction::ToPlugin, &frame);
        server.handle_frame(&frame).map_err(protocol_error)?;
        while let Some(event) = server.poll_event() {
            match event {
                ServerEvent::Invoke {
                    id,
                    selector,
                    calldata,
                } => {
                    let result = oracle
                        .invoke(&selector, &calldata)
                        .map_err(|e| ErrorObject::new(e.code, e.message));
                    server.respond(id, result).map_err(protocol_error)?;
                }
                ServerEvent::Rejected { error } => {
                    return Err(GuestError::Io(io::Error::new(
                        io::ErrorKind::ConnectionRefused,
                        format!("host rejected ready: {error}"),
                    )));
                }
                ServerEvent::Shutdown => {
                    flush(io, &mut server, oracle)?;
                    return Ok(());
                }
                _ => {}
            }
        }
        flush(io, &mut server, oracle)?;
    }
    Ok(())
}

fn flush<R: crate::Input, W: Write, O: Oracle + ?Sized>(
    io: &mut Framed<R, W>,
    server: &mut OracleServer,
    oracle: &mut O,
) -> Result<(), GuestError> {
    while let Some(frame) = server.poll_transmit() {
        oracle.on_frame(Direction::FromPlugin, &frame);
        io.send(&frame)?;
    }
    Ok(())
}

fn protocol_error(e: ProtocolError) -> GuestError {
    GuestError::Io(io::Error::new(io::ErrorKind::InvalidData, e))
}

#[cfg(test)]
mod tests {
    use std::io::Cursor;

    use sandpipe_proto::frame::{FrameLimits, Framing};

    use super::*;

    struct Sum;
    impl Oracle for Sum {
        fn invoke(&mut self, selector: &str, calldata: &[Felt]) -> Result<Vec<Felt>, InvokeError> {
            if selector != "sum" {
                return Err(InvokeError::with_code(
                    -32000,
                    format!("unknown selector: {selector}"),
                ));
            }
            let mut total = 0u128;
            for f in calldata {
                total += f.to_u128().ok_or("sum: too big")?;
            }
            Ok(vec![Felt::from(total)])
        }
    }

    fn run(input: &str) -> (Result<(), GuestError>, String) {
        let mut out = Vec::new();
        let result = {
            let mut io = Framed::from_parts(
                Cursor::new(input.as_bytes().to_vec()),
                &mut out,
                Framing::JsonLines,
                FrameLimits::default(),
            );
            serve(&mut io, &mut Sum)
        };
        (result, String::from_utf8(out).expect("utf-8"))
    }

    const READY: &str = "{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"ready\"}\n";

    #[test]
    fn serves_until_shutdown_or_eof() {
        let cases: &[(&str, &str)] = &[
            ("", READY),
            ("{\"jsonrpc\":\"2.0\",\"id\":0,\"result\":{}}\n", READY),
            (
                concat!(
                    "{\"jsonrpc\":\"2.0\",\"id\":0,\"result\":{}}\n",
                    "{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"invoke\",\"params\":{\"selector\":\"sum\",\"calldata\":[\"0x1\",\"0x2\"]}}\n",
                    "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"invoke\",\"params\":{\"selector\":\"nope\",\"calldata\":[]}}\n",
                    "{\"jsonrpc\":\"2.0\",\"method\":\"shutdown\"}\n",
                    "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"invoke\",\"params\":{\"selector\":\"sum\",\"calldata\":[]}}\n",
                ),
                concat!(
                    "{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"ready\"}\n",
                    "{\"jsonrpc\":\"2.0\",\"id\":0,\"result\":[\"0x3\"]}\n",
                    "{\"jsonrpc\":\"2.0\",\"id\":1,\"error\":{\"code\":-32000,\"message\":\"unknown selector: nope\"}}\n",
                ),
            ),
        ];
        for (input, want) in cases {
            let (result, out) = run(input);
            assert!(result.is_ok(), "{input}: {result:?}");
            assert_eq!(&out, want, "{input}");
        }
    }

    #[test]
    fn an_error_ack_ends_the_plugin_with_an_error() {
        let (result, out) = run(concat!(
            "{\"jsonrpc\":\"2.0\",\"id\":0,\"error\":{\"code\":-32603,\"message\":\"no\"}}\n",
            "{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"invoke\",\"params\":{\"selector\":\"sum\",\"calldata\":[]}}\n",
        ));
        assert_eq!(out, READY);
        match result {
            Err(GuestError::Io(e)) => {
                assert_eq!(e.kind(), io::ErrorKind::ConnectionRefused);
                assert_eq!(e.to_string(), "host rejected ready: error -32603: no");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_host_breaking_the_protocol_is_an_error() {
        // An invoke before the ack.
        let (result, out) = run(
            "{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"invoke\",\"params\":{\"selector\":\"sum\",\"calldata\":[]}}\n",
        );
        assert_eq!(out, READY);
        assert!(
            matches!(result, Err(GuestError::Io(ref e)) if e.kind() == io::ErrorKind::InvalidData),
            "{result:?}"
        );
        // Not JSON at all: the protocol machine refuses it.
        let (result, out) = run("not json\n");
        assert_eq!(out, READY);
        assert!(
            matches!(result, Err(GuestError::Io(ref e)) if e.kind() == io::ErrorKind::InvalidData),
            "{result:?}"
        );
    }
}
