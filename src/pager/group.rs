//! Group commit: the journal writes and fsyncs shared by every writer thread.
//!
//! A writer *stages* its changed blocks while it holds the store's lock
//! (cheap: copies into a queue), lets the lock go, and *waits* for its stage
//! number to be durable. The first waiter takes the whole queue, writes it
//! as one journal commit and fsyncs once; writers that staged meanwhile find
//! their number covered and return. The blocks stay in the pager's private
//! copies until a checkpoint.
//!
//! Lock order: the store's lock, then `sync`, then `queue` or the test
//! hook. A
//! thread holding `sync` never waits for the store's lock.

use super::commit::SyncPoint;
use super::journal::{journal_path, starts_with_commit, Change, Journal};
use super::SyncHook;
use crate::error::{Error, Result};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

/// One block staged: its whole image, or its delta or slot operations
/// from the version the journal's earlier entries (or the store file) hold.
pub(super) enum Staged {
    Image(u64, Box<[u8]>),
    Delta(u64, Vec<u8>),
    Ops(u64, Vec<u8>),
}

impl Staged {
    fn change(&self) -> Change<'_> {
        match self {
            Staged::Image(n, img) => Change::Image(*n, img),
            Staged::Delta(n, d) => Change::Delta(*n, d),
            Staged::Ops(n, o) => Change::Ops(*n, o),
        }
    }
}

/// Stage numbers and blocks staged, not yet written to the journal.
#[derive(Default)]
struct Queue {
    last: u64,
    staged: Vec<(u64, Vec<Staged>)>,
}

/// The journal and what it has made durable.
pub(super) struct Syncer {
    pub(super) journal: Option<Journal>,
    /// Every stage number up to here is durable.
    durable: u64,
}

/// The group-commit state shared by a store's writer threads.
pub struct Group {
    store_path: PathBuf,
    seed: u64,
    queue: Mutex<Queue>,
    sync: Mutex<Syncer>,
    /// A journal write failed: nothing more is committed until reopen.
    /// (Atomics, so that stagers never wait on a commit in flight.)
    failed: AtomicBool,
    /// Bytes of commits in the journal's current round.
    journal_len: AtomicU64,
    /// Journal round past which the next stage checkpoints, set by a
    /// test (0: the one the store file's size gives).
    checkpoint_bytes: AtomicU64,
    /// The test hook (locked last).
    hook: Mutex<Option<SyncHook>>,
}

fn guard<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Group {
    /// The group commit of the store at `store_path` with hash `seed`.
    pub fn new(store_path: PathBuf, seed: u64) -> Group {
        Group {
            store_path,
            seed,
            queue: Mutex::new(Queue::default()),
            sync: Mutex::new(Syncer {
                journal: None,
                durable: 0,
            }),
            failed: AtomicBool::new(false),
            journal_len: AtomicU64::new(0),
            checkpoint_bytes: AtomicU64::new(0),
            hook: Mutex::new(None),
        }
    }

    /// Queues `blocks` for the journal; returns their stage number.
    pub(super) fn stage(&self, blocks: Vec<Staged>) -> u64 {
        let mut q = guard(&self.queue);
        q.last += 1;
        let n = q.last;
        q.staged.push((n, blocks));
        n
    }

    /// The store file's path.
    #[cfg(debug_assertions)]
    pub(super) fn store_path(&self) -> &std::path::Path {
        &self.store_path
    }

    /// The store's hash seed.
    #[cfg(debug_assertions)]
    pub(super) fn seed(&self) -> u64 {
        self.seed
    }

    /// The last stage number handed out.
    pub(super) fn last_staged(&self) -> u64 {
        guard(&self.queue).last
    }

    /// Returns once stage `n` is durable, writing the queue as one commit
    /// if no other thread has. Called without the store's lock held, or with it.
    pub fn wait(&self, n: u64) -> Result<()> {
        let mut s = guard(&self.sync);
        if s.durable >= n {
            return Ok(());
        }
        if self.failed.load(Ordering::Relaxed) {
            return Err(Error::Poisoned);
        }
        let batch = std::mem::take(&mut guard(&self.queue).staged);
        let Some(top) = batch.last().map(|b| b.0) else {
            return Err(Error::corrupt(format!("stage {n} was never queued")));
        };
        // Every stage's entries in stage order: a block staged twice has
        // two deltas, each holding its own stage's change.
        let entries = batch.iter().flat_map(|(_, b)| b.iter().map(Staged::change));
        if let Err(e) = self.append(&mut s, entries.collect()) {
            self.failed.store(true, Ordering::Relaxed);
            return Err(e);
        }
        self.note_len(&s);
        s.durable = top;
        self.hook(SyncPoint::JournalSynced);
        Ok(())
    }

    /// Appends one commit of `changes` through `s` (opening the journal first).
    pub(super) fn append(&self, s: &mut Syncer, changes: Vec<Change<'_>>) -> Result<()> {
        self.journal(s)?.append(changes.into_iter())
    }

    /// The journal through `s`, opened first if it is not yet.
    fn journal<'s>(&self, s: &'s mut Syncer) -> Result<&'s mut Journal> {
        let j = match s.journal.take() {
            Some(j) => j,
            None => {
                // Open already replayed any pending journal; what is left is
                // stale (another store's, or one left before `create`): start over.
                let mut j = Journal::open(&self.store_path, self.seed)?;
                if starts_with_commit(&journal_path(&self.store_path)) {
                    j.reset()?;
                }
                j
            }
        };
        Ok(s.journal.insert(j))
    }

    /// Opens the journal and writes its first zeros ahead now (a store
    /// switching to a journaled mode), so the first commit pays for neither.
    pub(super) fn prepare_journal(&self) -> Result<()> {
        let mut s = self.lock_sync();
        self.journal(&mut s)?.prepare()
    }

    /// The journal, held: no commit is in flight until the guard goes.
    pub(super) fn lock_sync(&self) -> MutexGuard<'_, Syncer> {
        guard(&self.sync)
    }

    /// Bytes of commits in the journal's current round.
    pub(super) fn journal_len(&self) -> u64 {
        self.journal_len.load(Ordering::Relaxed)
    }

    /// The journal round a test set for checkpoints, if any.
    pub(super) fn checkpoint_bytes(&self) -> Option<u64> {
        Some(self.checkpoint_bytes.load(Ordering::Relaxed)).filter(|&b| b > 0)
    }

    /// Sets the journal size past which the next stage checkpoints (tests).
    #[cfg(feature = "test-hooks")]
    pub(super) fn set_checkpoint_bytes(&self, bytes: u64) {
        self.checkpoint_bytes.store(bytes, Ordering::Relaxed);
    }

    /// Records the journal's length after a write or reset through `s`.
    pub(super) fn note_len(&self, s: &Syncer) {
        let len = s.journal.as_ref().map_or(0, |j| j.len());
        self.journal_len.store(len, Ordering::Relaxed);
    }

    /// Reports a durability point to the test hook.
    pub(super) fn hook(&self, p: SyncPoint) {
        if let Some(h) = guard(&self.hook).as_mut() {
            h(p);
        }
    }

    /// Sets the callback run at each durability point (crash-simulation tests).
    #[cfg(feature = "test-hooks")]
    pub(super) fn set_hook(&self, hook: Option<SyncHook>) {
        *guard(&self.hook) = hook;
    }

    /// Marks the group failed: nothing more is committed until reopen.
    pub(super) fn set_failed(&self) {
        self.failed.store(true, Ordering::Relaxed);
    }

    /// True once a journal write failed.
    pub(super) fn failed(&self) -> bool {
        self.failed.load(Ordering::Relaxed)
    }
}
