//! Shared test helpers for the edge-case tests (paths, odd files, locks, read-only views).

use std::collections::BTreeSet;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tagstore::{CreateOptions, Store, Tag};

/// The `tagstore` binary built for these tests.
pub const BIN: &str = env!("CARGO_BIN_EXE_tagstore");

static SERIAL: Mutex<()> = Mutex::new(());

/// Runs a test alone while the guard lives: a CLI child forked while another
/// test thread holds a store would inherit its lock.
pub fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

/// `p` as a `&str` (the tests' paths are UTF-8).
pub fn s(p: &Path) -> &str {
    p.to_str().expect("utf8 path")
}

/// The names of the entries of `dir`.
pub fn names(dir: &Path) -> BTreeSet<String> {
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

/// Asserts that `dir` holds exactly the entries named `want`.
pub fn assert_names(dir: &Path, want: &[&str], what: &str) {
    let want: BTreeSet<String> = want.iter().map(|n| n.to_string()).collect();
    assert_eq!(names(dir), want, "{what} (in {})", dir.display());
}

/// Asserts that `p` itself (not what it leads to) is a symbolic link.
pub fn assert_symlink(p: &Path, what: &str) {
    let m = std::fs::symlink_metadata(p).expect("symlink_metadata");
    assert!(
        m.file_type().is_symlink(),
        "{what}: {} is not a symlink",
        p.display()
    );
}

/// Runs the CLI with no stdin; fails if it panicked or died by a signal.
pub fn cli(args: &[&str]) -> Output {
    let out = Command::new(BIN)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run tagstore");
    assert_ne!(
        out.status.code(),
        Some(101),
        "tagstore {args:?} panicked: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.code().is_some(),
        "tagstore {args:?} died by a signal"
    );
    out
}

/// Starts the CLI with no stdin and its stdout and stderr piped.
pub fn spawn_cli(args: &[&str]) -> Child {
    Command::new(BIN)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn tagstore")
}

/// Waits for `child` to finish, killing it (and failing) after `limit`;
/// fails if it panicked. Returns its exit code, stdout and stderr.
pub fn wait_child(mut child: Child, limit: Duration, what: &str) -> (Option<i32>, String, String) {
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(st) = child.try_wait().expect("try_wait") {
            break st;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what} did not finish within {limit:?} (it hangs)");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let (mut out, mut err) = (String::new(), String::new());
    if let Some(mut o) = child.stdout.take() {
        o.read_to_string(&mut out).expect("read stdout");
    }
    if let Some(mut e) = child.stderr.take() {
        e.read_to_string(&mut err).expect("read stderr");
    }
    assert_ne!(status.code(), Some(101), "{what} panicked: {err}");
    (status.code(), out, err)
}

/// Default options, sized for `expected_tags`, with the hash seed fixed.
pub fn seeded(expected_tags: u64, seed: u64) -> CreateOptions {
    CreateOptions {
        expected_tags,
        seed: Some(seed),
        ..Default::default()
    }
}

/// `buckets` primary buckets per half of one block each (secondaries of one
/// block too), so that tags soon spill into chains; the seed fixed.
pub fn one_block_buckets(expected_tags: u64, buckets: u32, seed: u64) -> CreateOptions {
    CreateOptions {
        expected_tags,
        primary_buckets_per_half: Some(buckets),
        blocks_per_primary: Some(1),
        blocks_per_secondary: Some(1),
        seed: Some(seed),
    }
}

/// Creates a store at `path`, inserts `tags` (each must be new) and closes it.
pub fn build_store<'a>(path: &Path, opts: &CreateOptions, tags: impl IntoIterator<Item = &'a Tag>) {
    let st = Store::create(path, opts).expect("create");
    for t in tags {
        assert!(st.insert(t).expect("insert"), "{t:?} was already there");
    }
    st.close().expect("close");
}

/// A temporary directory with two empty subdirectories: `real/` (for a
/// store) and `links/` (for links to it).
pub struct LinkDirs {
    /// The temporary directory (removed on drop).
    pub dir: tempfile::TempDir,
    /// `dir/real`.
    pub real: PathBuf,
    /// `dir/links`.
    pub links: PathBuf,
}

/// Makes a fresh [`LinkDirs`].
pub fn link_dirs() -> LinkDirs {
    let dir = tempfile::tempdir().expect("tempdir");
    let real = dir.path().join("real");
    let links = dir.path().join("links");
    std::fs::create_dir(&real).expect("mkdir real");
    std::fs::create_dir(&links).expect("mkdir links");
    LinkDirs { dir, real, links }
}

/// Sets `cmd`'s file-size limit (RLIMIT_FSIZE) to `limit` bytes, with
/// SIGXFSZ at its default (the process is killed by it), as a shell's
/// `ulimit -f` leaves it: the binary ignores SIGXFSZ itself, so a write
/// past `limit` fails with EFBIG, as a full disk fails with ENOSPC.
/// (Regression, a review's: the tests used to ignore it for the binary,
/// which died silently under `ulimit -f`.)
pub fn limit_file_size(cmd: &mut Command, limit: u64) {
    use std::os::unix::process::CommandExt;
    // SAFETY: setrlimit and signal are async-signal-safe; nothing else runs
    // between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            let lim = libc::rlimit {
                rlim_cur: limit as libc::rlim_t,
                rlim_max: limit as libc::rlim_t,
            };
            if libc::setrlimit(libc::RLIMIT_FSIZE, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            libc::signal(libc::SIGXFSZ, libc::SIG_DFL);
            Ok(())
        });
    }
}
