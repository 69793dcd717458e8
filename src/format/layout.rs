//! Where every bucket lies and which bucket a key hash names, for both
//! formats: version 1's fixed primary partition, and version 2's linear
//! hashing with primary segments appended as the store grows.

use super::block::BLOCK_SIZE;
use super::geometry::Geometry;
use super::superblock::PRIMARY_BASE;
use super::tag::Half;

/// Most primary segments a version-2 store can have (segment 0 plus one per level).
pub const MAX_SEGMENTS: usize = 32;

/// A block's place in the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockAt {
    /// Block `i` of global primary bucket `g`.
    Primary { g: u32, i: u32 },
    /// Block `i` of secondary bucket `s`.
    Secondary { s: u32, i: u32 },
    /// The superblock or the intent block.
    Meta,
}

/// The geometry plus the growth state: the bucket count, the split pointer
/// and where each primary segment starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// Format version: 1 (fixed, multiply-shift) or 2 (linear hashing).
    pub version: u32,
    /// Version 1: primary buckets per half; version 2: buckets per half at level 0.
    pub base: u32,
    /// 4 KB blocks in each primary bucket.
    pub blocks_per_primary: u32,
    /// 4 KB blocks in each secondary bucket.
    pub blocks_per_secondary: u32,
    /// Doublings completed (version 2).
    pub level: u32,
    /// Next bucket to split in this level (version 2).
    pub split: u32,
    /// Primary segments allocated.
    pub segments: u32,
    /// First block of each segment.
    pub seg_start: [u64; MAX_SEGMENTS],
    /// Tags past the split fill the store takes before an INSERT splits
    /// (version 2; set by `maintain` when it packs buckets fuller).
    pub allowance: u64,
    /// Secondary buckets lying before each segment's end (derived).
    sec_before: [u32; MAX_SEGMENTS],
}

impl Layout {
    /// A version-1 layout (fixed primary partition right after block 1).
    pub fn v1(geo: Geometry) -> Layout {
        Self::build(1, geo, 0, 0, 1, [PRIMARY_BASE; 1].as_slice())
    }

    /// A new version-2 layout of `geo.primary_buckets_per_half` buckets at level 0.
    pub fn v2(geo: Geometry) -> Layout {
        Self::build(2, geo, 0, 0, 1, [PRIMARY_BASE; 1].as_slice())
    }

    /// A layout from its stored fields ([`Layout::inconsistency`] checks them).
    pub fn build(
        version: u32,
        geo: Geometry,
        level: u32,
        split: u32,
        segments: u32,
        starts: &[u64],
    ) -> Layout {
        let mut l = Layout {
            version,
            base: geo.primary_buckets_per_half,
            blocks_per_primary: geo.blocks_per_primary,
            blocks_per_secondary: geo.blocks_per_secondary,
            level,
            split,
            segments: segments.min(MAX_SEGMENTS as u32),
            seg_start: [0; MAX_SEGMENTS],
            allowance: 0,
            sec_before: [0; MAX_SEGMENTS],
        };
        for (d, s) in l.seg_start.iter_mut().zip(starts) {
            *d = *s;
        }
        l.derive();
        l
    }

    fn derive(&mut self) {
        let bs = self.blocks_per_secondary.max(1) as u64;
        for k in 1..self.segments as usize {
            let gap = self.seg_start[k].saturating_sub(self.seg_end(k - 1)) / bs;
            self.sec_before[k] = self.sec_before[k - 1].saturating_add(gap as u32);
        }
    }

    /// Why the stored fields cannot describe a file, if they cannot.
    pub fn inconsistency(&self) -> Option<String> {
        if self.version == 1 {
            return None;
        }
        let n = self.buckets_per_half_u64();
        if self.split as u64 >= (self.base as u64) << self.level.min(40) {
            return Some(format!("split pointer {} past its level", self.split));
        }
        if n > super::geometry::MAX_PRIMARY_PER_HALF as u64 {
            return Some(format!("{n} primary buckets per half"));
        }
        let need = if n == 0 {
            1
        } else {
            self.seg_of((n - 1) as u32).0 + 1
        };
        // One more is allowed: a split adds its segment before it moves the
        // split pointer.
        if self.segments as usize != need && self.segments as usize != need + 1 {
            return Some(format!(
                "{} primary segments where {need} are needed",
                self.segments
            ));
        }
        if self.seg_start[0] != PRIMARY_BASE {
            return Some("primary segment 0 does not follow the intent block".into());
        }
        let bs = self.blocks_per_secondary as u64;
        for k in 1..self.segments as usize {
            let end = self.seg_end(k - 1);
            if self.seg_start[k] < end || !(self.seg_start[k] - end).is_multiple_of(bs) {
                return Some(format!("primary segment {k} overlaps or misaligns"));
            }
        }
        None
    }

    fn buckets_per_half_u64(&self) -> u64 {
        if self.version == 1 {
            self.base as u64
        } else {
            ((self.base as u64) << self.level.min(40)) + self.split as u64
        }
    }

    /// Primary buckets in each half now.
    pub fn buckets_per_half(&self) -> u32 {
        self.buckets_per_half_u64().min(u32::MAX as u64) as u32
    }

