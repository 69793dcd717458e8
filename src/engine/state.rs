//! The state behind a store's lock: pager, index, superblock and the tag count.

use crate::counts::Feed;
use crate::error::{Error, Result};
use crate::format::{Superblock, FLAG_CLEAN, NONE};
use crate::index::Index;
use crate::pager::{is_no_space, Durability, Pager};
use crate::strings::Strings;
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;

/// Everything an open store guards with its read-write lock.
pub(crate) struct State {
    /// Block reads and writes, durability.
    pub(super) pager: Pager,
    /// Bucket tables and accelerators.
    pub(super) index: Index,
    /// The superblock as last written.
    pub(super) sb: Superblock,
    /// Tags stored.
    pub(super) tag_count: u64,
    /// Count changes fed by the write path.
    pub(super) feed: Feed,
    /// Whether the last open found an unclean shutdown (and rebuilt the tables).
    pub(super) recovered: bool,
    /// Closed (cleanly, or abandoned by a test): nothing more is written.
    pub(super) closed: bool,
    /// FINDs and exports streaming results: bucket splits wait until none
    /// is, so a streaming reader never sees a tag move.
    pub(super) readers: Arc<AtomicUsize>,
    /// The long strings that tags hold by reference (`STORE.strings`).
    pub(super) strings: Strings,
    /// Copies of hot keys' FIND results (memory only, `hot.rs`).
    pub(super) hot: Arc<super::hot::Hot>,
}

impl State {
    /// Runs `redo` (the redo of a split or a bulk round a crash cut short)
    /// for a read-only open of a store whose blocks end at block `end`: its
    /// writes reach the pager's private copies only (`pager/memory.rs`),
    /// which the store's reads then see, and the tags are counted again;
    /// the file is never written. `refused` is the error when the copies
    /// would pass their bound (a writable open must finish it).
    pub fn redo_in_memory(
        &mut self,
        end: u64,
        refused: Error,
        redo: impl FnOnce(&mut State) -> Result<()>,
    ) -> Result<()> {
        self.hot.forget_all();
        self.pager.begin_memory_writes(end);
        let r = redo(self);
        let ended = self.pager.end_memory_writes();
        if self.pager.memory_full() {
            return Err(refused);
        }
        r.and(ended)?;
        self.tag_count = self.index.count_stored(self.half_only());
        Ok(())
    }

    /// Block reads (admin: check, stats).
    pub(crate) fn pager(&self) -> &Pager {
        &self.pager
    }

    /// Bucket tables and accelerators (admin: check, stats).
    pub(crate) fn index(&self) -> &Index {
        &self.index
    }

    /// The long strings tags hold by reference (admin: check).
    pub(crate) fn strings(&self) -> &Strings {
        &self.strings
    }

    /// Tags stored (halves stored, in a half-only store).
    pub(crate) fn tag_count(&self) -> u64 {
        self.tag_count
    }

    /// The on-disk format version (admin: stats).
    pub(crate) fn format_version(&self) -> u32 {
        self.sb.version()
    }

    /// True for a half-only store (each half of a tag written on its own).
    pub(crate) fn half_only(&self) -> bool {
        self.sb.flags & crate::format::FLAG_HALF_ONLY != 0
    }

    /// Ends a public INSERT/DELETE call: commits when the store or the call asks
    /// for immediate durability.
    pub fn after_call(&mut self, call: Option<Durability>) -> Result<()> {
        if self.pager.durability() == Durability::Immediate || call == Some(Durability::Immediate) {
            self.sync_strings()?;
            self.pager.commit()?;
        }
        Ok(())
    }

    /// Ends a single-tag call as [`State::after_call`] does, but in the
    /// journaled modes only stages its blocks: the caller lets the lock go
    /// and waits for the returned stage (group commit across threads).
    pub fn after_call_staged(&mut self, call: Option<Durability>) -> Result<Option<u64>> {
        let mode = self.pager.durability();
        if mode != Durability::Immediate && call != Some(Durability::Immediate) {
            return Ok(None);
        }
        self.sync_strings()?;
        if mode == Durability::None {
            self.pager.commit()?;
            return Ok(None);
        }
        self.pager.stage()
    }

    /// Marks the store open for writing: drops the table image (it goes
    /// stale with the first write), so a crash from here on forces a rebuild.
    pub fn mark_open(&mut self) -> Result<()> {
        let geo = self.index.geometry();
        let sec = self.index.tables.secondary.len() as u32;
        self.pager.set_len(geo.file_len(sec))?;
        let mut sb = self.sb.clone();
        sb.flags &= !FLAG_CLEAN;
        sb.secondary_count = sec;
        sb.table_offset = 0;
        sb.table_len = 0;
        sb.table_crc = 0;
        self.pager.write_superblock(&sb)?;
        self.sb = sb;
        Ok(())
    }

    /// Writes tables and a clean superblock; the file then opens without a scan.
    pub fn close(&mut self) -> Result<()> {
        if self.closed || !self.pager.writable() || self.pager.poisoned() {
            self.closed = true;
            return Ok(());
        }
        // Strings before the slots that name them.
        self.sync_strings()?;
        if self.pager.durability() != Durability::None {
            self.pager.commit()?;
            self.pager.checkpoint()?;
        }
        // Give back free secondary buckets at the end of the file: a free
        // bucket holds zeros (never written, or zeroed when a split emptied
        // it), so nothing is lost by truncating them.
        let geo = self.index.geometry();
        let t = &mut self.index.tables;
        let keep = t
            .secondary
            .iter()
            .rposition(|e| e.owner != NONE)
            .map_or(0, |i| i + 1)
            .max(geo.fixed_secondary() as usize);
        if keep < t.secondary.len() {
            t.secondary.truncate(keep);
            t.free.retain(|&s| (s as usize) < keep);
            self.pager.set_len(geo.file_len(keep as u32))?;
        }
        self.pager.file().flush()?;
        let sec = self.index.tables.secondary.len() as u32;
        let img = self
            .index
            .tables
            .encode(self.index.accel.secondary_extents());
        let off = geo.file_len(sec);
        // Say where the blocks end before appending the image, so a crash
        // while it is written never lets the image pass for secondary buckets.
        let mut closing = self.sb.clone();
        closing.flags &= !FLAG_CLEAN;
        closing.secondary_count = sec;
        closing.table_offset = off;
        closing.table_len = 0;
        closing.table_crc = 0;
        self.pager.write_superblock(&closing)?;
        if let Err(e) = self.pager.file().write_at(off, &img) {
            if !is_no_space(&e) {
                return Err(e);
            }
            // No room for the table image, which only saves the next open a
            // scan: the blocks are durable and the superblock says where
            // they end, so the store opens as after a crash (tables rebuilt).
            self.pager.set_len(off)?;
            self.closed = true;
            return self.pager.drop_journal();
        }
        self.pager.file().flush()?;
        let mut sb = self.sb.clone();
        sb.flags |= FLAG_CLEAN;
        sb.secondary_count = sec;
        sb.tag_count = self.tag_count;
        sb.table_offset = off;
        sb.table_len = img.len() as u64;
        sb.table_crc = crc32fast::hash(&img);
        self.pager.write_superblock(&sb)?;
        self.sb = sb;
        self.closed = true;
        // Everything is in the store file now: the journal is no longer needed.
        self.pager.drop_journal()
    }
}
