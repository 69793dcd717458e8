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

impl Tables {
    /// Rebuilds the tables by reading every block (checksums verified).
    pub fn rebuild(pager: &Pager, geometry: &Layout, secondary: u32) -> Result<Tables> {
        // One ascending pass over the whole file, in large reads.
        let mut reader = pager.seq_reader();
        let mut t = Tables::new(geometry, secondary);
        for g in 0..geometry.primary_buckets() {
            let start = geometry.primary_start(g);
            let mut used = 0;
            for b in start..start + geometry.blocks_per_primary as u64 {
                let blk = BlockRef(reader.block(b)?);
                if !blk.crc_ok() {
                    return Err(checksum(b));
                }
                if blk.is_unwritten() {
                    continue;
                }
                if blk.kind() != KIND_PRIMARY || blk.owner() != g || !blk.bitmap_valid() {
                    return Err(Error::corrupt(format!(
                        "block {b}: header does not match primary bucket {g}"
                    )));
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
            for b in start..start + geometry.blocks_per_secondary as u64 {
                let blk = BlockRef(reader.block(b)?);
                if !blk.crc_ok() {
                    return Err(checksum(b));
                }
                if blk.is_unwritten() {
                    continue;
                }
                if blk.kind() != KIND_SECONDARY || !blk.bitmap_valid() {
                    return Err(Error::corrupt(format!(
                        "block {b}: header does not match secondary bucket {s}"
                    )));
                }
                let id = (blk.owner(), blk.ordinal());
                if identity.is_some_and(|i| i != id) {
                    return Err(Error::corrupt(format!(
                        "block {b}: owner differs from the rest of secondary bucket {s}"
                    )));
                }
                identity = Some(id);
                written = b - start + 1;
                used += blk.used();
                for i in blk.occupied_slots() {
                    filter_add(&mut filter, blk.key_fp(i));
                }
            }
            t.extents.push(u8::try_from(written + 1).unwrap_or(0));
            let e = &mut t.secondary[s as usize];
            e.used = used;
            e.filter = filter;
            if let Some((owner, ordinal)) = identity {
                if owner >= geometry.primary_buckets() || ordinal == 0 {
                    return Err(Error::corrupt(format!(
                        "secondary bucket {s} names impossible owner {owner} / position {ordinal}"
                    )));
                }
                links.push((owner, ordinal, s));
            }
        }
        links.sort_unstable();
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
