//! Moving a split bucket's tags: the ones whose key now hashes to the new
//! bucket go there, in both halves.

use super::super::state::State;
use super::super::write::Plan;
use crate::error::{Error, Result};
use crate::format::hash::{key_hash, tag_hash};
use crate::format::tag::{decode, used_prefix};
use crate::format::{
    BlockAt, BlockMut, BlockRef, Half, Layout, SlotAddr, SlotBytes, BLOCK_SIZE, KIND_PRIMARY, NONE,
    SLOTS_PER_BLOCK,
};
use crate::index::{ChainWalk, Found};
use foldhash::{HashSet, HashSetExt};

/// One tag on its way out of a chain (or out of the chain's tail).
pub(super) struct Moving {
    pub(super) from: Found,
    pub(super) slot: SlotBytes,
    kfp: u16,
    tfp: u8,
    th: u64,
}

impl Moving {
    /// The tag in slot `i` of block `b` (of secondary bucket `sec`, if any).
    pub(super) fn at(
        blk: &BlockRef<'_>,
        b: u64,
        i: usize,
        sec: Option<u32>,
        seed: u64,
    ) -> Result<Moving> {
        let slot: SlotBytes = blk
            .slot(i)
            .try_into()
            .map_err(|_| Error::corrupt(format!("block {b}: short slot {i}")))?;
        Ok(Moving {
            from: Found {
                addr: SlotAddr {
                    block: b,
                    slot: i as u32,
                },
                sec,
            },
            th: tag_hash(seed, used_prefix(&slot)),
            slot,
            kfp: blk.key_fp(i),
            tfp: blk.tag_fp(i),
        })
    }
}

impl State {
    /// Moves, in both halves, every tag of bucket `old`'s chain whose key
    /// now hashes to the bucket split from it. With `redo`, a tag the new
    /// chain already holds is only removed from the old one.
    /// `known`: the tags to move, collected just before (a fresh split);
    /// `None` collects them and checks the new chain first (a redo).
    pub(super) fn move_split(
        &mut self,
        old: u32,
        level: u32,
        known: Option<[Vec<Moving>; 2]>,
    ) -> Result<()> {
        // Each block the moves touch is sealed once, after them.
        self.pager.defer_seals();
        let r = self.move_split_deferred(old, level, known);
        let sealed = self.pager.seal_deferred();
        r.and(sealed)
    }

    fn move_split_deferred(
        &mut self,
        old: u32,
        level: u32,
        known: Option<[Vec<Moving>; 2]>,
    ) -> Result<()> {
        let l = self.index.geometry();
        let new = old + (l.base << level);
        let redo = known.is_none();
        let mut known = known.map(|[o, s]| [Some(o), Some(s)]);
        // Both halves move first, then both old chains are tidied: a bucket
        // the tidying gives back is then not taken by the other half's
        // moves instead of the buckets reserved for them.
        let mut moved = [false; 2];
        for h in Half::BOTH {
            let (go, gn) = (l.global(h, old), l.global(h, new));
            let moving = match known.as_mut().and_then(|k| k[h.index()].take()) {
                Some(m) => m,
                None => self.collect_moving(go, h, new, &l)?,
            };
            let present = if redo {
                self.dedupe_chain(go, &l)?;
                self.dedupe_chain(gn, &l)?;
                let blocks = self.chain_blocks(gn)?;
                self.slots_in(blocks)?
            } else {
                HashSet::new()
            };
            if redo || !self.fill_new_bucket(gn, &moving, &l)? {
                for m in &moving {
                    self.move_one(m, go, gn, present.contains(&m.slot))?;
                }
            } else {
                // Now in the new bucket: cleared from the old chain.
                for m in &moving {
                    self.pager.clear_slot(m.from.addr)?;
                    self.commit_delete(go, &m.from, m.th);
                }
            }
            moved[h.index()] = !moving.is_empty();
        }
        for h in Half::BOTH {
            let go = l.global(h, old);
            if moved[h.index()] {
                self.index.accel.forget_chain(go);
                self.index.open_hint[go as usize] = NONE;
                self.pack_primary(go, &l, redo)?;
                self.pull_into_primary(go, &l, redo)?;
                self.unlink_empty_tail(go)?;
                self.refilter(go, &l)?;
            }
        }
        Ok(())
    }

