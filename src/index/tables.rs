//! Bucket tables: per-bucket fill, chain links and key filters, kept in memory.
//!
//! Zhang's full bit is derived from `used == capacity`; its linked bit from
//! `owner != NONE`; its extend pointer is `head` (primary) and `next` (secondary).
//! Tables are persisted on clean shutdown (see [`Tables::encode`]) and rebuilt
//! from block headers after an unclean one ([`Tables::rebuild`]).

use crate::error::{Error, Result};
use crate::format::{Layout, NONE};
use std::collections::BTreeSet;

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
    /// Per secondary bucket, as read from a table image or learnt by a
    /// rebuild: 0 unknown, else 1 + the blocks worth reading (up to the
    /// highest written). Handed to the accelerators when the index is built.
    pub extents: Vec<u8>,
}

impl Tables {
    /// Empty tables for a new store.
    pub fn new(geometry: &Layout, secondary: u32) -> Self {
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
            extents: Vec::new(),
        }
    }

    /// The secondary buckets of primary bucket `g`'s chain, in order.
    pub fn grow_primary(&mut self, primary: u32) {
        self.primary.resize(
            primary as usize,
            PrimaryEntry {
                used: 0,
                head: NONE,
                tail: NONE,
                chain: 0,
            },
        );
    }

    pub fn chain(&self, g: u32) -> Chain<'_> {
        self.chain_from(self.primary.get(g as usize).map_or(NONE, |e| e.head))
    }

    /// A chain's secondary buckets from bucket `s` on, in order.
    pub fn chain_from(&self, s: u32) -> Chain<'_> {
        Chain {
            t: self,
            s,
            left: self.secondary.len(),
        }
    }

    /// Tags in the chain of primary bucket `g`, its primary bucket included.
    pub fn chain_load(&self, g: u32) -> u64 {
        let own = self.primary.get(g as usize).map_or(0, |e| e.used as u64);
        own + self.chain(g).map(|(_, e)| e.used as u64).sum::<u64>()
    }

    /// Checks that every chain is well formed (no cycles, owners agree).
    pub fn validate_links(&self, geometry: &Layout) -> Result<()> {
        let (pc, sc) = (geometry.primary_capacity(), geometry.secondary_capacity());
        let mut seen = vec![false; self.secondary.len()];
        for (g, p) in self.primary.iter().enumerate() {
            if p.used > pc {
                return Err(Error::corrupt(format!(
                    "primary bucket {g} claims {} used slots",
                    p.used
                )));
            }
            let mut last = NONE;
            let mut k = 0u32;
            for (s, e) in self.chain(g as u32) {
                if seen[s as usize] {
                    return Err(Error::corrupt(format!(
                        "chain of primary bucket {g} reaches shared secondary bucket {s}"
                    )));
                }
                seen[s as usize] = true;
                k += 1;
                if e.owner != g as u32 || e.ordinal != k || e.used > sc {
                    return Err(Error::corrupt(format!(
                        "secondary bucket {s} disagrees with the chain of primary bucket {g}"
                    )));
                }
                last = s;
            }
            // The walk stops early at a bad link or a cycle: a chain must end in NONE.
            let end = self.secondary.get(last as usize).map_or(p.head, |e| e.next);
            if end != NONE {
                return Err(Error::corrupt(format!(
                    "chain of primary bucket {g} reaches bad or shared secondary bucket {end}"
                )));
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
}

/// The secondary buckets of one chain, in order: `(bucket, entry)`.
/// Stops at a link past the table and after as many steps as there are
/// buckets, so a damaged (cyclic) chain cannot loop forever.
pub struct Chain<'t> {
    t: &'t Tables,
    s: u32,
    left: usize,
}

impl<'t> Iterator for Chain<'t> {
    type Item = (u32, &'t SecondaryEntry);

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        if self.left == 0 {
            return None;
        }
        let s = self.s;
        let e = self.t.secondary.get(s as usize)?;
        self.s = e.next;
        self.left -= 1;
        Some((s, e))
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
}
