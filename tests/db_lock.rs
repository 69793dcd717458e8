//! Store file locking: one writer or many readers, within a process and across processes.
//!
//! Covers: a second `Store::open` of an open store fails with `Error::Locked`
//! (and leaves the first handle working); a read-only open while a writer
//! holds the store is `Locked`, and so is a writer while a reader holds it;
//! two read-only opens at once succeed; closing (or dropping) a handle frees
//! the lock. Across processes: a `tagstore insert STORE --file -` waiting on
//! its stdin holds the write lock, so `tagstore insert STORE a b c` (and a
//! `find`) in another process fail with exit code 1 and a stderr message
//! mentioning "locked", and the store is unchanged by the refused command;
//! likewise a library handle in this process locks out the CLI. A store
//! reopened while a forked child still shares its file opens (the open
//! retries a held lock for a short grace).
//!
//! The tests run one at a time (`serial()`): flock locks belong to the open
//! file description, which a child forked by another test thread shares until
//! it execs, so a store closed in one thread can stay locked for a moment
//! while another thread spawns the CLI.

use std::collections::BTreeSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::{Duration, Instant};
mod common;

use common::store::{expect_locked, holds_write_lock, serial, sorted_objects, spawn_cli_holder};
use tagstore::{CreateOptions, Error, Store, Tag};

fn opts() -> CreateOptions {
    CreateOptions {
        expected_tags: 1000,
        seed: Some(7),
        ..CreateOptions::default()
    }
}

/// A new temporary directory holding a closed store of 50 tags: the
/// directory (removed on drop), the store's path and its tags.
fn seeded_store() -> (tempfile::TempDir, PathBuf, BTreeSet<Tag>) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("locked.tags");
    let tags: BTreeSet<Tag> = (0..50)
        .map(|i| Tag::new(format!("o{i}"), "isa", format!("s{}", i % 7)))
        .collect();
    let s = Store::create(&path, &opts()).expect("create");
    for t in &tags {
        s.insert(t).expect("insert");
    }
    s.close().expect("close");
    (dir, path, tags)
}

fn contents(path: &Path) -> BTreeSet<Tag> {
    let s = Store::open_read_only(path).expect("open read-only");
    s.tags().collect::<Result<_, _>>().expect("tags")
}

/// Runs the CLI (stdin closed; a panic or a signal fails the test).
fn cli(args: &[&str]) -> Output {
    common::cli::run(args)
}

/// Asserts the CLI refused because of the lock: exit 1, "error:" and "locked" on stderr.
fn assert_refused_locked(out: &Output, what: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{what}: expected exit 1, got {:?}; stderr: {stderr}",
        out.status
    );
    assert!(stderr.starts_with("error: "), "{what}: stderr: {stderr}");
    assert!(
        stderr.to_lowercase().contains("locked"),
        "{what}: stderr does not say locked: {stderr}"
    );
    assert!(
        out.stdout.is_empty(),
        "{what}: printed {:?}",
        String::from_utf8_lossy(&out.stdout)
    );
}

#[test]
fn second_writer_in_process_is_locked() {
    let _serial = serial();
    let (_dir, path, tags) = seeded_store();
    let w = Store::open(&path).expect("first open");
    expect_locked(Store::open(&path), &path, "second Store::open");
    expect_locked(Store::open(&path), &path, "third Store::open");
    // The refused opens must not have disturbed the holder.
    assert!(w.insert(&Tag::new("new", "isa", "tag")).expect("insert"));
    assert_eq!(w.len(), tags.len() as u64 + 1);
    assert!(w.check().expect("check").ok());
    w.close().expect("close");
    // Closed: the lock is free again.
    let w = Store::open(&path).expect("open after close");
    assert_eq!(w.len(), tags.len() as u64 + 1);
    drop(w);
    // Dropped without close: also free.
    let w = Store::open(&path).expect("open after drop");
    w.close().expect("close");
}

