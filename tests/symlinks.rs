//! A store opened through a symbolic link.
//!
//! Covers: every open (writable, read-only, CLI) follows the link to the real
//! file; the side files (`STORE.journal`, `STORE.counts`,
//! `STORE.maintain.tmp`) live beside the TARGET, never beside the link, also
//! when the link is relative and lies in another directory, or is a chain
//! of links; `Store::maintain` and `tagstore maintain` through the link
//! rewrite the target and leave the link a link; a dangling link is
//! `Error::NotFound` (and a CLI error), and a link loop is an error, not a
//! hang.
//!
//! Tests run one at a time (`serial()`): a store held open by the library in
//! one test thread could be inherited, still locked, by a CLI child forked
//! from another.

use std::cell::RefCell;
use std::collections::BTreeSet;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use tagstore::{
    counts_path, journal_path, maintain_temp_path, CreateOptions, Durability, Error,
    MaintainOptions, Store, Tag,
};

const BIN: &str = env!("CARGO_BIN_EXE_tagstore");

static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

fn opts() -> CreateOptions {
    CreateOptions {
        expected_tags: 200,
        primary_buckets_per_half: Some(4),
        blocks_per_primary: Some(1),
        blocks_per_secondary: Some(1),
        seed: Some(11),
    }
}

fn tags(n: u32, prefix: &str) -> BTreeSet<Tag> {
    (0..n)
        .map(|i| Tag::new(format!("{prefix}o{i}"), "isa", format!("s{}", i % 9)))
        .collect()
}

/// Layout: `dir/real/x.tags` (the store) and `dir/links/` (where links go).
struct Layout {
    _dir: tempfile::TempDir,
    real_dir: PathBuf,
    link_dir: PathBuf,
    target: PathBuf,
}

/// A closed store in `real/` holding `t`.
fn layout(t: &BTreeSet<Tag>) -> Layout {
    let dir = tempfile::tempdir().expect("tempdir");
    let real_dir = dir.path().join("real");
    let link_dir = dir.path().join("links");
    std::fs::create_dir(&real_dir).expect("mkdir real");
    std::fs::create_dir(&link_dir).expect("mkdir links");
    let target = real_dir.join("x.tags");
    let s = Store::create(&target, &opts()).expect("create target");
    for tag in t {
        assert!(s.insert(tag).expect("insert"));
    }
    s.close().expect("close");
    Layout {
        _dir: dir,
        real_dir,
        link_dir,
        target,
    }
}

fn contents(path: &Path) -> BTreeSet<Tag> {
    let s = Store::open_read_only(path).expect("open read-only");
    s.tags().collect::<Result<_, _>>().expect("tags")
}

