//! Options for creating a store, and what a batch did.

use crate::error::{Error, Result};
use crate::format::geometry::{
    DEFAULT_BLOCKS_PER_PRIMARY, DEFAULT_BLOCKS_PER_SECONDARY, DEFAULT_EXPECTED_TAGS,
    MAX_START_BYTES,
};
use crate::format::Geometry;
use std::time::Duration;

/// Options for [`Store::create`](crate::Store::create).
#[derive(Clone, Debug)]
pub struct CreateOptions {
    /// Tags the store is sized for; sets the primary bucket count.
    pub expected_tags: u64,
    /// Overrides the primary bucket count per half.
    pub primary_buckets_per_half: Option<u32>,
    /// Overrides the blocks per primary bucket.
    pub blocks_per_primary: Option<u32>,
    /// Overrides the blocks per secondary bucket.
    pub blocks_per_secondary: Option<u32>,
    /// Fixes the hash seed (tests and reproducible images); random otherwise.
    pub seed: Option<u64>,
}

impl Default for CreateOptions {
    fn default() -> Self {
        CreateOptions {
            expected_tags: DEFAULT_EXPECTED_TAGS,
            primary_buckets_per_half: None,
            blocks_per_primary: None,
            blocks_per_secondary: None,
            seed: None,
        }
    }
}

impl CreateOptions {
    /// The geometry these options produce.
    pub fn geometry(&self) -> Geometry {
        let bp = self
            .blocks_per_primary
            .unwrap_or(DEFAULT_BLOCKS_PER_PRIMARY);
        let bs = self
            .blocks_per_secondary
            .unwrap_or(DEFAULT_BLOCKS_PER_SECONDARY);
        let mut g = Geometry::sized(self.expected_tags, bp, bs);
        if let Some(n) = self.primary_buckets_per_half {
            g.primary_buckets_per_half = n;
        }
        g
    }
}

impl CreateOptions {
    /// The geometry, refused when out of range or when the expected tag count
    /// would need a file larger than 8 TiB (`MAX_START_BYTES`) before any tag.
    pub(crate) fn checked_geometry(&self) -> Result<Geometry> {
        let g = self.geometry();
        if self.primary_buckets_per_half.is_none() {
            let max = Geometry::max_expected_tags(g.blocks_per_primary.max(1));
            if self.expected_tags > max {
                return Err(Error::InvalidArgument(format!(
                    "expected tags must be at most {max} (a store sized for more would need over {} TiB before its first tag)",
                    MAX_START_BYTES >> 40
                )));
            }
        }
        g.validate_new()?;
        Ok(g)
    }
}

/// How an INSERT or DELETE batch went.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BatchOutcome {
    /// Tags that changed the store.
    pub changed: u64,
    /// Tags that were already present (insert) or absent (delete).
    pub unchanged: u64,
}

/// Options for [`Store::open_with_options`](crate::Store::open_with_options).
#[derive(Clone, Debug, Default)]
pub struct OpenOptions {
    /// Open for reading only (shared lock; nothing is ever written).
    pub read_only: bool,
    /// Wait up to this long for a lock another process holds; `None` (or
    /// less than 100 ms) fails with [`Error::Locked`](crate::Error::Locked)
    /// after a 100 ms grace (a child process forked meanwhile holds the
    /// lock until it execs). A writer that waits past that grace takes the
    /// writer's turn: readers opening meanwhile wait for it too (or fail
    /// after the grace), except in a thread that holds a handle on the
    /// store already.
    pub wait: Option<Duration>,
}
