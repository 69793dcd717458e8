//! A failed create leaves nothing behind.
//!
//! Covers: an absurd `expected_tags` (`u64::MAX`, or one past the largest
//! allowed) is refused by `Store::create` with `Error::InvalidArgument`
//! naming the largest allowed ("at most N"), before any file is made; the
//! same through `tagstore create` (exit 1 or 2, the limit on stderr); and,
//! where a 1 MB tmpfs can be mounted (root), a store sized for 10,000,000
//! tags fails for lack of space (library and CLI) and leaves neither the
//! store nor `STORE.counts` (nor a journal) behind. Each tmpfs is unmounted
//! by a guard, also when the test fails.

mod common;

use common::crash::Tmpfs;

use common::edge::{cli, names, one_block_buckets, s};
use std::path::Path;
use tagstore::{counts_path, journal_path, CreateOptions, Error, Geometry, Store};

/// The largest `expected_tags` with the default bucket size (4 blocks).
fn largest_allowed() -> u64 {
    Geometry::max_expected_tags(CreateOptions::default().geometry().blocks_per_primary)
}

/// `Store::create` at `p` with default options but `expected_tags`.
fn create_sized(p: &Path, expected_tags: u64) -> tagstore::Result<Store> {
    Store::create(
        p,
        &CreateOptions {
            expected_tags,
            ..Default::default()
        },
    )
}

/// Asserts that `err` is `InvalidArgument` saying "at most N" with N the largest allowed.
fn assert_names_limit(err: Error, what: &str) {
    match err {
        Error::InvalidArgument(msg) => {
            assert!(msg.contains("at most"), "{what}: message {msg:?}");
            let max = largest_allowed().to_string();
            assert!(
                msg.contains(&max),
                "{what}: message {msg:?} does not name the largest allowed ({max})"
            );
        }
        other => panic!("{what}: expected InvalidArgument, got {other:?}"),
    }
}

/// Issue: `Store::create` with `expected_tags: u64::MAX` must refuse with
/// `InvalidArgument` naming the largest allowed, and leave no file (no
/// store, no counts, no journal).
#[test]
fn absurd_expected_tags_refused_and_nothing_left() {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = dir.path().join("huge.tags");
    let err = match create_sized(&p, u64::MAX) {
        Ok(_) => panic!("a store sized for u64::MAX tags was created"),
        Err(e) => e,
    };
    assert_names_limit(err, "u64::MAX");
    assert!(!p.exists(), "the store file was left behind");
    assert!(!counts_path(&p).exists(), "STORE.counts was left behind");
    assert!(!journal_path(&p).exists(), "STORE.journal was left behind");
    assert!(names(dir.path()).is_empty(), "{:?}", names(dir.path()));
}

/// Issue: the limit is exact: one past the largest allowed is refused the
/// same way and leaves nothing.
#[test]
fn one_past_the_limit_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = dir.path().join("over.tags");
    match create_sized(&p, largest_allowed() + 1) {
        Ok(_) => panic!("a store one past the limit was created"),
        Err(e) => assert_names_limit(e, "largest + 1"),
    }
    assert!(names(dir.path()).is_empty(), "{:?}", names(dir.path()));
}

/// Issue: `tagstore create y.tags --expected-tags 18446744073709551615`
/// must fail (exit 1 or 2) naming the largest allowed on stderr, print
/// nothing on stdout, and leave no file.
#[test]
fn cli_absurd_expected_tags_refused_and_nothing_left() {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = dir.path().join("y.tags");
    let out = cli(&["create", s(&p), "--expected-tags", "18446744073709551615"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        matches!(out.status.code(), Some(1) | Some(2)),
        "exit {:?}; stderr: {err}",
        out.status
    );
    assert!(
        err.contains(&largest_allowed().to_string()),
        "stderr does not name the largest allowed ({}): {err}",
        largest_allowed()
    );
    assert!(err.contains("at most"), "stderr: {err}");
    assert!(
        out.stdout.is_empty(),
        "stdout: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(!p.exists(), "y.tags was left behind");
    assert!(names(dir.path()).is_empty(), "{:?}", names(dir.path()));
}

/// Issue: a create that fails for lack of space (a store sized for
/// 10,000,000 tags on a 1 MB tmpfs) must return an error (ENOSPC), never
/// SIGBUS, and leave neither the store nor `STORE.counts` behind; the same
/// through `tagstore create` (exit 1). A small store still fits afterwards,
/// so the space really was given back.
#[test]
fn create_on_full_tmpfs_leaves_nothing() {
    let outer = tempfile::tempdir().expect("tempdir");
    let Some(fs) = Tmpfs::mount(&outer.path().join("mnt-create"), "1m") else {
        return;
    };
    let dir = fs.dir.clone();
    let p = dir.join("big.tags");
    match create_sized(&p, 10_000_000) {
        Ok(_) => panic!("a store sized for 10,000,000 tags fit on a 1 MB tmpfs"),
        Err(Error::Io { source, context }) => assert_eq!(
            source.raw_os_error(),
            Some(libc::ENOSPC),
            "expected ENOSPC, got {source} ({context})"
        ),
        Err(e) => panic!("expected an I/O error (no space), got {e:?}"),
    }
    assert!(!p.exists(), "the store file was left on the full tmpfs");
    assert!(!counts_path(&p).exists(), "STORE.counts was left behind");
    assert!(names(&dir).is_empty(), "left behind: {:?}", names(&dir));

    let q = dir.join("cli-big.tags");
    let out = cli(&["create", s(&q), "--expected-tags", "10000000"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "CLI create: stderr {err}");
    assert!(err.starts_with("error: "), "stderr: {err}");
    assert!(
        err.to_lowercase().contains("no space"),
        "stderr does not say no space: {err}"
    );
    assert!(!q.exists(), "the CLI left the store file behind");
    assert!(names(&dir).is_empty(), "left behind: {:?}", names(&dir));

    // The space was released: a small store fits.
    let small = dir.join("small.tags");
    let st = Store::create(&small, &one_block_buckets(10, 2, 1))
        .expect("a small store after the failed creates");
    st.close().expect("close");
    assert!(small.exists());
    drop(fs);
}
