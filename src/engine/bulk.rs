//! Bulk INSERT and DELETE in mapped mode: a large batch goes in (or out)
//! one half at a time, each half in bucket order, its blocks written back
//! whole (`pager/bulk.rs`).
//!
//! One tag at a time, each INSERT writes two random buckets through the
//! map; a batch sorted by bucket writes each bucket's blocks once, in file
//! order. The price is that a tag's object half is written before its
//! subject half (the whole object pass first), so a bulk intent record
//! stands for the batch: after a crash, the open that finds it makes the
//! halves agree again by writing every missing half ([`State::redo_bulk`]).
//! A batch interrupted by a crash leaves a subset of its tags, each whole.

use super::state::State;
use crate::counts::Pending;
use crate::error::{Error, Result};
use crate::format::hash::{fp_of_tag_hash, tag_hash};
use crate::format::long::shrink;
use crate::format::tag::{decode, encode, subject_key, used_prefix, SLOT_SIZE};
use crate::format::{place, Half, Intent, IntentOp, SlotAddr, SlotBytes, Tag, NONE};
use crate::index::Found;
use crate::pager::Durability;
use crate::strings::Strings;

/// One tag of a bulk batch: where its halves go.
#[derive(Clone, Copy)]
pub(super) struct BulkTag {
    /// Where its encoded slot starts in [`BulkPlan`]'s packed slots.
    at: usize,
    bucket: [u32; 2],
    key_fp: [u16; 2],
    th: u64,
    /// Changed in the object pass (inserted: absent before and not a
    /// repeat in the batch; deleted: found).
    changed: bool,
}

/// A batch encoded, and where each of its tags goes.
pub(super) struct BulkPlan {
    /// Each tag's encoded slot, its used bytes only (a slot is 160 bytes;
    /// a tag's strings are some 40 on average), one after another.
    slots: Packed,
    tags: Vec<BulkTag>,
    /// The caller guarantees the tags distinct and absent (maintenance's
    /// copy): no duplicate check.
    pub(super) known_absent: bool,
    /// No later round of the same batch follows (`pager::EarlyWriteback`).
    pub(super) last_round: bool,
}

impl BulkPlan {
    /// True when no tag of the batch is left to apply.
    pub(super) fn is_empty(&self) -> bool {
        self.tags.is_empty()
    }
}

/// Encoded slots cut to their used bytes and laid one after another:
/// a round holds millions, so a whole slot each would triple its memory.
#[derive(Default)]
struct Packed(Vec<u8>);

impl Packed {
    /// Appends a slot's used bytes; returns where they start.
    fn push(&mut self, slot: &[u8]) -> usize {
        let at = self.0.len();
        self.0.extend_from_slice(used_prefix(slot));
        at
    }

    /// The used bytes of the slot starting at `at`.
    fn get(&self, at: usize) -> &[u8] {
        used_prefix(&self.0[at..])
    }

    /// The whole slot starting at `at` (zeros past its used bytes).
    fn slot(&self, at: usize) -> SlotBytes {
        let used = self.get(at);
        let mut s = [0u8; SLOT_SIZE];
        s[..used.len()].copy_from_slice(used);
        s
    }

    /// Empties it and appends the slots at `ats` of `from`, in that order.
    fn gather(&mut self, from: &Packed, ats: impl Iterator<Item = usize>) {
        self.0.clear();
        for at in ats {
            self.0.extend_from_slice(from.get(at));
        }
    }
}

/// Disk bytes a bulk round is assumed to need per tag (two 160-byte
/// slots, blocks part-filled, secondary buckets), at most.
const BULK_BYTES_PER_TAG: u64 = 1024;

impl State {
    /// True when a round of `tags` tags may take the bulk path: mapped
    /// mode, a whole store, and disk room to spare.
    pub(super) fn bulk_fits(&self, tags: usize) -> bool {
        self.pager.durability() == Durability::None
            && !self.half_only()
            && self.pager.bulk_room(tags as u64 * BULK_BYTES_PER_TAG)
    }

