//! Durability: the modes, block copies for the journaled modes, commits and checkpoints.

use super::group::{Group, Staged, Syncer};
use super::journal::Change;
use super::Pager;
use crate::error::{Error, Result};
use crate::format::superblock::PRIMARY_BASE;
use crate::format::{delta, zero_runs};
use crate::format::{BlockRef, BLOCK_SIZE};
use std::collections::hash_map::Entry;
use std::sync::Arc;

/// When changes become durable (survive a power cut).
///
/// A crash of the process (`kill -9`) never tears a tag: the next open
/// completes or removes the interrupted one. With `Immediate` and `None`
/// every change that returned survives it; with `OnSync` changes wait in
/// memory for `Store::sync`, so a crash loses those not yet synced. The
/// modes differ on power loss.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Durability {
    /// Each INSERT/DELETE call is durable when it returns: its block changes are
    /// journaled and fsynced first (SQLite `synchronous=FULL`, redb `Immediate`).
    Immediate,
    /// Changes are journaled in memory and become durable together at the next
    /// `Store::sync` (group commit: many writers, one flush). Changes not yet
    /// synced are lost on a crash of the process or a power cut, wholly,
    /// tag by tag.
    OnSync,
    /// Left to the OS: changes go straight to the mapped file and are durable
    /// after `Store::sync` or close (SQLite `synchronous=OFF`, redb `None`).
    /// A power cut may lose or tear recent changes; checksums report torn blocks.
    #[default]
    None,
}

/// A durability point, reported to the test hook set by `Store::set_sync_hook`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SyncPoint {
    /// A journal commit was fsynced (its changes are not yet in the store file).
    JournalSynced,
    /// A checkpoint copied the private copies into the mapped store file
    /// (not yet fsynced).
    Applied,
    /// The store file was fsynced (a checkpoint).
    StoreSynced,
    /// The strings file of long tags was fsynced (before the commit that
    /// could make a slot naming one of its strings durable).
    StringsSynced,
}

/// Test hook called at each durability point.
pub type SyncHook = Box<dyn FnMut(SyncPoint) + Send + Sync>;

/// Smallest journal round past which a stage checkpoints (copies the
/// private copies into the store file, flushes it and empties the journal).
const ROUND_MIN: u64 = 64 << 20;

/// Largest journal round past which a stage checkpoints.
const ROUND_MAX: u64 = 256 << 20;

/// Journal round, per byte of store file, past which a stage checkpoints:
/// a checkpoint writes each block changed in the round twice, so a round
/// four times the file's size keeps those writes to at most half the
/// round's own bytes.
const ROUND_PER_STORE_BYTE: u64 = 4;

/// Private copies, in bytes, past which a stage checkpoints (256 MiB): a
/// smaller bound made durable batches over a 500,000-tag store checkpoint
/// every few batches, each time writing every block touched twice.
const OVERLAY_MAX: u64 = 256 << 20;

/// Private copies per byte of round when a test sets the round.
const OVERLAY_PER_JOURNAL: u64 = 4;

/// The journal round past which a stage checkpoints, for a store file of
/// `file_len` bytes.
pub(super) fn round_limit(file_len: u64) -> u64 {
    file_len
        .saturating_mul(ROUND_PER_STORE_BYTE)
        .clamp(ROUND_MIN, ROUND_MAX)
}

/// Images per commit of a checkpoint (at most 16 MiB before encoding).
const CHECKPOINT_COMMIT_BLOCKS: usize = 4096;
/// Bytes of operations and delta of one block in one stage past which the
/// stage checks whether the block's zero-run image is smaller.
const SPARSE_CHECK: usize = 1024;

impl Pager {
    /// The durability mode.
    pub fn durability(&self) -> Durability {
        self.durability
    }

    /// Changes the durability mode; pending changes are made durable first.
    pub fn set_durability(&mut self, durability: Durability) -> Result<()> {
        if self.durability == durability {
            return Ok(());
        }
        self.commit()?;
        self.checkpoint()?;
        if durability != Durability::None && self.writable() {
            // A journal that cannot be made refuses the mode now, not at
            // the first write; and the first commit finds it ready.
            self.group.prepare_journal()?;
        }
        self.durability = durability;
        self.ahead_gen += 1;
        Ok(())
    }

