//! Online growth (format 2): linear hashing splits one primary bucket of
//! each half at a time, moving the tags whose key now hashes to the new
//! bucket, so the store sizes itself with no stop-the-world re-hash.

use super::state::State;
use crate::error::{Error, Result};
use crate::format::hash::{key_hash, tag_hash};
use crate::format::tag::{decode, used_prefix};
use crate::format::{
    BlockAt, Half, Intent, IntentOp, Layout, SlotAddr, SlotBytes, BLOCK_SIZE, NONE, SLOTS_PER_BLOCK,
};
use crate::index::{filter_add, ChainWalk, Found};
use std::collections::HashSet;
use std::sync::atomic::Ordering;

/// Mean primary fill (tags per half ÷ primary slots per half) past which
/// an INSERT splits a bucket.
pub const SPLIT_FILL: f64 = 0.7;

/// Most splits one INSERT makes (splits postponed while readers stream
/// results are caught up a few at a time).
const SPLITS_PER_CALL: usize = 4;

/// One tag on its way to the new bucket.
struct Moving {
    from: Found,
    slot: SlotBytes,
    kfp: u16,
    tfp: u8,
    th: u64,
}

impl State {
    /// Splits buckets while one more tag would make the store fuller than
    /// [`SPLIT_FILL`], unless FINDs are streaming results (splits wait for
    /// none). True if any bucket split.
    pub fn grow(&mut self) -> Result<bool> {
        let mut split = false;
        for _ in 0..SPLITS_PER_CALL {
            let l = self.index.geometry();
            let cap = l.buckets_per_half() as f64 * l.primary_capacity() as f64;
            if !l.grows() || (self.tag_count + 1) as f64 <= SPLIT_FILL * cap {
                break;
            }
            if l.buckets_per_half() >= crate::format::geometry::MAX_PRIMARY_PER_HALF
                || self.readers.load(Ordering::SeqCst) != 0
            {
                break;
            }
            self.split_next()?;
            split = true;
        }
        Ok(split)
    }

    /// Splits the bucket at the split pointer in both halves.
    fn split_next(&mut self) -> Result<()> {
        let mut l = self.index.geometry();
        if l.split_needs_segment() {
            // The new segment goes at the end of the file, and the
            // superblock names it before any of its blocks is written.
            let sec = self.index.tables.secondary.len() as u32;
            let start = l.file_len(sec) / BLOCK_SIZE as u64;
            l.add_segment(start);
            self.pager.set_len(l.file_len(sec))?;
            self.set_layout(l)?;
        }
        let (old, new) = l.next_split();
        // Back every block the moved tags will need with disk space before
        // anything changes: a full disk then refuses the split (and the
        // INSERT that wanted it) and leaves the store as it was.
        let mut after = l;
        after.advance_split();
        let mut moving = [Vec::new(), Vec::new()];
        for h in Half::BOTH {
            moving[h.index()] = self.collect_moving(l.global(h, old), h, new, &after)?;
            self.reserve_chain(l.global(h, new), moving[h.index()].len() as u64)?;
        }
        let level = l.level;
        // From here a failure leaves a split half done: the handle is
        // unusable, and reopening finishes the split from the intent record.
        let r = (|| {
            self.pager.write_intent(&Intent {
                op: IntentOp::Split,
                object_slot: SlotAddr::NONE,
                subject_slot: SlotAddr::NONE,
                object_identity: (old, level),
                subject_identity: (0, 0),
                tag: [0; crate::format::tag::SLOT_SIZE],
            })?;
            self.set_layout(after)?;
            self.move_split(old, level, Some(moving))?;
            self.pager.clear_intent()
        })();
        if r.is_err() {
            self.pager.poison();
        }
        r
    }

    /// Records layout `l` in the superblock (logged with the changes in
    /// flight) and in the pager and index.
    fn set_layout(&mut self, l: Layout) -> Result<()> {
        let mut sb = self.sb.clone();
        sb.layout = l;
        self.pager.set_layout(l);
        self.index.set_layout(l);
        self.pager.log_superblock(&sb)?;
        self.sb = sb;
        Ok(())
    }

