//! A store opened through a symbolic link.
//!
//! Covers: every open (writable, read-only, CLI) follows the link to the real
//! file; the side files (`STORE.journal`, `STORE.counts`,
//! `STORE.maintain.tmp`) live beside the TARGET, never beside the link, also
//! when the link is relative and lies in another directory, or is a chain
//! of links; `Store::maintain` and `tagstore maintain` through the link
//! rewrite the target and leave the link a link; a dangling link is
//! `Error::NotFound` (and a CLI error) to an open, and `create` through it
//! makes the store at its target; a link loop is an error, not a hang.
//!
//! Tests run one at a time (`serial()`): a store held open by the library in
//! one test thread could be inherited, still locked, by a CLI child forked
//! from another.

mod common;

use common::edge::{
    assert_names, assert_symlink, build_store, cli, link_dirs, one_block_buckets, s, serial,
    LinkDirs,
};
use std::cell::RefCell;
use std::collections::BTreeSet;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::sync::MutexGuard;
use tagstore::{
    counts_path, journal_path, maintain_temp_path, Durability, Error, MaintainOptions, Store, Tag,
};

fn tags(n: u32, prefix: &str) -> BTreeSet<Tag> {
    (0..n)
        .map(|i| Tag::new(format!("{prefix}o{i}"), "isa", format!("s{}", i % 9)))
        .collect()
}

/// Layout: `dir/real/x.tags` (the store, holding `base`) and `dir/links/`
/// (where links go); the test runs alone while it lives.
struct Layout {
    _serial: MutexGuard<'static, ()>,
    dirs: LinkDirs,
    target: PathBuf,
    base: BTreeSet<Tag>,
}

/// A closed store in `real/` holding `tags(n, "")`.
fn layout(n: u32) -> Layout {
    let _serial = serial();
    let dirs = link_dirs();
    let target = dirs.real.join("x.tags");
    let base = tags(n, "");
    build_store(&target, &one_block_buckets(200, 4, 11), &base);
    Layout {
        _serial,
        dirs,
        target,
        base,
    }
}

impl Layout {
    /// A symlink `links/name` to the target, made with `symlink`.
    fn link(&self, name: &str) -> PathBuf {
        let link = self.dirs.links.join(name);
        symlink(&self.target, &link).expect("symlink");
        link
    }

    /// Asserts `links/` holds exactly the entries `want`.
    fn assert_links(&self, want: &[&str], what: &str) {
        assert_names(&self.dirs.links, want, what);
    }

    /// The base tags and `extra`.
    fn base_and(&self, extra: &Tag) -> BTreeSet<Tag> {
        let mut want = self.base.clone();
        want.insert(extra.clone());
        want
    }
}

fn contents(path: &Path) -> BTreeSet<Tag> {
    let s = Store::open_read_only(path).expect("open read-only");
    s.tags().collect::<Result<_, _>>().expect("tags")
}

fn assert_is_link_to(link: &Path, target: &Path, when: &str) {
    assert_symlink(link, when);
    let real = std::fs::canonicalize(link).expect("canonicalize link");
    assert_eq!(
        real,
        std::fs::canonicalize(target).expect("canonicalize target"),
        "{when}: the link points elsewhere"
    );
    let tm = std::fs::symlink_metadata(target).expect("target metadata");
    assert!(
        tm.file_type().is_file(),
        "{when}: the target is no longer a regular file"
    );
}

/// Asserts the side file `side(target)` exists and `side(link)` does not.
fn assert_side_beside_target(side: fn(&Path) -> PathBuf, target: &Path, link: &Path, what: &str) {
    assert!(side(target).exists(), "{what}: not beside the target");
    assert!(!side(link).exists(), "{what}: created beside the link");
}

/// Runs the test alone in a fresh temporary directory holding one link,
/// `name -> to` (both in the directory); returns the link and its target.
fn alone_with_link(
    name: &str,
    to: &str,
) -> (MutexGuard<'static, ()>, tempfile::TempDir, PathBuf, PathBuf) {
    let serial = serial();
    let dir = tempfile::tempdir().expect("tempdir");
    let (link, target) = (dir.path().join(name), dir.path().join(to));
    symlink(&target, &link).expect("symlink");
    (serial, dir, link, target)
}

