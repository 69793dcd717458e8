//! Bucket tables: per-bucket fill, chain links and key filters, kept in memory.
//!
//! The seed's full bit is derived from `used == capacity`; its linked bit from
//! `owner != NONE`; its extend pointer is `head` (primary) and `next` (secondary).
//! Tables are persisted on clean shutdown (see [`Tables::encode`]) and rebuilt
//! from block headers after an unclean one ([`Tables::rebuild`]).

use crate::block::{BlockRef, KIND_PRIMARY, KIND_SECONDARY};
use crate::error::{Error, Result};
use crate::file::MappedFile;
use crate::format::Geometry;
use std::collections::BTreeSet;

/// "No bucket" in a link field.
pub const NONE: u32 = u32::MAX;

/// One primary bucket.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PrimaryEntry {
    /// Occupied slots in this primary bucket (not its chain).
    pub used: u32,
    /// First linked secondary bucket, or NONE.
    pub head: u32,
    /// Last linked secondary bucket, or NONE.
    pub tail: u32,
    /// Secondary buckets linked (the chain length).
    pub chain: u32,
}

/// A 256-bit filter of key fingerprints present in a secondary bucket.
pub type KeyFilter = [u64; 4];

/// Adds a key fingerprint to a filter.
pub fn filter_add(f: &mut KeyFilter, fp: u16) {
    for bit in [fp as u8, (fp >> 8) as u8] {
        f[(bit >> 6) as usize] |= 1 << (bit & 63);
    }
}

/// True if the filter may contain the fingerprint.
pub fn filter_has(f: &KeyFilter, fp: u16) -> bool {
    [fp as u8, (fp >> 8) as u8]
        .iter()
        .all(|&bit| f[(bit >> 6) as usize] & (1 << (bit & 63)) != 0)
}

/// One secondary bucket.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SecondaryEntry {
    /// Owning primary bucket (global index), or NONE when free.
    pub owner: u32,
    /// Position in the owner's chain, 1-based (0 when free).
    pub ordinal: u32,
    /// Next secondary bucket in the chain, or NONE.
    pub next: u32,
    /// Occupied slots.
    pub used: u32,
    /// Key fingerprints ever stored here since the last rebuild.
    pub filter: KeyFilter,
}

impl SecondaryEntry {
    /// A free, unlinked secondary bucket.
    pub fn free() -> Self {
        SecondaryEntry {
            owner: NONE,
            ordinal: 0,
            next: NONE,
            used: 0,
            filter: [0; 4],
        }
    }
}

/// Both bucket tables plus the free list of secondary buckets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tables {
    /// Primary table, indexed by global primary bucket.
    pub primary: Vec<PrimaryEntry>,
    /// Secondary table, indexed by secondary bucket number.
    pub secondary: Vec<SecondaryEntry>,
    /// Secondary buckets not linked to any chain, lowest first.
    pub free: BTreeSet<u32>,
}

/// Magic at the start of a persisted table image.
pub const TABLE_MAGIC: &[u8; 8] = b"TSTABLE1";
const PRIMARY_ENTRY: usize = 16;
const SECONDARY_ENTRY: usize = 48;

fn checksum(b: u64) -> Error {
    Error::corrupt(format!(
        "block {b} (byte offset {}) fails its checksum",
        b * crate::block::BLOCK_SIZE as u64
    ))
}

impl Tables {
    /// Empty tables for a new store.
    pub fn new(geometry: &Geometry, secondary: u32) -> Self {
        let primary = vec![
            PrimaryEntry {
                used: 0,
                head: NONE,
                tail: NONE,
                chain: 0,
            };
            geometry.primary_buckets() as usize
        ];
        Tables {
            primary,
            secondary: vec![SecondaryEntry::free(); secondary as usize],
            free: (0..secondary).collect(),
        }
    }

