//! The key scheme: how a Redis set key and member name a tag, and the one
//! place where a set operation becomes a store operation.
//!
//! * `o:<len>:<relationship>:<object>` is the set of subjects of that
//!   object under the relationship;
//! * `s:<len>:<relationship>:<subject>` is the set of objects carrying
//!   that subject under the relationship;
//!
//! `<len>` is the relationship's length in bytes, in decimal without
//! leading zeros, so any relationship (even one holding `:`) is named
//! exactly, and each tag has one spelling of each key (a proxy hashes the
//! key's bytes: two spellings would land on two nodes). The name after the
//! relationship's `:` runs to the end of the key. Keys and members are
//! binary-safe on the wire but must be UTF-8, as tags are.

use tagstore::{Half, Store, Tag};

/// A parsed key: which half of the index, the relationship, and the object
/// (`o:` keys) or subject (`s:` keys).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Key<'a> {
    pub half: Half,
    pub relationship: &'a str,
    pub name: &'a str,
}

/// Why a key or member is refused; the text follows `ERR ` in the reply.
pub type Refusal = String;

/// Digits of `<len>` at most: a relationship may hold up to 65,536 bytes
/// (`SCAN` lists the keys of any stored tag, and each must parse back).
pub const MAX_LEN_DIGITS: usize = 5;

/// Parses a key, or says what is wrong with it.
pub fn parse_key(raw: &[u8]) -> Result<Key<'_>, Refusal> {
    const FORMS: &str =
        "keys are o:<len>:<relationship>:<object> or s:<len>:<relationship>:<subject>";
    let (half, rest) = match raw {
        [b'o', b':', rest @ ..] => (Half::Object, rest),
        [b's', b':', rest @ ..] => (Half::Subject, rest),
        _ => {
            return Err(format!(
                "malformed key: must start with 'o:' or 's:' ({FORMS})"
            ))
        }
    };
    let Some(colon) = rest.iter().position(|&b| b == b':') else {
        return Err(format!(
            "malformed key: no ':' after the relationship length ({FORMS})"
        ));
    };
    let digits = &rest[..colon];
    let len = match digits {
        [] => None,
        [b'0', _, ..] => None, // a leading zero: two spellings of one key
        d if d.len() <= MAX_LEN_DIGITS && d.iter().all(u8::is_ascii_digit) => Some(
            d.iter()
                .fold(0usize, |n, &c| n * 10 + usize::from(c - b'0')),
        ),
        _ => None,
    };
    let Some(len) = len else {
        return Err(format!(
            "malformed key: relationship length '{}' is not a decimal number of at most {MAX_LEN_DIGITS} digits without leading zeros",
            String::from_utf8_lossy(digits).escape_default()
        ));
    };
    let body = &rest[colon + 1..];
    if len >= body.len() {
        return Err(format!(
            "malformed key: relationship length {len} does not fit in the rest of the key \
             ({} bytes, which must also hold ':' and the name)",
            body.len()
        ));
    }
    let (rel, tail) = body.split_at(len);
    let Some(name) = tail.strip_prefix(b":") else {
        return Err(format!(
            "malformed key: no ':' after the {len}-byte relationship"
        ));
    };
    fn utf8<'k>(b: &'k [u8], what: &str) -> Result<&'k str, Refusal> {
        std::str::from_utf8(b).map_err(|_| format!("malformed key: the {what} is not UTF-8"))
    }
    Ok(Key {
        half,
        relationship: utf8(rel, "relationship")?,
        name: utf8(
            name,
            if half == Half::Object {
                "object"
            } else {
                "subject"
            },
        )?,
    })
}

/// A member as a string, or the refusal for one that is not UTF-8.
pub fn member(raw: &[u8]) -> Result<&str, Refusal> {
    std::str::from_utf8(raw).map_err(|_| "member is not UTF-8".to_owned())
}

/// The tag a key and one of its members name, in new strings.
pub fn tag(key: &Key, member: &str) -> Tag {
    let mut t = Tag::new("", "", "");
    fill(&mut t, key, member);
    t
}

/// Makes `t` the tag a key and one of its members name, in its own
/// buffers (no allocation once they are large enough).
fn fill(t: &mut Tag, key: &Key, member: &str) {
    let (object, subject) = match key.half {
        Half::Object => (key.name, member),
        Half::Subject => (member, key.name),
    };
    for (field, value) in [
        (&mut t.object, object),
        (&mut t.relationship, key.relationship),
        (&mut t.subject, subject),
    ] {
        field.clear();
        field.push_str(value);
    }
}

thread_local! {
    /// The tag each request builds, reused: a member's tag costs no
    /// allocation (it cost three strings, allocated and freed, and the
    /// key two more: 8 % of a pipelined SADD's server CPU).
    static SCRATCH: std::cell::RefCell<Tag> = std::cell::RefCell::new(Tag::new("", "", ""));
}

/// Runs `f` on the tag a key and one of its members name.
pub fn with_tag<R>(key: &Key, member: &str, f: impl FnOnce(&Tag) -> R) -> R {
    SCRATCH.with(|cell| match cell.try_borrow_mut() {
        Ok(mut t) => {
            fill(&mut t, key, member);
            f(&t)
        }
        // Re-entered (never, on the event loop): a tag of its own.
        Err(_) => f(&tag(key, member)),
    })
}

/// A set write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    Add,
    Remove,
}

