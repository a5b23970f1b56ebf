//! An example Cairo oracle (`stdio:` protocol) over felts, run in memory by the tests and as a
//! plugin by `src/bin/example_oracle.rs`.
//!
//! Selectors:
//! - `sqrt x`: the integer square root of one felt below 2^128.
//! - `add x y …`: the sum of one or more felts below 2^128; fails if the sum overflows 128 bits.
//! - `fail`: always fails, so the host's error path can be shown.
//!
//! Any other selector fails with `unknown selector: NAME`. With `--echo-stderr` every frame
//! received and sent is echoed to stderr (as some oracle SDKs do), which must not disturb the
//! host: only frames go to stdout.

use std::io::{self, Write};

use sandpipe_guest::oracle::{Direction, Felt, InvokeError, Oracle, serve};
use sandpipe_guest::{Framed, GuestError};

/// The oracle.
#[derive(Debug, Default)]
pub struct Calc {
    /// Echo every frame to stderr.
    pub echo_stderr: bool,
}

impl Oracle for Calc {
    fn invoke(&mut self, selector: &str, calldata: &[Felt]) -> Result<Vec<Felt>, InvokeError> {
        match selector {
            "sqrt" => match calldata {
                [x] => Ok(vec![Felt::from(small(selector, 0, x)?.isqrt())]),
                _ => Err("sqrt: expected exactly one argument".into()),
            },
            "add" => {
                if calldata.is_empty() {
                    return Err("add: expected at least one argument".into());
                }
                let mut sum = 0u128;
                for (i, x) in calldata.iter().enumerate() {
                    sum = sum
                        .checked_add(small(selector, i, x)?)
                        .ok_or("add: sum overflows 128 bits")?;
                }
                Ok(vec![Felt::from(sum)])
            }
            "fail" => Err("fail: this selector always fails".into()),
            other => Err(format!("unknown selector: {other}").into()),
        }
    }

    fn on_frame(&mut self, dir: Direction, frame: &[u8]) {
        if self.echo_stderr {
            let arrow = match dir {
                Direction::ToPlugin => "recv",
                Direction::FromPlugin => "send",
            };
            eprintln!("example-oracle {arrow}: {}", String::from_utf8_lossy(frame));
        }
    }
}

/// `x` as a u128, or an error naming the selector and argument.
fn small(selector: &str, index: usize, x: &Felt) -> Result<u128, InvokeError> {
    x.to_u128().ok_or_else(|| {
        format!("{selector}: argument {index} ({x}) does not fit in 128 bits").into()
    })
}

/// The whole plugin minus stdio: parse `args`, then serve until shutdown or end of input.
pub fn main_with<R: sandpipe_guest::Input, W: Write>(
    io: &mut Framed<R, W>,
    args: &[String],
) -> Result<(), GuestError> {
    let mut oracle = Calc::default();
    for arg in args {
        match arg.as_str() {
            "--echo-stderr" => oracle.echo_stderr = true,
            other => {
                return Err(GuestError::Io(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("unknown argument {other:?} (expected --echo-stderr)"),
                )));
            }
        }
    }
    if oracle.echo_stderr {
        // Not JSON, and on stderr: the host must ignore it.
        eprintln!("example-oracle: starting, echoing frames to stderr");
    }
    serve(io, &mut oracle)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn felts(ns: &[u128]) -> Vec<Felt> {
        ns.iter().map(|&n| Felt::from(n)).collect()
    }

    #[test]
    fn selectors() {
        let big = Felt::parse(&format!("0x1{}", "0".repeat(32))).expect("2^128");
        type Case = (&'static str, Vec<Felt>, Result<Vec<Felt>, &'static str>);
        let cases: Vec<Case> = vec![
            ("sqrt", felts(&[16]), Ok(felts(&[4]))),
            ("sqrt", felts(&[17]), Ok(felts(&[4]))),
            ("sqrt", felts(&[0]), Ok(felts(&[0]))),
            ("sqrt", felts(&[u128::MAX]), Ok(felts(&[u64::MAX as u128]))),
            ("sqrt", vec![], Err("sqrt: expected exactly one argument")),
            (
                "sqrt",
                felts(&[1, 2]),
                Err("sqrt: expected exactly one argument"),
            ),
            (
                "sqrt",
                vec![big.clone()],
                Err(
                    "sqrt: argument 0 (0x100000000000000000000000000000000) does not fit in 128 bits",
                ),
            ),
            ("add", felts(&[1, 2, 3]), Ok(felts(&[6]))),
            ("add", felts(&[0]), Ok(felts(&[0]))),
            ("add", vec![], Err("add: expected at least one argument")),
            (
                "add",
                felts(&[u128::MAX, 1]),
                Err("add: sum overflows 128 bits"),
            ),
            ("fail", vec![], Err("fail: this selector always fails")),
            ("nope", vec![], Err("unknown selector: nope")),
        ];
        for (selector, calldata, want) in cases {
            let got = Calc::default().invoke(selector, &calldata);
            assert_eq!(
                got,
                want.map_err(InvokeError::new),
                "{selector} {calldata:?}"
            );
        }
    }
}
