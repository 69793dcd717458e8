//! Holes: DELETE leaves empty slots inside a chain ("holes", counted by
//! `stats().holes`), and later INSERTs into the same buckets reuse them
//! before linking any new secondary bucket, so reinserting as many new tags
//! as were deleted grows neither the file nor the chains. Holes persist
//! across clean and unclean reopens and are reused after them too.
//!
//! The stores here are format 1 (fixed geometry, created with the test
//! hook): in format 2 the buckets split as the store fills, and the exact
//! slot-by-slot layout these tests pin down is format 1's.

use std::collections::BTreeSet;
use std::path::Path;
use tagstore::testing::{bucket_of, key_hash};
use tagstore::{CreateOptions, Half, Stats, Store, Tag};

const SEED: u64 = 0x401e5;

fn small(primary: u32) -> CreateOptions {
    CreateOptions {
        expected_tags: 100,
        primary_buckets_per_half: Some(primary),
        blocks_per_primary: Some(1),
        blocks_per_secondary: Some(1),
        seed: Some(SEED),
    }
}

fn assert_exactly(store: &Store, want: &BTreeSet<Tag>, when: &str) {
    assert_eq!(store.len(), want.len() as u64, "len() {when}");
    let got: BTreeSet<Tag> = store.tags().collect::<Result<_, _>>().expect("tags");
    assert_eq!(&got, want, "tags() {when}");
    let subjects: BTreeSet<&str> = want.iter().map(|t| t.subject.as_str()).collect();
    for s in subjects {
        let mut got: Vec<String> = store
            .find_objects(s, "isa")
            .collect::<Result<_, _>>()
            .expect("find_objects");
        got.sort();
        let mut exp: Vec<String> = want
            .iter()
            .filter(|t| t.subject == s)
            .map(|t| t.object.clone())
            .collect();
        exp.sort();
        assert_eq!(got, exp, "find_objects({s:?}) {when}");
    }
    let r = store.check().expect("check");
    assert!(r.ok(), "check() {when}: {:?}", r.faults);
}

fn layout(st: &Stats) -> (u64, u64, u64, u64) {
    (
        st.file_bytes,
        st.secondary_buckets,
        st.secondary_linked,
        st.longest_chain,
    )
}

fn tag(i: usize) -> Tag {
    Tag::new(format!("h{i}"), "isa", format!("s{}", i % 5))
}

/// One bucket per half, 25-slot buckets: 200 tags fill the primary bucket
/// and seven secondary buckets per half exactly, in insertion order.
fn filled(path: &Path) -> (Store, BTreeSet<Tag>) {
    let store = Store::create_format1(path, &small(1)).expect("create");
    let tags: Vec<Tag> = (0..200).map(tag).collect();
    let (out, r) = store.insert_batch(&tags);
    r.expect("insert_batch");
    assert_eq!(out.changed, 200);
    let st = store.stats().expect("stats");
    assert_eq!(st.holes, 0, "a store never deleted from has no holes");
    assert_eq!(st.secondary_linked, 14);
    assert_eq!(st.longest_chain, 7);
    (store, tags.into_iter().collect())
}

/// Deletes every third of the first 180 tags: 60 tags, in the primary bucket
/// and in secondary buckets, all before the last occupied slot.
fn punch(store: &Store, want: &mut BTreeSet<Tag>) -> usize {
    let victims: Vec<Tag> = (0..180).step_by(3).map(tag).collect();
    let (out, r) = store.delete_batch(&victims);
    r.expect("delete_batch");
    assert_eq!(out.changed, victims.len() as u64);
    for t in &victims {
        want.remove(t);
    }
    victims.len()
}

fn refill(store: &Store, want: &mut BTreeSet<Tag>, n: usize, prefix: &str) {
    for i in 0..n {
        let t = Tag::new(format!("{prefix}{i}"), "isa", format!("s{}", i % 5));
        assert!(store.insert(&t).expect("insert"));
        want.insert(t);
    }
}

