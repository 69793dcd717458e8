//! Block edits: the intent record, slot puts and clears, the superblock.

use super::commit::Durability;
use super::Pager;
use crate::error::Result;
use crate::format::block::slot_lines;
use crate::format::slot_ops;
use crate::format::{
    BlockMut, Intent, SlotAddr, SlotBytes, Superblock, BLOCK_SIZE, INTENT_BLOCK, INTENT_LEN,
    KIND_PRIMARY, SUPERBLOCK_BLOCK,
};

/// What a block written for the first time says about itself.
#[derive(Clone, Copy, Debug)]
pub struct Identity {
    /// Block kind (primary or secondary).
    pub kind: u8,
    /// Owning primary bucket.
    pub owner: u32,
    /// Position in the owner's chain (0 in the primary bucket).
    pub ordinal: u32,
}

impl Identity {
    /// A block of primary bucket `g`.
    pub fn primary(g: u32) -> Identity {
        Identity {
            kind: KIND_PRIMARY,
            owner: g,
            ordinal: 0,
        }
    }
}

impl Pager {
    /// Records the operation in flight (mapped mode only: the journaled
    /// modes never let a half-done operation reach the store file).
    pub fn write_intent(&mut self, intent: &Intent) -> Result<()> {
        self.tick()?;
        if self.durability != Durability::None {
            return Ok(());
        }
        let img = intent.encode();
        let blk = self.file.block_mut(INTENT_BLOCK)?;
        blk[..INTENT_LEN].copy_from_slice(&img);
        Ok(())
    }

    /// Clears the intent record once both halves are written.
    pub fn clear_intent(&mut self) -> Result<()> {
        self.tick()?;
        if self.durability != Durability::None {
            return Ok(());
        }
        let blk = self.file.block_mut(INTENT_BLOCK)?;
        blk[..INTENT_LEN].fill(0);
        Ok(())
    }

    /// Puts an encoded tag into slot `addr`; a block written for the first
    /// time takes `id`. The block was read (and its CRC checked) before.
    pub fn put_slot(
        &mut self,
        addr: SlotAddr,
        id: Identity,
        slot: &SlotBytes,
        kfp: u16,
        tfp: u8,
    ) -> Result<()> {
        self.tick()?;
        let i = addr.slot as usize;
        // In a bulk write, a block first written by it is sealed once on
        // its way to the file (`bulk.rs`), not at each put.
        let bulk = self.bulk.as_ref().map(|w| w.is_unsealed(addr.block));
        let later = self.note_deferred(addr.block);
        let (raw, ops) = self.block_for_slot_op(addr.block, slot_lines(i))?;
        let mut b = BlockMut(raw);
        let mut defer = false;
        if b.as_ref().is_unwritten() {
            b.set_identity(id.kind, id.owner, id.ordinal);
            b.put(i, slot, kfp, tfp);
            match bulk {
                Some(_) => defer = true,
                None if later => {}
                None => b.seal(),
            }
        } else if bulk == Some(true) || later {
            b.put(i, slot, kfp, tfp);
        } else {
            b.put_resealed(i, slot, kfp, tfp);
            if let Some(ops) = ops {
                slot_ops::encode_put(ops, i, b.as_ref().stored_crc(), slot, kfp, tfp);
            }
        }
        if let Some(w) = self.bulk.as_mut().filter(|_| defer) {
            w.defer_seal(addr.block);
        }
        self.mark_verified(addr.block);
        Ok(())
    }

    /// Writes the whole image of block `n`, which was never written and is
    /// backed already (`ensure_reserved`): a positioned write in mapped
    /// mode (no page fault, the CRC computed once), the private copy in
    /// the journaled modes.
    pub fn write_new_block(&mut self, n: u64, img: &[u8]) -> Result<()> {
        self.tick()?;
        if self.durability == Durability::None && self.bulk.is_none() {
            self.file.write_block(n, img)?;
        } else {
            self.block_for_write(n)?.copy_from_slice(img);
        }
        self.mark_verified(n);
        Ok(())
    }

    /// Empties slot `addr` (its block was read, and its CRC checked, before).
    pub fn clear_slot(&mut self, addr: SlotAddr) -> Result<()> {
        self.tick()?;
        let i = addr.slot as usize;
        let unsealed = self
            .bulk
            .as_ref()
            .is_some_and(|w| w.is_unsealed(addr.block))
            || self.note_deferred(addr.block);
        let (raw, ops) = self.block_for_slot_op(addr.block, slot_lines(i))?;
        let mut b = BlockMut(raw);
        match unsealed {
            true => b.clear(i),
            false => b.clear_resealed(i),
        }
        if let Some(ops) = ops {
            slot_ops::encode_clear(ops, i, b.as_ref().stored_crc());
        }
        Ok(())
    }

    /// From here until [`Pager::seal_deferred`], slot puts and clears in
    /// mapped mode (outside a bulk write) leave their block's CRC stale,
    /// and each block is sealed once at the end: a split's moves resealed
    /// a block at every slot. A crash in between leaves the split's intent
    /// record, and the open repairs every block whose CRC is stale
    /// (`engine/recovery.rs`, `repair_split`).
    pub fn defer_seals(&mut self) {
        if self.durability == Durability::None && self.bulk.is_none() {
            self.deferred = Some(Vec::new());
        }
    }

    /// Seals once each block whose seal was deferred since
    /// [`Pager::defer_seals`], and defers no more.
    pub fn seal_deferred(&mut self) -> Result<()> {
        let Some(mut blocks) = self.deferred.take() else {
            return Ok(());
        };
        blocks.sort_unstable();
        blocks.dedup();
        for n in blocks {
            self.tick()?;
            let mut b = BlockMut(self.file.block_mut(n)?);
            // A block emptied and zeroed since stays all zeros.
            if !b.as_ref().is_unwritten() {
                b.seal();
            }
        }
        Ok(())
    }

    /// True (and block `n` noted) while seals are deferred.
    fn note_deferred(&mut self, n: u64) -> bool {
        match self.deferred.as_mut() {
            Some(d) => {
                d.push(n);
                true
            }
            None => false,
        }
    }

    /// Zeroes block `n` (a secondary bucket given back to the free list).
    pub fn zero_block(&mut self, n: u64) -> Result<()> {
        self.tick()?;
        self.block_for_write(n)?.fill(0);
        self.mark_verified(n);
        Ok(())
    }

    /// Writes the superblock as part of the changes in flight: through the
    /// map without a flush (mapped mode: a process crash keeps it, and the
    /// intent record says what to redo), or into the next journal commit.
    pub fn log_superblock(&mut self, sb: &Superblock) -> Result<()> {
        self.tick()?;
        let img = sb.encode();
        self.block_for_write(SUPERBLOCK_BLOCK)?
            .copy_from_slice(&img);
        Ok(())
    }

    /// Writes the superblock and flushes the file.
    pub fn write_superblock(&mut self, sb: &Superblock) -> Result<()> {
        let img = sb.encode();
        self.file.block_mut(SUPERBLOCK_BLOCK)?.copy_from_slice(&img);
        self.file.flush_range(0, BLOCK_SIZE)?;
        self.file.flush()
    }
}
