//! sans-IO framers and protocol state machines shared by the sandpipe host and its guests.
//!
//! This crate does no IO, spawns nothing and never reads a clock: bytes go in, frames and
//! typed errors come out. The host (`sandpipe`) and the guest SDK (`sandpipe-guest`) both
//! drive the same code, so a frame boundary means the same thing on both sides of the pipe.
//!
//! ```text
//!   bytes from a pipe ──► BytesMut ──► Framer::decode ──► Ok(Some(frame)) ──► protocol
//!                                          │  Ok(None): need more bytes
//!                                          └► Err(FrameError): stream corrupt, stop reading
//!   protocol ──► frame ──► Framer::encode ──► BytesMut ──► pipe
//! ```
//!
//! What it does not do: read or write pipes, start or stop plugins, or enforce time limits.
//! The machines decide from the time they are given (a request's deadline, the supervisor's
//! per-request budgets in `supervise`); the host carries the decisions out.
//!
//! No cargo features.
//!
//! ```
//! use bytes::BytesMut;
//! use sandpipe_proto::frame::{Framer, FrameLimits, Framing};
//!
//! let mut framer = Framing::JsonLines.framer(FrameLimits::default());
//! let mut buf = BytesMut::from(&b"{\"id\":1}\r\n\n{\"id\""[..]);
//! assert_eq!(framer.decode(&mut buf).unwrap().as_deref(), Some(&b"{\"id\":1}"[..]));
//! assert_eq!(framer.decode(&mut buf).unwrap(), None); // the second frame is incomplete
//! buf.extend_from_slice(b":2}\n");
//! assert_eq!(framer.decode(&mut buf).unwrap().as_deref(), Some(&b"{\"id\":2}"[..]));
//! ```

pub mod atp;
mod choices;
pub mod component;
pub mod denobridge;
pub mod finecode;
pub mod frame;
pub mod fuzz;
pub mod jsonrpc;
pub mod machine;
pub mod mcp;
pub mod oracle;
pub mod orchard;
pub mod stopped;
pub mod supervise;
#[cfg(test)]
mod testing;
pub mod transcript;
