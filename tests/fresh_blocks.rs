//! Fresh blocks: INSERT zero-fills a block it knows was never written (a
//! primary block past the bucket's known extent, or a newly linked secondary
//! bucket) with a positioned write instead of fallocating it. These tests
//! cover the ways that could destroy data: a block written in an earlier
//! session, a primary bucket emptied by DELETE (whose extent is known to be
//! zero at the next open), and a store reopened after a crash (tables
//! rebuilt from the blocks). Every tag in a model must survive, and
//! `check()` must find no fault.

mod common;

use common::store::assert_check_ok;
use std::collections::BTreeSet;
use tagstore::{CreateOptions, Store, Tag};

fn opts() -> CreateOptions {
    CreateOptions {
        expected_tags: 100,
        primary_buckets_per_half: Some(2),
        blocks_per_primary: Some(3),
        blocks_per_secondary: Some(2),
        seed: Some(0xf4e5),
    }
}

fn tag(i: usize) -> Tag {
    Tag::new(
        format!("objet-{i}-ü"),
        if i.is_multiple_of(3) { "isa" } else { "owns" },
        format!("sujet\t{}", i % 7),
    )
}

fn assert_exactly(store: &Store, want: &BTreeSet<Tag>, when: &str) {
    let got: BTreeSet<Tag> = store.tags().collect::<Result<_, _>>().expect("tags");
    assert_eq!(&got, want, "tags() {when}");
    assert_eq!(store.len(), want.len() as u64, "len() {when}");
    for t in want {
        assert!(store.contains(t).expect("contains"), "{t:?} lost {when}");
    }
    assert_check_ok(store, when);
}

/// Tags written in one session stay when the next session fills the same
/// buckets' later blocks and links more secondary buckets.
#[test]
fn blocks_of_an_earlier_session_are_never_zeroed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("s.tags");
    let mut model = BTreeSet::new();
    let store = Store::create(&path, &opts()).expect("create");
    for i in 0..40 {
        assert!(store.insert(&tag(i)).expect("insert"));
        model.insert(tag(i));
    }
    store.close().expect("close");
    for round in 1..4 {
        let store = Store::open(&path).expect("open");
        assert_exactly(&store, &model, &format!("after reopen {round}"));
        for i in round * 100..round * 100 + 60 {
            assert!(store.insert(&tag(i)).expect("insert"));
            model.insert(tag(i));
        }
        assert_exactly(&store, &model, &format!("after round {round}"));
        store.close().expect("close");
    }
}

/// A primary bucket emptied by DELETE opens with a known extent of zero:
/// refilling it zero-fills its written-but-empty blocks, and tags in its
/// secondary buckets are untouched.
#[test]
fn refilling_an_emptied_primary_bucket_keeps_its_chain() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("s.tags");
    let store = Store::create(&path, &opts()).expect("create");
    // 2 buckets per half of 75 slots: 400 tags overflow into chains.
    let all: Vec<Tag> = (0..400).map(tag).collect();
    let (out, r) = store.insert_batch(&all);
    r.expect("insert_batch");
    assert_eq!(out.changed, 400);
    // Delete the first 225 inserted: they filled the primary buckets first.
    let mut model: BTreeSet<Tag> = all.iter().cloned().collect();
    for t in &all[..225] {
        assert!(store.delete(t).expect("delete"));
        model.remove(t);
    }
    assert_exactly(&store, &model, "after deletes");
    store.close().expect("close");
    let store = Store::open(&path).expect("open");
    assert_exactly(&store, &model, "after reopen");
    for i in 1000..1300 {
        assert!(store.insert(&tag(i)).expect("insert"));
        model.insert(tag(i));
    }
    assert_exactly(&store, &model, "after refilling");
    store.close().expect("close");
    let store = Store::open(&path).expect("open");
    assert_exactly(&store, &model, "after the last reopen");
}

/// After a crash (no clean close) the tables are rebuilt from the blocks;
/// inserts after that must not zero any block the crash left written.
#[test]
fn inserts_after_a_crash_keep_every_tag() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("s.tags");
    let store = Store::create(&path, &opts()).expect("create");
    let mut model = BTreeSet::new();
    for i in 0..150 {
        store.insert(&tag(i)).expect("insert");
        model.insert(tag(i));
    }
    store.abandon();
    let store = Store::open(&path).expect("open after crash");
    assert!(store.recovered_on_open());
    assert_exactly(&store, &model, "after recovery");
    for i in 500..800 {
        store.insert(&tag(i)).expect("insert");
        model.insert(tag(i));
    }
    assert_exactly(&store, &model, "after inserts following recovery");
}
