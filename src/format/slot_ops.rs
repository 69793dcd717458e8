//! Slot puts and clears as journal entries (journal version 5): a block
//! changed since its last commit only by tags put into slots or slots
//! emptied is journaled as those operations, and replay redoes them on the
//! block as the round's earlier entries leave it. A put costs its tag's
//! bytes and 10 more, a clear 6, where a delta of the same change costs the
//! slot's lines and the header's words (100–250 bytes).
//!
//! An encoding is a sequence of operations, each one byte naming it, one
//! byte the slot index and the block's CRC after it (`u32`), then for a
//! put: `u16` key fingerprint, `u8` tag fingerprint, `u8` length `m`, and
//! the slot's first `m` bytes (the rest of the slot is zeros); integers
//! little-endian. Redoing one writes what [`BlockMut::put`] or
//! [`BlockMut::clear`] writes (the slot, its fingerprints, its bitmap bit)
//! and that CRC: the block comes out as the original change left it. Like
//! a delta's runs these are plain writes (the bitmap word is read to set or
//! clear the operation's own bit, no other): redone on another version of
//! the block (a replay repeated after its write-back), the last write of
//! each byte and bit wins, and a block damaged elsewhere keeps failing its
//! CRC, which is recorded, never recomputed.

use super::block::{BlockMut, SLOTS_PER_BLOCK};
use super::tag::{used_prefix, SlotBytes, SLOT_SIZE};
use super::BLOCK_SIZE;

const PUT: u8 = 1;
const CLEAR: u8 = 2;

/// Appends a put of `slot` into slot `i`, with its fingerprints, that left
/// the block's CRC `crc`, to `out`.
pub fn encode_put(
    out: &mut Vec<u8>,
    i: usize,
    crc: u32,
    slot: &SlotBytes,
    key_fp: u16,
    tag_fp: u8,
) {
    const ZEROS: SlotBytes = [0; SLOT_SIZE];
    let used = used_prefix(slot).len();
    // A slot with bytes past its tag (never written so) is sent whole.
    let m = if slot[used..] == ZEROS[used..] {
        used
    } else {
        SLOT_SIZE
    };
    if out.capacity() == 0 {
        // A block's operations of one stage in one allocation, mostly.
        out.reserve(256);
    }
    out.extend_from_slice(&[PUT, i as u8]);
    out.extend_from_slice(&crc.to_le_bytes());
    out.extend_from_slice(&key_fp.to_le_bytes());
    out.extend_from_slice(&[tag_fp, m as u8]);
    out.extend_from_slice(&slot[..m]);
}

/// Appends a clear of slot `i` that left the block's CRC `crc` to `out`.
pub fn encode_clear(out: &mut Vec<u8>, i: usize, crc: u32) {
    out.extend_from_slice(&[CLEAR, i as u8]);
    out.extend_from_slice(&crc.to_le_bytes());
}

/// Redoes the operations `ops` on `img` (one block); `None` when they do
/// not decode or name a slot past the block's (nothing is guaranteed about
/// `img` then). Like a delta they apply to any bytes: a base torn by a
/// power cut during a checkpoint's write-back is overwritten whole by that
/// checkpoint's image later in the round, and one that is not fails its
/// CRC when the open checks it.
pub fn apply(img: &mut [u8], mut ops: &[u8]) -> Option<()> {
    if img.len() != BLOCK_SIZE {
        return None;
    }
    while let [op, i, c0, c1, c2, c3, rest @ ..] = ops {
        let i = *i as usize;
        if i >= SLOTS_PER_BLOCK {
            return None;
        }
        ops = match *op {
            PUT => {
                let [k0, k1, tag_fp, m, rest @ ..] = rest else {
                    return None;
                };
                let m = *m as usize;
                let bytes = rest.get(..m)?;
                let mut slot = [0u8; SLOT_SIZE];
                slot.get_mut(..m)?.copy_from_slice(bytes);
                BlockMut(img).put(i, &slot, u16::from_le_bytes([*k0, *k1]), *tag_fp);
                &rest[m..]
            }
            CLEAR => {
                BlockMut(img).clear(i);
                rest
            }
            _ => return None,
        };
        img[..4].copy_from_slice(&[*c0, *c1, *c2, *c3]);
    }
    ops.is_empty().then_some(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::block::BlockRef;
    use crate::format::tag::{encode, Tag};
    use crate::format::KIND_PRIMARY;
    use proptest::prelude::*;

    fn written_block() -> Vec<u8> {
        let mut img = vec![0u8; BLOCK_SIZE];
        let mut b = BlockMut(&mut img);
        b.set_identity(KIND_PRIMARY, 3, 0);
        b.seal();
        img
    }

    proptest! {
        /// Any sequence of puts and clears: redoing the encoded operations
        /// on the block as it was gives the block as the calls left it,
        /// byte for byte, and the encoding is never larger than the tag
        /// plus 6 bytes a put.
        #[test]
        fn redone_operations_rebuild_the_block(
            steps in proptest::collection::vec(
                (0usize..SLOTS_PER_BLOCK, proptest::option::of(("[a-zé\t]{0,40}", "[a-z]{1,8}", "[^\n]{0,15}")), any::<u16>(), any::<u8>()),
                1..40,
            ),
        ) {
            let before = written_block();
            let mut live = before.clone();
            let mut ops = Vec::new();
            for (i, tag, kfp, tfp) in steps {
                match tag {
                    Some((o, r, s)) => {
                        let slot = encode(&Tag::new(o, r, s)).expect("fits");
                        let at = ops.len();
                        BlockMut(&mut live).put_resealed(i, &slot, kfp, tfp);
                        encode_put(&mut ops, i, BlockRef(&live).stored_crc(), &slot, kfp, tfp);
                        prop_assert_eq!(ops.len() - at, 10 + used_prefix(&slot).len());
                    }
                    None => {
                        BlockMut(&mut live).clear_resealed(i);
                        encode_clear(&mut ops, i, BlockRef(&live).stored_crc());
                    }
                }
            }
            let mut redone = before.clone();
            prop_assert_eq!(apply(&mut redone, &ops), Some(()));
            prop_assert!(redone == live);
            prop_assert!(BlockRef(&redone).crc_ok());
            // Redone again on the result (a replay repeated after its
            // write-back): the same block.
            prop_assert_eq!(apply(&mut redone, &ops), Some(()));
            prop_assert!(redone == live);
        }

        /// Garbage never panics; a truncated encoding is refused.
        #[test]
        fn garbage_is_refused_or_applied_without_panicking(
            ops in proptest::collection::vec(any::<u8>(), 0..400),
        ) {
            let mut img = written_block();
            let _ = apply(&mut img, &ops);
        }
    }

    #[test]
    fn a_truncated_put_and_a_slot_past_the_block_are_refused() {
        let slot = encode(&Tag::new("photo1", "tagged", "sunset")).expect("fits");
        let mut ops = Vec::new();
        encode_put(&mut ops, 2, 0, &slot, 7, 9);
        let mut img = written_block();
        assert_eq!(apply(&mut img, &ops[..ops.len() - 1]), None);
        assert_eq!(apply(&mut vec![0u8; BLOCK_SIZE - 1], &ops), None);
        let mut img = written_block();
        assert_eq!(
            apply(&mut img, &[CLEAR, SLOTS_PER_BLOCK as u8, 0, 0, 0, 0]),
            None
        );
        assert_eq!(apply(&mut img, &ops), Some(()));
    }
}
