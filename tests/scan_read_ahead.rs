//! A scan of the whole store (stats, check, export, maintain) on a store
//! not in the page cache read it one 4 KB page fault at a time (the map is
//! advised random for FINDs): `stats` of a 2.5 M-tag store took 25 s cold
//! against 0.4 s warm. The first scan of a handle now asks the kernel to
//! read the file's data runs ahead, and only those (not its holes), once,
//! unless the store is in the page cache already.
#![cfg(feature = "test-hooks")]

use std::collections::BTreeSet;
use tagstore::{CreateOptions, Store, Tag};

fn tag(i: u32) -> Tag {
    Tag::new(
        format!("photo/{i:05}.jpg"),
        "owned_by",
        format!("user{}", i % 97),
    )
}

/// The bytes of `path` that lie in data runs (not holes).
fn data_bytes(path: &std::path::Path) -> u64 {
    use std::os::fd::AsRawFd;
    let f = std::fs::File::open(path).expect("open");
    let len = f.metadata().expect("metadata").len() as i64;
    let (fd, mut at, mut total) = (f.as_raw_fd(), 0i64, 0u64);
    while at < len {
        // SAFETY: lseek on an fd we own.
        let data = unsafe { libc::lseek(fd, at, libc::SEEK_DATA) };
        if data < 0 {
            break;
        }
        // SAFETY: as above.
        let hole = unsafe { libc::lseek(fd, data, libc::SEEK_HOLE) };
        total += (hole - data) as u64;
        at = hole;
    }
    total
}

#[test]
fn the_first_scan_reads_the_data_runs_ahead_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("s.tags");
    // Sized well past its tags: most of the file is holes.
    let opts = CreateOptions {
        expected_tags: 200_000,
        ..CreateOptions::default()
    };
    let s = Store::create(&path, &opts).expect("create");
    let tags: Vec<Tag> = (0..3_000).map(tag).collect();
    for t in &tags {
        assert!(s.insert(t).expect("insert"));
    }
    s.close().expect("close");
    let (len, data) = (
        std::fs::metadata(&path).expect("meta").len(),
        data_bytes(&path),
    );
    // Sparse, except on tmpfs, where a writable open backs the whole file.
    if data < len {
        assert!(data < len / 2, "the store is sparse: {data} of {len} bytes");
    }

    if on_tmpfs(dir.path()) {
        // tmpfs pages are the storage: nothing can be evicted or read ahead.
        eprintln!("skipped: the temporary directory is on tmpfs");
        return;
    }
    evict(&path);
    let s = Store::open(&path).expect("open");
    assert_eq!(s.read_ahead_bytes(), 0, "opening alone reads nothing ahead");
    let stats = s.stats().expect("stats");
    assert_eq!(stats.tags, 3_000);
    let asked = s.read_ahead_bytes();
    assert!(asked > 0, "the scan asked for the data ahead");
    assert!(
        asked <= data + 4096,
        "only data runs: {asked} of {data} data bytes"
    );
    // Later scans on the same handle ask nothing more, and read the same.
    let exported: BTreeSet<Tag> = s.tags().map(|t| t.expect("tag")).collect();
    assert_eq!(exported, tags.iter().cloned().collect());
    s.check().expect("check");
    assert_eq!(s.read_ahead_bytes(), asked, "once per handle");
    drop(s);
    // In the page cache now: not asked for again by the next handle.
    let s = Store::open(&path).expect("open");
    assert_eq!(s.stats().expect("stats").tags, 3_000);
    assert_eq!(s.read_ahead_bytes(), 0, "cached: nothing asked for");
    drop(s);

    // A store grown to its tags is dense: cold, it is asked for; in the
    // page cache already, it is not.
    let dense = dir.path().join("d.tags");
    let d = Store::create(&dense, &CreateOptions::default()).expect("create");
    let many: Vec<Tag> = (0..60_000).map(tag).collect();
    let (_, r) = d.insert_batch(&many);
    r.expect("insert_batch");
    d.close().expect("close");
    evict(&dense);
    let d = Store::open(&dense).expect("open");
    assert_eq!(d.stats().expect("stats").tags, 60_000);
    assert!(d.read_ahead_bytes() > 0, "cold: asked for");
    drop(d);
    let d = Store::open(&dense).expect("open");
    assert_eq!(d.stats().expect("stats").tags, 60_000);
    assert_eq!(d.read_ahead_bytes(), 0, "cached: nothing asked for");
}

fn on_tmpfs(dir: &std::path::Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes()).expect("path");
    // SAFETY: statfs fills the struct we own from a valid C string.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    let r = unsafe { libc::statfs(c.as_ptr(), &mut st) };
    r == 0 && st.f_type == libc::TMPFS_MAGIC
}

/// Drops the file's pages from the page cache (they are clean after a
/// close), as after a reboot.
fn evict(path: &std::path::Path) {
    use std::os::fd::AsRawFd;
    let f = std::fs::File::open(path).expect("open");
    f.sync_all().expect("sync");
    // SAFETY: fadvise on an fd we own.
    let r = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    assert_eq!(r, 0, "posix_fadvise");
}
