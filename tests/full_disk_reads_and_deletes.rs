//! On a full disk a store still serves reads and deletes.
//!
//! Regression for: a sparse store (created on a disk filesystem, copied
//! with `cp --sparse=always` onto a tmpfs) on a tmpfs with no space left.
//! Opening it for a `delete` tried to back the whole file up front and
//! failed with "reserving disk space: No space left on device", though a
//! delete only frees slots; `find`, `check` and `export` failed the same
//! way. Now the holes are found at open and read as zeros, a delete
//! touches only blocks that hold data, and the close, which has no room
//! for its table image, leaves the store to be rebuilt at the next open.
//!
//! Needs root to mount a small tmpfs; skipped with a message otherwise.

mod common;

use common::crash::{fill_up, serial, Tmpfs};
use std::path::{Path, PathBuf};
use std::process::Command;
use tagstore::{CreateOptions, Store, Tag};

/// Tag `i`: `<obj{i}, isa, subj{i % 50}>`.
fn tag(i: usize) -> Tag {
    Tag::new(format!("obj{i}"), "isa", format!("subj{}", i % 50))
}

/// A sparse store of `n` tags in `dir` (a disk filesystem), closed cleanly.
fn sparse_store(dir: &Path, n: usize) -> PathBuf {
    let p = dir.join("s.tags");
    let opts = CreateOptions {
        expected_tags: 20_000,
        seed: Some(5),
        ..Default::default()
    };
    let s = Store::create(&p, &opts).expect("create");
    let tags: Vec<Tag> = (0..n).map(tag).collect();
    let (_, r) = s.insert_batch(&tags);
    r.expect("insert");
    s.close().expect("close");
    p
}

/// Copies the store and its counts onto `to`, keeping holes.
fn copy_sparse(from: &Path, to: &Path) -> PathBuf {
    let out = Command::new("cp")
        .arg("--sparse=always")
        .arg(from)
        .arg(tagstore::counts_path(from))
        .arg(to)
        .output()
        .expect("cp");
    assert!(out.status.success(), "cp: {:?}", out);
    to.join("s.tags")
}

/// A sparse store of 3000 tags made in `disk`, copied onto a 3 MB tmpfs
/// mounted below `disk` that is then filled up: the mount (unmounted on
/// drop) and the copy's path; `None` when the tmpfs cannot be mounted.
fn full_tmpfs_copy(disk: &Path) -> Option<(Tmpfs, PathBuf)> {
    let src = sparse_store(disk, 3000);
    let fs = Tmpfs::mount(&disk.join("mnt"), "3m")?;
    let p = copy_sparse(&src, &fs.dir);
    fill_up(&fs.dir);
    Some((fs, p))
}

/// Library: read, delete and reopen a sparse store on a full tmpfs.
#[test]
fn library_deletes_and_reads_on_a_full_tmpfs() {
    // One at a time: a CLI child forked by the other test while this one
    // holds the store open inherits its lock until it execs.
    let _serial = serial();
    let disk = tempfile::tempdir().expect("tempdir");
    let Some((_fs, p)) = full_tmpfs_copy(disk.path()) else {
        return;
    };
    {
        let ro = Store::open_read_only(&p).expect("read-only open on a full disk");
        assert_eq!(ro.len(), 3000);
        let r = ro.check().expect("check");
        assert!(r.ok(), "check on a full disk: {:?}", r.faults);
    }
    let s = Store::open(&p).expect("writable open on a full disk");
    let gone: Vec<Tag> = (0..100).map(tag).collect();
    let (out, r) = s.delete_batch(&gone);
    r.expect("deletes on a full disk");
    assert_eq!(out.changed, 100);
    s.close().expect("close on a full disk");
    let s = Store::open_read_only(&p).expect("reopen");
    assert_eq!(s.len(), 2900);
    for i in [0, 50, 99] {
        assert!(!s.contains(&tag(i)).expect("contains"), "tag {i} deleted");
    }
    for i in [100, 1234, 2999] {
        assert!(s.contains(&tag(i)).expect("contains"), "tag {i} kept");
    }
    let objects: Vec<String> = s
        .find_objects("subj7", "isa")
        .collect::<Result<_, _>>()
        .expect("find");
    assert_eq!(objects.len(), 58, "subj7 keeps its objects from 100 on");
    assert!(s.check().expect("check").ok());
    drop(s);
    // A writable open after the close without a table image rebuilds.
    let s = Store::open(&p).expect("writable reopen");
    assert_eq!(s.len(), 2900);
    assert_eq!(s.count("subj7", "isa").expect("count"), 58);
}

/// CLI: `delete --file`, `find`, `check` and `export` on a full tmpfs.
#[test]
fn cli_deletes_and_reads_on_a_full_tmpfs() {
    let _serial = serial();
    let disk = tempfile::tempdir().expect("tempdir");
    let Some((_fs, p)) = full_tmpfs_copy(disk.path()) else {
        return;
    };
    let bin = env!("CARGO_BIN_EXE_tagstore");
    let del = disk.path().join("del.tsv");
    let lines: String = (0..100)
        .map(|i| format!("obj{i}\tisa\tsubj{}\n", i % 50))
        .collect();
    std::fs::write(&del, lines).expect("write");
    let run = |args: &[&str]| Command::new(bin).args(args).output().expect("run");
    let ps = p.to_str().expect("utf-8 path");
    let o = run(&["delete", ps, "--file", del.to_str().expect("utf-8")]);
    assert!(
        o.status.success(),
        "delete --file on a full disk: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(String::from_utf8_lossy(&o.stdout).contains("deleted 100 tags"));
    let o = run(&["check", ps]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = run(&["export", ps]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(String::from_utf8_lossy(&o.stdout).lines().count(), 2900);
    let o = run(&["find", ps, "--subject", "subj7", "--relationship", "isa"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(String::from_utf8_lossy(&o.stdout).lines().count(), 58);
}
