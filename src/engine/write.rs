//! The write path: INSERT and DELETE of one encoded tag in both halves,
//! with the intent record that makes each all-or-nothing across a crash.

use super::state::State;
use crate::error::{Error, Result};
use crate::format::hash::{fp_of_tag_hash, tag_hash};
use crate::format::tag::{decode, used_prefix, SlotView};
use crate::format::{
    place, Half, Intent, IntentOp, Place, SlotAddr, SlotBytes, KIND_SECONDARY, NONE,
    SLOTS_PER_BLOCK,
};
use crate::index::{filter_add, Found, SecondaryEntry};
use crate::pager::Identity;

/// Where one half of an INSERT will write.
#[derive(Clone, Copy, Debug)]
pub(super) struct Plan {
    pub(super) addr: SlotAddr,
    pub(super) id: Identity,
    sec: Option<u32>,
    new_link: bool,
}

impl Plan {
    /// Slot `addr` of primary bucket `g`.
    pub(super) fn primary(g: u32, addr: SlotAddr) -> Plan {
        Plan {
            addr,
            id: Identity::primary(g),
            sec: None,
            new_link: false,
        }
    }
}

impl State {
    /// Where both halves of an encoded tag live.
    fn places(&self, slot: &SlotBytes) -> Result<[Place; 2]> {
        let view = view_of(slot)?;
        Ok(Half::BOTH.map(|h| self.place_in(&view, h)))
    }

    /// Where half `half` of an encoded tag lives (one key hash, not two).
    fn place_of(&self, slot: &SlotBytes, half: Half) -> Result<Place> {
        Ok(self.place_in(&view_of(slot)?, half))
    }

    /// Where half `half` of the decoded tag `view` lives.
    fn place_in(&self, view: &SlotView<'_>, half: Half) -> Place {
        let (geo, seed) = (self.index.layout(), self.index.seed());
        place(geo, seed, half, view.relationship, view.key_name(half))
    }

    /// Drops the hot copies (`hot.rs`) of the keys in `places`, which a
    /// write of a tag is about to change (called once the write is known
    /// to change something, before any slot is written). (A key stored in another form too, by
    /// reference in a tag longer than a slot, never has a copy: its FIND
    /// finds the strings file holding the string before any slot names it.)
    fn forget_hot(&self, places: &[Place]) {
        for p in places {
            self.hot.forget(p.hash);
        }
    }

    /// True if the encoded tag is stored in half `half`.
    pub fn contains(&self, slot: &SlotBytes, half: Half) -> Result<bool> {
        let p = self.place_of(slot, half)?;
        let th = tag_hash(self.index.seed(), used_prefix(slot));
        Ok(self
            .index
            .locate(&self.pager, p.bucket, p.fp(), th, slot)?
            .is_some())
    }

    /// First free slot in `n` blocks from `first`; reserves each block it
    /// reads. Blocks from index `written` on are known never written.
    fn first_free(&mut self, first: u64, n: u32, written: u32) -> Result<Option<SlotAddr>> {
        for (i, b) in (first..first + n as u64).enumerate() {
            let fresh = i as u32 >= written;
            self.pager.ensure_reserved(b, fresh)?;
            if fresh {
                return Ok(Some(SlotAddr { block: b, slot: 0 }));
            }
            let blk = self.pager.block(b)?;
            if let Some(k) = blk.first_free() {
                // This INSERT fills the block: the bucket's next block is
                // next, backed meanwhile if never written (`pager/ahead.rs`).
                if blk.used() as usize + 1 == SLOTS_PER_BLOCK && i + 1 < n as usize {
                    match i as u32 + 1 >= written {
                        true => self.pager.back_ahead(b + 1),
                        false => self.pager.back_ahead_if_fresh(b + 1),
                    }
                }
                return Ok(Some(SlotAddr {
                    block: b,
                    slot: k as u32,
                }));
            }
        }
        Ok(None)
    }