#[test]
fn reader_and_writer_exclude_each_other() {
    let _serial = serial();
    let (_dir, path, tags) = seeded_store();

    let w = Store::open(&path).expect("writer");
    expect_locked(
        Store::open_read_only(&path),
        &path,
        "read-only open while a writer holds the store",
    );
    w.close().expect("close writer");

    let r = Store::open_read_only(&path).expect("reader");
    expect_locked(
        Store::open(&path),
        &path,
        "writer open while a reader holds the store",
    );
    // The reader still reads everything.
    let got: BTreeSet<Tag> = r.tags().collect::<Result<_, _>>().expect("tags");
    assert_eq!(got, tags);
    assert!(matches!(
        r.insert(&Tag::new("x", "y", "z")),
        Err(Error::ReadOnly)
    ));
    drop(r);
    Store::open(&path)
        .expect("writer after reader left")
        .close()
        .expect("close");
}

#[test]
fn two_readers_at_once() {
    let _serial = serial();
    let (_dir, path, tags) = seeded_store();
    let a = Store::open_read_only(&path).expect("reader a");
    let b = Store::open_read_only(&path).expect("reader b");
    let c = Store::open_read_only(&path).expect("reader c");
    for (name, s) in [("a", &a), ("b", &b), ("c", &c)] {
        let got: BTreeSet<Tag> = s.tags().collect::<Result<_, _>>().expect("tags");
        assert_eq!(got, tags, "reader {name}");
        let objs = sorted_objects(s, "s0", "isa");
        let mut want: Vec<String> = tags
            .iter()
            .filter(|t| t.subject == "s0")
            .map(|t| t.object.clone())
            .collect();
        want.sort();
        assert_eq!(objs, want, "reader {name}");
    }
    // A CLI reader in another process can share the lock too.
    let out = cli(&[
        "find",
        path.to_str().expect("utf8 path"),
        "--subject",
        "s0",
        "--relationship",
        "isa",
    ]);
    assert!(
        out.status.success(),
        "CLI find alongside readers: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).lines().count(),
        tags.iter().filter(|t| t.subject == "s0").count()
    );
    drop((a, b, c));
}

/// Waits until the child holds the store's write lock.
fn wait_until_locked(path: &Path, child: &mut std::process::Child) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !holds_write_lock(child.id(), path) {
        if let Some(st) = child.try_wait().expect("try_wait") {
            panic!("the lock holder exited early: {st}");
        }
        assert!(
            Instant::now() < deadline,
            "the CLI never took the write lock"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    // Seen from this process through the library, too.
    match Store::open_read_only(path) {
        Err(Error::Locked(_)) => {}
        other => panic!(
            "expected Locked while the CLI holds the store, got {:?}",
            other.map(|_| ())
        ),
    }
}

/// The file's bytes once they stop changing: a holder takes the lock before
/// its open finishes writing (clearing the clean flag, dropping the table
/// image), and a snapshot taken in between once made
/// `refused_cli_leaves_store_byte_identical` blame a refused command for the
/// holder's own writes (seen under a loaded machine).
fn settled_bytes(path: &Path) -> Vec<u8> {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut last = std::fs::read(path).expect("read");
    loop {
        std::thread::sleep(Duration::from_millis(100));
        let now = std::fs::read(path).expect("read");
        if now == last {
            return now;
        }
        assert!(Instant::now() < deadline, "the store file never settled");
        last = now;
    }
}

#[test]
fn cli_writer_in_another_process_locks_out_cli() {
    let _serial = serial();
    let (_dir, path, tags) = seeded_store();
    let p = path.to_str().expect("utf8 path");
    let before = std::fs::read(&path).expect("read");

    // Holder: `insert --file -` opens the store, then waits on stdin.
    let mut holder = spawn_cli_holder(Path::new(p));
    wait_until_locked(&path, &mut holder);

    let out = cli(&["insert", p, "a", "b", "c"]);
    assert_refused_locked(&out, "insert while another process loads");
    let out = cli(&["delete", p, "o1", "isa", "s1"]);
    assert_refused_locked(&out, "delete while another process loads");
    let out = cli(&["find", p, "--object", "o1", "--relationship", "isa"]);
    assert_refused_locked(&out, "find while another process loads");
    let out = cli(&["export", p]);
    assert_refused_locked(&out, "export while another process loads");
    assert!(
        holder.try_wait().expect("try_wait").is_none(),
        "the holder must still be waiting"
    );

    // Feed the holder one line and let it finish.
    {
        let mut stdin = holder.stdin.take().expect("stdin");
        stdin.write_all(b"held\tby\tholder\n").expect("write");
    }
    let out = holder.wait_with_output().expect("holder");
    assert!(
        out.status.success(),
        "holder failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).starts_with("inserted 1 tags"),
        "holder stdout: {}",
        String::from_utf8_lossy(&out.stdout)
    );

    // Exactly the holder's tag was added; the refused insert and delete left no trace.
    let mut want = tags.clone();
    want.insert(Tag::new("held", "by", "holder"));
    assert_eq!(contents(&path), want);
    assert_ne!(std::fs::read(&path).expect("read"), before);

    // With the lock free, the same command now works.
    let out = cli(&["insert", p, "a", "b", "c"]);
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stdout), "inserted\n");
}

