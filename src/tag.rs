//! Tags, their 160-byte slot encoding, and the keyed hashes that place them.

use crate::error::{Error, Result};
use xxhash_rust::xxh3::xxh3_64_with_seed;

/// Size of one tag slot in bytes.
pub const SLOT_SIZE: usize = 160;
/// Bytes of a slot taken by the slot header (marker and three lengths).
pub const SLOT_HEADER: usize = 4;
/// Largest total length of object + relationship + subject, in bytes.
pub const MAX_TAG_BYTES: usize = SLOT_SIZE - SLOT_HEADER;
/// First byte of every occupied slot.
pub(crate) const SLOT_MARKER: u8 = 0xA5;

/// One `<object, relationship, subject>` tag.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Tag {
    /// The tagged thing (a photo, a book, a package).
    pub object: String,
    /// The kind of relation (`isa`, `owns`, `owned_by`).
    pub relationship: String,
    /// What the object is tagged with.
    pub subject: String,
}

impl Tag {
    /// Builds a tag from three string-like values.
    pub fn new(
        object: impl Into<String>,
        relationship: impl Into<String>,
        subject: impl Into<String>,
    ) -> Self {
        Tag {
            object: object.into(),
            relationship: relationship.into(),
            subject: subject.into(),
        }
    }

    /// Bytes this tag needs in a slot.
    pub fn encoded_len(&self) -> usize {
        SLOT_HEADER + self.object.len() + self.relationship.len() + self.subject.len()
    }
}

/// Which half of the double index a key belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Half {
    /// Tags indexed by (relationship, object): answers FIND <object, rel, *>.
    Object = 0,
    /// Tags indexed by (relationship, subject): answers FIND <*, rel, subject>.
    Subject = 1,
}

impl Half {
    /// Both halves, object first.
    pub const BOTH: [Half; 2] = [Half::Object, Half::Subject];

    /// The half's index (0 object, 1 subject).
    pub fn index(self) -> usize {
        self as usize
    }
}

/// An encoded slot image.
pub type SlotBytes = [u8; SLOT_SIZE];

/// Encodes a tag into a slot image, or says how many bytes it would need.
pub fn encode(tag: &Tag) -> Result<SlotBytes> {
    let needed = tag.encoded_len();
    if needed > SLOT_SIZE {
        return Err(Error::TagTooLarge {
            needed,
            limit: SLOT_SIZE,
        });
    }
    let mut s = [0u8; SLOT_SIZE];
    s[0] = SLOT_MARKER;
    // Each length is < 157 because the total fits, so the casts are exact.
    s[1] = tag.object.len() as u8;
    s[2] = tag.relationship.len() as u8;
    s[3] = tag.subject.len() as u8;
    let mut at = SLOT_HEADER;
    for part in [&tag.object, &tag.relationship, &tag.subject] {
        s[at..at + part.len()].copy_from_slice(part.as_bytes());
        at += part.len();
    }
    Ok(s)
}

/// Borrowed view of an encoded slot's three fields.
pub struct SlotView<'a> {
    /// Object.
    pub object: &'a str,
    /// Relationship.
    pub relationship: &'a str,
    /// Subject.
    pub subject: &'a str,
}

impl SlotView<'_> {
    /// Owned copy.
    pub fn to_tag(&self) -> Tag {
        Tag::new(self.object, self.relationship, self.subject)
    }

    /// The key field of this half (object or subject).
    pub fn key_name(&self, half: Half) -> &str {
        match half {
            Half::Object => self.object,
            Half::Subject => self.subject,
        }
    }

    /// The field a FIND on this half returns.
    pub fn other_name(&self, half: Half) -> &str {
        match half {
            Half::Object => self.subject,
            Half::Subject => self.object,
        }
    }
}

/// Decodes an occupied slot; `None` if it is not a well-formed slot.
pub fn decode(s: &[u8]) -> Option<SlotView<'_>> {
    if s.len() != SLOT_SIZE || s[0] != SLOT_MARKER {
        return None;
    }
    let (lo, lr, ls) = (s[1] as usize, s[2] as usize, s[3] as usize);
    let end = SLOT_HEADER + lo + lr + ls;
    if end > SLOT_SIZE || s[end..].iter().any(|&b| b != 0) {
        return None;
    }
    let o = std::str::from_utf8(&s[SLOT_HEADER..SLOT_HEADER + lo]).ok()?;
    let r = std::str::from_utf8(&s[SLOT_HEADER + lo..SLOT_HEADER + lo + lr]).ok()?;
    let sub = std::str::from_utf8(&s[SLOT_HEADER + lo + lr..end]).ok()?;
    Some(SlotView {
        object: o,
        relationship: r,
        subject: sub,
    })
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

/// Index of the primary bucket within a half of `buckets` buckets.
pub fn bucket_of(h: u64, buckets: u32) -> u32 {
    ((h as u128 * buckets as u128) >> 64) as u32
}

/// 8-bit whole-tag fingerprint kept per slot in the block header.
pub fn tag_fp(seed: u64, slot: &SlotBytes) -> u8 {
    fp_of_tag_hash(tag_hash(seed, used_prefix(slot)))
}

/// 8-bit whole-tag fingerprint of the used prefix of a slot.
pub(crate) fn tag_fp_of(seed: u64, used: &[u8]) -> u8 {
    fp_of_tag_hash(tag_hash(seed, used))
}

/// Keyed 64-bit hash of a whole tag (the used prefix of its slot): its top
/// byte is the 8-bit tag fingerprint, its low 32 bits key the chain
/// indexes' tag maps.
pub(crate) fn tag_hash(seed: u64, used: &[u8]) -> u64 {
    xxh3_64_with_seed(used, seed ^ 0x9E37_79B9_7F4A_7C15)
}

/// The 8-bit tag fingerprint within a [`tag_hash`].
pub(crate) fn fp_of_tag_hash(h: u64) -> u8 {
    (h >> 56) as u8
}

/// Used prefix of an encoded slot.
pub(crate) fn used_prefix(slot: &[u8]) -> &[u8] {
    let len = SLOT_HEADER + slot[1] as usize + slot[2] as usize + slot[3] as usize;
    &slot[..len.min(slot.len())]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip_and_limits() {
        let t = Tag::new("photo\t1", "isa", "日本の夕日");
        let s = encode(&t).expect("fits");
        let v = decode(&s).expect("decodes");
        assert_eq!(v.to_tag(), t);
        let big = Tag::new("o".repeat(100), "r", "s".repeat(60));
        match encode(&big) {
            Err(Error::TagTooLarge { needed, limit }) => {
                assert_eq!(needed, 165);
                assert_eq!(limit, 160);
            }
            other => panic!("expected TagTooLarge, got {other:?}"),
        }
        let exact = Tag::new("o".repeat(150), "r", "sssss");
        assert!(encode(&exact).is_ok());
        let empty = Tag::new("", "", "");
        let s = encode(&empty).expect("fits");
        assert_eq!(decode(&s).expect("decodes").to_tag(), empty);
    }

    #[test]
    fn decode_rejects_garbage() {
        let mut s = [0u8; SLOT_SIZE];
        assert!(decode(&s).is_none());
        s[0] = SLOT_MARKER;
        s[1] = 200;
        assert!(decode(&s).is_none());
        s[1] = 2;
        s[4] = 0xff;
        s[5] = 0xfe;
        assert!(decode(&s).is_none());
    }

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