    /// Chooses the slot for one half of an INSERT; may reserve a new secondary bucket.
    pub(super) fn plan(&mut self, g: u32) -> Result<Plan> {
        let geo = self.index.geometry();
        let pe = self.index.tables.primary[g as usize].clone();
        if pe.used < geo.primary_capacity() {
            let written = self.index.accel.known_extent(g).unwrap_or(u32::MAX);
            return match self.first_free(geo.primary_start(g), geo.blocks_per_primary, written)? {
                Some(addr) => Ok(Plan::primary(g, addr)),
                None => Err(Error::corrupt(format!(
                    "primary bucket {g}: table counts {} used slots but its blocks are full",
                    pe.used
                ))),
            };
        }
        let hint = self.index.open_hint[g as usize];
        let start = if hint != NONE { hint } else { pe.head };
        let open = self
            .index
            .tables
            .chain_from(start)
            .find(|(_, e)| e.used < geo.secondary_capacity())
            .map(|(s, e)| (s, e.ordinal, e.used));
        if let Some((s, ordinal, used)) = open {
            self.index.open_hint[g as usize] = s;
            // Start at block `used / slots`: every used slot lies in a
            // written block and the written blocks come first, so that block
            // is written or the first never written, and the blocks before
            // it are full unless a DELETE left a hole (then the wrap-around
            // finds it). A bucket a bulk load filled is read from its open
            // block, not header by header from its first.
            let skip = (used / SLOTS_PER_BLOCK as u32).min(geo.blocks_per_secondary - 1);
            let start = geo.secondary_start(s);
            let found = match self.first_free(
                start + skip as u64,
                geo.blocks_per_secondary - skip,
                u32::MAX,
            )? {
                Some(addr) => Some(addr),
                None => self.first_free(start, skip, u32::MAX)?,
            };
            return match found {
                Some(addr) => Ok(Plan {
                    addr,
                    id: Identity {
                        kind: KIND_SECONDARY,
                        owner: g,
                        ordinal,
                    },
                    sec: Some(s),
                    new_link: false,
                }),
                None => Err(Error::corrupt(format!(
                    "secondary bucket {s}: table counts {used} used slots but its blocks are full"
                ))),
            };
        }
        let s = self.alloc_secondary()?;
        // A free bucket holds zeros: never written, or zeroed when a split
        // emptied it (its blocks that held data are marked backed, so they
        // are not zero-filled again).
        if let Err(e) = self.pager.ensure_reserved(geo.secondary_start(s), true) {
            self.index.tables.free.insert(s);
            return Err(e);
        }
        // The next chain to overflow takes the next free bucket.
        if let Some(&next) = self.index.tables.free.first() {
            self.pager.back_ahead(geo.secondary_start(next));
        }
        Ok(Plan {
            addr: SlotAddr {
                block: geo.secondary_start(s),
                slot: 0,
            },
            id: Identity {
                kind: KIND_SECONDARY,
                owner: g,
                ordinal: pe.chain + 1,
            },
            sec: Some(s),
            new_link: true,
        })
    }

    /// Takes the lowest free secondary bucket, growing the file when none is free.
    pub(super) fn alloc_secondary(&mut self) -> Result<u32> {
        if let Some(s) = self.index.tables.free.pop_first() {
            return Ok(s);
        }
        let geo = self.index.geometry();
        let have = self.index.tables.secondary.len() as u32;
        // Grow by 1/8 of the secondary partition (at least 16 buckets, at most 4096).
        let add = (have / 8).clamp(16, 4096);
        let want = have
            .checked_add(add)
            .filter(|&n| n < NONE)
            .ok_or_else(|| Error::InvalidArgument("secondary bucket numbers exhausted".into()))?;
        self.pager.set_len(geo.file_len(want))?;
        let t = &mut self.index.tables;
        t.secondary.resize(want as usize, SecondaryEntry::free());
        t.free.extend(have + 1..want);
        Ok(have)
    }

    /// Records a written half in the tables and accelerators.
    pub(super) fn commit_insert(&mut self, g: u32, p: &Plan, kfp: u16, th: u64) {
        let geo = self.index.geometry();
        let ix = &mut self.index;
        match p.sec {
            None => {
                ix.tables.primary[g as usize].used += 1;
                let i = p.addr.block.saturating_sub(geo.primary_start(g));
                ix.accel
                    .wrote_primary(g, i as u32, p.addr.slot as usize, kfp);
            }
            Some(s) => {
                if p.new_link {
                    let tail = ix.tables.primary[g as usize].tail;
                    if tail == NONE {
                        ix.tables.primary[g as usize].head = s;
                    } else {
                        ix.tables.secondary[tail as usize].next = s;
                    }
                    let pe = &mut ix.tables.primary[g as usize];
                    pe.tail = s;
                    pe.chain += 1;
                    let e = &mut ix.tables.secondary[s as usize];
                    e.owner = g;
                    e.ordinal = p.id.ordinal;
                    e.next = NONE;
                    ix.open_hint[g as usize] = s;
                    // A bucket comes off the free list holding no tag.
                    ix.accel.linked_secondary(s);
                }
                let e = &mut ix.tables.secondary[s as usize];
                e.used += 1;
                filter_add(&mut e.filter, kfp);
                let i = p.addr.block.saturating_sub(geo.secondary_start(s));
                ix.accel.wrote_secondary(g, s, i as u32, kfp, th, &geo);
            }
        }
    }

