//! Opening something that is not a regular file.
//!
//! Covers: `Store::open` and `Store::open_read_only` of a FIFO return
//! `Error::NotARegularFile(path)` at once (opening a FIFO for reading would
//! block until a writer comes: each open runs in a thread and the test fails
//! if it takes more than 5 s); the same for a directory, a character device
//! (`/dev/null`), a symlink to a FIFO, and `Store::maintain` of a FIFO; the
//! CLI (`find`, `export`, `stats`, `check`, `count`, `insert`) exits 1 with
//! `not a regular file:` on stderr (each run is killed after 10 s, failing
//! the test). Nothing is created or removed beside the odd file.

mod common;

use common::edge::{assert_names, s, spawn_cli, wait_child};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::mpsc;
use std::time::Duration;
use tagstore::{CreateOptions, Error, MaintainOptions, Store};

fn mkfifo(path: &Path) {
    let st = Command::new("mkfifo")
        .arg(path)
        .status()
        .expect("run mkfifo");
    assert!(st.success(), "mkfifo failed: {st}");
}

/// A temporary directory holding one FIFO named `name`; returns both.
fn dir_with_fifo(name: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let fifo = dir.path().join(name);
    mkfifo(&fifo);
    (dir, fifo)
}

/// A temporary directory holding one empty directory `adir.tags`; returns both.
fn dir_with_dir() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path().join("adir.tags");
    std::fs::create_dir(&d).expect("mkdir");
    (dir, d)
}

/// Asserts `p` is (still) a FIFO.
fn assert_fifo(p: &Path, what: &str) {
    use std::os::unix::fs::FileTypeExt;
    assert!(
        std::fs::symlink_metadata(p)
            .expect("meta")
            .file_type()
            .is_fifo(),
        "{what}"
    );
}

/// Runs `f` in a thread; fails the test if it has not returned within 5 s.
fn within_5s<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(Duration::from_secs(5)) {
        Ok(v) => v,
        Err(_) => panic!("{what} did not return within 5 s (it hangs)"),
    }
}

/// What an open returned, reduced to something `Send` and comparable.
#[derive(Debug)]
enum Opened {
    Ok,
    NotARegularFile(PathBuf),
    Other(String),
}

fn opened<T>(r: tagstore::Result<T>) -> Opened {
    match r {
        Ok(_) => Opened::Ok,
        Err(Error::NotARegularFile(p)) => Opened::NotARegularFile(p),
        Err(e) => Opened::Other(format!("{e:?}")),
    }
}

/// Asserts `got` is `NotARegularFile` naming one of `paths`.
fn assert_not_regular_any(got: Opened, paths: &[&Path], what: &str) {
    match got {
        Opened::NotARegularFile(p) => assert!(
            paths.contains(&p.as_path()),
            "{what}: the error names {p:?}, not one of {paths:?}"
        ),
        Opened::Ok => panic!("{what}: expected NotARegularFile, but it opened"),
        Opened::Other(e) => panic!("{what}: expected NotARegularFile, got {e}"),
    }
}

/// Runs `f(path)` in a thread (failing if it takes over 5 s) and asserts
/// it gave `NotARegularFile` naming one of `paths`.
fn assert_refused_at_once(path: &Path, paths: &[&Path], what: &str, f: fn(&Path) -> Opened) {
    let p = path.to_path_buf();
    let got = within_5s(what, move || f(&p));
    assert_not_regular_any(got, paths, what);
}

fn open(p: &Path) -> Opened {
    opened(Store::open(p))
}

fn open_read_only(p: &Path) -> Opened {
    opened(Store::open_read_only(p))
}

/// Both opens of `path` (each within 5 s) give `NotARegularFile(path)`.
fn assert_both_opens_refused(path: &Path, what: &str) {
    let w = format!("writable open of {what}");
    assert_refused_at_once(path, &[path], &w, open);
    let r = format!("read-only open of {what}");
    assert_refused_at_once(path, &[path], &r, open_read_only);
}

/// `f` on a FIFO `pipe.tags` in a fresh directory must give
/// `NotARegularFile` naming it at once, leave the FIFO as it was and create
/// nothing beside it.
fn assert_fifo_refused(what: &str, f: fn(&Path) -> Opened) {
    let (dir, fifo) = dir_with_fifo("pipe.tags");
    assert_refused_at_once(&fifo, &[&fifo], what, f);
    assert_fifo(&fifo, "the FIFO was replaced");
    assert_names(dir.path(), &["pipe.tags"], "beside the FIFO");
}

/// Runs the CLI, killing it (and failing the test) after 10 s.
fn cli_with_timeout(args: &[&str]) -> (Option<i32>, String, String) {
    wait_child(
        spawn_cli(args),
        Duration::from_secs(10),
        &format!("tagstore {args:?}"),
    )
}

/// Issue: `Store::open` of a FIFO blocked forever (opening a FIFO waits for
/// a writer); it must return `Error::NotARegularFile(path)` at once, and the
/// FIFO must be left as it was with nothing created beside it.
#[test]
fn open_fifo_is_not_a_regular_file() {
    assert_fifo_refused("Store::open(FIFO)", open);
}

/// Issue: `Store::open_read_only` of a FIFO must also return
/// `Error::NotARegularFile(path)` at once rather than block.
#[test]
fn open_read_only_fifo_is_not_a_regular_file() {
    assert_fifo_refused("Store::open_read_only(FIFO)", open_read_only);
}

