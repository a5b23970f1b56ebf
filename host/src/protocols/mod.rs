//! Typed async clients, one per hosted protocol, over a [`Session`](crate::Session).
//!
//! Each drives the protocol's client (host-role) state machine from `sandpipe-proto`, so the
//! host and the in-memory tests share one implementation of the protocol's rules. When the
//! sandbox stops a plugin with requests pending, each pending request gets the protocol's own
//! error form carrying the reason and the plugin's stderr tail.

pub mod atp;
pub mod denobridge;
pub mod finecode;
pub mod oracle;
pub mod orchard;

/// Which protocol a command speaks. New protocols (`atp`, `finecode`) slot in here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Protocol {
    /// Plain JSON-RPC 2.0 over JSON Lines: one request, its response.
    JsonRpc,
    /// Cairo oracle `stdio:`.
    Oracle,
    /// Orchard provider protocol.
    Orchard,
    /// terraform-provider-denobridge.
    DenoBridge,
    /// Arcaflow ATP v1/v3 (CBOR).
    Atp,
    /// FineCode WM↔ER (LSP `Content-Length`).
    FineCode,
}

impl Protocol {
    /// The answer to the engine's request `request` (a frame) that the plugin will never
    /// answer, for `stopped`: each protocol's own `stopped_error` from `sandpipe-proto`, with
    /// the request's id (ATP: an error for the run the frame names, not server fatal, since
    /// the engine's plugin lives on). `None` for a frame that is not a request.
    pub fn stopped_answer(self, request: &[u8], stopped: &crate::Stopped) -> Option<Vec<u8>> {
        use sandpipe_proto::jsonrpc::{Dialect, ErrorObject, Message};
        use sandpipe_proto::{atp, denobridge, finecode, jsonrpc, oracle, orchard};
        if self == Protocol::Atp {
            let run_id = match atp::Message::decode(request).ok()? {
                atp::Message::WorkStart { run_id, .. } | atp::Message::Signal { run_id, .. } => {
                    run_id
                }
                _ => return None,
            };
            return Some(atp::stopped_error(&run_id, stopped, false).encode());
        }
        let dialect = match self {
            Protocol::Orchard => Dialect::Orchard,
            _ => Dialect::JsonRpc2,
        };
        let Ok(Message::Request { id, method, .. }) = Message::decode(request, dialect) else {
            return None;
        };
        let error: ErrorObject = match self {
            Protocol::Orchard => {
                orchard::stopped_error(orchard::Method::from_name(&method), stopped).into()
            }
            Protocol::Oracle => oracle::stopped_error(stopped).to_error_object(),
            Protocol::DenoBridge => denobridge::stopped_error(stopped),
            Protocol::FineCode => finecode::stopped_error(stopped),
            Protocol::JsonRpc | Protocol::Atp => jsonrpc::stopped_error(dialect, stopped),
        };
        Some(Message::response(id, Err(error)).encode(dialect))
    }

    /// The framing the protocol uses.
    pub fn framing(self) -> sandpipe_proto::frame::Framing {
        use sandpipe_proto::frame::Framing;
        match self {
            Protocol::Atp => Framing::CborSeq,
            Protocol::FineCode => Framing::ContentLength,
            _ => Framing::JsonLines,
        }
    }

    /// The name used on the command line and in transcripts.
    pub fn name(self) -> &'static str {
        match self {
            Protocol::JsonRpc => "jsonrpc",
            Protocol::Oracle => "oracle",
            Protocol::Orchard => "orchard",
            Protocol::DenoBridge => "denobridge",
            Protocol::Atp => "atp",
            Protocol::FineCode => "finecode",
        }
    }
}

impl std::str::FromStr for Protocol {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "jsonrpc" => Ok(Protocol::JsonRpc),
            "oracle" => Ok(Protocol::Oracle),
            "orchard" => Ok(Protocol::Orchard),
            "denobridge" => Ok(Protocol::DenoBridge),
            "atp" => Ok(Protocol::Atp),
            "finecode" => Ok(Protocol::FineCode),
            other => Err(format!(
                "unknown protocol {other:?} (expected jsonrpc, oracle, orchard, denobridge, atp or finecode)"
            )),
        }
    }
}