    /// Records an erased half in the tables and accelerators.
    pub(super) fn commit_delete(&mut self, g: u32, f: &Found, th: u64) {
        let ix = &mut self.index;
        match f.sec {
            None => {
                let e = &mut ix.tables.primary[g as usize];
                e.used = e.used.saturating_sub(1);
            }
            Some(s) => {
                ix.accel.erased_secondary(g, th, f.addr.block);
                let e = &mut ix.tables.secondary[s as usize];
                e.used = e.used.saturating_sub(1);
                let ordinal = e.ordinal;
                let hint = ix.open_hint[g as usize];
                if hint != NONE && ordinal < ix.tables.secondary[hint as usize].ordinal {
                    ix.open_hint[g as usize] = s;
                }
            }
        }
    }

    /// Inserts an encoded tag; with `check_dup` false the caller guarantees
    /// it is absent. False if it was already present.
    pub fn insert_slot(&mut self, slot: &SlotBytes, check_dup: bool) -> Result<bool> {
        let [po, ps] = self.places(slot)?;
        let (go, gs) = (po.bucket, ps.bucket);
        self.index.prefetch_buckets(&self.pager, &[go, gs]);
        let (ko, ks) = (po.fp(), ps.fp());
        let th = tag_hash(self.index.seed(), used_prefix(slot));
        let tfp = fp_of_tag_hash(th);
        // The tag is in both halves or neither: search the cheaper chain.
        let (gc, kc) = if self.index.first_is_cheaper((go, ko), (gs, ks)) {
            (go, ko)
        } else {
            (gs, ks)
        };
        if check_dup
            && self
                .index
                .locate_for_insert(&self.pager, gc, kc, th, slot)?
                .is_some()
        {
            return Ok(false);
        }
        self.forget_hot(&[po, ps]);
        // The tag goes in: first split buckets if the store has outgrown
        // them, then place it anew.
        if self.grow()? {
            return self.insert_slot(slot, false);
        }
        let plo = self.plan(go)?;
        self.prefetch_slot(plo.addr);
        let pls = match self.plan(gs) {
            Ok(p) => p,
            Err(e) => {
                if let (true, Some(s)) = (plo.new_link, plo.sec) {
                    self.index.tables.free.insert(s);
                }
                return Err(e);
            }
        };
        self.prefetch_slot(pls.addr);
        // (plan() backed both target blocks with disk space before reading them.)
        let intent = Intent {
            op: IntentOp::Insert,
            object_slot: plo.addr,
            subject_slot: pls.addr,
            object_identity: (plo.id.owner, plo.id.ordinal),
            subject_identity: (pls.id.owner, pls.id.ordinal),
            tag: *slot,
        };
        self.pager.write_intent(&intent)?;
        self.pager.put_slot(plo.addr, plo.id, slot, ko, tfp)?;
        self.pager.put_slot(pls.addr, pls.id, slot, ks, tfp)?;
        self.pager.clear_intent()?;
        self.commit_insert(go, &plo, ko, th);
        self.commit_insert(gs, &pls, ks, th);
        self.tag_count += 1;
        Ok(true)
    }

    /// Asks for the cache lines of the slot at `addr` (a slot about to be
    /// written, whose old bytes the CRC update reads first).
    fn prefetch_slot(&self, addr: SlotAddr) {
        self.pager.prefetch_slot(addr.block, addr.slot as usize);
    }

    /// Inserts a whole tag: both halves under one intent, or each on its
    /// own in a half-only store. Returns whether anything changed and
    /// whether the subject half did (what the counters count).
    pub fn insert_whole(&mut self, slot: &SlotBytes, check_dup: bool) -> Result<(bool, bool)> {
        if !self.half_only() {
            let c = self.insert_slot(slot, check_dup)?;
            return Ok((c, c));
        }
        let o = self.insert_half_slot(slot, Half::Object)?;
        let s = self.insert_half_slot(slot, Half::Subject)?;
        Ok((o || s, s))
    }

    /// Deletes a whole tag (see [`State::insert_whole`]).
    pub fn delete_whole(&mut self, slot: &SlotBytes) -> Result<(bool, bool)> {
        if !self.half_only() {
            let c = self.delete_slot(slot)?;
            return Ok((c, c));
        }
        let s = self.delete_half_slot(slot, Half::Subject)?;
        let o = self.delete_half_slot(slot, Half::Object)?;
        Ok((o || s, s))
    }