    /// Serialises the tables (see DESIGN.md, "Table image").
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(
            16 + self.primary.len() * PRIMARY_ENTRY + self.secondary.len() * SECONDARY_ENTRY,
        );
        out.extend_from_slice(TABLE_MAGIC);
        out.extend_from_slice(&(self.primary.len() as u32).to_le_bytes());
        out.extend_from_slice(&(self.secondary.len() as u32).to_le_bytes());
        for p in &self.primary {
            for v in [p.used, p.head, p.tail, p.chain] {
                out.extend_from_slice(&v.to_le_bytes());
            }
        }
        for s in &self.secondary {
            for v in [s.owner, s.ordinal, s.next, s.used] {
                out.extend_from_slice(&v.to_le_bytes());
            }
            for w in s.filter {
                out.extend_from_slice(&w.to_le_bytes());
            }
        }
        out
    }

    /// Parses a table image and checks it against the geometry.
    pub fn decode(b: &[u8], geometry: &Geometry, secondary: u32) -> Result<Tables> {
        let bad = |m: &str| Error::corrupt(format!("persisted bucket tables: {m}"));
        if b.len() < 16 || &b[..8] != TABLE_MAGIC {
            return Err(bad("bad magic"));
        }
        let np = crate::format::rd32(b, 8) as usize;
        let ns = crate::format::rd32(b, 12) as usize;
        if np != geometry.primary_buckets() as usize || ns != secondary as usize {
            return Err(bad("bucket counts disagree with the superblock"));
        }
        if b.len() != 16 + np * PRIMARY_ENTRY + ns * SECONDARY_ENTRY {
            return Err(bad("wrong length"));
        }
        let mut t = Tables::new(geometry, secondary);
        t.free.clear();
        let mut at = 16;
        for p in t.primary.iter_mut() {
            *p = PrimaryEntry {
                used: crate::format::rd32(b, at),
                head: crate::format::rd32(b, at + 4),
                tail: crate::format::rd32(b, at + 8),
                chain: crate::format::rd32(b, at + 12),
            };
            at += PRIMARY_ENTRY;
        }
        for (i, s) in t.secondary.iter_mut().enumerate() {
            s.owner = crate::format::rd32(b, at);
            s.ordinal = crate::format::rd32(b, at + 4);
            s.next = crate::format::rd32(b, at + 8);
            s.used = crate::format::rd32(b, at + 12);
            for (k, w) in s.filter.iter_mut().enumerate() {
                let mut a = [0u8; 8];
                a.copy_from_slice(&b[at + 16 + 8 * k..at + 24 + 8 * k]);
                *w = u64::from_le_bytes(a);
            }
            if s.owner == NONE {
                t.free.insert(i as u32);
            }
            at += SECONDARY_ENTRY;
        }
        t.validate_links(geometry)
            .map_err(|e| bad(&format!("{e}")))?;
        Ok(t)
    }

    /// Checks that every chain is well formed (no cycles, owners agree).
    pub fn validate_links(&self, geometry: &Geometry) -> Result<()> {
        let ns = self.secondary.len() as u32;
        let (pc, sc) = (geometry.primary_capacity(), geometry.secondary_capacity());
        let mut seen = vec![false; self.secondary.len()];
        for (g, p) in self.primary.iter().enumerate() {
            if p.used > pc {
                return Err(Error::corrupt(format!(
                    "primary bucket {g} claims {} used slots",
                    p.used
                )));
            }
            let mut s = p.head;
            let mut last = NONE;
            let mut k = 0u32;
            while s != NONE {
                if s >= ns || seen[s as usize] {
                    return Err(Error::corrupt(format!(
                        "chain of primary bucket {g} reaches bad or shared secondary bucket {s}"
                    )));
                }
                seen[s as usize] = true;
                k += 1;
                let e = &self.secondary[s as usize];
                if e.owner != g as u32 || e.ordinal != k || e.used > sc {
                    return Err(Error::corrupt(format!(
                        "secondary bucket {s} disagrees with the chain of primary bucket {g}"
                    )));
                }
                last = s;
                s = e.next;
            }
            if last != p.tail || k != p.chain {
                return Err(Error::corrupt(format!(
                    "chain of primary bucket {g} has a bad tail"
                )));
            }
        }
        for (i, e) in self.secondary.iter().enumerate() {
            if !seen[i] && e.owner != NONE {
                return Err(Error::corrupt(format!(
                    "secondary bucket {i} names owner {} but is not on its chain",
                    e.owner
                )));
            }
        }
        Ok(())
    }

    /// Rebuilds the tables by reading every block (checksums verified).
    pub(crate) fn rebuild(
        file: &MappedFile,
        geometry: &Geometry,
        secondary: u32,
    ) -> Result<Tables> {
        // One ascending pass over the whole file, in large reads.
        let mut reader = crate::file::SeqReader::new(file);
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
                used += blk.used();
                let mut bits = blk.bitmap();
                while bits != 0 {
                    let i = bits.trailing_zeros() as usize;
                    bits &= bits - 1;
                    filter_add(&mut filter, blk.key_fp(i));
                }
            }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filter_basics() {
        let mut f = [0u64; 4];
        filter_add(&mut f, 0x1234);
        assert!(filter_has(&f, 0x1234));
        assert!(!filter_has(&f, 0x5678));
    }

    #[test]
    fn image_roundtrip_and_damage() {
        let g = Geometry::for_expected_tags(1000);
        let mut t = Tables::new(&g, 3);
        t.primary[1] = PrimaryEntry {
            used: 100,
            head: 2,
            tail: 2,
            chain: 1,
        };
        t.secondary[2] = SecondaryEntry {
            owner: 1,
            ordinal: 1,
            next: NONE,
            used: 5,
            filter: [1, 2, 3, 4],
        };
        t.free.remove(&2);
        let img = t.encode();
        assert_eq!(Tables::decode(&img, &g, 3).expect("decodes"), t);
        assert!(Tables::decode(&img, &g, 4).is_err());
        let mut bad = img.clone();
        // Point the chain at itself: must be refused, never loop.
        let off = 16 + PRIMARY_ENTRY * g.primary_buckets() as usize + 2 * SECONDARY_ENTRY + 8;
        bad[off..off + 4].copy_from_slice(&2u32.to_le_bytes());
        assert!(Tables::decode(&bad, &g, 3).is_err());
    }
}
