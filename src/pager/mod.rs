//! The pager: the mapped store file and every read and write of its blocks.
//!
//! It owns what a block read or write needs and nothing about buckets or
//! tags: checksums verified on first read, disk space reserved before a
//! first write, private copies of changed blocks in the journaled modes (the
//! overlay), the write-ahead journal, commits and checkpoints, and the
//! fault-injection hooks the crash tests use.

mod ahead;
mod bits;
mod bulk;
mod commit;
mod direct;
mod file;
mod group;
mod journal;
mod memory;
mod readahead;
mod replay;
mod reserve;
mod spare;
mod write;
mod writeback;

use commit::Pending;
pub use commit::{Durability, SyncHook, SyncPoint};
pub use file::{is_no_space, MappedFile, SeqReader};
pub use group::Group;
pub use journal::journal_path;
#[cfg(feature = "test-hooks")]
pub use memory::set_memory_redo_max;
pub use replay::{journal_images, journal_pending, journal_superblock, replay_journal};
pub use write::Identity;

use crate::error::{Error, Result};
use crate::format::{prefetch, BlockRef, Layout, BLOCK_SIZE};
use foldhash::{HashMap, HashMapExt, HashSet, HashSetExt};
use std::collections::BTreeSet;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

/// Reads and writes the blocks of one open store file.
pub struct Pager {
    file: MappedFile,
    geo: Layout,
    /// One bit per block: its checksum was verified since open.
    verified: Vec<AtomicU64>,
    /// One bit per block: disk space is known to back it (reserved this session).
    reserved: bits::BlockBits,
    /// Blocks of newly linked secondary buckets not yet written (never
    /// written before either, so a write of zeros may back them).
    fresh: HashSet<u64>,
    /// Blocks this handle backed with disk space itself (unit tests: every
    /// block marked reserved must be one of these, or have held data).
    #[cfg(test)]
    backed: HashSet<u64>,
    /// A split is moving tags (unit tests): blocks backed meanwhile, which
    /// the split should have backed before it changed anything.
    #[cfg(test)]
    pub moving: Option<Vec<u64>>,
    /// Private copies of blocks changed since the last checkpoint
    /// (journaled modes), which alone writes them into the store file:
    /// reads and writes see them first.
    overlay: HashMap<u64, Arc<[u8]>>,
    /// Overlay blocks written since they were last staged: the lines
    /// written, and what is known of their bytes before (journaled modes).
    pending: HashMap<u64, Pending>,
    /// Buffers of private copies no longer used, for the next ones (a
    /// durable server allocated and freed one per block it wrote).
    spare: spare::Spares,
    /// Blocks from here on were cut off the file since the last checkpoint
    /// (`u64::MAX`: none): their store-file copy may not be the
    /// checkpoint's, so their first entry in the round is an image.
    cut_floor: u64,
    /// Blocks past `cut_floor` with an image in the journal's round: later
    /// entries may be deltas again.
    imaged: HashSet<u64>,
    /// Journaled modes: blocks backed as never written since the last
    /// checkpoint and not yet copied, whose private copy starts as zeros.
    zeroed: HashSet<u64>,
    /// The journal and its group commit, shared with writer threads.
    group: Arc<Group>,
    durability: Durability,
    /// A write failed halfway: every later write is refused until reopen.
    poisoned: bool,
    /// Writes left before a simulated crash (tests).
    fail_after: Option<u64>,
    /// Blocks backed ahead (`ahead.rs`) count only when asked for in this
    /// generation (a cut of the file or a change of mode starts a new one).
    ahead_gen: u64,
    /// A bulk write in progress (mapped mode, `bulk.rs`).
    bulk: Option<bulk::BulkWrite>,
    /// Mapped mode, a split moving tags: the blocks whose puts and clears
    /// left their CRC for [`Pager::seal_deferred`] (`write.rs`).
    deferred: Option<Vec<u64>>,
    /// Private copies past which a bulk write goes back to the file.
    bulk_flush_blocks: usize,
    /// Which write-backs of bulk runs start early (`pager/bulk.rs`).
    early: bulk::EarlyWriteback,
    /// Read-only recovery: blocks past the file's end up to here exist in
    /// memory only (the overlay's, or zeros). 0 when the file is all.
    virtual_blocks: u64,
    /// A scan of the whole store asked for its data ahead already.
    scanned_ahead: AtomicBool,
    /// Bytes asked for by [`Pager::read_ahead_for_scan`] (tests).
    read_ahead: AtomicU64,
    /// A salvage open: the damaged blocks, those that fail their checksum
    /// (read for their sound slots) or do not belong where they lie (read
    /// as empty); `None`: such a block is an error.
    salvage: Option<Mutex<BTreeSet<u64>>>,
    /// Read-only recovery finishing a split or a bulk round: writes reach
    /// private copies only (`memory.rs`).
    memory_only: bool,
    /// Blocks from here up to `virtual_blocks` read as zeros, whatever the
    /// file holds there (`u64::MAX`: from the file's end; `memory.rs`).
    zero_from: u64,
    /// A memory-only write was refused: the copies would pass their bound.
    memory_full: bool,
}

