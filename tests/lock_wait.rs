//! Waiting for a store another handle or process holds.
//!
//! Covers, in the library (`Store::open_with_options` with
//! `OpenOptions::wait`): a writer that waits up to 10 s opens the store
//! once a holder (a writable handle in another thread, kept ~300 ms)
//! closes it, after at least ~250 ms and well before 10 s, and sees the
//! holder's insert; without `wait` it fails at once with `Error::Locked`;
//! with a 50 ms wait it fails with `Error::Locked` after at least 50 ms; a
//! read-only open waits for a writer the same way. Through the CLI: while a
//! library handle or a `tagstore insert --file -` process holds the store,
//! `tagstore insert` without `--wait` exits 1 saying "locked", a
//! `--wait 0.2` gives up the same way, and `tagstore --wait 10 insert STORE
//! a b c` succeeds once the holder closes.
//!
//! flock locks belong to the open file description, so two handles in one
//! process conflict like two processes. Tests run one at a time
//! (`serial()`): a child forked while another test holds a store would
//! inherit its lock.

use std::collections::BTreeSet;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};
use tagstore::{CreateOptions, Error, OpenOptions, Store, Tag};

const BIN: &str = env!("CARGO_BIN_EXE_tagstore");

static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

const HOLD: Duration = Duration::from_millis(300);

fn store_in(dir: &Path) -> PathBuf {
    let path = dir.join("held.tags");
    let s = Store::create(
        &path,
        &CreateOptions {
            expected_tags: 100,
            seed: Some(3),
            ..Default::default()
        },
    )
    .expect("create");
    assert!(s.insert(&Tag::new("base", "isa", "tag")).expect("insert"));
    s.close().expect("close");
    path
}

/// A writable handle in another thread: inserts `tag`, signals that it
/// holds the store, keeps it for `hold`, then closes it.
fn hold_in_thread(path: &Path, tag: Tag, hold: Duration) -> std::thread::JoinHandle<()> {
    let (tx, rx) = mpsc::channel();
    let p = path.to_path_buf();
    let h = std::thread::spawn(move || {
        let s = Store::open(&p).expect("holder: open");
        assert!(s.insert(&tag).expect("holder: insert"));
        tx.send(()).expect("holder: signal");
        std::thread::sleep(hold);
        s.close().expect("holder: close");
    });
    rx.recv_timeout(Duration::from_secs(30))
        .expect("the holder never opened the store");
    h
}

fn wait_opts(read_only: bool, wait: Option<Duration>) -> OpenOptions {
    OpenOptions { read_only, wait }
}

/// Issue: `OpenOptions { wait: Some(10 s) }` must open the store as soon
/// as the handle holding it closes (not fail, not wait the full 10 s), and
/// see what the holder wrote.
#[test]
fn library_wait_opens_after_holder_closes() {
    let _serial = serial();
    let dir = tempfile::tempdir().expect("tempdir");
    let path = store_in(dir.path());
    let holder = hold_in_thread(&path, Tag::new("by", "the", "holder"), HOLD);
    let started = Instant::now();
    let s = Store::open_with_options(&path, &wait_opts(false, Some(Duration::from_secs(10))))
        .expect("open with a 10 s wait");
    let took = started.elapsed();
    holder.join().expect("holder thread");
    assert!(
        took >= Duration::from_millis(250),
        "opened after {took:?}, while the holder still held the store"
    );
    assert!(
        took < Duration::from_secs(10),
        "waited {took:?}: the wait did not end when the holder closed"
    );
    assert!(s
        .contains(&Tag::new("by", "the", "holder"))
        .expect("contains"));
    assert!(s.insert(&Tag::new("by", "the", "waiter")).expect("insert"));
    s.close().expect("close");
}

/// Issue: without a wait, opening a held store fails at once with
/// `Error::Locked` naming the store.
#[test]
fn library_no_wait_fails_at_once() {
    let _serial = serial();
    let dir = tempfile::tempdir().expect("tempdir");
    let path = store_in(dir.path());
    let holder = Store::open(&path).expect("holder");
    let started = Instant::now();
    let r = Store::open_with_options(&path, &wait_opts(false, None));
    let took = started.elapsed();
    match r {
        Err(Error::Locked(p)) => assert_eq!(p, path),
        Err(e) => panic!("expected Locked, got {e:?}"),
        Ok(_) => panic!("opened a store another handle holds"),
    }
    assert!(took < Duration::from_secs(1), "took {took:?}: it waited");
    // The refused open did not disturb the holder.
    assert!(holder.insert(&Tag::new("x", "y", "z")).expect("insert"));
    holder.close().expect("close");
}

