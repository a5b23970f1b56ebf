//! `--profile-frames`' count of user-space copies: each contender runs with the
//! `sandpipe-copy-count` library preloaded (`bench/copy-count`), which counts every
//! `memcpy`/`memmove` of a page or more in each process it is loaded into.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::Context;
use sandpipe_proto::frame::Framing;

use crate::framings::frame_for;
use crate::process::{Peer, wire};

/// The smallest copy the library counts: `LARGE` in `bench/copy-count/src/lib.rs`. (The
/// library is a `cdylib` that defines `memcpy`: linking it into the bench would interpose the
/// bench's own copies, so the bench does not depend on it.)
pub const LARGE: usize = 4096;

/// Large copies in one process: calls and bytes, `memcpy` then `memmove`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Copies {
    pub memcpy_calls: u64,
    pub memcpy_bytes: u64,
    pub memmove_calls: u64,
    pub memmove_bytes: u64,
}

impl Copies {
    fn parse(line: &str) -> Option<Copies> {
        let mut n = line.split_whitespace().map(|w| w.parse::<u64>().ok());
        let mut next = || n.next().flatten();
        Some(Copies {
            memcpy_calls: next()?,
            memcpy_bytes: next()?,
            memmove_calls: next()?,
            memmove_bytes: next()?,
        })
    }

    fn add(&mut self, o: Copies) {
        self.memcpy_calls += o.memcpy_calls;
        self.memcpy_bytes += o.memcpy_bytes;
        self.memmove_calls += o.memmove_calls;
        self.memmove_bytes += o.memmove_bytes;
    }
}

/// Build the counting library with this bench's profile, or say why it is not there.
pub fn build() -> Result<PathBuf, String> {
    let (target, profile) =
        crate::process::cargo_build("the copy counter", &["-p", "sandpipe-copy-count"], |_| {})
            .map_err(|e| format!("{e:#}"))?;
    let lib = target.join(profile).join("libsandpipe_copy_count.so");
    if lib.is_file() {
        Ok(lib)
    } else {
        Err(format!("{} was not built", lib.display()))
    }
}

/// Run `cmd` for `frames` echoes of a 64 KiB frame with `lib` preloaded, and sum what each
/// process reported by its executable's name. A process that did not load the library (its
/// environment was cleared) reports nothing.
pub fn count(
    lib: &Path,
    dir: &Path,
    mut cmd: Command,
    framing: Framing,
    frames: u64,
    cache: &Path,
) -> anyhow::Result<BTreeMap<String, Copies>> {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir)?;
    cmd.env("LD_PRELOAD", lib)
        .env("SANDPIPE_COPY_COUNT_DIR", dir);
    let frame = frame_for(framing, super::frames::KIB64)?;
    let wire = wire(framing, &frame);
    let mut peer = Peer::spawn(cmd, framing, cache)?;
    for _ in 0..frames {
        peer.echo(&wire, frame.len())?;
    }
    peer.finish()?;
    let mut by_exe: BTreeMap<String, Copies> = BTreeMap::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        let text = std::fs::read_to_string(&path)?;
        let mut lines = text.lines();
        let exe = lines.next().unwrap_or_default().to_owned();
        let copies = lines
            .next()
            .and_then(Copies::parse)
            .with_context(|| format!("a malformed count in {}", path.display()))?;
        by_exe.entry(exe).or_default().add(copies);
    }
    Ok(by_exe)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_count_line_parses_and_a_short_one_does_not() {
        assert_eq!(
            Copies::parse("1 4096 2 8192"),
            Some(Copies {
                memcpy_calls: 1,
                memcpy_bytes: 4096,
                memmove_calls: 2,
                memmove_bytes: 8192,
            })
        );
        assert_eq!(Copies::parse("1 4096 2"), None);
        assert_eq!(Copies::parse("1 x 2 3"), None);
    }
}