    /// Finishes a split interrupted by a crash (the intent record names
    /// the bucket): advances the split pointer if the superblock does not
    /// yet, then moves what is left to move. Every step is idempotent.
    pub fn redo_split(&mut self, old: u32, level: u32) -> Result<()> {
        let mut l = self.index.geometry();
        if l.level == level && l.split == old {
            if l.split_needs_segment() {
                let sec = self.index.tables.secondary.len() as u32;
                l.add_segment(l.file_len(sec) / BLOCK_SIZE as u64);
                self.pager.set_len(l.file_len(sec))?;
            }
            l.advance_split();
            self.set_layout(l)?;
        }
        self.move_split(old, level, None)?;
        self.pager.clear_intent()
    }

    /// Moves, in both halves, every tag of bucket `old`'s chain whose key
    /// now hashes to the bucket split from it. With `redo`, a tag the new
    /// chain already holds is only removed from the old one.
    /// `known`: the tags to move, collected just before (a fresh split);
    /// `None` collects them and checks the new chain first (a redo).
    fn move_split(&mut self, old: u32, level: u32, known: Option<[Vec<Moving>; 2]>) -> Result<()> {
        let l = self.index.geometry();
        let new = old + (l.base << level);
        let redo = known.is_none();
        let mut known = known.map(|[o, s]| [Some(o), Some(s)]);
        for h in Half::BOTH {
            let (go, gn) = (l.global(h, old), l.global(h, new));
            let moving = match known.as_mut().and_then(|k| k[h.index()].take()) {
                Some(m) => m,
                None => self.collect_moving(go, h, new, &l)?,
            };
            let present = if redo {
                self.chain_slots(gn)?
            } else {
                HashSet::new()
            };
            for m in &moving {
                if !present.contains(&m.slot) {
                    let plan = self.plan(gn)?;
                    self.pager
                        .put_slot(plan.addr, plan.id, &m.slot, m.kfp, m.tfp)?;
                    self.commit_insert(gn, &plan, m.kfp, m.th);
                }
                self.pager.clear_slot(m.from.addr)?;
                self.commit_delete(go, &m.from, m.th);
            }
            if !moving.is_empty() {
                self.index.accel.forget_chain(go);
                self.index.open_hint[go as usize] = NONE;
                self.pack_primary(go, &l)?;
                self.pull_into_primary(go, &l)?;
                self.unlink_empty_tail(go)?;
                self.refilter(go, &l)?;
            }
        }
        Ok(())
    }

    /// Backs the blocks a new chain `g` of `n` tags will take with disk space.
    fn reserve_chain(&mut self, g: u32, n: u64) -> Result<()> {
        let l = self.index.geometry();
        let per_block = SLOTS_PER_BLOCK as u64;
        let primary = n.div_ceil(per_block).min(l.blocks_per_primary as u64);
        for i in 0..primary {
            self.pager.ensure_reserved(l.primary_start(g) + i, true)?;
        }
        let over = n.saturating_sub(l.primary_capacity() as u64);
        let buckets = over.div_ceil(l.secondary_capacity() as u64);
        let mut taken = Vec::new();
        let mut r = Ok(());
        for _ in 0..buckets {
            match self.alloc_secondary() {
                Ok(s) => {
                    taken.push(s);
                    // A free bucket is never written: zeros may be written.
                    r = self.pager.ensure_reserved(l.secondary_start(s), true);
                }
                Err(e) => r = Err(e),
            }
            if r.is_err() {
                break;
            }
        }
        // Back to the free list: the moves take them again, lowest first.
        self.index.tables.free.extend(taken);
        r
    }

    /// The tags of chain `g` (half `h`) whose key hashes to bucket `new`
    /// under layout `l`.
    fn collect_moving(&self, g: u32, h: Half, new: u32, l: &Layout) -> Result<Vec<Moving>> {
        let seed = self.index.seed();
        let mut out = Vec::new();
        let mut walk = ChainWalk::new(g, g + 1, None);
        while let Some(b) = walk.next_block(&self.index, &self.pager)? {
            let blk = self.pager.block(b)?;
            let sec = match l.block_at(b) {
                BlockAt::Secondary { s, .. } => Some(s),
                _ => None,
            };
            for i in blk.occupied_slots() {
                let slot: SlotBytes = blk
                    .slot(i)
                    .try_into()
                    .map_err(|_| Error::corrupt(format!("block {b}: short slot {i}")))?;
                let v = decode(&slot).ok_or_else(|| {
                    Error::corrupt(format!("block {b}, slot {i}: does not decode as a tag"))
                })?;
                let kh = key_hash(seed, h, v.relationship, v.key_name(h));
                if l.bucket_of(kh) != new {
                    continue;
                }
                out.push(Moving {
                    from: Found {
                        addr: SlotAddr {
                            block: b,
                            slot: i as u32,
                        },
                        sec,
                    },
                    slot,
                    kfp: blk.key_fp(i),
                    tfp: blk.tag_fp(i),
                    th: tag_hash(seed, used_prefix(&slot)),
                });
            }
        }
        Ok(out)
    }

