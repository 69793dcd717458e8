//! The public write calls: single and batched INSERT and DELETE, `contains`,
//! durability and sync.

use super::{BatchOutcome, State, Store};
use crate::error::{Error, Result};
use crate::format::long::{shrink, stored_slot};
use crate::format::tag::encode;
use crate::format::{Geometry, Half, SlotBytes, Tag};
use crate::pager::Durability;
use std::sync::atomic::Ordering;
use std::sync::RwLockWriteGuard;

/// Insert batches from this many tags take the bulk path (`bulk.rs`).
pub(super) const BULK_MIN: usize = 16_384;

/// Fewest tags a bulk round writes under one hold of the write lock
/// (when the disk has too little room for a larger one).
const BULK_ROUND_MIN: usize = 262_144;

/// Most tags a bulk round holds (32 bytes of memory each plus twice its
/// encoded size: some 120 bytes for 40 bytes of strings).
pub(crate) const BULK_ROUND_MAX: usize = 4_194_304;

impl Store {
    /// Inserts a tag; `Ok(false)` if it was already present (nothing changes).
    pub fn insert(&self, tag: &Tag) -> Result<bool> {
        self.insert_with(tag, None)
    }

    /// Inserts a tag; with `Some(Durability::Immediate)` it is durable on
    /// return whatever the store's mode.
    pub fn insert_with(&self, tag: &Tag, durability: Option<Durability>) -> Result<bool> {
        let stored = shrink(tag)?;
        let slot = encode(&stored)?;
        let mut st = self.write()?;
        if !st.admits(tag, &stored, Half::Object)? {
            return Ok(false);
        }
        let (changed, counted) = st.insert_whole(&slot, true)?;
        self.finish_one(st, tag, counted.then_some(1), durability)?;
        Ok(changed)
    }

    /// Deletes a tag from both halves; `Ok(false)` if it was absent.
    pub fn delete(&self, tag: &Tag) -> Result<bool> {
        self.delete_with(tag, None)
    }

    /// Deletes a tag; with `Some(Durability::Immediate)` it is durable on
    /// return whatever the store's mode.
    pub fn delete_with(&self, tag: &Tag, durability: Option<Durability>) -> Result<bool> {
        let mut st = self.write()?;
        let slots = lookup_slots(&st, tag)?;
        let (changed, counted) = delete_first(&mut st, &slots)?;
        self.finish_one(st, tag, counted.then_some(-1), durability)?;
        Ok(changed)
    }

    /// Ends a single-tag call: feeds the counts with `delta` (when the tag
    /// changed), commits if the call or the mode asks, merges own counts when due.
    fn finish_one(
        &self,
        mut st: RwLockWriteGuard<'_, State>,
        tag: &Tag,
        delta: Option<i64>,
        durability: Option<Durability>,
    ) -> Result<()> {
        if let Some(d) = delta {
            st.feed.change(tag, d);
        }
        let stage = st.after_call_staged(durability)?;
        let merge = st.feed.wants_merge();
        drop(st);
        if let Some(n) = stage {
            self.wait_durable(n)?;
        }
        if merge {
            self.merge_own_counts()?;
        }
        Ok(())
    }

    /// Inserts one half of a tag in a half-only store (the half a proxy
    /// routed here); `Ok(false)` if that half was already stored.
    pub fn insert_half(&self, half: Half, tag: &Tag) -> Result<bool> {
        let stored = shrink(tag)?;
        let slot = encode(&stored)?;
        let mut st = self.half_only_write("insert_half")?;
        if !st.admits(tag, &stored, half)? {
            return Ok(false);
        }
        let changed = st.insert_half_slot(&slot, half)?;
        let counted = (changed && half == Half::Subject).then_some(1);
        self.finish_one(st, tag, counted, None)?;
        Ok(changed)
    }

    /// Deletes one half of a tag in a half-only store; `Ok(false)` if that
    /// half was not stored.
    pub fn delete_half(&self, half: Half, tag: &Tag) -> Result<bool> {
        let mut st = self.half_only_write("delete_half")?;
        let slots = lookup_slots(&st, tag)?;
        let mut changed = false;
        for slot in slots.iter().flatten() {
            changed = st.delete_half_slot(slot, half)?;
            if changed {
                break;
            }
        }
        let counted = (changed && half == Half::Subject).then_some(-1);
        self.finish_one(st, tag, counted, None)?;
        Ok(changed)
    }

