//! Superblock, geometry and intent record: the fixed metadata at the start of the file.

use crate::block::{BLOCK_SIZE, SLOTS_PER_BLOCK};
use crate::error::{Error, Result};
use crate::tag::{SlotBytes, SLOT_SIZE};
use serde::Serialize;

/// File magic, the first 8 bytes of every store.
pub const MAGIC: &[u8; 8] = b"TAGSTORE";
/// On-disk format version written by this build.
pub const FORMAT_VERSION: u32 = 1;
/// Block holding the superblock.
pub const SUPERBLOCK_BLOCK: u64 = 0;
/// Block holding the in-flight operation record.
pub const INTENT_BLOCK: u64 = 1;
/// First block of the primary partition.
pub const PRIMARY_BASE: u64 = 2;

/// Superblock flag: the tables at `table_offset` match the blocks.
pub const FLAG_CLEAN: u32 = 1;

/// Bucket geometry, fixed when the store is created.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Geometry {
    /// Primary buckets in each half (object half and subject half).
    pub primary_buckets_per_half: u32,
    /// 4 KB blocks in each primary bucket.
    pub blocks_per_primary: u32,
    /// 4 KB blocks in each secondary (overflow) bucket.
    pub blocks_per_secondary: u32,
}

/// Default blocks per primary bucket (16 KB: 100 slots).
pub const DEFAULT_BLOCKS_PER_PRIMARY: u32 = 4;
/// Default blocks per secondary bucket (64 KB: 400 slots).
pub const DEFAULT_BLOCKS_PER_SECONDARY: u32 = 16;
/// Default expected tag count when none is given.
pub const DEFAULT_EXPECTED_TAGS: u64 = 1_000_000;
/// Target mean fill of a primary bucket at the expected tag count.
pub const TARGET_PRIMARY_FILL: f64 = 0.5;

impl Geometry {
    /// Geometry sized for `expected_tags` with the default bucket sizes.
    pub fn for_expected_tags(expected_tags: u64) -> Geometry {
        Self::sized(
            expected_tags,
            DEFAULT_BLOCKS_PER_PRIMARY,
            DEFAULT_BLOCKS_PER_SECONDARY,
        )
    }

    /// Geometry sized for `expected_tags` with the given bucket sizes.
    pub fn sized(expected_tags: u64, blocks_per_primary: u32, blocks_per_secondary: u32) -> Self {
        let cap = blocks_per_primary.max(1) as f64 * SLOTS_PER_BLOCK as f64 * TARGET_PRIMARY_FILL;
        let n = (expected_tags.max(1) as f64 / cap).ceil();
        let n = n.clamp(1.0, MAX_PRIMARY_PER_HALF as f64) as u32;
        Geometry {
            primary_buckets_per_half: n,
            blocks_per_primary,
            blocks_per_secondary,
        }
    }

    /// Checks the ranges; names the offending value.
    pub fn validate(&self) -> Result<()> {
        if self.primary_buckets_per_half == 0
            || self.primary_buckets_per_half > MAX_PRIMARY_PER_HALF
        {
            return Err(Error::InvalidArgument(format!(
                "primary buckets per half must be 1..={MAX_PRIMARY_PER_HALF}, got {}",
                self.primary_buckets_per_half
            )));
        }
        for (name, v) in [
            ("blocks per primary bucket", self.blocks_per_primary),
            ("blocks per secondary bucket", self.blocks_per_secondary),
        ] {
            if v == 0 || v > MAX_BLOCKS_PER_BUCKET {
                return Err(Error::InvalidArgument(format!(
                    "{name} must be 1..={MAX_BLOCKS_PER_BUCKET}, got {v}"
                )));
            }
        }
        Ok(())
    }

    /// Total primary buckets (both halves).
    pub fn primary_buckets(&self) -> u32 {
        2 * self.primary_buckets_per_half
    }

