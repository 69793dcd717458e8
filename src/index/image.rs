//! The table image written at a clean close, so the next open needs no scan (DESIGN.md §4).

use super::tables::{PrimaryEntry, Tables};
use crate::error::{Error, Result};
use crate::format::bytes::rd32;
use crate::format::{Layout, NONE};

/// Magic at the start of a persisted table image.
pub const TABLE_MAGIC: &[u8; 8] = b"TSTABLE2";
/// The image before secondary extents (still read: extents unknown).
pub const TABLE_MAGIC_1: &[u8; 8] = b"TSTABLE1";
const PRIMARY_ENTRY: usize = 16;
const SECONDARY_ENTRY: usize = 48;

impl Tables {
    /// Serialises the tables with the secondary buckets' `extents` (see
    /// DESIGN.md, "Table image").
    pub fn encode(&self, extents: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(
            16 + self.primary.len() * PRIMARY_ENTRY + self.secondary.len() * (SECONDARY_ENTRY + 1),
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
        for i in 0..self.secondary.len() {
            out.push(extents.get(i).copied().unwrap_or(0));
        }
        out
    }

    /// Parses a table image and checks it against the geometry.
    pub fn decode(b: &[u8], geometry: &Layout, secondary: u32) -> Result<Tables> {
        let bad = |m: &str| Error::corrupt(format!("persisted bucket tables: {m}"));
        if b.len() < 16 || (&b[..8] != TABLE_MAGIC && &b[..8] != TABLE_MAGIC_1) {
            return Err(bad("bad magic"));
        }
        let with_extents = &b[..8] == TABLE_MAGIC;
        let np = rd32(b, 8) as usize;
        let ns = rd32(b, 12) as usize;
        if np != geometry.primary_buckets() as usize || ns != secondary as usize {
            return Err(bad("bucket counts disagree with the superblock"));
        }
        let entries = 16 + np * PRIMARY_ENTRY + ns * SECONDARY_ENTRY;
        if b.len() != entries + if with_extents { ns } else { 0 } {
            return Err(bad("wrong length"));
        }
        let mut t = Tables::new(geometry, secondary);
        t.free.clear();
        let mut at = 16;
        for p in t.primary.iter_mut() {
            *p = PrimaryEntry {
                used: rd32(b, at),
                head: rd32(b, at + 4),
                tail: rd32(b, at + 8),
                chain: rd32(b, at + 12),
            };
            at += PRIMARY_ENTRY;
        }
        for (i, s) in t.secondary.iter_mut().enumerate() {
            s.owner = rd32(b, at);
            s.ordinal = rd32(b, at + 4);
            s.next = rd32(b, at + 8);
            s.used = rd32(b, at + 12);
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
        if with_extents {
            let max = geometry.blocks_per_secondary + 1;
            t.extents = b[entries..]
                .iter()
                .map(|&e| if u32::from(e) > max { 0 } else { e })
                .collect();
        }
        t.validate_links(geometry)
            .map_err(|e| bad(&format!("{e}")))?;
        Ok(t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::SecondaryEntry;

    #[test]
    fn image_roundtrip_and_damage() {
        let g = Layout::v2(crate::Geometry::for_expected_tags(1000));
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
        t.extents = vec![0, 0, 3];
        let img = t.encode(&t.extents);
        assert_eq!(Tables::decode(&img, &g, 3).expect("decodes"), t);
        // An image of the version before extents still decodes, extents unknown.
        let mut v1 = img[..img.len() - 3].to_vec();
        v1[..8].copy_from_slice(TABLE_MAGIC_1);
        let old = Tables::decode(&v1, &g, 3).expect("decodes");
        assert!(old.extents.is_empty());
        assert_eq!(old.secondary, t.secondary);
        assert!(Tables::decode(&img, &g, 4).is_err());
        let mut bad = img.clone();
        // Point the chain at itself: must be refused, never loop.
        let off = 16 + PRIMARY_ENTRY * g.primary_buckets() as usize + 2 * SECONDARY_ENTRY + 8;
        bad[off..off + 4].copy_from_slice(&2u32.to_le_bytes());
        assert!(Tables::decode(&bad, &g, 3).is_err());
    }
}
