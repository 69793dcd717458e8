//! Durability: the modes, block copies for the journaled modes, commits and checkpoints.

use super::group::{Blocks, Group, Staged};
use super::Pager;
use crate::error::{Error, Result};
use crate::format::delta;
use crate::format::superblock::PRIMARY_BASE;
use std::collections::hash_map::Entry;
use std::sync::Arc;

/// When changes become durable (survive a power cut).
///
/// Every mode survives a crash of the process (`kill -9`): the next open
/// completes or removes the interrupted tag. The modes differ on power loss.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Durability {
    /// Each INSERT/DELETE call is durable when it returns: its block images are
    /// journaled and fsynced first (SQLite `synchronous=FULL`, redb `Immediate`).
    Immediate,
    /// Changes are journaled in memory and become durable together at the next
    /// `Store::sync` (group commit: many writers, one flush). Changes not yet
    /// synced are lost on a crash, wholly, tag by tag.
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
    /// A journal commit was fsynced (its images are not yet in the store file).
    JournalSynced,
    /// The commit's images were copied into the mapped store file.
    Applied,
    /// The store file was fsynced (a checkpoint).
    StoreSynced,
}

/// Test hook called at each durability point.
pub type SyncHook = Box<dyn FnMut(SyncPoint) + Send + Sync>;

/// Journal size past which a commit also checkpoints (flushes the store file
/// and empties the journal).
pub(super) const CHECKPOINT_BYTES: u64 = 64 << 20;

/// Unused private-copy buffers kept for reuse (4 MiB of blocks).
const SPARE_COPIES: usize = 1024;

