//! `maintain` on an empty or tiny store picks the smallest file.
//!
//! Regression test: the planner never chose fewer than two primary buckets
//! per half, so `maintain` on a fresh store (one bucket per half, 41 KB)
//! or one holding a handful of tags rewrote it with two (74 KB), where
//! README says it picks the smallest file for the store's keys.

use std::collections::BTreeSet;
use std::fs;
use tagstore::{CreateOptions, MaintainOptions, Store, Tag};

fn maintained(path: &std::path::Path) -> tagstore::MaintainReport {
    Store::maintain(path, &MaintainOptions::default(), |_, _| {}).expect("maintain")
}

#[test]
fn maintain_never_grows_an_empty_or_tiny_store() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("tiny.tags");
    Store::create(&path, &CreateOptions::default())
        .expect("create")
        .close()
        .expect("close");
    let fresh = fs::metadata(&path).expect("stat").len();

    let r = maintained(&path);
    assert_eq!(r.after.geometry.primary_buckets_per_half, 1, "empty store");
    let len = fs::metadata(&path).expect("stat").len();
    assert!(len <= fresh, "empty store: {fresh} bytes became {len}");

    let tags: BTreeSet<Tag> = (0..5)
        .map(|i| Tag::new(format!("o{i}"), "r", format!("s{}", i % 2)))
        .collect();
    let s = Store::open(&path).expect("open");
    for t in &tags {
        assert!(s.insert(t).expect("insert"));
    }
    s.close().expect("close");
    let r = maintained(&path);
    assert_eq!(r.after.geometry.primary_buckets_per_half, 1, "5 tags");
    let len = fs::metadata(&path).expect("stat").len();
    assert!(len <= fresh, "5 tags: {fresh} bytes became {len}");

    let s = Store::open(&path).expect("open");
    let got: BTreeSet<Tag> = s.tags().collect::<Result<_, _>>().expect("export");
    assert_eq!(got, tags);
    let objects: BTreeSet<String> = s
        .find_objects("s1", "r")
        .collect::<Result<_, _>>()
        .expect("find");
    assert_eq!(objects, ["o1", "o3"].map(String::from).into());
    assert!(s.check().expect("check").ok());
    // It still grows as tags arrive.
    for i in 5..400 {
        assert!(s
            .insert(&Tag::new(format!("o{i}"), "r", "s"))
            .expect("insert"));
    }
    assert!(s.geometry().primary_buckets_per_half > 1, "grew by splits");
    assert!(s.check().expect("check").ok());
}
