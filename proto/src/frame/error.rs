use thiserror::Error;

/// Why a byte stream could not be split into frames. After any of these the stream is corrupt:
/// the frames already returned stay valid, nothing after the error is trusted.
///
/// Byte excerpts (`snippet`) are escaped with [`crate::frame::escape_snippet`] so they print
/// safely on one line.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum FrameError {
    /// A frame (or a declared frame length) is larger than `max_frame_bytes`.
    #[error("frame of {got} bytes exceeds max_frame_bytes {limit}")]
    TooLarge { limit: usize, got: usize },
    /// The stream ended in the middle of a frame.
    #[error("stream ended inside a frame after {got} bytes: \"{snippet}\"")]
    Truncated { got: usize, snippet: String },
    /// A JSON Lines frame that is not valid JSON.
    #[error("line is not valid JSON ({reason}): \"{snippet}\"")]
    InvalidJson { reason: String, snippet: String },
    /// A frame given to `encode` that contains a line break, or ends in `\r` which a reader
    /// would strip as part of the line ending (JSON Lines only).
    #[error("frame contains a line break at byte {offset}")]
    EmbeddedNewline { offset: usize },
    /// A frame given to `encode` that is empty or only whitespace: a JSON Lines reader skips
    /// blank lines, so it would never arrive.
    #[error("frame is blank and would be skipped by the reader")]
    BlankFrame,
    /// Malformed CBOR: a reserved additional-information value, a break outside an
    /// indefinite-length item, or a chunk of the wrong type inside an indefinite string.
    #[error("invalid CBOR at byte {offset}: {reason}")]
    InvalidCbor { offset: usize, reason: &'static str },
    /// CBOR nesting deeper than `max_depth`.
    #[error("CBOR nesting depth exceeds max_depth {limit}")]
    TooDeep { limit: usize },
    /// An `encode` input that is not exactly one CBOR item.
    #[error("frame holds {extra} bytes after its CBOR item")]
    TrailingBytes { extra: usize },
    /// A `Content-Length` header block larger than `max_header_bytes`.
    #[error("header block exceeds max_header_bytes {limit}")]
    HeaderTooLarge { limit: usize },
    /// A header line that is not `Name: value`, or a bad `Content-Length` value.
    #[error("malformed header: \"{snippet}\"")]
    BadHeader { snippet: String },
    /// A header block without `Content-Length`.
    #[error("header block has no Content-Length")]
    MissingContentLength,
    /// A `Content-Type` charset other than `utf-8` / `utf8`.
    #[error("unsupported charset \"{charset}\" (expected utf-8)")]
    UnsupportedCharset { charset: String },
}
