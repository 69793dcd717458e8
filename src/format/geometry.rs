//! Bucket geometry: how many primary buckets, how many blocks per bucket, and where each bucket lies.

use super::block::{BLOCK_SIZE, SLOTS_PER_BLOCK};
use super::superblock::PRIMARY_BASE;
use super::tag::Half;
use crate::error::{Error, Result};
use serde::Serialize;

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

/// "No bucket" in a link field (and the limit on secondary bucket numbers).
pub const NONE: u32 = u32::MAX;

/// Default blocks per primary bucket (16 KB: 100 slots).
pub const DEFAULT_BLOCKS_PER_PRIMARY: u32 = 4;
/// Default blocks per secondary bucket (64 KB: 400 slots).
pub const DEFAULT_BLOCKS_PER_SECONDARY: u32 = 16;
/// Default expected tag count when none is given: none, the store starts
/// with one bucket per half and grows.
pub const DEFAULT_EXPECTED_TAGS: u64 = 0;
/// Checks the blocks per primary and per secondary bucket given; names
/// the one out of range.
pub fn check_bucket_blocks(primary: Option<u32>, secondary: Option<u32>) -> Result<()> {
    for (name, v) in [
        ("blocks per primary bucket", primary),
        ("blocks per secondary bucket", secondary),
    ] {
        if let Some(v) = v.filter(|&v| v == 0 || v > MAX_BLOCKS_PER_BUCKET) {
            return Err(Error::InvalidArgument(format!(
                "{name} must be 1..={MAX_BLOCKS_PER_BUCKET}, got {v}"
            )));
        }
    }
    Ok(())
}

/// Target mean fill of a primary bucket at the expected tag count.
pub const TARGET_PRIMARY_FILL: f64 = 0.7;

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

    /// Most tags a store can be pre-sized for with `blocks_per_primary`
    /// (its primary partition then stays within 8 TiB, `MAX_START_BYTES`).
    pub fn max_expected_tags(blocks_per_primary: u32) -> u64 {
        let per_half = (MAX_START_BYTES / BLOCK_SIZE as u64 - PRIMARY_BASE)
            / (2 * blocks_per_primary.max(1) as u64);
        let per_half = per_half.min(MAX_PRIMARY_PER_HALF as u64);
        let cap = blocks_per_primary.max(1) as f64 * SLOTS_PER_BLOCK as f64 * TARGET_PRIMARY_FILL;
        (per_half as f64 * cap) as u64
    }

    /// Checks a geometry for a new store: the ranges, and that its fixed
    /// partition stays within 8 TiB, `MAX_START_BYTES` (existing stores are only
    /// held to [`Geometry::validate`]).
    pub fn validate_new(&self) -> Result<()> {
        self.validate()?;
        if self.file_len(0) > MAX_START_BYTES {
            return Err(Error::InvalidArgument(format!(
                "{} primary buckets of {} blocks per half need {} bytes before the first tag; at most {MAX_START_BYTES} ({} TiB) are allowed",
                self.primary_buckets_per_half,
                self.blocks_per_primary,
                self.file_len(0),
                MAX_START_BYTES >> 40
            )));
        }
        Ok(())
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
        check_bucket_blocks(
            Some(self.blocks_per_primary),
            Some(self.blocks_per_secondary),
        )
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
    pub fn global(&self, half: Half, b: u32) -> u32 {
        half.index() as u32 * self.primary_buckets_per_half + b
    }

    /// Half of global primary bucket `g`.
    pub fn half_of(&self, g: u32) -> Half {
        if g < self.primary_buckets_per_half {
            Half::Object
        } else {
            Half::Subject
        }
    }
}

/// Largest primary bucket count per half.
pub const MAX_PRIMARY_PER_HALF: u32 = 1 << 30;
/// Largest file a store may need before its first tag (its fixed partition).
pub const MAX_START_BYTES: u64 = 1 << 43;
/// Largest bucket size in blocks.
pub const MAX_BLOCKS_PER_BUCKET: u32 = 1 << 16;