/// Issue: a 50 ms wait on a store that stays held must give up with
/// `Error::Locked`, after at least 50 ms (and not hang).
#[test]
fn library_short_wait_times_out_locked() {
    let _serial = serial();
    let dir = tempfile::tempdir().expect("tempdir");
    let path = store_in(dir.path());
    let holder = Store::open(&path).expect("holder");
    for read_only in [false, true] {
        let started = Instant::now();
        let r = Store::open_with_options(
            &path,
            &wait_opts(read_only, Some(Duration::from_millis(50))),
        );
        let took = started.elapsed();
        match r {
            Err(Error::Locked(_)) => {}
            Err(e) => panic!("read_only={read_only}: expected Locked, got {e:?}"),
            Ok(_) => panic!("read_only={read_only}: opened a held store"),
        }
        assert!(
            took >= Duration::from_millis(50),
            "read_only={read_only}: gave up after {took:?}, before the 50 ms wait"
        );
        assert!(
            took < Duration::from_secs(5),
            "read_only={read_only}: waited {took:?}"
        );
    }
    holder.close().expect("close");
}

/// Issue: a read-only open with a wait must wait for a writer to close
/// too, and then read what it wrote.
#[test]
fn library_read_only_waits_for_writer() {
    let _serial = serial();
    let dir = tempfile::tempdir().expect("tempdir");
    let path = store_in(dir.path());
    let holder = hold_in_thread(&path, Tag::new("written", "while", "held"), HOLD);
    let started = Instant::now();
    let r = Store::open_with_options(&path, &wait_opts(true, Some(Duration::from_secs(10))))
        .expect("read-only open with a wait");
    let took = started.elapsed();
    holder.join().expect("holder thread");
    assert!(took >= Duration::from_millis(250), "opened after {took:?}");
    assert!(took < Duration::from_secs(10));
    let got: BTreeSet<Tag> = r.tags().collect::<Result<_, _>>().expect("tags");
    assert_eq!(
        got,
        BTreeSet::from([
            Tag::new("base", "isa", "tag"),
            Tag::new("written", "while", "held")
        ])
    );
}

/// Waits for `child` to finish, killing it (and failing) after `limit`.
fn wait_child(mut child: Child, limit: Duration, what: &str) -> (Option<i32>, String, String) {
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(st) = child.try_wait().expect("try_wait") {
            break st;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what} did not finish within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let (mut out, mut err) = (String::new(), String::new());
    if let Some(mut o) = child.stdout.take() {
        o.read_to_string(&mut out).expect("stdout");
    }
    if let Some(mut e) = child.stderr.take() {
        e.read_to_string(&mut err).expect("stderr");
    }
    assert_ne!(status.code(), Some(101), "{what} panicked: {err}");
    (status.code(), out, err)
}

fn spawn_cli(args: &[&str]) -> Child {
    Command::new(BIN)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn tagstore")
}

fn assert_locked(r: (Option<i32>, String, String), what: &str) {
    let (code, out, err) = r;
    assert_eq!(code, Some(1), "{what}: exit; stderr: {err}");
    assert!(
        err.to_lowercase().contains("locked"),
        "{what}: stderr lacks \"locked\": {err}"
    );
    assert!(out.is_empty(), "{what}: printed {out:?}");
}