    /// The state for a one-half write: refused unless the store is half-only.
    fn half_only_write(&self, call: &str) -> Result<RwLockWriteGuard<'_, State>> {
        let st = self.write()?;
        if !st.half_only() {
            return Err(Error::InvalidArgument(format!(
                "{call} needs a half-only store (made by Store::create_half_only or `tagstore serve --half-only`)"
            )));
        }
        Ok(st)
    }

    /// The store's durability mode (not persisted; [`Durability::None`] on open).
    pub fn durability(&self) -> Durability {
        self.read().pager.durability()
    }

    /// Changes the durability mode; pending changes are made durable first.
    pub fn set_durability(&self, durability: Durability) -> Result<()> {
        let mut st = self.write()?;
        // Strings before the slots that name them.
        st.sync_strings()?;
        st.pager.set_durability(durability)
    }

    /// True if the tag is stored (in a half-only store: in either half).
    pub fn contains(&self, tag: &Tag) -> Result<bool> {
        let st = self.read();
        let slots = lookup_slots(&st, tag)?;
        for slot in slots.iter().flatten() {
            if st.contains(slot, Half::Object)?
                || (st.half_only() && st.contains(slot, Half::Subject)?)
            {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// True if half `half` of the tag is stored (in a store that is not
    /// half-only, the same as [`Store::contains`]).
    pub fn contains_half(&self, half: Half, tag: &Tag) -> Result<bool> {
        let st = self.read();
        let slots = lookup_slots(&st, tag)?;
        for slot in slots.iter().flatten() {
            if st.contains(slot, half)? {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Inserts many tags, taking the write lock once per chunk.
    ///
    /// Stops at the first error; tags before it stay inserted and are counted
    /// in the returned error's companion [`BatchOutcome`]. A tag the store
    /// refuses (oversized, or too long for a format-1 store) stops the
    /// batch at that tag whichever way it is applied (until 2026-11-30 a
    /// bulk round refused its tags before it too: check the outcome).
    ///
    /// A batch of 16,384 tags or more in [`Durability::None`] (with disk
    /// room to spare) is written in one round, or in equal rounds of at
    /// most 4,194,304 tags (about 120 bytes of memory per tag of a round
    /// for 40 bytes of strings), one half of the index at a time in bucket
    /// order (DESIGN.md §5.5). Readers wait while a round holds the write
    /// lock (about 1 s per 500,000 tags): pass smaller batches where that
    /// matters. A round first reads the blocks it will change, so a block
    /// failing its checksum refuses the round before anything is changed
    /// (the handle stays usable); an I/O error in a round leaves the handle unusable
    /// ([`Error::Poisoned`]); reopen the store, which makes each tag of the
    /// round whole. Such a batch's counter changes are merged on another
    /// thread: the next `count`, `cloud` or merge waits for them (and
    /// reports a failure to write them).
    pub fn insert_batch<'a>(
        &self,
        tags: impl IntoIterator<Item = &'a Tag>,
    ) -> (BatchOutcome, Result<()>) {
        self.batch(tags, true)
    }

    /// Deletes many tags, taking the write lock once per chunk (a large
    /// batch as [`Store::insert_batch`] writes one).
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
        let out = BatchOutcome::default();
        let it = tags.into_iter();
        let known = it.size_hint().0;
        if known <= 1024 && known < self.bulk_min.load(Ordering::Relaxed) {
            return self.one_by_one(it, insert, out);
        }
        let all: Vec<&Tag> = it.collect();
        // The growth's I/O error, kept to name the cause should the batch
        // then find the handle unusable.
        let mut cause = None;
        if insert && all.len() > 1024 {
            // Grow once for the tags of the batch that are new, so they are
            // not moved by splits as they arrive.
            let grown = self.write().and_then(|mut st| {
                let extra = st.estimate_new(&all, all.len() as u64)?;
                st.grow_for(extra)
            });
            // Only a head start: where the disk cannot hold the room (a
            // nearly full one), the batch goes on, tag by tag there, and
            // stops at an exact count where the disk does (a review's 20 MB
            // disk took no tag of a 300,000-tag batch, all of it in pieces).
            match grown {
                Err(e @ Error::Io { .. }) => cause = Some(e),
                Err(e) => return (out, Err(e)),
                Ok(_) => {}
            }
        }
        let (out, r) = if all.len() >= self.bulk_min.load(Ordering::Relaxed) {
            self.bulk(&all, insert, out)
        } else {
            self.one_by_one(all.iter().copied(), insert, out)
        };
        match (r, cause) {
            (Err(Error::Poisoned), Some(e)) => (out, Err(e)),
            (r, _) => (out, r),
        }
    }

    /// Applies a batch tag by tag, taking the write lock once per chunk.
    fn one_by_one<'a>(
        &self,
        tags: impl Iterator<Item = &'a Tag>,
        insert: bool,
        mut out: BatchOutcome,
    ) -> (BatchOutcome, Result<()>) {
        const CHUNK: usize = 1024;
        let mut it = tags.peekable();
        while it.peek().is_some() {
            let mut st = match self.write() {
                Ok(g) => g,
                Err(e) => return (out, Err(e)),
            };
            for t in it.by_ref().take(CHUNK) {
                let r = if insert {
                    shrink(t).and_then(|stored| {
                        if !st.admits(t, &stored, Half::Object)? {
                            return Ok((false, false));
                        }
                        st.insert_whole(&encode(&stored)?, true)
                    })
                } else {
                    lookup_slots(&st, t).and_then(|slots| delete_first(&mut st, &slots))
                };
                match r {
                    Ok((true, counted)) => {
                        out.changed += 1;
                        if counted {
                            st.feed.change(t, if insert { 1 } else { -1 });
                        }
                    }
                    Ok((false, _)) => out.unchanged += 1,
                    Err(e) => {
                        // What was applied before the error stays, durably
                        // in Immediate mode.
                        let _ = st.after_call(None);
                        return (out, Err(e));
                    }
                }
            }
            if let Err(e) = st.after_call(None) {
                return (out, Err(e));
            }
            let merge = st.feed.wants_merge();
            drop(st);
            if merge {
                if let Err(e) = self.merge_own_counts() {
                    return (out, Err(e));
                }
            }
        }
        (out, Ok(()))
    }

    /// Tags per bulk round for a batch of `n`: the whole batch, or equal
    /// rounds of at most [`BULK_ROUND_MAX`] (each round rewrites nearly every
    /// block of the store, so fewer rounds write less), smaller when the
    /// disk lacks room for them (down to [`BULK_ROUND_MIN`]).
    pub(crate) fn bulk_round(&self, n: usize) -> usize {
        let max = self.bulk_round_max.load(Ordering::Relaxed);
        let mut per = n.div_ceil(n.div_ceil(max).max(1)).max(1);
        let st = self.read();
        while per > BULK_ROUND_MIN && !st.bulk_fits(per) {
            per = per.div_ceil(2);
        }
        per
    }

    /// A large batch: in mapped mode, a whole store with disk room to
    /// spare, in rounds of [`Store::bulk_round`] tags each written half by
    /// half (`bulk.rs`); else one tag at a time.
    fn bulk(
        &self,
        all: &[&Tag],
        insert: bool,
        mut out: BatchOutcome,
    ) -> (BatchOutcome, Result<()>) {
        let r = (|| {
            let per = self.bulk_round(all.len());
            let rounds = all.len().div_ceil(per);
            for (r, round) in all.chunks(per).enumerate() {
                let mut st = self.write()?;
                if !st.bulk_fits(round.len()) {
                    drop(st);
                    let (o, r) = self.one_by_one(round.iter().copied(), insert, out);
                    out = o;
                    r?;
                    continue;
                }
                let (mut plan, refused) = st.bulk_plan(round, insert)?;
                // A refused tag: the tags before it go in, then the batch
                // stops at it.
                let planned = refused.as_ref().map_or(round.len(), |(i, _)| *i);
                plan.last_round = r + 1 == rounds || refused.is_some();
                let n = match plan.is_empty() {
                    true => 0,
                    false => st.bulk_apply(&mut plan, insert, true)?,
                };
                out.changed += n;
                out.unchanged += planned as u64 - n;
                let merge = st.feed.wants_merge();
                drop(st);
                if merge {
                    self.merge_own_counts_later()?;
                }
                if let Some((_, e)) = refused {
                    return Err(e);
                }
            }
            Ok(())
        })();
        (out, r)
    }

    /// Makes room for about `additional` more tags ahead of a load (the
    /// store splits its buckets now rather than while the tags arrive); a
    /// store never written to takes the layout `expected_tags` would give.
    /// Room past the most tags a store can be created for is refused.
    pub fn reserve(&self, additional: u64) -> Result<()> {
        let mut st = self.write()?;
        let max = Geometry::max_expected_tags(st.index.layout().blocks_per_primary);
        let total = st.tag_count.saturating_add(additional);
        if additional > 0 && total > max {
            return Err(Error::InvalidArgument(format!(
                "cannot reserve room for {additional} more tags: with the {} it holds, a store of this geometry takes at most {max}",
                st.tag_count
            )));
        }
        st.grow_for(additional).map(|_| ())
    }

    /// About how many of `of` tags drawn like `sample` the store does not
    /// hold yet, judged by up to 256 of the sample (for [`Store::reserve`]
    /// ahead of a load that may repeat stored tags).
    pub fn estimate_new(&self, sample: &[Tag], of: u64) -> Result<u64> {
        let refs: Vec<&Tag> = sample.iter().collect();
        self.read().estimate_new(&refs, of)
    }

    /// Lets the store take `tags` more tags past the split fill before it
    /// splits (`maintain`, after packing buckets fuller).
    pub(crate) fn set_split_allowance(&self, tags: u64) -> Result<()> {
        self.write()?.set_split_allowance(tags)
    }

    /// Free bytes of the store's filesystem, when known.
    pub(crate) fn free_bytes(&self) -> Option<u64> {
        self.read().pager.file().free_bytes()
    }

    /// Inserts tags known to be distinct and absent (maintenance rebuilds).
    /// With `half`, only that half of each (a half-only store's rewrite).
    pub(crate) fn insert_unique(&self, tags: &[Tag], half: Option<Half>) -> Result<()> {
        let mut st = self.write()?;
        if half.is_none()
            && tags.len() >= self.bulk_min.load(Ordering::Relaxed)
            && st.bulk_fits(tags.len())
        {
            let all: Vec<&Tag> = tags.iter().collect();
            let (mut plan, refused) = st.bulk_plan(&all, true)?;
            if let Some((_, e)) = refused {
                return Err(e);
            }
            plan.known_absent = true;
            st.bulk_apply(&mut plan, true, false)?;
            return Ok(());
        }
        for t in tags {
            let stored = shrink(t)?;
            st.hold_strings(t, &stored)?;
            let slot = encode(&stored)?;
            match half {
                Some(h) => st.insert_half_slot(&slot, h)?,
                None => st.insert_slot(&slot, false)?,
            };
        }
        Ok(())
    }

    /// Makes every change so far durable. In [`Durability::OnSync`] this is
    /// the group commit: one journal fsync covers every writer's changes, and
    /// callers that find nothing pending return at once.
    pub fn sync(&self) -> Result<()> {
        let mut st = self.lock();
        if !st.pager.writable() {
            return Ok(());
        }
        if st.pager.poisoned() {
            return Err(Error::Poisoned);
        }
        // Strings before the slots that name them.
        st.sync_strings()?;
        if st.pager.durability() == Durability::None {
            return st.pager.commit();
        }
        let stage = st.pager.stage()?;
        drop(st);
        match stage {
            Some(n) => self.wait_durable(n),
            None => Ok(()),
        }
    }

    /// Waits, without the store's lock, until stage `n` is in the durable
    /// journal (one fsync for every writer waiting); a failure poisons the handle.
    fn wait_durable(&self, n: u64) -> Result<()> {
        if let Err(e) = self.group.wait(n) {
            self.lock().pager.poison();
            return Err(e);
        }
        Ok(())
    }
}

/// The slots a stored `tag` may have, for DELETE and `contains`: as
/// stored by this build (none for a tag no store can hold), and as a
/// build before format 3 stored it ([`State::legacy_slot_of`]).
fn lookup_slots(st: &State, tag: &Tag) -> Result<[Option<SlotBytes>; 2]> {
    match stored_slot(tag) {
        Ok(s) => Ok([Some(s), st.legacy_slot_of(tag)]),
        Err(Error::TagTooLarge { .. }) => Ok([None, None]),
        Err(e) => Err(e),
    }
}

/// Deletes the first of `slots` that is stored (both halves).
fn delete_first(st: &mut State, slots: &[Option<SlotBytes>; 2]) -> Result<(bool, bool)> {
    for slot in slots.iter().flatten() {
        let r = st.delete_whole(slot)?;
        if r.0 {
            return Ok(r);
        }
    }
    Ok((false, false))
}
