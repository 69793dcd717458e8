//! Zero-run encoding of a block image (journal version 2): most of a
//! bucket's block is empty slots, so an image shrinks to its used bytes.
//!
//! An encoding is a sequence of runs, each `u16` zeros, `u16` literal
//! length, then that many literal bytes (little-endian), covering the
//! block exactly.

use super::BLOCK_SIZE;

/// Zeros are found a word at a time: a zero run is whole zero words, and
/// shorter zero gaps stay inside a literal (a run header costs 4 bytes).
const WORD: usize = 8;

/// Appends the encoding of `img` (one block) to `out`.
pub fn encode(img: &[u8], out: &mut Vec<u8>) {
    let words: Vec<u64> = img
        .chunks_exact(WORD)
        .map(|c| c.iter().rev().fold(0u64, |a, &b| (a << 8) | b as u64))
        .collect();
    let n = words.len();
    let mut i = 0;
    while i < n {
        let z = i;
        while i < n && words[i] == 0 {
            i += 1;
        }
        let lit = i;
        while i < n && words[i] != 0 {
            i += 1;
        }
        run(out, (lit - z) * WORD, &img[lit * WORD..i * WORD]);
    }
    let tail = &img[n * WORD..];
    if !tail.is_empty() {
        run(out, 0, tail);
    }
}

/// The length [`encode`] would append for `img`, without encoding it.
pub fn encoded_len(img: &[u8]) -> usize {
    let (words, tail) = img.as_chunks::<WORD>();
    let nonzero = |w: &[u8; WORD]| u64::from_ne_bytes(*w) != 0;
    let (mut len, mut i) = (0, 0);
    while i < words.len() {
        while i < words.len() && !nonzero(&words[i]) {
            i += 1;
        }
        let lit = i;
        while i < words.len() && nonzero(&words[i]) {
            i += 1;
        }
        len += 4 + (i - lit) * WORD;
    }
    if !tail.is_empty() {
        len += 4 + tail.len();
    }
    len
}

fn run(out: &mut Vec<u8>, zeros: usize, lit: &[u8]) {
    out.extend_from_slice(&(zeros as u16).to_le_bytes());
    out.extend_from_slice(&(lit.len() as u16).to_le_bytes());
    out.extend_from_slice(lit);
}

/// Decodes one block image; `None` unless `enc` is exactly a whole encoding.
pub fn decode(enc: &[u8]) -> Option<Vec<u8>> {
    let mut img = Vec::with_capacity(BLOCK_SIZE);
    let mut at = 0;
    while at < enc.len() {
        let head = enc.get(at..at + 4)?;
        let z = u16::from_le_bytes([head[0], head[1]]) as usize;
        let lit = u16::from_le_bytes([head[2], head[3]]) as usize;
        let bytes = enc.get(at + 4..at + 4 + lit)?;
        if img.len() + z + lit > BLOCK_SIZE {
            return None;
        }
        img.resize(img.len() + z, 0);
        img.extend_from_slice(bytes);
        at += 4 + lit;
    }
    (img.len() == BLOCK_SIZE).then_some(img)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn round_trips(runs in proptest::collection::vec((0usize..300, 0usize..200, any::<u8>()), 0..40)) {
            let mut img = vec![0u8; BLOCK_SIZE];
            let mut at = 0;
            for (skip, len, byte) in runs {
                at = (at + skip) % BLOCK_SIZE;
                let end = (at + len).min(BLOCK_SIZE);
                img[at..end].fill(byte);
                at = end % BLOCK_SIZE;
            }
            let mut enc = Vec::new();
            encode(&img, &mut enc);
            prop_assert!(enc.len() <= BLOCK_SIZE + 4 * (BLOCK_SIZE / WORD + 1));
            prop_assert_eq!(encoded_len(&img), enc.len());
            prop_assert_eq!(decode(&enc), Some(img));
        }

        #[test]
        fn never_panics_on_garbage(enc in proptest::collection::vec(any::<u8>(), 0..600)) {
            if let Some(img) = decode(&enc) {
                prop_assert_eq!(img.len(), BLOCK_SIZE);
            }
        }
    }

    #[test]
    fn an_empty_block_is_four_bytes_and_a_short_one_is_refused() {
        let mut enc = Vec::new();
        encode(&[0u8; BLOCK_SIZE], &mut enc);
        assert_eq!(enc.len(), 4);
        assert_eq!(decode(&enc[..2]), None);
        assert_eq!(decode(&[0, 1, 0, 0]), None, "256 zeros is not a block");
    }
}