fn verified_len(file_len: u64) -> usize {
    (file_len / BLOCK_SIZE as u64).div_ceil(64) as usize
}

impl Pager {
    /// A pager over `file`, a store with geometry `geo` and hash `seed` at `store_path`.
    pub fn new(file: MappedFile, geo: Layout, seed: u64, store_path: &Path) -> Pager {
        Pager {
            verified: (0..verified_len(file.len()))
                .map(|_| AtomicU64::new(0))
                .collect(),
            file,
            geo,
            reserved: bits::BlockBits::default(),
            fresh: HashSet::new(),
            #[cfg(test)]
            backed: HashSet::new(),
            #[cfg(test)]
            moving: None,
            overlay: HashMap::new(),
            pending: HashMap::new(),
            spare: spare::Spares::default(),
            cut_floor: u64::MAX,
            imaged: HashSet::new(),
            zeroed: HashSet::new(),
            group: Arc::new(Group::new(store_path.to_path_buf(), seed)),
            durability: Durability::None,
            poisoned: false,
            fail_after: None,
            ahead_gen: 0,
            bulk: None,
            deferred: None,
            bulk_flush_blocks: bulk::BULK_FLUSH_BLOCKS,
            early: bulk::EarlyWriteback::default(),
            virtual_blocks: 0,
            scanned_ahead: AtomicBool::new(false),
            read_ahead: AtomicU64::new(0),
            salvage: None,
            memory_only: false,
            zero_from: u64::MAX,
            memory_full: false,
        }
    }

    /// The same pager for a salvage open: `damaged` (blocks that failed
    /// their checksum, their sound slots in the overlay) are listed in
    /// [`Pager::unreadable`], as is any later block that fails its
    /// checksum, read as empty.
    pub fn with_salvage(mut self, damaged: Vec<u64>) -> Pager {
        self.salvage = Some(Mutex::new(damaged.into_iter().collect()));
        self
    }

    /// A salvage open: blocks `bad` read as empty from now on (the rebuild
    /// found them not belonging where they lie), repaired copies included.
    pub fn hide(&mut self, bad: &[u64]) {
        if let Some(s) = &self.salvage {
            s.lock().unwrap_or_else(PoisonError::into_inner).extend(bad);
            self.zeroed.extend(bad);
            for b in bad {
                self.overlay.remove(b);
            }
        }
    }

    /// A salvage open: the damaged blocks met so far (read for their sound
    /// slots, or as empty), in order.
    pub fn unreadable(&self) -> Vec<u64> {
        self.salvage.as_ref().map_or_else(Vec::new, |s| {
            let s = s.lock().unwrap_or_else(PoisonError::into_inner);
            s.iter().copied().collect()
        })
    }

    /// A read-only pager whose reads see `overlay` (the blocks recovery
    /// would write, recovered in memory) over the file, and `blocks` blocks
    /// in all.
    pub fn with_recovered(mut self, overlay: HashMap<u64, Box<[u8]>>, blocks: u64) -> Pager {
        self.overlay = overlay.into_iter().map(|(n, b)| (n, b.into())).collect();
        self.virtual_blocks = blocks;
        self
    }

    /// Block `n` as stored, its checksum not checked (for `check`).
    pub fn raw_block(&self, n: u64) -> Result<&[u8]> {
        if let Some(b) = self.overlay.get(&n) {
            return Ok(b);
        }
        if self.reads_zero(n) {
            return Ok(&file::ZERO_BLOCK);
        }
        self.file.block(n)
    }

    /// Blocks held in memory only (private copies, or recovered images),
    /// in ascending order.
    pub fn memory_blocks(&self) -> Vec<u64> {
        let mut v: Vec<u64> = self.overlay.keys().copied().collect();
        v.sort_unstable();
        v
    }