    /// Encodes a batch and places both halves of each tag. An oversized
    /// tag in a delete (`insert` false) is left out: it cannot be stored.
    ///
    /// A tag the store refuses (too large, or longer than a slot in a
    /// format-1 store) ends the plan there: the plan holds the tags before
    /// it, and the refusal comes with the tag's index in `batch`, so that
    /// the caller applies those first and names the refused one, as a
    /// batch applied tag by tag does (a review, 2026-11-30: `insert --file`
    /// of 20,000 lines named line 1 for a refused line 20,001).
    pub(super) fn bulk_plan(
        &mut self,
        batch: &[&Tag],
        insert: bool,
    ) -> Result<(BulkPlan, Option<(usize, Error)>)> {
        let (geo, seed) = (self.index.geometry(), self.index.seed());
        let mut slots = Packed(Vec::with_capacity(batch.len() * 48));
        let mut tags = Vec::with_capacity(batch.len());
        let mut refused = None;
        for (i, &whole) in batch.iter().enumerate() {
            let stored = match shrink(whole) {
                Ok(s) => Ok(s),
                Err(Error::TagTooLarge { .. }) if !insert => continue,
                Err(e) => Err(e),
            };
            // Mapped mode: the strings are made durable by the store's next flush.
            let admitted = stored.and_then(|s| match insert {
                true => self.admits(whole, &s, Half::Object).map(|a| a.then_some(s)),
                false => Ok(Some(s)),
            });
            let stored = match admitted {
                Ok(Some(s)) => s,
                Ok(None) => continue,
                Err(e) if e.refuses_the_input() => {
                    refused = Some((i, e));
                    break;
                }
                Err(e) => return Err(e),
            };
            // A delete removes a tag stored as a build before format 3
            // stored it (a string starting with U+FFFF kept as it is).
            let old =
                !insert && self.holds_legacy(self.legacy_slot_of(whole).as_ref(), Half::Object)?;
            let tag: &Tag = if old { whole } else { &stored };
            let slot = encode(tag)?;
            let name = |h| match h {
                Half::Object => tag.object.as_str(),
                Half::Subject => tag.subject.as_str(),
            };
            let p = Half::BOTH.map(|h| place(&geo, seed, h, &tag.relationship, name(h)));
            tags.push(BulkTag {
                at: slots.push(&slot),
                bucket: p.map(|x| x.bucket),
                key_fp: p.map(|x| x.fp()),
                th: tag_hash(seed, used_prefix(&slot)),
                changed: false,
            });
        }
        let plan = BulkPlan {
            slots,
            tags,
            known_absent: false,
            last_round: true,
        };
        Ok((plan, refused))
    }

    /// Inserts (or deletes) the planned tags (mapped mode, a whole store):
    /// the object halves in bucket order, then the subject halves of the
    /// tags whose object half changed. Returns how many tags changed.
    /// With `count` (and counting on), feeds the counters every change.
    pub(super) fn bulk_apply(
        &mut self,
        plan: &mut BulkPlan,
        insert: bool,
        count: bool,
    ) -> Result<u64> {
        if !plan.known_absent {
            self.read_round_blocks(plan)?;
        }
        // A round writes many keys: every hot copy goes (`hot.rs`).
        self.hot.forget_all();
        self.pager.write_intent(&bulk_intent())?;
        self.pager.begin_bulk(plan.last_round);
        let r = match count && self.feed.counting {
            true => self.bulk_passes_counted(plan, insert),
            false => self.bulk_passes(&mut plan.tags, &plan.slots, plan.known_absent, insert),
        };
        if count && !self.feed.counting && r.as_ref().is_ok_and(|&n| n > 0) {
            // Changed with counting off: the counts must be rebuilt.
            self.feed.stale = true;
        }
        let r = r.and_then(|n| self.pager.end_bulk().map(|_| n));
        let n = match r {
            Ok(n) => n,
            Err(e) => {
                // Halves written and not: only the reopen's redo agrees
                // them. A round that failed before its first write-back
                // (on a corrupt block it read) left the file as it was:
                // its intent goes, or every read-only open would refuse
                // the store and the redo would meet the same block.
                let untouched = self.pager.bulk_wrote_nothing();
                self.pager.abort_bulk();
                if untouched {
                    let _ = self.pager.clear_intent();
                }
                return Err(e);
            }
        };
        self.pager.clear_intent()?;
        self.tag_count = match insert {
            true => self.tag_count + n,
            false => self.tag_count.saturating_sub(n),
        };
        Ok(n)
    }

