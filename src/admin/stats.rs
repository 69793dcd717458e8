//! Layout statistics an operator uses to judge the geometry.

use crate::engine::{State, Store};
use crate::error::Result;
use crate::format::{Geometry, NONE, SLOTS_PER_BLOCK};
use serde::Serialize;

/// Where a store stands in its growth (format 2's linear hashing).
#[derive(Clone, Debug, Serialize)]
pub struct Growth {
    /// On-disk format version (1: fixed geometry; 2: grows by splits; 3:
    /// format 2 holding tags longer than a slot).
    pub format_version: u32,
    /// True when INSERT splits buckets as the store fills (format 2).
    pub grows: bool,
    /// Primary buckets per half at level 0.
    pub base_buckets_per_half: u32,
    /// Doublings of the bucket count completed.
    pub level: u32,
    /// Next bucket (per half) to split in this level.
    pub split_pointer: u32,
    /// Primary segments in the file (one per level begun).
    pub primary_segments: u32,
    /// Primary fill past which an INSERT splits a bucket (0 when it never does).
    pub split_fill: f64,
    /// Tags past that fill the store takes before it splits (set by
    /// `maintain` on a store it packed fuller).
    pub split_allowance: u64,
}

/// Layout statistics of a store.
#[derive(Clone, Debug, Serialize)]
pub struct Stats {
    /// Tags stored (each counted once, though stored twice); in a
    /// half-only store, the halves stored.
    pub tags: u64,
    /// The store keeps only the halves written to it (`serve --half-only`).
    pub half_only: bool,
    /// Geometry now (format 2: primary buckets per half grow by splits).
    pub geometry: Geometry,
    /// Growth state: format version, level, split pointer, segments.
    pub growth: Growth,
    /// Primary buckets in both halves.
    pub primary_buckets: u64,
    /// Primary buckets holding at least one tag.
    pub primary_buckets_used: u64,
    /// Primary buckets whose slots are all occupied.
    pub primary_buckets_full: u64,
    /// Mean tags per primary bucket, chain included.
    pub load_mean: f64,
    /// Standard deviation of tags per primary bucket, chain included.
    pub load_stddev: f64,
    /// The deviation a perfectly uniform hash of single tags would give: sqrt(mean).
    pub load_stddev_ideal: f64,
    /// Most tags hashed to one primary bucket.
    pub load_max: u64,
    /// Occupied fraction of all primary slots.
    pub primary_fill: f64,
    /// Secondary buckets in the file.
    pub secondary_buckets: u64,
    /// Secondary buckets linked into a chain.
    pub secondary_linked: u64,
    /// Secondary buckets free for linking.
    pub secondary_free: u64,
    /// Primary buckets with at least one linked secondary bucket.
    pub chains: u64,
    /// Most secondary buckets linked to one primary bucket.
    pub longest_chain: u64,
    /// Empty slots that lie before an occupied slot in their chain (left by DELETE).
    pub holes: u64,
    /// File length in bytes.
    pub file_bytes: u64,
    /// Bytes the filesystem allocated (the file is sparse).
    pub allocated_bytes: u64,
    /// Allocated bytes per stored tag.
    pub allocated_bytes_per_tag: f64,
    /// Suggestions when the layout has drifted from the geometry.
    pub advice: Vec<String>,
}

