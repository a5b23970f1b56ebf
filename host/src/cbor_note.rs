//! A one-line readable rendering of a CBOR item for transcripts (RFC 8949 diagnostic-like).

use ciborium::Value;

/// Render `frame`; bytes that are not one CBOR item render as `<not CBOR: reason>`.
pub(crate) fn render(frame: &[u8]) -> String {
    match ciborium::from_reader::<Value, _>(frame) {
        Ok(v) => {
            let mut out = String::new();
            value(&v, &mut out);
            out
        }
        Err(e) => format!("<not CBOR: {e}>"),
    }
}

/// Render one decoded value.
pub(crate) fn render_value(v: &Value) -> String {
    let mut out = String::new();
    value(v, &mut out);
    out
}

fn value(v: &Value, out: &mut String) {
    match v {
        Value::Integer(i) => out.push_str(&i128::from(*i).to_string()),
        Value::Bytes(b) => {
            out.push_str("h'");
            for byte in b {
                out.push_str(&format!("{byte:02x}"));
            }
            out.push('\'');
        }
        Value::Float(f) => out.push_str(&f.to_string()),
        Value::Text(t) => out.push_str(&serde_json::to_string(t).unwrap_or_default()),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Null => out.push_str("null"),
        Value::Tag(t, inner) => {
            out.push_str(&format!("{t}("));
            value(inner, out);
            out.push(')');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                value(item, out);
            }
            out.push(']');
        }
        Value::Map(entries) => {
            out.push('{');
            for (i, (k, val)) in entries.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                value(k, out);
                out.push_str(": ");
                value(val, out);
            }
            out.push('}');
        }
        _ => out.push_str("undefined"),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn renders_items() {
        assert_eq!(super::render(&[0xf6]), "null");
        assert_eq!(
            super::render(&[
                0xa2, 0x61, b'a', 0x01, 0x61, b'b', 0x82, 0x02, 0x43, 1, 2, 3
            ]),
            r#"{"a": 1, "b": [2, h'010203']}"#
        );
        assert!(super::render(&[0xff]).starts_with("<not CBOR"));
    }
}
