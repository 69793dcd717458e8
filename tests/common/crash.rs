//! Shared test helpers for crash, recovery and full-disk tests.

#[allow(unused_imports)]
pub use super::store::{assert_check_ok, serial, Rng};
use std::collections::BTreeSet;
use std::io::Write;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use tagstore::{CreateOptions, Durability, Store, Tag};

// ------------------------------------------------------------ tag checks

/// (contains, in the object half, in the subject half): the object half is
/// read with `find_subjects(o, r)`, the subject half with `find_objects(s, r)`;
/// a half counts the tag only if FIND returns it exactly once.
pub fn halves(store: &Store, t: &Tag) -> (bool, bool, bool) {
    let c = store.contains(t).expect("contains");
    let subjects: Vec<String> = store
        .find_subjects(&t.object, &t.relationship)
        .collect::<Result<_, _>>()
        .expect("find_subjects");
    let objects: Vec<String> = store
        .find_objects(&t.subject, &t.relationship)
        .collect::<Result<_, _>>()
        .expect("find_objects");
    (
        c,
        subjects.iter().filter(|s| **s == t.subject).count() == 1,
        objects.iter().filter(|o| **o == t.object).count() == 1,
    )
}

/// Asserts the tag is whole: in both halves and `contains` or in none of
/// them (never torn); returns whether it is present.
pub fn whole(store: &Store, t: &Tag, when: &str) -> bool {
    let (c, o, s) = halves(store, t);
    assert!(
        c == o && c == s,
        "{when}: tag {t:?} is torn: contains={c}, object half={o}, subject half={s}"
    );
    c
}

/// Asserts the store holds exactly `want`: the export (`tags()`) is `want`,
/// `len()` matches, every wanted tag is whole and present (FIND both ways
/// and `contains`), and `check()` is clean.
pub fn assert_exactly(store: &Store, want: &BTreeSet<Tag>, when: &str) {
    let got: BTreeSet<Tag> = store
        .tags()
        .collect::<Result<_, _>>()
        .expect("tags() export");
    let missing: Vec<&Tag> = want.difference(&got).collect();
    let extra: Vec<&Tag> = got.difference(want).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "{when}: missing {missing:?}, unexpected {extra:?}"
    );
    assert_eq!(store.len(), want.len() as u64, "len() {when}");
    for t in want {
        assert!(whole(store, t, when), "{when}: {t:?} missing");
    }
    assert_check_ok(store, when);
}

/// Tags `<{o}{i}, r, {s}{i % spread}>` for each `i` in `range`; with
/// `spread` 0 every tag has the subject `s` itself (one peak).
pub fn numbered(o: &str, r: &str, s: &str, spread: usize, range: Range<usize>) -> Vec<Tag> {
    range
        .map(|i| {
            let subject = match spread {
                0 => s.to_string(),
                n => format!("{s}{}", i % n),
            };
            Tag::new(format!("{o}{i}"), r, subject)
        })
        .collect()
}

// ------------------------------------------------------------ durability

/// The name a child process is told a durability mode by.
pub fn mode_name(m: Durability) -> &'static str {
    match m {
        Durability::Immediate => "immediate",
        Durability::OnSync => "on-sync",
        Durability::None => "none",
    }
}

/// The durability mode named `s` (see [`mode_name`]); panics on others.
pub fn mode_of(s: &str) -> Durability {
    match s {
        "immediate" => Durability::Immediate,
        "on-sync" => Durability::OnSync,
        "none" => Durability::None,
        other => panic!("unknown mode {other}"),
    }
}

