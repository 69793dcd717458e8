//! `check`: verifies every checksum and invariant of a store.

use crate::engine::Store;
use crate::error::Result;
use crate::format::hash::tag_fp_of;
use crate::format::tag::{decode, used_prefix};
use crate::format::{place, BlockAt, BlockRef, Intent, INTENT_BLOCK, KIND_PRIMARY, KIND_SECONDARY};
use crate::index::Tables;
use serde::Serialize;
use xxhash_rust::xxh3::xxh3_128;

/// Faults found by [`Store::check`].
#[derive(Clone, Debug, Default, Serialize)]
pub struct CheckReport {
    /// Blocks whose checksum and header were examined.
    pub blocks_checked: u64,
    /// Tags found in the object half.
    pub object_tags: u64,
    /// Tags found in the subject half.
    pub subject_tags: u64,
    /// Distinct tags found: the object half's, and in a half-only store
    /// also those held only in the subject half.
    pub tags: u64,
    /// One line per fault, naming the block or bucket.
    pub faults: Vec<String>,
    /// Things worth knowing that are not faults (stale temporaries found or removed).
    pub notes: Vec<String>,
}

impl CheckReport {
    /// True when no fault was found.
    pub fn ok(&self) -> bool {
        self.faults.is_empty()
    }

    fn fault(&mut self, m: String) {
        if self.faults.len() < 10_000 {
            self.faults.push(m);
        }
    }
}

impl Store {
    /// Verifies checksums, headers, slots, chains, tables, that both halves
    /// hold the same tags, and that the persisted counts match the tags.
    pub fn check(&self) -> Result<CheckReport> {
        self.read().pager().read_ahead_for_scan();
        let mut r = self.check_blocks()?;
        // A salvage open reads its damaged blocks repaired in memory.
        for b in self.unreadable_blocks() {
            r.fault(format!(
                "block {b}: damaged (fails its checksum, or lies out of place); \
                 a salvage reads what of it is sound, if anything"
            ));
        }
        if let Some(at) = self.read().strings().damaged() {
            r.fault(format!(
                "{}: a record at byte {at} fails its checksum; its string is lost, the others are read",
                crate::strings::strings_path(self.path()).display()
            ));
        }
        if self.read().strings().lost() {
            r.fault(format!(
                "{}: holds no string (missing, empty or damaged), while the store says it holds tags longer than a slot: their strings are lost (`tagstore export --salvage` writes out the other tags)",
                crate::strings::strings_path(self.path()).display()
            ));
        }
        let held = self.read().strings().len();
        if held > 0 {
            r.notes.push(format!(
                "{held} long strings held by reference in {}",
                crate::strings::strings_path(self.path()).display()
            ));
        }
        for t in self.removed_temporaries() {
            r.notes.push(format!(
                "removed stale temporary {} left by an interrupted run",
                t.display()
            ));
        }
        // A writable handle removed every stale temporary at open: a counts
        // fold found now is its own, running.
        let own_fold = self
            .read()
            .pager()
            .writable()
            .then(|| crate::counts::fold_path(self.path()));
        for t in crate::side::temporaries(self.path()) {
            if t.exists()
                && !self.removed_temporaries().contains(&t)
                && Some(&t) != own_fold.as_ref()
            {
                r.notes.push(format!(
                    "stale temporary {} left by an interrupted run; the next writable open removes it",
                    t.display()
                ));
            }
        }
        match self.check_counts() {
            Ok(faults) => faults.into_iter().for_each(|f| r.fault(f)),
            Err(e) => r.fault(format!("counts: not compared with the tags: {e}")),
        }
        Ok(r)
    }

