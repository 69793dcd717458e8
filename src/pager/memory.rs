//! Read-only recovery's writes: a split a crash interrupted in mapped mode
//! is finished in the private copies only, never in the file.
//!
//! The engine's usual write path runs unchanged (the split's redo), with
//! the pager in a journaled mode so that every write lands in a private
//! copy (the overlay reads see first), and with nothing else a write would
//! do: no disk space backed, no journal, no growth of the file (blocks past
//! its end exist in memory, as zeros until written).

use super::{Durability, Pager};
use crate::error::Result;
use crate::format::{BLOCK_SIZE, INTENT_BLOCK, INTENT_LEN};

impl Pager {
    /// Sends every later write to private copies only (read-only recovery).
    pub fn begin_memory_writes(&mut self) {
        self.memory_only = true;
        self.durability = Durability::OnSync;
        if self.virtual_blocks == 0 {
            self.virtual_blocks = self.file.len() / BLOCK_SIZE as u64;
        }
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
            let src = match n >= self.file.len() / BLOCK_SIZE as u64 {
                true => &super::file::ZERO_BLOCK[..],
                false => self.file.block(n)?,
            };
            self.overlay.insert(n, src.into());
        }
        match self.overlay.get_mut(&n) {
            Some(copy) => Ok(std::sync::Arc::make_mut(copy)),
            None => Err(crate::error::Error::corrupt(format!(
                "block {n}: its private copy is gone"
            ))),
        }
    }
}