    /// Total primary buckets (both halves).
    pub fn primary_buckets(&self) -> u32 {
        2 * self.buckets_per_half()
    }

    /// The geometry as the public API reports it (buckets per half now).
    pub fn geometry(&self) -> Geometry {
        Geometry {
            primary_buckets_per_half: self.buckets_per_half(),
            blocks_per_primary: self.blocks_per_primary,
            blocks_per_secondary: self.blocks_per_secondary,
        }
    }

    /// True when the store grows by splitting buckets (version 2).
    pub fn grows(&self) -> bool {
        self.version >= 2
    }

    /// Slots in a primary bucket.
    pub fn primary_capacity(&self) -> u32 {
        self.blocks_per_primary * super::block::SLOTS_PER_BLOCK as u32
    }

    /// Slots in a secondary bucket.
    pub fn secondary_capacity(&self) -> u32 {
        self.blocks_per_secondary * super::block::SLOTS_PER_BLOCK as u32
    }

    /// The half-local bucket of key hash `h`.
    #[inline]
    pub fn bucket_of(&self, h: u64) -> u32 {
        if self.version == 1 {
            return super::hash::bucket_of(h, self.base);
        }
        // The low 16 bits are the key fingerprint: place by the other 48.
        let x = h >> 16;
        let m = (self.base as u64) << self.level;
        let b = x % m;
        if b < self.split as u64 {
            (x % (2 * m)) as u32
        } else {
            b as u32
        }
    }

    /// Global primary bucket index of half-local bucket `b`.
    #[inline]
    pub fn global(&self, half: Half, b: u32) -> u32 {
        if self.version == 1 {
            half.index() as u32 * self.base + b
        } else {
            2 * b + half.index() as u32
        }
    }

    /// Half of global primary bucket `g`.
    #[inline]
    pub fn half_of(&self, g: u32) -> Half {
        let subject = if self.version == 1 {
            g >= self.base
        } else {
            g & 1 == 1
        };
        if subject {
            Half::Subject
        } else {
            Half::Object
        }
    }

    /// One half's global buckets: `(first, end, step)`.
    pub fn half_buckets(&self, half: Half) -> (u32, u32, u32) {
        let h = half.index() as u32;
        if self.version == 1 {
            (h * self.base, (h + 1) * self.base, 1)
        } else {
            (h, self.primary_buckets(), 2)
        }
    }

    /// Segment holding half-local bucket `b`, and its first bucket.
    fn seg_of(&self, b: u32) -> (usize, u32) {
        if self.version == 1 || b < self.base {
            return (0, 0);
        }
        let q = b / self.base;
        let k = (32 - q.leading_zeros()) as usize;
        (k, self.base << (k - 1))
    }

    /// Half-local buckets in segment `k`.
    fn seg_buckets(&self, k: usize) -> u64 {
        if k == 0 {
            self.base as u64
        } else {
            (self.base as u64) << (k - 1)
        }
    }

    /// Block after the last of segment `k`.
    fn seg_end(&self, k: usize) -> u64 {
        self.seg_start[k] + self.seg_buckets(k) * 2 * self.blocks_per_primary as u64
    }

    /// First block of global primary bucket `g`.
    #[inline]
    pub fn primary_start(&self, g: u32) -> u64 {
        let bp = self.blocks_per_primary as u64;
        if self.version == 1 {
            return PRIMARY_BASE + g as u64 * bp;
        }
        let b = g >> 1;
        let (k, first) = self.seg_of(b);
        let k = k.min(MAX_SEGMENTS - 1);
        self.seg_start[k] + (((b - first) as u64) * 2 + (g & 1) as u64) * bp
    }

    /// First block of secondary bucket `s`.
    #[inline]
    pub fn secondary_start(&self, s: u32) -> u64 {
        let n = self.segments.max(1) as usize;
        let r = self.sec_before[..n].partition_point(|&x| x <= s).max(1) - 1;
        self.seg_end(r) + (s - self.sec_before[r]) as u64 * self.blocks_per_secondary as u64
    }

    /// File length holding `secondary` secondary buckets.
    pub fn file_len(&self, secondary: u32) -> u64 {
        let last = self.segments.max(1) as usize - 1;
        let extra = secondary.saturating_sub(self.sec_before[last]) as u64;
        (self.seg_end(last) + extra * self.blocks_per_secondary as u64) * BLOCK_SIZE as u64
    }

    /// Secondary buckets lying before the last primary segment (a file
    /// never holds fewer).
    pub fn fixed_secondary(&self) -> u32 {
        self.sec_before[self.segments.max(1) as usize - 1]
    }

    /// Secondary buckets a file of `blocks` blocks holds (whole buckets only).
    pub fn secondary_in(&self, blocks: u64) -> u32 {
        let last = self.segments.max(1) as usize - 1;
        let past = blocks.saturating_sub(self.seg_end(last)) / self.blocks_per_secondary as u64;
        (self.sec_before[last] as u64 + past).min(super::geometry::NONE as u64 - 1) as u32
    }