    /// Slots in a primary bucket.
    pub fn primary_capacity(&self) -> u32 {
        self.blocks_per_primary * SLOTS_PER_BLOCK as u32
    }

    /// Slots in a secondary bucket.
    pub fn secondary_capacity(&self) -> u32 {
        self.blocks_per_secondary * SLOTS_PER_BLOCK as u32
    }

    /// First block of global primary bucket `g`.
    pub fn primary_start(&self, g: u32) -> u64 {
        PRIMARY_BASE + g as u64 * self.blocks_per_primary as u64
    }

    /// First block of the secondary partition.
    pub fn secondary_base(&self) -> u64 {
        self.primary_start(self.primary_buckets())
    }

    /// First block of secondary bucket `s`.
    pub fn secondary_start(&self, s: u32) -> u64 {
        self.secondary_base() + s as u64 * self.blocks_per_secondary as u64
    }

    /// File length holding `secondary` secondary buckets.
    pub fn file_len(&self, secondary: u32) -> u64 {
        self.secondary_start(secondary) * BLOCK_SIZE as u64
    }

    /// Global primary bucket index of half-local bucket `b`.
    pub fn global(&self, half: crate::tag::Half, b: u32) -> u32 {
        half.index() as u32 * self.primary_buckets_per_half + b
    }

    /// Half of global primary bucket `g`.
    pub fn half_of(&self, g: u32) -> crate::tag::Half {
        if g < self.primary_buckets_per_half {
            crate::tag::Half::Object
        } else {
            crate::tag::Half::Subject
        }
    }
}

/// Largest primary bucket count per half.
pub const MAX_PRIMARY_PER_HALF: u32 = 1 << 30;
/// Largest bucket size in blocks.
pub const MAX_BLOCKS_PER_BUCKET: u32 = 1 << 16;

/// Decoded superblock (block 0).
#[derive(Clone, Debug)]
pub struct Superblock {
    /// Bucket geometry.
    pub geometry: Geometry,
    /// Secondary buckets in the file (valid when clean).
    pub secondary_count: u32,
    /// Flags (bit 0: clean shutdown).
    pub flags: u32,
    /// Per-store hash seed.
    pub seed: u64,
    /// Tags stored (valid when clean).
    pub tag_count: u64,
    /// Byte offset of the persisted tables (valid when clean).
    pub table_offset: u64,
    /// Byte length of the persisted tables.
    pub table_len: u64,
    /// CRC32 of the persisted tables.
    pub table_crc: u32,
}

/// Little-endian u32 at byte `o` (the caller checked the length).
pub(crate) fn rd32(b: &[u8], o: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[o..o + 4]);
    u32::from_le_bytes(a)
}
/// Little-endian u64 at byte `o` (the caller checked the length).
pub(crate) fn rd64(b: &[u8], o: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[o..o + 8]);
    u64::from_le_bytes(a)
}

impl Superblock {
    /// True if the store was shut down cleanly.
    pub fn clean(&self) -> bool {
        self.flags & FLAG_CLEAN != 0
    }

    /// Serialises into a 4 KB block image.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = vec![0u8; BLOCK_SIZE];
        b[0..8].copy_from_slice(MAGIC);
        b[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
        b[12..16].copy_from_slice(&(BLOCK_SIZE as u32).to_le_bytes());
        b[16..20].copy_from_slice(&(SLOT_SIZE as u32).to_le_bytes());
        b[20..24].copy_from_slice(&self.geometry.primary_buckets_per_half.to_le_bytes());
        b[24..28].copy_from_slice(&self.geometry.blocks_per_primary.to_le_bytes());
        b[28..32].copy_from_slice(&self.geometry.blocks_per_secondary.to_le_bytes());
        b[32..36].copy_from_slice(&self.secondary_count.to_le_bytes());
        b[36..40].copy_from_slice(&self.flags.to_le_bytes());
        b[40..48].copy_from_slice(&self.seed.to_le_bytes());
        b[48..56].copy_from_slice(&self.tag_count.to_le_bytes());
        b[56..64].copy_from_slice(&self.table_offset.to_le_bytes());
        b[64..72].copy_from_slice(&self.table_len.to_le_bytes());
        b[72..76].copy_from_slice(&self.table_crc.to_le_bytes());
        let c = crc32fast::hash(&b[..BLOCK_SIZE - 4]);
        b[BLOCK_SIZE - 4..].copy_from_slice(&c.to_le_bytes());
        b
    }

