//! Tags longer than a slot (format 3): which strings a tag stores as a
//! reference, and the reference's bytes (DESIGN.md §3.7).
//!
//! A tag that fits a slot is stored as it is. In one that does not, each
//! string longer than [`INLINE_MAX`] bytes is replaced by its reference:
//! U+FFFF (a noncharacter: `EF BF BF`) and 21 characters of a 126-bit
//! xxh3 hash of the string, 24 bytes in all; the string itself goes to the
//! store's strings file. A string that starts with U+FFFF is always stored
//! by reference, so a stored string starts with U+FFFF exactly when it is
//! one. The rule looks at the tag only, so the same tag always gives the
//! same slot, and every layer below the engine sees short tags. (Whether
//! a tag fits is judged with its U+FFFF strings counted as references.)

use super::tag::{encode, SlotBytes, Tag, MAX_TAG_BYTES, SLOT_HEADER};
use crate::error::Result;
use std::borrow::Cow;
use xxhash_rust::xxh3::xxh3_128;

/// First bytes of every reference (U+FFFF).
pub const REF_PREFIX: &str = "\u{FFFF}";
/// Bytes of a reference.
pub const REF_LEN: usize = 24;
/// Strings of at most this many bytes stay in the slot even in a long tag
/// (three of them and the header fit a slot).
pub const INLINE_MAX: usize = 48;
/// Largest string a tag may hold, in bytes.
pub const MAX_STRING_BYTES: usize = 65_536;

const DIGITS: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/// The reference that stands for `s` in a slot.
pub fn ref_of(s: &str) -> String {
    let b = ref_bytes(s);
    // The bytes are U+FFFF and ASCII digits: always UTF-8.
    String::from_utf8_lossy(&b).into_owned()
}

/// [`ref_of`] as bytes, without allocating.
pub fn ref_bytes(s: &str) -> [u8; REF_LEN] {
    let mut h = xxh3_128(s.as_bytes());
    let mut r = [0u8; REF_LEN];
    let p = REF_PREFIX.len();
    r[..p].copy_from_slice(REF_PREFIX.as_bytes());
    for d in &mut r[p..] {
        *d = DIGITS[(h & 63) as usize];
        h >>= 6;
    }
    r
}

/// True when stored bytes are a reference: U+FFFF and 21 digits. (A
/// store written before format 3 may hold other strings starting with
/// U+FFFF as they are.)
#[inline]
pub fn is_ref(b: &[u8]) -> bool {
    b.len() == REF_LEN
        && b.starts_with(REF_PREFIX.as_bytes())
        && b[REF_PREFIX.len()..]
            .iter()
            .all(|c| c.is_ascii_alphanumeric() || *c == b'-' || *c == b'_')
}

/// The tag as stored: itself when it fits a slot (the common case, no
/// copy), else with its long strings replaced by references. Refuses a
/// string longer than [`MAX_STRING_BYTES`].
pub fn shrink(tag: &Tag) -> Result<Cow<'_, Tag>> {
    let parts = [&tag.object, &tag.relationship, &tag.subject];
    let text: usize = parts.iter().map(|p| p.len()).sum();
    if text <= MAX_TAG_BYTES && !marked(tag) {
        return Ok(Cow::Borrowed(tag));
    }
    tag.check_size()?;
    // Judged with the marked strings already references (they may be
    // longer as references than as they are).
    let text: usize = parts
        .iter()
        .map(|p| {
            if p.starts_with(REF_PREFIX) {
                REF_LEN
            } else {
                p.len()
            }
        })
        .sum();
    let long = text > MAX_TAG_BYTES;
    let stored = |s: &String| {
        if s.starts_with(REF_PREFIX) || (long && s.len() > INLINE_MAX) {
            ref_of(s)
        } else {
            s.clone()
        }
    };
    let t = Tag {
        object: stored(&tag.object),
        relationship: stored(&tag.relationship),
        subject: stored(&tag.subject),
    };
    debug_assert!(t.encoded_len() <= SLOT_HEADER + MAX_TAG_BYTES);
    Ok(Cow::Owned(t))
}

/// The slot `tag` is stored in: its [`shrink`], encoded.
pub fn stored_slot(tag: &Tag) -> Result<SlotBytes> {
    encode(&*shrink(tag)?)
}

/// True when a string of `tag` starts with U+FFFF (stored by reference
/// whatever its length; a build before format 3 stored it as it is).
pub fn marked(tag: &Tag) -> bool {
    [&tag.object, &tag.relationship, &tag.subject]
        .iter()
        .any(|p| p.starts_with(REF_PREFIX))
}