#[test]
fn deletes_leave_holes_that_inserts_reuse() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("holes.tags");
    let (store, mut want) = filled(&path);
    let before = layout(&store.stats().expect("stats"));

    let n = punch(&store, &mut want);
    let st = store.stats().expect("stats");
    // Every deleted slot lies before tag 199's slot, in both halves.
    assert_eq!(st.holes, 2 * n as u64, "holes after deleting {n} tags");
    assert_eq!(layout(&st), before, "DELETE changed the layout");
    assert_exactly(&store, &want, "after deletes");

    refill(&store, &mut want, n, "new");
    let st = store.stats().expect("stats");
    assert_eq!(
        st.holes, 0,
        "reinserting {n} tags should fill all {n} holes"
    );
    assert_eq!(
        layout(&st),
        before,
        "reinserting as many tags as were deleted grew the file or a chain"
    );
    assert_exactly(&store, &want, "after reinserting");

    // The next tag has no hole left and must link a new bucket per half.
    refill(&store, &mut want, 1, "extra");
    let st = store.stats().expect("stats");
    assert_eq!(st.secondary_linked, before.2 + 2);
    assert_eq!(st.longest_chain, before.3 + 1);
    assert_exactly(&store, &want, "after one more insert");
}

#[test]
fn holes_survive_reopen_and_are_reused_after_it() {
    for clean in [true, false] {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("reopen.tags");
        let (store, mut want) = filled(&path);
        let before = layout(&store.stats().expect("stats"));
        let n = punch(&store, &mut want);
        if clean {
            store.close().expect("close");
        } else {
            store.abandon();
        }
        let store = Store::open(&path).expect("open");
        assert_eq!(store.recovered_on_open(), !clean);
        let st = store.stats().expect("stats");
        assert_eq!(
            st.holes,
            2 * n as u64,
            "holes after reopen (clean: {clean})"
        );
        // A clean close may give back free secondary buckets at the end of
        // the file, but every linked one (and its holes) stays.
        assert_eq!(
            (st.secondary_linked, st.longest_chain),
            (before.2, before.3),
            "chains after reopen (clean: {clean})"
        );
        let reopened = layout(&st);
        refill(&store, &mut want, n, "again");
        let st = store.stats().expect("stats");
        assert_eq!(
            st.holes, 0,
            "holes not reused after reopen (clean: {clean})"
        );
        assert_eq!(
            layout(&st),
            reopened,
            "file grew after reopen (clean: {clean})"
        );
        assert_exactly(&store, &want, &format!("after reopen (clean: {clean})"));
    }
}

#[test]
fn emptied_secondary_bucket_stays_linked_and_is_refilled() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("empty.tags");
    let (store, mut want) = filled(&path);
    let before = layout(&store.stats().expect("stats"));
    // Tags 50..75 are exactly the second secondary bucket of each half.
    let victims: Vec<Tag> = (50..75).map(tag).collect();
    assert_eq!(store.delete_batch(&victims).0.changed, 25);
    for t in &victims {
        want.remove(t);
    }
    let st = store.stats().expect("stats");
    assert_eq!(st.holes, 50);
    assert_eq!(layout(&st), before, "an emptied bucket must stay linked");
    assert_exactly(&store, &want, "after emptying a secondary bucket");
    refill(&store, &mut want, 25, "fill");
    let st = store.stats().expect("stats");
    assert_eq!((st.holes, layout(&st)), (0, before));
    assert_exactly(&store, &want, "after refilling it");
}

/// A name other than `avoid` whose key, in `half` under `rel`, hashes to the
/// same primary bucket as `like`'s.
fn same_bucket(store: &Store, half: Half, like: &str, avoid: &BTreeSet<String>) -> String {
    let p = store.geometry().primary_buckets_per_half;
    let target = bucket_of(key_hash(SEED, half, "isa", like), p);
    (0u64..)
        .map(|k| format!("{like}~{k}"))
        .find(|n| !avoid.contains(n) && bucket_of(key_hash(SEED, half, "isa", n), p) == target)
        .expect("a colliding name")
}

