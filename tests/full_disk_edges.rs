//! Regressions found in review of the full-disk and size-limit changes.
//!
//! The tmpfs cases need root to mount a small tmpfs; they print SKIPPED and
//! return otherwise.

mod common;

use common::crash::{fill_up, Tmpfs};
use std::path::Path;
use tagstore::{CreateOptions, Store, Tag};

/// One primary bucket of one block per half: in format 1 (which never
/// splits) the 26th tag needs a new secondary bucket, so the file must grow.
fn tiny() -> CreateOptions {
    CreateOptions {
        expected_tags: 10,
        primary_buckets_per_half: Some(1),
        blocks_per_primary: Some(1),
        blocks_per_secondary: Some(1),
        seed: Some(1),
    }
}

/// Shrinks the fill-up file by `bytes`, giving that much space back.
fn give_back(fill: &Path, bytes: u64) {
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(fill)
        .expect("open fill-up");
    let len = f.metadata().expect("metadata").len();
    f.set_len(len.saturating_sub(bytes))
        .expect("shrink fill-up");
}

/// The tests here run one at a time: each mounts and unmounts a tmpfs with
/// child processes, and a child forked while another test holds a store
/// inherits its descriptor, and with it the store's lock, until it execs;
/// a reopen in that instant failed with `Locked`.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

fn tag(o: &str, s: &str) -> Tag {
    Tag::new(o, "isa", s)
}

/// Bug: on a full tmpfs, a file growth whose reservation failed left the
/// file longer but its new blocks unbacked; the next INSERT needing a
/// bucket then wrote through the map into an unbacked page (SIGBUS, the
/// test process killed). Both inserts must fail with an error, and the
/// store stay usable.
#[test]
fn failed_growth_on_a_full_tmpfs_is_rolled_back() {
    let _serial = serial();
    let disk = tempfile::tempdir().expect("tempdir");
    let Some(fs) = Tmpfs::mount(&disk.path().join("mnt"), "2m") else {
        return;
    };
    let p = fs.dir.join("s.tags");
    let s = Store::create_format1(&p, &tiny()).expect("create");
    for i in 0..25 {
        assert!(s
            .insert(&tag(&format!("o{i}"), &format!("s{i}")))
            .expect("insert"));
    }
    let len = std::fs::metadata(&p).expect("metadata").len();
    let fill = fill_up(&fs.dir);
    assert!(s.insert(&tag("o25", "s25")).is_err(), "no room to grow");
    assert_eq!(
        std::fs::metadata(&p).expect("metadata").len(),
        len,
        "a growth that could not be backed is undone"
    );
    // The second try must fail the same way, never touch an unbacked page.
    assert!(s.insert(&tag("o26", "s26")).is_err(), "still no room");
    std::fs::remove_file(&fill).expect("free the space");
    assert!(s
        .insert(&tag("o27", "s27"))
        .expect("insert after space is back"));
    assert_eq!(s.len(), 26);
    assert!(s.check().expect("check").ok());
}

/// Bug: a close on a nearly full disk ignored a counts merge that did not
/// fit, and the clean close that followed made the next open trust the
/// stale counts file: changes that cancel out in the total (delete `a`,
/// insert `b` for the same object) went unnoticed and `count` was wrong.
#[test]
fn counts_that_miss_their_merge_at_close_are_rebuilt() {
    let _serial = serial();
    let disk = tempfile::tempdir().expect("tempdir");
    let Some(fs) = Tmpfs::mount(&disk.path().join("mnt"), "8m") else {
        return;
    };
    let p = fs.dir.join("s.tags");
    let opts = CreateOptions {
        expected_tags: 2000,
        seed: Some(3),
        ..Default::default()
    };
    let a: Vec<Tag> = (0..1000)
        .map(|i| tag(&format!("o{i}"), &format!("a{i}")))
        .collect();
    let b: Vec<Tag> = (0..1000)
        .map(|i| tag(&format!("o{i}"), &format!("b{i}")))
        .collect();
    let s = Store::create(&p, &opts).expect("create");
    s.insert_batch(&a).1.expect("insert a");
    s.close().expect("close");
    let s = Store::open(&p).expect("open");
    s.delete_batch(&a).1.expect("delete a");
    s.insert_batch(&b).1.expect("insert b");
    let fill = fill_up(&fs.dir);
    // Room for a table image, not for the merge record.
    give_back(&fill, 8192);
    s.close().expect("a full disk does not fail the close");
    std::fs::remove_file(&fill).expect("free the space");
    let s = Store::open_read_only(&p).expect("reopen");
    assert_eq!(s.count("a0", "isa").expect("count a0"), 0);
    assert_eq!(s.count("b0", "isa").expect("count b0"), 1);
    let r = s.check().expect("check");
    assert!(r.ok(), "check: {:?}", r.faults);
}

/// Bug: a create that failed for lack of space removed the store and its
/// counts file but left `STORE.counts.tmp` behind.
#[test]
fn a_create_without_room_for_its_counts_leaves_nothing() {
    let _serial = serial();
    let disk = tempfile::tempdir().expect("tempdir");
    let Some(fs) = Tmpfs::mount(&disk.path().join("mnt"), "1m") else {
        return;
    };
    let fill = fill_up(&fs.dir);
    // Room for the store's first blocks, not for its counts file too.
    give_back(&fill, 4 * 4096);
    let p = fs.dir.join("s.tags");
    assert!(Store::create(&p, &tiny()).is_err(), "no room");
    let mut left: Vec<String> = std::fs::read_dir(&fs.dir)
        .expect("read_dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(left, ["fill-up"], "a failed create leaves nothing");
}