    /// Sets the callback run at each durability point (crash-simulation tests).
    #[cfg(feature = "test-hooks")]
    pub fn set_sync_hook(&mut self, hook: Option<SyncHook>) {
        self.group.set_hook(hook);
    }

    /// Sets the journal round past which a commit checkpoints, instead of
    /// the one the store file's size gives (tests).
    #[cfg(feature = "test-hooks")]
    pub fn set_checkpoint_bytes(&mut self, bytes: u64) {
        self.group.set_checkpoint_bytes(bytes);
    }

    /// Reports a durability point of a file beside the pager's (the
    /// strings file) to the test hook.
    pub fn sync_point(&self, p: SyncPoint) {
        self.group.hook(p);
    }

    /// The group commit this pager's writers share.
    pub fn group(&self) -> Arc<Group> {
        Arc::clone(&self.group)
    }

    /// Block `n` for writing: the private copy in journaled modes, else the map.
    pub(super) fn block_for_write(&mut self, n: u64) -> Result<&mut [u8]> {
        if let Some(w) = self.bulk.as_mut() {
            w.take_unsealed(n);
        }
        self.block_for_write_lines(n, u64::MAX)
    }

    /// [`Pager::block_for_write`] for a change confined to the 64-byte
    /// lines set in `lines` (the caller writes nowhere else).
    pub(super) fn block_for_write_lines(&mut self, n: u64, lines: u64) -> Result<&mut [u8]> {
        if self.durability == Durability::None {
            if self.bulk.is_some() {
                return self.bulk_copy(n, false);
            }
            return self.file.block_mut(n);
        }
        if self.memory_only {
            return self.memory_copy(n);
        }
        let image_next = self.needs_image(n);
        let (copy, p) = self.copy_for_write(n)?;
        // Lines about to be written for the first time since the last
        // stage keep their old bytes, so the stage sends only the words
        // that changed (a block whose next entry is an image needs none).
        p.before_write(copy, lines, image_next);
        // Staging copies what it sends, so the copy is never shared here.
        Ok(Arc::make_mut(copy))
    }

    /// [`Pager::block_for_write_lines`] for a slot put or clear (on a
    /// written block, confined to `lines`), with where to record it as a
    /// slot operation (`format::slot_ops`) when the next stage can send it
    /// so: in the journaled modes, while no other write to the block awaits
    /// that stage (`None`: the lines are tracked as for any write).
    pub(super) fn block_for_slot_op(
        &mut self,
        n: u64,
        lines: u64,
    ) -> Result<(&mut [u8], Option<&mut Vec<u8>>)> {
        if self.durability == Durability::None || self.memory_only {
            return Ok((self.block_for_write_lines(n, lines)?, None));
        }
        let image_next = self.needs_image(n);
        let (copy, p) = self.copy_for_write(n)?;
        if p.takes_ops(image_next) && !BlockRef(copy).is_unwritten() {
            if p.ops.len() < OPS_MAX {
                return Ok((Arc::make_mut(copy), Some(&mut p.ops)));
            }
            p.send_whole();
        }
        p.before_write(copy, lines, image_next);
        Ok((Arc::make_mut(copy), None))
    }

    /// Block `n`'s private copy (made on its first write since the last
    /// checkpoint) and its record for the next stage.
    fn copy_for_write(&mut self, n: u64) -> Result<(&mut Arc<[u8]>, &mut Pending)> {
        let copy = match self.overlay.entry(n) {
            Entry::Occupied(e) => e.into_mut(),
            Entry::Vacant(v) => {
                let zeroed = !self.zeroed.is_empty() && self.zeroed.remove(&n);
                let src = if zeroed {
                    &super::file::ZERO_BLOCK[..]
                } else {
                    self.file.block(n)?
                };
                let copy = super::spare::copy_into(self.spare.take(), src);
                if zeroed {
                    self.pending.insert(n, Pending::zeros());
                }
                v.insert(copy)
            }
        };
        Ok((copy, self.pending.entry(n).or_default()))
    }

