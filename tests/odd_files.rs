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

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};
use tagstore::{CreateOptions, Error, MaintainOptions, Store};

const BIN: &str = env!("CARGO_BIN_EXE_tagstore");

fn mkfifo(path: &Path) {
    let st = Command::new("mkfifo")
        .arg(path)
        .status()
        .expect("run mkfifo");
    assert!(st.success(), "mkfifo failed: {st}");
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

fn opened(r: tagstore::Result<Store>) -> Opened {
    match r {
        Ok(_) => Opened::Ok,
        Err(Error::NotARegularFile(p)) => Opened::NotARegularFile(p),
        Err(e) => Opened::Other(format!("{e:?}")),
    }
}

fn assert_not_regular(got: Opened, path: &Path, what: &str) {
    match got {
        Opened::NotARegularFile(p) => assert_eq!(p, path, "{what}: the error names the path"),
        Opened::Ok => panic!("{what}: expected NotARegularFile, but it opened"),
        Opened::Other(e) => panic!("{what}: expected NotARegularFile, got {e}"),
    }
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

/// Runs the CLI, killing it (and failing the test) after 10 s.
fn cli_with_timeout(args: &[&str]) -> (Option<i32>, String, String) {
    use std::io::Read;
    let mut child = Command::new(BIN)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn tagstore");
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(st) = child.try_wait().expect("try_wait") {
            break st;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("tagstore {args:?} did not finish within 10 s (it hangs)");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut out = String::new();
    let mut err = String::new();
    if let Some(mut o) = child.stdout.take() {
        o.read_to_string(&mut out).expect("read stdout");
    }
    if let Some(mut e) = child.stderr.take() {
        e.read_to_string(&mut err).expect("read stderr");
    }
    assert_ne!(
        status.code(),
        Some(101),
        "tagstore {args:?} panicked: {err}"
    );
    (status.code(), out, err)
}

fn s(p: &Path) -> &str {
    p.to_str().expect("utf8 path")
}

/// Issue: `Store::open` of a FIFO blocked forever (opening a FIFO waits for
/// a writer); it must return `Error::NotARegularFile(path)` at once, and the
/// FIFO must be left as it was with nothing created beside it.
#[test]
fn open_fifo_is_not_a_regular_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let fifo = dir.path().join("pipe.tags");
    mkfifo(&fifo);
    let p = fifo.clone();
    let got = within_5s("Store::open(FIFO)", move || opened(Store::open(&p)));
    assert_not_regular(got, &fifo, "Store::open");
    assert!(
        std::fs::symlink_metadata(&fifo)
            .expect("meta")
            .file_type()
            .is_fifo_like(),
        "the FIFO was replaced"
    );
    assert_eq!(names(dir.path()), BTreeSet::from(["pipe.tags".to_string()]));
}

/// Issue: `Store::open_read_only` of a FIFO must also return
/// `Error::NotARegularFile(path)` at once rather than block.
#[test]
fn open_read_only_fifo_is_not_a_regular_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let fifo = dir.path().join("pipe.tags");
    mkfifo(&fifo);
    let p = fifo.clone();
    let got = within_5s("Store::open_read_only(FIFO)", move || {
        opened(Store::open_read_only(&p))
    });
    assert_not_regular(got, &fifo, "Store::open_read_only");
    assert_eq!(names(dir.path()), BTreeSet::from(["pipe.tags".to_string()]));
}

/// Issue: a directory given as the store must be `Error::NotARegularFile`
/// for both kinds of open, not an I/O error from mapping it.
#[test]
fn directory_is_not_a_regular_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path().join("adir.tags");
    std::fs::create_dir(&d).expect("mkdir");
    let p = d.clone();
    let got = within_5s("Store::open(dir)", move || opened(Store::open(&p)));
    assert_not_regular(got, &d, "Store::open of a directory");
    let p = d.clone();
    let got = within_5s("Store::open_read_only(dir)", move || {
        opened(Store::open_read_only(&p))
    });
    assert_not_regular(got, &d, "Store::open_read_only of a directory");
    assert!(d.is_dir());
    assert!(
        names(&d).is_empty(),
        "files were created inside the directory"
    );
    assert_eq!(names(dir.path()), BTreeSet::from(["adir.tags".to_string()]));
}

