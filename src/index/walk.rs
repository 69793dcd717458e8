//! The chain walk: the blocks worth reading for a key, in order.

use super::{next_in_mask, Index};
use crate::error::Result;
use crate::format::NONE;
use crate::index::filter_has;
use crate::pager::Pager;

#[derive(Clone, Copy, Debug)]
enum Pos {
    /// At the start of chain `g`: the primary bucket's extent is not read yet.
    Start,
    /// Block `i` of `n` worth reading in the primary bucket, and which of
    /// the first 64 may hold the key (bit `i`; later blocks are all read).
    Primary(u32, u32, u64),
    /// Block `i` of secondary bucket `s`, following the chain's links.
    Secondary(u32, u32),
    /// The `k`-th candidate of the chain index: bucket `s`, its block mask,
    /// and the next block to consider.
    Indexed(usize, u32, u64, u32),
    Done,
}

/// Walks the blocks of one or more chains, skipping secondary buckets that
/// cannot hold the key `fp` (key filters, or the chain index of long chains).
///
/// The walk holds no borrow: each step takes the index and pager, so a
/// reader can release the store's lock between steps.
#[derive(Clone, Debug)]
pub struct ChainWalk {
    g: u32,
    g_end: u32,
    step: u32,
    pos: Pos,
    fp: Option<u16>,
    /// Read primary buckets through the slot directory (when valid).
    use_dir: bool,
}

impl ChainWalk {
    /// A walk over the chains of primary buckets `g..g_end`, for key
    /// fingerprint `fp` (`None`: every block).
    pub fn new(g: u32, g_end: u32, fp: Option<u16>) -> Self {
        Self::every(g, g_end, 1, fp)
    }

    /// A walk over the chains of every `step`-th primary bucket in `g..g_end`.
    pub fn every(g: u32, g_end: u32, step: u32, fp: Option<u16>) -> Self {
        let pos = if g < g_end { Pos::Start } else { Pos::Done };
        ChainWalk {
            g,
            g_end,
            step: step.max(1),
            pos,
            fp,
            use_dir: true,
        }
    }

    /// The same walk reading every written block of a primary bucket,
    /// header first, as when the slot directory is not valid: for a
    /// caller that reads those headers next anyway (an INSERT's
    /// duplicate check, then its choice of a free slot).
    pub fn without_directory(mut self) -> Self {
        self.use_dir = false;
        self
    }

    /// True when no block is left.
    pub fn done(&self) -> bool {
        matches!(self.pos, Pos::Done)
    }

    /// True once the walk has left the primary bucket of its (last) chain.
    pub fn in_overflow(&self) -> bool {
        matches!(self.pos, Pos::Secondary(..) | Pos::Indexed(..))
    }

    fn first_match(&self, ix: &Index, s: u32) -> u32 {
        match self.fp {
            Some(fp) => ix
                .tables
                .chain_from(s)
                .find(|(_, e)| filter_has(&e.filter, fp))
                .map_or(NONE, |(s, _)| s),
            None => s,
        }
    }

    /// The `k`-th candidate bucket of the chain index, if the chain has one.
    fn candidate(&self, ix: &Index, pager: &Pager, k: usize) -> Result<Option<Option<(u32, u64)>>> {
        let Some(fp) = self.fp else {
            return Ok(None);
        };
        let geo = ix.layout();
        ix.accel.with_index(self.g, &ix.tables, geo, pager, |ci| {
            ci.candidates(fp).get(k).copied()
        })
    }

    /// Asks for the headers of the blocks of secondary bucket `s` set in `mask`.
    fn prefetch_masked(ix: &Index, pager: &Pager, s: u32, mask: u64) {
        let geo = ix.layout();
        let mut j = 0;
        while let Some(x) = next_in_mask(mask, geo.blocks_per_secondary, j) {
            pager.prefetch_headers(geo.secondary_start(s) + x as u64, 1);
            j = x + 1;
        }
    }

    /// The next block to read, or `None` at the end.
    pub fn next_block(&mut self, ix: &Index, pager: &Pager) -> Result<Option<u64>> {
        let geo = ix.layout();
        loop {
            match self.pos {
                Pos::Done => return Ok(None),
                Pos::Start => {
                    let (n, dir) = ix.accel.primary_view(self.g, geo, pager)?;
                    let want = match self.fp {
                        Some(fp) if dir && self.use_dir => {
                            ix.prefetch_matching(pager, self.g, n, fp)
                        }
                        _ => {
                            // Ask for every header of the bucket (and the
                            // table entry read after them) at once: the
                            // misses overlap.
                            ix.prefetch_bucket(pager, self.g, n);
                            u64::MAX
                        }
                    };
                    self.pos = Pos::Primary(0, n, want);
                }
                Pos::Primary(i, n, want) if i < n => {
                    // The next block the directory does not rule out.
                    let i = match want.checked_shr(i).map(u64::trailing_zeros) {
                        Some(z) if z < 64 => i + z,
                        _ => i.max(64),
                    };
                    if i >= n {
                        self.pos = Pos::Primary(n, n, want);
                        continue;
                    }
                    self.pos = Pos::Primary(i + 1, n, want);
                    return Ok(Some(geo.primary_start(self.g) + i as u64));
                }
                Pos::Primary(..) => {
                    self.pos = match self.candidate(ix, pager, 0)? {
                        Some(Some((s, mask))) => Pos::Indexed(0, s, mask, 0),
                        Some(None) => self.next_chain(),
                        None => {
                            let head = ix.tables.primary[self.g as usize].head;
                            match self.first_match(ix, head) {
                                NONE => self.next_chain(),
                                s => Pos::Secondary(s, 0),
                            }
                        }
                    };
                }
                Pos::Secondary(s, i)
                    if i < ix.accel.secondary_extent(s, geo.blocks_per_secondary) =>
                {
                    if i == 0 {
                        let n = ix.accel.secondary_extent(s, geo.blocks_per_secondary);
                        pager.prefetch_headers(geo.secondary_start(s), n);
                    }
                    self.pos = Pos::Secondary(s, i + 1);
                    return Ok(Some(geo.secondary_start(s) + i as u64));
                }
                Pos::Indexed(k, s, mask, i) => {
                    if let Some(b) = next_in_mask(mask, geo.blocks_per_secondary, i) {
                        if i == 0 {
                            // Entering candidate k: its headers were asked for
                            // when candidate k-1 was entered; ask for k+1's
                            // now, so their page walks overlap this bucket's
                            // slot reads instead of stalling the next entry.
                            if k == 0 {
                                Self::prefetch_masked(ix, pager, s, mask);
                            }
                            if let Some(Some((s2, m2))) = self.candidate(ix, pager, k + 1)? {
                                Self::prefetch_masked(ix, pager, s2, m2);
                            }
                        }
                        self.pos = Pos::Indexed(k, s, mask, b + 1);
                        return Ok(Some(geo.secondary_start(s) + b as u64));
                    }
                    self.pos = match self.candidate(ix, pager, k + 1)? {
                        Some(Some((s, mask))) => Pos::Indexed(k + 1, s, mask, 0),
                        _ => self.next_chain(),
                    };
                }
                Pos::Secondary(s, _) => {
                    let next = ix.tables.secondary[s as usize].next;
                    self.pos = match self.first_match(ix, next) {
                        NONE => self.next_chain(),
                        n => Pos::Secondary(n, 0),
                    };
                }
            }
        }
    }

    fn next_chain(&mut self) -> Pos {
        self.g = self.g.saturating_add(self.step);
        if self.g < self.g_end {
            Pos::Start
        } else {
            Pos::Done
        }
    }
}