    /// Queues every block changed since the last stage for the journal
    /// (journaled modes); the number to wait for, `None` when nothing changed.
    /// Checkpoints once the journal's round or the private copies pass
    /// the checkpoint size.
    pub fn stage(&mut self) -> Result<Option<u64>> {
        if self.durability == Durability::None {
            return Ok(None);
        }
        if self.poisoned || self.group.failed() {
            // A failed write left half an operation in the private copies:
            // never journal it. Reopening recovers the last durable state.
            self.pending.clear();
            self.poisoned = true;
            return Err(Error::Poisoned);
        }
        if self.pending.is_empty() {
            // Nothing new: wait for what is staged already (another
            // thread's stage may hold this caller's changes).
            return Ok(Some(self.group.last_staged()));
        }
        let stage = self.stage_pending().inspect_err(|_| {
            // Changes left the pending map without reaching the queue: the
            // handle is unusable; reopening replays what is durable.
            self.fail();
        })?;
        // The helper backs the blocks asked for while this commit is written.
        self.file.send_ahead();
        let (round, overlay) = match self.group.checkpoint_bytes() {
            Some(bytes) => (bytes, bytes.saturating_mul(OVERLAY_PER_JOURNAL)),
            None => (round_limit(self.file.len()), OVERLAY_MAX),
        };
        if self.group.journal_len() > round
            || self.overlay.len() as u64 * BLOCK_SIZE as u64 > overlay
        {
            self.checkpoint()?;
        }
        Ok(Some(stage))
    }

    /// True when block `n`'s next entry in the round must be a whole image:
    /// the superblock always, and a data block whose store-file copy may
    /// not be its version at the last checkpoint (cut off the file since)
    /// until the round holds an image of it.
    fn needs_image(&self, n: u64) -> bool {
        n < PRIMARY_BASE || (n >= self.cut_floor && !self.imaged.contains(&n))
    }

    /// Queues the blocks written since their last stage as one stage:
    /// each as its slot operations, then the words that changed after
    /// them; or whole where it needs an image, or where its image is
    /// smaller than those (a block of few tags written nearly whole).
    fn stage_pending(&mut self) -> Result<u64> {
        let mut blocks = Vec::with_capacity(self.pending.len());
        let pending: Vec<(u64, Pending)> = self.pending.drain().collect();
        for (n, mut p) in pending {
            let Some(img) = self.overlay.get(&n) else {
                continue;
            };
            let image = if self.needs_image(n) {
                true
            } else {
                let ops = std::mem::take(&mut p.ops);
                let delta = p.delta(img);
                let written = ops.len() + delta.as_ref().map_or(0, Vec::len);
                // Mostly zeros, and written nearly whole: a block a split
                // emptied and began to refill is a few hundred bytes as an
                // image, where its written lines are the whole 4 KB.
                let sparse = written > SPARSE_CHECK && zero_runs::encoded_len(img) < written;
                if !sparse {
                    if !ops.is_empty() {
                        blocks.push(Staged::Ops(n, ops));
                    }
                    if let Some(d) = delta {
                        blocks.push(Staged::Delta(n, d));
                    }
                }
                sparse
            };
            if image {
                if n >= PRIMARY_BASE {
                    self.imaged.insert(n);
                }
                blocks.push(Staged::Image(n, Box::from(&img[..])));
            }
        }
        Ok(self.group.stage(blocks))
    }

    /// Makes the handle unusable after a failure that left the store file,
    /// the journal or the private copies out of step: nothing more is
    /// staged or committed, and a reopen replays what is durable.
    fn fail(&mut self) {
        self.poisoned = true;
        self.group.set_failed();
    }

    /// Makes every change so far durable: journals the changed blocks
    /// (journaled modes), or flushes the file.
    pub fn commit(&mut self) -> Result<()> {
        if self.durability == Durability::None {
            self.file.flush()?;
            self.early.synced();
            self.group.hook(SyncPoint::StoreSynced);
            return Ok(());
        }
        if let Some(stage) = self.stage()? {
            if let Err(e) = self.group.wait(stage) {
                // The in-memory tables already count these changes; only a
                // reopen (which replays the durable journal) makes them agree.
                self.poisoned = true;
                return Err(e);
            }
        }
        Ok(())
    }

