//! The store: open/create/close, INSERT, DELETE, and crash recovery of the in-flight operation.

use crate::block::{BlockMut, BlockRef, BLOCK_SIZE, KIND_PRIMARY, KIND_SECONDARY, SLOTS_PER_BLOCK};
use crate::chains::TagHint;
use crate::error::{Error, Result};
use crate::file::MappedFile;
use crate::format::{
    Geometry, Intent, IntentOp, SlotAddr, Superblock, DEFAULT_EXPECTED_TAGS, FLAG_CLEAN,
    INTENT_BLOCK, INTENT_LEN, SUPERBLOCK_BLOCK,
};
use crate::journal::{journal_path, Journal};
use crate::tables::{filter_add, filter_has, Tables, NONE};
use crate::tag::{self, bucket_of, key_fp, key_hash, tag_fp, Half, SlotBytes, Tag};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// Options for [`Store::create`].
#[derive(Clone, Debug)]
pub struct CreateOptions {
    /// Tags the store is sized for; sets the primary bucket count.
    pub expected_tags: u64,
    /// Overrides the primary bucket count per half.
    pub primary_buckets_per_half: Option<u32>,
    /// Overrides the blocks per primary bucket.
    pub blocks_per_primary: Option<u32>,
    /// Overrides the blocks per secondary bucket.
    pub blocks_per_secondary: Option<u32>,
    /// Fixes the hash seed (tests and reproducible images); random otherwise.
    pub seed: Option<u64>,
}

impl Default for CreateOptions {
    fn default() -> Self {
        CreateOptions {
            expected_tags: DEFAULT_EXPECTED_TAGS,
            primary_buckets_per_half: None,
            blocks_per_primary: None,
            blocks_per_secondary: None,
            seed: None,
        }
    }
}

impl CreateOptions {
    /// The geometry these options produce.
    pub fn geometry(&self) -> Geometry {
        let bp = self
            .blocks_per_primary
            .unwrap_or(crate::format::DEFAULT_BLOCKS_PER_PRIMARY);
        let bs = self
            .blocks_per_secondary
            .unwrap_or(crate::format::DEFAULT_BLOCKS_PER_SECONDARY);
        let mut g = Geometry::sized(self.expected_tags, bp, bs);
        if let Some(n) = self.primary_buckets_per_half {
            g.primary_buckets_per_half = n;
        }
        g
    }
}

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
    /// [`Store::sync`] (group commit: many writers, one flush). Changes not yet
    /// synced are lost on a crash, wholly, tag by tag.
    OnSync,
    /// Left to the OS: changes go straight to the mapped file and are durable
    /// after [`Store::sync`] or close (SQLite `synchronous=OFF`, redb `None`).
    /// A power cut may lose or tear recent changes; checksums report torn blocks.
    #[default]
    None,
}

/// Journal size past which a commit also checkpoints (flushes the store file
/// and empties the journal).
const CHECKPOINT_BYTES: u64 = 64 << 20;

/// A durability point, reported to the test hook set by [`Store::set_sync_hook`].
#[doc(hidden)]
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
type SyncHook = Box<dyn FnMut(SyncPoint) + Send + Sync>;

/// How an INSERT or DELETE batch went.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BatchOutcome {
    /// Tags that changed the store.
    pub changed: u64,
    /// Tags that were already present (insert) or absent (delete).
    pub unchanged: u64,
}

/// An open tag store. `Send + Sync`: share it with `Arc` across threads.
pub struct Store {
    pub(crate) inner: RwLock<Inner>,
    /// Merged counts and the cloud, loaded on first use (see `counts.rs`).
    pub(crate) counts: Mutex<Option<crate::counts::Loaded>>,
    /// This handle's writer id for increments (random per open).
    pub(crate) writer_id: u64,
    pub(crate) geometry: Geometry,
    pub(crate) seed: u64,
    path: PathBuf,
}

pub(crate) struct Inner {
    pub file: MappedFile,
    pub sb: Superblock,
    pub tables: Tables,
    pub tag_count: u64,
    verified: Vec<AtomicU64>,
    /// One bit per block: disk space is known to back it (fallocated this session).
    reserved: Vec<u64>,
    /// Per primary bucket: a secondary bucket of its chain such that all
    /// earlier ones are full (NONE: start at the head). Speeds INSERT on peaks.
    open_hint: Vec<u32>,
    poisoned: bool,
    pub(crate) closed: bool,
    fail_after: Option<u64>,
    /// Whether the last open found an unclean shutdown (and rebuilt the tables).
    pub recovered: bool,
    durability: Durability,
    /// Private copies of blocks changed since the last commit (journaled modes).
    overlay: HashMap<u64, Box<[u8]>>,
    journal: Option<Journal>,
    store_path: PathBuf,
    sync_hook: Option<SyncHook>,
    /// Count deltas of this handle's changes, not yet merged (own channel) or shipped (outbox).
    pub pending: crate::counts::Pending,
    /// Whether INSERT/DELETE feed `pending`.
    pub counting: bool,
    /// A change was made with counting off: persisted counts are stale.
    pub counts_stale: bool,
    /// Next increment sequence number.
    pub next_seq: u64,
    /// Learned primary extents and chain indexes (in memory only).
    pub(crate) accel: crate::chains::Accel,
}

/// Where one half of an INSERT will write.
#[derive(Clone, Copy, Debug)]
struct Plan {
    addr: SlotAddr,
    kind: u8,
    owner: u32,
    ordinal: u32,
    sec: Option<u32>,
    new_link: bool,
}

/// Where a tag was found in one half.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Found {
    pub addr: SlotAddr,
    pub sec: Option<u32>,
}

fn verified_len(file_len: u64) -> usize {
    (file_len / BLOCK_SIZE as u64).div_ceil(64) as usize
}