    /// A sequential reader over every block (table rebuilds).
    pub fn seq_reader(&self) -> SeqReader<'_> {
        SeqReader::with_overlay(
            &self.file,
            &self.overlay,
            self.zeros_from(),
            self.virtual_blocks,
        )
    }

    /// The mapped file (raw reads: rebuilds, checks, sizes).
    pub fn file(&self) -> &MappedFile {
        &self.file
    }

    /// True when the file was opened for writing.
    pub fn writable(&self) -> bool {
        self.file.writable()
    }

    /// Block `n`, its checksum verified on first use since open.
    pub fn block(&self, n: u64) -> Result<BlockRef<'_>> {
        if !self.overlay.is_empty() {
            if let Some(b) = self.overlay.get(&n) {
                return Ok(BlockRef(b));
            }
        }
        if self.reads_zero(n) {
            return Ok(BlockRef(&file::ZERO_BLOCK));
        }
        // Backed but never written (journaled modes): zeros, without a read
        // through the map, where each such page faulted and the kernel
        // zero-filled it (at 5 M tags a tenth of a durable insert's time).
        if !self.zeroed.is_empty() && self.zeroed.contains(&n) {
            return Ok(BlockRef(&file::ZERO_BLOCK));
        }
        let raw = self.file.block(n)?;
        let (w, bit) = ((n / 64) as usize, 1u64 << (n % 64));
        let cell = self
            .verified
            .get(w)
            .ok_or_else(|| Error::corrupt(format!("block {n} lies past the end of the file")))?;
        if cell.load(Ordering::Relaxed) & bit == 0 {
            if !BlockRef(raw).crc_ok() {
                if let Some(s) = &self.salvage {
                    s.lock().unwrap_or_else(PoisonError::into_inner).insert(n);
                    return Ok(BlockRef(&file::ZERO_BLOCK));
                }
                return Err(Error::corrupt(format!(
                    "block {n} (byte offset {}) fails its checksum",
                    n * BLOCK_SIZE as u64
                )));
            }
            cell.fetch_or(bit, Ordering::Relaxed);
        }
        Ok(BlockRef(raw))
    }

    /// Asks the CPU for the header lines of `n` blocks from `first` (a
    /// hint: blocks past the end or only in the overlay are skipped).
    #[inline]
    pub fn prefetch_headers(&self, first: u64, n: u32) {
        self.prefetch_lines(first, n, &[0, 64]);
    }

    /// Asks the CPU for the first line of each of blocks `first..first + n`
    /// (a hint): their page walks start before the blocks are read.
    #[inline]
    pub fn prefetch_pages(&self, first: u64, n: u32) {
        self.prefetch_lines(first, n, &[0]);
    }

    /// Asks for the lines at `offsets` of each of `n` blocks from `first`
    /// in the map (blocks past the end are skipped).
    #[inline]
    fn prefetch_lines(&self, first: u64, n: u32, offsets: &[usize]) {
        for b in first..first + n as u64 {
            if let Ok(raw) = self.file.block(b) {
                prefetch(raw, offsets);
            }
        }
    }

    /// Asks the CPU for the cache lines of slot `i` of block `n` in the
    /// map (a hint, like [`Pager::prefetch_headers`]).
    #[inline]
    pub fn prefetch_slot(&self, n: u64, i: usize) {
        if let Ok(raw) = self.file.block(n) {
            let o = crate::format::block::HEADER_SIZE + i * crate::format::tag::SLOT_SIZE;
            prefetch(raw, &[o, o + 64, o + 128]);
        }
    }

    fn mark_verified(&self, n: u64) {
        if let Some(c) = self.verified.get((n / 64) as usize) {
            c.fetch_or(1 << (n % 64), Ordering::Relaxed);
        }
    }

    /// Takes the layout after a split or a new segment.
    pub fn set_layout(&mut self, l: Layout) {
        self.geo = l;
    }

    /// Sets the file length (growing or shrinking the secondary partition).
    pub fn set_len(&mut self, len: u64) -> Result<()> {
        if self.memory_set_len(len) {
            return Ok(());
        }
        if len < self.file.len() {
            // Blocks cut off come back as zeros, not as the checkpoint left
            // them, and as holes: no longer backed.
            let end = len.div_ceil(BLOCK_SIZE as u64);
            let journaled = self.durability != Durability::None;
            if let Some(n) = self.overlay.keys().find(|&&b| journaled && b >= end) {
                // Its changes are in the journal's round, which a replay
                // would apply past the new end (a checkpoint comes first).
                return Err(Error::corrupt(format!(
                    "cutting the file to {end} blocks would drop block {n}, changed since the last checkpoint"
                )));
            }
            self.cut_floor = self.cut_floor.min(end);
            self.ahead_gen += 1;
            self.imaged.retain(|&b| b < end);
            self.zeroed.retain(|&b| b < end);
            self.fresh.retain(|&b| b < end);
            self.reserved.truncate(end);
            #[cfg(test)]
            self.backed.retain(|&b| b < end);
        }
        self.file.set_len(len)?;
        self.verified
            .resize_with(verified_len(self.file.len()), || AtomicU64::new(0));
        Ok(())
    }

    /// Makes the handle unusable until reopened (an operation failed halfway).
    pub fn poison(&mut self) {
        self.poisoned = true;
    }

    /// True once a failed write has made the handle unusable, or while a
    /// bulk write is left open (a panic inside a bulk round: its private
    /// copies never reached the file, so the handle must not be closed
    /// cleanly or written through).
    pub fn poisoned(&self) -> bool {
        self.poisoned || self.bulk.is_some()
    }

    /// Makes the write path fail after `n` more writes, simulating a crash (tests).
    #[cfg(feature = "test-hooks")]
    pub fn fail_after_writes(&mut self, n: Option<u64>) {
        self.fail_after = n;
    }

    /// Counts one write against the fault-injection budget.
    fn tick(&mut self) -> Result<()> {
        if let Some(n) = self.fail_after.as_mut() {
            if *n == 0 {
                self.poisoned = true;
                return Err(Error::io(
                    "simulated crash",
                    std::io::Error::other("fault injection: write budget exhausted"),
                ));
            }
            *n -= 1;
        }
        Ok(())
    }
}
