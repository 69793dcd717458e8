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
    /// The needle's first `WINDOW` bytes as words, and a mask of its
    /// `rel_len + name_len` key bytes: a key that fits the window is
    /// compared in a fixed number of loads, without a loop.
    words: [u64; WORDS],
    mask: [u64; WORDS],
}

/// Bytes compared at once by [`KeyMatch::other`] for a short key.
const WINDOW: usize = 32;
const WORDS: usize = WINDOW / 8;

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
        let mut bytes = [0u8; WINDOW];
        bytes[..(a.len() + b.len()).min(WINDOW)].fill(0xFF);
        Some(KeyMatch {
            half,
            rel_len: r.len(),
            name_len: n.len(),
            words: std::array::from_fn(|j| word(&needle, 8 * j)),
            mask: std::array::from_fn(|j| word(&bytes, 8 * j)),
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
            words: [0; WORDS],
            mask: [0; WORDS],
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
            Half::Object => (lo == self.name_len && self.key_at(s, SLOT_HEADER, k))
                .then_some(r + lr..r + lr + ls),
            Half::Subject => {
                (ls == self.name_len && self.key_at(s, r, k)).then_some(SLOT_HEADER..r)
            }
        }
    }

    /// Whether `s[at..at + k]` is the key (`k` = its length, in bounds).
    #[inline(always)]
    fn key_at(&self, s: &[u8], at: usize, k: usize) -> bool {
        if k <= WINDOW && at + WINDOW <= s.len() {
            // The window may run past the key (into the slot's other bytes):
            // the mask keeps only the key's bytes.
            let mut d = 0;
            for j in 0..WORDS {
                d |= (word(s, at + 8 * j) ^ self.words[j]) & self.mask[j];
            }
            return d == 0;
        }
        eq_short(&s[at..at + k], &self.needle[..k])
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
    use super::{eq_short, KeyMatch};
    use crate::format::tag::{decode, encode, Half, Tag, SLOT_HEADER, SLOT_SIZE};

    /// `other` against the decoded slot, for keys shorter and longer than
    /// the compare window, windows that run past the slot's end, and keys
    /// that differ from the slot's in one byte (inside and just past the
    /// window) or only in length.
    #[test]
    fn other_matches_decoded_slot() {
        let text = |n: usize, salt: u8| -> String {
            (0..n)
                .map(|i| char::from(b'a' + ((i as u8 ^ salt) % 26)))
                .collect()
        };
        let mut checked = 0;
        for (lo, lr, ls) in [(1, 1, 1), (3, 5, 20), (20, 5, 3), (26, 6, 1), (27, 5, 0)]
            .into_iter()
            .chain(
                (0..=SLOT_SIZE - SLOT_HEADER - 2)
                    .step_by(7)
                    .map(|n| (n, 2, SLOT_SIZE - SLOT_HEADER - 2 - n)),
            )
            .chain((0..40).map(|n| (n, 4, 40 - n)))
        {
            let tag = Tag::new(text(lo, 1), text(lr, 2), text(ls, 3));
            let slot = encode(&tag).expect("fits");
            let v = decode(&slot).expect("decodes");
            for half in [Half::Object, Half::Subject] {
                let (name, other) = match half {
                    Half::Object => (v.object, v.subject),
                    Half::Subject => (v.subject, v.object),
                };
                let km = KeyMatch::new(half, v.relationship, name).expect("fits");
                let got = km.other(&slot).map(|r| &slot[r]);
                assert_eq!(got, Some(other.as_bytes()), "{half:?} {lo}/{lr}/{ls}");
                // One byte changed at each position of the key (name and
                // relationship), and the key one byte shorter or longer.
                let key_len = lr + name.len();
                for at in 0..key_len {
                    let (mut n, mut r) =
                        (name.as_bytes().to_vec(), v.relationship.as_bytes().to_vec());
                    let in_rel = match half {
                        Half::Object => at >= n.len(),
                        Half::Subject => at < r.len(),
                    };
                    match (half, in_rel) {
                        (Half::Object, true) => r[at - n.len()] ^= 1,
                        (Half::Object, false) => n[at] ^= 1,
                        (Half::Subject, true) => r[at] ^= 1,
                        (Half::Subject, false) => n[at - r.len()] ^= 1,
                    }
                    let (n, r) = (
                        String::from_utf8(n).expect("ascii"),
                        String::from_utf8(r).expect("ascii"),
                    );
                    let km = KeyMatch::new(half, &r, &n).expect("fits");
                    assert_eq!(km.other(&slot), None, "{half:?} {lo}/{lr}/{ls} byte {at}");
                    checked += 1;
                }
                if !name.is_empty() {
                    let km = KeyMatch::new(half, v.relationship, &name[1..]).expect("fits");
                    assert_eq!(km.other(&slot), None);
                }
                if let Some(km) = KeyMatch::new(half, v.relationship, &format!("{name}a")) {
                    assert_eq!(km.other(&slot), None);
                }
            }
        }
        assert!(checked > 1000, "{checked}");
    }

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
