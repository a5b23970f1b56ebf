//! Fuzz input read as choices: what the structure-aware fuzz bodies (each protocol's, and the
//! cross-protocol ones in [`crate::fuzz`]) build their programs from.

/// Fuzz input read as a series of choices, for the structure-aware bodies. Past the end every
/// read gives zeros, so any input is a complete program.
pub(crate) struct Choices<'a> {
    rest: &'a [u8],
}

impl<'a> Choices<'a> {
    pub(crate) fn new(data: &'a [u8]) -> Self {
        Self { rest: data }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.rest.is_empty()
    }

    pub(crate) fn byte(&mut self) -> u8 {
        match self.rest.split_first() {
            Some((b, rest)) => {
                self.rest = rest;
                *b
            }
            None => 0,
        }
    }

    /// A number below `n` (0 when `n` is 0), from one or two bytes.
    pub(crate) fn below(&mut self, n: usize) -> usize {
        if n <= 1 {
            return 0;
        }
        let raw = if n <= 256 {
            usize::from(self.byte())
        } else {
            usize::from(u16::from_le_bytes(self.array()))
        };
        raw % n
    }

    /// Up to `n` bytes (fewer at the end of the input).
    pub(crate) fn bytes(&mut self, n: usize) -> &'a [u8] {
        let (taken, rest) = self.rest.split_at(n.min(self.rest.len()));
        self.rest = rest;
        taken
    }

    pub(crate) fn array<const N: usize>(&mut self) -> [u8; N] {
        let mut out = [0; N];
        let taken = self.bytes(N);
        out[..taken.len()].copy_from_slice(taken);
        out
    }
}
