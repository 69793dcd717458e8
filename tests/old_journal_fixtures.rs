//! Journals left by power cuts under builds before the current journal
//! version: each is replayed by a writable open and recovered in memory by
//! a read-only one.
//!
//! fixtures/journal-v3/ is what commit 794e994 leaves on disk: `tagstore
//! create --primary-buckets 2 --blocks-per-primary 1 --blocks-per-secondary
//! 1 --seed 7`, `insert --file fixtures/awkward.tsv` (6 tags), then `serve
//! --durability immediate` taking 40 SADDs of two members, 10 SREMs and one
//! non-ASCII SADD through redis-cli, then SIGKILL. The store file and its
//! counts are copies taken once `serve` had opened the store (its last
//! fsync), the journal the file the kill left: a power cut's disk, where
//! only the journal (version 3: each block's first entry in the round an
//! image, deltas after) holds the 71 acknowledged writes. The zeros written
//! ahead past its last commit were cut off to keep the fixture small.
//! fixtures/journal-v3.tsv is that build's export of it (77 tags), sorted.
//!
//! fixtures/journal-v4/ is the same recipe under commit 567af20 (journal
//! version 4: every entry a delta over the store file's copy, images only
//! for the superblock), SADDs `o:6:tagged:photoN sunset beachN%7` and
//! SREMs of `sunset` from photo3, 6, … 30, then `o:6:tagged:фото-ß` with a
//! subject holding a tab. The journal names blocks past the copied store
//! file's end (the store grew by splits; the file's growth is not in the
//! copy, as after a power cut that lost it). fixtures/journal-v4.tsv is that
//! build's export (77 tags), sorted.
//!
//! Covers: a read-only open of a copy recovers it in memory and leaves the
//! files byte for byte; a writable open replays it, `check` is clean, the
//! journal is gone, and the store takes writes and reopens with them.

mod common;

use common::cli::{fixture, parse_fields};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use tagstore::{journal_path, Store, Tag};

fn expected(name: &str) -> BTreeSet<Tag> {
    let tsv = format!("{name}.tsv");
    let text = std::fs::read_to_string(fixture(&tsv)).expect("read fixture TSV");
    text.lines()
        .map(|l| {
            let (o, r, s) = parse_fields(l, &format!("{tsv}: "));
            Tag::new(o, r, s)
        })
        .collect()
}

/// Copies fixture `name`'s three files into `dir`; the store's path.
fn copy(name: &str, dir: &Path) -> PathBuf {
    for f in ["j.tags", "j.tags.counts", "j.tags.journal"] {
        std::fs::copy(fixture(name).join(f), dir.join(f)).expect("copy fixture");
    }
    dir.join("j.tags")
}

fn export(s: &Store) -> BTreeSet<Tag> {
    s.tags().collect::<Result<_, _>>().expect("export")
}

fn recovered_read_only_without_writing(name: &str) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = copy(name, dir.path());
    let before = (
        std::fs::read(&path).expect("read"),
        std::fs::read(journal_path(&path)).expect("read"),
    );
    let s = Store::open_read_only(&path).expect("read-only open recovers");
    let want = expected(name);
    assert_eq!(want.len(), 77);
    assert_eq!(export(&s), want);
    drop(s);
    let after = (
        std::fs::read(&path).expect("read"),
        std::fs::read(journal_path(&path)).expect("read"),
    );
    assert!(before == after, "a read-only open changed the files");
}

fn replayed_by_a_writable_open(name: &str) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = copy(name, dir.path());
    let s = Store::open(&path).expect("open replays");
    let mut want = expected(name);
    assert_eq!(export(&s), want);
    let report = s.check().expect("check");
    assert!(report.faults.is_empty(), "check: {:?}", report.faults);
    let t = Tag::new("photo41", "tagged", "sunset");
    assert!(s.insert(&t).expect("insert"));
    want.insert(t);
    s.close().expect("close");
    assert!(
        std::fs::metadata(journal_path(&path)).is_err(),
        "the replayed journal is removed at close"
    );
    let s = Store::open(&path).expect("reopen");
    assert_eq!(export(&s), want);
}

#[test]
fn a_version_3_journal_is_recovered_read_only_without_writing() {
    recovered_read_only_without_writing("journal-v3");
}

#[test]
fn a_version_3_journal_is_replayed_by_a_writable_open() {
    replayed_by_a_writable_open("journal-v3");
}

#[test]
fn a_version_4_journal_is_recovered_read_only_without_writing() {
    recovered_read_only_without_writing("journal-v4");
}

#[test]
fn a_version_4_journal_is_replayed_by_a_writable_open() {
    replayed_by_a_writable_open("journal-v4");
}
