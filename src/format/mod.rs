//! The on-disk format as pure bytes, no I/O: tag slots, the keyed hashes
//! that place them, blocks and their CRC, the superblock, the intent record
//! and the geometry that says where each bucket lies.

pub mod block;
pub mod bytes;
pub mod crc;
pub mod delta;
pub mod geometry;
pub mod hash;
pub mod intent;
pub mod layout;
pub mod long;
pub mod slot_ops;
pub mod superblock;
pub mod tag;
pub mod zero_runs;

pub use block::{
    prefetch, prefetch_val, BlockMut, BlockRef, BLOCK_SIZE, KIND_PRIMARY, KIND_SECONDARY,
    SLOTS_PER_BLOCK,
};
pub use geometry::{Geometry, NONE};
pub use hash::{place, Place};
pub use intent::{Intent, IntentOp, SlotAddr, INTENT_BLOCK, INTENT_LEN};
pub use layout::{BlockAt, Layout};
pub use superblock::{Superblock, FLAG_CLEAN, FLAG_HALF_ONLY, FLAG_STRINGS, SUPERBLOCK_BLOCK};
pub use tag::{Half, SlotBytes, Tag};
