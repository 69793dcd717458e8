//! Disk space before a first write: a full disk is an error, never a SIGBUS on a mapped write.

use super::{Durability, Pager};
use crate::error::Result;
use crate::format::{BlockAt, BLOCK_SIZE};

impl Pager {
    /// Marks `n` blocks from `first` as backed (they hold data already).
    pub fn mark_reserved(&mut self, first: u64, n: u64) {
        for x in first..first + n {
            self.reserved.insert(x);
        }
    }

    /// True if this handle backed block `b` with disk space (unit tests).
    #[cfg(test)]
    pub fn was_backed(&self, b: u64) -> bool {
        self.backed.contains(&b)
    }

    /// Blocks marked reserved that this handle never backed (unit tests).
    #[cfg(test)]
    pub fn reserved_unbacked(&self) -> Vec<u64> {
        self.reserved
            .iter()
            .filter(|b| !self.backed.contains(b))
            .collect()
    }

    /// Backs block `b` with disk space before anything reads or writes it
    /// through the map, so a full disk is an error here and never a SIGBUS.
    /// `fresh`: the block (or, in the secondary partition, its whole bucket)
    /// is known never written, so it may be zero-filled instead.
    pub fn ensure_reserved(&mut self, b: u64, fresh: bool) -> Result<()> {
        if self.memory_only {
            // Nothing reaches the disk.
            self.mark_reserved(b, 1);
            return Ok(());
        }
        if self.is_reserved(b) {
            return Ok(());
        }
        self.take_backed_ahead();
        if self.is_reserved(b) {
            return Ok(());
        }
        // Back only the block asked for: a bucket's later blocks may never
        // be written (a secondary bucket holding a few tags that overflowed
        // takes one block of disk, not sixteen). A fresh secondary bucket's
        // later blocks are remembered as never written, so they too get a
        // write of zeros when their turn comes. A secondary block of unknown
        // state backs its whole bucket (one call; nothing is changed).
        let fresh = fresh || self.fresh.remove(&b);
        let (first, n) = match self.geo.block_at(b) {
            BlockAt::Secondary { i: 0, .. } if fresh => {
                let per = self.geo.blocks_per_secondary as u64;
                self.fresh.extend(b + 1..b + per);
                (b, 1)
            }
            BlockAt::Secondary { i, .. } if !fresh => {
                (b - i as u64, self.geo.blocks_per_secondary as u64)
            }
            _ => (b, 1),
        };
        if fresh {
            self.back_fresh(first, n)
        } else {
            let (off, len) = (first * BLOCK_SIZE as u64, n * BLOCK_SIZE as u64);
            self.file.reserve(off, len)?;
            self.backed_now(first, n);
            Ok(())
        }
    }

    /// Backs the never-written blocks from `first` to `first + n` that are
    /// not backed yet, one call per run of them (a split's new primary
    /// bucket: one call instead of one per block).
    pub fn ensure_reserved_fresh_run(&mut self, first: u64, n: u64) -> Result<()> {
        if self.memory_only {
            self.mark_reserved(first, n);
            return Ok(());
        }
        let end = first + n;
        let mut b = first;
        while b < end {
            if self.is_reserved(b) {
                b += 1;
                continue;
            }
            let start = b;
            while b < end && !self.is_reserved(b) {
                b += 1;
            }
            self.back_fresh(start, b - start)?;
        }
        Ok(())
    }

    /// Asks for block `b`, known never written (or zeroed), to be backed
    /// ahead of its first write, off this thread (journaled modes; see
    /// `ahead.rs`).
    pub fn back_ahead(&mut self, b: u64) {
        if self.durability != Durability::None
            && self.bulk.is_none()
            && !self.memory_only
            && !self.is_reserved(b)
        {
            self.file.back_ahead(self.ahead_gen, b);
        }
    }

    /// [`Pager::back_ahead`] for block `b` of a secondary bucket, if it is
    /// known never written.
    pub fn back_ahead_if_fresh(&mut self, b: u64) {
        if self.fresh.contains(&b) {
            self.back_ahead(b);
        }
    }

    /// Takes the blocks the helper backed as this handle's: never written,
    /// so their copies start as zeros, as [`Pager::back_fresh`] would
    /// leave them. A block backed meanwhile by this thread (and maybe
    /// written since) is left alone.
    fn take_backed_ahead(&mut self) {
        if self.durability == Durability::None {
            return;
        }
        for (gen, b) in self.file.backed_ahead() {
            if gen == self.ahead_gen && !self.is_reserved(b) {
                self.fresh.remove(&b);
                self.zeroed.insert(b);
                self.backed_now(b, 1);
            }
        }
    }

    /// Marks `n` blocks from `first` as backed by this handle.
    fn backed_now(&mut self, first: u64, n: u64) {
        #[cfg(test)]
        {
            self.backed.extend(first..first + n);
            if let Some(late) = self.moving.as_mut() {
                late.extend(first..first + n);
            }
        }
        self.mark_reserved(first, n);
    }

    fn is_reserved(&self, b: u64) -> bool {
        self.reserved.contains(b)
    }

    /// Backs `n` never-written blocks from `first` with disk space.
    fn back_fresh(&mut self, first: u64, n: u64) -> Result<()> {
        let (off, len) = (first * BLOCK_SIZE as u64, n * BLOCK_SIZE as u64);
        if self.bulk.is_some() {
            // A bulk write backs them with its own positioned write.
            for x in first..first + n {
                self.bulk_copy(x, true)?;
            }
        } else if self.durability != Durability::None {
            // Journaled modes write nothing into the store file before a
            // checkpoint: the blocks are allocated (zeros, never written, so
            // a power cut cannot garble them: a safe base for the round's
            // deltas), and their private copies start as zeros without a
            // read through the map.
            self.file.reserve(off, len)?;
            self.zeroed.extend(first..first + n);
        } else {
            // A write of zeros costs less than fallocate plus the map's first
            // read of an unwritten extent (a major fault that zero-fills the
            // page): together those were a third of a bulk load.
            self.file.zero_fill(off, len)?;
        }
        self.backed_now(first, n);
        Ok(())
    }
}
