//! Bulk writes in mapped mode: changed blocks kept as private copies and
//! written back whole, in the order they were first changed, by `pwrite`.
//!
//! A bulk load touches every block of a fresh store: through the map each
//! costs a write of zeros to back it, a read fault and a write-protect
//! fault. Kept in memory and written back in runs, it costs a share of one
//! large positioned write. A process killed meanwhile leaves each block
//! either as it was or whole as written (a page is copied into the page
//! cache whole), never torn; blocks reach the file in the order they were
//! first changed, so a chain never has a later bucket without the earlier.

use super::bits::BlockBits;
use super::commit::Durability;
use super::file;
use super::Pager;
use crate::error::{Error, Result};
use crate::format::{BlockMut, BLOCK_SIZE};
use std::sync::Arc;

/// Private copies past which a bulk write goes back to the file (16 MiB).
pub const BULK_FLUSH_BLOCKS: usize = 4096;

/// A bulk write in progress: the blocks with a private copy in the
/// pager's overlay, and buffers kept between write-backs (a fresh 4 KiB
/// copy per block and a fresh run buffer per write-back were a tenth of
/// a bulk load's time in `malloc`, `free` and page faults).
#[derive(Default)]
pub(super) struct BulkWrite {
    /// Blocks with a private copy, in the order first changed.
    order: Vec<u64>,
    /// Copies written back, for the next blocks' copies.
    free: Vec<Arc<[u8]>>,
    /// The bytes of one run of adjacent blocks, for one `pwrite`.
    run: Vec<u8>,
    /// A write-back of this bulk write was attempted: the file may hold
    /// part of it.
    wrote: bool,
    /// One bit per block whose copy was first written in this bulk write
    /// and is sealed once, on its way to the file, instead of at each slot
    /// put (the CRC updates of a fresh block's 25 puts were a tenth of an
    /// npm bulk load).
    unsealed: BlockBits,
}

impl BulkWrite {
    /// True when block `n`'s copy waits to be sealed on its way to the file.
    pub(super) fn is_unsealed(&self, n: u64) -> bool {
        self.unsealed.contains(n)
    }

    /// Block `n`'s copy is sealed on its way to the file, not now.
    pub(super) fn defer_seal(&mut self, n: u64) {
        self.unsealed.insert(n);
    }

    /// Clears block `n`'s mark; true if it waited to be sealed. (A copy
    /// written whole, sealed or zeros, has nothing left to seal.)
    pub(super) fn take_unsealed(&mut self, n: u64) -> bool {
        self.unsealed.remove(n)
    }
}

/// Which bulk runs get their write-back started at once (`writeback.rs`).
///
/// Only worth it for blocks no later round rewrites before the sync: a
/// block written back and then changed again is written twice. So only in
/// the last round of a batch, and never again until the next sync once a
/// run holds a block already written back early (the CLI applied a file
/// in batches of 262,144 tags, each touching nearly every block: a 5 M-tag
/// `insert --file` took 35 s against 27 s with every run written back).
#[derive(Debug, Default)]
pub struct EarlyWriteback {
    /// The current bulk write is the last round of its batch.
    last_round: bool,
    /// A block written back early by an earlier round was written again
    /// since the last sync.
    off: bool,
    /// One bit per block written back early by earlier rounds since the
    /// last sync.
    done: BlockBits,
    /// The same for this round (a round may write a few blocks twice
    /// itself: that alone is no reason to stop).
    round: BlockBits,
}

impl EarlyWriteback {
    /// Marks blocks `first..end` written back early by this round; true if
    /// no earlier round had written any of them back early.
    fn mark(&mut self, first: u64, end: u64) -> bool {
        let mut fresh = true;
        for b in first..end {
            fresh &= !self.done.contains(b);
            self.round.insert(b);
        }
        fresh
    }

    /// The round ended: its blocks count as written back by an earlier one.
    fn end_round(&mut self) {
        self.done.union_with(&self.round);
        self.round.clear();
    }

    /// Everything reached the disk: write-backs may start early again.
    pub fn synced(&mut self) {
        self.off = false;
        self.done.clear();
        self.round.clear();
    }
}

impl Pager {
    /// Starts a bulk write (mapped mode only): block writes go to private
    /// copies until [`Pager::flush_bulk`]. `last_round`: no later round of
    /// the same batch follows (its runs may start their write-back early).
    pub fn begin_bulk(&mut self, last_round: bool) {
        if self.durability == Durability::None {
            self.bulk = Some(BulkWrite::default());
            self.early.last_round = last_round;
        }
    }

    /// True when a bulk write of about `bytes` cannot run out of disk
    /// space: the filesystem has twice that and 64 MiB more free, and no
    /// file-size limit applies. (A bulk write that fails halfway leaves
    /// halves for the reopen to agree, so a batch that might fill the disk
    /// goes tag by tag, stopping at an exact count.)
    pub fn bulk_room(&self, bytes: u64) -> bool {
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit fills the struct we pass.
        let unlimited = unsafe { libc::getrlimit(libc::RLIMIT_FSIZE, &mut lim) } == 0
            && lim.rlim_cur == libc::RLIM_INFINITY;
        let free = self.file.free_bytes().unwrap_or(0);
        unlimited && free >= bytes.saturating_mul(2).saturating_add(64 << 20)
    }

