//! `maintain` on a disk with room for the rewrite but not much more: it
//! must rewrite (regression: it measured the free space after its new
//! store had taken its share, so that share counted twice, and it asked
//! half again the two slots a tag, refusing a rewrite of 100,000 tags that
//! fits in 120 MB beside the store); on a disk without room it says so
//! before writing, with the free bytes as they are, and leaves no
//! temporary file. Needs root (a small tmpfs); skipped with a message
//! otherwise.

mod common;

use common::crash::{fill_up, Tmpfs};
use common::edge::serial;
use tagstore::{CreateOptions, Error, MaintainOptions, Store, Tag};

fn tags(n: usize) -> Vec<Tag> {
    (0..n)
        .map(|i| {
            let pkg = format!("package-{}", i % 5000);
            Tag::new(
                format!("/usr/share/doc/{pkg}/files/file-{i:07}.txt"),
                "owned_by",
                pkg,
            )
        })
        .collect()
}

#[test]
fn maintain_fits_a_rewrite_that_fits_and_refuses_one_that_does_not() {
    let _serial = serial();
    let dir = tempfile::tempdir().expect("tempdir");
    let Some(fs) = Tmpfs::mount(&dir.path().join("mnt"), "120m") else {
        return;
    };
    let path = fs.dir.join("m.tags");
    let all = tags(100_000);
    let store = Store::create(&path, &CreateOptions::default()).expect("create");
    let (out, r) = store.insert_batch(&all);
    r.expect("load");
    assert_eq!(out.changed, all.len() as u64);
    store.close().expect("close");
    let report = Store::maintain(&path, &MaintainOptions::default(), |_, _| {})
        .expect("a rewrite that fits");
    assert_eq!(report.after.tags, all.len() as u64);
    let store = Store::open(&path).expect("open");
    assert_eq!(store.len(), all.len() as u64);
    assert!(store.check().expect("check").ok());
    store.close().expect("close");

    // Now no room at all: refused up front, nothing left behind.
    let fill = fill_up(&fs.dir);
    match Store::maintain(&path, &MaintainOptions::default(), |_, _| {}) {
        Err(Error::Io { context, source }) => {
            assert!(context.contains("maintenance needs about"), "{context}");
            assert_eq!(source.raw_os_error(), Some(libc::ENOSPC));
        }
        other => panic!("expected an ENOSPC error, got {other:?}"),
    }
    let mut names: Vec<String> = std::fs::read_dir(&fs.dir)
        .expect("read dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["fill-up", "m.tags", "m.tags.counts"]);
    std::fs::remove_file(fill).expect("free space");
    let store = Store::open(&path).expect("open");
    assert_eq!(store.len(), all.len() as u64);
    store.close().expect("close");
    drop(fs);
}
