//! The superblock (block 0): magic, format version, geometry, seed and the clean-close record.

use super::block::BLOCK_SIZE;
use super::bytes::{rd32, rd64};
use super::geometry::Geometry;
use super::layout::{Layout, MAX_SEGMENTS};
use super::tag::SLOT_SIZE;
use crate::error::{Error, Result};

/// File magic, the first 8 bytes of every store.
pub const MAGIC: &[u8; 8] = b"TAGSTORE";
/// Highest on-disk format version this build reads and writes: 3 is format
/// 2 with a strings file (written only by a store holding long tags, so
/// that older builds refuse it rather than read references as strings).
pub const FORMAT_VERSION: u32 = 3;
/// Block holding the superblock.
pub const SUPERBLOCK_BLOCK: u64 = 0;
/// First block of the primary partition.
pub const PRIMARY_BASE: u64 = 2;

/// Superblock flag: the tables at `table_offset` match the blocks.
pub const FLAG_CLEAN: u32 = 1;
/// Superblock flag (format 2): each tag may be stored in one half only
/// (a node behind a proxy, which receives each half of a tag separately).
pub const FLAG_HALF_ONLY: u32 = 2;
/// Superblock flag (format 3): tags may hold strings by reference, kept in
/// the strings file `STORE.strings` (DESIGN.md §3.7).
pub const FLAG_STRINGS: u32 = 4;

/// Offset of the version-2 primary segment starts (32 × u64).
const SEG_OFF: usize = 88;
/// Offset of the version-2 split allowance (u64).
const ALLOWANCE_OFF: usize = SEG_OFF + 8 * MAX_SEGMENTS;
/// First byte after the split allowance: zero up to the CRC.
const RESERVED_OFF: usize = ALLOWANCE_OFF + 8;
/// Decoded superblock (block 0).
#[derive(Clone, Debug)]
pub struct Superblock {
    /// Bucket geometry.
    pub layout: Layout,
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

impl Superblock {
    /// True if the store was shut down cleanly.
    pub fn clean(&self) -> bool {
        self.flags & FLAG_CLEAN != 0
    }

    /// The format version written to disk: 3 once the store holds long
    /// strings, else the layout's (1 or 2).
    pub fn version(&self) -> u32 {
        match self.flags & FLAG_STRINGS != 0 {
            true => 3,
            false => self.layout.version,
        }
    }