    /// Reads every block of the chains the round's tags fall in (both
    /// halves), so that a block failing its checksum refuses the batch
    /// before it changes anything: the handle stays usable and its close
    /// keeps the store opening as before. (A round failing on such a block
    /// midway left the in-memory tables counting tags it never wrote, so
    /// the handle was given up, its close was not clean, and every later
    /// open had to rebuild the tables from the blocks, met the damaged one
    /// and refused the store: a review, 2026-11-30.) The round reads these
    /// blocks next anyway; a chain read whole once since open is not read
    /// again (the blocks linked to it later are this handle's writes).
    fn read_round_blocks(&mut self, plan: &BulkPlan) -> Result<()> {
        for t in &plan.tags {
            for &g in &t.bucket {
                if self.index.chain_read.get(g as usize) != Some(&false) {
                    continue;
                }
                for b in self.chain_blocks(g)? {
                    self.pager.block(b)?;
                }
                self.index.chain_read[g as usize] = true;
            }
        }
        Ok(())
    }

    /// [`State::bulk_passes`] with the counters fed on another thread: it
    /// counts every planned tag while the passes run (these map updates
    /// were a tenth of a 0.5 M-tag npm load and delete), then the tags the
    /// passes left unchanged (absent, present, or a repeat in the batch)
    /// are counted back. If anything fails, the counts are left to a
    /// rebuild.
    fn bulk_passes_counted(&mut self, plan: &mut BulkPlan, insert: bool) -> Result<u64> {
        let d = if insert { 1 } else { -1 };
        let pending = std::mem::take(&mut self.feed.pending);
        let BulkPlan {
            slots,
            tags,
            known_absent,
            ..
        } = plan;
        let slots = &*slots;
        // Lent to the counting thread (keys are counted as written), and
        // given back below.
        let strings = std::mem::take(&mut self.strings);
        let (r, counted) = std::thread::scope(|sc| {
            let strings = &strings;
            let counter = std::thread::Builder::new()
                .name("tagstore-bulk-count".into())
                .spawn_scoped(sc, move || {
                    let mut p = pending;
                    let r = count_planned(&mut p, slots, strings, d);
                    (p, r)
                });
            let r = self.bulk_passes(tags, slots, *known_absent, insert);
            let counted = match counter {
                Ok(h) => h.join().ok(),
                Err(_) => None,
            };
            (r, counted)
        });
        self.strings = strings;
        match counted {
            Some((p, Ok(()))) if r.is_ok() => {
                self.feed.pending = p;
                for t in tags.iter().filter(|t| !t.changed) {
                    match key_strs(slots.get(t.at), &self.strings) {
                        Ok((rel, sub)) => self.feed.pending.add(rel, sub, -d),
                        // Never for a batch encoded from strings; if it
                        // were, the tags stand and the counts are rebuilt.
                        Err(_) => self.feed.stale = true,
                    }
                }
            }
            // A thread that could not start or failed took the pending
            // changes with it: the counts must be rebuilt from the tags.
            Some((p, _)) => {
                self.feed.pending = p;
                self.feed.stale = true;
            }
            None => self.feed.stale = true,
        }
        r
    }

