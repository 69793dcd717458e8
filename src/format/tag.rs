//! Tags and their 160-byte slot encoding.

use super::long::MAX_STRING_BYTES;
use crate::error::{Error, Result};

/// Size of one tag slot in bytes.
pub const SLOT_SIZE: usize = 160;
/// Bytes of a slot taken by the slot header (marker and three lengths).
pub const SLOT_HEADER: usize = 4;
/// Largest total length of object + relationship + subject stored in the
/// slot itself, in bytes (a longer tag holds its long strings by reference).
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

    /// Bytes this tag needs in a slot when stored as it is (a tag past
    /// [`SLOT_SIZE`] holds its long strings by reference).
    pub fn encoded_len(&self) -> usize {
        SLOT_HEADER + self.object.len() + self.relationship.len() + self.subject.len()
    }

    /// Refuses a tag with a string longer than a store takes
    /// ([`Error::TagTooLarge`]), as an INSERT would.
    pub fn check_size(&self) -> Result<()> {
        let longest = [&self.object, &self.relationship, &self.subject]
            .iter()
            .map(|p| p.len())
            .max()
            .unwrap_or(0);
        if longest > MAX_STRING_BYTES {
            return Err(Error::TagTooLarge {
                needed: longest,
                limit: MAX_STRING_BYTES,
            });
        }
        Ok(())
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

/// Encodes a tag that fits a slot into a slot image (a longer one is
/// first shrunk by `long::shrink`).
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
    /// The key field of this half (object or subject).
    pub fn key_name(&self, half: Half) -> &str {
        match half {
            Half::Object => self.object,
            Half::Subject => self.subject,
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
    if end > SLOT_SIZE || !all_zero(&s[end..]) {
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

/// True when every byte is zero: eight bytes at a time (a byte loop over a
/// slot's padding was most of what decoding cost a split).
fn all_zero(b: &[u8]) -> bool {
    let (words, rest) = b.as_chunks::<8>();
    words.iter().fold(0u64, |a, w| a | u64::from_ne_bytes(*w)) == 0 && rest.iter().all(|&x| x == 0)
}

/// The subject half's key in an encoded slot: the relationship's length,
/// and the relationship and subject bytes (adjacent in a slot). Two slots
/// give equal values exactly when their tags share that key.
pub fn subject_key(slot: &[u8]) -> (u8, &[u8]) {
    let start = SLOT_HEADER + slot[1] as usize;
    let end = start + slot[2] as usize + slot[3] as usize;
    (slot[2], slot.get(start..end).unwrap_or_default())
}

/// Used prefix of an encoded slot.
pub fn used_prefix(slot: &[u8]) -> &[u8] {
    let len = SLOT_HEADER + slot[1] as usize + slot[2] as usize + slot[3] as usize;
    &slot[..len.min(slot.len())]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bulk path reads a slot's counted key (relationship, subject)
    /// from these bytes: a key must not match another that splits the same
    /// bytes differently.
    #[test]
    fn subject_keys_differ_where_the_relationship_ends() {
        let a = encode(&Tag::new("o", "ab", "c")).expect("fits");
        let b = encode(&Tag::new("p", "a", "bc")).expect("fits");
        let c = encode(&Tag::new("q", "ab", "c")).expect("fits");
        assert_ne!(subject_key(&a), subject_key(&b));
        assert_eq!(subject_key(&a), subject_key(&c));
        assert_eq!(subject_key(&a).1, b"abc");
    }

    #[test]
    fn roundtrip_and_limits() {
        let t = Tag::new("photo\t1", "isa", "日本の夕日");
        let s = encode(&t).expect("fits");
        let v = decode(&s).expect("decodes");
        assert_eq!(Tag::new(v.object, v.relationship, v.subject), t);
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
        let v = decode(&s).expect("decodes");
        assert_eq!(Tag::new(v.object, v.relationship, v.subject), empty);
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

    /// A slot is canonical: one non-zero byte anywhere in its padding
    /// (word-aligned or not, up to the last byte) makes it garbage.
    #[test]
    fn decode_rejects_any_non_zero_padding_byte() {
        for t in [Tag::new("o", "r", "s"), Tag::new("obj", "isa", "sunset!")] {
            let good = encode(&t).expect("fits");
            let end = used_prefix(&good).len();
            for at in end..SLOT_SIZE {
                let mut s = good;
                s[at] = 1;
                assert!(decode(&s).is_none(), "padding byte {at} of {t:?}");
            }
            assert!(decode(&good).is_some());
        }
    }
}
