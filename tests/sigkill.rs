//! Real-process crashes: a child process writing to a store is killed with
//! SIGKILL at random moments, again and again on the same store.
//!
//! The test binary re-executes itself (`current_exe() --exact sigkill_child
//! --nocapture --include-ignored`, with `TAGSTORE_SIGKILL_CHILD` naming the
//! store) as the child. The child opens the store (recovering what the last
//! kill left), sets the durability mode and runs a fixed sequence of
//! operations from a given index: mostly INSERTs (every third on one "hub"
//! subject, so its chain links secondary buckets and the file grows), every
//! fifth a DELETE of an earlier tag. After each call returns it prints
//! `@@ack <index>` and flushes stdout. The parent reads the lines and kills
//! the child (`Child::kill`, SIGKILL) after a random number of
//! acknowledgements plus a random delay of up to a few milliseconds (every
//! fifth kill right after the spawn, so it may land while the child is
//! opening and recovering the store), then recovers a copy of the store
//! files and checks:
//!
//! * open succeeds on its own;
//! * every acknowledged operation is in effect (inserted tags present,
//!   deleted tags absent), nothing else is stored;
//! * the at most one operation in flight is all-or-nothing: its tag is in
//!   both halves or in neither (`contains`, `find_subjects`, `find_objects`);
//! * `check()` is clean and the copy takes a new insert and closes cleanly.
//!
//! The original store files are left as the kill left them, so the next
//! child recovers them itself. `Durability::Immediate` runs 20 kills (each
//! acknowledged call is durable on return); `Durability::None` runs 12
//! (process crash only: every call that returned is in the page cache,
//! which survives the process). `TAGSTORE_SIGKILL_KILLS=n` changes both;
//! `TAGSTORE_SIGKILL_SEED=s` fixes the random delays (printed otherwise).
//! `TAGSTORE_SIGKILL_EARLY=n` makes every kill early except every n-th
//! (instead of every fifth early), so more kills land in recovery and in
//! the first writes after it. `TAGSTORE_SIGKILL_KEEP=dir` copies a store
//! that does not recover, as the kill left it and as its child found it
//! (`before.tags`), into a new directory under `dir` for analysis.
//! `sigkill_growing_store` loads over 20,000 tags (8 kills, `None` mode)
//! into a store created with no size hint, so the kills land among hundreds
//! of bucket splits; it asserts the store grew to at least 200 buckets per
//! half. Every kill also checks FIND by object and by subject for every key.
//!
//! Tests here run one at a time: a store file this process holds open could
//! otherwise be inherited, still locked, by a child being spawned from
//! another test thread.

mod common;

use common::crash::{assert_check_ok, mode_of, self_child, serial, whole, Rng};
use common::store::assert_finds;
use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;
use tagstore::{journal_path, CreateOptions, Geometry, Store, Tag};

const CHILD_ENV: &str = "TAGSTORE_SIGKILL_CHILD";
const MODE_ENV: &str = "TAGSTORE_SIGKILL_MODE";
const START_ENV: &str = "TAGSTORE_SIGKILL_START";

/// Operation `n` of the fixed sequence: (insert?, tag).
fn op(n: u64) -> (bool, Tag) {
    if n % 5 == 4 {
        // Deletes the tag inserted three operations earlier (n - 3 ≡ 1 mod 5).
        return (false, op(n - 3).1);
    }
    let subject = if n.is_multiple_of(3) {
        "hub".to_string()
    } else {
        format!("s{}", n % 11)
    };
    (
        true,
        Tag::new(format!("k{n}"), format!("r{}", n % 3), subject),
    )
}

/// Tags stored after operations `0..n`.
fn model(n: u64) -> BTreeSet<Tag> {
    let mut m = BTreeSet::new();
    for i in 0..n {
        let (insert, t) = op(i);
        if insert {
            m.insert(t);
        } else {
            m.remove(&t);
        }
    }
    m
}

/// The child: runs operations from `START_ENV` on, acknowledging each.
#[test]
#[ignore = "child process of the SIGKILL tests, started by them"]
fn sigkill_child() {
    let Some(path) = std::env::var_os(CHILD_ENV) else {
        return;
    };
    let mode = mode_of(&std::env::var(MODE_ENV).expect("mode"));
    let start: u64 = std::env::var(START_ENV)
        .expect("start")
        .parse()
        .expect("start index");
    let store = Store::open(&path).expect("child: open");
    store.set_durability(mode).expect("child: set_durability");
    let mut out = std::io::stdout().lock();
    if writeln!(out, "\n@@ready")
        .and_then(|()| out.flush())
        .is_err()
    {
        return;
    }
    for n in start..start + 500_000 {
        let (insert, t) = op(n);
        if insert {
            store.insert(&t).expect("child: insert");
        } else {
            store.delete(&t).expect("child: delete");
        }
        if writeln!(out, "\n@@ack {n}")
            .and_then(|()| out.flush())
            .is_err()
        {
            return;
        }
    }
}