    /// Moves every private copy into the store file and empties the
    /// journal: commits what is changed, journals a whole image of every
    /// private copy (a power cut tearing the copy-in is repaired from
    /// them), copies them in, fsyncs the store file, starts a new round.
    pub fn checkpoint(&mut self) -> Result<()> {
        let group = Arc::clone(&self.group);
        if self.durability != Durability::None && !self.pending.is_empty() {
            self.stage_pending().inspect_err(|_| self.fail())?;
        }
        // Every stage into the round being closed (other threads' too: none
        // can stage while this one holds the store's lock).
        let last = group.last_staged();
        if last > 0 {
            group.wait(last).inspect_err(|_| self.poisoned = true)?;
        }
        let mut s = group.lock_sync();
        if let Err(e) = self.checkpoint_locked(&group, &mut s) {
            drop(s);
            self.fail();
            return Err(e);
        }
        Ok(())
    }

    fn checkpoint_locked(&mut self, group: &Group, s: &mut Syncer) -> Result<()> {
        if !self.overlay.is_empty() && self.durability != Durability::None {
            #[cfg(debug_assertions)]
            self.check_round_rebuilds_the_copies()?;
            let blocks = self.memory_blocks();
            let file_blocks = self.file.len() / BLOCK_SIZE as u64;
            if let Some(n) = blocks.iter().find(|n| **n >= file_blocks) {
                return Err(Error::corrupt(format!(
                    "block {n} changed in memory lies past the store file's end ({file_blocks} blocks)"
                )));
            }
            // Several commits of bounded size (images need no order): one
            // commit's buffer stays small and its length fits its header.
            for chunk in blocks.chunks(CHECKPOINT_COMMIT_BLOCKS) {
                let images: Vec<Change<'_>> = chunk
                    .iter()
                    .filter_map(|n| Some(Change::Image(*n, self.overlay.get(n)?)))
                    .collect();
                group.append(s, images)?;
            }
            group.note_len(s);
            group.hook(SyncPoint::JournalSynced);
            // In order, each chunk's write-back started as soon as it is
            // copied (`writeback.rs`): the fsync below finds most written.
            for chunk in blocks.chunks(CHECKPOINT_COMMIT_BLOCKS) {
                for &n in chunk {
                    if let Some(img) = self.overlay.get(&n) {
                        self.file.block_mut(n)?.copy_from_slice(img);
                        self.mark_verified(n);
                    }
                }
                if let (Some(&lo), Some(&hi)) = (chunk.first(), chunk.last()) {
                    let bs = BLOCK_SIZE as u64;
                    self.file.start_writeback(lo * bs, (hi + 1 - lo) * bs);
                }
            }
            group.hook(SyncPoint::Applied);
        }
        self.file.flush()?;
        group.hook(SyncPoint::StoreSynced);
        if let Some(j) = s.journal.as_mut() {
            j.reset()?;
        }
        group.note_len(s);
        if self.durability != Durability::None {
            for (_, buf) in self.overlay.drain() {
                self.spare.give(buf);
            }
            self.pending.clear();
        }
        self.imaged.clear();
        self.zeroed.clear();
        self.cut_floor = u64::MAX;
        Ok(())
    }

    /// Debug builds: replaying the round's journal onto the store file
    /// gives exactly the private copies (every write stayed inside the
    /// lines its delta sends, and nothing reached the file early).
    #[cfg(debug_assertions)]
    fn check_round_rebuilds_the_copies(&self) -> Result<()> {
        let Some(mut j) =
            super::journal::Journal::open_read_only(self.group.store_path(), self.group.seed())?
        else {
            return Ok(());
        };
        let file = &self.file;
        let round = j.read_round(&|n| super::replay::file_base(file, n))?;
        for (n, img) in &round.images {
            if let Some(copy) = self.overlay.get(n) {
                debug_assert!(
                    img[..] == copy[..],
                    "block {n}: the journal's round does not rebuild its private copy"
                );
            }
        }
        // A copy the round never names must still be the file's copy.
        for (n, copy) in &self.overlay {
            if !round.images.contains_key(n) {
                let base = super::replay::file_base(file, *n)?;
                debug_assert!(
                    base[..] == copy[..],
                    "block {n}: changed in memory but never journaled"
                );
            }
        }
        Ok(())
    }

