//! Regression: a journal written by a newer build (a journal version this
//! build does not know) was read as an empty one: a read-only open showed
//! the store without its journaled commits, and a writable open went on
//! and reset the journal, dropping writes that had been acknowledged as
//! durable. Now both opens refuse with `UnsupportedJournal`, naming the
//! file and the version, and change nothing.
//!
//! The journal is fixtures/journal-v4's (71 acknowledged writes; see
//! `old_journal_fixtures.rs`) with each commit header's version raised to
//! one past this build's.

mod common;

use common::cli::fixture;
use std::path::Path;
use tagstore::{journal_path, Error, Store};

/// Copies fixture journal-v4 into `dir` with its commits' version set to
/// `version`; the store's path.
fn copy_with_version(dir: &Path, version: u32) -> std::path::PathBuf {
    for f in ["j.tags", "j.tags.counts"] {
        std::fs::copy(fixture("journal-v4").join(f), dir.join(f)).expect("copy fixture");
    }
    let mut j = std::fs::read(fixture("journal-v4").join("j.tags.journal")).expect("read");
    let mut at = 0;
    let mut headers = 0;
    while let Some(k) = j[at..].windows(8).position(|w| w == b"TJNL\x04\0\0\0") {
        let p = at + k + 4;
        j[p..p + 4].copy_from_slice(&version.to_le_bytes());
        at = p + 4;
        headers += 1;
    }
    assert!(headers > 1, "the fixture's commit headers ({headers})");
    std::fs::write(dir.join("j.tags.journal"), &j).expect("write");
    dir.join("j.tags")
}

#[test]
fn a_newer_journal_is_refused_and_left_as_it_is() {
    let dir = tempfile::tempdir().expect("test setup");
    let path = copy_with_version(dir.path(), 99);
    let before: Vec<Vec<u8>> = ["j.tags", "j.tags.counts", "j.tags.journal"]
        .iter()
        .map(|f| std::fs::read(dir.path().join(f)).expect("read"))
        .collect();
    for writable in [false, true] {
        let r = match writable {
            true => Store::open(&path),
            false => Store::open_read_only(&path),
        };
        match r {
            Err(Error::UnsupportedJournal {
                path: p,
                found: 99,
                supported,
            }) => {
                assert_eq!(p, journal_path(&path));
                assert!(supported < 99);
            }
            Err(e) => panic!("open (writable {writable}): {e}"),
            Ok(s) => panic!(
                "open (writable {writable}) went on without the journal: {} tags",
                s.len()
            ),
        }
    }
    for (f, b) in ["j.tags", "j.tags.counts", "j.tags.journal"]
        .iter()
        .zip(&before)
    {
        let now = std::fs::read(dir.path().join(f)).expect("read");
        assert!(&now == b, "{f} changed");
    }
    // The message names the file and both versions.
    let e = Store::open_read_only(&path).err().expect("refused");
    let m = e.to_string();
    assert!(m.contains("j.tags.journal") && m.contains("99"), "{m}");
}