/// What the child reports on stdout.
enum Event {
    Ready,
    Ack(u64),
}

/// Copies the store file and its journal (if any) to `to`.
fn copy_store(from: &Path, to: &Path) {
    std::fs::copy(from, to).expect("copy store file");
    let j = journal_path(from);
    if j.exists() {
        std::fs::copy(&j, journal_path(to)).expect("copy journal");
    }
}

/// With `TAGSTORE_SIGKILL_KEEP=dir`: copies the store a kill left (and
/// the store as the child found it, `before.tags`) under `dir` for analysis.
fn keep_failed(path: &Path, scratch: &Path, when: &str) {
    let Some(dir) = std::env::var_os("TAGSTORE_SIGKILL_KEEP") else {
        return;
    };
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let to = Path::new(&dir).join(format!("fail-{stamp}"));
    let _ = std::fs::create_dir_all(&to);
    let _ = std::fs::write(to.join("when.txt"), when);
    copy_store(path, &to.join("killed.tags"));
    let before = scratch.join("before.tags");
    if before.exists() {
        copy_store(&before, &to.join("before.tags"));
    }
    eprintln!("kept the failed store in {}", to.display());
}

/// Recovers a copy of the killed store and checks it; returns whether the
/// in-flight operation took effect.
fn verify_copy(path: &Path, scratch: &Path, done: u64, when: &str) -> bool {
    let copy = scratch.join("copy.tags");
    let _ = std::fs::remove_file(&copy);
    let _ = std::fs::remove_file(journal_path(&copy));
    copy_store(path, &copy);
    let store = Store::open(&copy).unwrap_or_else(|e| {
        keep_failed(path, scratch, when);
        panic!("{when}: open did not recover: {e}")
    });
    let before = model(done);
    let after = model(done + 1);
    let (_, in_flight) = op(done);
    let c = whole(
        &store,
        &in_flight,
        &format!("{when}: the in-flight operation {done}"),
    );
    let want = if c == after.contains(&in_flight) {
        &after
    } else {
        &before
    };
    let got: BTreeSet<Tag> = store
        .tags()
        .collect::<Result<_, _>>()
        .unwrap_or_else(|e| panic!("{when}: export failed: {e}"));
    let missing: Vec<&Tag> = before
        .difference(&got)
        .filter(|t| **t != in_flight)
        .collect();
    let extra: Vec<&Tag> = got
        .difference(&before)
        .filter(|t| **t != in_flight)
        .collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "{when}: after {done} acknowledged operations: missing {missing:?}, unexpected {extra:?}"
    );
    assert_eq!(&got, want, "{when}: export");
    assert_eq!(store.len(), want.len() as u64, "{when}: len()");
    for t in want.iter().step_by(50) {
        assert!(whole(&store, t, when), "{when}: {t:?} missing");
    }
    assert_finds(&store, want, when);
    assert_check_ok(&store, when);
    let fresh = Tag::new("fresh", "r0", "hub");
    assert!(
        store.insert(&fresh).expect("insert after recovery"),
        "{when}: fresh tag"
    );
    store.close().expect("close after recovery");
    c == after.contains(&in_flight)
}