#[test]
fn refused_cli_leaves_store_byte_identical() {
    let _serial = serial();
    let (_dir, path, tags) = seeded_store();
    let p = path.to_str().expect("utf8 path");
    let mut holder = spawn_cli_holder(Path::new(p));
    wait_until_locked(&path, &mut holder);
    // The holder has the store open (marked unclean, table image dropped);
    // whatever bytes it holds now must not change because of a refused command.
    let during = settled_bytes(&path);
    for args in [
        vec!["insert", p, "a", "b", "c"],
        vec!["insert", p, "--file", "-"],
        vec!["stats", p],
        vec!["check", p],
    ] {
        let out = cli(&args);
        assert_refused_locked(&out, &args.join(" "));
        assert_eq!(
            std::fs::read(&path).expect("read"),
            during,
            "{args:?} changed the file although it was refused"
        );
    }
    drop(holder.stdin.take()); // EOF: the holder inserts nothing and closes.
    let st = holder.wait().expect("wait");
    assert!(st.success());
    assert_eq!(
        contents(&path),
        tags,
        "store changed although nothing was inserted"
    );
    let s = Store::open_read_only(&path).expect("open");
    assert!(s.check().expect("check").ok());
}

#[test]
fn library_writer_locks_out_cli() {
    let _serial = serial();
    let (_dir, path, tags) = seeded_store();
    let p = path.to_str().expect("utf8 path");
    let w = Store::open(&path).expect("open");
    let out = cli(&["insert", p, "a", "b", "c"]);
    assert_refused_locked(&out, "insert while this process holds the store");
    assert!(!w.contains(&Tag::new("a", "b", "c")).expect("contains"));
    assert_eq!(w.len(), tags.len() as u64);
    w.close().expect("close");

    // A library reader blocks a CLI writer but not a CLI reader.
    let r = Store::open_read_only(&path).expect("reader");
    let out = cli(&["insert", p, "a", "b", "c"]);
    assert_refused_locked(&out, "insert while this process reads");
    let out = cli(&["stats", p, "--json"]);
    assert!(out.status.success(), "stats alongside a reader");
    drop(r);
    assert_eq!(contents(&path), tags);
}

/// Regression (CI at 239d156, tests/bulk_load.rs): a child process forked
/// while a store is open shares its open file, and so its lock, until the
/// child execs or exits; a store closed and reopened in that moment was
/// refused as `Locked`. An open with no wait now retries for a short grace.
/// Here the child holds the inherited file for 5 ms, well inside it.
#[test]
fn reopen_while_a_forked_child_still_shares_the_file() {
    let _one = serial();
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("forked.tags");
    let s = Store::create(&path, &CreateOptions::default()).expect("create");
    assert!(s.insert(&Tag::new("a", "b", "c")).expect("insert"));
    // SAFETY: the child calls only async-signal-safe functions (usleep,
    // _exit) and touches nothing of the parent's state.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        unsafe {
            libc::usleep(5_000);
            libc::_exit(0);
        }
    }
    s.close().expect("close");
    let reopened = Store::open(&path);
    let mut status = 0;
    // SAFETY: waits for the child forked above.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    let s = reopened.expect("reopen while a forked child still shared the file");
    assert_eq!(s.len(), 1);
}