/// Issue: a character device (`/dev/null`) is not a store either: both
/// opens give `Error::NotARegularFile`.
#[test]
fn character_device_is_not_a_regular_file() {
    let dev = PathBuf::from("/dev/null");
    let got = within_5s("Store::open_read_only(/dev/null)", || {
        opened(Store::open_read_only("/dev/null"))
    });
    assert_not_regular(got, &dev, "read-only open of /dev/null");
    let got = within_5s("Store::open(/dev/null)", || {
        opened(Store::open("/dev/null"))
    });
    assert_not_regular(got, &dev, "writable open of /dev/null");
}

/// Issue: a symlink to a FIFO is followed and refused the same way, at
/// once (the error names the FIFO the link leads to).
#[test]
fn symlink_to_fifo_is_not_a_regular_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let fifo = dir.path().join("pipe");
    mkfifo(&fifo);
    let link = dir.path().join("link.tags");
    std::os::unix::fs::symlink(&fifo, &link).expect("symlink");
    let p = link.clone();
    let got = within_5s("Store::open(link to FIFO)", move || opened(Store::open(&p)));
    match got {
        Opened::NotARegularFile(p) => assert!(
            p == link || p == std::fs::canonicalize(&fifo).expect("canonicalize"),
            "the error names {p:?}, neither the link nor the FIFO"
        ),
        Opened::Ok => panic!("expected NotARegularFile, but it opened"),
        Opened::Other(e) => panic!("expected NotARegularFile, got {e}"),
    }
    assert_eq!(
        names(dir.path()),
        BTreeSet::from(["link.tags".to_string(), "pipe".to_string()])
    );
}

/// Issue: `Store::maintain` of a FIFO must be refused at once
/// (`NotARegularFile`), leaving no temporary behind and the FIFO in place.
#[test]
fn maintain_fifo_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let fifo = dir.path().join("pipe.tags");
    mkfifo(&fifo);
    let p = fifo.clone();
    let got = within_5s("Store::maintain(FIFO)", move || {
        match Store::maintain(&p, &MaintainOptions::default(), |_, _| {}) {
            Ok(_) => Opened::Ok,
            Err(Error::NotARegularFile(p)) => Opened::NotARegularFile(p),
            Err(e) => Opened::Other(format!("{e:?}")),
        }
    });
    assert_not_regular(got, &fifo, "Store::maintain");
    assert_eq!(names(dir.path()), BTreeSet::from(["pipe.tags".to_string()]));
}

/// Issue: `Store::create` over an existing FIFO must refuse
/// (`AlreadyExists`) without opening (and so blocking on) it.
#[test]
fn create_over_fifo_refuses_without_hanging() {
    let dir = tempfile::tempdir().expect("tempdir");
    let fifo = dir.path().join("pipe.tags");
    mkfifo(&fifo);
    let p = fifo.clone();
    let got = within_5s("Store::create(FIFO)", move || {
        match Store::create(&p, &CreateOptions::default()) {
            Ok(_) => "ok".to_string(),
            Err(Error::AlreadyExists(_)) => "exists".to_string(),
            Err(e) => format!("{e:?}"),
        }
    });
    assert_eq!(got, "exists");
    assert!(std::fs::symlink_metadata(&fifo)
        .expect("meta")
        .file_type()
        .is_fifo_like());
    assert_eq!(names(dir.path()), BTreeSet::from(["pipe.tags".to_string()]));
}

/// Issue: `tagstore find FIFO ...` and `tagstore export FIFO` hung; they
/// must exit 1 at once with `not a regular file:` on stderr (as must
/// `stats`, `check`, `count` and `insert`), printing nothing on stdout.
#[test]
fn cli_on_fifo_exits_1_not_a_regular_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let fifo = dir.path().join("pipe.tags");
    mkfifo(&fifo);
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
    assert_eq!(names(dir.path()), BTreeSet::from(["pipe.tags".to_string()]));
}

/// Issue: the CLI given a directory as the store must also exit 1 with
/// `not a regular file:`.
#[test]
fn cli_on_directory_exits_1() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path().join("adir.tags");
    std::fs::create_dir(&d).expect("mkdir");
    for args in [
        vec!["export", s(&d)],
        vec!["find", s(&d), "--object", "a", "--relationship", "b"],
    ] {
        let (code, _, err) = cli_with_timeout(&args);
        assert_eq!(code, Some(1), "{args:?}: stderr: {err}");
        assert!(err.contains("not a regular file:"), "{args:?}: {err}");
    }
}

/// `FileType::is_fifo` lives in an extension trait; a short alias.
trait FifoLike {
    fn is_fifo_like(&self) -> bool;
}

impl FifoLike for std::fs::FileType {
    fn is_fifo_like(&self) -> bool {
        use std::os::unix::fs::FileTypeExt;
        self.is_fifo()
    }
}
