//! Shared test helpers for running the `tagstore` command line.
//!
//! Running the real binary (never accepting a panic or a death by signal),
//! reading its output, asserting success, clean failures and usage errors,
//! creating small stores through the CLI, and a TSV escaping oracle written
//! independently of the crate.

use std::ffi::OsStr;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// The `tagstore` binary built for this test run.
pub const BIN: &str = env!("CARGO_BIN_EXE_tagstore");

/// A tag as three owned strings: (object, relationship, subject).
pub type Triple = (String, String, String);

/// The path of `fixtures/<name>` in the crate.
pub fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures")
        .join(name)
}

/// A path as `&str` (temp paths are UTF-8).
pub fn s(p: &Path) -> &str {
    p.to_str().expect("temp paths are UTF-8")
}

/// Owned triples from string slices.
pub fn triples(v: &[(&str, &str, &str)]) -> Vec<Triple> {
    v.iter()
        .map(|(a, b, c)| (a.to_string(), b.to_string(), c.to_string()))
        .collect()
}

/// Runs `cmd` (already given its arguments `args`, shown in messages) with
/// `stdin` fed from a thread (or /dev/null) and stdout sent to `stdout` (or
/// piped); never accepts a panic or a death by signal.
pub fn run_cmd<S: AsRef<OsStr>>(
    mut cmd: Command,
    args: &[S],
    stdin: Option<&[u8]>,
    stdout: Option<Stdio>,
) -> Output {
    cmd.stdout(stdout.unwrap_or_else(Stdio::piped))
        .stderr(Stdio::piped())
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        });
    let mut child = cmd.spawn().expect("spawn tagstore");
    if let Some(data) = stdin {
        let mut w = child.stdin.take().expect("stdin");
        let data = data.to_vec();
        // Write from a thread so a large input cannot deadlock against output.
        std::thread::spawn(move || {
            let _ = w.write_all(&data);
        });
    }
    let out = child.wait_with_output().expect("wait");
    check_no_panic(args, &out);
    out
}

/// Asserts that the run of `tagstore args` neither panicked (exit 101 or a
/// "panicked" message) nor died by a signal.
pub fn check_no_panic<S: AsRef<OsStr>>(args: &[S], out: &Output) {
    let shown: Vec<String> = args
        .iter()
        .map(|a| a.as_ref().to_string_lossy().into_owned())
        .collect();
    let e = stderr(out);
    assert_ne!(
        out.status.code(),
        Some(101),
        "tagstore {shown:?} panicked: {e}"
    );
    assert!(
        out.status.code().is_some(),
        "tagstore {shown:?} died by a signal: {:?}",
        out.status
    );
    assert!(!e.contains("panicked"), "tagstore {shown:?} panicked: {e}");
}

/// Runs the CLI with optional `stdin` and a chosen stdout (piped if `None`).
pub fn run_with<S: AsRef<OsStr>>(
    args: &[S],
    stdin: Option<&[u8]>,
    stdout: Option<Stdio>,
) -> Output {
    let mut cmd = Command::new(BIN);
    cmd.args(args);
    run_cmd(cmd, args, stdin, stdout)
}

/// Runs the CLI with stdin from /dev/null.
pub fn run<S: AsRef<OsStr>>(args: &[S]) -> Output {
    run_with(args, None, None)
}

/// Runs the CLI with `stdin` as its standard input.
pub fn run_in<S: AsRef<OsStr>>(args: &[S], stdin: &[u8]) -> Output {
    run_with(args, Some(stdin), None)
}

/// The run's stdout, which must be UTF-8.
pub fn stdout(o: &Output) -> String {
    String::from_utf8(o.stdout.clone()).expect("stdout is UTF-8")
}

/// The run's stderr, lossily decoded.
pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Asserts exit 0 and passes the output on.
pub fn ok(o: Output) -> Output {
    assert_eq!(
        o.status.code(),
        Some(0),
        "expected success; stderr: {}",
        stderr(&o)
    );
    o
}

/// Asserts exit `code` (`what` describes it) and that stderr mentions each
/// needle; returns stderr.
fn exits_with(o: &Output, code: i32, what: &str, needles: &[&str]) -> String {
    let e = stderr(o);
    assert_eq!(
        o.status.code(),
        Some(code),
        "expected {what}, got {:?}; stderr: {e}",
        o.status
    );
    for n in needles {
        assert!(e.contains(n), "stderr lacks {n:?}: {e}");
    }
    e
}