    /// Serialises into a 4 KB block image.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = vec![0u8; BLOCK_SIZE];
        b[0..8].copy_from_slice(MAGIC);
        let l = &self.layout;
        b[8..12].copy_from_slice(&self.version().to_le_bytes());
        b[12..16].copy_from_slice(&(BLOCK_SIZE as u32).to_le_bytes());
        b[16..20].copy_from_slice(&(SLOT_SIZE as u32).to_le_bytes());
        b[20..24].copy_from_slice(&l.base.to_le_bytes());
        b[24..28].copy_from_slice(&l.blocks_per_primary.to_le_bytes());
        b[28..32].copy_from_slice(&l.blocks_per_secondary.to_le_bytes());
        b[32..36].copy_from_slice(&self.secondary_count.to_le_bytes());
        b[36..40].copy_from_slice(&self.flags.to_le_bytes());
        b[40..48].copy_from_slice(&self.seed.to_le_bytes());
        b[48..56].copy_from_slice(&self.tag_count.to_le_bytes());
        b[56..64].copy_from_slice(&self.table_offset.to_le_bytes());
        b[64..72].copy_from_slice(&self.table_len.to_le_bytes());
        b[72..76].copy_from_slice(&self.table_crc.to_le_bytes());
        if l.version >= 2 {
            b[76..80].copy_from_slice(&l.level.to_le_bytes());
            b[80..84].copy_from_slice(&l.split.to_le_bytes());
            b[84..88].copy_from_slice(&l.segments.to_le_bytes());
            for (k, s) in l.seg_start.iter().enumerate() {
                b[SEG_OFF + 8 * k..SEG_OFF + 8 * k + 8].copy_from_slice(&s.to_le_bytes());
            }
            b[ALLOWANCE_OFF..RESERVED_OFF].copy_from_slice(&l.allowance.to_le_bytes());
        }
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
        let c = crc32fast::hash(&b[..BLOCK_SIZE - 4]);
        let crc_ok = c == rd32(b, BLOCK_SIZE - 4);
        if version > FORMAT_VERSION {
            // Every format keeps the checksum in the block's last 4 bytes
            // (DESIGN.md §3.1): a version past ours under a checksum that
            // does not match is damage, not a newer store (one flipped bit
            // read as "version 1027 is newer" sent a user to upgrade).
            if !crc_ok {
                return Err(Error::corrupt(format!(
                    "superblock (block 0) checksum mismatch (it names format version {version}, \
                     past this build's {FORMAT_VERSION}: a damaged superblock)"
                )));
            }
            return Err(Error::UnsupportedVersion {
                found: version,
                supported: FORMAT_VERSION,
            });
        }
        if !crc_ok {
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
        let flags = rd32(b, 36);
        let known = match version {
            1 => FLAG_CLEAN,
            2 => FLAG_CLEAN | FLAG_HALF_ONLY,
            _ => FLAG_CLEAN | FLAG_HALF_ONLY | FLAG_STRINGS,
        };
        if version == 3 && flags & FLAG_STRINGS == 0 {
            return Err(Error::corrupt(
                "superblock names format 3 without the strings flag",
            ));
        }
        if flags & !known != 0 {
            return Err(Error::corrupt(format!(
                "superblock flags {flags:#x} set bits format {version} does not define"
            )));
        }
        if b[RESERVED_OFF..BLOCK_SIZE - 4].iter().any(|&x| x != 0)
            || (version == 1 && b[76..RESERVED_OFF].iter().any(|&x| x != 0))
        {
            return Err(Error::corrupt(format!(
                "superblock bytes reserved in format {version} are not zero"
            )));
        }
        let layout = if version == 1 {
            Layout::v1(geometry)
        } else {
            let starts: Vec<u64> = (0..MAX_SEGMENTS)
                .map(|k| rd64(b, SEG_OFF + 8 * k))
                .collect();
            let segments = rd32(b, 84);
            if segments == 0 || segments as usize > MAX_SEGMENTS {
                return Err(Error::corrupt(format!(
                    "superblock names {segments} primary segments"
                )));
            }
            let mut l = Layout::build(
                version.min(2),
                geometry,
                rd32(b, 76),
                rd32(b, 80),
                segments,
                &starts,
            );
            l.allowance = rd64(b, ALLOWANCE_OFF);
            if let Some(why) = l.inconsistency() {
                return Err(Error::corrupt(format!("superblock growth state: {why}")));
            }
            l
        };
        Ok(Some(Superblock {
            layout,
            secondary_count: rd32(b, 32),
            flags,
            seed: rd64(b, 40),
            tag_count: rd64(b, 48),
            table_offset: rd64(b, 56),
            table_len: rd64(b, 64),
            table_crc: rd32(b, 72),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn superblock_roundtrip_and_damage() {
        let mut layout = Layout::v2(Geometry::for_expected_tags(10_000));
        layout.allowance = 12_345;
        let sb = Superblock {
            layout,
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
        assert_eq!(back.layout, sb.layout);
        assert_eq!(back.seed, 42);
        assert!(back.clean());
        let mut bad = img.clone();
        bad[41] ^= 0x10;
        assert!(matches!(Superblock::decode(&bad), Err(Error::Corrupt(_))));
        let mut newer = img.clone();
        newer[8..12].copy_from_slice(&4u32.to_le_bytes());
        // A newer version under a checksum that does not match is damage.
        assert!(matches!(Superblock::decode(&newer), Err(Error::Corrupt(_))));
        let c = crc32fast::hash(&newer[..BLOCK_SIZE - 4]);
        newer[BLOCK_SIZE - 4..].copy_from_slice(&c.to_le_bytes());
        assert!(matches!(
            Superblock::decode(&newer),
            Err(Error::UnsupportedVersion { found: 4, .. })
        ));
        // The strings flag makes the image format 3, and back.
        let mut long = sb.clone();
        long.flags |= FLAG_STRINGS;
        let img3 = long.encode();
        assert_eq!(rd32(&img3, 8), 3);
        let back = Superblock::decode(&img3).expect("ok").expect("ours");
        assert_eq!(back.flags, FLAG_CLEAN | FLAG_STRINGS);
        assert_eq!(back.layout, sb.layout);
        assert_eq!(back.encode(), img3);
        // Format 2 does not define the flag.
        let mut v2 = img3.clone();
        v2[8..12].copy_from_slice(&2u32.to_le_bytes());
        let c = crc32fast::hash(&v2[..BLOCK_SIZE - 4]);
        v2[BLOCK_SIZE - 4..].copy_from_slice(&c.to_le_bytes());
        assert!(matches!(Superblock::decode(&v2), Err(Error::Corrupt(_))));
        assert!(Superblock::decode(&[0u8; BLOCK_SIZE])
            .expect("ok")
            .is_none());
    }

    /// Regression: the limit on a new store's fixed partition (8 TiB) was
    /// also applied when decoding, so a sparse store of a larger geometry,
    /// valid before, no longer opened ("corrupt").
    #[test]
    fn a_geometry_past_the_new_store_limit_still_decodes() {
        let g = Geometry {
            primary_buckets_per_half: 16_385,
            blocks_per_primary: 65_536,
            blocks_per_secondary: 16,
        };
        assert!(g.validate_new().is_err(), "too large for a new store");
        let sb = Superblock {
            layout: Layout::v1(g),
            secondary_count: 0,
            flags: 0,
            seed: 1,
            tag_count: 0,
            table_offset: 0,
            table_len: 0,
            table_crc: 0,
        };
        let back = Superblock::decode(&sb.encode())
            .expect("decodes")
            .expect("ours");
        assert_eq!(back.layout.geometry(), g);
    }
}
