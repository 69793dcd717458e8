//! A crash at every write of a bucket split, in mapped (`None`) mode.
//!
//! Regression test for a tag found twice after recovery: a split killed
//! between the two writes of one of its moves *inside* the old chain
//! (packing the primary bucket into its first blocks, or refilling it from
//! the chain's tail) left the tag in two slots of that chain, and the redo
//! at open found nothing left to move, so FIND returned the tag twice and
//! `len()` counted it twice (seen about once in 30 runs of
//! `sigkill_none_mode` on a loaded machine).
//!
//! A small store is loaded, then for every `k` a copy of it takes inserts,
//! one call each, with the write path failing at its `k`-th write (the
//! mapped file then holds exactly the writes before it, as after `kill -9`),
//! and is abandoned and reopened. The inserts cross several splits, so
//! every write of a split, its moves and its tidying is a crash point.
//! After recovery the store holds every acknowledged tag, the in-flight tag
//! whole or not at all, nothing else, and no tag twice (export, `len()`,
//! FIND both ways).

mod common;

use common::crash::{assert_check_ok, small_split_store, split_inserts_crashing_at, whole};
use std::collections::BTreeSet;
use std::fs;
use tagstore::{Store, Tag};

const BASE: usize = 400;
const MORE: usize = 120;

#[test]
fn crash_at_every_write_of_a_split_leaves_each_tag_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let base = dir.path().join("base.tags");
    let buckets_before = small_split_store(&base, BASE, 0x5_0117);

    let mut after_splits = 0;
    let mut k = 0u64;
    loop {
        let path = dir.path().join(format!("k{k}.tags"));
        let (acked, in_flight) = split_inserts_crashing_at(&base, &path, k, BASE..BASE + MORE);
        let Some(in_flight) = in_flight else {
            // k passed every write of the inserts: every point is covered.
            assert!(k > 0, "no write was ever made");
            break;
        };
        let when = format!("crash at write {k}");
        let s = Store::open(&path).unwrap_or_else(|e| panic!("{when}: reopen: {e}"));
        if s.stats().expect("stats").primary_buckets > buckets_before {
            after_splits += 1;
        }
        let all: Vec<Tag> = s.tags().collect::<Result<_, _>>().expect("export");
        let got: BTreeSet<Tag> = all.iter().cloned().collect();
        assert_eq!(
            all.len(),
            got.len(),
            "{when}: the export returned a tag twice"
        );
        let lost: Vec<&Tag> = acked.difference(&got).collect();
        assert!(lost.is_empty(), "{when}: acknowledged tags lost: {lost:?}");
        let extra: Vec<&Tag> = got
            .difference(&acked)
            .filter(|t| **t != in_flight)
            .collect();
        assert!(extra.is_empty(), "{when}: tags never inserted: {extra:?}");
        whole(&s, &in_flight, &when);
        assert_eq!(
            s.len(),
            got.len() as u64,
            "{when}: len() counts a tag twice"
        );
        for j in 0..7 {
            let objects: Vec<String> = s
                .find_objects(&format!("subj-{j}"), "r")
                .collect::<Result<_, _>>()
                .expect("find_objects");
            let distinct: BTreeSet<&String> = objects.iter().collect();
            assert_eq!(
                objects.len(),
                distinct.len(),
                "{when}: FIND <*, r, subj-{j}> returned an object twice"
            );
        }
        assert_check_ok(&s, &when);
        drop(s);
        fs::remove_file(&path).expect("remove copy");
        k += 1;
    }
    assert!(
        after_splits > 10,
        "only {after_splits} crash points came after a split: the inserts must cross splits"
    );
}
