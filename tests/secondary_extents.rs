//! Secondary extents in the table image (`TSTABLE2`, DESIGN.md §3.5).
//!
//! A FIND reads a secondary bucket only up to its highest written block,
//! when that is known. The bound is written at a clean close and trusted at
//! the next open, and a rebuild (an open after a crash) learns it from the
//! blocks. A bound too low would hide tags: here peaks fill sparse 8-block
//! secondary buckets across several close/reopen and crash/reopen cycles,
//! and after each open every tag of every key is found in both directions,
//! and `check` is clean.

mod common;

use common::store::assert_finds;
use std::collections::BTreeSet;
use tagstore::{CreateOptions, Store, Tag};

fn options() -> CreateOptions {
    CreateOptions {
        expected_tags: 0,
        primary_buckets_per_half: Some(4),
        blocks_per_primary: Some(1),
        blocks_per_secondary: Some(8),
        seed: Some(0x5EC0_E87E),
    }
}

/// Every tag of `model`, found from both sides.
fn assert_all_found(s: &Store, model: &BTreeSet<Tag>, when: &str) {
    assert_finds(s, model, when);
    let report = s.check().expect("check");
    assert!(report.ok(), "{when}: {:?}", report.faults);
}

#[test]
fn extents_survive_close_and_crash() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("s.tags");
    let mut model = BTreeSet::new();
    let s = Store::create(&path, &options()).expect("create");
    s.close().expect("close");
    for round in 0..6u32 {
        let s = Store::open(&path).expect("open");
        assert_all_found(&s, &model, &format!("open before round {round}"));
        // Peaks grow a few tags per round, so their secondary buckets gain
        // blocks after each reopen; every third tag of a round is deleted.
        for i in 0..300u32 {
            let peak = format!("peak{}", i % 3);
            let t = Tag::new(format!("o{round}-{i}"), "r", peak);
            s.insert(&t).expect("insert");
            model.insert(t);
        }
        for i in (0..300u32).step_by(3) {
            let t = Tag::new(format!("o{round}-{i}"), "r", format!("peak{}", i % 3));
            s.delete(&t).expect("delete");
            model.remove(&t);
        }
        assert_all_found(&s, &model, &format!("after round {round}"));
        if round % 2 == 0 {
            s.close().expect("close");
        } else {
            // An unclean end: the next open rebuilds the tables from the blocks.
            s.abandon();
        }
    }
    let s = Store::open(&path).expect("open");
    assert!(s.recovered_on_open(), "the last round ended unclean");
    assert_all_found(&s, &model, "last open");
    s.close().expect("close");
    let s = Store::open(&path).expect("open");
    assert_all_found(&s, &model, "after a clean close");
}
