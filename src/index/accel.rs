//! In-memory accelerators for reading buckets: the written extent of each
//! primary bucket (with its slot directory, `directory.rs`) and a key
//! index over each long overflow chain.
//!
//! None is persisted (no format change): each starts unknown at open and
//! is learned on first use, then kept exact by every INSERT.
//!
//! * **Extent.** Blocks of a primary bucket fill in order, so the blocks
//!   past the highest one ever written hold nothing. FIND and DELETE stop
//!   there instead of touching every block of a half-empty bucket.
//! * **Chain index.** A primary bucket holding a peak (a key with a million
//!   tags) has a chain of thousands of secondary buckets. The per-bucket key
//!   filters keep FIND from *reading* the peak's buckets for another key, but
//!   it still walks the whole linked list to test them. For chains of
//!   [`CHAIN_INDEX_MIN`] buckets or more, a map from key fingerprint to the
//!   buckets holding it lets FIND go straight to the few candidates, so a rare
//!   key next to a peak costs about what it costs in a quiet bucket.

use super::directory::SlotDirectory;
use super::tables::Tables;
use crate::error::Result;
use crate::format::hash::tag_hash;
use crate::format::tag::used_prefix;
use crate::format::{BlockRef, Layout};
use crate::pager::Pager;
use foldhash::{HashMap, HashMapExt};
use std::sync::atomic::{AtomicU32, AtomicU8, Ordering};
use std::sync::RwLock;

/// Chains at least this long get an index on first FIND or DELETE.
pub const CHAIN_INDEX_MIN: u32 = 8;

/// Blocks of a secondary bucket covered by one bit of a block mask.
pub fn group_size(blocks_per_secondary: u32) -> u32 {
    blocks_per_secondary.div_ceil(64).max(1)
}

/// First block at or after `i` (of `n` blocks) that `mask` may hold.
pub fn next_in_mask(mask: u64, n: u32, i: u32) -> Option<u32> {
    let gs = group_size(n);
    let grp = i / gs;
    if grp >= 64 || i >= n {
        return None;
    }
    let rest = mask & (u64::MAX << grp);
    if rest == 0 {
        return None;
    }
    let b = i.max(rest.trailing_zeros() * gs);
    (b < n).then_some(b)
}

/// Secondary buckets of one chain that hold (or held) each key fingerprint,
/// each with a mask of the blocks that do.
#[derive(Debug, Default)]
pub struct ChainIndex {
    by_fp: HashMap<u16, Vec<(u32, u64)>>,
    /// For a fingerprint in more than [`PLACES_AFTER`] buckets (a peak's):
    /// each bucket's place in its `by_fp` list. Without it, noting a
    /// bucket new to the list searched the whole list, and building the
    /// index of a chain of `n` buckets took O(n²): 0.6 s for the 40,000
    /// buckets of a 2,000,000-tag peak, 1.7–2.7 s for 80,000.
    places: HashMap<u16, HashMap<u32, u32>>,
    /// Low 32 bits of each secondary tag's `tag_hash` → its
    /// block ([`AMBIGUOUS`] when two tags share the bits). Built by the
    /// first DELETE (or duplicate check) that searches the chain: a peak's
    /// fingerprint matches every block of its chain, so without it DELETE
    /// reads half the chain's block headers.
    by_tag: Option<HashMap<u32, u64>>,
    /// Searches of the chain's block headers made while it had no tag map.
    searches: AtomicU32,
}

/// Searches of an indexed chain's block headers before the next one builds
/// its tag map. Building reads and hashes every slot of the chain (9-10 ms
/// for a 160,000-tag npm peak), where a header search took 23-84 µs there
/// (210 µs with cold headers): building on the first search stalled the
/// first DELETE of every long chain, and built maps for chains that saw a
/// single DELETE. A chain searched this often is likely to be searched
/// again, and then the map pays for itself.
pub const TAG_MAP_AFTER: u32 = 16;

/// Buckets in a fingerprint's list from which their places are kept.
const PLACES_AFTER: usize = 32;

/// A tag map value: more than one tag has these hash bits; search the chain.
const AMBIGUOUS: u64 = u64::MAX;

/// Records in a tag map that a tag with hash bits `th` is in `block`.
fn note_tag_in(m: &mut HashMap<u32, u64>, th: u32, block: u64) {
    m.entry(th).and_modify(|b| *b = AMBIGUOUS).or_insert(block);
}

