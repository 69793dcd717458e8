//! `SCAN cursor [MATCH pattern] [COUNT n]`: a tagstore extension listing
//! the keys a node holds, for the cluster tools (`tagstore cluster`) and for
//! `redis-cli --scan`.
//!
//! A store has no key table: its keys are derived from its tags, each tag
//! giving its `o:` key (from the object half) and its `s:` key (from the
//! subject half). A page lists the keys of the next buckets of one half
//! (`Store::key_page`, whose cursor survives growth between pages): the
//! object half's first, then the subject half's, the top bit of the cursor
//! saying which. `COUNT` is how many buckets (or keys) a page takes at
//! most, `MATCH` filters what they hold, so a page may be short or empty
//! with a cursor that is not 0, as Redis's. A key present throughout a scan
//! is returned exactly once; a page costs the tags of its buckets, not the
//! store's (it cost every tag until 2026-11-29: a full scan in pages of 10
//! keys, as `redis-cli --scan` asks, took hours on a node of millions).

use super::sscan::glob;
use tagstore::{Half, Store};

/// The cursor bit of the subject half.
const SUBJECT: u64 = 1 << 63;

/// One page: the keys and the next cursor (0: finished).
pub fn page(
    store: &Store,
    cursor: u64,
    pattern: Option<&[u8]>,
    count: usize,
) -> tagstore::Result<(Vec<String>, u64)> {
    let count = count.max(1);
    let mut keys: Vec<String> = Vec::new();
    let mut cursor = cursor;
    loop {
        let (half, prefix, at) = match cursor & SUBJECT {
            0 => (Half::Object, 'o', cursor),
            _ => (Half::Subject, 's', cursor & !SUBJECT),
        };
        let p = store.key_page(half, at, count - keys.len().min(count - 1))?;
        keys.extend(
            p.keys
                .into_iter()
                .map(|(rel, name)| format!("{prefix}:{}:{rel}:{name}", rel.len()))
                .filter(|k| pattern.is_none_or(|pat| glob(pat, k.as_bytes()))),
        );
        cursor = match (p.next, half) {
            (0, Half::Object) => SUBJECT,
            (0, Half::Subject) => 0,
            (n, Half::Object) => n,
            (n, Half::Subject) => n | SUBJECT,
        };
        // The object half done with room left: the subject half's first
        // buckets in the same page.
        if cursor == SUBJECT && keys.len() < count {
            continue;
        }
        return Ok((keys, cursor));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;
    use tagstore::{CreateOptions, Tag};

    /// The two keys of a tag: its `o:` key and its `s:` key.
    fn keys_of(t: &Tag) -> [String; 2] {
        let r = &t.relationship;
        [
            format!("o:{}:{r}:{}", r.len(), t.object),
            format!("s:{}:{r}:{}", r.len(), t.subject),
        ]
    }

    /// Every page of a scan from the start, calling `between` after each.
    fn scan_all(store: &Store, count: usize, mut between: impl FnMut()) -> Vec<String> {
        let (mut got, mut cursor) = (Vec::new(), 0);
        loop {
            let (keys, next) = page(store, cursor, None, count).expect("page");
            got.extend(keys);
            between();
            if next == 0 {
                return got;
            }
            cursor = next;
        }
    }

    /// A store that grows several levels while a scan runs in small pages
    /// still returns each key present throughout exactly once (splits move
    /// keys to buckets past the cursor, and between levels the table
    /// doubles); a long key stored in two forms comes once.
    #[test]
    fn pages_survive_growth() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store =
            Store::create(dir.path().join("g.tags"), &CreateOptions::default()).expect("create");
        let long = "L".repeat(120);
        let mut want = BTreeSet::new();
        for i in 0..3000 {
            // Objects of 120 bytes: stored inline beside a short subject,
            // by reference beside a long one (two forms of one key).
            let obj = if i % 50 == 0 {
                long.clone()
            } else {
                format!("p{i}")
            };
            let subj = if i % 100 == 0 {
                "S".repeat(100)
            } else {
                format!("s{}", i % 37)
            };
            let t = Tag::new(obj, "isa", subj);
            want.extend(keys_of(&t));
            store.insert(&t).expect("insert");
        }
        let before = store.stats().expect("stats").primary_buckets;
        let mut fresh = 0;
        let got = scan_all(&store, 5, || {
            for _ in 0..100 {
                fresh += 1;
                let t = Tag::new(format!("new{fresh}"), "was", format!("n{}", fresh % 7));
                store.insert(&t).expect("insert");
            }
        });
        let after = store.stats().expect("stats").primary_buckets;
        assert!(
            after >= 4 * before,
            "grew from {before} to {after} buckets only"
        );
        let mut seen = BTreeSet::new();
        for k in &got {
            assert!(seen.insert(k.clone()), "{k} returned twice");
        }
        let missing: Vec<&String> = want.difference(&seen).collect();
        assert!(
            missing.is_empty(),
            "{} keys missing: {:?}",
            missing.len(),
            &missing[..missing.len().min(5)]
        );
        for k in seen.difference(&want) {
            assert!(k.contains(":was:"), "{k} was never stored");
        }
        store.close().expect("close");
    }

    /// Small pages cover every key once; MATCH filters; writes between
    /// pages do not make a key present throughout disappear or repeat.
    #[test]
    fn pages_cover_every_key_once() {
        let dir = tempfile::tempdir().expect("tempdir");
        let opts = CreateOptions {
            expected_tags: 1000,
            ..CreateOptions::default()
        };
        let store = Store::create(dir.path().join("s.tags"), &opts).expect("create");
        let mut want = BTreeSet::new();
        for i in 0..200 {
            let t = Tag::new(format!("p{i}"), "isa", format!("s{}", i % 17));
            for k in keys_of(&t) {
                want.insert(k);
            }
            store.insert(&t).expect("insert");
        }
        for (pattern, count) in [(None, 7), (Some(&b"s:*"[..]), 3), (None, 100_000)] {
            let (mut got, mut seen, mut cursor) = (Vec::new(), BTreeSet::new(), 0);
            let mut extra = 0;
            loop {
                let (keys, next) = page(&store, cursor, pattern, count).expect("page");
                got.extend(keys);
                // A write between pages: keys come and go, the others stay.
                extra += 1;
                let t = Tag::new(format!("new{extra}"), "isa", "fresh");
                store.insert(&t).expect("insert");
                if next == 0 {
                    break;
                }
                cursor = next;
            }
            for k in &got {
                assert!(seen.insert(k.clone()), "{k} returned twice");
            }
            let expected: BTreeSet<String> = want
                .iter()
                .filter(|k| pattern.is_none_or(|p| glob(p, k.as_bytes())))
                .cloned()
                .collect();
            assert!(expected.is_subset(&seen), "{pattern:?} {count}");
            for k in seen.difference(&expected) {
                assert!(k.contains("new") || k.ends_with("fresh"), "{k}");
            }
            for e in 1..=extra {
                store
                    .delete(&Tag::new(format!("new{e}"), "isa", "fresh"))
                    .expect("delete");
            }
        }
        store.close().expect("close");
    }
}
