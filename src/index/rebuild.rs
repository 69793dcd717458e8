//! Tables rebuilt from the block headers, after an unclean shutdown.

use super::tables::{filter_add, Tables};
use crate::error::{Error, Result};
use crate::format::{BlockRef, Layout, BLOCK_SIZE, KIND_PRIMARY, KIND_SECONDARY, NONE};
use crate::pager::Pager;

fn checksum(b: u64) -> Error {
    Error::corrupt(format!(
        "block {b} (byte offset {}) fails its checksum",
        b * BLOCK_SIZE as u64
    ))
}

/// What a rebuild does with a block that fails its checksum or does not
/// belong where it lies: stop with an error, or (a salvage open) leave it
/// out and list it.
struct Faults {
    skipped: Option<Vec<u64>>,
    /// A salvage: the blocks repaired in memory (their header less trusted).
    damaged: std::collections::BTreeSet<u64>,
}

impl Faults {
    /// `Ok` when the block at `blocks` may be left out (listed), else `e`.
    fn skip(&mut self, blocks: impl IntoIterator<Item = u64>, e: Error) -> Result<()> {
        match &mut self.skipped {
            Some(v) => {
                v.extend(blocks);
                Ok(())
            }
            None => Err(e),
        }
    }
}

impl Tables {
    /// Rebuilds the tables by reading every block (checksums verified).
    pub fn rebuild(pager: &Pager, geometry: &Layout, secondary: u32) -> Result<Tables> {
        let mut f = Faults {
            skipped: None,
            damaged: Default::default(),
        };
        Self::rebuild_with(pager, geometry, secondary, &mut f)
    }

    /// Rebuilds the tables from the blocks that pass their checksum and
    /// belong where they lie (a salvage open); returns the others too.
    /// A chain missing a secondary bucket links the rest in order.
    pub fn rebuild_salvage(
        pager: &Pager,
        geometry: &Layout,
        secondary: u32,
    ) -> Result<(Tables, Vec<u64>)> {
        let mut f = Faults {
            skipped: Some(Vec::new()),
            damaged: pager.unreadable().into_iter().collect(),
        };
        let t = Self::rebuild_with(pager, geometry, secondary, &mut f)?;
        Ok((t, f.skipped.unwrap_or_default()))
    }

    fn rebuild_with(
        pager: &Pager,
        geometry: &Layout,
        secondary: u32,
        faults: &mut Faults,
    ) -> Result<Tables> {
        // One ascending pass over the whole file, in large reads.
        let mut reader = pager.seq_reader();
        let mut t = Tables::new(geometry, secondary);
        for g in 0..geometry.primary_buckets() {
            let start = geometry.primary_start(g);
            let mut used = 0;
            for b in start..start + geometry.blocks_per_primary as u64 {
                let blk = BlockRef(reader.block(b)?);
                if !blk.crc_ok() {
                    faults.skip([b], checksum(b))?;
                    continue;
                }
                if blk.is_unwritten() {
                    continue;
                }
                if blk.kind() != KIND_PRIMARY || blk.owner() != g || !blk.bitmap_valid() {
                    let e = Error::corrupt(format!(
                        "block {b}: header does not match primary bucket {g}"
                    ));
                    faults.skip([b], e)?;
                    continue;
                }
                used += blk.used();
            }
            t.primary[g as usize].used = used;
        }
        // Secondary buckets: identity from their blocks, then chains by ordinal.
        let mut links: Vec<(u32, u32, u32)> = Vec::new();
        for s in 0..secondary {
            let start = geometry.secondary_start(s);
            let mut identity: Option<(u32, u32)> = None;
            let mut used = 0;
            let mut filter = [0u64; 4];
            let mut written = 0u64;
            let mut kept = Vec::new();
            if faults.skipped.is_some() {
                // A salvage: the identity of the blocks that passed their
                // checksum wins over a repaired block's (its header may be
                // what the damage hit).
                for b in start..start + geometry.blocks_per_secondary as u64 {
                    let blk = BlockRef(reader.block(b)?);
                    let sound = blk.crc_ok() && !blk.is_unwritten() && blk.kind() == KIND_SECONDARY;
                    if sound && !faults.damaged.contains(&b) {
                        identity = Some((blk.owner(), blk.ordinal()));
                        break;
                    }
                }
            }
            for b in start..start + geometry.blocks_per_secondary as u64 {
                let blk = BlockRef(reader.block(b)?);
                if !blk.crc_ok() {
                    faults.skip([b], checksum(b))?;
                    continue;
                }
                if blk.is_unwritten() {
                    continue;
                }
                if blk.kind() != KIND_SECONDARY || !blk.bitmap_valid() {
                    let e = Error::corrupt(format!(
                        "block {b}: header does not match secondary bucket {s}"
                    ));
                    faults.skip([b], e)?;
                    continue;
                }
                let id = (blk.owner(), blk.ordinal());
                if identity.is_some_and(|i| i != id) {
                    let e = Error::corrupt(format!(
                        "block {b}: owner differs from the rest of secondary bucket {s}"
                    ));
                    faults.skip([b], e)?;
                    continue;
                }
                identity = Some(id);
                if faults.skipped.is_some() {
                    kept.push(b);
                }
                written = b - start + 1;
                used += blk.used();
                for i in blk.occupied_slots() {
                    filter_add(&mut filter, blk.key_fp(i));
                }
            }
            if let Some((owner, ordinal)) = identity {
                if owner >= geometry.primary_buckets() || ordinal == 0 {
                    let e = Error::corrupt(format!(
                        "secondary bucket {s} names impossible owner {owner} / position {ordinal}"
                    ));
                    // Left out whole: an empty bucket, free.
                    faults.skip(std::mem::take(&mut kept), e)?;
                    (identity, used, filter, written) = (None, 0, [0; 4], 0);
                }
            }
            t.extents.push(u8::try_from(written + 1).unwrap_or(0));
            let e = &mut t.secondary[s as usize];
            e.used = used;
            e.filter = filter;
            if let Some((owner, ordinal)) = identity {
                links.push((owner, ordinal, s));
            }
        }
        links.sort_unstable();
        // A salvage: a missing position closes up, and two buckets at one
        // position both stay (the chain keeps its order; each is read).
        if faults.skipped.is_some() {
            for w in links.chunk_by_mut(|a, b| a.0 == b.0) {
                for (k, l) in w.iter_mut().enumerate() {
                    l.1 = k as u32 + 1;
                }
            }
        }
        t.free = (0..secondary).collect();
        for w in links.chunk_by(|a, b| a.0 == b.0) {
            let owner = w[0].0;
            for (k, &(_, ordinal, s)) in w.iter().enumerate() {
                if ordinal != k as u32 + 1 {
                    return Err(Error::corrupt(format!(
                        "chain of primary bucket {owner}: secondary bucket {s} is at position {ordinal}, expected {}",
                        k + 1
                    )));
                }
                let e = &mut t.secondary[s as usize];
                e.owner = owner;
                e.ordinal = ordinal;
                e.next = w.get(k + 1).map_or(NONE, |x| x.2);
                t.free.remove(&s);
            }
            let p = &mut t.primary[owner as usize];
            p.head = w[0].2;
            p.tail = w[w.len() - 1].2;
            p.chain = w.len() as u32;
        }
        Ok(t)
    }
}