    /// Refills the primary bucket of chain `g`, emptied by a split, with the
    /// tags of its last secondary buckets, so that they empty and go back
    /// to the free list. A tag the primary bucket already holds (a redone
    /// split that was killed between the two writes) is only cleared.
    fn pull_into_primary(&mut self, g: u32, l: &Layout) -> Result<()> {
        let seed = self.index.seed();
        let cap = l.primary_capacity();
        let mut held: Option<HashSet<SlotBytes>> = None;
        loop {
            let pe = self.index.tables.primary[g as usize].clone();
            if pe.used >= cap || pe.tail == NONE {
                return Ok(());
            }
            let s = pe.tail;
            let first = l.secondary_start(s);
            let mut tail = Vec::new();
            for b in first..first + l.blocks_per_secondary as u64 {
                let blk = self.pager.block(b)?;
                for i in blk.occupied_slots() {
                    let slot: SlotBytes = blk
                        .slot(i)
                        .try_into()
                        .map_err(|_| Error::corrupt(format!("block {b}: short slot {i}")))?;
                    tail.push(Moving {
                        from: Found {
                            addr: SlotAddr {
                                block: b,
                                slot: i as u32,
                            },
                            sec: Some(s),
                        },
                        slot,
                        kfp: blk.key_fp(i),
                        tfp: blk.tag_fp(i),
                        th: tag_hash(seed, used_prefix(&slot)),
                    });
                }
            }
            if tail.len() as u64 > (cap - pe.used) as u64 {
                // The tail bucket would not empty: leave the chain as it is.
                return Ok(());
            }
            if held.is_none() {
                held = Some(self.primary_slots(g, l)?);
            }
            for m in &tail {
                if !held.as_ref().is_some_and(|h| h.contains(&m.slot)) {
                    let plan = self.plan(g)?;
                    self.pager
                        .put_slot(plan.addr, plan.id, &m.slot, m.kfp, m.tfp)?;
                    self.commit_insert(g, &plan, m.kfp, m.th);
                }
                self.pager.clear_slot(m.from.addr)?;
                self.commit_delete(g, &m.from, m.th);
            }
            self.unlink_empty_tail(g)?;
        }
    }

    /// Packs primary bucket `g`, emptied by a split, into its first blocks:
    /// tags in blocks past the ones its count needs move into the holes of
    /// the first, and the emptied blocks are zeroed, so a FIND reads fewer
    /// blocks. A tag the first blocks already hold (a redone split) is only
    /// cleared.
    fn pack_primary(&mut self, g: u32, l: &Layout) -> Result<()> {
        let used = self.index.tables.primary[g as usize].used as u64;
        let keep = used.div_ceil(SLOTS_PER_BLOCK as u64) as u32;
        let extent = self.index.accel.extent(g, l, &self.pager)?;
        if keep >= extent {
            return Ok(());
        }
        let start = l.primary_start(g);
        let mut late = Vec::new();
        for b in start + keep as u64..start + extent as u64 {
            let blk = self.pager.block(b)?;
            for i in blk.occupied_slots() {
                let slot: SlotBytes = blk
                    .slot(i)
                    .try_into()
                    .map_err(|_| Error::corrupt(format!("block {b}: short slot {i}")))?;
                late.push((b, i, slot, blk.key_fp(i), blk.tag_fp(i)));
            }
        }
        let mut held = HashSet::new();
        let mut free = Vec::new();
        for b in start..start + keep as u64 {
            let blk = self.pager.block(b)?;
            for i in 0..SLOTS_PER_BLOCK {
                if blk.occupied(i) {
                    if let Ok(s) = SlotBytes::try_from(blk.slot(i)) {
                        held.insert(s);
                    }
                } else {
                    free.push(SlotAddr {
                        block: b,
                        slot: i as u32,
                    });
                }
            }
        }
        let mut free = free.into_iter();
        for (b, i, slot, kfp, tfp) in late {
            if !held.contains(&slot) {
                let Some(to) = free.next() else {
                    return Ok(());
                };
                let id = crate::pager::Identity {
                    kind: crate::format::KIND_PRIMARY,
                    owner: g,
                    ordinal: 0,
                };
                self.pager.put_slot(to, id, &slot, kfp, tfp)?;
            }
            self.pager.clear_slot(SlotAddr {
                block: b,
                slot: i as u32,
            })?;
        }
        for b in start + keep as u64..start + extent as u64 {
            if !self.pager.block(b)?.is_unwritten() {
                self.pager.zero_block(b)?;
            }
        }
        // Backed already: a later write must not zero-fill around the journal.
        self.pager.mark_reserved(start, extent as u64);
        self.index.accel.set_extent(g, keep);
        Ok(())
    }

