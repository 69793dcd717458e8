//! Bulk INSERT in mapped mode: a large batch goes in one half at a time,
//! each half in bucket order, its blocks written back whole (`pager/bulk.rs`).
//!
//! One tag at a time, each INSERT writes two random buckets through the
//! map; a batch sorted by bucket writes each bucket's blocks once, in file
//! order. The price is that a tag's object half is written before its
//! subject half (the whole object pass first), so a bulk intent record
//! stands for the batch: after a crash, the open that finds it makes the
//! halves agree again by writing every missing subject half
//! ([`State::redo_bulk`]). A batch interrupted by a crash leaves a subset
//! of its tags, each whole.

use super::state::State;
use crate::error::{Error, Result};
use crate::format::hash::{fp_of_tag_hash, tag_hash};
use crate::format::tag::{decode, encode, used_prefix, SLOT_SIZE};
use crate::format::{place, Half, Intent, IntentOp, SlotAddr, SlotBytes, Tag, NONE};

/// One tag of a bulk batch: where its halves go.
pub(super) struct BulkTag {
    /// Position in the batch (and in its encoded slots).
    i: u32,
    bucket: [u32; 2],
    key_fp: [u16; 2],
    th: u64,
    /// Written in the object pass (absent before, not a repeat in the batch).
    new: bool,
}

/// A batch encoded, and where each of its tags goes.
pub(super) struct BulkPlan {
    slots: Vec<SlotBytes>,
    tags: Vec<BulkTag>,
}

impl BulkPlan {
    /// Which tags of the batch were inserted, by position.
    pub(super) fn inserted(&self) -> Vec<bool> {
        let mut out = vec![false; self.slots.len()];
        for t in self.tags.iter().filter(|t| t.new) {
            out[t.i as usize] = true;
        }
        out
    }
}

impl State {
    /// Encodes a batch and places both halves of each tag; an oversized
    /// tag is refused before anything is written.
    pub(super) fn bulk_plan(&self, batch: &[&Tag]) -> Result<BulkPlan> {
        let (geo, seed) = (self.index.geometry(), self.index.seed());
        let mut slots = Vec::with_capacity(batch.len());
        let mut tags = Vec::with_capacity(batch.len());
        for (i, &tag) in batch.iter().enumerate() {
            let slot = encode(tag)?;
            let name = |h| match h {
                Half::Object => tag.object.as_str(),
                Half::Subject => tag.subject.as_str(),
            };
            let p = Half::BOTH.map(|h| place(&geo, seed, h, &tag.relationship, name(h)));
            tags.push(BulkTag {
                i: i as u32,
                bucket: p.map(|x| x.bucket),
                key_fp: p.map(|x| x.fp()),
                th: tag_hash(seed, used_prefix(&slot)),
                new: false,
            });
            slots.push(slot);
        }
        Ok(BulkPlan { slots, tags })
    }

    /// Inserts the planned tags (mapped mode, a whole store): the object
    /// halves in bucket order, then the subject halves of the tags that
    /// were new. Returns how many were inserted ([`BulkPlan::inserted`]).
    pub(super) fn bulk_insert(&mut self, plan: &mut BulkPlan) -> Result<u64> {
        self.pager.write_intent(&bulk_intent())?;
        self.pager.begin_bulk();
        let r = self.bulk_passes(plan);
        let r = r.and_then(|n| self.pager.end_bulk().map(|_| n));
        let n = match r {
            Ok(n) => n,
            Err(e) => {
                // Halves written and not: only the reopen's redo agrees them.
                self.pager.poison();
                return Err(e);
            }
        };
        self.pager.clear_intent()?;
        self.tag_count += n;
        Ok(n)
    }

    fn bulk_passes(&mut self, plan: &mut BulkPlan) -> Result<u64> {
        let (o, s) = (Half::Object.index(), Half::Subject.index());
        let tags = &mut plan.tags;
        // Each key's tags together: a chain's secondary buckets then hold few
        // keys each, so their key filters turn away the FINDs of others.
        tags.sort_unstable_by_key(|t| (t.bucket[o], t.key_fp[o]));
        // The slots in the pass's order: read in sequence, not scattered.
        let sorted: Vec<SlotBytes> = tags.iter().map(|t| plan.slots[t.i as usize]).collect();
        let mut n = 0u64;
        for i in 0..tags.len() {
            let (t, slot) = (&tags[i], &sorted[i]);
            let g = t.bucket[o];
            // (A repeat within the batch finds its first copy, written
            // into the same bucket just before.)
            let e = &self.index.tables.primary[g as usize];
            let maybe_stored = e.used != 0 || e.head != NONE;
            if maybe_stored
                && self
                    .index
                    .locate(&self.pager, g, t.key_fp[o], t.th, slot)?
                    .is_some()
            {
                continue;
            }
            self.put_half(slot, g, t.key_fp[o], t.th)?;
            tags[i].new = true;
            n += 1;
        }
        // Every object half reaches the file before any subject half.
        self.pager.flush_bulk()?;
        drop(sorted);
        tags.sort_unstable_by_key(|t| (!t.new, t.bucket[s], t.key_fp[s]));
        let news = tags.iter().take_while(|t| t.new);
        let sorted: Vec<SlotBytes> = news.clone().map(|t| plan.slots[t.i as usize]).collect();
        for (t, slot) in news.zip(&sorted) {
            self.put_half(slot, t.bucket[s], t.key_fp[s], t.th)?;
        }
        Ok(n)
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
        let seed = self.index.seed();
        self.pager.begin_bulk();
        let r = (|| {
            for h in Half::BOTH {
                let other = match h {
                    Half::Object => Half::Subject,
                    Half::Subject => Half::Object,
                };
                let geo = self.index.geometry();
                for g in (0..geo.primary_buckets()).filter(|&g| geo.half_of(g) == h) {
                    let mut stored: Vec<SlotBytes> = Vec::new();
                    for b in self.chain_blocks(g)? {
                        let blk = self.pager.block(b)?;
                        for i in blk.occupied_slots() {
                            let mut slot = [0u8; SLOT_SIZE];
                            slot.copy_from_slice(blk.slot(i));
                            stored.push(slot);
                        }
                    }
                    for slot in stored {
                        let v = decode(&slot).ok_or_else(|| {
                            Error::corrupt(format!("bucket {g}: a slot does not decode as a tag"))
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
            self.pager.end_bulk()
        })();
        if r.is_err() {
            self.pager.poison();
        }
        r?;
        self.pager.clear_intent()
    }
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