    fn bulk_passes(
        &mut self,
        tags: &mut [BulkTag],
        slots: &Packed,
        known_absent: bool,
        insert: bool,
    ) -> Result<u64> {
        let (o, s) = (Half::Object.index(), Half::Subject.index());
        // Each key's tags together: a chain's secondary buckets then hold few
        // keys each, so their key filters turn away the FINDs of others.
        let mut spare = Vec::new();
        sort_by_bucket(tags, &mut spare, |t| Some((t.bucket[o], t.key_fp[o])));
        // The slots in the pass's order: read in sequence, not scattered.
        let mut sorted = Packed(Vec::with_capacity(slots.0.len()));
        sorted.gather(slots, tags.iter().map(|t| t.at));
        let mut n = 0u64;
        let mut next = 0;
        for t in tags.iter_mut() {
            let slot = &sorted.slot(next);
            next += sorted.get(next).len();
            let g = t.bucket[o];
            // (A repeat within the batch finds its first copy, written
            // into the same bucket just before, or misses it, erased.)
            let e = &self.index.tables.primary[g as usize];
            let found = match (e.used != 0 || e.head != NONE) && !known_absent {
                true => self.index.locate(&self.pager, g, t.key_fp[o], t.th, slot)?,
                false => None,
            };
            match (insert, found) {
                (true, None) => self.put_half(slot, g, t.key_fp[o], t.th)?,
                (false, Some(f)) => self.erase_half(g, &f, t.th)?,
                _ => continue,
            }
            t.changed = true;
            n += 1;
        }
        // Every object half reaches the file before any subject half.
        self.pager.flush_bulk()?;
        sort_by_bucket(tags, &mut spare, |t| {
            t.changed.then_some((t.bucket[s], t.key_fp[s]))
        });
        let changed = tags.iter().take_while(|t| t.changed);
        // The same buffer again: its pages are mapped already (a fresh one
        // faulted in tens of megabytes of zeroed pages once more).
        sorted.gather(slots, changed.clone().map(|t| t.at));
        let mut next = 0;
        for t in changed {
            let slot = &sorted.slot(next);
            next += sorted.get(next).len();
            let (g, kfp) = (t.bucket[s], t.key_fp[s]);
            if insert {
                self.put_half(slot, g, kfp, t.th)?;
            } else if let Some(f) = self.index.locate(&self.pager, g, kfp, t.th, slot)? {
                self.erase_half(g, &f, t.th)?;
            }
        }
        Ok(n)
    }

    /// Empties one half of a tag, found at `f` in chain `g`.
    fn erase_half(&mut self, g: u32, f: &Found, th: u64) -> Result<()> {
        self.pager.clear_slot(f.addr)?;
        self.commit_delete(g, f, th);
        self.pager.bulk_checkpoint()
    }

    /// Writes one half of an encoded tag into bucket `g` (known absent there).
    fn put_half(&mut self, slot: &SlotBytes, g: u32, kfp: u16, th: u64) -> Result<()> {
        let p = self.plan(g)?;
        self.pager
            .put_slot(p.addr, p.id, slot, kfp, fp_of_tag_hash(th))?;
        self.commit_insert(g, &p, kfp, th);
        self.pager.bulk_checkpoint()
    }

