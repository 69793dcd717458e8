//! The slot directory: per primary block, one byte per slot naming the key
//! (a byte of its fingerprint) of the tag last put there. Memory only.
//!
//! A FIND or DELETE of a key with a few tags reads the directory's line
//! for its bucket (32 bytes a block, where the headers are a page apart)
//! and then asks for the matching slots and their blocks' headers
//! together, instead of reading every written block's header first and
//! only then its slots; a block that holds nothing of the key is not
//! touched at all.
//!
//! The directory may name keys that left (a DELETE does not clear it),
//! never miss one: the header still decides (occupied, 16-bit
//! fingerprint). It is valid for a bucket only while the bucket's extent
//! is known ([`super::Accel`]): learning the extent learns the directory,
//! every INSERT while it is known puts its byte, and whatever moves tags
//! without an INSERT (packing a bucket after a split) learns both again.

use crate::format::{BlockRef, SLOTS_PER_BLOCK};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

/// Words of the directory per block (32 bytes: 25 slots, 7 bytes unused).
const WORDS: usize = 4;

/// Blocks per chunk of the directory: chunks are allocated on first write,
/// so the directory costs memory only where buckets were read or written.
const CHUNK_BLOCKS: usize = 1024;

/// Primary blocks the directory covers at most (1 GiB of bytes once every
/// chunk is written: about 4 bytes per tag). Blocks past it are read as
/// before, header first.
pub const MAX_BLOCKS: usize = 1 << 25;

/// Every slot of a block.
const ALL: u32 = u32::MAX >> (32 - SLOTS_PER_BLOCK);

/// The directory byte of key fingerprint `fp`: its high byte, never 0
/// (0 marks a slot with nothing put since the directory was learnt).
#[inline]
pub fn dir_byte(fp: u16) -> u8 {
    ((fp >> 8) as u8).max(1)
}

/// One byte per slot of every primary block (up to [`MAX_BLOCKS`]).
#[derive(Debug, Default)]
pub struct SlotDirectory {
    /// Chunks of [`CHUNK_BLOCKS`] blocks; one not allocated reads as zeros.
    chunks: Vec<OnceLock<Box<[AtomicU64]>>>,
    /// Blocks covered.
    blocks: usize,
}

impl SlotDirectory {
    /// A directory of `blocks` primary blocks, every slot unnamed.
    pub fn new(blocks: usize) -> Self {
        let mut d = SlotDirectory::default();
        d.grow(blocks);
        d
    }

    /// Makes room for `blocks` primary blocks (new ones unnamed), up to
    /// [`MAX_BLOCKS`].
    pub fn grow(&mut self, blocks: usize) {
        self.blocks = self.blocks.max(blocks.min(MAX_BLOCKS));
        let chunks = self.blocks.div_ceil(CHUNK_BLOCKS);
        if self.chunks.len() < chunks {
            self.chunks.resize_with(chunks, OnceLock::new);
        }
    }

    /// True if primary block `k` is covered (its bytes are kept).
    #[inline]
    pub fn covers(&self, k: usize) -> bool {
        k < self.blocks
    }

    /// The words of block `k`, if its chunk is allocated.
    #[inline]
    fn words(&self, k: usize) -> Option<&[AtomicU64]> {
        let c = self.chunks.get(k / CHUNK_BLOCKS)?.get()?;
        let at = (k % CHUNK_BLOCKS) * WORDS;
        c.get(at..at + WORDS)
    }

    /// The words of block `k`, allocating its chunk (`None`: not covered).
    fn words_made(&self, k: usize) -> Option<&[AtomicU64]> {
        if !self.covers(k) {
            return None;
        }
        let c = self.chunks.get(k / CHUNK_BLOCKS)?.get_or_init(|| {
            (0..CHUNK_BLOCKS * WORDS)
                .map(|_| AtomicU64::new(0))
                .collect()
        });
        let at = (k % CHUNK_BLOCKS) * WORDS;
        c.get(at..at + WORDS)
    }

    /// Asks the CPU for the bytes of primary blocks `k..k + n` (a hint).
    #[inline]
    pub fn prefetch(&self, k: usize, n: usize) {
        let mut b = k;
        while b < k + n {
            if let Some(w) = self.words(b) {
                crate::format::prefetch_val(&w[0]);
            }
            // Two blocks per 64-byte line.
            b += 2;
        }
    }

    /// Rewrites primary block `k`'s bytes from the block itself.
    pub fn learn(&self, k: usize, blk: &BlockRef<'_>) {
        let mut bytes = [0u8; WORDS * 8];
        for i in blk.occupied_slots() {
            bytes[i] = dir_byte(blk.key_fp(i));
        }
        let cells = if bytes == [0; WORDS * 8] {
            // Nothing to name: an unallocated chunk already reads so.
            self.words(k)
        } else {
            self.words_made(k)
        };
        for (cell, c) in cells.into_iter().flatten().zip(bytes.chunks_exact(8)) {
            let mut v = [0u8; 8];
            v.copy_from_slice(c);
            cell.store(u64::from_le_bytes(v), Ordering::Relaxed);
        }
    }

    /// Records that slot `i` of primary block `k` now holds a tag of key
    /// fingerprint `fp` (caller holds the store's write lock).
    pub fn put(&self, k: usize, i: usize, fp: u16) {
        if let Some(cell) = self.words_made(k).and_then(|w| w.get(i / 8)) {
            let shift = 8 * (i % 8);
            let v = cell.load(Ordering::Relaxed);
            let v = (v & !(0xFF << shift)) | (u64::from(dir_byte(fp)) << shift);
            cell.store(v, Ordering::Relaxed);
        }
    }