    /// Parses block 0; `Ok(None)` means the magic is not ours.
    pub fn decode(b: &[u8]) -> Result<Option<Superblock>> {
        if b.len() < BLOCK_SIZE || &b[0..8] != MAGIC {
            return Ok(None);
        }
        let version = rd32(b, 8);
        if version > FORMAT_VERSION {
            return Err(Error::UnsupportedVersion {
                found: version,
                supported: FORMAT_VERSION,
            });
        }
        let c = crc32fast::hash(&b[..BLOCK_SIZE - 4]);
        if c != rd32(b, BLOCK_SIZE - 4) {
            return Err(Error::corrupt("superblock (block 0) checksum mismatch"));
        }
        if version == 0 {
            return Err(Error::corrupt("superblock names format version 0"));
        }
        if rd32(b, 12) != BLOCK_SIZE as u32 || rd32(b, 16) != SLOT_SIZE as u32 {
            return Err(Error::corrupt(format!(
                "superblock names block size {} and slot size {}; this build uses {BLOCK_SIZE} and {SLOT_SIZE}",
                rd32(b, 12),
                rd32(b, 16)
            )));
        }
        let geometry = Geometry {
            primary_buckets_per_half: rd32(b, 20),
            blocks_per_primary: rd32(b, 24),
            blocks_per_secondary: rd32(b, 28),
        };
        geometry
            .validate()
            .map_err(|e| Error::corrupt(format!("superblock geometry: {e}")))?;
        Ok(Some(Superblock {
            geometry,
            secondary_count: rd32(b, 32),
            flags: rd32(b, 36),
            seed: rd64(b, 40),
            tag_count: rd64(b, 48),
            table_offset: rd64(b, 56),
            table_len: rd64(b, 64),
            table_crc: rd32(b, 72),
        }))
    }
}

/// Kind of operation recorded in the intent block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IntentOp {
    /// A tag being inserted at the recorded slots.
    Insert = 1,
    /// A tag being deleted from the recorded slots.
    Delete = 2,
}

/// Slot address: block number and slot index; block `u64::MAX` means none.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlotAddr {
    /// Absolute block number.
    pub block: u64,
    /// Slot index within the block.
    pub slot: u32,
}

impl SlotAddr {
    /// The "no slot" address.
    pub const NONE: SlotAddr = SlotAddr {
        block: u64::MAX,
        slot: 0,
    };
}

/// The in-flight operation record kept in block 1.
#[derive(Clone, Debug)]
pub struct Intent {
    /// Operation.
    pub op: IntentOp,
    /// Slot in the object half.
    pub object_slot: SlotAddr,
    /// Slot in the subject half.
    pub subject_slot: SlotAddr,
    /// Owner and chain position of the object-half block (for a first write).
    pub object_identity: (u32, u32),
    /// Owner and chain position of the subject-half block (for a first write).
    pub subject_identity: (u32, u32),
    /// Encoded tag.
    pub tag: SlotBytes,
}

const INTENT_MAGIC: &[u8; 4] = b"INTN";
/// Bytes of the intent record covered by its CRC.
pub const INTENT_LEN: usize = 56 + SLOT_SIZE;