    /// Finishes a bulk INSERT interrupted by a crash: every tag stored in
    /// one half only gets its other half, so each tag of the batch is wholly
    /// present or wholly absent. Idempotent: a crash during it redoes it.
    pub fn redo_bulk(&mut self) -> Result<()> {
        self.hot.forget_all();
        let seed = self.index.seed();
        self.pager.begin_bulk(false);
        let r = (|| {
            for h in Half::BOTH {
                let other = match h {
                    Half::Object => Half::Subject,
                    Half::Subject => Half::Object,
                };
                let geo = self.index.geometry();
                for g in (0..geo.primary_buckets()).filter(|&g| geo.half_of(g) == h) {
                    // Block by block: the writes go to the other half's
                    // chains, never to this one, and a peak's chain copied
                    // whole would cost 160 bytes per tag of memory.
                    for b in self.chain_blocks(g)? {
                        let stored: Vec<SlotBytes> = {
                            let blk = self.pager.block(b)?;
                            blk.occupied_slots()
                                .map(|i| {
                                    let mut slot = [0u8; SLOT_SIZE];
                                    slot.copy_from_slice(blk.slot(i));
                                    slot
                                })
                                .collect()
                        };
                        for slot in stored {
                            let v = decode(&slot).ok_or_else(|| {
                                Error::corrupt(format!(
                                    "bucket {g}: a slot does not decode as a tag"
                                ))
                            })?;
                            let p = place(&geo, seed, other, v.relationship, v.key_name(other));
                            let th = tag_hash(seed, used_prefix(&slot));
                            if self
                                .index
                                .locate(&self.pager, p.bucket, p.fp(), th, &slot)?
                                .is_none()
                            {
                                self.put_half(&slot, p.bucket, p.fp(), th)?;
                            }
                        }
                    }
                }
            }
            self.pager.end_bulk()
        })();
        if r.is_err() {
            self.pager.abort_bulk();
        }
        r?;
        self.pager.clear_intent()
    }
}

/// Orders `tags` by `key` (bucket, then key fingerprint), the tags without
/// one last in no particular order: counted by bucket and moved once
/// through `spare`, then each bucket's few tags sorted by fingerprint. (A
/// comparison sort of the whole batch was an eighth of a bulk load.)
fn sort_by_bucket(
    tags: &mut [BulkTag],
    spare: &mut Vec<BulkTag>,
    key: impl Fn(&BulkTag) -> Option<(u32, u16)>,
) {
    let Some(top) = tags.iter().filter_map(|t| key(t).map(|k| k.0)).max() else {
        return;
    };
    // Where each bucket's tags start in the sorted order; the last entry
    // is where the tags without a key start.
    let mut next = vec![0usize; top as usize + 2];
    for t in tags.iter() {
        let i = key(t).map_or(top as usize + 1, |k| k.0 as usize);
        if let Some(n) = next.get_mut(i + 1) {
            *n += 1;
        }
    }
    for i in 1..next.len() {
        next[i] += next[i - 1];
    }
    let starts = next.clone();
    spare.clear();
    spare.extend_from_slice(tags);
    for t in spare.iter() {
        let i = key(t).map_or(top as usize + 1, |k| k.0 as usize);
        let at = &mut next[i];
        tags[*at] = *t;
        *at += 1;
    }
    for w in starts.windows(2).take(top as usize + 1) {
        let run = &mut tags[w[0]..w[1]];
        if run.len() > 1 {
            run.sort_unstable_by_key(|t| key(t).map(|k| k.1));
        }
    }
}

/// Adds `d` to the pending count of every planned tag's (relationship, subject).
fn count_planned(pending: &mut Pending, slots: &Packed, strings: &Strings, d: i64) -> Result<()> {
    let mut at = 0;
    while at < slots.0.len() {
        let used = slots.get(at);
        at += used.len();
        let (rel, sub) = key_strs(used, strings)?;
        pending.add(rel, sub, d);
    }
    Ok(())
}

/// The relationship and subject of an encoded slot's used bytes, as the
/// user wrote them (counts are kept by those).
fn key_strs<'a>(used: &'a [u8], strings: &'a Strings) -> Result<(&'a str, &'a str)> {
    let (rel_len, bytes) = subject_key(used);
    let (rel, sub) = bytes.split_at(usize::from(rel_len).min(bytes.len()));
    let whole = |b: &'a [u8]| -> Result<&'a str> {
        match strings.whole(b)? {
            Some(s) => Ok(s),
            None => std::str::from_utf8(b)
                .map_err(|_| Error::corrupt("a bulk batch's key is not UTF-8")),
        }
    };
    Ok((whole(rel)?, whole(sub)?))
}

