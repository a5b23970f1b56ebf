//! The values a policy takes, as text: the parsers the command line's flags, a policy file and
//! the policy document share, so `max-memory = "64MiB"` and `--max-memory 64MiB` accept
//! exactly the same values.

use std::time::Duration;

use serde::Deserialize;

/// A size: `64MiB`, `1GB`, `4096`.
pub fn parse_size(s: &str) -> Result<u64, String> {
    s.parse::<bytesize::ByteSize>()
        .map(|b| b.as_u64())
        .map_err(|e| format!("invalid size {s:?}: {e}"))
}

/// A cap: a size, or `none` (`unlimited`) for no cap.
pub fn parse_cap(s: &str) -> Result<Option<u64>, String> {
    if s.eq_ignore_ascii_case("none") || s.eq_ignore_ascii_case("unlimited") {
        return Ok(None);
    }
    parse_size(s).map(Some)
}

/// A count of files: a number, or `none` (`unlimited`).
pub fn parse_count_cap(s: &str) -> Result<Option<u64>, String> {
    if s.eq_ignore_ascii_case("none") || s.eq_ignore_ascii_case("unlimited") {
        return Ok(None);
    }
    s.parse::<u64>()
        .map(Some)
        .map_err(|e| format!("invalid file count {s:?}: {e}"))
}

/// A cap that can be lifted: a number, or `Cap(None)` for `none`. One type rather than
/// `Option<Option<u64>>`, so that a flag reading it takes `none` as its value (clap reads a
/// nested `Option` as "a flag whose value may be left out").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cap(pub Option<u64>);

impl Cap {
    /// A size cap: `64MiB`, or `none` ([`parse_cap`]).
    pub fn size(s: &str) -> Result<Cap, String> {
        parse_cap(s).map(Cap)
    }

    /// A count cap: `64`, or `none` ([`parse_count_cap`]).
    pub fn count(s: &str) -> Result<Cap, String> {
        parse_count_cap(s).map(Cap)
    }
}

/// A duration: `30s`, `1m 30s`, `500ms`.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s).map_err(|e| format!("invalid duration {s:?}: {e}"))
}

/// A number, or text its flag takes (`64MiB`, `none`), as a policy file or document holds it.
#[derive(Deserialize)]
#[serde(untagged)]
pub(crate) enum Quantity {
    Number(u64),
    Text(String),
}

impl Quantity {
    /// The number through `number`, the text through `text` (its flag's parser).
    pub(crate) fn parse<T>(
        self,
        text: impl FnOnce(&str) -> Result<T, String>,
        number: fn(u64) -> T,
    ) -> Result<T, String> {
        match self {
            Quantity::Number(n) => Ok(number(n)),
            Quantity::Text(t) => text(&t),
        }
    }
}
