//! Finding one tag: the chain walk for its key, with the tag map's shortcut
//! in long chains; and choosing which half's chain is cheaper to search.

use super::accel::TagHint;
use super::{filter_has, ChainWalk, Index};
use crate::error::Result;
use crate::format::hash::fp_of_tag_hash;
use crate::format::{BlockAt, SlotAddr, SlotBytes};
use crate::pager::Pager;

/// Where a tag was found in one half.
#[derive(Clone, Copy, Debug)]
pub struct Found {
    /// The slot.
    pub addr: SlotAddr,
    /// The secondary bucket holding it (`None`: the primary bucket).
    pub sec: Option<u32>,
}

impl Index {
    /// The secondary bucket holding block `b` (`None` for a primary block).
    fn secondary_of(&self, b: u64) -> Option<u32> {
        match self.layout().block_at(b) {
            BlockAt::Secondary { s, .. } => Some(s),
            _ => None,
        }
    }

    /// The slot of block `b` holding the encoded tag, if any.
    fn scan(
        &self,
        pager: &Pager,
        b: u64,
        kfp: u16,
        tfp: u8,
        slot: &SlotBytes,
    ) -> Result<Option<Found>> {
        let blk = pager.block(b)?;
        let mut m = blk.matching(kfp);
        while m != 0 {
            let i = m.trailing_zeros() as usize;
            m &= m - 1;
            if blk.tag_fp(i) == tfp && blk.slot(i) == slot {
                return Ok(Some(Found {
                    addr: SlotAddr {
                        block: b,
                        slot: i as u32,
                    },
                    sec: self.secondary_of(b),
                }));
            }
        }
        Ok(None)
    }

    /// Finds an encoded tag (whole-tag hash `th`) in the chain of `g`,
    /// whose key has fingerprint `kfp`.
    pub fn locate(
        &self,
        pager: &Pager,
        g: u32,
        kfp: u16,
        th: u64,
        slot: &SlotBytes,
    ) -> Result<Option<Found>> {
        self.locate_in(pager, ChainWalk::new(g, g + 1, Some(kfp)), g, kfp, th, slot)
    }

    /// [`Index::locate`] for an INSERT's duplicate check: the primary
    /// bucket's headers are read header first (the INSERT reads them next
    /// to choose a slot, and asked for them already), not through the
    /// slot directory, whose line would be one more miss in turn.
    pub fn locate_for_insert(
        &self,
        pager: &Pager,
        g: u32,
        kfp: u16,
        th: u64,
        slot: &SlotBytes,
    ) -> Result<Option<Found>> {
        let walk = ChainWalk::new(g, g + 1, Some(kfp)).without_directory();
        self.locate_in(pager, walk, g, kfp, th, slot)
    }

    fn locate_in(
        &self,
        pager: &Pager,
        mut walk: ChainWalk,
        g: u32,
        kfp: u16,
        th: u64,
        slot: &SlotBytes,
    ) -> Result<Option<Found>> {
        let tfp = fp_of_tag_hash(th);
        let mut hinted = false;
        while let Some(b) = walk.next_block(self, pager)? {
            if !hinted && walk.in_overflow() {
                // Leaving the primary bucket: a long chain's tag map may
                // say where the tag is without reading the chain.
                hinted = true;
                let geo = self.layout();
                match self
                    .accel
                    .tag_hint(g, th, &self.tables, geo, self.seed(), pager)?
                {
                    TagHint::Absent => return Ok(None),
                    TagHint::Block(hb) => {
                        if let Some(f) = self.scan(pager, hb, kfp, tfp, slot)? {
                            return Ok(Some(f));
                        }
                        // Another tag with the same hash bits: search the chain.
                    }
                    TagHint::Search => {}
                }
            }
            if let Some(f) = self.scan(pager, b, kfp, tfp, slot)? {
                return Ok(Some(f));
            }
        }
        Ok(None)
    }

    /// True if searching key `ka` in chain `ga` reads no more blocks than key
    /// `kb` in chain `gb`. Walks both chains in step and stops as soon as one
    /// is known to be cheaper, so a peak's long chain is not walked in full.
    pub fn first_is_cheaper(&self, (ga, ka): (u32, u16), (gb, kb): (u32, u16)) -> bool {
        let per = self.layout().blocks_per_secondary as u64;
        let (mut a, mut b) = (self.tables.chain(ga), self.tables.chain(gb));
        let (mut na, mut nb) = (a.next(), b.next());
        let (mut ca, mut cb) = (0u64, 0u64);
        loop {
            match (na, nb) {
                (None, _) if ca <= cb => return true,
                (_, None) if cb < ca => return false,
                (Some((_, e)), _) if ca <= cb || nb.is_none() => {
                    if filter_has(&e.filter, ka) {
                        ca += per;
                    }
                    na = a.next();
                }
                (_, Some((_, e))) => {
                    if filter_has(&e.filter, kb) {
                        cb += per;
                    }
                    nb = b.next();
                }
                // Settled by the arms above (both ended, or one ended
                // while the other is known dearer).
                _ => return true,
            }
        }
    }
}