/// Asserts `r` failed with `Error::NotFound`.
fn expect_not_found<T>(r: tagstore::Result<T>, what: &str) {
    match r {
        Err(Error::NotFound(_)) => {}
        other => panic!("{what}: expected NotFound, got {:?}", other.map(|_| ())),
    }
}

/// Issue: opening a store through a symlink must follow it to the real
/// file: writes through the link are seen through the target path, and the
/// counts file is written beside the target, never beside the link.
#[test]
fn open_through_link_uses_target_and_its_counts() {
    let l = layout(40);
    let link = l.link("alias.tags");

    let st = Store::open(&link).expect("open through link");
    assert_eq!(st.len(), l.base.len() as u64);
    let via = Tag::new("via", "isa", "link");
    assert!(st.insert(&via).expect("insert"));
    // Counts are used (and written) beside the target.
    assert_eq!(st.count("s0", "isa").expect("count"), 5);
    st.close().expect("close");

    let want = l.base_and(&via);
    assert_eq!(contents(&l.target), want, "target path sees the insert");
    assert_eq!(contents(&link), want, "link path sees the insert");
    assert_is_link_to(&link, &l.target, "after a writable open");
    assert_side_beside_target(counts_path, &l.target, &link, "counts file");
    l.assert_links(&["alias.tags"], "side files appeared beside the link");
}

/// Issue: the journal of a store opened through a symlink in a journaled
/// mode must be kept beside the target (where recovery looks for it), and
/// a crash through the link is recovered whether reopened via the link or
/// the target.
#[test]
fn journal_through_link_lies_beside_target() {
    let l = layout(20);
    let link = l.link("alias.tags");

    let st = Store::open(&link).expect("open through link");
    st.set_durability(Durability::Immediate)
        .expect("set_durability");
    let extra = tags(15, "j");
    for t in &extra {
        assert!(st.insert(t).expect("insert"));
    }
    assert_side_beside_target(journal_path, &l.target, &link, "journal in Immediate mode");
    st.abandon();
    assert!(
        !journal_path(&link).exists(),
        "journal beside the link after a crash"
    );

    let st = Store::open(&link).expect("reopen through link");
    assert!(st.recovered_on_open(), "crash through the link not noticed");
    let got: BTreeSet<Tag> = st.tags().collect::<Result<_, _>>().expect("tags");
    let want: BTreeSet<Tag> = l.base.union(&extra).cloned().collect();
    assert_eq!(got, want, "acknowledged Immediate inserts lost");
    assert!(st.check().expect("check").ok());
    st.close().expect("close");
    assert_is_link_to(&link, &l.target, "after recovery");
    l.assert_links(&["alias.tags"], "after recovery");
}

/// Issue: `Store::maintain` through a symlink replaced the link with a new
/// file. It must rewrite the target (its temporary beside the target,
/// never beside the link), keep the link a link, and inserts through the
/// link afterwards must be visible through the target path.
#[test]
fn library_maintain_through_link_rewrites_target() {
    let l = layout(120);
    // Make holes so there is something to compact.
    {
        let st = Store::open(&l.target).expect("open");
        for t in l.base.iter().step_by(3) {
            assert!(st.delete(t).expect("delete"));
        }
        st.close().expect("close");
    }
    let mut left_all: BTreeSet<Tag> = l.base.clone();
    for t in l.base.iter().step_by(3) {
        left_all.remove(t);
    }
    let link = l.link("alias.tags");

    // Where the rewrite's temporary is while tags are copied.
    let seen: RefCell<Vec<(bool, bool)>> = RefCell::new(Vec::new());
    let report = Store::maintain(&link, &MaintainOptions::default(), |_, _| {
        seen.borrow_mut().push((
            maintain_temp_path(&l.target).exists(),
            maintain_temp_path(&link).exists(),
        ));
    })
    .expect("maintain through link");
    let seen = seen.into_inner();
    assert!(!seen.is_empty(), "progress was never called");
    for (beside_target, beside_link) in &seen {
        assert!(
            *beside_target,
            "the rewrite's temporary was not beside the target"
        );
        assert!(!beside_link, "the rewrite's temporary was beside the link");
    }
    assert_eq!(report.after.tags, left_all.len() as u64);

    assert_is_link_to(&link, &l.target, "after maintain");
    assert_eq!(contents(&l.target), left_all, "target holds the tags");
    assert!(!maintain_temp_path(&l.target).exists(), "temporary left");
    l.assert_links(&["alias.tags"], "maintain left files beside the link");

    // Inserts through the link land in the target.
    let st = Store::open(&link).expect("open link after maintain");
    assert!(st
        .insert(&Tag::new("after", "isa", "maint"))
        .expect("insert"));
    st.close().expect("close");
    let t = Store::open_read_only(&l.target).expect("open target");
    assert!(t
        .contains(&Tag::new("after", "isa", "maint"))
        .expect("contains"));
    assert_eq!(t.len(), left_all.len() as u64 + 1);
    assert!(t.check().expect("check").ok());
}