/// Several buckets per half: each deleted tag is replaced by a new tag whose
/// object key and subject key hash to the deleted tag's two buckets, so the
/// new tags must land exactly in the holes.
#[test]
fn replacements_in_the_same_buckets_fill_the_holes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("same.tags");
    let store = Store::create_format1(&path, &small(4)).expect("create");
    let tags: Vec<Tag> = (0..400)
        .map(|i| Tag::new(format!("o{}", i % 97), "isa", format!("s{}", i % 13)))
        .collect();
    let mut want: BTreeSet<Tag> = BTreeSet::new();
    for t in &tags {
        store.insert(t).expect("insert");
        want.insert(t.clone());
    }
    let st = store.stats().expect("stats");
    assert!(st.secondary_linked > 8, "expected chains, got {st:?}");
    let before = layout(&st);

    let victims: Vec<Tag> = want.iter().step_by(4).take(70).cloned().collect();
    for t in &victims {
        assert!(store.delete(t).expect("delete"));
        want.remove(t);
    }
    let holes = store.stats().expect("stats").holes;
    assert!(holes > 0, "deleting {} tags left no holes", victims.len());

    let mut names: BTreeSet<String> = want
        .iter()
        .flat_map(|t| [t.object.clone(), t.subject.clone()])
        .collect();
    for t in &victims {
        let o = same_bucket(&store, Half::Object, &t.object, &names);
        names.insert(o.clone());
        let s = same_bucket(&store, Half::Subject, &t.subject, &names);
        names.insert(s.clone());
        let n = Tag::new(o, "isa", s);
        assert!(store.insert(&n).expect("insert"));
        want.insert(n);
    }
    let st = store.stats().expect("stats");
    assert_eq!(
        layout(&st),
        before,
        "replacements in the same buckets grew the file or a chain"
    );
    // Each bucket got as many tags as it lost, into its first free slots in
    // chain order: exactly its holes.
    assert_eq!(st.holes, 0, "holes left after replacing ({holes} before)");
    assert_exactly(&store, &want, "after replacing deleted tags");
}

/// An INSERT enters a secondary bucket at block `used / 25` (DESIGN.md
/// §5.1), and wraps to its first block when the blocks from there on are
/// full: holes a DELETE left in the first blocks of a bucket of four
/// blocks are filled before any new bucket is linked, whether the bucket's
/// last block was written yet (the INSERT takes it first) or not.
#[test]
fn holes_in_the_first_blocks_of_a_secondary_bucket_are_reused() {
    for written in [3usize, 4] {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("blocks.tags");
        let opts = CreateOptions {
            blocks_per_secondary: Some(4),
            ..small(1)
        };
        let store = Store::create_format1(&path, &opts).expect("create");
        // 25 tags fill the primary bucket of each half, the next ones the
        // secondary bucket's blocks in order.
        let one = |i: usize| Tag::new(format!("b{i}"), "isa", "peak");
        let tags: Vec<Tag> = (0..25 + 25 * written).map(one).collect();
        let (out, r) = store.insert_batch(&tags);
        r.expect("insert_batch");
        assert_eq!(out.changed, tags.len() as u64);
        let mut want: BTreeSet<Tag> = tags.into_iter().collect();
        let before = layout(&store.stats().expect("stats"));
        assert_eq!(before.2, 2, "one secondary bucket per half");
        // Empty the secondary bucket's first two blocks (the INSERT then
        // enters it at block `(25 * written - 50) / 25`, past the holes).
        let victims: Vec<Tag> = (25..75).map(one).collect();
        assert_eq!(store.delete_batch(&victims).0.changed, 50);
        for t in &victims {
            want.remove(t);
        }
        // Exactly as many new tags as the bucket has free slots.
        let free = 100 - (25 * written - 50);
        for i in 0..free {
            let t = Tag::new(format!("n{i}"), "isa", "peak");
            assert!(store.insert(&t).expect("insert"), "{written}: insert {i}");
            want.insert(t);
        }
        let st = store.stats().expect("stats");
        assert_eq!(st.holes, 0, "{written} blocks written: holes left");
        assert_eq!(layout(&st), before, "{written} blocks written: grew");
        assert_exactly(&store, &want, &format!("{written} blocks written"));
        // The bucket is full now: the next tag links a new one per half.
        refill(&store, &mut want, 1, "extra");
        let st = store.stats().expect("stats");
        assert_eq!(st.secondary_linked, before.2 + 2);
        assert_exactly(&store, &want, &format!("{written}: one more"));
    }
}
