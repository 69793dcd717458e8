//! The counters' wiring: the [`Store`] methods that load, merge and read
//! the counts, handing the counts module what it needs of the store.

use super::state::State;
use super::Store;
use crate::counts::{
    counts_path, Channel, CloudEntry, Counts, CountsFile, Increment, IncrementId, Loaded,
    MergeOutcome, SharedDeltas,
};
use crate::error::{Error, Result};
use crate::format::Half;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

/// Most pending keys merged without loading the counts: a larger merge
/// (a bulk load's or delete's) loads them once and later merges apply in
/// memory. Appended blindly, each merge of a 0.5 M-tag npm delete re-read
/// the whole file and the third folded it anyway: 1.56-1.93 s against
/// 1.32-1.80 s.
const APPEND_UNLOADED_KEYS: usize = 16_384;

/// The tags the counters count: subject halves, every tag's unless the
/// store is half-only.
fn counted_tags(g: &State) -> u64 {
    if g.half_only() {
        g.index.count_in(Half::Subject)
    } else {
        g.tag_count
    }
}

/// Counts every tag's (relationship, subject) by reading the store.
fn count_tags(store: &Store) -> Result<HashMap<(String, String), u64>> {
    let mut m: HashMap<(String, String), u64> = HashMap::new();
    for t in store.half_tags(Half::Subject) {
        let t = t?;
        *m.entry((t.relationship, t.subject)).or_default() += 1;
    }
    Ok(m)
}