/// What a chain's tag map says about one tag.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TagHint {
    /// Not in the chain's secondary buckets.
    Absent,
    /// In this block, if anywhere in the chain's secondary buckets.
    Block(u64),
    /// Unknown: search the chain.
    Search,
}

impl ChainIndex {
    /// Candidate `(bucket, block mask)` pairs for `fp`, each bucket once.
    pub fn candidates(&self, fp: u16) -> &[(u32, u64)] {
        self.by_fp.get(&fp).map_or(&[], |v| v)
    }

    fn note_tag(&mut self, th: u32, block: u64) {
        if let Some(m) = self.by_tag.as_mut() {
            note_tag_in(m, th, block);
        }
    }

    fn forget_tag(&mut self, th: u32, block: u64) {
        if let Some(m) = self.by_tag.as_mut() {
            if m.get(&th) == Some(&block) {
                m.remove(&th);
            }
        }
    }

    /// Records that block `i` of bucket `s` now holds key fingerprint `fp`.
    pub fn note(&mut self, s: u32, i: u32, fp: u16, geo: &Layout) {
        let bit = 1u64 << (i / group_size(geo.blocks_per_secondary)).min(63);
        let v = self.by_fp.entry(fp).or_default();
        // Inserts mostly go to the chain's tail, already last in the list.
        if let Some(last) = v.last_mut().filter(|last| last.0 == s) {
            last.1 |= bit;
            return;
        }
        if v.len() < PLACES_AFTER {
            match v.iter_mut().find(|c| c.0 == s) {
                Some(c) => c.1 |= bit,
                None => v.push((s, bit)),
            }
            if v.len() == PLACES_AFTER {
                let at = v.iter().enumerate().map(|(k, c)| (c.0, k as u32));
                self.places.insert(fp, at.collect());
            }
            return;
        }
        let at = self.places.entry(fp).or_default();
        match at.get(&s) {
            Some(&k) => v[k as usize].1 |= bit,
            None => {
                at.insert(s, v.len() as u32);
                v.push((s, bit));
            }
        }
    }
}

/// Calls `f(bucket, block index, block, slot)` for every occupied slot of
/// chain `g`'s secondary buckets, in chain order.
fn for_each_secondary_slot<'b>(
    accel: &Accel,
    g: u32,
    t: &Tables,
    geo: &Layout,
    pager: &'b Pager,
    mut f: impl FnMut(u32, u32, &BlockRef<'b>, usize),
) -> Result<()> {
    for (s, _) in t.chain(g) {
        let start = geo.secondary_start(s);
        for i in 0..accel.secondary_extent(s, geo.blocks_per_secondary) {
            let blk = pager.block(start + i as u64)?;
            for k in blk.occupied_slots() {
                f(s, i, &blk, k);
            }
        }
    }
    Ok(())
}

/// Extents and chain indexes of one open store.
#[derive(Debug)]
pub struct Accel {
    /// Per primary bucket: 0 unknown, else 1 + number of blocks up to and
    /// including the highest block ever written.
    extent: Vec<AtomicU8>,
    /// Per slot of every primary block, a byte of its key's fingerprint;
    /// valid for the buckets whose extent is known.
    dir: SlotDirectory,
    /// Blocks per primary bucket (the directory's stride).
    bpp: u32,
    /// Per secondary bucket linked into a chain during this session: 1 +
    /// the blocks up to and including the highest written since (slots are
    /// taken first-free, so no tag lies past them). 0 or past the end:
    /// unknown, every block is read. Saves reading (and page-faulting) the
    /// never-written blocks of a sparse bucket.
    sec_extent: Vec<u8>,
    /// Chain indexes by global primary bucket.
    chains: RwLock<HashMap<u32, ChainIndex>>,
}

impl Accel {
    /// For `primary` buckets, of which those where `empty(g)` holds no tag
    /// (0 blocks worth reading); the rest unknown until first read.
    ///
    /// Learning an extent reads every block of the bucket, and a never-written
    /// block read through the map costs a page fault and a zeroed page-cache
    /// page: on a fresh store sized for 10⁸ tags that filled the page cache
    /// with zeros long before the data. Empty buckets never need it.
    pub fn new(primary: u32, blocks_per_primary: u32, empty: impl Fn(u32) -> bool) -> Self {
        Accel {
            extent: (0..primary)
                .map(|g| AtomicU8::new(u8::from(empty(g))))
                .collect(),
            dir: SlotDirectory::new(primary as usize * blocks_per_primary as usize),
            bpp: blocks_per_primary,
            sec_extent: Vec::new(),
            chains: RwLock::new(HashMap::new()),
        }
    }

