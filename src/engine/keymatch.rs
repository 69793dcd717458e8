//! The FIND key compared against a slot without decoding it.

use crate::format::tag::{Half, SLOT_HEADER, SLOT_MARKER, SLOT_SIZE};

/// Compares a slot's key fields with a FIND key without decoding the slot.
///
/// A slot holds `object ++ relationship ++ subject`, so each half's key is
/// contiguous in it: `object ++ relationship` at the front for the object
/// half, `relationship ++ subject` at the back for the subject half. One
/// comparison against that concatenation (the needle) checks the whole key.
#[derive(Clone)]
pub struct KeyMatch {
    half: Half,
    rel_len: usize,
    name_len: usize,
    needle: [u8; SLOT_SIZE],
}

impl KeyMatch {
    /// The key of a FIND; `None` when it cannot fit in a slot (finds nothing).
    pub fn new(half: Half, relationship: &str, name: &str) -> Option<Self> {
        let (r, n) = (relationship.as_bytes(), name.as_bytes());
        if SLOT_HEADER + r.len() + n.len() > SLOT_SIZE {
            return None;
        }
        let mut needle = [0u8; SLOT_SIZE];
        let (a, b) = match half {
            Half::Object => (n, r),
            Half::Subject => (r, n),
        };
        needle[..a.len()].copy_from_slice(a);
        needle[a.len()..a.len() + b.len()].copy_from_slice(b);
        Some(KeyMatch {
            half,
            rel_len: r.len(),
            name_len: n.len(),
            needle,
        })
    }

    /// A key no slot holds (a FIND key longer than any slot).
    pub fn never(half: Half) -> Self {
        KeyMatch {
            half,
            rel_len: 0,
            name_len: 0,
            needle: [0; SLOT_SIZE],
        }
    }

    /// Where in slot `s` the field a FIND returns lies, if `s` holds the key.
    #[inline]
    pub fn other(&self, s: &[u8]) -> Option<std::ops::Range<usize>> {
        let (lo, lr, ls) = (s[1] as usize, s[2] as usize, s[3] as usize);
        if s[0] != SLOT_MARKER || lr != self.rel_len || SLOT_HEADER + lo + lr + ls > s.len() {
            return None;
        }
        let k = self.rel_len + self.name_len;
        let r = SLOT_HEADER + lo;
        match self.half {
            Half::Object => (lo == self.name_len
                && eq_short(&s[SLOT_HEADER..SLOT_HEADER + k], &self.needle[..k]))
            .then_some(r + lr..r + lr + ls),
            Half::Subject => (ls == self.name_len && eq_short(&s[r..r + k], &self.needle[..k]))
                .then_some(SLOT_HEADER..r),
        }
    }
}

/// Eight bytes of `s` from `i` as a word.
#[inline(always)]
fn word(s: &[u8], i: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&s[i..i + 8]);
    u64::from_ne_bytes(w)
}

/// Equality of two short byte runs (a key: at most a slot), word by word
/// and inline: a call to `memcmp` per slot was 6 % of a large FIND.
#[inline(always)]
fn eq_short(a: &[u8], b: &[u8]) -> bool {
    let n = a.len();
    if n != b.len() {
        return false;
    }
    if n < 8 {
        return a.iter().zip(b).fold(0u8, |d, (x, y)| d | (x ^ y)) == 0;
    }
    let mut i = 0;
    while i + 8 < n {
        if word(a, i) != word(b, i) {
            return false;
        }
        i += 8;
    }
    // The last word, overlapping the previous one when n is not a multiple of 8.
    word(a, n - 8) == word(b, n - 8)
}

#[cfg(test)]
mod tests {
    use super::eq_short;

    #[test]
    fn eq_short_matches_slice_equality() {
        let base: Vec<u8> = (0..40u8).map(|i| i.wrapping_mul(37)).collect();
        for n in 0..=40 {
            let a = &base[..n];
            assert!(eq_short(a, a));
            for at in 0..n {
                let mut b = a.to_vec();
                b[at] ^= 0x40;
                assert!(!eq_short(a, &b), "length {n}, byte {at} differs");
            }
            if n > 0 {
                assert!(!eq_short(a, &base[..n - 1]));
            }
        }
    }
}
