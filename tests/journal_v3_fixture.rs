//! A journal left by a power cut under the build before journal version 4.
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
//! Covers: a read-only open of a copy recovers it in memory and leaves the
//! files byte for byte; a writable open replays it, `check` is clean, the
//! journal is gone, and the store takes writes and reopens with them.

mod common;

use common::cli::{fixture, parse_fields};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use tagstore::{journal_path, Store, Tag};

fn expected() -> BTreeSet<Tag> {
    let text = std::fs::read_to_string(fixture("journal-v3.tsv")).expect("read fixture TSV");
    text.lines()
        .map(|l| {
            let (o, r, s) = parse_fields(l, "journal-v3.tsv: ");
            Tag::new(o, r, s)
        })
        .collect()
}

/// Copies the fixture's three files into `dir`; the store's path.
fn copy(dir: &Path) -> PathBuf {
    for f in ["j.tags", "j.tags.counts", "j.tags.journal"] {
        std::fs::copy(fixture("journal-v3").join(f), dir.join(f)).expect("copy fixture");
    }
    dir.join("j.tags")
}

fn export(s: &Store) -> BTreeSet<Tag> {
    s.tags().collect::<Result<_, _>>().expect("export")
}

#[test]
fn a_version_3_journal_is_recovered_read_only_without_writing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = copy(dir.path());
    let before = (
        std::fs::read(&path).expect("read"),
        std::fs::read(journal_path(&path)).expect("read"),
    );
    let s = Store::open_read_only(&path).expect("read-only open recovers");
    let want = expected();
    assert_eq!(want.len(), 77);
    assert_eq!(export(&s), want);
    drop(s);
    let after = (
        std::fs::read(&path).expect("read"),
        std::fs::read(journal_path(&path)).expect("read"),
    );
    assert!(before == after, "a read-only open changed the files");
}

#[test]
fn a_version_3_journal_is_replayed_by_a_writable_open() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = copy(dir.path());
    let s = Store::open(&path).expect("open replays");
    let mut want = expected();
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