/// The strings of `tag` that `stored` (its [`shrink`]) holds by reference.
pub fn referenced<'a>(tag: &'a Tag, stored: &'a Tag) -> impl Iterator<Item = &'a str> {
    [
        (&tag.object, &stored.object),
        (&tag.relationship, &stored.relationship),
        (&tag.subject, &stored.subject),
    ]
    .into_iter()
    .filter(|(t, s)| t != s)
    .map(|(t, _)| t.as_str())
}

/// The forms a string may take in stored tags: itself, when it can be
/// stored as it is (a string starting with U+FFFF only in a store written
/// before format 3), and its reference, when it can be one.
pub fn forms(s: &str) -> (Option<&str>, Option<[u8; REF_LEN]>) {
    let marked = s.starts_with(REF_PREFIX);
    let inline = (s.len() <= MAX_TAG_BYTES).then_some(s);
    let reference = (marked || s.len() > INLINE_MAX).then(|| ref_bytes(s));
    (inline, reference)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;

    #[test]
    fn a_tag_that_fits_is_stored_as_it_is() {
        let t = Tag::new("o".repeat(100), "r", "s".repeat(55));
        assert!(matches!(shrink(&t), Ok(Cow::Borrowed(_))));
    }

    #[test]
    fn long_strings_become_references_and_short_ones_stay() {
        let t = Tag::new("o".repeat(100), "owned_by", "s".repeat(57));
        let s = shrink(&t).expect("fits").into_owned();
        assert_eq!(s.object, ref_of(&t.object));
        assert_eq!(s.subject, ref_of(&t.subject));
        assert_eq!(s.relationship, "owned_by");
        assert_eq!(s.object.len(), REF_LEN);
        assert!(s.encoded_len() <= 160);
        let got: Vec<&str> = referenced(&t, &s).collect();
        assert_eq!(got, [t.object.as_str(), t.subject.as_str()]);
    }

    #[test]
    fn a_string_that_looks_like_a_reference_is_stored_as_one() {
        let t = Tag::new("\u{FFFF}x", "r", "s");
        let s = shrink(&t).expect("fits").into_owned();
        assert_eq!(s.object, ref_of("\u{FFFF}x"));
        assert_ne!(s.object, t.object);
        assert_eq!(
            forms("\u{FFFF}x"),
            (Some("\u{FFFF}x"), Some(ref_bytes("\u{FFFF}x")))
        );
        assert_eq!(ref_of("\u{FFFF}x").as_bytes(), ref_bytes("\u{FFFF}x"));
    }

    /// A marked string grows to a reference: the tag is judged with it.
    #[test]
    fn a_marked_string_can_make_a_tag_long() {
        let t = Tag::new("o".repeat(150), "r", "\u{FFFF}");
        let s = shrink(&t).expect("fits").into_owned();
        assert_eq!(s.object, ref_of(&t.object));
        assert!(s.encoded_len() <= 160);
    }

    #[test]
    fn references_differ_and_are_utf8_of_fixed_length() {
        let a = ref_of("a");
        let b = ref_of("b");
        assert_ne!(a, b);
        assert_eq!(a.len(), REF_LEN);
        assert!(is_ref(a.as_bytes()));
        assert!(!is_ref(b"plain"));
        assert!(!is_ref("\u{FFFF}short".as_bytes()));
        assert!(!is_ref(format!("\u{FFFF}{}", "!".repeat(21)).as_bytes()));
    }

    #[test]
    fn a_string_past_the_limit_is_refused() {
        let t = Tag::new("o".repeat(MAX_STRING_BYTES + 1), "r", "s");
        match shrink(&t) {
            Err(Error::TagTooLarge { needed, limit }) => {
                assert_eq!((needed, limit), (MAX_STRING_BYTES + 1, MAX_STRING_BYTES))
            }
            other => panic!("expected TagTooLarge, got {other:?}"),
        }
        let t = Tag::new("o".repeat(MAX_STRING_BYTES), "r", "s");
        assert!(shrink(&t).is_ok());
        // Two strings past the limit: the longest is named.
        let t = Tag::new("o".repeat(MAX_STRING_BYTES + 1), "r", "s".repeat(70_000));
        assert!(matches!(
            shrink(&t),
            Err(Error::TagTooLarge { needed: 70_000, .. })
        ));
        assert!(matches!(
            t.check_size(),
            Err(Error::TagTooLarge { needed: 70_000, .. })
        ));
    }
}
