//! A large counts file folded on another thread (DESIGN.md §8, "Large files
//! fold on another thread").

use std::path::{Path, PathBuf};
use std::time::Duration;
use tagstore::{CreateOptions, Increment, IncrementId, OpenOptions, Store};

fn fold_path(store: &Path) -> PathBuf {
    let mut s = store.as_os_str().to_owned();
    s.push(".counts.fold");
    PathBuf::from(s)
}

/// Submits foreign increments of 300,000 new keys each until a merge
/// starts a background fold (its temporary appears); the rounds submitted.
fn grow_until_folding(store: &Store, path: &Path) -> u64 {
    for round in 0..12u64 {
        let deltas = (0..300_000u64)
            .map(|k| ("isa".to_string(), format!("subject-{round}-{k:08}"), 1))
            .collect();
        let id = IncrementId {
            writer: 77,
            seq: round,
        };
        store
            .submit_increment(Increment { id, deltas })
            .expect("merge");
        for _ in 0..200 {
            if fold_path(path).exists() {
                return round + 1;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    panic!("no background fold started");
}

/// A handle dropped without a clean close (a failed close, a crash in
/// tests) keeps the store's lock until its counts fold has ended and its
/// temporary is gone: otherwise another writable open would take the
/// running fold's temporary for a stale one, and the old thread could
/// truncate the new handle's own fold (a review found the field order of
/// `Store` the only thing ensuring it; `Drop` now ends the fold first).
#[test]
fn a_dropped_handle_ends_its_fold_before_the_lock_is_free() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("s.tags");
    let store = Store::create(&path, &CreateOptions::default()).expect("create");
    tagstore::testing::hold_counts_folds(true);
    let rounds = grow_until_folding(&store, &path);
    let t = std::thread::spawn(move || store.abandon());
    let wait = |secs| OpenOptions {
        read_only: false,
        wait: Some(Duration::from_secs(secs)),
    };
    // The fold is held running: the dropped handle keeps the lock.
    let early = Store::open_with_options(&path, &wait(1));
    tagstore::testing::hold_counts_folds(false);
    assert!(
        matches!(early, Err(tagstore::Error::Locked(_))),
        "opened while the old handle's fold ran: {:?}",
        early.map(|s| s.check().map(|r| r.notes))
    );
    t.join().expect("drop");
    let again = Store::open_with_options(&path, &wait(60)).expect("reopen");
    let notes = again.check().expect("check").notes;
    assert!(
        !notes.iter().any(|n| n.contains("counts.fold")),
        "the open found the old handle's fold: {notes:?}"
    );
    // Every merged key survives, whichever file the old fold left.
    for round in 0..rounds {
        let n = again.count(&format!("subject-{round}-00000042"), "isa");
        assert_eq!(n.expect("count"), 1);
    }
}

/// A clean close waits for a running fold and swaps it in: the file left
/// is one snapshot (smaller than the log it replaced) with every count.
#[test]
fn close_swaps_a_running_fold_in() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("s.tags");
    let store = Store::create(&path, &CreateOptions::default()).expect("create");
    let rounds = grow_until_folding(&store, &path);
    let counts = dir.path().join("s.tags.counts");
    let grown = std::fs::metadata(&counts).expect("stat").len();
    store.close().expect("close");
    assert!(!fold_path(&path).exists());
    let folded = std::fs::metadata(&counts).expect("stat").len();
    assert!(folded < grown, "{folded} bytes after close, {grown} before");
    let s = Store::open(&path).expect("open");
    for round in 0..rounds {
        assert_eq!(
            s.count(&format!("subject-{round}-00299999"), "isa")
                .expect("count"),
            1
        );
    }
}