impl Inner {
    /// Block `n`, its checksum verified on first use since open.
    pub fn block(&self, n: u64) -> Result<BlockRef<'_>> {
        if !self.overlay.is_empty() {
            if let Some(b) = self.overlay.get(&n) {
                return Ok(BlockRef(b));
            }
        }
        let raw = self.file.block(n)?;
        let (w, bit) = ((n / 64) as usize, 1u64 << (n % 64));
        let cell = self
            .verified
            .get(w)
            .ok_or_else(|| Error::corrupt(format!("block {n} lies past the end of the file")))?;
        if cell.load(Ordering::Relaxed) & bit == 0 {
            if !BlockRef(raw).crc_ok() {
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
        for b in first..first + n as u64 {
            if let Ok(raw) = self.file.block(b) {
                crate::block::prefetch(raw, &[0, 64]);
            }
        }
    }

    /// Asks the CPU for the headers of the first `blocks` blocks of primary
    /// bucket `g` and for its table entry, so their misses overlap.
    #[inline]
    pub fn prefetch_bucket(&self, g: u32, blocks: u32) {
        self.prefetch_headers(self.geometry().primary_start(g), blocks);
        if let Some(e) = self.tables.primary.get(g as usize) {
            crate::block::prefetch_val(e);
        }
    }

    /// Asks the CPU for the block headers and table entries of primary
    /// buckets about to be searched or written, so their misses overlap.
    fn prefetch_buckets(&self, gs: &[u32]) {
        let geo = self.geometry();
        for &g in gs {
            // The written blocks and the first unwritten one (where INSERT
            // may put the tag); touching holes only costs page walks.
            let n = self
                .accel
                .known_extent(g)
                .map_or(geo.blocks_per_primary, |e| {
                    (e + 1).min(geo.blocks_per_primary)
                });
            self.prefetch_bucket(g, n);
        }
    }

    fn mark_verified(&self, n: u64) {
        if let Some(c) = self.verified.get((n / 64) as usize) {
            c.fetch_or(1 << (n % 64), Ordering::Relaxed);
        }
    }

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

    fn geometry(&self) -> Geometry {
        self.sb.geometry
    }

    /// True if searching key `ka` in chain `ga` reads no more blocks than key
    /// `kb` in chain `gb`. Walks both chains in step and stops as soon as one
    /// is known to be cheaper, so a peak's long chain is not walked in full.
    fn first_is_cheaper(&self, (ga, ka): (u32, u16), (gb, kb): (u32, u16)) -> bool {
        let geo = self.geometry();
        let t = &self.tables;
        let (mut ca, mut cb) = (0u64, 0u64);
        let (mut sa, mut sb) = (t.primary[ga as usize].head, t.primary[gb as usize].head);
        loop {
            if sa == NONE && ca <= cb {
                return true;
            }
            if sb == NONE && cb < ca {
                return false;
            }
            if sa != NONE && (ca <= cb || sb == NONE) {
                let e = &t.secondary[sa as usize];
                if filter_has(&e.filter, ka) {
                    ca += geo.blocks_per_secondary as u64;
                }
                sa = e.next;
            } else {
                let e = &t.secondary[sb as usize];
                if filter_has(&e.filter, kb) {
                    cb += geo.blocks_per_secondary as u64;
                }
                sb = e.next;
            }
        }
    }

    /// Finds an encoded tag in the chain of `g`.
    pub fn locate(&self, g: u32, kfp: u16, th: u64, slot: &SlotBytes) -> Result<Option<Found>> {
        let geo = self.geometry();
        let tfp = tag::fp_of_tag_hash(th);
        let scan = |first: u64, n: u32, sec: Option<u32>| -> Result<Option<Found>> {
            for b in first..first + n as u64 {
                let blk = self.block(b)?;
                let mut m = blk.matching(kfp);
                while m != 0 {
                    let i = m.trailing_zeros() as usize;
                    m &= m - 1;
                    if blk.tag_fp(i) == tfp && blk.slot(i) == slot {
                        return Ok(Some(Found {
                            addr: SlotAddr {
                                block: b,
                                slot: i as u32,
                            },
                            sec,
                        }));
                    }
                }
            }
            Ok(None)
        };
        let extent = self.accel.extent(g, &geo, |b| self.block(b))?;
        self.prefetch_bucket(g, extent);
        if let Some(f) = scan(geo.primary_start(g), extent, None)? {
            return Ok(Some(f));
        }
        let indexed = self
            .accel
            .with_index(g, &self.tables, &geo, |b| self.block(b), |_| ())?;
        if indexed.is_some() {
            let seed = self.sb.seed;
            match self
                .accel
                .tag_hint(g, th, &self.tables, &geo, seed, |b| self.block(b))?
            {
                TagHint::Absent => return Ok(None),
                TagHint::Block(b) => {
                    let s = ((b - geo.secondary_base()) / geo.blocks_per_secondary as u64) as u32;
                    if let Some(f) = scan(b, 1, Some(s))? {
                        return Ok(Some(f));
                    }
                    // Another tag with the same hash bits: search the chain.
                }
                TagHint::Search => {}
            }
            let cands = self
                .accel
                .with_index(
                    g,
                    &self.tables,
                    &geo,
                    |b| self.block(b),
                    |ci| ci.candidates(kfp).to_vec(),
                )?
                .unwrap_or_default();
            let n = geo.blocks_per_secondary;
            for (s, mask) in cands {
                let mut i = 0;
                while let Some(b) = crate::chains::next_in_mask(mask, n, i) {
                    if let Some(f) = scan(geo.secondary_start(s) + b as u64, 1, Some(s))? {
                        return Ok(Some(f));
                    }
                    i = b + 1;
                }
            }
            return Ok(None);
        }
        let mut s = self.tables.primary[g as usize].head;
        while s != NONE {
            let e = &self.tables.secondary[s as usize];
            if filter_has(&e.filter, kfp) {
                self.prefetch_headers(geo.secondary_start(s), geo.blocks_per_secondary);
                if let Some(f) = scan(geo.secondary_start(s), geo.blocks_per_secondary, Some(s))? {
                    return Ok(Some(f));
                }
            }
            s = e.next;
        }
        Ok(None)
    }

    /// Backs block `b` with disk space before anything reads or writes it
    /// through the map, so a full disk is an error here and never a SIGBUS.
    /// `fresh`: the block (or, in the secondary partition, its whole bucket)
    /// is known never written, so it may be zero-filled instead.
    fn ensure_reserved(&mut self, b: u64, fresh: bool) -> Result<()> {
        let (w, bit) = ((b / 64) as usize, 1u64 << (b % 64));
        if self.reserved.get(w).is_some_and(|x| x & bit != 0) {
            return Ok(());
        }
        // A secondary bucket fills block after block: back all of it at once
        // (one extent, one call), but only the block asked for in a primary
        // bucket, whose later blocks may never be written.
        let geo = self.geometry();
        let (first, n) = if b >= geo.secondary_base() {
            let per = geo.blocks_per_secondary as u64;
            (b - (b - geo.secondary_base()) % per, per)
        } else {
            (b, 1)
        };
        let (off, len) = (first * BLOCK_SIZE as u64, n * BLOCK_SIZE as u64);
        if fresh {
            // A write of zeros costs less than fallocate plus the map's first
            // read of an unwritten extent (a major fault that zero-fills the
            // page): together those were a third of a bulk load.
            self.file.zero_fill(off, len)?;
        } else {
            self.file.reserve(off, len)?;
        }
        for x in first..first + n {
            let w = (x / 64) as usize;
            if self.reserved.len() <= w {
                self.reserved.resize(w + 1, 0);
            }
            self.reserved[w] |= 1u64 << (x % 64);
        }
        Ok(())
    }

    /// First free slot in `n` blocks from `first`; reserves each block it
    /// reads. Blocks from index `written` on are known never written.
    fn first_free(&mut self, first: u64, n: u32, written: u32) -> Result<Option<SlotAddr>> {
        for (i, b) in (first..first + n as u64).enumerate() {
            let fresh = i as u32 >= written;
            self.ensure_reserved(b, fresh)?;
            if fresh {
                return Ok(Some(SlotAddr { block: b, slot: 0 }));
            }
            if let Some(i) = self.block(b)?.first_free() {
                return Ok(Some(SlotAddr {
                    block: b,
                    slot: i as u32,
                }));
            }
        }
        Ok(None)
    }

    /// Chooses the slot for one half of an INSERT; may reserve a new secondary bucket.
    fn plan(&mut self, g: u32) -> Result<Plan> {
        let geo = self.geometry();
        let pe = self.tables.primary[g as usize].clone();
        if pe.used < geo.primary_capacity() {
            let written = self.accel.known_extent(g).unwrap_or(u32::MAX);
            return match self.first_free(geo.primary_start(g), geo.blocks_per_primary, written)? {
                Some(addr) => Ok(Plan {
                    addr,
                    kind: KIND_PRIMARY,
                    owner: g,
                    ordinal: 0,
                    sec: None,
                    new_link: false,
                }),
                None => Err(Error::corrupt(format!(
                    "primary bucket {g}: table counts {} used slots but its blocks are full",
                    pe.used
                ))),
            };
        }
        let hint = self.open_hint[g as usize];
        let mut s = if hint != NONE { hint } else { pe.head };
        while s != NONE {
            let e = &self.tables.secondary[s as usize];
            let (ordinal, next, used) = (e.ordinal, e.next, e.used);
            if used < geo.secondary_capacity() {
                self.open_hint[g as usize] = s;
                return match self.first_free(
                    geo.secondary_start(s),
                    geo.blocks_per_secondary,
                    u32::MAX,
                )? {
                    Some(addr) => Ok(Plan {
                        addr,
                        kind: KIND_SECONDARY,
                        owner: g,
                        ordinal,
                        sec: Some(s),
                        new_link: false,
                    }),
                    None => Err(Error::corrupt(format!(
                        "secondary bucket {s}: table counts {used} used slots but its blocks are full"
                    ))),
                };
            }
            s = next;
        }
        let s = self.alloc_secondary()?;
        // A free bucket was never written (buckets are unlinked only by
        // maintenance, which writes a fresh file).
        if let Err(e) = self.ensure_reserved(geo.secondary_start(s), true) {
            self.tables.free.insert(s);
            return Err(e);
        }
        Ok(Plan {
            addr: SlotAddr {
                block: geo.secondary_start(s),
                slot: 0,
            },
            kind: KIND_SECONDARY,
            owner: g,
            ordinal: pe.chain + 1,
            sec: Some(s),
            new_link: true,
        })
    }

    /// Takes the lowest free secondary bucket, growing the file when none is free.
    fn alloc_secondary(&mut self) -> Result<u32> {
        if let Some(s) = self.tables.free.pop_first() {
            return Ok(s);
        }
        let geo = self.geometry();
        let have = self.tables.secondary.len() as u32;
        // Grow by 1/8 of the secondary partition (at least 16 buckets, at most 4096).
        let add = (have / 8).clamp(16, 4096);
        let want = have
            .checked_add(add)
            .filter(|&n| n < NONE)
            .ok_or_else(|| Error::InvalidArgument("secondary bucket numbers exhausted".into()))?;
        let len = geo.file_len(want);
        self.file.set_len(len)?;
        self.verified
            .resize_with(verified_len(len), || AtomicU64::new(0));
        self.tables
            .secondary
            .resize(want as usize, crate::tables::SecondaryEntry::free());
        self.tables.free.extend(have + 1..want);
        Ok(have)
    }

    fn unreserve(&mut self, plans: &[Plan]) {
        for p in plans {
            if let (true, Some(s)) = (p.new_link, p.sec) {
                self.tables.free.insert(s);
            }
        }
    }

    /// Block `n` for writing: the private copy in journaled modes, else the map.
    fn block_for_write(&mut self, n: u64) -> Result<&mut [u8]> {
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

    fn hook(&mut self, p: SyncPoint) {
        if let Some(h) = self.sync_hook.as_mut() {
            h(p);
        }
    }

    /// Makes every change so far durable: journals the changed blocks, then
    /// applies them to the store file (journaled modes), or flushes the file.
    fn commit(&mut self) -> Result<()> {
        if self.durability == Durability::None {
            self.file.flush()?;
            self.hook(SyncPoint::StoreSynced);
            return Ok(());
        }
        if self.poisoned {
            // A failed write left half an operation in the private copies:
            // never journal it. Reopening recovers the last durable state.
            self.overlay.clear();
            return Err(poisoned_error());
        }
        if self.overlay.is_empty() {
            return Ok(());
        }
        if self.journal.is_none() {
            // Open already replayed any pending journal; what is left is stale
            // (another store's, or one left before `create`): start empty.
            let mut j = Journal::open(&self.store_path, self.sb.seed)?;
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
    fn checkpoint(&mut self) -> Result<()> {
        self.file.flush()?;
        self.hook(SyncPoint::StoreSynced);
        if let Some(j) = self.journal.as_mut() {
            j.reset()?;
        }
        Ok(())
    }

    fn write_intent(&mut self, intent: &Intent) -> Result<()> {
        self.tick()?;
        if self.durability != Durability::None {
            return Ok(());
        }
        let img = intent.encode();
        let blk = self.file.block_mut(INTENT_BLOCK)?;
        blk[..INTENT_LEN].copy_from_slice(&img);
        Ok(())
    }

    fn clear_intent(&mut self) -> Result<()> {
        self.tick()?;
        if self.durability != Durability::None {
            return Ok(());
        }
        let blk = self.file.block_mut(INTENT_BLOCK)?;
        blk[..INTENT_LEN].fill(0);
        Ok(())
    }

    fn put(&mut self, p: &Plan, slot: &SlotBytes, kfp: u16, tfp: u8) -> Result<()> {
        self.tick()?;
        let raw = self.block_for_write(p.addr.block)?;
        let mut b = BlockMut(raw);
        if b.as_ref().is_unwritten() {
            b.set_identity(p.kind, p.owner, p.ordinal);
            b.put(p.addr.slot as usize, slot, kfp, tfp);
            b.seal();
        } else {
            // plan() read the block through `block()`, which checked its CRC.
            b.put_resealed(p.addr.slot as usize, slot, kfp, tfp);
        }
        self.mark_verified(p.addr.block);
        Ok(())
    }

    fn clear(&mut self, addr: SlotAddr) -> Result<()> {
        self.tick()?;
        let raw = self.block_for_write(addr.block)?;
        // locate() read the block through `block()`, which checked its CRC.
        BlockMut(raw).clear_resealed(addr.slot as usize);
        Ok(())
    }

    fn commit_insert(&mut self, g: u32, p: &Plan, kfp: u16, th: u64) {
        let geo = self.geometry();
        match p.sec {
            None => {
                self.tables.primary[g as usize].used += 1;
                let i = p.addr.block.saturating_sub(geo.primary_start(g));
                self.accel.wrote_primary(g, i as u32);
            }
            Some(s) => {
                if p.new_link {
                    let tail = self.tables.primary[g as usize].tail;
                    if tail == NONE {
                        self.tables.primary[g as usize].head = s;
                    } else {
                        self.tables.secondary[tail as usize].next = s;
                    }
                    let pe = &mut self.tables.primary[g as usize];
                    pe.tail = s;
                    pe.chain += 1;
                    let e = &mut self.tables.secondary[s as usize];
                    e.owner = g;
                    e.ordinal = p.ordinal;
                    e.next = NONE;
                    self.open_hint[g as usize] = s;
                }
                let e = &mut self.tables.secondary[s as usize];
                e.used += 1;
                filter_add(&mut e.filter, kfp);
                let i = p.addr.block.saturating_sub(geo.secondary_start(s));
                self.accel.wrote_secondary(g, s, i as u32, kfp, th, &geo);
            }
        }
    }

    fn commit_delete(&mut self, g: u32, f: &Found, th: u64) {
        match f.sec {
            None => {
                let e = &mut self.tables.primary[g as usize];
                e.used = e.used.saturating_sub(1);
            }
            Some(s) => {
                self.accel.erased_secondary(g, th, f.addr.block);
                let e = &mut self.tables.secondary[s as usize];
                e.used = e.used.saturating_sub(1);
                let ordinal = e.ordinal;
                let hint = self.open_hint[g as usize];
                if hint != NONE && ordinal < self.tables.secondary[hint as usize].ordinal {
                    self.open_hint[g as usize] = s;
                }
            }
        }
    }

    fn keys(&self, view: &tag::SlotView<'_>) -> [(u32, u64); 2] {
        let geo = self.geometry();
        Half::BOTH.map(|h| {
            let k = key_hash(self.sb.seed, h, view.relationship, view.key_name(h));
            (geo.global(h, bucket_of(k, geo.primary_buckets_per_half)), k)
        })
    }

    /// Inserts an encoded tag; false if it was already present.
    fn insert_encoded(&mut self, slot: &SlotBytes) -> Result<bool> {
        self.insert_slot(slot, true)
    }

    /// Inserts an encoded tag; with `check_dup` false the caller guarantees it is absent.
    fn insert_slot(&mut self, slot: &SlotBytes, check_dup: bool) -> Result<bool> {
        let view =
            tag::decode(slot).ok_or_else(|| Error::corrupt("encoder produced a bad slot"))?;
        let [(go, ho), (gs, hs)] = self.keys(&view);
        self.prefetch_buckets(&[go, gs]);
        let (ko, ks) = (key_fp(ho), key_fp(hs));
        let th = tag::tag_hash(self.sb.seed, tag::used_prefix(slot));
        let tfp = tag::fp_of_tag_hash(th);
        // The tag is in both halves or neither: search the cheaper chain.
        let (gc, kc) = if self.first_is_cheaper((go, ko), (gs, ks)) {
            (go, ko)
        } else {
            (gs, ks)
        };
        if check_dup && self.locate(gc, kc, th, slot)?.is_some() {
            return Ok(false);
        }
        let po = self.plan(go)?;
        let ps = match self.plan(gs) {
            Ok(p) => p,
            Err(e) => {
                self.unreserve(&[po]);
                return Err(e);
            }
        };
        // (plan() backed both target blocks with disk space before reading them.)
        let intent = Intent {
            op: IntentOp::Insert,
            object_slot: po.addr,
            subject_slot: ps.addr,
            object_identity: (po.owner, po.ordinal),
            subject_identity: (ps.owner, ps.ordinal),
            tag: *slot,
        };
        self.write_intent(&intent)?;
        self.put(&po, slot, ko, tfp)?;
        self.put(&ps, slot, ks, tfp)?;
        self.clear_intent()?;
        self.commit_insert(go, &po, ko, th);
        self.commit_insert(gs, &ps, ks, th);
        self.tag_count += 1;
        Ok(true)
    }

    /// Deletes an encoded tag; false if it was absent.
    fn delete_encoded(&mut self, slot: &SlotBytes) -> Result<bool> {
        let view =
            tag::decode(slot).ok_or_else(|| Error::corrupt("encoder produced a bad slot"))?;
        let [(go, ho), (gs, hs)] = self.keys(&view);
        self.prefetch_buckets(&[go, gs]);
        let th = tag::tag_hash(self.sb.seed, tag::used_prefix(slot));
        let fo = self.locate(go, key_fp(ho), th, slot)?;
        let fs = self.locate(gs, key_fp(hs), th, slot)?;
        if fo.is_none() && fs.is_none() {
            return Ok(false);
        }
        let addr = |f: &Option<Found>| f.map_or(SlotAddr::NONE, |f| f.addr);
        let intent = Intent {
            op: IntentOp::Delete,
            object_slot: addr(&fo),
            subject_slot: addr(&fs),
            object_identity: (0, 0),
            subject_identity: (0, 0),
            tag: *slot,
        };
        self.write_intent(&intent)?;
        for f in [&fo, &fs].into_iter().flatten() {
            self.clear(f.addr)?;
        }
        self.clear_intent()?;
        if let Some(f) = &fo {
            self.commit_delete(go, f, th);
            self.tag_count = self.tag_count.saturating_sub(1);
        }
        if let Some(f) = &fs {
            self.commit_delete(gs, f, th);
        }
        Ok(true)
    }

    /// Feeds the pending increment (or marks persisted counts stale).
    fn count_change(&mut self, t: &Tag, d: i64) {
        if self.counting {
            self.pending.add(&t.relationship, &t.subject, d);
        } else {
            self.counts_stale = true;
        }
    }

    /// Ends a public INSERT/DELETE call: commits when the store or the call asks
    /// for immediate durability.
    fn after_call(&mut self, call: Option<Durability>) -> Result<()> {
        if self.durability == Durability::Immediate || call == Some(Durability::Immediate) {
            self.commit()?;
        }
        Ok(())
    }

    /// Writes tables and a clean superblock; the file then opens without a scan.
    fn close(&mut self) -> Result<()> {
        if self.closed || !self.file.writable() || self.poisoned {
            self.closed = true;
            return Ok(());
        }
        if self.durability != Durability::None {
            self.commit()?;
        }
        // Give back free secondary buckets at the end of the file: a free
        // bucket is never written (buckets are only unlinked by maintenance,
        // which writes a fresh file), so nothing is lost by truncating them.
        let keep = self
            .tables
            .secondary
            .iter()
            .rposition(|e| e.owner != NONE)
            .map_or(0, |i| i + 1);
        let geo = self.geometry();
        if keep < self.tables.secondary.len() {
            self.tables.secondary.truncate(keep);
            self.tables.free.retain(|&s| (s as usize) < keep);
            self.file.set_len(geo.file_len(keep as u32))?;
        }
        self.file.flush()?;
        let sec = self.tables.secondary.len() as u32;
        let img = self.tables.encode();
        let off = geo.file_len(sec);
        // Say where the blocks end before appending the image, so a crash
        // while it is written never lets the image pass for secondary buckets.
        let mut closing = self.sb.clone();
        closing.flags &= !FLAG_CLEAN;
        closing.secondary_count = sec;
        closing.table_offset = off;
        closing.table_len = 0;
        closing.table_crc = 0;
        self.write_superblock(&closing)?;
        self.file.write_at(off, &img)?;
        self.file.flush()?;
        let mut sb = self.sb.clone();
        sb.flags |= FLAG_CLEAN;
        sb.secondary_count = sec;
        sb.tag_count = self.tag_count;
        sb.table_offset = off;
        sb.table_len = img.len() as u64;
        sb.table_crc = crc32fast::hash(&img);
        self.write_superblock(&sb)?;
        self.sb = sb;
        self.closed = true;
        // Everything is in the store file now: the journal is no longer needed.
        if let Some(mut j) = self.journal.take() {
            j.reset()?;
            j.remove()?;
        }
        Ok(())
    }

    fn write_superblock(&mut self, sb: &Superblock) -> Result<()> {
        let img = sb.encode();
        self.file.block_mut(SUPERBLOCK_BLOCK)?.copy_from_slice(&img);
        self.file.flush_range(0, BLOCK_SIZE)?;
        self.file.flush()
    }
}

/// Redoes the operation recorded in the intent block, if any, so that a tag
/// interrupted mid-INSERT or mid-DELETE is wholly present or wholly absent.
fn recover_intent(file: &mut MappedFile, geo: &Geometry, seed: u64) -> Result<bool> {
    let Some(intent) = Intent::decode(file.block(INTENT_BLOCK)?) else {
        return Ok(false);
    };
    let view = tag::decode(&intent.tag)
        .ok_or_else(|| Error::corrupt("intent record (block 1) holds an undecodable tag"))?;
    let tfp = tag_fp(seed, &intent.tag);
    let total_blocks = file.len() / BLOCK_SIZE as u64;
    for (h, addr, (owner, ordinal)) in [
        (Half::Object, intent.object_slot, intent.object_identity),
        (Half::Subject, intent.subject_slot, intent.subject_identity),
    ] {
        if addr == SlotAddr::NONE {
            continue;
        }
        if addr.block < geo.primary_start(0)
            || addr.block >= total_blocks
            || addr.slot as usize >= SLOTS_PER_BLOCK
        {
            return Err(Error::corrupt(format!(
                "intent record names impossible slot {} of block {}",
                addr.slot, addr.block
            )));
        }
        let kind = if addr.block < geo.secondary_base() {
            KIND_PRIMARY
        } else {
            KIND_SECONDARY
        };
        let kfp = key_fp(key_hash(seed, h, view.relationship, view.key_name(h)));
        file.reserve(addr.block * BLOCK_SIZE as u64, BLOCK_SIZE as u64)?;
        let mut b = BlockMut(file.block_mut(addr.block)?);
        if b.as_ref().is_unwritten() {
            b.set_identity(kind, owner, ordinal);
        }
        match intent.op {
            IntentOp::Insert => b.put(addr.slot as usize, &intent.tag, kfp, tfp),
            IntentOp::Delete => b.clear(addr.slot as usize),
        }
        b.seal();
    }
    file.block_mut(INTENT_BLOCK)?[..INTENT_LEN].fill(0);
    Ok(true)
}

/// Replays every complete commit of the journal into the store file, then
/// flushes the file and empties the journal. Returns the commits replayed.
fn replay_journal(file: &mut MappedFile, geo: &Geometry, path: &Path, seed: u64) -> Result<usize> {
    let mut j = Journal::open(path, seed)?;
    let commits = j.read_commits()?;
    let base = geo.secondary_base();
    for c in &commits {
        for (n, img) in &c.blocks {
            let n = *n;
            if n < geo.primary_start(0) || !BlockRef(img).crc_ok() {
                return Err(Error::corrupt(format!(
                    "journal {}: commit holds a bad image for block {n}",
                    journal_path(path).display()
                )));
            }
            if (n + 1) * BLOCK_SIZE as u64 > file.len() {
                if n < base {
                    return Err(Error::corrupt(format!(
                        "journal names primary block {n} beyond the end of the file"
                    )));
                }
                let s = (n - base) / geo.blocks_per_secondary as u64;
                let s = u32::try_from(s + 1)
                    .ok()
                    .filter(|&s| s < NONE)
                    .ok_or_else(|| Error::corrupt(format!("journal names impossible block {n}")))?;
                file.set_len(geo.file_len(s))?;
            }
            file.reserve(n * BLOCK_SIZE as u64, BLOCK_SIZE as u64)?;
            file.block_mut(n)?.copy_from_slice(img);
        }
    }
    file.flush()?;
    j.reset()?;
    j.remove()?;
    Ok(commits.len())
}

fn journal_pending(path: &Path) -> bool {
    std::fs::metadata(journal_path(path)).is_ok_and(|m| m.len() > 0)
}

/// The error every write returns once a failed write left the handle unusable.
fn poisoned_error() -> Error {
    Error::io(
        "store is unusable after a failed write",
        std::io::Error::other("reopen the store to recover"),
    )
}

fn random_u64() -> Result<u64> {
    let mut b = [0u8; 8];
    getrandom::fill(&mut b)
        .map_err(|e| Error::io("drawing random bytes", std::io::Error::other(e.to_string())))?;
    Ok(u64::from_le_bytes(b))
}

fn read_lock(l: &RwLock<Inner>) -> RwLockReadGuard<'_, Inner> {
    l.read().unwrap_or_else(|p| p.into_inner())
}

impl Store {
    /// Creates a new, empty store file at `path`; fails if the path exists.
    pub fn create(path: impl AsRef<Path>, options: &CreateOptions) -> Result<Store> {
        let path = path.as_ref();
        let geometry = options.geometry();
        geometry.validate()?;
        let seed = match options.seed {
            Some(s) => s,
            None => random_u64()?,
        };
        let len = geometry.file_len(0);
        let file = MappedFile::create(path, len)?;
        // No store existed at this path, so a journal beside it is stale.
        match std::fs::remove_file(journal_path(path)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(Error::io(
                    format!("removing stale journal {}", journal_path(path).display()),
                    e,
                ))
            }
            _ => {}
        }
        let sb = Superblock {
            geometry,
            secondary_count: 0,
            flags: 0,
            seed,
            tag_count: 0,
            table_offset: 0,
            table_len: 0,
            table_crc: 0,
        };
        let mut inner = Inner {
            tables: Tables::new(&geometry, 0),
            verified: (0..verified_len(len)).map(|_| AtomicU64::new(0)).collect(),
            reserved: Vec::new(),
            open_hint: vec![NONE; geometry.primary_buckets() as usize],
            file,
            sb: sb.clone(),
            tag_count: 0,
            poisoned: false,
            closed: false,
            fail_after: None,
            recovered: false,
            durability: Durability::None,
            overlay: HashMap::new(),
            journal: None,
            store_path: path.to_path_buf(),
            sync_hook: None,
            pending: Default::default(),
            counting: true,
            counts_stale: false,
            next_seq: 0,
            accel: crate::chains::Accel::new(geometry.primary_buckets(), |_| true),
        };
        inner.write_superblock(&sb)?;
        // Counts start empty and exact, so the first close merges instead of scanning.
        crate::counts::CountsFile::create(
            path,
            seed,
            &crate::counts::Counts::from_counts(Default::default()),
        )?;
        Ok(Store {
            inner: RwLock::new(inner),
            counts: Mutex::new(None),
            writer_id: random_u64()?,
            geometry,
            seed,
            path: path.to_path_buf(),
        })
    }

    /// Opens an existing store for reading and writing (exclusive lock).
    pub fn open(path: impl AsRef<Path>) -> Result<Store> {
        Self::open_with(path.as_ref(), true)
    }

    /// Opens an existing store for reading only (shared lock; many readers).
    ///
    /// A store left unclean by a crash is first recovered, which needs a
    /// brief exclusive open.
    pub fn open_read_only(path: impl AsRef<Path>) -> Result<Store> {
        let path = path.as_ref();
        if journal_pending(path) {
            Store::open(path)?.close()?;
        }
        let s = Self::open_with(path, false)?;
        if s.was_clean() {
            return Ok(s);
        }
        drop(s);
        Store::open(path)?.close()?;
        Self::open_with(path, false)
    }

    fn was_clean(&self) -> bool {
        !read_lock(&self.inner).recovered
    }

    fn open_with(path: &Path, writable: bool) -> Result<Store> {
        let mut file = MappedFile::open(path, writable)?;
        let mut sb = Superblock::decode(file.block(SUPERBLOCK_BLOCK)?)?
            .ok_or_else(|| Error::NotAStore(path.to_path_buf()))?;
        let geo = sb.geometry;
        let base = geo.file_len(0);
        if file.len() < base {
            return Err(Error::corrupt(format!(
                "file is truncated: {} bytes, its geometry needs at least {base}",
                file.len()
            )));
        }
        // Secondary buckets are never removed while a store is open, so the
        // count recorded at the last open (or clean close) is a lower bound.
        // (A missing table image is no loss: the tables are rebuilt.)
        let need = geo.file_len(sb.secondary_count);
        if file.len() < need {
            return Err(Error::corrupt(format!(
                "file is truncated: {} bytes, but the superblock's {} secondary buckets need {need}",
                file.len(),
                sb.secondary_count,
            )));
        }
        let mut replayed = false;
        if journal_pending(path) {
            if !writable {
                return Err(Error::corrupt(
                    "journal holds changes to replay; open the store for writing to recover",
                ));
            }
            replay_journal(&mut file, &geo, path, sb.seed)?;
            replayed = true;
        }
        let persisted = if sb.clean() && !replayed {
            Self::read_tables(&file, &sb)
        } else {
            None
        };
        let recovered = persisted.is_none();
        let (tables, tag_count) = match persisted {
            Some(t) => (t, sb.tag_count),
            None => {
                let sec_bytes = geo.blocks_per_secondary as u64 * BLOCK_SIZE as u64;
                let by_len = ((file.len() - base) / sec_bytes).min(NONE as u64 - 1) as u32;
                // An unclean superblock with a table offset was written by an
                // interrupted close: the blocks end exactly there.
                let closing =
                    sb.table_offset != 0 && sb.table_offset == geo.file_len(sb.secondary_count);
                let sec = if sb.clean() || closing {
                    sb.secondary_count.min(by_len)
                } else {
                    // Older or torn closes: a table image is never a bucket
                    // (its magic is no block kind), so stop counting there.
                    (sb.secondary_count.min(by_len)..by_len)
                        .find(|&s| {
                            file.block(geo.secondary_start(s))
                                .is_ok_and(|b| b.starts_with(crate::tables::TABLE_MAGIC))
                        })
                        .unwrap_or(by_len)
                };
                if writable {
                    recover_intent(&mut file, &geo, sb.seed)?;
                }
                let t = Tables::rebuild(&file, &geo, sec)?;
                let count = Self::count_half(&t, &geo);
                (t, count)
            }
        };
        let sec = tables.secondary.len() as u32;
        let verified = (0..verified_len(file.len()))
            .map(|_| AtomicU64::new(0))
            .collect();
        // Empty buckets need no extent learning (see `Accel::new`).
        let accel = crate::chains::Accel::new(geo.primary_buckets(), |g| {
            tables.primary.get(g as usize).is_some_and(|e| e.used == 0)
        });
        let mut inner = Inner {
            reserved: Vec::new(),
            open_hint: vec![NONE; geo.primary_buckets() as usize],
            file,
            sb: sb.clone(),
            tables,
            tag_count,
            verified,
            poisoned: false,
            closed: false,
            fail_after: None,
            recovered,
            durability: Durability::None,
            overlay: HashMap::new(),
            journal: None,
            store_path: path.to_path_buf(),
            sync_hook: None,
            pending: Default::default(),
            counting: true,
            // After a crash, changes not yet merged into the counts are gone.
            counts_stale: recovered,
            next_seq: 0,
            accel,
        };
        if writable {
            // Drop the table image (it goes stale with the first write) and
            // mark the store open: a crash from here on forces a rebuild.
            inner.file.set_len(geo.file_len(sec))?;
            inner
                .verified
                .resize_with(verified_len(inner.file.len()), || AtomicU64::new(0));
            sb.flags &= !FLAG_CLEAN;
            sb.secondary_count = sec;
            sb.table_offset = 0;
            sb.table_len = 0;
            sb.table_crc = 0;
            inner.write_superblock(&sb)?;
            inner.sb = sb;
        }
        let seed = inner.sb.seed;
        Ok(Store {
            inner: RwLock::new(inner),
            counts: Mutex::new(None),
            writer_id: random_u64()?,
            geometry: geo,
            seed,
            path: path.to_path_buf(),
        })
    }

    fn read_tables(file: &MappedFile, sb: &Superblock) -> Option<Tables> {
        let geo = sb.geometry;
        let off = geo.file_len(sb.secondary_count);
        if sb.table_offset != off || off.checked_add(sb.table_len)? > file.len() {
            return None;
        }
        let bytes = file
            .bytes()
            .get(off as usize..(off + sb.table_len) as usize)?;
        if crc32fast::hash(bytes) != sb.table_crc {
            return None;
        }
        Tables::decode(bytes, &geo, sb.secondary_count).ok()
    }

    fn count_half(t: &Tables, geo: &Geometry) -> u64 {
        let mut n = 0u64;
        for g in 0..geo.primary_buckets_per_half {
            let pe = &t.primary[g as usize];
            n += pe.used as u64;
            let mut s = pe.head;
            while s != NONE {
                n += t.secondary[s as usize].used as u64;
                s = t.secondary[s as usize].next;
            }
        }
        n
    }

    fn write(&self) -> Result<RwLockWriteGuard<'_, Inner>> {
        let g = self.inner.write().unwrap_or_else(|p| p.into_inner());
        if !g.file.writable() {
            return Err(Error::ReadOnly);
        }
        if g.poisoned {
            return Err(poisoned_error());
        }
        Ok(g)
    }

    pub(crate) fn read(&self) -> RwLockReadGuard<'_, Inner> {
        read_lock(&self.inner)
    }

