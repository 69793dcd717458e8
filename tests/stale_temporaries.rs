//! Temporaries left beside a store by a killed run.
//!
//! Covers: `STORE.counts.tmp` (a counts rewrite) and `STORE.maintain.tmp`
//! (a maintenance rewrite), and the rewrite's own journal
//! (`STORE.maintain.tmp.journal`), holding garbage, are reported by a
//! read-only open's `check().notes` ("stale temporary", naming each path)
//! and left exactly as they were; `tagstore check` prints a `note:` line for
//! each and exits 0; a writable `Store::open` removes them and its `check()`
//! notes say "removed stale temporary ..." for each; later opens report
//! nothing. The store's tags are untouched throughout. Through a symlink,
//! the temporaries beside the target are the ones found and removed.
//!
//! Tests run one at a time (`serial()`): library handles and CLI children
//! are mixed.

mod common;

use common::edge::{assert_names, build_store, cli, link_dirs, s, seeded, serial};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::MutexGuard;
use tagstore::{counts_path, maintain_temp_path, Store, Tag};

fn tags() -> BTreeSet<Tag> {
    (0..60)
        .map(|i| Tag::new(format!("o{i}"), "isa", format!("s{}", i % 6)))
        .collect()
}

fn store_in(dir: &Path) -> PathBuf {
    let path = dir.join("st.tags");
    build_store(&path, &seeded(100, 5), &tags());
    path
}

fn side(store: &Path, ext: &str) -> PathBuf {
    let mut s = store.as_os_str().to_owned();
    s.push(".");
    s.push(ext);
    PathBuf::from(s)
}

/// The temporaries a killed run leaves, each with its garbage bytes.
fn leave_temporaries(store: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let list = vec![
        (
            side(&counts_path(store), "tmp"),
            b"garbage counts \x00\xff".to_vec(),
        ),
        (maintain_temp_path(store), vec![0xA5; 9000]),
        (
            side(&maintain_temp_path(store), "journal"),
            b"junk".to_vec(),
        ),
    ];
    for (p, bytes) in &list {
        std::fs::write(p, bytes).expect("write temporary");
    }
    assert_eq!(
        list[0].0.file_name().and_then(|n| n.to_str()),
        Some("st.tags.counts.tmp")
    );
    assert_eq!(
        list[1].0.file_name().and_then(|n| n.to_str()),
        Some("st.tags.maintain.tmp")
    );
    list
}

/// What a killed run left: each temporary with its garbage bytes.
type Temporaries = Vec<(PathBuf, Vec<u8>)>;

/// A test's setup: run alone, a store in a temporary directory, and the
/// temporaries a killed run left beside it.
fn stale() -> (
    MutexGuard<'static, ()>,
    tempfile::TempDir,
    PathBuf,
    Temporaries,
) {
    let _serial = serial();
    let dir = tempfile::tempdir().expect("tempdir");
    let path = store_in(dir.path());
    let temps = leave_temporaries(&path);
    (_serial, dir, path, temps)
}

fn contents(store: &Store) -> BTreeSet<Tag> {
    store.tags().collect::<Result<_, _>>().expect("tags")
}

/// Asserts exactly one note mentions `path`, and that it contains `phrase`.
fn assert_note(notes: &[String], path: &Path, phrase: &str, when: &str) {
    // The path as a whole word: `X.maintain.tmp` is a prefix of `X.maintain.tmp.journal`.
    let shown = format!("{} ", path.display());
    let hits: Vec<&String> = notes.iter().filter(|n| n.contains(&shown)).collect();
    assert_eq!(
        hits.len(),
        1,
        "{when}: expected one note naming {shown}, got {notes:?}"
    );
    assert!(
        hits[0].contains(phrase),
        "{when}: note {:?} lacks {phrase:?}",
        hits[0]
    );
}