/// Issue: while this process holds the store, `tagstore insert` without
/// `--wait` exits 1 ("locked"), `--wait 0.2` gives up the same way after
/// waiting, and `tagstore --wait 10 insert STORE a b c` succeeds once the
/// holder closes.
#[test]
fn cli_wait_for_library_holder() {
    let _serial = serial();
    let dir = tempfile::tempdir().expect("tempdir");
    let path = store_in(dir.path());
    let p = path.to_str().expect("utf8 path");
    let holder = Store::open(&path).expect("holder");

    let r = wait_child(
        spawn_cli(&["insert", p, "a", "b", "c"]),
        Duration::from_secs(10),
        "insert without --wait",
    );
    assert_locked(r, "insert without --wait");

    let started = Instant::now();
    let r = wait_child(
        spawn_cli(&["--wait", "0.2", "insert", p, "a", "b", "c"]),
        Duration::from_secs(10),
        "insert --wait 0.2",
    );
    assert!(
        started.elapsed() >= Duration::from_millis(200),
        "--wait 0.2 gave up after {:?}",
        started.elapsed()
    );
    assert_locked(r, "insert --wait 0.2");

    let started = Instant::now();
    let mut waiter = spawn_cli(&["--wait", "10", "insert", p, "a", "b", "c"]);
    std::thread::sleep(HOLD);
    assert!(
        waiter.try_wait().expect("try_wait").is_none(),
        "the waiting CLI finished while the store was still held"
    );
    assert!(!holder.contains(&Tag::new("a", "b", "c")).expect("contains"));
    holder.close().expect("close holder");
    let (code, out, err) = wait_child(waiter, Duration::from_secs(20), "insert --wait 10");
    assert_eq!(code, Some(0), "--wait 10 insert failed: {err}");
    assert_eq!(out, "inserted\n");
    assert!(started.elapsed() >= Duration::from_millis(250));
    assert!(started.elapsed() < Duration::from_secs(10));
    let s = Store::open_read_only(&path).expect("open");
    assert!(s.contains(&Tag::new("a", "b", "c")).expect("contains"));
}

/// True if /proc/locks shows process `pid` holding a write lock on `path`.
fn holds_write_lock(pid: u32, path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    let ino = std::fs::metadata(path).expect("stat").ino();
    let locks = std::fs::read_to_string("/proc/locks").expect("read /proc/locks");
    locks.lines().any(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        f.len() >= 6
            && f[1] == "FLOCK"
            && f[3] == "WRITE"
            && f[4] == pid.to_string()
            && f[5].rsplit(':').next() == Some(ino.to_string().as_str())
    })
}

/// Issue: while another process (`tagstore insert STORE --file -` waiting
/// on its stdin) holds the store, `tagstore insert` and `find` without
/// `--wait` exit 1 ("locked"), and `tagstore --wait 10 insert STORE a b c`
/// succeeds once the holder finishes, with both processes' tags stored.
#[test]
fn cli_wait_for_process_holder() {
    let _serial = serial();
    let dir = tempfile::tempdir().expect("tempdir");
    let path = store_in(dir.path());
    let p = path.to_str().expect("utf8 path");
    let mut holder = Command::new(BIN)
        .args(["insert", p, "--file", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn holder");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !holds_write_lock(holder.id(), &path) {
        if let Some(st) = holder.try_wait().expect("try_wait") {
            panic!("the holder exited early: {st}");
        }
        assert!(Instant::now() < deadline, "the holder never took the lock");
        std::thread::sleep(Duration::from_millis(10));
    }

    let r = wait_child(
        spawn_cli(&["insert", p, "a", "b", "c"]),
        Duration::from_secs(10),
        "insert without --wait",
    );
    assert_locked(r, "insert without --wait");
    let r = wait_child(
        spawn_cli(&["find", p, "--object", "base", "--relationship", "isa"]),
        Duration::from_secs(10),
        "find without --wait",
    );
    assert_locked(r, "find without --wait");

    let mut waiter = spawn_cli(&["--wait", "10", "insert", p, "a", "b", "c"]);
    std::thread::sleep(HOLD);
    assert!(
        waiter.try_wait().expect("try_wait").is_none(),
        "the waiting CLI finished while the store was still held"
    );
    {
        use std::io::Write;
        let mut stdin = holder.stdin.take().expect("holder stdin");
        stdin
            .write_all(b"from\tthe\tholder\n")
            .expect("write to holder");
    } // EOF: the holder loads its line and closes.
    let (code, _, err) = wait_child(holder, Duration::from_secs(20), "holder");
    assert_eq!(code, Some(0), "holder failed: {err}");
    let (code, out, err) = wait_child(waiter, Duration::from_secs(20), "insert --wait 10");
    assert_eq!(code, Some(0), "--wait 10 insert failed: {err}");
    assert_eq!(out, "inserted\n");

    let s = Store::open_read_only(&path).expect("open");
    let got: BTreeSet<Tag> = s.tags().collect::<Result<_, _>>().expect("tags");
    assert_eq!(
        got,
        BTreeSet::from([
            Tag::new("base", "isa", "tag"),
            Tag::new("from", "the", "holder"),
            Tag::new("a", "b", "c"),
        ])
    );
}