/// Issue: `tagstore maintain LINK` must rewrite the target and leave LINK a
/// symlink; the CLI then inserts through the link into the target.
#[test]
fn cli_maintain_through_link_keeps_link() {
    use std::os::unix::fs::MetadataExt;
    let l = layout(80);
    let link = l.link("alias.tags");
    let ino_before = std::fs::metadata(&l.target).expect("stat").ino();

    let out = cli(&["maintain", s(&link)]);
    assert!(
        out.status.success(),
        "maintain through link failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_is_link_to(&link, &l.target, "after CLI maintain");
    let ino_after = std::fs::metadata(&l.target).expect("stat").ino();
    assert_ne!(
        ino_before, ino_after,
        "the target was not rewritten (maintain replaced something else)"
    );
    assert_eq!(contents(&l.target), l.base);
    l.assert_links(&["alias.tags"], "CLI maintain left files beside the link");

    let out = cli(&["insert", s(&link), "cli", "isa", "link"]);
    assert!(
        out.status.success(),
        "insert: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "inserted\n");
    let out = cli(&[
        "find",
        s(&l.target),
        "--object",
        "cli",
        "--relationship",
        "isa",
    ]);
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stdout), "link\n");
    assert_is_link_to(&link, &l.target, "after CLI insert");
}

/// Issue: a relative symlink in another directory (`links/a -> ../real/x.tags`)
/// must resolve against the link's directory, not the working directory;
/// side files and maintain go beside the target.
#[test]
fn relative_link_in_other_directory() {
    let l = layout(30);
    let link = l.dirs.links.join("rel.tags");
    symlink(Path::new("../real/x.tags"), &link).expect("relative symlink");

    let st = Store::open(&link).expect("open relative link");
    let rel = Tag::new("rel", "isa", "ative");
    assert!(st.insert(&rel).expect("insert"));
    st.close().expect("close");
    Store::maintain(&link, &MaintainOptions::default(), |_, _| {}).expect("maintain relative link");
    let read_link = std::fs::read_link(&link).expect("read_link");
    assert_eq!(
        read_link,
        Path::new("../real/x.tags"),
        "the link was rewritten"
    );
    assert_is_link_to(&link, &l.target, "relative link after maintain");
    assert_eq!(contents(&l.target), l.base_and(&rel));
    l.assert_links(&["rel.tags"], "beside the relative link");
    assert!(counts_path(&l.target).exists());
    assert_names(
        &l.dirs.real,
        &["x.tags", "x.tags.counts"],
        "unexpected files beside the target",
    );
}