    /// Inserts one half of an encoded tag (a half-only store); false if
    /// that half was already stored.
    pub fn insert_half_slot(&mut self, slot: &SlotBytes, half: Half) -> Result<bool> {
        let p = self.place_of(slot, half)?;
        let th = tag_hash(self.index.seed(), used_prefix(slot));
        if self
            .index
            .locate_for_insert(&self.pager, p.bucket, p.fp(), th, slot)?
            .is_some()
        {
            return Ok(false);
        }
        self.forget_hot(&[p]);
        if self.grow()? {
            return self.insert_half_slot(slot, half);
        }
        let plan = self.plan(p.bucket)?;
        let (object_slot, subject_slot, object_identity, subject_identity) = match half {
            Half::Object => (
                plan.addr,
                SlotAddr::NONE,
                (plan.id.owner, plan.id.ordinal),
                (0, 0),
            ),
            Half::Subject => (
                SlotAddr::NONE,
                plan.addr,
                (0, 0),
                (plan.id.owner, plan.id.ordinal),
            ),
        };
        self.pager.write_intent(&Intent {
            op: IntentOp::Insert,
            object_slot,
            subject_slot,
            object_identity,
            subject_identity,
            tag: *slot,
        })?;
        self.pager
            .put_slot(plan.addr, plan.id, slot, p.fp(), fp_of_tag_hash(th))?;
        self.pager.clear_intent()?;
        self.commit_insert(p.bucket, &plan, p.fp(), th);
        self.tag_count += 1;
        Ok(true)
    }

    /// Deletes one half of an encoded tag (a half-only store); false if
    /// that half was not stored.
    pub fn delete_half_slot(&mut self, slot: &SlotBytes, half: Half) -> Result<bool> {
        let p = self.place_of(slot, half)?;
        let th = tag_hash(self.index.seed(), used_prefix(slot));
        let Some(f) = self.index.locate(&self.pager, p.bucket, p.fp(), th, slot)? else {
            return Ok(false);
        };
        self.forget_hot(&[p]);
        let (object_slot, subject_slot) = match half {
            Half::Object => (f.addr, SlotAddr::NONE),
            Half::Subject => (SlotAddr::NONE, f.addr),
        };
        self.pager.write_intent(&Intent {
            op: IntentOp::Delete,
            object_slot,
            subject_slot,
            object_identity: (0, 0),
            subject_identity: (0, 0),
            tag: *slot,
        })?;
        self.pager.clear_slot(f.addr)?;
        self.pager.clear_intent()?;
        self.commit_delete(p.bucket, &f, th);
        self.tag_count = self.tag_count.saturating_sub(1);
        Ok(true)
    }

    /// Deletes an encoded tag from both halves; false if it was absent.
    pub fn delete_slot(&mut self, slot: &SlotBytes) -> Result<bool> {
        let [po, ps] = self.places(slot)?;
        let (go, gs) = (po.bucket, ps.bucket);
        self.index.prefetch_buckets(&self.pager, &[go, gs]);
        let th = tag_hash(self.index.seed(), used_prefix(slot));
        let fo = self.index.locate(&self.pager, go, po.fp(), th, slot)?;
        let fs = self.index.locate(&self.pager, gs, ps.fp(), th, slot)?;
        if fo.is_none() && fs.is_none() {
            return Ok(false);
        }
        self.forget_hot(&[po, ps]);
        let addr = |f: &Option<Found>| f.map_or(SlotAddr::NONE, |f| f.addr);
        let intent = Intent {
            op: IntentOp::Delete,
            object_slot: addr(&fo),
            subject_slot: addr(&fs),
            object_identity: (0, 0),
            subject_identity: (0, 0),
            tag: *slot,
        };
        self.pager.write_intent(&intent)?;
        for f in [&fo, &fs].into_iter().flatten() {
            self.pager.clear_slot(f.addr)?;
        }
        self.pager.clear_intent()?;
        if let Some(f) = &fo {
            self.commit_delete(go, f, th);
            self.tag_count = self.tag_count.saturating_sub(1);
        }
        if let Some(f) = &fs {
            self.commit_delete(gs, f, th);
        }
        Ok(true)
    }
}

/// The decoded view of a slot this build encoded.
fn view_of(slot: &SlotBytes) -> Result<SlotView<'_>> {
    decode(slot).ok_or_else(|| Error::corrupt("encoder produced a bad slot"))
}
