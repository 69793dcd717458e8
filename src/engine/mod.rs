//! The engine: the [`Store`] handle and its lifecycle (create, open with
//! recovery, close), the write path, FIND, and the counters' wiring.
//!
//! A store is one [`State`] behind a read-write lock: many FINDs share it,
//! one writer at a time holds it. The counters' merged state lives beside it
//! under its own mutex.

mod bulk;
mod counting;
mod find;
mod grow;
mod hot;
mod key_pages;
mod keymatch;
mod long;
mod ops;
mod options;
mod recovery;
mod state;
mod write;

pub use find::{Find, Tags};
pub use grow::SPLIT_FILL;
pub use hot::HotUsage;
pub use key_pages::KeyPage;
pub(crate) use ops::BULK_ROUND_MAX;
pub use options::{BatchOutcome, CreateOptions, OpenOptions};
pub(crate) use state::State;

use crate::counts::{Counts, CountsFile, Feed, Loaded};
use crate::error::{Error, Result};
use crate::format::{
    Geometry, Intent, IntentOp, Layout, Superblock, BLOCK_SIZE, FLAG_HALF_ONLY, FLAG_STRINGS,
    INTENT_BLOCK, SUPERBLOCK_BLOCK,
};
use crate::index::{Index, Tables};
use crate::pager::{
    is_no_space, journal_images, journal_pending, journal_superblock, replay_journal, Group,
    MappedFile, Pager,
};
use crate::side::{remove_if_present, resolve, temporaries};
use crate::strings::{strings_path, Strings};
use foldhash::{HashMap, HashMapExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::sync::{Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::Duration;

/// An open tag store. `Send + Sync`: share it with `Arc` across threads.
pub struct Store {
    state: RwLock<State>,
    /// Merged counts and the cloud, loaded on first use.
    counts: Arc<Mutex<Option<Loaded>>>,
    /// Threads applying bulk calls' own counts merges (joined at drop).
    merger: Mutex<Vec<std::thread::JoinHandle<()>>>,
    /// This handle's writer id for increments (random per open).
    writer_id: u64,
    /// FINDs and exports in progress (shared with the state's split check).
    readers: Arc<AtomicUsize>,
    /// The journal's group commit (shared with the pager).
    group: Arc<Group>,
    /// Copies of hot keys' FIND results (shared with the state).
    hot: Arc<hot::Hot>,
    seed: u64,
    path: PathBuf,
    /// Stale temporaries this handle's open removed (reported by `check`).
    removed: Vec<PathBuf>,
    /// Insert batches from this many tags take the bulk path (`bulk.rs`).
    bulk_min: AtomicUsize,
    /// Most tags a bulk round holds.
    bulk_round_max: AtomicUsize,
}

fn random_u64() -> Result<u64> {
    let mut b = [0u8; 8];
    getrandom::fill(&mut b)
        .map_err(|e| Error::io("drawing random bytes", std::io::Error::other(e.to_string())))?;
    Ok(u64::from_le_bytes(b))
}

impl Store {
    fn from_state(state: State, path: &Path) -> Result<Store> {
        let seed = state.index.seed();
        let readers = state.readers.clone();
        let group = state.pager.group();
        let hot = state.hot.clone();
        Ok(Store {
            state: RwLock::new(state),
            counts: Arc::new(Mutex::new(None)),
            merger: Mutex::new(Vec::new()),
            writer_id: random_u64()?,
            readers,
            group,
            hot,
            seed,
            path: path.to_path_buf(),
            removed: Vec::new(),
            bulk_min: AtomicUsize::new(ops::BULK_MIN),
            bulk_round_max: AtomicUsize::new(ops::BULK_ROUND_MAX),
        })
    }

    /// Creates a new, empty store file at `path`; fails if the path exists.
    pub fn create(path: impl AsRef<Path>, options: &CreateOptions) -> Result<Store> {
        Self::create_as(path.as_ref(), options, Layout::v2, 0)
    }

    /// Creates a half-only store: each tag may be stored in its object
    /// half, its subject half, or both, written with
    /// [`Store::insert_half`] and [`Store::delete_half`] (a node behind a
    /// proxy, which routes the two halves of a tag to different nodes).
    pub fn create_half_only(path: impl AsRef<Path>, options: &CreateOptions) -> Result<Store> {
        Self::create_as(path.as_ref(), options, Layout::v2, FLAG_HALF_ONLY)
    }

    /// True when the store's strings file (`STORE.strings`, the strings of
    /// tags longer than a slot) is lost or damaged, so some of its long
    /// tags may be unreadable (`check` names them, an export with
    /// [`Store::salvaged_tags`] keeps the rest).
    pub fn strings_unsure(&self) -> bool {
        self.read().strings.unsure()
    }

    /// True for a store made by [`Store::create_half_only`].
    pub fn is_half_only(&self) -> bool {
        self.read().half_only()
    }

    /// Creates a store in format 1 (fixed geometry, never splits): the
    /// format older files have, for tests of reading and writing them.
    #[cfg(feature = "test-hooks")]
    pub fn create_format1(path: impl AsRef<Path>, options: &CreateOptions) -> Result<Store> {
        Self::create_as(path.as_ref(), options, Layout::v1, 0)
    }

    fn create_as(
        path: &Path,
        options: &CreateOptions,
        layout: fn(Geometry) -> Layout,
        flags: u32,
    ) -> Result<Store> {
        let geometry = options.checked_geometry()?;
        let seed = match options.seed {
            Some(s) => s,
            None => random_u64()?,
        };
        let layout = layout(geometry);
        let path = &crate::side::resolve_new(path)?;
        let file = MappedFile::create(path, layout.file_len(0))?;
        Self::create_in(file, path, layout, seed, flags)
    }

    /// Removes what a failed `create` made (called while its lock is held,
    /// so no other process opens the half-made store meanwhile).
    fn remove_made(path: &Path) {
        let _ = std::fs::remove_file(path);
        let _ = std::fs::remove_file(crate::counts::counts_path(path));
        let _ = std::fs::remove_file(strings_path(path));
        for t in temporaries(path) {
            let _ = std::fs::remove_file(t);
        }
    }

    fn create_in(
        file: MappedFile,
        path: &Path,
        layout: Layout,
        seed: u64,
        flags: u32,
    ) -> Result<Store> {
        // No store existed at this path, so a journal beside it is stale.
        for (side, what) in [
            (crate::pager::journal_path(path), "stale journal"),
            (strings_path(path), "stale strings file"),
        ] {
            if let Err(e) = remove_if_present(&side, what) {
                Self::remove_made(path);
                return Err(e);
            }
        }
        let sb = Superblock {
            layout,
            secondary_count: 0,
            flags,
            seed,
            tag_count: 0,
            table_offset: 0,
            table_len: 0,
            table_crc: 0,
        };
        let mut state = State {
            pager: Pager::new(file, layout, seed, path),
            index: Index::new(Tables::new(&layout, 0), layout, seed),
            sb: sb.clone(),
            tag_count: 0,
            feed: Feed::new(false),
            recovered: false,
            closed: false,
            readers: Arc::new(AtomicUsize::new(0)),
            strings: Strings::empty(path, true),
            hot: Arc::new(hot::Hot::new(hot::DEFAULT_BYTES)),
        };
        let made = state.pager.write_superblock(&sb).and_then(|()| {
            // Counts start empty and exact, so the first close merges instead of scanning.
            CountsFile::create(path, seed, &Counts::from_counts(Default::default()))
        });
        if let Err(e) = made {
            // The file is ours: a create that fails leaves nothing behind.
            state.closed = true;
            Self::remove_made(path);
            return Err(e);
        }
        Self::from_state(state, path).inspect_err(|_| Self::remove_made(path))
    }

    /// Opens an existing store for reading and writing (exclusive lock).
    pub fn open(path: impl AsRef<Path>) -> Result<Store> {
        Self::open_with_options(path, &OpenOptions::default())
    }

    /// Opens an existing store as `options` say (read-only or not, waiting
    /// for a lock or not). A symlink is followed: the store and its side
    /// files are used where the target lies.
    pub fn open_with_options(path: impl AsRef<Path>, options: &OpenOptions) -> Result<Store> {
        let path = resolve(path.as_ref())?;
        Self::open_with(&path, !options.read_only, options.wait, false)
    }

    /// Opens an existing store for reading only (shared lock; many readers).
    ///
    /// Nothing is ever written: a store left unclean by a crash is recovered
    /// in memory (journal replayed, interrupted operation redone, a bucket
    /// split or bulk round finished, tables rebuilt) and served from that
    /// view; the next writable open recovers it on disk. Finishing a split
    /// or bulk round that would copy more than 1 GiB of blocks is refused
    /// ([`Error::SplitPending`], [`Error::BulkPending`]).
    pub fn open_read_only(path: impl AsRef<Path>) -> Result<Store> {
        Self::open_with_options(
            path,
            &OpenOptions {
                read_only: true,
                wait: None,
            },
        )
    }

    /// Opens a damaged store for reading only, to get out what is readable
    /// ([`Store::salvaged_tags`]).
    ///
    /// A block that fails its checksum, or does not belong to the bucket
    /// it lies in, is read for what of it is sound (the slots that decode
    /// and match their fingerprints; nothing of a block whose header is
    /// gone) instead of failing the open or the read;
    /// [`Store::unreadable_blocks`] lists them. A split or bulk round a
    /// crash interrupted is read as it lies (a tag caught between two
    /// buckets may come twice). Nothing is ever written
    /// (`options.read_only` is implied; `options.wait` applies).
    pub fn open_salvage(path: impl AsRef<Path>, options: &OpenOptions) -> Result<Store> {
        let path = resolve(path.as_ref())?;
        Self::open_with(&path, false, options.wait, true)
    }

    fn open_with(
        path: &Path,
        writable: bool,
        wait: Option<Duration>,
        salvage: bool,
    ) -> Result<Store> {
        let mut file = MappedFile::open(path, writable, wait)?;
        let mut sb = match Superblock::decode(file.block(SUPERBLOCK_BLOCK)?) {
            Ok(Some(sb)) => sb,
            // A power cut after a commit applied the superblock (a split
            // changed it) can garble it; the journal holds the image.
            r @ (Ok(None) | Err(Error::Corrupt(_))) => match journal_superblock(path)? {
                Some(sb) => sb,
                None => {
                    r?;
                    return Err(Error::NotAStore(path.to_path_buf()));
                }
            },
            Err(e) => return Err(e),
        };
        let mut geo = sb.layout;
        // A read-only open never writes: what recovery would write (the
        // journal's images, the redone intent) is kept in memory instead.
        let mut overlay = HashMap::new();
        let mut blocks = file.len() / BLOCK_SIZE as u64;
        let replayed = journal_pending(path);
        if replayed {
            if writable {
                replay_journal(&mut file, &geo, path, sb.seed)?;
            } else {
                (overlay, blocks) = journal_images(&file, &geo, path, sb.seed)?;
            }
            // A split commits the superblock with its blocks: take the
            // growth state the journal left.
            let img = match overlay.get(&SUPERBLOCK_BLOCK) {
                Some(b) => &b[..],
                None => file.block(SUPERBLOCK_BLOCK)?,
            };
            if let Some(s) = Superblock::decode(img)? {
                sb.layout = s.layout;
                geo = s.layout;
            }
        }
        // Checked once the journal is replayed: a power cut may have lost a
        // growth of the file that the journal restores.
        let have = file.len().max(blocks * BLOCK_SIZE as u64);
        let base = geo.file_len(0);
        if have < base {
            return Err(Error::corrupt(format!(
                "file is truncated: {} bytes, its geometry needs at least {base}",
                have
            )));
        }
        // Secondary buckets are never removed while a store is open, so the
        // count recorded at the last open (or clean close) is a lower bound.
        // (A missing table image is no loss: the tables are rebuilt.)
        let need = geo.file_len(sb.secondary_count);
        if have < need {
            return Err(Error::corrupt(format!(
                "file is truncated: {} bytes, but the superblock's {} secondary buckets need {need}",
                have,
                sb.secondary_count,
            )));
        }
        // The operation an unclean shutdown left recorded, if any.
        let pending = match sb.clean() {
            true => None,
            false => Intent::decode(file.block(INTENT_BLOCK)?),
        };
        let split = pending
            .as_ref()
            .filter(|i| i.op == IntentOp::Split)
            .map(|i| i.object_identity);
        if let Some((old, level)) = split.filter(|_| !salvage) {
            // Before any repair writes: a record that does not fit is refused.
            grow::check_split_intent(&geo, old, level)?;
        }
        let bulk = pending.is_some_and(|i| i.op == IntentOp::Bulk);
        // A read-only open finishes a split or a bulk round in memory
        // (below); a salvage reads such a store as it lies: a tag caught
        // between two buckets may come twice, none is missed.
        let in_memory = !writable && !salvage;
        let split_in_memory = split.filter(|_| in_memory);
        // A salvage reads every block (its damaged ones repaired in memory),
        // so it rebuilds the tables even after a clean close.
        let persisted = if sb.clean() && !replayed && !salvage {
            recovery::read_tables(&file, &sb)
        } else {
            None
        };
        // Where the store's blocks end (what the file holds past it, a
        // writable open cuts off).
        let mut store_end = blocks;
        let recovered = persisted.is_none();
        let mut pager;
        let tables = match persisted {
            Some(t) => {
                pager = Pager::new(file, geo, sb.seed, path);
                t
            }
            None => {
                let sec = recovery::secondary_count(&file, &sb, blocks);
                store_end = geo.file_len(sec) / BLOCK_SIZE as u64;
                if writable {
                    if split.is_some() {
                        recovery::repair_split(&mut file, &geo, sb.seed, blocks)?;
                    }
                    recovery::recover_intent(&mut file, &geo, sb.seed)?;
                    pager = Pager::new(file, geo, sb.seed, path);
                } else {
                    let mut damaged = Vec::new();
                    if salvage {
                        let end = geo.file_len(sec) / BLOCK_SIZE as u64;
                        for (n, img) in recovery::salvage_scan(&file, &overlay, &geo, sb.seed, end)?
                        {
                            overlay.insert(n, img);
                            damaged.push(n);
                        }
                    }
                    if split_in_memory.is_some() {
                        // The torn blocks the writable open repairs on disk
                        // (of the file's blocks that belong to the store).
                        let end = store_end.min(file.len() / BLOCK_SIZE as u64);
                        for (n, img) in recovery::repaired_split_images(&file, &geo, sb.seed, end)?
                        {
                            overlay.entry(n).or_insert(img);
                        }
                    }
                    for (n, img) in recovery::intent_redo(&file, &overlay, &geo, sb.seed)? {
                        overlay.insert(n, img);
                    }
                    pager = Pager::new(file, geo, sb.seed, path).with_recovered(overlay, blocks);
                    if salvage {
                        pager = pager.with_salvage(damaged);
                    }
                }
                if salvage {
                    let (t, bad) = Tables::rebuild_salvage(&pager, &geo, sec)?;
                    pager.hide(&bad);
                    t
                } else {
                    Tables::rebuild(&pager, &geo, sec)?
                }
            }
        };
        let index = Index::new(tables, geo, sb.seed);
        let tag_count = if recovered {
            index.count_stored(sb.flags & FLAG_HALF_ONLY != 0)
        } else {
            sb.tag_count
        };
        // The strings of long tags: a salvage reads what it can.
        let mut strings = match Strings::load(path, writable) {
            Ok(s) => s,
            Err(_) if salvage => Strings::empty(path, false),
            Err(e) => return Err(e),
        };
        if sb.flags & FLAG_STRINGS != 0 && strings.is_empty() {
            // The flag is set only once a string is durable: the file was
            // lost (or emptied), and a new one must not hide that.
            strings.mark_lost();
        }
        let mut state = State {
            strings,
            pager,
            index,
            sb,
            tag_count,
            // After a crash, changes not yet merged into the counts are gone.
            feed: Feed::new(recovered),
            recovered,
            closed: false,
            readers: Arc::new(AtomicUsize::new(0)),
            hot: Arc::new(hot::Hot::new(hot::DEFAULT_BYTES)),
        };
        if let Some((old, level)) = split_in_memory {
            let refused = Error::SplitPending(path.to_path_buf());
            state.redo_in_memory(store_end, refused, |s| s.redo_split(old, level))?;
        }
        if bulk && in_memory {
            let refused = Error::BulkPending(path.to_path_buf());
            state.redo_in_memory(store_end, refused, State::redo_bulk)?;
        }
        if writable {
            state.mark_open()?;
            // The flag of a store whose strings file outlived a superblock
            // a crash rolled back.
            state.mark_strings()?;
            if let Some((old, level)) = split {
                state.redo_split(old, level)?;
                // A tag caught in both chains was counted twice.
                state.tag_count = state.index.count_stored(state.half_only());
            }
            if bulk {
                state.redo_bulk()?;
                state.tag_count = state.index.count_stored(state.half_only());
            }
        }
        let mut store = Self::from_state(state, path)?;
        if writable {
            // Under the exclusive lock nothing else can be writing these:
            // they are leftovers of a killed run.
            for t in temporaries(path) {
                if t.exists() {
                    remove_if_present(&t, "stale temporary")?;
                    store.removed.push(t);
                }
            }
            // A journal with no commit to replay (reset by a checkpoint, then
            // a crash) is written ahead and may be megabytes: give it back.
            let j = crate::pager::journal_path(path);
            if j.exists() && !journal_pending(path) {
                remove_if_present(&j, "emptied journal")?;
                store.removed.push(j);
            }
        }
        Ok(store)
    }

    /// The state, for reading.
    pub(crate) fn read(&self) -> RwLockReadGuard<'_, State> {
        self.state.read().unwrap_or_else(|p| p.into_inner())
    }

    /// The state, for writing, whatever a failed write left behind.
    fn lock(&self) -> RwLockWriteGuard<'_, State> {
        self.state.write().unwrap_or_else(|p| p.into_inner())
    }

    /// The state, for a write: refused on a read-only or poisoned handle.
    fn write(&self) -> Result<RwLockWriteGuard<'_, State>> {
        let g = self.lock();
        if !g.pager.writable() {
            return Err(Error::ReadOnly);
        }
        if g.pager.poisoned() {
            return Err(Error::Poisoned);
        }
        Ok(g)
    }

    /// Path of the store file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The bucket geometry now (primary buckets per half grow with the store).
    pub fn geometry(&self) -> Geometry {
        self.read().index.geometry().geometry()
    }

    /// The store's hash seed.
    pub(crate) fn seed(&self) -> u64 {
        self.seed
    }

    /// Number of tags stored.
    pub fn len(&self) -> u64 {
        self.read().tag_count
    }

    /// True when no tag is stored.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Stale temporaries of a killed run that this handle's open removed.
    pub(crate) fn removed_temporaries(&self) -> &[PathBuf] {
        &self.removed
    }

    /// True if the last open found an unclean shutdown and rebuilt the tables.
    pub fn recovered_on_open(&self) -> bool {
        self.read().recovered
    }

    /// Shuts down cleanly: merges pending counts, flushes, persists the
    /// tables, marks the file clean.
    pub fn close(self) -> Result<()> {
        if let Err(e) = self.finish_counts() {
            // Counts of this store's own tags that miss a merge are rebuilt
            // from the tags on next use: a full disk must not fail the close.
            if !(is_no_space(&e) && self.counts_own_only()) {
                return Err(e);
            }
            // Drop the counts file (unlinking needs no space): the next use
            // rebuilds the counts from the tags, even where the missed
            // changes cancel out in the total.
            let _ = std::fs::remove_file(crate::counts::counts_path(&self.path));
        }
        self.lock().close()
    }

    /// Drops the handle without a clean shutdown, as a crash would.
    pub(crate) fn abandon_now(self) {
        self.lock().closed = true;
    }

    /// Drops the handle without a clean shutdown, as a crash would (tests).
    #[cfg(feature = "test-hooks")]
    pub fn abandon(self) {
        self.abandon_now()
    }

    /// Makes the write path fail after `n` more writes, simulating a crash (tests).
    #[cfg(feature = "test-hooks")]
    pub fn fail_after_writes(&self, n: Option<u64>) {
        self.lock().pager.fail_after_writes(n);
    }

    /// Sets a callback run at each durability point (crash-simulation tests).
    #[cfg(feature = "test-hooks")]
    pub fn set_sync_hook(&self, hook: Option<crate::pager::SyncHook>) {
        self.lock().pager.set_sync_hook(hook);
    }

    /// Sets the batch size from which `insert_batch` takes the bulk path
    /// (16,384) and the private copies past which it writes back (4,096),
    /// so tests reach both with small batches.
    #[cfg(feature = "test-hooks")]
    pub fn set_bulk_limits(&self, min_tags: usize, flush_blocks: usize) {
        self.bulk_min.store(min_tags, Ordering::Relaxed);
        self.lock().pager.set_bulk_flush_blocks(flush_blocks);
    }

    /// Bytes of the file a scan of the whole store asked the kernel to
    /// read ahead so far (whitebox tests).
    #[cfg(feature = "test-hooks")]
    pub fn read_ahead_bytes(&self) -> u64 {
        self.read().pager.read_ahead_bytes()
    }

    /// Long chains (both halves) that have a tag map (tests).
    #[cfg(feature = "test-hooks")]
    pub fn tag_maps(&self) -> usize {
        self.read().index.accel.tag_maps()
    }

    /// Sets the most tags a bulk round holds (4,194,304), so tests split
    /// small batches into rounds.
    #[cfg(feature = "test-hooks")]
    pub fn set_bulk_round_max(&self, tags: usize) {
        self.bulk_round_max.store(tags.max(1), Ordering::Relaxed);
    }

    /// Sets the journal round past which a commit checkpoints, so crash
    /// tests reach one quickly (0: the default, four times the store file
    /// within 64–256 MB).
    #[cfg(feature = "test-hooks")]
    pub fn set_checkpoint_bytes(&self, bytes: u64) {
        self.lock().pager.set_checkpoint_bytes(bytes);
    }
}

/// A FIND or export in progress (splits wait while any is).
pub(crate) struct Reading<'s>(&'s AtomicUsize);

impl<'s> Reading<'s> {
    /// Registers a reader of `store` until dropped.
    pub(crate) fn new(store: &'s Store) -> Self {
        store.readers.fetch_add(1, Ordering::SeqCst);
        Reading(&store.readers)
    }
}

impl Drop for Reading<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        self.join_mergers();
        let closed = self.read().closed;
        if !closed {
            let _ = self.finish_counts();
        }
        // A background fold of the counts (its thread and its temporary)
        // ends before the store's lock is let go: the next writable open
        // must not find it running and take it for a stale temporary.
        drop(self.counts.lock().unwrap_or_else(|p| p.into_inner()).take());
        let g = self.state.get_mut().unwrap_or_else(|p| p.into_inner());
        // Best effort: errors here cannot be reported; the next open rebuilds.
        let _ = g.close();
    }
}
