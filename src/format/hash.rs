//! The keyed hashes that place a tag: which primary bucket holds a key, and the fingerprints kept per slot.

use super::layout::Layout;
use super::tag::{used_prefix, Half, SlotBytes, SLOT_SIZE};
use xxhash_rust::xxh3::xxh3_64_with_seed;

/// Where a key lives: its global primary bucket and its 64-bit hash.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Place {
    /// Global primary bucket index (both halves counted).
    pub bucket: u32,
    /// The key's hash; its low 16 bits are the key fingerprint.
    pub hash: u64,
}

impl Place {
    /// The 16-bit key fingerprint kept per slot.
    pub fn fp(&self) -> u16 {
        key_fp(self.hash)
    }
}

/// Places the key (half, relationship, name) of a store laid out as `l` with `seed`.
pub fn place(l: &Layout, seed: u64, half: Half, relationship: &str, name: &str) -> Place {
    let hash = key_hash(seed, half, relationship, name);
    Place {
        bucket: l.global(half, l.bucket_of(hash)),
        hash,
    }
}

/// Hash of a (half, relationship, name) key under the store's seed.
pub fn key_hash(seed: u64, half: Half, relationship: &str, name: &str) -> u64 {
    // half byte + relationship length byte + both strings; both fit in one slot.
    let mut buf = [0u8; 2 + 2 * SLOT_SIZE];
    let (r, n) = (relationship.as_bytes(), name.as_bytes());
    if r.len() + n.len() > 2 * SLOT_SIZE - 2 {
        // Longer than any storable key: hash a heap copy (only reachable for
        // FIND with an impossible key, which then finds nothing).
        let mut v = Vec::with_capacity(2 + r.len() + n.len());
        v.push(half as u8);
        v.extend_from_slice(&(r.len() as u64).to_le_bytes());
        v.extend_from_slice(r);
        v.extend_from_slice(n);
        return xxh3_64_with_seed(&v, seed);
    }
    buf[0] = half as u8;
    buf[1] = r.len() as u8;
    buf[2..2 + r.len()].copy_from_slice(r);
    buf[2 + r.len()..2 + r.len() + n.len()].copy_from_slice(n);
    xxh3_64_with_seed(&buf[..2 + r.len() + n.len()], seed)
}

/// 16-bit key fingerprint kept per slot in the block header.
pub fn key_fp(h: u64) -> u16 {
    h as u16
}

/// Index of the primary bucket within a half of `buckets` buckets (format 1).
pub fn bucket_of(h: u64, buckets: u32) -> u32 {
    ((h as u128 * buckets as u128) >> 64) as u32
}

/// 8-bit whole-tag fingerprint kept per slot in the block header.
pub fn tag_fp(seed: u64, slot: &SlotBytes) -> u8 {
    fp_of_tag_hash(tag_hash(seed, used_prefix(slot)))
}

/// 8-bit whole-tag fingerprint of the used prefix of a slot.
pub fn tag_fp_of(seed: u64, used: &[u8]) -> u8 {
    fp_of_tag_hash(tag_hash(seed, used))
}

/// Keyed 64-bit hash of a whole tag (the used prefix of its slot): its top
/// byte is the 8-bit tag fingerprint, its low 32 bits key the chain
/// indexes' tag maps.
pub fn tag_hash(seed: u64, used: &[u8]) -> u64 {
    xxh3_64_with_seed(used, seed ^ 0x9E37_79B9_7F4A_7C15)
}

/// The 8-bit tag fingerprint within a [`tag_hash`].
pub fn fp_of_tag_hash(h: u64) -> u8 {
    (h >> 56) as u8
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_hash_depends_on_seed_half_and_split() {
        let a = key_hash(1, Half::Object, "isa", "x");
        assert_ne!(a, key_hash(2, Half::Object, "isa", "x"));
        assert_ne!(a, key_hash(1, Half::Subject, "isa", "x"));
        assert_ne!(
            key_hash(1, Half::Object, "ab", "c"),
            key_hash(1, Half::Object, "a", "bc")
        );
    }
}