    /// Records that empty secondary bucket `s` was just linked into a chain:
    /// nothing is written in it yet (caller holds the write lock).
    pub fn linked_secondary(&mut self, s: u32) {
        let i = s as usize;
        if self.sec_extent.len() <= i {
            self.sec_extent.resize(i + 1, 0);
        }
        self.sec_extent[i] = 1;
    }

    /// Takes the secondary extents read from a table image or learnt by a
    /// rebuild (same encoding as `sec_extent`).
    pub fn set_secondary_extents(&mut self, extents: Vec<u8>) {
        self.sec_extent = extents;
    }

    /// The secondary extents known, for the table image.
    pub fn secondary_extents(&self) -> &[u8] {
        &self.sec_extent
    }

    /// Blocks of secondary bucket `s` worth reading: all of its `n` unless
    /// fewer are known to hold anything.
    #[inline]
    pub fn secondary_extent(&self, s: u32, n: u32) -> u32 {
        match self.sec_extent.get(s as usize) {
            Some(&e) if e != 0 => (e as u32 - 1).min(n),
            _ => n,
        }
    }

    /// Blocks of primary bucket `g` worth reading, learning it if unknown.
    pub fn extent(&self, g: u32, geo: &Layout, pager: &Pager) -> Result<u32> {
        self.primary_view(g, geo, pager).map(|(n, _)| n)
    }

    /// Blocks of primary bucket `g` worth reading, learning them (and the
    /// bucket's slot directory) if unknown; and whether the directory is
    /// valid for the bucket ([`Accel::dir_matching`]).
    pub fn primary_view(&self, g: u32, geo: &Layout, pager: &Pager) -> Result<(u32, bool)> {
        let Some(cell) = self.extent.get(g as usize) else {
            return Ok((geo.blocks_per_primary, false));
        };
        // Acquire: the directory bytes the learner stored before it.
        let e = cell.load(Ordering::Acquire);
        let dir = self
            .dir
            .covers(self.dir_block(g, geo.blocks_per_primary.saturating_sub(1)));
        if e != 0 {
            return Ok((e as u32 - 1, dir));
        }
        let start = geo.primary_start(g);
        let mut n = 0;
        for i in 0..geo.blocks_per_primary {
            let blk = pager.block(start + i as u64)?;
            if !blk.is_unwritten() {
                n = i + 1;
            }
            self.dir.learn(self.dir_block(g, i), &blk);
        }
        match u8::try_from(n + 1) {
            Ok(v) => {
                cell.store(v, Ordering::Release);
                Ok((n, dir))
            }
            Err(_) => Ok((n, false)),
        }
    }

    /// The directory's index of block `i` of primary bucket `g`.
    #[inline]
    fn dir_block(&self, g: u32, i: u32) -> usize {
        g as usize * self.bpp as usize + i as usize
    }

    /// Asks the CPU for primary bucket `g`'s slot directory (a hint).
    #[inline]
    pub fn prefetch_dir(&self, g: u32) {
        self.dir.prefetch(self.dir_block(g, 0), self.bpp as usize);
    }

    /// The slots of block `i` of primary bucket `g` that may hold key
    /// fingerprint `fp`; only meaningful while [`Accel::primary_view`]
    /// says the directory is valid.
    #[inline]
    pub fn dir_matching(&self, g: u32, i: u32, fp: u16) -> u32 {
        self.dir.matching(self.dir_block(g, i), fp)
    }

    /// Adds never-written primary buckets up to `primary` (a split made them).
    pub fn grow(&mut self, primary: u32) {
        while self.extent.len() < primary as usize {
            self.extent.push(AtomicU8::new(1));
        }
        self.dir.grow(primary as usize * self.bpp as usize);
    }

    /// Forgets the extent and slot directory of primary bucket `g`, whose
    /// tags moved without an INSERT (the next reader learns them again).
    pub fn forget_primary(&mut self, g: u32) {
        if let Some(cell) = self.extent.get(g as usize) {
            cell.store(0, Ordering::Relaxed);
        }
    }

    /// Drops what is known of chain `g` (a split moved its tags away).
    pub fn forget_chain(&mut self, g: u32) {
        let chains = self.chains.get_mut().unwrap_or_else(|p| p.into_inner());
        chains.remove(&g);
    }