fn names(dir: &Path) -> BTreeSet<String> {
    std::fs::read_dir(dir)
        .expect("read_dir")
        .map(|e| {
            e.expect("dir entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .collect()
}

fn assert_is_link_to(link: &Path, target: &Path, when: &str) {
    let m = std::fs::symlink_metadata(link).expect("symlink_metadata");
    assert!(
        m.file_type().is_symlink(),
        "{when}: {} is no longer a symlink",
        link.display()
    );
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

fn cli(args: &[&str]) -> Output {
    let out = Command::new(BIN)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run tagstore");
    assert_ne!(out.status.code(), Some(101), "tagstore {args:?} panicked");
    out
}

fn s(p: &Path) -> &str {
    p.to_str().expect("utf8 path")
}

/// Issue: opening a store through a symlink must follow it to the real
/// file: writes through the link are seen through the target path, and the
/// counts file is written beside the target, never beside the link.
#[test]
fn open_through_link_uses_target_and_its_counts() {
    let _serial = serial();
    let base = tags(40, "");
    let l = layout(&base);
    let link = l.link_dir.join("alias.tags");
    symlink(&l.target, &link).expect("symlink");

    let st = Store::open(&link).expect("open through link");
    assert_eq!(st.len(), base.len() as u64);
    assert!(st.insert(&Tag::new("via", "isa", "link")).expect("insert"));
    // Counts are used (and written) beside the target.
    assert_eq!(st.count("s0", "isa").expect("count"), 5);
    st.close().expect("close");

    let mut want = base.clone();
    want.insert(Tag::new("via", "isa", "link"));
    assert_eq!(contents(&l.target), want, "target path sees the insert");
    assert_eq!(contents(&link), want, "link path sees the insert");
    assert_is_link_to(&link, &l.target, "after a writable open");
    assert!(
        counts_path(&l.target).exists(),
        "no counts beside the target"
    );
    assert!(
        !counts_path(&link).exists(),
        "a counts file was created beside the link"
    );
    assert_eq!(
        names(&l.link_dir),
        BTreeSet::from(["alias.tags".to_string()]),
        "side files appeared beside the link"
    );
}

/// Issue: the journal of a store opened through a symlink in a journaled
/// mode must be kept beside the target (where recovery looks for it), and
/// a crash through the link is recovered whether reopened via the link or
/// the target.
#[test]
fn journal_through_link_lies_beside_target() {
    let _serial = serial();
    let base = tags(20, "");
    let l = layout(&base);
    let link = l.link_dir.join("alias.tags");
    symlink(&l.target, &link).expect("symlink");

    let st = Store::open(&link).expect("open through link");
    st.set_durability(Durability::Immediate)
        .expect("set_durability");
    let extra = tags(15, "j");
    for t in &extra {
        assert!(st.insert(t).expect("insert"));
    }
    assert!(
        journal_path(&l.target).exists(),
        "journal not beside the target while open in Immediate mode"
    );
    assert!(
        !journal_path(&link).exists(),
        "journal created beside the link"
    );
    st.abandon();
    assert!(
        !journal_path(&link).exists(),
        "journal beside the link after a crash"
    );

    let st = Store::open(&link).expect("reopen through link");
    assert!(st.recovered_on_open(), "crash through the link not noticed");
    let got: BTreeSet<Tag> = st.tags().collect::<Result<_, _>>().expect("tags");
    let want: BTreeSet<Tag> = base.union(&extra).cloned().collect();
    assert_eq!(got, want, "acknowledged Immediate inserts lost");
    assert!(st.check().expect("check").ok());
    st.close().expect("close");
    assert_is_link_to(&link, &l.target, "after recovery");
    assert_eq!(
        names(&l.link_dir),
        BTreeSet::from(["alias.tags".to_string()])
    );
}

/// Issue: `Store::maintain` through a symlink replaced the link with a new
/// file. It must rewrite the target (its temporary beside the target,
/// never beside the link), keep the link a link, and inserts through the
/// link afterwards must be visible through the target path.
#[test]
fn library_maintain_through_link_rewrites_target() {
    let _serial = serial();
    let base = tags(120, "");
    let l = layout(&base);
    // Make holes so there is something to compact.
    {
        let st = Store::open(&l.target).expect("open");
        for t in base.iter().step_by(3) {
            assert!(st.delete(t).expect("delete"));
        }
        st.close().expect("close");
    }
    let mut left_all: BTreeSet<Tag> = base.clone();
    for t in base.iter().step_by(3) {
        left_all.remove(t);
    }
    let link = l.link_dir.join("alias.tags");
    symlink(&l.target, &link).expect("symlink");

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
    assert_eq!(
        names(&l.link_dir),
        BTreeSet::from(["alias.tags".to_string()]),
        "maintain left files beside the link"
    );

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
    let _serial = serial();
    let base = tags(80, "");
    let l = layout(&base);
    let link = l.link_dir.join("alias.tags");
    symlink(&l.target, &link).expect("symlink");
    let ino_before = {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(&l.target).expect("stat").ino()
    };

    let out = cli(&["maintain", s(&link)]);
    assert!(
        out.status.success(),
        "maintain through link failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_is_link_to(&link, &l.target, "after CLI maintain");
    {
        use std::os::unix::fs::MetadataExt;
        let ino_after = std::fs::metadata(&l.target).expect("stat").ino();
        assert_ne!(
            ino_before, ino_after,
            "the target was not rewritten (maintain replaced something else)"
        );
    }
    assert_eq!(contents(&l.target), base);
    assert_eq!(
        names(&l.link_dir),
        BTreeSet::from(["alias.tags".to_string()]),
        "CLI maintain left files beside the link"
    );

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
    let _serial = serial();
    let base = tags(30, "");
    let l = layout(&base);
    let link = l.link_dir.join("rel.tags");
    symlink(Path::new("../real/x.tags"), &link).expect("relative symlink");

    let st = Store::open(&link).expect("open relative link");
    assert!(st.insert(&Tag::new("rel", "isa", "ative")).expect("insert"));
    st.close().expect("close");
    Store::maintain(&link, &MaintainOptions::default(), |_, _| {}).expect("maintain relative link");
    let read_link = std::fs::read_link(&link).expect("read_link");
    assert_eq!(
        read_link,
        Path::new("../real/x.tags"),
        "the link was rewritten"
    );
    assert_is_link_to(&link, &l.target, "relative link after maintain");
    let mut want = base.clone();
    want.insert(Tag::new("rel", "isa", "ative"));
    assert_eq!(contents(&l.target), want);
    assert_eq!(names(&l.link_dir), BTreeSet::from(["rel.tags".to_string()]));
    assert!(counts_path(&l.target).exists());
    assert_eq!(
        names(&l.real_dir),
        BTreeSet::from(["x.tags".to_string(), "x.tags.counts".to_string()]),
        "unexpected files beside the target"
    );
}

/// Issue: a chain of links (`b -> a -> real`) is followed to the end: the
/// store and its side files are the real file's, and maintain keeps both
/// links.
#[test]
fn chain_of_links_followed_to_the_end() {
    let _serial = serial();
    let base = tags(25, "");
    let l = layout(&base);
    let a = l.link_dir.join("a.tags");
    let b = l.link_dir.join("b.tags");
    symlink(&l.target, &a).expect("symlink a");
    symlink(&a, &b).expect("symlink b");

    let st = Store::open(&b).expect("open via chain");
    st.set_durability(Durability::Immediate)
        .expect("set_durability");
    assert!(st.insert(&Tag::new("chain", "isa", "end")).expect("insert"));
    assert!(journal_path(&l.target).exists(), "journal not at the end");
    assert!(!journal_path(&a).exists() && !journal_path(&b).exists());
    st.close().expect("close");

    Store::maintain(&b, &MaintainOptions::default(), |_, _| {}).expect("maintain via chain");
    assert_is_link_to(&a, &l.target, "first link");
    assert_is_link_to(&b, &l.target, "second link");
    assert!(std::fs::symlink_metadata(&b)
        .expect("meta")
        .file_type()
        .is_symlink());
    assert_eq!(
        std::fs::read_link(&b).expect("read_link"),
        a,
        "b no longer points at a"
    );
    let mut want = base.clone();
    want.insert(Tag::new("chain", "isa", "end"));
    assert_eq!(contents(&l.target), want);
    assert_eq!(
        names(&l.link_dir),
        BTreeSet::from(["a.tags".to_string(), "b.tags".to_string()])
    );
}

/// Issue: a dangling symlink must give `Error::NotFound` (for a writable
/// open, a read-only open and maintain) and create nothing at either end;
/// the CLI says "no such store file" with exit 1.
#[test]
fn dangling_link_is_not_found() {
    let _serial = serial();
    let dir = tempfile::tempdir().expect("tempdir");
    let missing = dir.path().join("gone.tags");
    let link = dir.path().join("dangling.tags");
    symlink(&missing, &link).expect("symlink");

    match Store::open(&link) {
        Err(Error::NotFound(_)) => {}
        other => panic!("open: expected NotFound, got {:?}", other.map(|_| ())),
    }
    match Store::open_read_only(&link) {
        Err(Error::NotFound(_)) => {}
        other => panic!(
            "open_read_only: expected NotFound, got {:?}",
            other.map(|_| ())
        ),
    }
    match Store::maintain(&link, &MaintainOptions::default(), |_, _| {}) {
        Err(Error::NotFound(_)) => {}
        other => panic!("maintain: expected NotFound, got {:?}", other.map(|_| ())),
    }
    let out = cli(&["find", s(&link), "--object", "a", "--relationship", "b"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no such store file"),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!missing.exists(), "the link's target was created");
    assert!(
        std::fs::symlink_metadata(&link)
            .expect("meta")
            .file_type()
            .is_symlink(),
        "the dangling link was replaced"
    );
    assert_eq!(
        names(dir.path()),
        BTreeSet::from(["dangling.tags".to_string()]),
        "files were created"
    );
}

/// Issue: a symlink loop must fail with an error at once, never hang or
/// panic.
#[test]
fn link_loop_is_an_error() {
    let _serial = serial();
    let dir = tempfile::tempdir().expect("tempdir");
    let a = dir.path().join("a.tags");
    let b = dir.path().join("b.tags");
    symlink(&b, &a).expect("symlink a");
    symlink(&a, &b).expect("symlink b");
    assert!(Store::open(&a).is_err(), "open of a link loop succeeded");
    assert!(
        Store::open_read_only(&a).is_err(),
        "read-only open of a link loop succeeded"
    );
    assert!(Store::maintain(&a, &MaintainOptions::default(), |_, _| {}).is_err());
    assert_eq!(
        names(dir.path()),
        BTreeSet::from(["a.tags".to_string(), "b.tags".to_string()])
    );
}