/// Applies `SADD`/`SREM` of one member's tag `t` to a key of half `half`:
/// true when the set changed.
///
/// The one place a key becomes a store write: in a half-only store (`serve
/// --half-only`) the key's half alone, else both halves of the tag.
pub fn apply(store: &Store, half: Half, t: &Tag, change: Change) -> tagstore::Result<bool> {
    match (change, store.is_half_only()) {
        (Change::Add, true) => store.insert_half(half, t),
        (Change::Remove, true) => store.delete_half(half, t),
        (Change::Add, false) => store.insert(t),
        (Change::Remove, false) => store.delete(t),
    }
}

/// `SISMEMBER` of one member (in the key's half).
pub fn contains(store: &Store, key: &Key, member: &str) -> tagstore::Result<bool> {
    with_tag(key, member, |t| store.contains_half(key.half, t))
}

/// True if the key's set has a member (a FIND that stops at the first).
pub fn has_member(store: &Store, key: &Key) -> tagstore::Result<bool> {
    let mut find = match key.half {
        Half::Object => store.find_subjects(key.name, key.relationship),
        Half::Subject => store.find_objects(key.name, key.relationship),
    };
    find.next().transpose().map(|m| m.is_some())
}

/// Calls `f` with every member of the key's set; returns how many.
pub fn members(store: &Store, key: &Key, f: impl FnMut(&str)) -> tagstore::Result<u64> {
    match key.half {
        Half::Object => store.for_each_subject(key.name, key.relationship, f),
        Half::Subject => store.for_each_object(key.name, key.relationship, f),
    }
}

/// The members of the key's set, read whole.
pub fn member_list(store: &Store, key: &Key) -> tagstore::Result<Vec<String>> {
    let mut names = Vec::new();
    members(store, key, |m| names.push(m.to_owned()))?;
    Ok(names)
}

/// Refuses the tag a key and a member name make when a string of it is
/// longer than a store takes.
pub fn check_fits(key: &Key, member: &str) -> tagstore::Result<()> {
    with_tag(key, member, Tag::check_size)
}

/// Empties the key's set of `names`, its members (`DEL`): in a whole-tag
/// store every tag the key names goes, both halves (so the other keys of
/// those tags lose a member too, as with `SREM`); in a half-only store the
/// key's half.
pub fn remove_all(store: &Store, key: &Key, names: &[String]) -> tagstore::Result<()> {
    let tags: Vec<Tag> = names.iter().map(|m| tag(key, m)).collect();
    if store.is_half_only() {
        for t in &tags {
            store.delete_half(key.half, t)?;
        }
    } else {
        store.delete_batch(&tags).1?;
    }
    Ok(())
}

/// The other key of the tag a key and one of its members name (its `s:`
/// key for an `o:` key, and the reverse).
pub fn other_key(key: &Key, member: &str) -> String {
    let rel = key.relationship;
    match key.half {
        Half::Object => format!("s:{}:{rel}:{member}", rel.len()),
        Half::Subject => format!("o:{}:{rel}:{member}", rel.len()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_parse_and_refuse() {
        let k = parse_key(b"o:5:photo:p1").expect("valid");
        assert_eq!(
            (k.half, k.relationship, k.name),
            (Half::Object, "photo", "p1")
        );
        let k = parse_key("s:3:a:b:sun set\t☀".as_bytes()).expect("valid");
        assert_eq!(
            (k.half, k.relationship, k.name),
            (Half::Subject, "a:b", "sun set\t☀")
        );
        let k = parse_key(b"o:0::").expect("empty rel and name");
        assert_eq!((k.relationship, k.name), ("", ""));
        // The longest relationship a tag holds has a five-digit length.
        let rel = "r".repeat(65_536);
        let long = format!("s:65536:{rel}:x");
        let k = parse_key(long.as_bytes()).expect("a 65,536-byte relationship");
        assert_eq!((k.relationship.len(), k.name), (65_536, "x"));
        for (bad, says) in [
            (&b"x:5:photo:p1"[..], "must start with"),
            (b"o5:photo:p1", "must start with"),
            (b"o:", "no ':'"),
            (b"o:5photo", "no ':'"),
            (b"o::photo:p1", "not a decimal"),
            (b"o:05:photo:p1", "not a decimal"),
            (b"o:+5:photo:p1", "not a decimal"),
            (b"o:1000:photo:p1", "does not fit"),
            (b"o:100000:photo:p1", "not a decimal"),
            (b"o:9:photo:p1", "does not fit"),
            (b"o:8:photo:p1", "does not fit"),
            (b"o:4:photo:p1", "no ':' after the 4-byte"),
            (b"o:5:ph\xffto:p1", "relationship is not UTF-8"),
            (b"s:5:photo:p\xff", "subject is not UTF-8"),
        ] {
            let e = parse_key(bad).expect_err(&String::from_utf8_lossy(bad));
            assert!(e.contains(says), "{e:?} should say {says:?}");
        }
    }

    #[test]
    fn other_key_names_the_same_tag() {
        let o = parse_key(b"o:3:a:b:p1").expect("valid");
        let s = other_key(&o, "sun:set");
        assert_eq!(s, "s:3:a:b:sun:set");
        let sk = parse_key(s.as_bytes()).expect("valid");
        assert_eq!(tag(&sk, "p1"), tag(&o, "sun:set"));
        assert_eq!(other_key(&sk, "p1"), "o:3:a:b:p1");
    }

    #[test]
    fn both_keys_name_one_tag() {
        let o = parse_key(b"o:5:photo:p1").expect("valid");
        let s = parse_key(b"s:5:photo:sunset").expect("valid");
        assert_eq!(tag(&o, "sunset"), tag(&s, "p1"));
        assert_eq!(tag(&o, "sunset"), Tag::new("p1", "photo", "sunset"));
    }
}