impl Store {
    /// Computes layout statistics (reads every written block header once).
    pub fn stats(&self) -> Result<Stats> {
        let st = self.read();
        st.pager().read_ahead_for_scan();
        let geo = st.index().geometry();
        let t = &st.index().tables;
        let n = geo.primary_buckets() as usize;
        let mut loads = Vec::with_capacity(n);
        let (mut used_b, mut full_b, mut chains, mut longest, mut holes) = (0u64, 0, 0, 0u64, 0u64);
        let mut primary_used = 0u64;
        for (g, p) in t.primary.iter().enumerate() {
            let load = t.chain_load(g as u32);
            primary_used += p.used as u64;
            if p.used == geo.primary_capacity() {
                full_b += 1;
            }
            if load > 0 {
                used_b += 1;
            }
            if p.chain > 0 {
                chains += 1;
                longest = longest.max(p.chain as u64);
            }
            if load > 0 {
                holes += chain_holes(&st, &geo, g as u32)?;
            }
            loads.push(load);
        }
        let mean = loads.iter().sum::<u64>() as f64 / n.max(1) as f64;
        let var = loads
            .iter()
            .map(|&l| (l as f64 - mean).powi(2))
            .sum::<f64>()
            / n.max(1) as f64;
        let linked = t.secondary.iter().filter(|e| e.owner != NONE).count() as u64;
        let file_bytes = st.pager().file().len();
        let allocated = st.pager().file().allocated_bytes();
        let tags = st.tag_count();
        let primary_fill = primary_used as f64 / (n as f64 * geo.primary_capacity() as f64);
        let mut advice = Vec::new();
        // Peaks always overflow, whatever the geometry; overflow in many
        // buckets means the geometry itself is too small.
        if chains as f64 > 0.05 * n as f64 && tags > 0 && !geo.grows() {
            advice.push(format!(
                "{chains} of {n} primary buckets overflow into secondary buckets: re-hash with `tagstore maintain --expected-tags {}`",
                tags.saturating_mul(2)
            ));
        }
        if primary_fill > 0.85 && !geo.grows() {
            advice.push(format!(
                "primary buckets are {:.0}% full: re-hash with `tagstore maintain --expected-tags {}`",
                primary_fill * 100.0,
                tags.saturating_mul(2)
            ));
        }
        if holes > tags / 4 && holes > 1000 {
            advice.push(format!("{holes} holes: compact with `tagstore maintain`"));
        }
        Ok(Stats {
            tags,
            half_only: st.half_only(),
            geometry: geo.geometry(),
            growth: Growth {
                format_version: st.format_version(),
                grows: geo.grows(),
                base_buckets_per_half: geo.base,
                level: geo.level,
                split_pointer: geo.split,
                primary_segments: geo.segments,
                split_fill: if geo.grows() {
                    crate::engine::SPLIT_FILL
                } else {
                    0.0
                },
                split_allowance: geo.allowance,
            },
            primary_buckets: n as u64,
            primary_buckets_used: used_b,
            primary_buckets_full: full_b,
            load_mean: mean,
            load_stddev: var.sqrt(),
            load_stddev_ideal: mean.sqrt(),
            load_max: loads.iter().copied().max().unwrap_or(0),
            primary_fill,
            secondary_buckets: t.secondary.len() as u64,
            secondary_linked: linked,
            secondary_free: t.free.len() as u64,
            chains,
            longest_chain: longest,
            holes,
            file_bytes,
            allocated_bytes: allocated,
            allocated_bytes_per_tag: if tags > 0 {
                allocated as f64 / tags as f64
            } else {
                0.0
            },
            advice,
        })
    }
}

/// Empty slots before the last occupied slot of the chain of `g`.
fn chain_holes(st: &State, geo: &crate::format::Layout, g: u32) -> Result<u64> {
    let (pager, t) = (st.pager(), &st.index().tables);
    // Past a primary bucket's extent nothing was ever written: count those
    // blocks as empty without reading them (a read of a never-written block
    // through the map faults in a zeroed page-cache page).
    let extent = st.index().accel.extent(g, geo, pager)?;
    let mut blocks: Vec<Option<u64>> = (0..extent as u64)
        .map(|i| Some(geo.primary_start(g) + i))
        .collect();
    blocks.extend((extent..geo.blocks_per_primary).map(|_| None));
    // The same for a secondary bucket past its known extent.
    let accel = &st.index().accel;
    for (s, _) in t.chain(g) {
        let per = geo.blocks_per_secondary;
        let n = accel.secondary_extent(s, per);
        blocks.extend((0..n as u64).map(|i| Some(geo.secondary_start(s) + i)));
        blocks.extend((n..per).map(|_| None));
    }
    let (mut holes, mut pending) = (0u64, 0u64);
    for b in blocks {
        let bm = match b {
            Some(b) => pager.block(b)?.occupied_mask(),
            None => 0,
        };
        if bm == 0 {
            pending += SLOTS_PER_BLOCK as u64;
            continue;
        }
        let top = 31 - bm.leading_zeros() as u64; // highest occupied slot
        let empties_below = top + 1 - bm.count_ones() as u64;
        holes += pending + empties_below;
        pending = SLOTS_PER_BLOCK as u64 - 1 - top;
    }
    Ok(holes)
}
