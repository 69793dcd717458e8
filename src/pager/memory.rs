//! Read-only recovery's writes: a split or a bulk round a crash
//! interrupted in mapped mode is finished in private copies only, never in
//! the file.
//!
//! The engine's usual redo runs unchanged, with the pager in a journaled
//! mode so that every write lands in a private copy (the overlay reads see
//! first), and with nothing else a write would do: no disk space backed,
//! no journal, no growth of the file (blocks past its end exist in memory,
//! as zeros until written), at most [`MEMORY_BLOCKS_MAX`] copies.

use super::{Durability, Pager};
use crate::error::{Error, Result};
use crate::format::{BLOCK_SIZE, INTENT_BLOCK, INTENT_LEN};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// Private copies a memory-only redo may make (1 GiB): past it the open
/// is refused rather than risk the machine's memory (a bulk round's redo
/// may put the other half of millions of tags into as many blocks).
const MEMORY_BLOCKS_MAX: usize = 262_144;

/// The bound in force ([`MEMORY_BLOCKS_MAX`]; tests lower it).
static MEMORY_BLOCKS: AtomicUsize = AtomicUsize::new(MEMORY_BLOCKS_MAX);

/// Sets the most private copies a read-only open's redo may make, for
/// every open in the process.
#[cfg(feature = "test-hooks")]
pub fn set_memory_redo_max(blocks: usize) {
    MEMORY_BLOCKS.store(blocks, Ordering::Relaxed);
}

impl Pager {
    /// Sends every later write to private copies only (read-only
    /// recovery), for a store whose blocks end at block `end`: what the
    /// file holds past it (a table image, a growth a crash left) reads as
    /// zeros, as a writable open, which cuts the file there, would see it.
    pub fn begin_memory_writes(&mut self, end: u64) {
        self.memory_only = true;
        self.durability = Durability::OnSync;
        let file_blocks = self.file.len() / BLOCK_SIZE as u64;
        self.zero_from = end;
        self.virtual_blocks = self.virtual_blocks.max(file_blocks).max(end);
    }

    /// True once a memory-only write was refused for want of room.
    pub fn memory_full(&self) -> bool {
        self.memory_full
    }

    /// Block `n` reads as zeros: past the store's end, in memory only.
    pub(super) fn reads_zero(&self, n: u64) -> bool {
        n < self.virtual_blocks && n >= self.zeros_from()
    }

    /// Where the blocks that read as zeros start.
    pub(super) fn zeros_from(&self) -> u64 {
        self.zero_from.min(self.file.len() / BLOCK_SIZE as u64)
    }

    /// Ends the writes begun by [`Pager::begin_memory_writes`]: their
    /// copies stay (as the overlay the reads see), with the intent record
    /// shown cleared; nothing is left to journal or write.
    pub fn end_memory_writes(&mut self) -> Result<()> {
        let mut cleared: Vec<u8> = self.raw_block(INTENT_BLOCK)?.to_vec();
        cleared[..INTENT_LEN].fill(0);
        self.overlay.insert(INTENT_BLOCK, cleared.into());
        self.pending.clear();
        self.zeroed.clear();
        self.durability = Durability::None;
        Ok(())
    }

    /// In memory-only writes, grows the blocks that exist to `len` bytes'
    /// worth (never shrinks them); true if it handled the call.
    pub(super) fn memory_set_len(&mut self, len: u64) -> bool {
        if self.memory_only {
            let blocks = len.div_ceil(BLOCK_SIZE as u64);
            self.virtual_blocks = self.virtual_blocks.max(blocks);
        }
        self.memory_only
    }

    /// Block `n`'s private copy for a memory-only write (made from the
    /// file's block, or zeros past its end, on the first), with nothing
    /// kept for a journal: a bulk round's redo may change many blocks.
    pub(super) fn memory_copy(&mut self, n: u64) -> Result<&mut [u8]> {
        if !self.overlay.contains_key(&n) {
            let most = MEMORY_BLOCKS.load(Ordering::Relaxed);
            if self.overlay.len() >= most {
                self.memory_full = true;
                return Err(Error::InvalidArgument(format!(
                    "finishing the interrupted operation in memory would copy more than {most} blocks"
                )));
            }
            let src = match self.reads_zero(n) || n >= self.file.len() / BLOCK_SIZE as u64 {
                true => &super::file::ZERO_BLOCK[..],
                false => self.file.block(n)?,
            };
            self.overlay.insert(n, src.into());
        }
        match self.overlay.get_mut(&n) {
            Some(copy) => Ok(Arc::make_mut(copy)),
            None => Err(Error::corrupt(format!(
                "block {n}: its private copy is gone"
            ))),
        }
    }
}