    /// Path of the store file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Geometry fixed at create time.
    pub fn geometry(&self) -> Geometry {
        self.geometry
    }

    /// Number of tags stored.
    pub fn len(&self) -> u64 {
        self.read().tag_count
    }

    /// True when no tag is stored.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// True if the last open found an unclean shutdown and rebuilt the tables.
    pub fn recovered_on_open(&self) -> bool {
        self.read().recovered
    }

    /// Inserts a tag; `Ok(false)` if it was already present (nothing changes).
    pub fn insert(&self, tag: &Tag) -> Result<bool> {
        self.insert_with(tag, None)
    }

    /// Inserts a tag; with `Some(Durability::Immediate)` it is durable on
    /// return whatever the store's mode.
    pub fn insert_with(&self, tag: &Tag, durability: Option<Durability>) -> Result<bool> {
        let slot = tag::encode(tag)?;
        let mut inner = self.write()?;
        let changed = inner.insert_encoded(&slot)?;
        if changed {
            inner.count_change(tag, 1);
        }
        inner.after_call(durability)?;
        let merge =
            inner.pending.len(crate::counts::Channel::Own) >= crate::counts::AUTO_MERGE_KEYS;
        drop(inner);
        if merge {
            self.merge_own_counts()?;
        }
        Ok(changed)
    }