    /// Writes the tags moving into `g`, the new bucket of a fresh split,
    /// as whole blocks of its primary bucket (each block built in memory,
    /// sealed once and written once) instead of one slot at a time; false
    /// (nothing written) when they would not fit its primary bucket or it
    /// is not empty, and the caller moves them one by one.
    fn fill_new_bucket(&mut self, g: u32, moving: &[Moving], l: &Layout) -> Result<bool> {
        let pe = &self.index.tables.primary[g as usize];
        if moving.is_empty()
            || moving.len() > l.primary_capacity() as usize
            || pe.used != 0
            || pe.head != NONE
        {
            return Ok(false);
        }
        let start = l.primary_start(g);
        let blocks = moving.len().div_ceil(SLOTS_PER_BLOCK);
        if self.index.accel.known_extent(g) != Some(0) {
            for b in start..start + blocks as u64 {
                if !self.pager.block(b)?.is_unwritten() {
                    return Ok(false);
                }
            }
        }
        let mut img = vec![0u8; BLOCK_SIZE];
        for (k, chunk) in moving.chunks(SLOTS_PER_BLOCK).enumerate() {
            img.fill(0);
            let mut blk = BlockMut(&mut img);
            blk.set_identity(KIND_PRIMARY, g, 0);
            for (i, m) in chunk.iter().enumerate() {
                blk.put(i, &m.slot, m.kfp, m.tfp);
            }
            blk.seal();
            self.pager.write_new_block(start + k as u64, &img)?;
        }
        for (j, m) in moving.iter().enumerate() {
            let addr = SlotAddr {
                block: start + (j / SLOTS_PER_BLOCK) as u64,
                slot: (j % SLOTS_PER_BLOCK) as u32,
            };
            let plan = Plan::primary(g, addr);
            self.commit_insert(g, &plan, m.kfp, m.th);
        }
        Ok(true)
    }

    /// The tags of chain `g` (half `h`) whose key hashes to bucket `new`
    /// under layout `l`.
    pub(super) fn collect_moving(
        &self,
        g: u32,
        h: Half,
        new: u32,
        l: &Layout,
    ) -> Result<Vec<Moving>> {
        let seed = self.index.seed();
        let mut out = Vec::new();
        for b in self.chain_blocks(g)? {
            let blk = self.pager.block(b)?;
            let sec = match l.block_at(b) {
                BlockAt::Secondary { s, .. } => Some(s),
                _ => None,
            };
            for i in blk.occupied_slots() {
                let v = decode(blk.slot(i)).ok_or_else(|| {
                    Error::corrupt(format!("block {b}, slot {i}: does not decode as a tag"))
                })?;
                if l.bucket_of(key_hash(seed, h, v.relationship, v.key_name(h))) == new {
                    out.push(Moving::at(&blk, b, i, sec, seed)?);
                }
            }
        }
        Ok(out)
    }

    /// Moves one tag from chain `from` to chain `to` (where the usual INSERT
    /// placement puts it), unless `to` already holds it (a redone split):
    /// then it is only cleared from `from`.
    pub(super) fn move_one(&mut self, m: &Moving, from: u32, to: u32, held: bool) -> Result<()> {
        if !held {
            let plan = self.plan(to)?;
            self.pager
                .put_slot(plan.addr, plan.id, &m.slot, m.kfp, m.tfp)?;
            self.commit_insert(to, &plan, m.kfp, m.th);
        }
        self.pager.clear_slot(m.from.addr)?;
        self.commit_delete(from, &m.from, m.th);
        Ok(())
    }

    /// Clears every later copy of a tag that chain `g` holds twice: a split
    /// killed between the two writes of one of its moves inside the chain
    /// (packing the primary bucket, refilling it from the tail) left the tag
    /// in two slots, and the redo finds no tag left to move. The copy met
    /// first (primary bucket, then the chain in order) stays.
    pub(super) fn dedupe_chain(&mut self, g: u32, l: &Layout) -> Result<()> {
        let seed = self.index.seed();
        let start = l.primary_start(g);
        let mut blocks: Vec<(u64, Option<u32>)> = (start..start + l.blocks_per_primary as u64)
            .map(|b| (b, None))
            .collect();
        for (s, _) in self.index.tables.chain(g) {
            let first = l.secondary_start(s);
            blocks.extend((first..first + l.blocks_per_secondary as u64).map(|b| (b, Some(s))));
        }
        let mut seen = HashSet::new();
        let mut twice = Vec::new();
        for (b, sec) in blocks {
            let blk = self.pager.block(b)?;
            for i in blk.occupied_slots() {
                let m = Moving::at(&blk, b, i, sec, seed)?;
                if !seen.insert(m.slot) {
                    twice.push(m);
                }
            }
        }
        for m in &twice {
            self.pager.clear_slot(m.from.addr)?;
            self.commit_delete(g, &m.from, m.th);
        }
        if !twice.is_empty() {
            self.index.accel.forget_chain(g);
        }
        Ok(())
    }

    /// Every tag the blocks `blocks` hold.
    pub(super) fn slots_in(
        &self,
        blocks: impl IntoIterator<Item = u64>,
    ) -> Result<HashSet<SlotBytes>> {
        let mut out = HashSet::new();
        for b in blocks {
            let blk = self.pager.block(b)?;
            for i in blk.occupied_slots() {
                if let Ok(s) = SlotBytes::try_from(blk.slot(i)) {
                    out.insert(s);
                }
            }
        }
        Ok(out)
    }

    /// Every block of chain `g` worth reading, in order.
    pub(in crate::engine) fn chain_blocks(&self, g: u32) -> Result<Vec<u64>> {
        let mut out = Vec::new();
        let mut walk = ChainWalk::new(g, g + 1, None);
        while let Some(b) = walk.next_block(&self.index, &self.pager)? {
            out.push(b);
        }
        Ok(out)
    }
}