/// Issue: a directory given as the store must be `Error::NotARegularFile`
/// for both kinds of open, not an I/O error from mapping it.
#[test]
fn directory_is_not_a_regular_file() {
    let (dir, d) = dir_with_dir();
    assert_both_opens_refused(&d, "a directory");
    assert!(d.is_dir());
    assert_names(&d, &[], "files were created inside the directory");
    assert_names(dir.path(), &["adir.tags"], "beside the directory");
}

/// Issue: a character device (`/dev/null`) is not a store either: both
/// opens give `Error::NotARegularFile`.
#[test]
fn character_device_is_not_a_regular_file() {
    assert_both_opens_refused(Path::new("/dev/null"), "/dev/null");
}

/// Issue: a symlink to a FIFO is followed and refused the same way, at
/// once (the error names the FIFO the link leads to).
#[test]
fn symlink_to_fifo_is_not_a_regular_file() {
    let (dir, fifo) = dir_with_fifo("pipe");
    let link = dir.path().join("link.tags");
    std::os::unix::fs::symlink(&fifo, &link).expect("symlink");
    let real = std::fs::canonicalize(&fifo).expect("canonicalize");
    assert_refused_at_once(&link, &[&link, &real], "Store::open(link to FIFO)", open);
    assert_names(dir.path(), &["link.tags", "pipe"], "beside the link");
}

/// Issue: `Store::maintain` of a FIFO must be refused at once
/// (`NotARegularFile`), leaving no temporary behind and the FIFO in place.
#[test]
fn maintain_fifo_is_refused() {
    assert_fifo_refused("Store::maintain(FIFO)", |p| {
        opened(Store::maintain(p, &MaintainOptions::default(), |_, _| {}))
    });
}

/// Issue: `Store::create` over an existing FIFO must refuse
/// (`AlreadyExists`) without opening (and so blocking on) it.
#[test]
fn create_over_fifo_refuses_without_hanging() {
    let (dir, fifo) = dir_with_fifo("pipe.tags");
    let p = fifo.clone();
    let got = within_5s("Store::create(FIFO)", move || {
        match Store::create(&p, &CreateOptions::default()) {
            Ok(_) => "ok".to_string(),
            Err(Error::AlreadyExists(_)) => "exists".to_string(),
            Err(e) => format!("{e:?}"),
        }
    });
    assert_eq!(got, "exists");
    assert_fifo(&fifo, "the FIFO was replaced");
    assert_names(dir.path(), &["pipe.tags"], "beside the FIFO");
}

/// Issue: `tagstore find FIFO ...` and `tagstore export FIFO` hung; they
/// must exit 1 at once with `not a regular file:` on stderr (as must
/// `stats`, `check`, `count` and `insert`), printing nothing on stdout.
#[test]
fn cli_on_fifo_exits_1_not_a_regular_file() {
    let (dir, fifo) = dir_with_fifo("pipe.tags");
    let f = s(&fifo);
    for args in [
        vec!["find", f, "--object", "a", "--relationship", "b"],
        vec!["find", f, "--subject", "a", "--relationship", "b"],
        vec!["export", f],
        vec!["stats", f],
        vec!["check", f],
        vec!["count", f, "--subject", "a", "--relationship", "b"],
        vec!["insert", f, "a", "b", "c"],
    ] {
        let (code, out, err) = cli_with_timeout(&args);
        assert_eq!(code, Some(1), "{args:?}: exit code; stderr: {err}");
        assert!(
            err.contains("not a regular file:"),
            "{args:?}: stderr lacks \"not a regular file:\": {err}"
        );
        assert!(err.starts_with("error: "), "{args:?}: stderr: {err}");
        assert!(out.is_empty(), "{args:?}: printed {out:?}");
    }
    assert_names(dir.path(), &["pipe.tags"], "beside the FIFO");
}

/// Issue: the CLI given a directory as the store must also exit 1 with
/// `not a regular file:`.
#[test]
fn cli_on_directory_exits_1() {
    let (_dir, d) = dir_with_dir();
    for args in [
        vec!["export", s(&d)],
        vec!["find", s(&d), "--object", "a", "--relationship", "b"],
    ] {
        let (code, _, err) = cli_with_timeout(&args);
        assert_eq!(code, Some(1), "{args:?}: stderr: {err}");
        assert!(err.contains("not a regular file:"), "{args:?}: {err}");
    }
}

/// Regression (a review, 2026-11-30): `tagstore create` on an existing FIFO
/// hung (the refusal's hint opened the FIFO to read its first block), and
/// `create` on a directory said "file already exists". The CLI refuses both
/// at once as not a regular file (the library's `AlreadyExists` stays, see
/// `create_over_fifo_refuses_without_hanging`), leaving them as they were.
#[test]
fn cli_create_over_a_fifo_or_directory_is_not_a_regular_file() {
    let (dir, d) = dir_with_dir();
    let (fdir, fifo) = dir_with_fifo("pipe.tags");
    for p in [&fifo, &d] {
        let (code, _out, err) = cli_with_timeout(&["create", s(p)]);
        assert_eq!(code, Some(1), "create {p:?}: {err}");
        assert!(err.contains("not a regular file:"), "create {p:?}: {err}");
    }
    assert_fifo(&fifo, "the FIFO was replaced");
    assert!(d.is_dir(), "the directory is left as it was");
    assert_names(dir.path(), &["adir.tags"], "beside the directory");
    assert_names(fdir.path(), &["pipe.tags"], "beside the FIFO");
}