    /// The shortest valid file length (whole secondary buckets after the
    /// last segment) holding `blocks` blocks.
    pub fn len_covering(&self, blocks: u64) -> u64 {
        let s = self.secondary_in(blocks);
        let len = self.file_len(s);
        if len >= blocks * BLOCK_SIZE as u64 {
            len
        } else {
            self.file_len(s.saturating_add(1))
        }
    }

    /// What block `b` is.
    pub fn block_at(&self, b: u64) -> BlockAt {
        if b < PRIMARY_BASE {
            return BlockAt::Meta;
        }
        let (bp, bs) = (
            self.blocks_per_primary as u64,
            self.blocks_per_secondary as u64,
        );
        let n = self.segments.max(1) as usize;
        for k in (0..n).rev() {
            if b < self.seg_start[k] {
                continue;
            }
            let off = b - self.seg_start[k];
            if b < self.seg_end(k) {
                let (pair, i) = (off / bp, (off % bp) as u32);
                let g = if self.version == 1 {
                    pair as u32
                } else {
                    let first = if k == 0 { 0 } else { self.base << (k - 1) };
                    2 * (first + (pair / 2) as u32) + (pair % 2) as u32
                };
                return BlockAt::Primary { g, i };
            }
            let past = b - self.seg_end(k);
            return BlockAt::Secondary {
                s: self.sec_before[k] + (past / bs) as u32,
                i: (past % bs) as u32,
            };
        }
        BlockAt::Meta
    }

    /// The bucket that splits next and the bucket it splits into (half-local).
    pub fn next_split(&self) -> (u32, u32) {
        (self.split, self.split + (self.base << self.level))
    }

    /// True when the next split needs a new primary segment first.
    pub fn split_needs_segment(&self) -> bool {
        let (_, new) = self.next_split();
        self.seg_of(new).0 >= self.segments as usize
    }

    /// Adds the next primary segment at block `start` (the file's end).
    pub fn add_segment(&mut self, start: u64) {
        let k = self.segments as usize;
        if k < MAX_SEGMENTS {
            self.seg_start[k] = start;
            self.segments += 1;
            self.derive();
        }
    }

    /// Moves the split pointer past the bucket just split.
    pub fn advance_split(&mut self) {
        self.split += 1;
        if self.split as u64 >= (self.base as u64) << self.level {
            self.level += 1;
            self.split = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn geo(p: u32) -> Geometry {
        Geometry {
            primary_buckets_per_half: p,
            blocks_per_primary: 4,
            blocks_per_secondary: 16,
        }
    }

    #[test]
    fn v1_matches_the_fixed_partition() {
        let l = Layout::v1(geo(10));
        assert_eq!(l.primary_start(0), 2);
        assert_eq!(l.primary_start(19), 2 + 19 * 4);
        assert_eq!(l.secondary_start(0), 2 + 20 * 4);
        assert_eq!(l.file_len(3), (2 + 80 + 48) * 4096);
        assert_eq!(l.global(Half::Subject, 3), 13);
        assert_eq!(l.block_at(2 + 80 + 17), BlockAt::Secondary { s: 1, i: 1 });
        assert_eq!(l.block_at(2 + 13 * 4 + 2), BlockAt::Primary { g: 13, i: 2 });
    }

    #[test]
    fn v2_segments_and_runs_map_every_block_back() {
        let mut l = Layout::v2(geo(3));
        let mut sec = 2u32;
        // Grow through several levels, with secondary buckets between segments.
        for _ in 0..40 {
            if l.split_needs_segment() {
                let end = l.file_len(sec) / 4096;
                l.add_segment(end);
                sec += 1;
            }
            l.advance_split();
            assert!(l.inconsistency().is_none(), "{:?}", l.inconsistency());
        }
        let mut seen = std::collections::BTreeSet::new();
        for g in 0..l.primary_buckets() {
            for i in 0..4 {
                let b = l.primary_start(g) + i;
                assert!(seen.insert(b));
                assert_eq!(l.block_at(b), BlockAt::Primary { g, i: i as u32 });
            }
        }
        for s in 0..sec + 3 {
            for i in 0..16 {
                let b = l.secondary_start(s) + i;
                assert!(seen.insert(b), "secondary {s} overlaps");
                assert_eq!(l.block_at(b), BlockAt::Secondary { s, i: i as u32 });
            }
        }
        assert_eq!(l.secondary_in(l.file_len(sec) / 4096), sec);
    }

    #[test]
    fn a_split_sends_each_key_to_its_old_bucket_or_the_new_one() {
        let mut l = Layout::v2(geo(5));
        for _ in 0..7 {
            if l.split_needs_segment() {
                l.add_segment(l.file_len(0) / 4096);
            }
            l.advance_split();
        }
        let (old, new) = l.next_split();
        for h in (0..5000u64).map(|x| x.wrapping_mul(0x9E37_79B9_7F4A_7C15)) {
            if l.bucket_of(h) == old {
                let mut next = l;
                next.advance_split();
                let after = next.bucket_of(h);
                assert!(after == old || after == new);
            }
            assert!(l.bucket_of(h) < l.buckets_per_half());
        }
    }
}