    /// Blocks of primary bucket `g` worth reading, if already known.
    #[inline]
    pub fn known_extent(&self, g: u32) -> Option<u32> {
        let e = self.extent.get(g as usize)?.load(Ordering::Relaxed);
        (e != 0).then(|| e as u32 - 1)
    }

    /// Records that slot `slot` of block `i` of primary bucket `g` now holds
    /// a tag of key fingerprint `fp` (caller holds the write lock).
    pub fn wrote_primary(&self, g: u32, i: u32, slot: usize, fp: u16) {
        if let Some(cell) = self.extent.get(g as usize) {
            let e = cell.load(Ordering::Relaxed);
            if e == 0 {
                return;
            }
            self.dir.put(self.dir_block(g, i), slot, fp);
            if (e as u32) < i + 2 {
                if let Ok(v) = u8::try_from(i + 2) {
                    cell.store(v, Ordering::Relaxed);
                } else {
                    cell.store(0, Ordering::Relaxed);
                }
            }
        }
    }

    /// Records that block `i` of secondary bucket `s` of chain `g` holds a
    /// tag with key fingerprint `fp` and tag hash `th` (caller holds the
    /// write lock).
    pub fn wrote_secondary(&mut self, g: u32, s: u32, i: u32, fp: u16, th: u64, geo: &Layout) {
        if let Some(e) = self.sec_extent.get_mut(s as usize).filter(|e| **e != 0) {
            // Past what a byte holds: unknown again (every block is read).
            *e = u8::try_from(i + 2).map_or(0, |v| (*e).max(v));
        }
        let chains = self.chains.get_mut().unwrap_or_else(|p| p.into_inner());
        if let Some(ci) = chains.get_mut(&g) {
            ci.note(s, i, fp, geo);
            ci.note_tag(th as u32, geo.secondary_start(s) + i as u64);
        }
    }

    /// Records that the tag with hash `th` left `block` of chain `g`'s
    /// secondary buckets (caller holds the write lock).
    pub fn erased_secondary(&mut self, g: u32, th: u64, block: u64) {
        let chains = self.chains.get_mut().unwrap_or_else(|p| p.into_inner());
        if let Some(ci) = chains.get_mut(&g) {
            ci.forget_tag(th as u32, block);
        }
    }

    /// Where the tag with hash `th` sits in chain `g`'s secondary buckets,
    /// building the chain's tag map on first use. Only for a chain that has
    /// an index (see [`Accel::with_index`]); callers must hold the store
    /// lock, so no INSERT runs while the map is built.
    pub fn tag_hint(
        &self,
        g: u32,
        th: u64,
        t: &Tables,
        geo: &Layout,
        seed: u64,
        pager: &Pager,
    ) -> Result<TagHint> {
        let hint = |m: &HashMap<u32, u64>| match m.get(&(th as u32)) {
            None => TagHint::Absent,
            Some(&AMBIGUOUS) => TagHint::Search,
            Some(&b) => TagHint::Block(b),
        };
        {
            let chains = self.chains.read().unwrap_or_else(|p| p.into_inner());
            match chains.get(&g) {
                None => return Ok(TagHint::Search),
                Some(ci) => {
                    if let Some(m) = &ci.by_tag {
                        return Ok(hint(m));
                    }
                    if ci.searches.fetch_add(1, Ordering::Relaxed) < TAG_MAP_AFTER {
                        return Ok(TagHint::Search);
                    }
                }
            }
        }
        // Sized once for the chain's tags, not grown step by step.
        let tags: u64 = t.chain(g).map(|(_, e)| u64::from(e.used)).sum();
        let mut m: HashMap<u32, u64> = HashMap::with_capacity(tags.min(1 << 26) as usize);
        for_each_secondary_slot(self, g, t, geo, pager, |s, i, blk, k| {
            let h = tag_hash(seed, used_prefix(blk.slot(k)));
            note_tag_in(&mut m, h as u32, geo.secondary_start(s) + i as u64);
        })?;
        let out = hint(&m);
        let mut chains = self.chains.write().unwrap_or_else(|p| p.into_inner());
        if let Some(ci) = chains.get_mut(&g) {
            if ci.by_tag.is_none() {
                ci.by_tag = Some(m);
            }
        }
        Ok(out)
    }

    /// Chains with a tag map (tests).
    #[cfg(feature = "test-hooks")]
    pub fn tag_maps(&self) -> usize {
        let chains = self.chains.read().unwrap_or_else(|p| p.into_inner());
        chains.values().filter(|ci| ci.by_tag.is_some()).count()
    }

