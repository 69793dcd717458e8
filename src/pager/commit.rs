//! Durability: the modes, block copies for the journaled modes, commits and checkpoints.

use super::journal::Journal;
use super::Pager;
use crate::error::{Error, Result};

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
const CHECKPOINT_BYTES: u64 = 64 << 20;

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
        self.sync_hook = hook;
    }

    fn hook(&mut self, p: SyncPoint) {
        if let Some(h) = self.sync_hook.as_mut() {
            h(p);
        }
    }

    /// Block `n` for writing: the private copy in journaled modes, else the map.
    pub(super) fn block_for_write(&mut self, n: u64) -> Result<&mut [u8]> {
        if self.durability == Durability::None {
            return self.file.block_mut(n);
        }
        if !self.overlay.contains_key(&n) {
            let copy: Box<[u8]> = self.file.block(n)?.into();
            self.overlay.insert(n, copy);
        }
        self.overlay
            .get_mut(&n)
            .map(|b| &mut b[..])
            .ok_or_else(|| Error::corrupt(format!("block {n} vanished from the write set")))
    }

    /// Makes every change so far durable: journals the changed blocks, then
    /// applies them to the store file (journaled modes), or flushes the file.
    pub fn commit(&mut self) -> Result<()> {
        if self.durability == Durability::None {
            self.file.flush()?;
            self.hook(SyncPoint::StoreSynced);
            return Ok(());
        }
        if self.poisoned {
            // A failed write left half an operation in the private copies:
            // never journal it. Reopening recovers the last durable state.
            self.overlay.clear();
            return Err(Error::Poisoned);
        }
        if self.overlay.is_empty() {
            return Ok(());
        }
        if self.journal.is_none() {
            // Open already replayed any pending journal; what is left is stale
            // (another store's, or one left before `create`): start empty.
            let mut j = Journal::open(&self.store_path, self.seed)?;
            if j.len() > 0 {
                j.reset()?;
            }
            self.journal = Some(j);
        }
        let mut blocks: Vec<(u64, Box<[u8]>)> = self.overlay.drain().collect();
        blocks.sort_unstable_by_key(|(n, _)| *n);
        let appended = match self.journal.as_mut() {
            Some(j) => j.append(blocks.iter().map(|(n, b)| (*n, &b[..]))),
            None => Err(Error::corrupt("journal missing")),
        };
        if let Err(e) = appended {
            // The in-memory tables already count these changes; only a reopen
            // (which replays the durable journal) makes them agree again.
            self.poisoned = true;
            return Err(e);
        }
        self.hook(SyncPoint::JournalSynced);
        for (n, img) in &blocks {
            self.file.block_mut(*n)?.copy_from_slice(img);
            self.mark_verified(*n);
        }
        self.hook(SyncPoint::Applied);
        if self
            .journal
            .as_ref()
            .is_some_and(|j| j.len() > CHECKPOINT_BYTES)
        {
            self.checkpoint()?;
        }
        Ok(())
    }

    /// Flushes the store file and empties the journal.
    pub fn checkpoint(&mut self) -> Result<()> {
        self.file.flush()?;
        self.hook(SyncPoint::StoreSynced);
        if let Some(j) = self.journal.as_mut() {
            j.reset()?;
        }
        Ok(())
    }

    /// After a clean close: the store file holds everything, so the journal goes.
    pub fn drop_journal(&mut self) -> Result<()> {
        if let Some(mut j) = self.journal.take() {
            j.reset()?;
            j.remove()?;
        }
        Ok(())
    }
}
