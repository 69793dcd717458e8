//! A full disk (ENOSPC) or a file-size limit (EFBIG) in the middle of
//! writing: the call that cannot write returns an error — no panic, no
//! SIGBUS, no SIGXFSZ — and once space is back the store recovers with
//! every acknowledged tag, is consistent and takes new inserts.
//!
//! Two ways to run out of space:
//!
//! * `RLIMIT_FSIZE` (always runs): the test binary re-executes itself as a
//!   child (`--exact disk_full_child`) that lowers its file-size limit,
//!   ignores SIGXFSZ and inserts until a call fails with EFBIG. In None mode
//!   that is the file growing for new secondary buckets; in Immediate and
//!   OnSync mode the journal append (a partial write, never counted), or
//!   the store file growing (the journal's images are compressed and may
//!   not reach the limit first). The child reports every acknowledged tag,
//!   the failing call and its errno, then checks in-process that a store
//!   whose call was refused before any change is unchanged and still
//!   usable (the failed insert absent, `check()` clean, a delete and
//!   re-insert work) and that a journaled store that lost a commit refuses
//!   further writes with an error. The parent (no limit) then reopens the store.
//! * A 2 MB tmpfs (only as root where `mount -t tmpfs` works; skipped with a
//!   message otherwise) holding the store and a 1 MB filler file: inserts
//!   run until ENOSPC, in None and in Immediate mode. A child process then
//!   reopens the store while the disk is still full (it may fail, but with
//!   an error, never a signal); the filler is removed and the store must
//!   recover and grow.
//!
//! After space is back: open succeeds, `check()` is clean, every
//! acknowledged tag is present in both halves, every unacknowledged one is
//! in both or neither, and a few hundred new inserts (needing new secondary
//! buckets) work and survive a clean close and reopen.
//!
//! `recovery_on_a_full_disk_fails_cleanly` goes further: a power-cut image
//! (the store file as last fsynced, sparse, plus the durable journal) is
//! recovered on a tmpfs with no space left. Replaying the journal writes
//! into blocks the cut left unallocated; that must surface as an error
//! (or succeed), never kill the process with SIGBUS.
//!
//! Tests here run one at a time (children inherit open store files).

mod common;

use common::crash::{
    assert_check_ok, fill_up, mode_name, mode_of, mode_tests, self_child, serial, whole, Tmpfs,
};
use std::collections::BTreeSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::{Arc, Mutex};
use tagstore::testing::SyncPoint;
use tagstore::{journal_path, CreateOptions, Durability, Store, Tag};

const ROLE_ENV: &str = "TAGSTORE_DISKFULL_ROLE";
const PATH_ENV: &str = "TAGSTORE_DISKFULL_PATH";
const MODE_ENV: &str = "TAGSTORE_DISKFULL_MODE";
const LIMIT_ENV: &str = "TAGSTORE_DISKFULL_LIMIT";
const PEAKY_ENV: &str = "TAGSTORE_DISKFULL_PEAKY";

/// Tag `i`; with `peaky`, every fourth is on one subject (long chains, so
/// the file grows), else keys spread over all buckets.
fn tag(i: u64, peaky: bool) -> Tag {
    let s = if peaky && i.is_multiple_of(4) {
        "hub".to_string()
    } else {
        format!("s{}", i % 97)
    };
    Tag::new(format!("obj{i}"), "r", s)
}

const SYNC_EVERY: u64 = 25;

/// The OS error number behind an I/O error (-1 for other errors).
fn errno(e: &tagstore::Error) -> i32 {
    match e {
        tagstore::Error::Io { source, .. } => source.raw_os_error().unwrap_or(-1),
        _ => -1,
    }
}