    /// After a clean close: the store file holds everything, so the journal goes.
    pub fn drop_journal(&mut self) -> Result<()> {
        let group = Arc::clone(&self.group);
        let mut s = group.lock_sync();
        if let Some(mut j) = s.journal.take() {
            j.reset()?;
            j.remove()?;
        }
        self.imaged.clear();
        group.note_len(&s);
        Ok(())
    }
}

/// Lines an overlay block may hold for its next stage's delta.
const SAVED_LINES: usize = 8;

/// Bytes of slot operations a block may gather for one stage: past a
/// block's size (a tag put and cleared again and again between two syncs)
/// the block is sent whole instead.
const OPS_MAX: usize = crate::format::BLOCK_SIZE;

/// A block written since its last stage: the slot operations done first
/// (while nothing else was written), then the 64-byte lines written (one
/// bit each) and the bytes they held after those operations, as far as
/// known.
#[derive(Clone)]
pub(super) struct Pending {
    /// Slot puts and clears (`format::slot_ops`), all before any line below.
    ops: Vec<u8>,
    lines: u64,
    /// Every line held zeros at the last stage (a block never written).
    zeros: bool,
    /// More lines were written than `saved` holds: send them whole.
    overflow: bool,
    n: u8,
    saved: [(u8, [u8; 64]); SAVED_LINES],
}

impl Default for Pending {
    fn default() -> Self {
        Pending {
            ops: Vec::new(),
            lines: 0,
            zeros: false,
            overflow: false,
            n: 0,
            saved: [(0, [0; 64]); SAVED_LINES],
        }
    }
}

impl Pending {
    /// A block whose copy was made from zeros.
    fn zeros() -> Self {
        Pending {
            zeros: true,
            ..Pending::default()
        }
    }

    /// True when a slot operation may be recorded as one: no line is
    /// tracked yet (the operations come first) and the next entry is no image.
    fn takes_ops(&self, image_next: bool) -> bool {
        self.lines == 0 && !self.zeros && !self.overflow && !image_next
    }

    /// Sends the block whole at the next stage, in place of the operations
    /// gathered (every line written, as it will be then).
    fn send_whole(&mut self) {
        self.ops = Vec::new();
        self.lines = u64::MAX;
        self.overflow = true;
    }

    /// Notes that `lines` of `copy` are about to be written, keeping the
    /// old bytes of those written for the first time since the last stage
    /// (none when the next entry is a whole image anyway).
    fn before_write(&mut self, copy: &[u8], lines: u64, image_next: bool) {
        let mut new = lines & !self.lines;
        self.lines |= lines;
        if image_next {
            // Sent whole, or (should the image be sent meanwhile) as the lines.
            self.overflow = true;
        }
        if self.zeros || self.overflow {
            return;
        }
        let (chunks, _) = copy.as_chunks::<64>();
        while new != 0 {
            let l = new.trailing_zeros() as usize;
            new &= new - 1;
            match (self.saved.get_mut(self.n as usize), chunks.get(l)) {
                (Some(slot), Some(c)) => {
                    *slot = (l as u8, *c);
                    self.n += 1;
                }
                _ => {
                    self.overflow = true;
                    return;
                }
            }
        }
    }

    /// The delta that turns the block as last staged into `img`; `None`
    /// when nothing was written.
    fn delta(mut self, img: &[u8]) -> Option<Vec<u8>> {
        if self.lines == 0 {
            return None;
        }
        let mut d = Vec::with_capacity(self.lines.count_ones() as usize * 64 + 16);
        if self.zeros {
            delta::encode_lines(&super::file::ZERO_BLOCK, img, self.lines, &mut d);
        } else if self.overflow {
            delta::encode_written(img, self.lines, &mut d);
        } else {
            let saved = &mut self.saved[..self.n as usize];
            saved.sort_unstable_by_key(|x| x.0);
            delta::encode_saved(img, saved, &mut d);
        }
        Some(d)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_round_follows_the_store_file_between_its_bounds() {
        assert_eq!(round_limit(0), ROUND_MIN);
        assert_eq!(round_limit(10 << 20), ROUND_MIN);
        assert_eq!(round_limit(40 << 20), 160 << 20);
        assert_eq!(round_limit(1 << 30), ROUND_MAX);
        assert_eq!(round_limit(u64::MAX), ROUND_MAX);
    }
}