    /// Deletes a tag from both halves; `Ok(false)` if it was absent.
    pub fn delete(&self, tag: &Tag) -> Result<bool> {
        self.delete_with(tag, None)
    }

    /// Deletes a tag; with `Some(Durability::Immediate)` it is durable on
    /// return whatever the store's mode.
    pub fn delete_with(&self, tag: &Tag, durability: Option<Durability>) -> Result<bool> {
        let slot = match tag::encode(tag) {
            Ok(s) => s,
            Err(Error::TagTooLarge { .. }) => return Ok(false),
            Err(e) => return Err(e),
        };
        let mut inner = self.write()?;
        let changed = inner.delete_encoded(&slot)?;
        if changed {
            inner.count_change(tag, -1);
        }
        inner.after_call(durability)?;
        let merge =
            inner.pending.len(crate::counts::Channel::Own) >= crate::counts::AUTO_MERGE_KEYS;
        drop(inner);
        if merge {
            self.merge_own_counts()?;
        }
        Ok(changed)
    }

    /// The store's durability mode (not persisted; [`Durability::None`] on open).
    pub fn durability(&self) -> Durability {
        self.read().durability
    }

    /// Changes the durability mode; pending changes are made durable first.
    pub fn set_durability(&self, durability: Durability) -> Result<()> {
        let mut inner = self.write()?;
        if inner.durability == durability {
            return Ok(());
        }
        inner.commit()?;
        inner.checkpoint()?;
        inner.durability = durability;
        Ok(())
    }

