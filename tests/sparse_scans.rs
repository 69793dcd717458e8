//! Whole-file scans of a sparse store (`check`, and the table rebuild of an
//! unclean open) skip the holes of the file instead of reading them.
//!
//! Regression: `check` on a store pre-sized for 10^8 tags read 44 GB of
//! holes through the map (112 s, 23.8 GB resident). Skipping must never
//! skip data: a block written into what was a hole is still checked, and
//! every tag of a sparse store is found again after an unclean reopen.

use std::collections::BTreeSet;
use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use tagstore::{CreateOptions, Store, Tag};

/// A store pre-sized far beyond its tags: mostly holes.
fn sparse_store(dir: &std::path::Path) -> (std::path::PathBuf, BTreeSet<Tag>) {
    let path = dir.join("sparse.tags");
    let opts = CreateOptions {
        expected_tags: 2_000_000,
        ..CreateOptions::default()
    };
    let store = Store::create(&path, &opts).expect("create");
    let tags: BTreeSet<Tag> = (0..3_000)
        .map(|i| Tag::new(format!("object {i}"), "isa", format!("subject {}", i % 97)))
        .collect();
    for t in &tags {
        assert!(store.insert(t).expect("insert"));
    }
    store.close().expect("close");
    (path, tags)
}

#[test]
fn check_still_reads_a_block_written_into_a_hole() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (path, _) = sparse_store(dir.path());
    let blocks = std::fs::metadata(&path).expect("stat").len() / 4096;
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .expect("open");
    // An unwritten block three quarters into the file (a hole: the store
    // holds a few thousand tags in about a gigabyte of buckets).
    let mut b = blocks * 3 / 4;
    let mut buf = [0u8; 4096];
    loop {
        file.read_exact_at(&mut buf, b * 4096).expect("read");
        if buf.iter().all(|&x| x == 0) {
            break;
        }
        b += 1;
        assert!(b < blocks, "no unwritten block found");
    }
    let clean = Store::open(&path).expect("open").check().expect("check");
    assert!(clean.ok(), "{:?}", clean.faults);
    assert_eq!(clean.tags, 3_000);
    file.write_all_at(&[0x5Au8; 4096], b * 4096).expect("write");
    drop(file);
    let r = Store::open(&path).expect("open").check().expect("check");
    assert!(
        r.faults.iter().any(|f| f.contains(&format!("block {b}"))),
        "the garbage written into block {b} was not seen: {:?}",
        r.faults
    );
    assert_eq!(r.blocks_checked, clean.blocks_checked);
}

#[test]
fn an_unclean_reopen_of_a_sparse_store_rebuilds_every_tag() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (path, tags) = sparse_store(dir.path());
    let store = Store::open(&path).expect("open");
    let extra = Tag::new("one more", "isa", "subject 1");
    assert!(store.insert(&extra).expect("insert"));
    // No clean close: the next open rebuilds the tables from the blocks.
    store.abandon();
    let store = Store::open(&path).expect("reopen");
    assert_eq!(store.len(), tags.len() as u64 + 1);
    let got: BTreeSet<Tag> = store.tags().collect::<Result<_, _>>().expect("tags");
    assert!(got.contains(&extra));
    assert_eq!(got.len(), tags.len() + 1);
    for s in 0..97 {
        let subject = format!("subject {s}");
        let n = store.find_objects(&subject, "isa").count() as u64;
        let want = tags.iter().filter(|t| t.subject == subject).count() as u64 + u64::from(s == 1);
        assert_eq!(n, want, "FIND by {subject}");
    }
    let r = store.check().expect("check");
    assert!(r.ok(), "{:?}", r.faults);
}