/// Declares one `#[test]` per `name => mode` line, each calling
/// `case(mode)`: `mode_tests! { case; a_in_none_mode => Durability::None, }`.
#[allow(unused_macros)]
macro_rules! mode_tests {
    ($case:ident; $($(#[$meta:meta])* $name:ident => $mode:expr),+ $(,)?) => {
        $(
            $(#[$meta])*
            #[test]
            fn $name() {
                $case($mode);
            }
        )+
    };
}
#[allow(unused_imports)]
pub(crate) use mode_tests;

// ------------------------------------------------------- child processes

/// A command that re-runs this test binary as the ignored test `child`
/// alone (`--exact child --nocapture --include-ignored`), stdin closed,
/// stdout and stderr piped.
pub fn self_child(child: &str) -> Command {
    let exe = std::env::current_exe().expect("current_exe");
    let mut cmd = Command::new(exe);
    cmd.args(["--exact", child, "--nocapture", "--include-ignored"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

/// The message a caught panic carried (`"panic"` when it is not a string).
pub fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<String>()
        .cloned()
        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "panic".into())
}

// ------------------------------------------------------------ full disks

/// A tmpfs mounted for one test, unmounted on drop.
pub struct Tmpfs {
    /// The mount point.
    pub dir: PathBuf,
}

impl Tmpfs {
    /// Mounts a tmpfs of `size` (as `mount -o size=`) at `dir`; `None`, with
    /// a `SKIPPED` message, when not root or the mount fails.
    pub fn mount(dir: &Path, size: &str) -> Option<Tmpfs> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("SKIPPED: mounting a small tmpfs needs root");
            return None;
        }
        std::fs::create_dir_all(dir).expect("mount point");
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .output();
        match out {
            Ok(o) if o.status.success() => Some(Tmpfs {
                dir: dir.to_path_buf(),
            }),
            Ok(o) => {
                eprintln!(
                    "SKIPPED: mount -t tmpfs failed: {}",
                    String::from_utf8_lossy(&o.stderr).trim()
                );
                None
            }
            Err(e) => {
                eprintln!("SKIPPED: cannot run mount: {e}");
                None
            }
        }
    }
}

impl Tmpfs {
    /// Remounts the tmpfs read-only; the reason on failure.
    pub fn remount_ro(&self) -> Result<(), String> {
        let o = Command::new("mount")
            .args(["-o", "remount,ro"])
            .arg(&self.dir)
            .output()
            .map_err(|e| e.to_string())?;
        if o.status.success() {
            Ok(())
        } else {
            Err(String::from_utf8_lossy(&o.stderr).trim().to_string())
        }
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let ok = Command::new("umount")
            .arg(&self.dir)
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
        }
    }
}

/// Fills the filesystem holding `dir` to the last byte; returns the file
/// that takes the space (remove it to free the space again).
pub fn fill_up(dir: &Path) -> PathBuf {
    let p = dir.join("fill-up");
    let mut f = std::fs::File::create(&p).expect("fill-up file");
    let chunk = vec![0xCDu8; 4096];
    while f.write_all(&chunk).is_ok() {}
    let _ = f.flush();
    p
}

/// `n` file-ownership tags under path prefix `prefix`, a third of them on
/// one subject, `hub` (a peak whose chain grows), the rest on 500 others.
pub fn hub_tags(prefix: &str, n: u32) -> Vec<Tag> {
    (0..n)
        .map(|i| {
            let subject = if i % 3 == 0 {
                "hub".to_string()
            } else {
                format!("pkg{}", i % 501)
            };
            Tag::new(format!("/{prefix}/d{}/f-{i}", i % 97), "owned_by", subject)
        })
        .collect()
}

/// Tag `i` of the split workloads: few subjects, so their chains link
/// secondary buckets and the splits move many tags.
pub fn split_tag(i: usize) -> Tag {
    Tag::new(format!("obj-{i:05}"), "r", format!("subj-{}", i % 7))
}

/// Copies the store `base` (holding `split_tag(0..more.start)`) to `path`,
/// inserts `split_tag(i)` for each `i` in `more`, one call each, with the
/// write path failing at its `k`-th write, and abandons the copy as
/// `kill -9` would. Returns the tags acknowledged (the base's included)
/// and the one in flight when the failure came before the last insert.
pub fn split_inserts_crashing_at(
    base: &Path,
    path: &Path,
    k: u64,
    more: Range<usize>,
) -> (BTreeSet<Tag>, Option<Tag>) {
    let _ = std::fs::remove_file(path);
    std::fs::copy(base, path).expect("copy");
    let s = Store::open(path).expect("open copy");
    s.fail_after_writes(Some(k));
    let mut acked: BTreeSet<Tag> = (0..more.start).map(split_tag).collect();
    let mut in_flight = None;
    for i in more {
        match s.insert(&split_tag(i)) {
            Ok(true) => {
                acked.insert(split_tag(i));
            }
            Ok(false) => panic!("k={k}: tag {i} was already there"),
            Err(_) => {
                in_flight = Some(split_tag(i));
                break;
            }
        }
    }
    s.abandon();
    (acked, in_flight)
}

/// Creates at `path` a store of tiny buckets (2 per half of 2 blocks,
/// 1-block secondary buckets, hash `seed`) holding `split_tag(0..n)`, and
/// closes it; returns its primary bucket count, so that a test can tell
/// when later inserts split.
pub fn small_split_store(path: &Path, n: usize, seed: u64) -> u64 {
    let opts = CreateOptions {
        expected_tags: 100,
        primary_buckets_per_half: Some(2),
        blocks_per_primary: Some(2),
        blocks_per_secondary: Some(1),
        seed: Some(seed),
    };
    let s = Store::create(path, &opts).expect("create");
    for i in 0..n {
        assert!(s.insert(&split_tag(i)).expect("load"));
    }
    let buckets = s.stats().expect("stats").primary_buckets;
    s.close().expect("close");
    buckets
}