/// Blocks in a durable batch past which it is copied into the store file
/// through the map rather than by `pwrite`.
const APPLY_BY_MAP: usize = 32;

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
        self.durability = durability;
        Ok(())
    }

    /// Sets the callback run at each durability point (crash-simulation tests).
    #[cfg(feature = "test-hooks")]
    pub fn set_sync_hook(&mut self, hook: Option<SyncHook>) {
        self.group.set_hook(hook);
    }

    /// Sets the journal size past which a commit checkpoints (tests).
    #[cfg(feature = "test-hooks")]
    pub fn set_checkpoint_bytes(&mut self, bytes: u64) {
        self.group.set_checkpoint_bytes(bytes);
    }

    /// The group commit this pager's writers share.
    pub fn group(&self) -> Arc<Group> {
        Arc::clone(&self.group)
    }

    /// Block `n` for writing: the private copy in journaled modes, else the map.
    pub(super) fn block_for_write(&mut self, n: u64) -> Result<&mut [u8]> {
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
        let copy = match self.overlay.entry(n) {
            Entry::Occupied(e) => e.into_mut(),
            Entry::Vacant(v) => {
                let src = self.file.block(n)?;
                let reused = self.spare.pop().and_then(|mut buf| {
                    let dst = Arc::get_mut(&mut buf).filter(|d| d.len() == src.len())?;
                    dst.copy_from_slice(src);
                    Some(buf)
                });
                self.lines.insert(n, lines);
                v.insert(reused.unwrap_or_else(|| src.into()))
            }
        };
        if let Some(m) = self.lines.get_mut(&n) {
            *m |= lines;
        }
        self.dirty.insert(n);
        // A copy still shared with a staged batch is copied once more here
        // (copy on write); staging itself shares the copy, never copies it.
        Ok(Arc::make_mut(copy))
    }

    /// Queues every block changed since the last stage for the journal
    /// (journaled modes); the number to wait for, `None` when nothing changed.
    /// Durable batches are copied into the store file first.
    pub fn stage(&mut self) -> Result<Option<u64>> {
        if self.durability == Durability::None {
            return Ok(None);
        }
        if self.poisoned || self.group.failed() {
            // A failed write left half an operation in the private copies:
            // never journal it. Reopening recovers the last durable state.
            self.overlay.clear();
            self.lines.clear();
            self.dirty.clear();
            self.poisoned = true;
            return Err(Error::Poisoned);
        }
        self.apply_durable()?;
        if self.group.journal_len() > self.group.checkpoint_bytes() {
            self.checkpoint()?;
        }
        if self.dirty.is_empty() {
            // Nothing new: wait for what is staged already (another
            // thread's stage may hold this caller's changes).
            return Ok(Some(self.group.last_staged()));
        }
        match self.stage_dirty() {
            Ok(stage) => Ok(Some(stage)),
            Err(e) => {
                // Changes left the dirty set without reaching the queue:
                // the handle is unusable; reopening replays what is durable.
                self.fail();
                Err(e)
            }
        }
    }

    /// Queues the dirty blocks as one stage (images, or deltas where allowed).
    fn stage_dirty(&mut self) -> Result<u64> {
        let mut blocks = Vec::with_capacity(self.dirty.len());
        let dirty: Vec<u64> = self.dirty.drain().collect();
        for n in dirty {
            let Some(img) = self.overlay.get(&n) else {
                continue;
            };
            // A delta when the round holds an image of the block and the
            // store file holds its last journaled version (no stage of it
            // waits to be applied); else the whole image.
            let delta = if self.imaged.contains(&n)
                && self
                    .staged_in
                    .get(&n)
                    .is_none_or(|s| *s <= self.applied_top)
            {
                // Only the lines written since the copy was made can differ
                // from the store file's copy (applied stages are earlier
                // states of the same copy).
                let lines = self.lines.get(&n).copied().unwrap_or(u64::MAX);
                let old = self.file.block(n)?;
                let mut d = Vec::new();
                delta::encode_lines(old, img, lines, &mut d);
                #[cfg(debug_assertions)]
                {
                    let mut all = Vec::new();
                    delta::encode(old, img, &mut all);
                    debug_assert_eq!(d, all, "block {n}: a write outside its lines {lines:#x}");
                }
                Some(d)
            } else {
                if n >= PRIMARY_BASE {
                    self.imaged.insert(n);
                }
                None
            };
            blocks.push(Staged {
                n,
                image: Arc::clone(img),
                delta,
                lines: self.lines.get(&n).copied().unwrap_or(u64::MAX),
            });
        }
        let names: Vec<u64> = blocks.iter().map(|b| b.n).collect();
        let stage = self.group.stage(blocks);
        for n in names {
            self.staged_in.insert(n, stage);
        }
        Ok(stage)
    }

    /// Makes the handle unusable after a failure that left the store file,
    /// the journal or the private copies out of step: nothing more is
    /// staged or committed, and a reopen replays what is durable.
    fn fail(&mut self) {
        self.poisoned = true;
        self.group.set_failed();
    }

    /// Copies the durable batches into the store file, and drops the
    /// private copies they made redundant (not changed since staged).
    pub fn apply_durable(&mut self) -> Result<()> {
        let done = self.group.take_done();
        if done.is_empty() {
            return Ok(());
        }
        // A batch half copied in leaves blocks whose store-file copy is not
        // their last journaled version (a delta from it would be wrong): fatal.
        self.copy_in(done).inspect_err(|_| self.fail())?;
        self.group.hook(SyncPoint::Applied);
        Ok(())
    }

    /// Copies durable batches into the store file, oldest first.
    fn copy_in(&mut self, done: Vec<(u64, Blocks)>) -> Result<()> {
        for (top, blocks) in done {
            // A small commit is copied in with `pwrite` (no write-protect
            // fault on a clean page, which threads committing at once
            // contend for); a large one through the map (a syscall per block
            // cost more than the faults: 100 k SADDs at -P 16 through `serve
            // --durability immediate` ran 1.31-1.35x faster).
            let by_map = blocks.len() > APPLY_BY_MAP;
            for (n, img, lines) in &blocks {
                self.copy_lines_in(*n, img, *lines, by_map)?;
                self.mark_verified(*n);
                if !self.dirty.contains(n) && self.staged_in.get(n).is_some_and(|s| *s <= top) {
                    self.overlay.remove(n);
                    self.lines.remove(n);
                    self.staged_in.remove(n);
                }
            }
            self.applied_top = self.applied_top.max(top);
            // Copies no one holds any more serve the next writes.
            for (_, img, _) in blocks {
                if Arc::strong_count(&img) == 1 && self.spare.len() < SPARE_COPIES {
                    self.spare.push(img);
                }
            }
        }
        Ok(())
    }

    /// Writes the lines of `img` set in `lines` into block `n` of the store
    /// file, whose other lines already equal the image's: the copy was made
    /// from the file and its earlier stages are applied. Through the map, or
    /// one `pwrite` of the span from the first such line to the last.
    fn copy_lines_in(&mut self, n: u64, img: &[u8], lines: u64, by_map: bool) -> Result<()> {
        if lines == 0 {
            return Ok(());
        }
        if by_map {
            let dst = self.file.block_mut(n)?;
            let (src, dst) = (img.as_chunks::<64>().0, dst.as_chunks_mut::<64>().0);
            for (k, (d, s)) in dst.iter_mut().zip(src).enumerate() {
                if lines & (1 << k) != 0 {
                    *d = *s;
                }
            }
        } else {
            let (first, end) = (
                lines.trailing_zeros() as usize * 64,
                (64 - lines.leading_zeros() as usize) * 64,
            );
            self.file.write_block_part(n, first, &img[first..end])?;
        }
        #[cfg(debug_assertions)]
        debug_assert!(
            self.file.block(n)? == img,
            "block {n}: applying lines {lines:#x} left the store file's copy unlike the image"
        );
        Ok(())
    }

    /// Makes every change so far durable: journals the changed blocks, then
    /// applies them to the store file (journaled modes), or flushes the file.
    pub fn commit(&mut self) -> Result<()> {
        if self.durability == Durability::None {
            self.file.flush()?;
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
        self.apply_durable()
    }

    /// Flushes the store file and empties the journal.
    pub fn checkpoint(&mut self) -> Result<()> {
        let group = Arc::clone(&self.group);
        // Every stage into the round being closed (other threads' too: none
        // can stage while this one holds the store's lock), so that a delta
        // never lands in the next round, which holds no image to apply it to.
        let last = group.last_staged();
        if last > 0 {
            group.wait(last)?;
        }
        let mut s = group.lock_sync();
        // Every durable batch into the file first: the journal forgets them.
        self.apply_durable()?;
        self.file.flush()?;
        group.hook(SyncPoint::StoreSynced);
        if let Some(j) = s.journal.as_mut() {
            if let Err(e) = j.reset() {
                // The old round may still replay, or not: commit nothing more.
                drop(s);
                self.fail();
                return Err(e);
            }
        }
        self.imaged.clear();
        group.note_len(&s);
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