/// `kills` kills of children writing to a store created with `create`,
/// each after `acks.0` to `acks.1` acknowledgements (fewer than `acks.1`)
/// and up to `max_delay_us` more. Returns the store's geometry at the end.
fn run_kills(
    mode_name: &str,
    create: &CreateOptions,
    kills: u64,
    acks: (u64, u64),
    max_delay_us: u64,
) -> Geometry {
    let (min_acks, max_acks) = acks;
    let _serial = serial();
    let kills = std::env::var("TAGSTORE_SIGKILL_KILLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(kills);
    let seed = std::env::var("TAGSTORE_SIGKILL_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
        });
    let mut rng = Rng(seed);
    let dir = tempfile::tempdir().expect("tempdir");
    let path: PathBuf = dir.path().join("killed.tags");
    let store = Store::create(&path, create).expect("create");
    store.close().expect("close");
    let mut done = 0u64;
    let (mut with_acks, mut in_flight_applied) = (0u32, 0u32);
    for k in 0..kills {
        let when = format!("{mode_name} kill {k} (seed {seed}, from operation {done})");
        if std::env::var_os("TAGSTORE_SIGKILL_KEEP").is_some() {
            let before = dir.path().join("before.tags");
            let _ = std::fs::remove_file(&before);
            let _ = std::fs::remove_file(journal_path(&before));
            copy_store(&path, &before);
        }
        let mut child = self_child("sigkill_child")
            .env(CHILD_ENV, &path)
            .env(MODE_ENV, mode_name)
            .env(START_ENV, done.to_string())
            .spawn()
            .expect("spawn child");
        let stdout = child.stdout.take().expect("stdout");
        let mut stderr = child.stderr.take().expect("stderr");
        let (tx, rx) = mpsc::channel();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if line.contains("@@ready") {
                    let _ = tx.send(Event::Ready);
                } else if let Some(i) = line.find("@@ack ") {
                    if let Ok(n) = line[i + 6..].trim().parse() {
                        let _ = tx.send(Event::Ack(n));
                    }
                }
            }
        });
        let err_reader = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = stderr.read_to_string(&mut s);
            s
        });
        let mut acks: Vec<u64> = Vec::new();
        // Every fifth kill does not wait for the child to finish opening:
        // it may land inside recovery. The others wait for the child to be
        // ready and for a random number of acknowledgements, then a random
        // fraction of a moment, so the kill lands at a random point of a call.
        let early = match std::env::var("TAGSTORE_SIGKILL_EARLY") {
            Ok(v) => k % v.parse::<u64>().unwrap_or(5) != 0,
            Err(_) => k % 5 == 2,
        };
        let target = if early {
            0
        } else {
            (min_acks + rng.below(max_acks - min_acks)) as usize
        };
        let mut ready = early;
        while !ready || acks.len() < target {
            match rx.recv_timeout(Duration::from_secs(120)) {
                Ok(Event::Ready) => ready = true,
                Ok(Event::Ack(n)) => acks.push(n),
                Err(_) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    panic!(
                        "{when}: the child stopped making progress; its stderr:\n{}",
                        err_reader.join().unwrap_or_default()
                    );
                }
            }
        }
        std::thread::sleep(Duration::from_micros(rng.below(max_delay_us)));
        child.kill().expect("SIGKILL the child");
        let status = child.wait().expect("wait for the child");
        reader.join().expect("reader thread");
        let err = err_reader.join().unwrap_or_default();
        {
            use std::os::unix::process::ExitStatusExt;
            assert_eq!(
                status.signal(),
                Some(9),
                "{when}: the child should die by SIGKILL, got {status}; its stderr:\n{err}"
            );
        }
        acks.extend(rx.try_iter().filter_map(|e| match e {
            Event::Ack(n) => Some(n),
            Event::Ready => None,
        }));
        for (i, n) in acks.iter().enumerate() {
            assert_eq!(*n, done + i as u64, "{when}: acknowledgements out of order");
        }
        if !acks.is_empty() {
            with_acks += 1;
        }
        done += acks.len() as u64;
        if verify_copy(&path, dir.path(), done, &when) {
            in_flight_applied += 1;
        }
    }
    // The original, as the last kill left it, recovers too.
    let store = Store::open(&path).expect("final open of the original");
    let got: BTreeSet<Tag> = store.tags().collect::<Result<_, _>>().expect("export");
    let (before, after) = (model(done), model(done + 1));
    assert!(
        got == before || got == after,
        "final open: not the state after {done} or {} operations",
        done + 1
    );
    assert_check_ok(&store, "final");
    let geometry = store.geometry();
    store.close().expect("close");
    eprintln!(
        "sigkill {mode_name}: {kills} kills (seed {seed}), {with_acks} after at least one acknowledged call, {done} operations acknowledged ({} tags stored), in-flight operation applied after {in_flight_applied} kills, {} primary buckets per half at the end",
        got.len(),
        geometry.primary_buckets_per_half
    );
    geometry
}

/// A small pre-sized store (4 buckets per half of one block; it still
/// grows by splits as the hub's chain and the other keys fill it).
fn small_store() -> CreateOptions {
    CreateOptions {
        expected_tags: 200,
        primary_buckets_per_half: Some(4),
        blocks_per_primary: Some(1),
        blocks_per_secondary: Some(2),
        seed: Some(0x5EED),
    }
}

#[test]
fn sigkill_immediate_mode() {
    run_kills("immediate", &small_store(), 20, (0, 60), 15_000);
}

#[test]
fn sigkill_none_mode() {
    run_kills("none", &small_store(), 12, (0, 1_500), 5_000);
}

/// A store created with no size hint (`expected_tags: 0`, default bucket
/// sizes) starts at one primary bucket per half; the children load over
/// 20,000 tags into it (8 kills, all but the two early ones after 6,000 to
/// 7,000 acknowledged operations, 3 in 5 of which leave a tag stored), so
/// the load crosses hundreds of bucket splits and the kills land among
/// them. Every kill is checked as in the other cases, and FIND by object
/// and by subject returns every stored tag.
#[test]
fn sigkill_growing_store() {
    let create = CreateOptions {
        seed: Some(0x6B0B),
        ..CreateOptions::default()
    };
    assert_eq!(create.expected_tags, 0, "the default is no size hint");
    {
        let dir = tempfile::tempdir().expect("tempdir");
        let s = Store::create(dir.path().join("probe.tags"), &create).expect("create");
        assert_eq!(
            s.geometry().primary_buckets_per_half,
            1,
            "starts at one bucket"
        );
    }
    let g = run_kills("none", &create, 8, (6_000, 7_000), 5_000);
    assert!(
        g.primary_buckets_per_half >= 200,
        "the store did not grow through many splits: {g:?}"
    );
}