    /// Runs `f` on the index of chain `g`, building it first when the chain
    /// is long enough; `None` when the chain is too short to need one.
    pub fn with_index<R>(
        &self,
        g: u32,
        t: &Tables,
        geo: &Layout,
        pager: &Pager,
        f: impl FnOnce(&ChainIndex) -> R,
    ) -> Result<Option<R>> {
        let Some(pe) = t.primary.get(g as usize) else {
            return Ok(None);
        };
        if pe.chain < CHAIN_INDEX_MIN {
            return Ok(None);
        }
        {
            let chains = self.chains.read().unwrap_or_else(|p| p.into_inner());
            if let Some(ci) = chains.get(&g) {
                return Ok(Some(f(ci)));
            }
        }
        let mut ci = ChainIndex::default();
        for_each_secondary_slot(self, g, t, geo, pager, |s, i, blk, k| {
            ci.note(s, i, blk.key_fp(k), geo)
        })?;
        let mut chains = self.chains.write().unwrap_or_else(|p| p.into_inner());
        let ci = chains.entry(g).or_insert(ci);
        Ok(Some(f(ci)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn indexed() -> ChainIndex {
        ChainIndex {
            by_tag: Some(HashMap::new()),
            ..ChainIndex::default()
        }
    }

    /// Each bucket once per fingerprint, with the union of its blocks'
    /// bits, whatever order the blocks are noted in (a model: a map of
    /// maps); in first-noted order; past the list length where places
    /// are kept too.
    #[test]
    fn note_keeps_each_bucket_once_with_its_blocks() {
        use std::collections::BTreeMap;
        let geo = Layout::v1(crate::format::Geometry {
            primary_buckets_per_half: 4,
            blocks_per_primary: 1,
            blocks_per_secondary: 128,
        });
        let mut ci = ChainIndex::default();
        let mut model: BTreeMap<u16, (Vec<u32>, BTreeMap<u32, u64>)> = BTreeMap::new();
        let mut x = 12345u64;
        for n in 0..20_000u32 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // Mostly the newest bucket, sometimes an older one, of a few
            // fingerprints (one of them a peak's).
            let fp = if x.is_multiple_of(4) {
                (x >> 8) as u16 % 3
            } else {
                7
            };
            let s = if x % 8 == 1 {
                (x >> 16) as u32 % (n / 16 + 1)
            } else {
                n / 16
            };
            let i = (x >> 40) as u32 % 128;
            ci.note(s, i, fp, &geo);
            let (order, masks) = model.entry(fp).or_default();
            let m = masks.entry(s).or_insert_with(|| {
                order.push(s);
                0
            });
            *m |= 1u64 << (i / group_size(128)).min(63);
        }
        assert!(model[&7].0.len() > PLACES_AFTER);
        for (fp, (order, masks)) in &model {
            let want: Vec<(u32, u64)> = order.iter().map(|s| (*s, masks[s])).collect();
            assert_eq!(ci.candidates(*fp), &want[..], "fingerprint {fp}");
        }
    }

    #[test]
    fn tag_map_marks_shared_hash_bits_ambiguous_and_keeps_them() {
        let mut ci = indexed();
        ci.note_tag(7, 100);
        assert_eq!(ci.by_tag.as_ref().and_then(|m| m.get(&7)), Some(&100));
        // A second tag with the same 32 bits, even in the same block: the
        // map can no longer say where either is, and must not forget them.
        ci.note_tag(7, 100);
        assert_eq!(ci.by_tag.as_ref().and_then(|m| m.get(&7)), Some(&AMBIGUOUS));
        ci.forget_tag(7, 100);
        assert_eq!(ci.by_tag.as_ref().and_then(|m| m.get(&7)), Some(&AMBIGUOUS));
        // A unique entry leaves with its tag, and only from its own block.
        ci.note_tag(9, 200);
        ci.forget_tag(9, 201);
        assert_eq!(ci.by_tag.as_ref().and_then(|m| m.get(&9)), Some(&200));
        ci.forget_tag(9, 200);
        assert_eq!(ci.by_tag.as_ref().and_then(|m| m.get(&9)), None);
    }

    #[test]
    fn no_tag_map_until_built() {
        let mut ci = ChainIndex::default();
        ci.note_tag(1, 5);
        assert!(ci.by_tag.is_none());
    }
}