/// Issue: stale `STORE.counts.tmp` / `STORE.maintain.tmp` left by a killed
/// run must be named by a read-only open's `check()` notes ("stale
/// temporary") without being removed or changed, and without being counted
/// as faults.
#[test]
fn read_only_check_reports_but_keeps_stale_temporaries() {
    let (_serial, _dir, path, temps) = stale();

    let ro = Store::open_read_only(&path).expect("read-only open");
    let r = ro.check().expect("check");
    assert!(r.ok(), "stale temporaries are not faults: {:?}", r.faults);
    for (p, _) in &temps {
        assert_note(&r.notes, p, "stale temporary", "read-only check");
    }
    assert!(
        r.notes.iter().all(|n| !n.contains("removed")),
        "a read-only open claims to have removed something: {:?}",
        r.notes
    );
    assert_eq!(contents(&ro), tags());
    drop(ro);
    for (p, bytes) in &temps {
        assert_eq!(
            std::fs::read(p).ok().as_ref(),
            Some(bytes),
            "the read-only open removed or changed {}",
            p.display()
        );
    }
}

/// Issue: a writable `Store::open` must remove the stale temporaries (the
/// exclusive lock proves no run is using them) and its `check()` notes say
/// "removed stale temporary" for each; a later open finds none.
#[test]
fn writable_open_removes_stale_temporaries() {
    let (_serial, dir, path, temps) = stale();

    let w = Store::open(&path).expect("writable open");
    for (p, _) in &temps {
        assert!(!p.exists(), "{} was not removed", p.display());
    }
    let r = w.check().expect("check");
    assert!(r.ok(), "{:?}", r.faults);
    for (p, _) in &temps {
        assert_note(&r.notes, p, "removed stale temporary", "writable check");
    }
    assert_eq!(
        contents(&w),
        tags(),
        "removing temporaries touched the tags"
    );
    assert!(w
        .insert(&Tag::new("still", "isa", "usable"))
        .expect("insert"));
    w.close().expect("close");

    let again = Store::open(&path).expect("reopen");
    let r = again.check().expect("check");
    assert!(
        r.notes.is_empty(),
        "notes after the temporaries were removed: {:?}",
        r.notes
    );
    assert_eq!(again.len(), tags().len() as u64 + 1);
    again.close().expect("close");
    assert_names(dir.path(), &["st.tags", "st.tags.counts"], "left");
}

/// Issue: `tagstore check STORE` must print a line starting with `note:`
/// naming each stale temporary, still exit 0 (they are not faults), and —
/// being a read-only command — leave them in place.
#[test]
fn cli_check_prints_notes() {
    let (_serial, _dir, path, temps) = stale();
    let out = cli(&["check", s(&path)]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "check failed: {stdout} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let notes: Vec<&str> = stdout.lines().filter(|l| l.starts_with("note:")).collect();
    for (p, _) in &temps {
        let shown = format!("{} ", p.display());
        assert_eq!(
            notes.iter().filter(|l| l.contains(&shown)).count(),
            1,
            "no single note: line names {shown}: {stdout}"
        );
        assert!(p.exists(), "CLI check removed {shown}");
    }
    assert!(
        notes.iter().all(|l| l.contains("stale temporary")),
        "{notes:?}"
    );
    assert!(stdout.contains("0 faults"), "{stdout}");
}

/// Issue: opened through a symlink, the temporaries that count are the
/// ones beside the target: a read-only open reports them, a writable one
/// removes them, and nothing is looked for (or created) beside the link.
#[test]
fn stale_temporaries_beside_symlink_target() {
    let _serial = serial();
    let d = link_dirs();
    let path = store_in(&d.real);
    let link = d.links.join("alias.tags");
    std::os::unix::fs::symlink(&path, &link).expect("symlink");
    let temps = leave_temporaries(&path);

    {
        let ro = Store::open_read_only(&link).expect("read-only via link");
        let r = ro.check().expect("check");
        for (p, _) in &temps {
            assert!(
                r.notes.iter().any(|n| n.contains("stale temporary")
                    && n.contains(p.file_name().and_then(|f| f.to_str()).unwrap_or("?"))),
                "no note for {} via the link: {:?}",
                p.display(),
                r.notes
            );
            assert!(p.exists());
        }
    }
    let w = Store::open(&link).expect("writable via link");
    for (p, _) in &temps {
        assert!(!p.exists(), "{} not removed via the link", p.display());
    }
    let r = w.check().expect("check");
    assert_eq!(
        r.notes
            .iter()
            .filter(|n| n.contains("removed stale temporary"))
            .count(),
        temps.len(),
        "{:?}",
        r.notes
    );
    w.close().expect("close");
    assert_names(&d.links, &["alias.tags"], "files beside the link");
}