/// Child: inserts until a call fails, reporting on stdout.
fn child_fill(path: &Path) {
    if let Ok(limit) = std::env::var(LIMIT_ENV) {
        let limit: u64 = limit.parse().expect("limit");
        // SAFETY: plain libc calls on this process only; SIG_IGN is a valid
        // disposition for SIGXFSZ and the rlimit struct is fully set.
        unsafe {
            assert_ne!(libc::signal(libc::SIGXFSZ, libc::SIG_IGN), libc::SIG_ERR);
            let rl = libc::rlimit {
                rlim_cur: limit as libc::rlim_t,
                rlim_max: limit as libc::rlim_t,
            };
            assert_eq!(libc::setrlimit(libc::RLIMIT_FSIZE, &rl), 0, "setrlimit");
        }
    }
    let mode = mode_of(&std::env::var(MODE_ENV).expect("mode"));
    let peaky = std::env::var(PEAKY_ENV).is_ok();
    let mut out = std::io::stdout().lock();
    let mut say = |s: String| {
        let _ = writeln!(out, "\n@@{s}");
        let _ = out.flush();
    };
    let store = Store::open(path).expect("child: open");
    store.set_durability(mode).expect("child: set_durability");
    let mut unsynced = 0u64;
    let mut failed: Option<(u64, tagstore::Error)> = None;
    for i in 0..200_000u64 {
        match store.insert(&tag(i, peaky)) {
            Ok(true) => {}
            Ok(false) => panic!("child: tag {i} was already present"),
            Err(e) => {
                failed = Some((i, e));
                break;
            }
        }
        if mode != Durability::OnSync {
            say(format!("ack {i}"));
            continue;
        }
        if i % SYNC_EVERY == SYNC_EVERY - 1 {
            if let Err(e) = store.sync() {
                failed = Some((i, e));
                break;
            }
            for j in unsynced..=i {
                say(format!("ack {j}"));
            }
            unsynced = i + 1;
        }
    }
    let Some((i, e)) = failed else {
        say("never-failed".into());
        return;
    };
    let first_unacked = if mode == Durability::OnSync {
        unsynced
    } else {
        i
    };
    say(format!("fail {i} {first_unacked} {} {e}", errno(&e)));
    // In-process, right after the failure. A call refused before it changed
    // anything (None mode; or the store file growing, in any mode) leaves
    // the store usable; a journaled store that lost a commit refuses writes.
    let lost_commit = mode != Durability::None && e.to_string().contains("journal");
    if !lost_commit {
        assert!(
            !store.contains(&tag(i, peaky)).expect("contains"),
            "child: the failed insert left its tag"
        );
        assert_eq!(store.len(), i, "child: len() after the failed insert");
        assert_check_ok(&store, "child: after the failure");
        let t = tag(1, peaky);
        assert!(store.delete(&t).expect("child: delete after the failure"));
        assert!(store
            .insert(&t)
            .expect("child: re-insert into the freed slot"));
        say("inproc usable".into());
    } else {
        // The journal could not be written: the in-memory tables count
        // changes that are not durable.
        match store.insert(&Tag::new("after", "r", "fail")) {
            Ok(_) => say("inproc usable".into()),
            Err(_) => {
                assert!(store.sync().is_err(), "child: sync after a lost commit");
                say("inproc refuses-writes".into());
            }
        }
    }
    // Dropping tries a clean close; it may fail for lack of space.
    drop(store);
    say("done".into());
}

/// Child: opens the store once and reports how it went.
fn child_open(path: &Path) {
    let mut out = std::io::stdout().lock();
    match Store::open(path) {
        Ok(s) => {
            let ok = s.check().map(|r| r.ok()).unwrap_or(false);
            let _ = writeln!(out, "\n@@open ok check={ok}");
            drop(s);
        }
        Err(e) => {
            let _ = writeln!(out, "\n@@open err {} {e}", errno(&e));
        }
    }
    let _ = out.flush();
}

#[test]
#[ignore = "child process of the disk-full tests, started by them"]
fn disk_full_child() {
    let Ok(role) = std::env::var(ROLE_ENV) else {
        return;
    };
    let path = PathBuf::from(std::env::var(PATH_ENV).expect("path"));
    match role.as_str() {
        "fill" => child_fill(&path),
        "open" => child_open(&path),
        other => panic!("unknown role {other}"),
    }
}

/// Runs `disk_full_child` in `role` on the store at `path`, with `envs`.
fn run_child(role: &str, path: &Path, envs: &[(&str, String)]) -> Output {
    let mut cmd = self_child("disk_full_child");
    cmd.env(ROLE_ENV, role).env(PATH_ENV, path);
    for (k, v) in envs {
        cmd.env(k, v);
    }
    cmd.output().expect("run child")
}