impl Store {
    /// Loads (or rebuilds) the counts; the caller holds the counts mutex.
    fn ensure_counts<'a>(&self, slot: &'a mut Option<Loaded>) -> Result<&'a mut Loaded> {
        let stale = self.read().feed.stale;
        if stale && slot.as_ref().is_some_and(|l| l.counts.own_only) {
            // Changes were made with counting off (or lost in a crash):
            // counts of our own tags must be rebuilt.
            *slot = None;
        }
        if slot.is_none() {
            let (writable, tags, pending_net) = {
                let g = self.read();
                (
                    g.pager.writable(),
                    counted_tags(&g),
                    g.feed.pending.net(Channel::Own),
                )
            };
            let loaded = CountsFile::load(self.path(), self.seed, writable)?;
            // Ids already merged (or shipped) stay merged across a rebuild.
            let (prev_processed, prev_version) = loaded
                .as_ref()
                .map(|(c, _)| (c.processed.clone(), c.version))
                .unwrap_or_default();
            let usable = loaded.filter(|(c, _)| {
                // Counts of our own tags must add up to the tag count, and
                // must not have lost a record; otherwise rebuild.
                !c.own_only || (!stale && !c.cut && c.total() + pending_net == tags as i64)
            });
            *slot = Some(match usable {
                Some((counts, file)) => Loaded {
                    counts,
                    file: Some(file),
                    threshold: 1,
                    parked: None,
                },
                None => {
                    // The scan reflects every change so far: drop what is
                    // pending for the local merge (the outbox stays).
                    {
                        let mut g = self.lock();
                        g.feed.pending.clear(Channel::Own);
                        g.feed.stale = false;
                    }
                    let mut counts = Counts::from_counts(count_tags(self)?);
                    counts.processed = prev_processed;
                    counts.version = prev_version;
                    let file = if writable {
                        Some(CountsFile::create(self.path(), self.seed, &counts)?)
                    } else {
                        None
                    };
                    Loaded {
                        counts,
                        file,
                        threshold: 1,
                        parked: None,
                    }
                }
            });
        }
        let l = slot
            .as_mut()
            .ok_or_else(|| Error::corrupt("counts failed to load"))?;
        l.complete_parked(self.path(), self.writer_id)?;
        Ok(l)
    }

    /// True unless the loaded counts hold other writers' increments.
    pub(crate) fn counts_own_only(&self) -> bool {
        self.counts_lock()
            .as_ref()
            .is_none_or(|l| l.counts.own_only)
    }

    fn counts_lock(&self) -> std::sync::MutexGuard<'_, Option<Loaded>> {
        self.counts.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn next_id(&self) -> IncrementId {
        let mut g = self.lock();
        let seq = g.feed.next_seq;
        g.feed.next_seq += 1;
        IncrementId {
            writer: self.writer_id,
            seq,
        }
    }

    /// Takes this handle's count changes since the last call as an increment
    /// to ship to a collector; `None` if nothing changed. The store's own
    /// counts already include these changes, and it records the id as merged,
    /// so submitting the increment back here changes nothing.
    pub fn take_increment(&self) -> Result<Option<Increment>> {
        if !self.read().pager.writable() {
            return Ok(None);
        }
        self.merge_own_counts()?;
        let mut slot = self.counts_lock();
        let l = self.ensure_counts(&mut slot)?;
        let deltas = {
            let mut g = self.lock();
            g.feed.pending.take(Channel::Outbox)
        };
        if deltas.is_empty() {
            return Ok(None);
        }
        let id = self.next_id();
        let file = l.file.as_mut().ok_or(Error::ReadOnly)?;
        l.counts.record_shipped(file, vec![id])?;
        Ok(Some(Increment { id, deltas }))
    }

    /// Receives an increment (from another writer, or back from this one);
    /// merges the queue once it holds the merge threshold. Returns false if
    /// the increment was a duplicate or already merged (it is discarded).
    pub fn submit_increment(&self, inc: Increment) -> Result<bool> {
        self.merge_own_counts()?;
        let mut slot = self.counts_lock();
        let l = self.ensure_counts(&mut slot)?;
        let fresh = l.counts.submit(inc);
        if l.counts.queued() >= l.threshold {
            l.merge(self.path(), self.writer_id)?;
        }
        Ok(fresh)
    }

    /// Merges every queued increment now, as one new counts version.
    pub fn merge_increments(&self) -> Result<MergeOutcome> {
        self.merge_own_counts()?;
        let mut slot = self.counts_lock();
        let l = self.ensure_counts(&mut slot)?;
        l.merge(self.path(), self.writer_id)
    }

    /// Sets how many increments are queued before a merge (1 = merge each).
    pub fn set_merge_threshold(&self, n: usize) -> Result<()> {
        let mut slot = self.counts_lock();
        self.ensure_counts(&mut slot)?.threshold = n.max(1);
        Ok(())
    }

    /// Turns counting of this handle's changes on or off (on by default).
    /// Changes made while off make the counts stale; they are then rebuilt
    /// from the tags on next use, and are never shipped.
    pub fn set_counting(&self, on: bool) {
        let mut g = self.lock();
        g.feed.counting = on;
    }

    /// Merges this handle's own pending changes into its counts.
    pub(crate) fn merge_own_counts(&self) -> Result<()> {
        let (pending, stale, writable) = {
            let g = self.read();
            (
                g.feed.pending.len(Channel::Own) > 0,
                g.feed.stale,
                g.pager.writable(),
            )
        };
        if !writable || (!pending && !stale) {
            return Ok(());
        }
        let mut slot = self.counts_lock();
        if slot.is_none() && !stale && self.append_own_unloaded()? {
            return Ok(());
        }
        let l = self.ensure_counts(&mut slot)?;
        let Some((id, deltas)) = self.take_own() else {
            return Ok(());
        };
        l.merge_own(self.path(), self.writer_id, id, deltas)
            .map(|_| ())
    }

    /// This handle's own pending changes, taken, with the increment id
    /// they merge as; `None` when nothing is pending.
    fn take_own(&self) -> Option<(IncrementId, SharedDeltas)> {
        let deltas = self.lock().feed.pending.take_shared(Channel::Own);
        (!deltas.is_empty()).then(|| (self.next_id(), deltas))
    }

    /// [`Store::merge_own_counts`] for a bulk call's many changes: takes
    /// them now and applies them on another thread, so that the call
    /// returns without waiting (the merge was a seventh of a 0.5 M-tag npm
    /// load and delete). Whoever uses the counts next waits for that merge, or
    /// does it (`Loaded::parked`); a crash before it is written leaves
    /// counts that are rebuilt from the tags, as for any unmerged change.
    pub(crate) fn merge_own_counts_later(&self) -> Result<()> {
        let many = {
            let g = self.read();
            !g.feed.stale
                && g.pager.writable()
                && g.feed.pending.len(Channel::Own) > APPEND_UNLOADED_KEYS
        };
        if !many {
            return self.merge_own_counts();
        }
        {
            let mut slot = self.counts_lock();
            let l = self.ensure_counts(&mut slot)?;
            l.parked = self.take_own();
            if l.parked.is_none() {
                return Ok(());
            }
        }
        let (counts, path, writer) = (Arc::clone(&self.counts), self.path.clone(), self.writer_id);
        let mut merger = self.merger.lock().unwrap_or_else(|p| p.into_inner());
        // Threads that have ended need no join (a panic would be ignored).
        merger.retain(|t| !t.is_finished());
        // If no thread can be started, the merge waits for the next user.
        let started = std::thread::Builder::new()
            .name("tagstore-counts-merge".into())
            .spawn(move || {
                crate::counts::wait_if_merges_held();
                let mut slot = counts.lock().unwrap_or_else(|p| p.into_inner());
                if let Some(l) = slot.as_mut() {
                    // A failure leaves the changes queued for the next
                    // merge, which reports it.
                    let _ = l.complete_parked(&path, writer);
                }
            });
        merger.extend(started.ok());
        Ok(())
    }

    /// Waits for the merges started by [`Store::merge_own_counts_later`].
    pub(crate) fn join_mergers(&self) {
        let running = std::mem::take(&mut *self.merger.lock().unwrap_or_else(|p| p.into_inner()));
        for t in running {
            let _ = t.join();
        }
    }

    /// With the counts not loaded in this handle: appends its own pending
    /// changes to the counts file as one merge without loading it, when the
    /// file can take them blindly (`counts/append.rs`). False (pending
    /// changes untouched) when the full merge must run; the caller holds
    /// the counts mutex.
    fn append_own_unloaded(&self) -> Result<bool> {
        let (deltas, tags) = {
            let mut g = self.lock();
            // Large merges (a bulk load's or delete's): loaded once, this
            // and later merges apply in memory.
            if g.feed.stale || g.feed.pending.len(Channel::Own) > APPEND_UNLOADED_KEYS {
                return Ok(false);
            }
            let tags = counted_tags(&g);
            (g.feed.pending.take_shared(Channel::Own), tags)
        };
        if deltas.is_empty() {
            return Ok(true);
        }
        let id = self.next_id();
        let r = crate::counts::append_own(self.path(), self.seed, id, &deltas, tags);
        if !matches!(r, Ok(true)) {
            self.lock().feed.pending.restore(Channel::Own, &deltas);
        }
        r
    }

    /// At close: merge own pending changes, or drop stale own counts.
    pub(crate) fn finish_counts(&self) -> Result<()> {
        let (writable, stale) = {
            let g = self.read();
            (g.pager.writable(), g.feed.stale)
        };
        if !writable {
            return Ok(());
        }
        if stale {
            let on_disk = match CountsFile::load(self.path(), self.seed, false) {
                Ok(found) => found.map(|(c, _)| c),
                Err(_) => None,
            };
            match on_disk {
                // A collector's counts include other writers' increments:
                // kept (and merged below).
                Some(c) if !c.own_only => {}
                // Counts of our own tags that missed changes: the next use
                // rebuilds them from the tags, keeping the ids already
                // merged (an increment this store shipped, sent back, must
                // still change nothing). An empty snapshot keeps them: its
                // total (zero) disagrees with any other tag count, which
                // forces that rebuild.
                Some(c) if !c.processed.is_empty() => {
                    *self.counts_lock() = None;
                    let mut empty = Counts::from_counts(HashMap::new());
                    empty.processed = c.processed;
                    empty.version = c.version;
                    CountsFile::create(self.path(), self.seed, &empty)?;
                    return Ok(());
                }
                // Nothing worth keeping: drop them.
                _ => {
                    *self.counts_lock() = None;
                    return match std::fs::remove_file(counts_path(self.path())) {
                        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(Error::io(
                            format!("removing stale {}", counts_path(self.path()).display()),
                            e,
                        )),
                        _ => Ok(()),
                    };
                }
            }
        }
        self.merge_own_counts()?;
        let mut slot = self.counts_lock();
        if let Some(l) = slot.as_mut() {
            l.complete_parked(self.path(), self.writer_id)?;
            if l.counts.queued() > 0 {
                l.merge(self.path(), self.writer_id)?;
            }
            l.settle(self.path())?;
        }
        Ok(())
    }

    /// Objects carrying `subject` under `relationship`, as of the last merge
    /// (this handle's own changes are merged first).
    pub fn count(&self, subject: &str, relationship: &str) -> Result<u64> {
        self.merge_own_counts()?;
        let mut slot = self.counts_lock();
        if let Some(tags) = self.unloaded_and_quiet(&slot) {
            let path = self.path();
            let n = crate::counts::count_unloaded(path, self.seed, relationship, subject, tags)?;
            if let Some(n) = n {
                return Ok(n.max(0) as u64);
            }
        }
        Ok(self
            .ensure_counts(&mut slot)?
            .counts
            .get(relationship, subject))
    }

    /// The `top` most used subjects of `relationship`, most used first.
    pub fn cloud(&self, relationship: &str, top: usize) -> Result<Vec<CloudEntry>> {
        self.merge_own_counts()?;
        let mut slot = self.counts_lock();
        if let Some(tags) = self.unloaded_and_quiet(&slot) {
            let path = self.path();
            if let Some(c) =
                crate::counts::cloud_unloaded(path, self.seed, relationship, top, tags)?
            {
                return Ok(c);
            }
        }
        Ok(self
            .ensure_counts(&mut slot)?
            .counts
            .cloud(relationship, top))
    }

    /// The tag count the counts must add up to, when they are not loaded
    /// and nothing is pending or stale: a read can then take one pass over
    /// the counts file (if a load would serve it as it is) instead of
    /// loading every count.
    fn unloaded_and_quiet(&self, slot: &Option<Loaded>) -> Option<u64> {
        if slot.is_some() {
            return None;
        }
        let g = self.read();
        let quiet = !g.feed.stale && g.feed.pending.len(Channel::Own) == 0;
        quiet.then(|| counted_tags(&g))
    }

    /// Version of the counts: the number of merges so far.
    pub fn counts_version(&self) -> Result<u64> {
        let mut slot = self.counts_lock();
        Ok(self.ensure_counts(&mut slot)?.counts.version)
    }

    /// Compares persisted counts with counts derived from the tags; one line per fault.
    pub fn check_counts(&self) -> Result<Vec<String>> {
        if let Some(l) = self.counts_lock().as_mut() {
            l.complete_parked(self.path(), self.writer_id)?;
        }
        let Some((c, _)) = CountsFile::load(self.path(), self.seed, false)? else {
            return Ok(Vec::new());
        };
        if !c.own_only {
            return Ok(Vec::new());
        }
        let mut persisted = c.all();
        {
            // Files that would not be served (stale, cut, or a total that
            // disagrees with the tag count) are rebuilt on next use.
            let g = self.read();
            if g.feed.stale
                || c.cut
                || c.total() + g.feed.pending.net(Channel::Own) != g.tag_count as i64
            {
                return Ok(Vec::new());
            }
            // This handle's unmerged changes are not in the file yet.
            for (r, s, d) in g.feed.pending.iter(Channel::Own) {
                *persisted.entry((r.to_owned(), s.to_owned())).or_default() += d;
            }
        }
        persisted.retain(|_, v| *v != 0);
        let derived: BTreeMap<(String, String), i64> = count_tags(self)?
            .into_iter()
            .map(|(k, v)| (k, v as i64))
            .collect();
        if persisted == derived {
            return Ok(Vec::new());
        }
        let mut faults = Vec::new();
        for (k, v) in &derived {
            let p = persisted.get(k).copied().unwrap_or(0);
            if p != *v && faults.len() < 20 {
                faults.push(format!(
                    "counts: <*, {:?}, {:?}> has {v} tags but the counts file says {p}",
                    k.0, k.1
                ));
            }
        }
        for (k, p) in &persisted {
            if !derived.contains_key(k) && faults.len() < 20 {
                faults.push(format!(
                    "counts: <*, {:?}, {:?}> has no tags but the counts file says {p}",
                    k.0, k.1
                ));
            }
        }
        Ok(faults)
    }
}
