//! Tag usage counters and the tag cloud, kept current from merged increments
//! (after the tag-cloud increment design: in-memory increments, merged in
//! batches, exactly once, one new version per merge).
//!
//! Counts are kept per `(relationship, subject)`: how many objects carry it.
//! They live in `STORE.counts`, an append-only file of CRC-framed records:
//! a snapshot, then one record per merge. A merge is one record appended and
//! fsynced, so after a crash the counts are those of a whole number of
//! merges; a torn last record is dropped. See DESIGN.md §8 for the layout.
//!
//! Nothing here knows the store: the engine's write path feeds [`Feed`],
//! and the engine hands these types what they need (paths, tag counts, a
//! scan of the tags) when it asks for counts.

mod append;
mod fold;
mod increment;
mod log;
mod model;
mod pending;

pub use append::{append_own, cloud_unloaded, count_unloaded};
pub use fold::fold_path;
#[cfg(feature = "test-hooks")]
pub use fold::hold_counts_folds;
pub use increment::{CloudEntry, Increment, IncrementId, MergeOutcome};
pub use log::{counts_path, CountsFile};
pub use model::Counts;
pub use pending::{Channel, Pending, SharedDeltas};

use crate::error::Result;
use crate::format::Tag;
use std::path::Path;

/// While set, a bulk call's counts merge thread waits before it starts
/// (tests: the next user of the counts must finish the merge itself).
#[cfg(feature = "test-hooks")]
static HOLD_MERGES: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Makes bulk calls' background counts merges wait before they start, or lets them go (tests).
#[cfg(feature = "test-hooks")]
pub fn hold_counts_merges(hold: bool) {
    HOLD_MERGES.store(hold, std::sync::atomic::Ordering::SeqCst);
}

/// Waits while [`hold_counts_merges`] holds background merges (tests).
pub fn wait_if_merges_held() {
    #[cfg(feature = "test-hooks")]
    while HOLD_MERGES.load(std::sync::atomic::Ordering::SeqCst) {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

/// Distinct pending keys past which a handle merges its own increment.
pub const AUTO_MERGE_KEYS: usize = 100_000;

/// What the write path feeds as tags change: this handle's pending deltas.
#[derive(Debug)]
pub struct Feed {
    /// Count deltas of this handle's changes, not yet merged (own channel) or shipped (outbox).
    pub pending: Pending,
    /// Whether INSERT/DELETE feed `pending`.
    pub counting: bool,
    /// A change was made with counting off (or lost in a crash): persisted counts are stale.
    pub stale: bool,
    /// Next increment sequence number.
    pub next_seq: u64,
}

impl Feed {
    /// A feed with counting on; `stale` when changes may have been missed.
    pub fn new(stale: bool) -> Feed {
        Feed {
            pending: Pending::default(),
            counting: true,
            stale,
            next_seq: 0,
        }
    }

    /// Records that tag `t` was inserted (`d` = 1) or deleted (`d` = -1).
    #[inline]
    pub fn change(&mut self, t: &Tag, d: i64) {
        self.change_key(&t.relationship, &t.subject, d);
    }

    /// Records `d` tags of (relationship, subject) inserted (or deleted, `d` < 0).
    #[inline]
    pub fn change_key(&mut self, relationship: &str, subject: &str, d: i64) {
        if self.counting {
            self.pending.add(relationship, subject, d);
        } else {
            self.stale = true;
        }
    }

    /// True when this handle should merge its own pending changes now.
    pub fn wants_merge(&self) -> bool {
        self.pending.len(Channel::Own) >= AUTO_MERGE_KEYS
    }
}

/// Counts in memory plus their file (absent for read-only handles that rebuilt).
pub struct Loaded {
    /// The merged counts.
    pub counts: Counts,
    /// Their file, when writable.
    pub file: Option<CountsFile>,
    /// Increments queued before a merge.
    pub threshold: usize,
    /// A handle's own merge taken from its pending changes but not yet
    /// applied (a bulk call's, finished on another thread or by the next
    /// user of the counts).
    pub parked: Option<(IncrementId, SharedDeltas)>,
}

impl Loaded {
    /// Merges every queued increment as one version; folds the log when it has grown.
    pub fn merge(&mut self, store: &Path, own_writer: u64) -> Result<MergeOutcome> {
        let Some(file) = self.file.as_mut() else {
            return Err(crate::Error::ReadOnly);
        };
        let out = self.counts.merge_queue(file, own_writer)?;
        file.fold_if_grown(store, &self.counts)?;
        Ok(out)
    }

    /// Applies the parked own merge, if one waits. If it fails, its changes
    /// stay queued for the next merge (see [`Loaded::merge_own`]).
    pub fn complete_parked(&mut self, store: &Path, own_writer: u64) -> Result<()> {
        match self.parked.take() {
            Some((id, deltas)) => self.merge_own(store, own_writer, id, deltas).map(|_| ()),
            None => Ok(()),
        }
    }

    /// Waits for a background fold of the file, if one runs, and swaps it
    /// in (at close: the next load then reads one snapshot, not the log).
    pub fn settle(&mut self, store: &Path) -> Result<()> {
        match self.file.as_mut() {
            Some(f) => f.finish_fold(store, true),
            None => Ok(()),
        }
    }

    /// Merges a handle's own changes as increment `id`, one version (with
    /// whatever is queued, if anything is); folds the log when it has grown.
    /// If the merge fails, the changes stay queued for the next one.
    pub fn merge_own(
        &mut self,
        store: &Path,
        own_writer: u64,
        id: IncrementId,
        deltas: SharedDeltas,
    ) -> Result<MergeOutcome> {
        let owned = |d: &SharedDeltas| Increment {
            id,
            deltas: d
                .iter()
                .map(|(r, s, n)| (r.to_string(), s.to_string(), *n))
                .collect(),
        };
        if self.counts.queued() > 0 {
            self.counts.submit(owned(&deltas));
            return self.merge(store, own_writer);
        }
        let Some(file) = self.file.as_mut() else {
            return Err(crate::Error::ReadOnly);
        };
        match self.counts.merge_own(file, id, &deltas) {
            Ok(out) => {
                file.fold_if_grown(store, &self.counts)?;
                Ok(out)
            }
            Err(e) => {
                self.counts.submit(owned(&deltas));
                Err(e)
            }
        }
    }
}