impl Intent {
    /// Serialises into the first `INTENT_LEN` bytes of block 1.
    pub fn encode(&self) -> [u8; INTENT_LEN] {
        let mut b = [0u8; INTENT_LEN];
        b[4..8].copy_from_slice(INTENT_MAGIC);
        b[8] = self.op as u8;
        b[16..24].copy_from_slice(&self.object_slot.block.to_le_bytes());
        b[24..28].copy_from_slice(&self.object_slot.slot.to_le_bytes());
        b[28..32].copy_from_slice(&self.subject_slot.slot.to_le_bytes());
        b[32..40].copy_from_slice(&self.subject_slot.block.to_le_bytes());
        b[40..44].copy_from_slice(&self.object_identity.0.to_le_bytes());
        b[44..48].copy_from_slice(&self.object_identity.1.to_le_bytes());
        b[48..52].copy_from_slice(&self.subject_identity.0.to_le_bytes());
        b[52..56].copy_from_slice(&self.subject_identity.1.to_le_bytes());
        b[56..56 + SLOT_SIZE].copy_from_slice(&self.tag);
        let c = crc32fast::hash(&b[4..]);
        b[0..4].copy_from_slice(&c.to_le_bytes());
        b
    }

    /// Parses block 1; `None` if no valid operation is recorded.
    pub fn decode(b: &[u8]) -> Option<Intent> {
        if b.len() < INTENT_LEN || &b[4..8] != INTENT_MAGIC {
            return None;
        }
        if crc32fast::hash(&b[4..INTENT_LEN]) != rd32(b, 0) {
            return None;
        }
        let op = match b[8] {
            1 => IntentOp::Insert,
            2 => IntentOp::Delete,
            _ => return None,
        };
        let mut tag = [0u8; SLOT_SIZE];
        tag.copy_from_slice(&b[56..56 + SLOT_SIZE]);
        Some(Intent {
            op,
            object_slot: SlotAddr {
                block: rd64(b, 16),
                slot: rd32(b, 24),
            },
            subject_slot: SlotAddr {
                block: rd64(b, 32),
                slot: rd32(b, 28),
            },
            object_identity: (rd32(b, 40), rd32(b, 44)),
            subject_identity: (rd32(b, 48), rd32(b, 52)),
            tag,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn superblock_roundtrip_and_damage() {
        let sb = Superblock {
            geometry: Geometry::for_expected_tags(10_000),
            secondary_count: 3,
            flags: FLAG_CLEAN,
            seed: 42,
            tag_count: 7,
            table_offset: 8192,
            table_len: 100,
            table_crc: 5,
        };
        let img = sb.encode();
        let back = Superblock::decode(&img).expect("ok").expect("ours");
        assert_eq!(back.geometry, sb.geometry);
        assert_eq!(back.seed, 42);
        assert!(back.clean());
        let mut bad = img.clone();
        bad[41] ^= 0x10;
        assert!(matches!(Superblock::decode(&bad), Err(Error::Corrupt(_))));
        let mut newer = img.clone();
        newer[8..12].copy_from_slice(&2u32.to_le_bytes());
        assert!(matches!(
            Superblock::decode(&newer),
            Err(Error::UnsupportedVersion { found: 2, .. })
        ));
        assert!(Superblock::decode(&[0u8; BLOCK_SIZE])
            .expect("ok")
            .is_none());
    }

    #[test]
    fn intent_roundtrip() {
        let i = Intent {
            op: IntentOp::Delete,
            object_slot: SlotAddr { block: 9, slot: 3 },
            subject_slot: SlotAddr::NONE,
            object_identity: (4, 0),
            subject_identity: (0, 0),
            tag: [7u8; SLOT_SIZE],
        };
        let mut img = i.encode();
        let back = Intent::decode(&img).expect("valid");
        assert_eq!(back.op, IntentOp::Delete);
        assert_eq!(back.object_slot, i.object_slot);
        assert_eq!(back.subject_slot, SlotAddr::NONE);
        img[50] ^= 1;
        assert!(Intent::decode(&img).is_none());
    }
}