    fn check_blocks(&self) -> Result<CheckReport> {
        let st = self.read();
        let (geo, seed) = (st.index().geometry(), st.index().seed());
        let pager = st.pager();
        let tables = &st.index().tables;
        let mut r = CheckReport::default();
        if let Some(i) = Intent::decode(pager.raw_block(INTENT_BLOCK)?) {
            r.fault(format!(
                "block 1: an interrupted {:?} is still recorded in the intent block",
                i.op
            ));
        }
        let mut hashes: [Vec<u128>; 2] = [Vec::new(), Vec::new()];
        let nsec = tables.secondary.len() as u32;
        let total = geo.file_len(nsec) / crate::format::BLOCK_SIZE as u64;
        // Blocks in a hole of the sparse file read as zeros (unwritten, so
        // nothing to check): skip them instead of reading through the map
        // (a store pre-sized for 10^8 tags is 44 GB of holes). Blocks in
        // memory only are read whatever the file holds there.
        // Past the file's end nothing is skipped (a short file is read, and
        // reported, as before).
        let in_memory = pager.memory_blocks();
        let file_blocks = pager.file().len() / crate::format::BLOCK_SIZE as u64;
        let mut data_end = 0u64;
        let mut b = crate::format::INTENT_BLOCK + 1;
        while b < total {
            if b >= data_end && b < file_blocks {
                let next_mem = in_memory[in_memory.partition_point(|&m| m < b)..]
                    .first()
                    .copied()
                    .unwrap_or(u64::MAX);
                let (start, end) = pager
                    .file()
                    .next_data_run(b)
                    .unwrap_or((file_blocks, file_blocks));
                let next = start.min(next_mem).min(total);
                r.blocks_checked += next - b;
                b = next;
                data_end = if next == start { end } else { next + 1 };
                if b >= total {
                    break;
                }
            }
            let blk_no = b;
            b += 1;
            let b = blk_no;
            r.blocks_checked += 1;
            let blk = BlockRef(pager.raw_block(b)?);
            if !blk.crc_ok() {
                r.fault(format!("block {b}: checksum mismatch"));
                continue;
            }
            if blk.is_unwritten() {
                continue;
            }
            let (want_kind, bucket_desc) = match geo.block_at(b) {
                BlockAt::Meta => continue,
                BlockAt::Primary { g, .. } => {
                    if blk.owner() != g || blk.ordinal() != 0 {
                        r.fault(format!(
                            "block {b}: header names bucket {} but lies in primary bucket {g}",
                            blk.owner()
                        ));
                        continue;
                    }
                    (KIND_PRIMARY, format!("primary bucket {g}"))
                }
                BlockAt::Secondary { s, .. } => (KIND_SECONDARY, format!("secondary bucket {s}")),
            };
            if blk.kind() != want_kind || !blk.bitmap_valid() {
                r.fault(format!("block {b}: bad kind or bitmap for {bucket_desc}"));
                continue;
            }
            let owner = blk.owner();
            if owner >= geo.primary_buckets() {
                r.fault(format!("block {b}: owner {owner} out of range"));
                continue;
            }
            let half = geo.half_of(owner);
            for i in 0..crate::format::SLOTS_PER_BLOCK {
                let slot = blk.slot(i);
                if !blk.occupied(i) {
                    if slot.iter().any(|&x| x != 0) || blk.key_fp(i) != 0 || blk.tag_fp(i) != 0 {
                        r.fault(format!("block {b}, slot {i}: empty slot is not zeroed"));
                    }
                    continue;
                }
                let Some(v) = decode(slot) else {
                    r.fault(format!(
                        "block {b}, slot {i}: occupied slot does not decode"
                    ));
                    continue;
                };
                for f in [v.object, v.relationship, v.subject] {
                    if st.strings().whole(f.as_bytes()).is_err() {
                        r.fault(format!(
                            "block {b}, slot {i}: names long string {f:?}, which the strings file does not hold"
                        ));
                    }
                }
                let p = place(&geo, seed, half, v.relationship, v.key_name(half));
                if p.bucket != owner {
                    r.fault(format!(
                        "block {b}, slot {i}: tag hashes to another bucket than {owner}"
                    ));
                }
                if blk.key_fp(i) != p.fp() || blk.tag_fp(i) != tag_fp_of(seed, used_prefix(slot)) {
                    r.fault(format!("block {b}, slot {i}: fingerprint mismatch"));
                }
                hashes[half.index()].push(xxh3_128(used_prefix(slot)));
            }
        }
        // Tables in memory must equal tables rebuilt from the blocks.
        match Tables::rebuild(st.pager(), &geo, nsec) {
            Err(e) => r.fault(format!("chains: {e}")),
            Ok(t) => {
                for (g, (a, b)) in tables.primary.iter().zip(&t.primary).enumerate() {
                    if a != b {
                        r.fault(format!(
                            "primary bucket {g}: table {a:?} but blocks say {b:?}"
                        ));
                    }
                }
                for (s, (a, b)) in tables.secondary.iter().zip(&t.secondary).enumerate() {
                    let superset = a.filter.iter().zip(&b.filter).all(|(x, y)| x & y == *y);
                    if (a.owner, a.ordinal, a.next, a.used) != (b.owner, b.ordinal, b.next, b.used)
                        || !superset
                    {
                        r.fault(format!(
                            "secondary bucket {s}: table disagrees with its blocks"
                        ));
                    }
                }
                if tables.free != t.free {
                    r.fault("free list of secondary buckets disagrees with the blocks".into());
                }
            }
        }
        if let Err(e) = tables.validate_links(&geo) {
            r.fault(format!("tables: {e}"));
        }
        r.object_tags = hashes[0].len() as u64;
        r.subject_tags = hashes[1].len() as u64;
        for h in hashes.iter_mut() {
            h.sort_unstable();
        }
        for (name, h) in ["object", "subject"].iter().zip(&hashes) {
            let dups = h.windows(2).filter(|w| w[0] == w[1]).count();
            if dups > 0 {
                r.fault(format!("{name} half holds {dups} duplicate tags"));
            }
        }
        let half_only = st.half_only();
        r.tags = if half_only {
            let mut all: Vec<_> = hashes[0].iter().chain(&hashes[1]).copied().collect();
            all.sort_unstable();
            all.dedup();
            all.len() as u64
        } else {
            r.object_tags
        };
        if !half_only && hashes[0] != hashes[1] {
            r.fault(format!(
                "the halves differ: {} tags indexed by object, {} by subject, or the same count of different tags",
                hashes[0].len(),
                hashes[1].len()
            ));
        }
        // A half-only store counts halves; any other, tags.
        let found = if half_only {
            r.object_tags + r.subject_tags
        } else {
            r.object_tags
        };
        if found != st.tag_count() {
            r.fault(format!(
                "tag count {} disagrees with {found} found",
                st.tag_count()
            ));
        }
        Ok(r)
    }
}