/// Lines `@@...` the child printed, without the marker.
fn reports(out: &Output) -> Vec<String> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.find("@@").map(|i| l[i + 2..].trim().to_string()))
        .collect()
}

/// Asserts the child exited successfully (no signal), showing its last
/// reports and stderr otherwise.
fn assert_exited_cleanly(out: &Output, what: &str) {
    use std::os::unix::process::ExitStatusExt;
    let lines = reports(out);
    let tail = lines[lines.len().saturating_sub(5)..].join(" | ");
    assert!(
        out.status.success(),
        "{what}: the child {} (signal {:?}); its last reports: {tail}; stderr:\n{}",
        out.status,
        out.status.signal(),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// What the fill child reported.
struct Filled {
    acked: Vec<u64>,
    failed_at: u64,
    first_unacked: u64,
    errno: i32,
    message: String,
    inproc: String,
}

/// Parses the fill child's reports, asserting it exited cleanly, a write
/// failed, it finished, and its acknowledgements are in order.
fn parse_fill(out: &Output, what: &str) -> Filled {
    assert_exited_cleanly(out, what);
    let lines = reports(out);
    assert!(
        !lines.iter().any(|l| l == "never-failed"),
        "{what}: no write ever failed"
    );
    let acked: Vec<u64> = lines
        .iter()
        .filter_map(|l| l.strip_prefix("ack ").and_then(|n| n.parse().ok()))
        .collect();
    let fail = lines
        .iter()
        .find_map(|l| l.strip_prefix("fail "))
        .unwrap_or_else(|| panic!("{what}: no failure reported: {lines:?}"));
    let mut parts = fail.splitn(4, ' ');
    let mut num = || -> i64 {
        parts
            .next()
            .and_then(|n| n.parse().ok())
            .expect("fail line field")
    };
    let (failed_at, first_unacked, errno) = (num() as u64, num() as u64, num() as i32);
    let message = parts.next().unwrap_or_default().to_string();
    let inproc = lines
        .iter()
        .find_map(|l| l.strip_prefix("inproc "))
        .unwrap_or_else(|| panic!("{what}: no in-process report: {lines:?}"))
        .to_string();
    assert!(
        lines.iter().any(|l| l == "done"),
        "{what}: the child did not finish: {lines:?}"
    );
    for (i, n) in acked.iter().enumerate() {
        assert_eq!(*n, i as u64, "{what}: acknowledgements out of order");
    }
    Filled {
        acked,
        failed_at,
        first_unacked,
        errno,
        message,
        inproc,
    }
}

/// Runs the fill child in `mode` on the store at `path` (with `env` added)
/// and parses its report, asserting the failing call's errno was `want`
/// (named as given) and, in None mode, that the store stayed usable
/// in-process.
fn fill_until_failure(
    path: &Path,
    mode: Durability,
    env: &[(&str, String)],
    want: (i32, &str),
    what: &str,
) -> Filled {
    let mut env = env.to_vec();
    env.push((MODE_ENV, mode_name(mode).to_string()));
    let f = parse_fill(&run_child("fill", path, &env), what);
    let (errno, name) = want;
    assert_eq!(
        f.errno, errno,
        "{what}: expected {name}, got: {}",
        f.message
    );
    if mode == Durability::None {
        assert_eq!(f.inproc, "usable", "{what}");
    }
    f
}

/// With space back: the store recovers, holds every acknowledged tag, each
/// unacknowledged one whole, and grows.
fn verify_after(path: &Path, f: &Filled, peaky: bool, what: &str) {
    let store = Store::open(path).unwrap_or_else(|e| panic!("{what}: reopen: {e}"));
    assert_check_ok(&store, &format!("{what}: after the failure"));
    let got: BTreeSet<Tag> = store.tags().collect::<Result<_, _>>().expect("export");
    for &i in &f.acked {
        let t = tag(i, peaky);
        assert!(
            whole(&store, &t, &format!("{what}: acknowledged")),
            "{what}: acknowledged {t:?} missing"
        );
    }
    let mut unacked_present = 0;
    for i in f.first_unacked..=f.failed_at {
        let t = tag(i, peaky);
        unacked_present += whole(&store, &t, &format!("{what}: unacknowledged")) as usize;
    }
    let known: BTreeSet<Tag> = (0..=f.failed_at).map(|i| tag(i, peaky)).collect();
    let stray: Vec<&Tag> = got
        .iter()
        .filter(|t| !known.contains(*t) && t.object != "after")
        .collect();
    assert!(stray.is_empty(), "{what}: tags never inserted: {stray:?}");
    assert_eq!(store.len(), got.len() as u64, "{what}: len()");
    // New inserts, enough to link new secondary buckets.
    let fresh: Vec<Tag> = (0..400)
        .map(|i| Tag::new(format!("new{i}"), "r", "hub"))
        .collect();
    for t in &fresh {
        assert!(
            store
                .insert(t)
                .unwrap_or_else(|e| panic!("{what}: insert with space back: {e}")),
            "{what}: {t:?}"
        );
    }
    store.close().expect("close");
    let store = Store::open(path).expect("reopen");
    assert_check_ok(&store, &format!("{what}: after growing"));
    assert_eq!(store.len(), got.len() as u64 + fresh.len() as u64, "{what}");
    for t in fresh.iter().step_by(37) {
        assert!(whole(&store, t, what), "{what}: {t:?} missing");
    }
    store.close().expect("close");
    eprintln!(
        "disk_full {what}: failed at insert {} with errno {} ({}), {} acknowledged, {} of {} unacknowledged present after recovery, in-process: {}",
        f.failed_at,
        f.errno,
        f.message,
        f.acked.len(),
        unacked_present,
        f.failed_at - f.first_unacked + 1,
        f.inproc
    );
}

/// Creates a store at `path` of `primary` primary buckets per half of `bp`
/// blocks each (one-block secondary buckets), hashed with `seed`.
fn create(path: &Path, primary: u32, bp: u32, seed: u64) -> Store {
    let opts = CreateOptions {
        expected_tags: 100,
        primary_buckets_per_half: Some(primary),
        blocks_per_primary: Some(bp),
        blocks_per_secondary: Some(1),
        seed: Some(seed),
    };
    Store::create(path, &opts).expect("create")
}

/// Creates a store as [`create`] does with the seed of the fill tests, and
/// closes it.
fn create_closed(path: &Path, primary: u32, bp: u32) {
    create(path, primary, bp, 0xF11E).close().expect("close");
}

/// The `RLIMIT_FSIZE` case in `mode` (see the file header).
fn fsize_case(mode: Durability) {
    let _serial = serial();
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("limited.tags");
    // None mode: small primaries, the file must grow, and growing past the
    // limit fails. Journaled modes: a large primary area that never grows
    // here, so the journal is what crosses the limit.
    let (peaky, limit) = if mode == Durability::None {
        create_closed(&path, 2, 1);
        (true, 200 * 1024)
    } else {
        create_closed(&path, 64, 2);
        let len = std::fs::metadata(&path).expect("meta").len();
        (false, len + 512 * 1024)
    };
    let mut env = vec![(LIMIT_ENV, limit.to_string())];
    if peaky {
        env.push((PEAKY_ENV, "1".into()));
    }
    let what = format!("RLIMIT_FSIZE {limit} bytes, {mode:?}");
    let f = fill_until_failure(&path, mode, &env, (libc::EFBIG, "EFBIG"), &what);
    verify_after(&path, &f, peaky, &what);
}

mode_tests! { fsize_case;
    file_size_limit_in_none_mode => Durability::None,
    file_size_limit_in_immediate_mode => Durability::Immediate,
    file_size_limit_in_on_sync_mode => Durability::OnSync,
}

/// Writes `size` bytes of data (not a hole) to `path`.
fn filler(path: &Path, size: usize) {
    std::fs::write(path, vec![0xAB; size]).expect("filler");
}

/// The 2 MB tmpfs case in `mode` (see the file header).
fn tmpfs_case(mode: Durability) {
    let _serial = serial();
    let dir = tempfile::tempdir().expect("tempdir");
    let Some(fs) = Tmpfs::mount(&dir.path().join("mnt"), "2m") else {
        return;
    };
    let path = fs.dir.join("full.tags");
    create_closed(&path, 2, 1);
    let fill = fs.dir.join("filler");
    filler(&fill, 1 << 20);
    let what = format!("2 MB tmpfs, {mode:?}");
    let peaky = [(PEAKY_ENV, "1".to_string())];
    let f = fill_until_failure(&path, mode, &peaky, (libc::ENOSPC, "ENOSPC"), &what);
    // Reopening while the disk is still full may fail, but cleanly.
    let out = run_child("open", &path, &[]);
    assert_exited_cleanly(&out, &format!("{what}: reopen while still full"));
    let open = reports(&out).join(" | ");
    std::fs::remove_file(&fill).expect("free space");
    verify_after(
        &path,
        &f,
        true,
        &format!("{what} (reopen while full: {open})"),
    );
    drop(fs);
}

mode_tests! { tmpfs_case;
    disk_full_on_tmpfs_in_none_mode => Durability::None,
    disk_full_on_tmpfs_in_immediate_mode => Durability::Immediate,
}

/// Writes `data` as a sparse file: pages of zeros are left as holes.
fn write_sparse(path: &Path, data: &[u8]) {
    use std::os::unix::fs::FileExt;
    let f = std::fs::File::create(path).expect("create sparse");
    f.set_len(data.len() as u64).expect("set_len");
    for (i, page) in data.chunks(4096).enumerate() {
        if page.iter().any(|&b| b != 0) {
            f.write_all_at(page, i as u64 * 4096).expect("write page");
        }
    }
}

#[test]
fn recovery_on_a_full_disk_fails_cleanly() {
    let _serial = serial();
    let dir = tempfile::tempdir().expect("tempdir");
    // Make the power-cut image on ordinary disk first.
    let src = dir.path().join("src.tags");
    let store = create(&src, 16, 2, 0xF0F0);
    // (store file at the last StoreSynced, journal at the last JournalSynced)
    type Copies = (Vec<u8>, Vec<u8>);
    let copies: Arc<Mutex<Copies>> = Arc::default();
    {
        let (copies, src) = (Arc::clone(&copies), src.clone());
        store.set_sync_hook(Some(Box::new(move |p: SyncPoint| {
            let mut c = copies.lock().unwrap_or_else(|e| e.into_inner());
            match p {
                SyncPoint::StoreSynced => c.0 = std::fs::read(&src).expect("read store"),
                SyncPoint::JournalSynced => {
                    c.1 = std::fs::read(journal_path(&src)).expect("read journal")
                }
                // The strings file: these tests store no long tag.
                SyncPoint::StringsSynced => {}
                SyncPoint::Applied => {}
            }
        })));
    }
    store
        .set_durability(Durability::Immediate)
        .expect("set_durability");
    let acked: Vec<Tag> = (0..120).map(|i| tag(i, false)).collect();
    for t in &acked {
        store.insert(t).expect("insert");
    }
    store.abandon();
    let (synced, journal) = std::mem::take(&mut *copies.lock().unwrap_or_else(|e| e.into_inner()));
    assert!(!journal.is_empty(), "the inserts were journaled");

    let Some(fs) = Tmpfs::mount(&dir.path().join("mnt"), "4m") else {
        return;
    };
    let path = fs.dir.join("cut.tags");
    write_sparse(&path, &synced);
    std::fs::write(journal_path(&path), &journal).expect("write journal");
    let fill = fill_up(&fs.dir);
    let out = run_child("open", &path, &[]);
    let open = reports(&out).join(" | ");
    assert_exited_cleanly(
        &out,
        "recovering a power-cut image on a full disk (replaying into unallocated blocks)",
    );
    std::fs::remove_file(&fill).expect("free space");
    let store = Store::open(&path).expect("recover with space back");
    assert_check_ok(&store, "after recovery");
    for t in &acked {
        assert!(
            whole(&store, t, "acknowledged"),
            "acknowledged {t:?} missing"
        );
    }
    assert_eq!(store.len(), acked.len() as u64);
    store.close().expect("close");
    eprintln!("disk_full recovery on a full disk: child reported {open}");
    drop(fs);
}