    /// Writes back now if a bulk write holds enough private copies.
    pub fn bulk_checkpoint(&mut self) -> Result<()> {
        if self.bulk.as_ref().map_or(0, |w| w.order.len()) >= self.bulk_flush_blocks {
            return self.flush_bulk();
        }
        Ok(())
    }

    /// Sets the private copies past which a bulk write goes back (tests).
    #[cfg(feature = "test-hooks")]
    pub fn set_bulk_flush_blocks(&mut self, blocks: usize) {
        self.bulk_flush_blocks = blocks.max(1);
    }

    /// Block `n`'s private copy for a bulk write, made from the file's on
    /// first use (`zeroed`: the block was never written, so no read).
    pub(super) fn bulk_copy(&mut self, n: u64, zeroed: bool) -> Result<&mut [u8]> {
        if !self.overlay.contains_key(&n) {
            let from: &[u8] = match zeroed {
                true => &file::ZERO_BLOCK[..],
                false => self.file.block(n)?,
            };
            let reused = self.bulk.as_mut().and_then(|w| w.free.pop());
            let copy = super::spare::copy_into(reused, from);
            self.overlay.insert(n, copy);
            if let Some(w) = self.bulk.as_mut() {
                w.order.push(n);
            }
        }
        self.overlay
            .get_mut(&n)
            .map(Arc::make_mut)
            .ok_or_else(|| Error::corrupt(format!("block {n} vanished from the bulk write set")))
    }

    /// Writes the private copies back in the order they were first
    /// changed, adjacent blocks in one `pwrite`, and drops them. A failure
    /// gives the bulk write up ([`Pager::abort_bulk`]: the tables count what
    /// did not reach the file).
    pub fn flush_bulk(&mut self) -> Result<()> {
        let Some(w) = self.bulk.as_mut() else {
            return Ok(());
        };
        w.wrote |= !w.order.is_empty();
        let (order, mut run, mut free) = (
            std::mem::take(&mut w.order),
            std::mem::take(&mut w.run),
            std::mem::take(&mut w.free),
        );
        let mut i = 0;
        // The span written, whose write-back starts now (`writeback.rs`,
        // `EarlyWriteback`): the final sync of a 0.5 M-tag npm load then
        // waits for none of it.
        let (mut lo, mut hi) = (u64::MAX, 0u64);
        let early = self.early.last_round && !self.early.off;
        while i < order.len() {
            let start = order[i];
            run.clear();
            let mut next = start;
            while i < order.len() && order[i] == next {
                match self.overlay.remove(&next) {
                    Some(mut img) => {
                        if self.bulk.as_mut().is_some_and(|w| w.take_unsealed(next)) {
                            BlockMut(Arc::make_mut(&mut img)).seal();
                        }
                        run.extend_from_slice(&img);
                        if Arc::strong_count(&img) == 1 {
                            free.push(img);
                        }
                    }
                    None => {
                        self.abort_bulk();
                        return Err(Error::corrupt(format!(
                            "block {next} vanished from the bulk write set"
                        )));
                    }
                }
                i += 1;
                next += 1;
            }
            let at = start * BLOCK_SIZE as u64;
            if let Err(e) = self
                .tick()
                .and_then(|_| self.file.write_blocks_at(at, &run))
            {
                self.abort_bulk();
                return Err(e);
            }
            // Map the run now: a FIND's first read of each page would
            // otherwise fault (5 M tags: FIND by object p50 1.15 µs
            // without, 0.82 µs with).
            self.file.populate(at, run.len() as u64);
            lo = lo.min(at);
            hi = hi.max(at + run.len() as u64);
            if early && !self.early.mark(start, next) {
                self.early.off = true;
            }
            for b in start..next {
                self.mark_verified(b);
            }
            // Written whole, so backed: their next writes (a durable
            // INSERT's, or the map's) need no `fallocate` first.
            self.mark_reserved(start, next - start);
        }
        if early && !self.early.off && lo < hi {
            self.file.start_writeback(lo, hi - lo);
        }
        if let Some(w) = self.bulk.as_mut() {
            (w.run, w.free) = (run, free);
        }
        Ok(())
    }

    /// True while no write-back of the bulk write in progress was
    /// attempted: the store file holds nothing of it.
    pub fn bulk_wrote_nothing(&self) -> bool {
        self.bulk.as_ref().is_some_and(|w| !w.wrote)
    }

    /// Gives up a bulk write that failed: its private copies are dropped
    /// (reads see the file, as the reopen will) and the handle is poisoned.
    pub fn abort_bulk(&mut self) {
        self.overlay.clear();
        self.bulk = None;
        self.poisoned = true;
    }

    /// Ends a bulk write: writes back what is left and goes back to the map.
    pub fn end_bulk(&mut self) -> Result<()> {
        let r = self.flush_bulk();
        self.bulk = None;
        self.early.end_round();
        r
    }
}

#[cfg(test)]
mod tests {
    use super::EarlyWriteback;

    #[test]
    fn a_block_written_back_early_by_an_earlier_round_is_seen() {
        let mut e = EarlyWriteback::default();
        assert!(e.mark(0, 70), "nothing was written back yet");
        assert!(e.mark(69, 200), "a round may write its own blocks twice");
        e.end_round();
        assert!(e.mark(300, 301), "block 300 was not written back");
        assert!(!e.mark(199, 201), "block 199 was, by the round before");
        e.synced();
        assert!(e.mark(0, 201), "a sync forgets what was written back");
    }
}
