//! A one-line readable rendering of a CBOR item for transcripts and messages: the
//! diagnostic notation of `sandpipe_proto::atp` (one implementation for host and tests).

/// Render `frame`; bytes that are not one CBOR item render as `<reason>`.
pub(crate) fn render(frame: &[u8]) -> String {
    sandpipe_proto::atp::diagnostic_frame(frame)
}

/// Render one decoded value (`sandpipe call`'s ATP output, through the ATP `call` hook).
pub(crate) fn render_value(v: &ciborium::Value) -> String {
    sandpipe_proto::atp::diagnostic(v)
}

#[cfg(test)]
mod tests {
    #[test]
    fn renders_items() {
        assert_eq!(super::render(&[0xf6]), "null");
        let map = [
            0xa2, 0x61, b'a', 0x01, 0x61, b'b', 0x82, 0x02, 0x43, 1, 2, 3,
        ];
        let text = super::render(&map);
        assert!(
            text.contains("\"a\"") && text.contains("h'010203'"),
            "{text}"
        );
        assert!(super::render(&[0xff]).starts_with('<'));
    }
}