/// Issue: a chain of links (`b -> a -> real`) is followed to the end: the
/// store and its side files are the real file's, and maintain keeps both
/// links.
#[test]
fn chain_of_links_followed_to_the_end() {
    let l = layout(25);
    let a = l.link("a.tags");
    let b = l.dirs.links.join("b.tags");
    symlink(&a, &b).expect("symlink b");

    let st = Store::open(&b).expect("open via chain");
    st.set_durability(Durability::Immediate)
        .expect("set_durability");
    let end = Tag::new("chain", "isa", "end");
    assert!(st.insert(&end).expect("insert"));
    assert_side_beside_target(journal_path, &l.target, &a, "journal, first link");
    assert!(!journal_path(&b).exists(), "journal beside the second link");
    st.close().expect("close");

    Store::maintain(&b, &MaintainOptions::default(), |_, _| {}).expect("maintain via chain");
    assert_is_link_to(&a, &l.target, "first link");
    assert_is_link_to(&b, &l.target, "second link");
    assert_symlink(&b, "second link");
    assert_eq!(
        std::fs::read_link(&b).expect("read_link"),
        a,
        "b no longer points at a"
    );
    assert_eq!(contents(&l.target), l.base_and(&end));
    l.assert_links(&["a.tags", "b.tags"], "beside the links");
}

/// Issue: a dangling symlink must give `Error::NotFound` (for a writable
/// open, a read-only open and maintain) and create nothing at either end;
/// the CLI says "no such store file" with exit 1.
#[test]
fn dangling_link_is_not_found() {
    let (_serial, dir, link, missing) = alone_with_link("dangling.tags", "gone.tags");

    expect_not_found(Store::open(&link), "open");
    expect_not_found(Store::open_read_only(&link), "open_read_only");
    expect_not_found(
        Store::maintain(&link, &MaintainOptions::default(), |_, _| {}),
        "maintain",
    );
    let out = cli(&["find", s(&link), "--object", "a", "--relationship", "b"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no such store file"),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!missing.exists(), "the link's target was created");
    assert_symlink(&link, "the dangling link was replaced");
    assert_names(dir.path(), &["dangling.tags"], "files were created");
}

/// Regression: `find` through a dangling link advised `tagstore create
/// LINK`, and `create LINK` then refused with "file already exists". A
/// create through a dangling link (CLI and library, also through a chain)
/// makes the store where the link points, with its side files there, and
/// opens through the link then find it; a create through a link loop fails.
#[test]
fn create_through_a_dangling_link_makes_the_store_at_its_target() {
    let (_serial, dir, link, target) = alone_with_link("dangling.tags", "gone.tags");
    let out = cli(&["create", s(&link)]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_symlink(&link, "create replaced the link");
    assert!(target.is_file(), "no store at the link's target");
    assert_side_beside_target(counts_path, &target, &link, "counts");
    let out = cli(&["insert", s(&link), "a", "b", "c"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(
        contents(&target),
        [Tag::new("a", "b", "c")].into_iter().collect()
    );

    // The library too, through a chain of two links, the first relative.
    let second = dir.path().join("second.tags");
    let far = dir.path().join("far.tags");
    symlink(&far, &second).expect("symlink");
    let first = dir.path().join("first.tags");
    symlink("second.tags", &first).expect("symlink");
    let store = Store::create(&first, &tagstore::CreateOptions::default()).expect("create");
    assert!(store.insert(&Tag::new("x", "y", "z")).expect("insert"));
    store.close().expect("close");
    assert!(far.is_file(), "no store at the end of the chain");
    assert_eq!(
        contents(&first),
        [Tag::new("x", "y", "z")].into_iter().collect()
    );
    assert_symlink(&first, "first link");
    assert_symlink(&second, "second link");

    // A loop is an error, and creates nothing.
    let (l1, l2) = (dir.path().join("loop1.tags"), dir.path().join("loop2.tags"));
    symlink(&l2, &l1).expect("symlink");
    symlink(&l1, &l2).expect("symlink");
    assert!(Store::create(&l1, &tagstore::CreateOptions::default()).is_err());
    let out = cli(&["create", s(&l1)]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
}

/// Issue: a symlink loop must fail with an error at once, never hang or
/// panic.
#[test]
fn link_loop_is_an_error() {
    let (_serial, dir, a, b) = alone_with_link("a.tags", "b.tags");
    symlink(&a, &b).expect("symlink b");
    assert!(Store::open(&a).is_err(), "open of a link loop succeeded");
    assert!(
        Store::open_read_only(&a).is_err(),
        "read-only open of a link loop succeeded"
    );
    assert!(Store::maintain(&a, &MaintainOptions::default(), |_, _| {}).is_err());
    assert_names(dir.path(), &["a.tags", "b.tags"], "beside the loop");
}