/// The intent record of a bulk INSERT (no slot: the batch is not recorded).
fn bulk_intent() -> Intent {
    Intent {
        op: IntentOp::Bulk,
        object_slot: SlotAddr::NONE,
        subject_slot: SlotAddr::NONE,
        object_identity: (0, 0),
        subject_identity: (0, 0),
        tag: [0; SLOT_SIZE],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{CreateOptions, Store};
    use std::panic::{catch_unwind, AssertUnwindSafe};

    /// A bulk write seals a block it wrote first once, on its way to the
    /// file, not at each put: the block must reach the file sealed, with
    /// every put and clear of the round in it, and a block written whole
    /// in the same round (zeroed: a bucket given back) must reach it as
    /// written, not sealed over.
    #[test]
    fn a_bulk_write_seals_its_fresh_blocks_on_their_way_to_the_file() {
        use crate::format::tag::encode;
        use crate::format::{BlockRef, SlotAddr};
        use crate::pager::Identity;
        let dir = tempfile::tempdir().expect("test setup");
        let s = Store::create(dir.path().join("seal.tags"), &CreateOptions::default())
            .expect("test setup");
        let mut st = s.write().expect("test setup");
        let l = st.index.geometry();
        let (a, b) = (l.primary_start(0), l.primary_start(1));
        let id = Identity::primary;
        let slot = |i: u32| encode(&Tag::new(format!("o{i}"), "r", "s")).expect("test setup");
        st.pager.begin_bulk(true);
        for i in 0..5u32 {
            let at = SlotAddr { block: a, slot: i };
            st.pager.put_slot(at, id(0), &slot(i), 7, 9).expect("put");
            let at = SlotAddr { block: b, slot: i };
            st.pager.put_slot(at, id(1), &slot(i), 7, 9).expect("put");
        }
        st.pager
            .clear_slot(SlotAddr { block: a, slot: 2 })
            .expect("clear");
        st.pager.zero_block(b).expect("zero");
        st.pager.end_bulk().expect("flush");
        let raw = st.pager.file().block(a).expect("read");
        let blk = BlockRef(raw);
        assert!(blk.crc_ok(), "block {a} reached the file sealed");
        assert_eq!(blk.bitmap(), 0b11011, "puts and the clear of the round");
        let raw = st.pager.file().block(b).expect("read");
        assert!(raw.iter().all(|&x| x == 0), "block {b} reached it zeroed");
    }

    /// A panic inside a bulk round (after the object pass was written back,
    /// the subject halves only in private copies) must not let the handle's
    /// drop close the store cleanly: the clean flag would hide the bulk
    /// intent from the next open, and the table image would count subject
    /// halves that never reached the file.
    #[test]
    fn a_panic_inside_a_bulk_round_leaves_the_store_to_the_redo() {
        let dir = tempfile::tempdir().expect("test setup");
        let path = dir.path().join("panic.tags");
        drop(Store::create(&path, &CreateOptions::default()).expect("test setup"));
        let s = Store::open(&path).expect("test setup");
        let tags: Vec<Tag> = (0..200u32)
            .map(|i| Tag::new(format!("o{i}"), "r", format!("s{}", i % 9)))
            .collect();
        let refs: Vec<&Tag> = tags.iter().collect();
        let r = catch_unwind(AssertUnwindSafe(|| {
            let mut st = s.write().expect("test setup");
            let (mut plan, _) = st.bulk_plan(&refs, true).expect("test setup");
            st.pager.write_intent(&bulk_intent()).expect("test setup");
            st.pager.begin_bulk(false);
            st.bulk_passes(&mut plan.tags, &plan.slots, false, true)
                .expect("test setup");
            panic!("a bug inside a bulk round");
        }));
        assert!(r.is_err());
        drop(s);
        let s = Store::open(&path).expect("test setup");
        let report = s.check().expect("test setup");
        assert!(report.ok(), "check() after the reopen: {:?}", report.faults);
        assert_eq!(s.len(), s.tags().count() as u64);
    }
}
