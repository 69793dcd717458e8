//! `SCAN cursor [MATCH pattern] [COUNT n]`: a tagstore extension listing
//! the keys a node holds, for the cluster tools (`tagstore cluster`) and for
//! `redis-cli --scan`.
//!
//! A store has no key table: its keys are derived from its tags, each tag
//! giving its `o:` key and its `s:` key. A call therefore walks every tag
//! (`Store::tags`, the export), keeps the keys matching `MATCH`, and pages
//! them as SSCAN pages members: keys are ordered by the unseeded xxh3 of
//! their bytes, the cursor `c` means "keys whose hash is ≥ c", a page is the
//! `COUNT` smallest hashes at or past the cursor (plus every key sharing the
//! last one), and the next cursor is that hash + 1, or 0 at the end. A key
//! present throughout a scan is returned exactly once; a page never repeats
//! a key. The price: O(tags) time per call (a full scan in pages of k keys
//! costs O(tags × keys / k): ask with a large COUNT), and O(COUNT) memory.

use super::sscan::glob;
use std::collections::BTreeSet;
use tagstore::{Half, Store, Tag};
use xxhash_rust::xxh3::xxh3_64;

/// The two keys of a tag: its `o:` key and its `s:` key.
pub fn keys_of(t: &Tag) -> [String; 2] {
    let r = &t.relationship;
    [
        format!("o:{}:{r}:{}", r.len(), t.object),
        format!("s:{}:{r}:{}", r.len(), t.subject),
    ]
}

/// One page: the keys and the next cursor (0: finished).
pub fn page(
    store: &Store,
    cursor: u64,
    pattern: Option<&[u8]>,
    count: usize,
) -> tagstore::Result<(Vec<String>, u64)> {
    let count = count.max(1);
    let mut found: BTreeSet<(u64, String)> = BTreeSet::new();
    // Some key at or past the cursor was left for a later page.
    let mut more = false;
    // A half-only store lists each half's keys from that half; any other
    // store, both keys of every tag.
    let halves: &[Option<Half>] = if store.is_half_only() {
        &[Some(Half::Object), Some(Half::Subject)]
    } else {
        &[None]
    };
    let tags = halves.iter().flat_map(|&h| {
        let it = match h {
            Some(h) => store.half_tags(h),
            None => store.tags(),
        };
        it.map(move |t| (h, t))
    });
    for (h, t) in tags {
        let t = t?;
        let [o, s] = keys_of(&t);
        let keys = match h {
            Some(Half::Object) => vec![o],
            Some(Half::Subject) => vec![s],
            None => vec![o, s],
        };
        for k in keys {
            let h = xxh3_64(k.as_bytes());
            if h < cursor || pattern.is_some_and(|p| !glob(p, k.as_bytes())) {
                continue;
            }
            found.insert((h, k));
        }
        // Keep memory at O(count): drop whatever lies past the count-th
        // hash (keys sharing that hash stay).
        if found.len() > 2 * count + 64 {
            more |= trim(&mut found, count);
        }
    }
    more |= trim(&mut found, count);
    let Some(&(last, _)) = found.iter().next_back() else {
        return Ok((Vec::new(), 0));
    };
    let keys: Vec<String> = found.into_iter().map(|(_, k)| k).collect();
    Ok((keys, if more { last.saturating_add(1) } else { 0 }))
}

/// Keeps the `count` smallest hashes and every key sharing the last of
/// them; true when it dropped some.
fn trim(found: &mut BTreeSet<(u64, String)>, count: usize) -> bool {
    let Some(&(cut, _)) = found.iter().nth(count - 1) else {
        return false;
    };
    match cut.checked_add(1) {
        Some(next) => !found.split_off(&(next, String::new())).is_empty(),
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;
    use tagstore::CreateOptions;

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