    /// The slots of primary block `k` that may hold key fingerprint `fp`
    /// (bit `i`: slot `i`; every slot of a block not covered).
    #[inline]
    pub fn matching(&self, k: usize, fp: u16) -> u32 {
        if !self.covers(k) {
            return ALL;
        }
        let Some(cells) = self.words(k) else {
            return 0;
        };
        let mut w = [0u64; WORDS];
        for (x, cell) in w.iter_mut().zip(cells) {
            *x = cell.load(Ordering::Relaxed);
        }
        bytes_equal(&w, dir_byte(fp)) & ALL
    }
}

/// Bit `i` set where byte `i` of `w` (little-endian words) equals `b`.
#[cfg(target_arch = "x86_64")]
#[inline]
fn bytes_equal(w: &[u64; WORDS], b: u8) -> u32 {
    // SSE2 is part of every x86_64: two compares of 16 bytes, where the
    // word-at-a-time form below took ~40 instructions per block.
    use std::arch::x86_64::{_mm_cmpeq_epi8, _mm_movemask_epi8, _mm_set1_epi8, _mm_set_epi64x};
    // SAFETY: SSE2 is enabled on every x86_64 target; no pointer is read.
    let (a, c) = unsafe {
        let needle = _mm_set1_epi8(b as i8);
        let lo = _mm_set_epi64x(w[1] as i64, w[0] as i64);
        let hi = _mm_set_epi64x(w[3] as i64, w[2] as i64);
        (
            _mm_movemask_epi8(_mm_cmpeq_epi8(lo, needle)),
            _mm_movemask_epi8(_mm_cmpeq_epi8(hi, needle)),
        )
    };
    (a as u32 & 0xFFFF) | (c as u32 & 0xFFFF) << 16
}

/// Bit `i` set where byte `i` of `w` (little-endian words) equals `b`.
#[cfg(not(target_arch = "x86_64"))]
#[inline]
fn bytes_equal(w: &[u64; WORDS], b: u8) -> u32 {
    let needle = u64::from(b) * 0x0101_0101_0101_0101;
    let low7 = 0x7F7F_7F7F_7F7F_7F7F;
    let mut out = 0u32;
    for (i, v) in w.iter().enumerate() {
        let x = v ^ needle;
        // The high bit of each zero byte of `x`, exactly.
        let zero = !(((x & low7) + low7) | x | low7);
        // The 8 high bits gathered into one byte.
        let bits = ((zero >> 7).wrapping_mul(0x0102_0408_1020_4080) >> 56) as u32;
        out |= bits << (8 * i);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::{BlockMut, BLOCK_SIZE, KIND_PRIMARY};

    #[test]
    fn matching_names_exactly_the_slots_put_with_the_key_byte() {
        let d = SlotDirectory::new(3);
        let fp = 0xAB12;
        for i in [0, 7, 8, 15, 16, 24] {
            d.put(1, i, fp);
        }
        d.put(1, 3, 0xAC12);
        assert_eq!(
            d.matching(1, fp),
            1 | 1 << 7 | 1 << 8 | 1 << 15 | 1 << 16 | 1 << 24
        );
        // Same high byte, other low byte: still a match (one byte kept).
        assert_eq!(d.matching(1, 0xAB99), d.matching(1, fp));
        assert_eq!(d.matching(1, 0xAC00), 1 << 3);
        assert_eq!(d.matching(0, fp), 0);
        assert_eq!(d.matching(2, fp), 0);
        // A slot put again names its new key only.
        d.put(1, 7, 0x0100);
        assert_eq!(d.matching(1, fp) & 1 << 7, 0);
        assert_eq!(d.matching(1, 0x0100), 1 << 7);
        // Past the directory's end: every slot may match.
        assert_eq!(d.matching(3, fp), ALL);
        assert!(!d.covers(3));
        d.put(3, 0, fp);
        assert_eq!(d.matching(3, 0x7700), ALL);
    }

    #[test]
    fn bytes_equal_names_every_equal_byte() {
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        for _ in 0..2000 {
            let mut w = [0u64; WORDS];
            for v in &mut w {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                // Few distinct bytes, so that many are equal.
                *v = x & 0x0303_0303_0303_0303;
            }
            for b in 0..4u8 {
                let want = (0..32).fold(0u32, |m, i| {
                    m | (u32::from((w[i / 8] >> (8 * (i % 8))) as u8 == b) << i)
                });
                assert_eq!(bytes_equal(&w, b), want);
            }
        }
    }

    #[test]
    fn a_key_byte_of_zero_never_matches_an_unnamed_slot() {
        let d = SlotDirectory::new(1);
        assert_eq!(d.matching(0, 0x00FF), 0);
        d.put(0, 4, 0x00FF);
        assert_eq!(d.matching(0, 0x0012), 1 << 4);
    }

    #[test]
    fn learn_takes_the_occupied_slots_of_a_block() {
        let mut img = vec![0u8; BLOCK_SIZE];
        let mut b = BlockMut(&mut img);
        b.set_identity(KIND_PRIMARY, 0, 0);
        let slot = [0u8; crate::format::tag::SLOT_SIZE];
        b.put(2, &slot, 0x4000, 1);
        b.put(20, &slot, 0x4001, 1);
        b.put(21, &slot, 0x5000, 1);
        b.clear(21);
        let d = SlotDirectory::new(1);
        d.put(0, 9, 0x4000);
        d.learn(0, &BlockRef(&img));
        assert_eq!(d.matching(0, 0x4000), 1 << 2 | 1 << 20);
        assert_eq!(d.matching(0, 0x5000), 0);
    }
}