/// Asserts a clean failure: exit 1, stderr's first or last line starts with
/// "error: ", and stderr mentions each needle; returns stderr.
pub fn fails(o: &Output, needles: &[&str]) -> String {
    let e = exits_with(o, 1, "exit 1", needles);
    let last = e.lines().last().unwrap_or_default();
    assert!(
        e.starts_with("error: ") || last.starts_with("error: "),
        "stderr lacks an \"error: \" line: {e:?}"
    );
    e
}

/// Asserts a usage error: exit 2 and an "error:" message mentioning each needle.
pub fn usage(o: &Output, needles: &[&str]) {
    let e = exits_with(o, 2, "a usage error (exit 2)", needles);
    assert!(e.contains("error:"), "stderr lacks \"error:\": {e}");
}

/// Creates `dir/name` through the CLI with a small geometry (8 primary
/// buckets per half of 1 block, secondary buckets of 2 blocks, seed 11);
/// asserts it says "created ".
pub fn create_small(dir: &Path, name: &str) -> PathBuf {
    let p = dir.join(name);
    let o = ok(run(&[
        "create",
        s(&p),
        "--primary-buckets",
        "8",
        "--blocks-per-primary",
        "1",
        "--blocks-per-secondary",
        "2",
        "--seed",
        "11",
    ]));
    assert!(stdout(&o).starts_with("created "), "{}", stdout(&o));
    p
}

/// A new temp dir holding a store `name` made by [`create_small`]; keep the
/// dir alive as long as the store is used.
pub fn small_store(name: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let st = create_small(dir.path(), name);
    (dir, st)
}

/// Writes `text` to `dir/name` and returns its path.
pub fn write_file(dir: &Path, name: &str, text: impl AsRef<[u8]>) -> PathBuf {
    let f = dir.join(name);
    std::fs::write(&f, text).expect("write");
    f
}

/// Loads the TSV file `file` into store `p` with `insert --file`; returns the output.
pub fn load_file(p: &str, file: &Path) -> Output {
    ok(run(&["insert", p, "--file", s(file)]))
}

/// The lines of the store's `export`, sorted.
pub fn export_lines(store: &Path) -> Vec<String> {
    let mut v: Vec<String> = stdout(&ok(run(&["export", s(store)])))
        .lines()
        .map(str::to_owned)
        .collect();
    v.sort();
    v
}

// --- TSV, implemented independently of the crate -----------------------------

/// TSV-escapes a field: backslash, tab, newline and carriage return.
pub fn esc(f: &str) -> String {
    let mut o = String::new();
    for c in f.chars() {
        match c {
            '\\' => o.push_str("\\\\"),
            '\t' => o.push_str("\\t"),
            '\n' => o.push_str("\\n"),
            '\r' => o.push_str("\\r"),
            c => o.push(c),
        }
    }
    o
}

/// Undoes [`esc`]; panics on any other escape or a lone trailing backslash.
pub fn unesc(f: &str) -> String {
    let mut o = String::new();
    let mut it = f.chars();
    while let Some(c) = it.next() {
        if c != '\\' {
            o.push(c);
            continue;
        }
        match it.next() {
            Some('\\') => o.push('\\'),
            Some('t') => o.push('\t'),
            Some('n') => o.push('\n'),
            Some('r') => o.push('\r'),
            other => panic!("bad escape \\{other:?} in {f:?}"),
        }
    }
    o
}

/// The TSV line (without newline) of a tag's three fields.
pub fn tsv_line(o: &str, r: &str, sub: &str) -> String {
    format!("{}\t{}\t{}", esc(o), esc(r), esc(sub))
}

/// Splits a TSV line into its three unescaped fields; `ctx` names it in a failure.
pub fn parse_fields(l: &str, ctx: &str) -> Triple {
    let f: Vec<&str> = l.split('\t').collect();
    assert_eq!(f.len(), 3, "{ctx}line {l:?}");
    (unesc(f[0]), unesc(f[1]), unesc(f[2]))
}
