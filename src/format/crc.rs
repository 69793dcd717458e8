//! CRC-32 arithmetic for updating a block's CRC in place.
//!
//! CRC-32 is affine: for equal-length messages, `crc(A) ^ crc(B)` is the
//! raw CRC (zero initial register, no final inversion) of `A ^ B`. A change
//! confined to a few byte ranges therefore moves the CRC by the raw CRC of
//! each range's XOR difference, advanced over the zero bytes after it to the
//! end of the block. Every range here ends a whole number of slots before
//! the end, so the advance is by `k * 160` zero bytes, `k` in `0..=25`.

use super::block::SLOTS_PER_BLOCK;
use super::tag::SLOT_SIZE;
use std::sync::LazyLock;

/// Raw CRC of `d` (zero initial register, no final inversion).
pub fn raw(d: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new_with_initial(u32::MAX);
    h.update(d);
    !h.finalize()
}

/// One zero byte through the reflected CRC-32 register.
const fn zero_byte(mut r: u32) -> u32 {
    let mut k = 0;
    while k < 8 {
        r = if r & 1 != 0 {
            (r >> 1) ^ 0xEDB8_8320
        } else {
            r >> 1
        };
        k += 1;
    }
    r
}

/// `ADVANCE[k]`: the linear map "feed k*160 zero bytes", as its 32 columns.
static ADVANCE: LazyLock<[[u32; 32]; SLOTS_PER_BLOCK + 1]> = LazyLock::new(|| {
    let mut one_slot = [0u32; 32];
    for (j, col) in one_slot.iter_mut().enumerate() {
        let mut r = 1u32 << j;
        for _ in 0..SLOT_SIZE {
            r = zero_byte(r);
        }
        *col = r;
    }
    let mut t = [[0u32; 32]; SLOTS_PER_BLOCK + 1];
    for (j, col) in t[0].iter_mut().enumerate() {
        *col = 1 << j;
    }
    for k in 1..=SLOTS_PER_BLOCK {
        let prev = t[k - 1];
        for (col, p) in t[k].iter_mut().zip(prev) {
            *col = apply(&one_slot, p);
        }
    }
    t
});

fn apply(cols: &[u32; 32], r: u32) -> u32 {
    let mut out = 0;
    for (j, c) in cols.iter().enumerate() {
        out ^= c & 0u32.wrapping_sub((r >> j) & 1);
    }
    out
}

/// The raw register `r` after `slots * 160` more zero bytes (`slots` ≤ 25).
pub fn zeros_after(r: u32, slots: usize) -> u32 {
    apply(&ADVANCE[slots], r)
}