    /// Sets a callback run at each durability point (crash-simulation tests).
    #[doc(hidden)]
    pub fn set_sync_hook(&self, hook: Option<SyncHook>) {
        let mut g = self.inner.write().unwrap_or_else(|p| p.into_inner());
        g.sync_hook = hook;
    }

    /// True if the tag is stored.
    pub fn contains(&self, tag: &Tag) -> Result<bool> {
        let Ok(slot) = tag::encode(tag) else {
            return Ok(false);
        };
        let inner = self.read();
        let view =
            tag::decode(&slot).ok_or_else(|| Error::corrupt("encoder produced a bad slot"))?;
        let [(go, ho), _] = inner.keys(&view);
        Ok(inner
            .locate(
                go,
                key_fp(ho),
                tag::tag_hash(self.seed, tag::used_prefix(&slot)),
                &slot,
            )?
            .is_some())
    }

    /// Inserts many tags, taking the write lock once per chunk.
    ///
    /// Stops at the first error; tags before it stay inserted and are counted
    /// in the returned error's companion [`BatchOutcome`].
    pub fn insert_batch<'a>(
        &self,
        tags: impl IntoIterator<Item = &'a Tag>,
    ) -> (BatchOutcome, Result<()>) {
        self.batch(tags, true)
    }

    /// Deletes many tags, taking the write lock once per chunk.
    pub fn delete_batch<'a>(
        &self,
        tags: impl IntoIterator<Item = &'a Tag>,
    ) -> (BatchOutcome, Result<()>) {
        self.batch(tags, false)
    }

    fn batch<'a>(
        &self,
        tags: impl IntoIterator<Item = &'a Tag>,
        insert: bool,
    ) -> (BatchOutcome, Result<()>) {
        const CHUNK: usize = 1024;
        let mut out = BatchOutcome::default();
        let mut it = tags.into_iter().peekable();
        while it.peek().is_some() {
            let mut inner = match self.write() {
                Ok(g) => g,
                Err(e) => return (out, Err(e)),
            };
            for t in it.by_ref().take(CHUNK) {
                let r = match tag::encode(t) {
                    Ok(slot) if insert => inner.insert_encoded(&slot),
                    Ok(slot) => inner.delete_encoded(&slot),
                    Err(Error::TagTooLarge { .. }) if !insert => Ok(false),
                    Err(e) => Err(e),
                };
                match r {
                    Ok(true) => {
                        out.changed += 1;
                        inner.count_change(t, if insert { 1 } else { -1 });
                    }
                    Ok(false) => out.unchanged += 1,
                    Err(e) => {
                        // What was applied before the error stays, durably
                        // in Immediate mode.
                        let _ = inner.after_call(None);
                        return (out, Err(e));
                    }
                }
            }
            if let Err(e) = inner.after_call(None) {
                return (out, Err(e));
            }
            let merge =
                inner.pending.len(crate::counts::Channel::Own) >= crate::counts::AUTO_MERGE_KEYS;
            drop(inner);
            if merge {
                if let Err(e) = self.merge_own_counts() {
                    return (out, Err(e));
                }
            }
        }
        (out, Ok(()))
    }

    /// Free bytes of the store's filesystem, when known.
    pub(crate) fn free_bytes(&self) -> Option<u64> {
        self.read().file.free_bytes()
    }

    /// Inserts tags known to be distinct and absent (maintenance rebuilds).
    pub(crate) fn insert_unique(&self, tags: &[Tag]) -> Result<()> {
        let mut inner = self.write()?;
        for t in tags {
            let slot = tag::encode(t)?;
            inner.insert_slot(&slot, false)?;
        }
        Ok(())
    }

    /// Makes every change so far durable. In [`Durability::OnSync`] this is
    /// the group commit: one journal fsync covers every writer's changes, and
    /// callers that find nothing pending return at once.
    pub fn sync(&self) -> Result<()> {
        let mut g = self.inner.write().unwrap_or_else(|p| p.into_inner());
        if !g.file.writable() {
            return Ok(());
        }
        if g.poisoned {
            return Err(poisoned_error());
        }
        g.commit()
    }

    /// Shuts down cleanly: merges pending counts, flushes, persists the
    /// tables, marks the file clean.
    pub fn close(self) -> Result<()> {
        self.finish_counts()?;
        let mut g = self.inner.write().unwrap_or_else(|p| p.into_inner());
        g.close()
    }

    /// Drops the handle without a clean shutdown, as a crash would (tests).
    #[doc(hidden)]
    pub fn abandon(self) {
        let mut g = self.inner.write().unwrap_or_else(|p| p.into_inner());
        g.closed = true;
    }

    /// Makes the write path fail after `n` more writes, simulating a crash (tests).
    #[doc(hidden)]
    pub fn fail_after_writes(&self, n: Option<u64>) {
        let mut g = self.inner.write().unwrap_or_else(|p| p.into_inner());
        g.fail_after = n;
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        let closed = self.read().closed;
        if !closed {
            let _ = self.finish_counts();
        }
        let g = self.inner.get_mut().unwrap_or_else(|p| p.into_inner());
        // Best effort: errors here cannot be reported; the next open rebuilds.
        let _ = g.close();
    }
}