    /// Recomputes the key filters of chain `g`'s secondary buckets from the
    /// tags left in them, so FINDs of keys that moved out skip them.
    fn refilter(&mut self, g: u32, l: &Layout) -> Result<()> {
        let chain: Vec<u32> = self.index.tables.chain(g).map(|(s, _)| s).collect();
        for s in chain {
            let mut f = [0u64; 4];
            let first = l.secondary_start(s);
            for b in first..first + l.blocks_per_secondary as u64 {
                let blk = self.pager.block(b)?;
                for i in blk.occupied_slots() {
                    filter_add(&mut f, blk.key_fp(i));
                }
            }
            self.index.tables.secondary[s as usize].filter = f;
        }
        Ok(())
    }

    /// The tags primary bucket `g` holds.
    fn primary_slots(&self, g: u32, l: &Layout) -> Result<HashSet<SlotBytes>> {
        let mut out = HashSet::new();
        let n = self.index.accel.extent(g, l, &self.pager)?;
        for b in l.primary_start(g)..l.primary_start(g) + n as u64 {
            let blk = self.pager.block(b)?;
            for i in blk.occupied_slots() {
                if let Ok(s) = SlotBytes::try_from(blk.slot(i)) {
                    out.insert(s);
                }
            }
        }
        Ok(out)
    }

    /// Every tag chain `g` holds (a redone split's new chain).
    fn chain_slots(&self, g: u32) -> Result<HashSet<SlotBytes>> {
        let mut out = HashSet::new();
        let mut walk = ChainWalk::new(g, g + 1, None);
        while let Some(b) = walk.next_block(&self.index, &self.pager)? {
            let blk = self.pager.block(b)?;
            for i in blk.occupied_slots() {
                if let Ok(s) = SlotBytes::try_from(blk.slot(i)) {
                    out.insert(s);
                }
            }
        }
        Ok(out)
    }

    /// Gives back the empty secondary buckets at the end of chain `g`
    /// (a split moved their tags away): zeroed, unlinked, free again.
    fn unlink_empty_tail(&mut self, g: u32) -> Result<()> {
        let l = self.index.geometry();
        loop {
            let pe = self.index.tables.primary[g as usize].clone();
            let s = pe.tail;
            if s == NONE || self.index.tables.secondary[s as usize].used != 0 {
                return Ok(());
            }
            let first = l.secondary_start(s);
            for b in first..first + l.blocks_per_secondary as u64 {
                if !self.pager.block(b)?.is_unwritten() {
                    self.pager.zero_block(b)?;
                }
            }
            // Backed already: a later link must not zero-fill it again
            // around the journal.
            self.pager
                .mark_reserved(first, l.blocks_per_secondary as u64);
            let prev = self
                .index
                .tables
                .chain(g)
                .take_while(|&(x, _)| x != s)
                .last()
                .map_or(NONE, |(x, _)| x);
            let t = &mut self.index.tables;
            if prev == NONE {
                t.primary[g as usize].head = NONE;
            } else {
                t.secondary[prev as usize].next = NONE;
            }
            let pe = &mut t.primary[g as usize];
            pe.tail = prev;
            pe.chain = pe.chain.saturating_sub(1);
            t.secondary[s as usize] = crate::index::SecondaryEntry::free();
            t.free.insert(s);
        }
    }
}
