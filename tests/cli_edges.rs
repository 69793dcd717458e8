//! Edge cases of the `tagstore` command line, through the real binary: a
//! `--file` load that fails after applying changes (it must say what it
//! applied), stdout on a full device (`/dev/full`), usage errors found by
//! hand-validation (exit 2), TSV input edges (a byte order mark, blank
//! lines, a line far longer than any tag), and the progress bar's text
//! (its estimate and its width, drawn on a fake terminal).
//!
//! Like tests/cli.rs, these tests never open a store through the library,
//! so no child process can inherit a locked store file from another test.

mod common;

use common::cli::{
    check_no_panic, create_small, export_lines, fails, load_file, ok, run, run_cmd, run_in,
    run_with, s, small_store, stderr, stdout, usage, write_file, BIN,
};
use std::fs::File;
use std::io::Write;
use std::process::{Command, Output, Stdio};

/// The progress bar's style and estimate, compiled in from the binary's source.
#[allow(dead_code)]
#[path = "../src/bin/tagstore/progress.rs"]
mod progress;

/// `n` small distinct tags as TSV text.
fn tags_tsv(prefix: &str, n: usize) -> String {
    (0..n)
        .map(|i| format!("{prefix}{i}\tisa\tthing{}\n", i % 7))
        .collect()
}

/// A new store `name` (see [`small_store`]) holding `tags_tsv("t", n)`,
/// loaded from a file with `insert --file`.
fn store_with_tags(name: &str, n: usize) -> (tempfile::TempDir, std::path::PathBuf) {
    let (dir, st) = small_store(name);
    load_file(
        s(&st),
        &write_file(dir.path(), "tags.tsv", tags_tsv("t", n)),
    );
    (dir, st)
}

// --- Item 2: a failing --file command reports what it applied ------------------

/// The count in a load's error `… N tags inserted before it …`.
fn inserted_before(err: &str) -> usize {
    err.split(" tags inserted before it")
        .next()
        .and_then(|head| head.rsplit(' ').next())
        .and_then(|w| w.parse().ok())
        .unwrap_or_else(|| panic!("no count in {err:?}"))
}

/// Runs the CLI with its file-size limit (RLIMIT_FSIZE) at `limit` bytes,
/// SIGXFSZ at its default as under a shell's `ulimit -f`: the CLI ignores
/// it, so a write past `limit` fails with EFBIG, as a full disk fails with
/// ENOSPC, instead of killing the process.
fn run_size_limited(args: &[&str], limit: u64) -> Output {
    let mut cmd = Command::new(BIN);
    cmd.args(args);
    common::edge::limit_file_size(&mut cmd, limit);
    run_cmd(cmd, args, None, None)
}

/// Case: `delete --file` whose store cannot be written when it closes (a
/// full disk; here a file-size limit one byte below the store's size, so
/// closing cannot append the table image). The deletes were applied, so
/// the error must say how many, as it does for a bad line.
#[test]
fn delete_file_failing_at_close_reports_what_it_applied() {
    let (dir, st) = store_with_tags("full.tags", 40);
    let p = s(&st);
    // 25 present tags and 5 absent ones.
    let del = dir.path().join("del.tsv");
    let text = format!("{}{}", tags_tsv("t", 25), tags_tsv("absent", 5));
    std::fs::write(&del, text).expect("write");
    let size = std::fs::metadata(&st).expect("stat").len();
    let o = run_size_limited(&["delete", p, "--file", s(&del)], size - 1);
    fails(
        &o,
        &["25 tags deleted before it", "5 already absent", "30 lines"],
    );
    // What the message says was applied is what the store holds once recovered.
    let left = export_lines(&st);
    assert_eq!(left.len(), 15, "{left:?}");
    assert!(left.iter().all(|l| {
        let n: usize = l[1..l.find('\t').unwrap_or(1)].parse().unwrap_or(0);
        n >= 25
    }));
    ok(run(&["check", p]));
}

/// Case: `insert --file` failing as the store closes reports its count too.
#[test]
fn insert_file_failing_at_close_reports_what_it_applied() {
    let (dir, st) = small_store("full.tags");
    let p = s(&st);
    ok(run(&["insert", p, "t0", "isa", "thing0"]));
    let ins = write_file(dir.path(), "ins.tsv", tags_tsv("t", 12));
    let size = std::fs::metadata(&st).expect("stat").len();
    let o = run_size_limited(&["insert", p, "--file", s(&ins)], size - 1);
    fails(
        &o,
        &[
            "11 tags inserted before it",
            "1 already present",
            "12 lines",
        ],
    );
    assert_eq!(export_lines(&st).len(), 12);
    ok(run(&["check", p]));
}

/// Case: `insert --durability immediate` where the journal cannot be made
/// (a file-size limit below its first 256 KB written ahead, as a full disk
/// would refuse it): exit 1 naming the journal, before any change.
#[test]
fn a_journal_that_cannot_be_made_refuses_the_insert() {
    let (_dir, st) = small_store("nojournal.tags");
    let p = s(&st);
    ok(run(&["insert", p, "t0", "isa", "thing0"]));
    let size = std::fs::metadata(&st).expect("stat").len();
    assert!(size < 200 * 1024, "a small store: {size} bytes");
    let args = [
        "insert",
        p,
        "t1",
        "isa",
        "thing1",
        "--durability",
        "immediate",
    ];
    fails(&run_size_limited(&args, 200 * 1024), &[".journal"]);
    assert_eq!(export_lines(&st), ["t0\tisa\tthing0"]);
    ok(run(&["check", p]));
}

/// Case: a bad line in the middle of a delete file (the library applies the
/// deletes before it in one batch): the error counts exactly those.
#[test]
fn delete_file_bad_line_counts_applied_deletes() {
    let (_dir, st) = small_store("bad.tags");
    let p = s(&st);
    ok(run_in(
        &["insert", p, "--file", "-"],
        tags_tsv("t", 20).as_bytes(),
    ));
    let input = format!(
        "{}{}not a tag\n{}",
        tags_tsv("t", 8),
        tags_tsv("absent", 3),
        tags_tsv("u", 4)
    );
    let o = run_in(&["delete", p, "--file", "-"], input.as_bytes());
    fails(
        &o,
        &["line 12:", "8 tags deleted before it", "3 already absent"],
    );
    assert_eq!(export_lines(&st).len(), 12);
}

// --- Item 5: stdout on a full device ---------------------------------------------

/// A stdout that fails every write with ENOSPC (`/dev/full`).
fn dev_full() -> Stdio {
    Stdio::from(
        File::options()
            .write(true)
            .open("/dev/full")
            .expect("open /dev/full"),
    )
}

/// Case: every command with stdout on `/dev/full` must exit 1 with an
/// `error:` naming stdout, not exit 0 having lost its output; one that
/// changed the store says so.
#[test]
fn full_stdout_is_an_error_for_every_command() {
    let (dir, st) = store_with_tags("out.tags", 30);
    let p = s(&st);
    let more = write_file(dir.path(), "more.tsv", tags_tsv("m", 3));
    let created = dir.path().join("created.tags");
    let cases: Vec<Vec<&str>> = vec![
        vec!["create", s(&created)],
        vec!["insert", p, "x", "isa", "y"],
        vec!["delete", p, "x", "isa", "y"],
        vec!["insert", p, "--file", s(&more)],
        vec!["delete", p, "--file", s(&more)],
        vec!["find", p, "--subject", "thing1", "--relationship", "isa"],
        vec!["find", p, "--object", "t1", "--relationship", "isa"],
        vec!["export", p],
        vec!["count", p, "--subject", "thing1", "--relationship", "isa"],
        vec!["cloud", p, "--relationship", "isa"],
        vec!["cloud", p, "--relationship", "isa", "--json"],
        vec!["stats", p],
        vec!["stats", p, "--json"],
        vec!["check", p],
        vec!["check", p, "--json"],
        vec!["maintain", p],
        vec!["maintain", p, "--json"],
        // Its only line, the address it listens on, cannot be printed.
        vec!["serve", p, "--listen", "127.0.0.1:0"],
    ];
    for args in &cases {
        let o = run_with(args, None, Some(dev_full()));
        let e = stderr(&o);
        assert_eq!(
            o.status.code(),
            Some(1),
            "tagstore {args:?} > /dev/full: expected exit 1, got {:?}; stderr: {e}",
            o.status
        );
        assert!(
            e.contains("error: ") && e.contains("stdout") && e.contains("No space left"),
            "tagstore {args:?} > /dev/full: unclear error: {e}"
        );
    }
    // The load's summary is not lost: it goes with the error to stderr.
    let o = run_with(&["insert", p, "--file", s(&more)], None, Some(dev_full()));
    fails(&o, &["inserted 3 tags"]);
    ok(run(&["check", p]));
    // `create` and `maintain` say that their work is done (a retry of the
    // create would meet "already exists").
    let again = dir.path().join("again.tags");
    let o = run_with(&["create", s(&again)], None, Some(dev_full()));
    fails(&o, &["stdout", "was created"]);
    assert!(again.exists());
    let o = run_with(&["maintain", p], None, Some(dev_full()));
    fails(&o, &["stdout", "was compacted"]);
}

// --- Item 8: hand-validated usage errors exit 2 ----------------------------------

/// Case: a tag with missing positional arguments (`insert S a b`) is a usage
/// error (exit 2), and the store is not touched.
/// Regression (2026-11-30, after a review found it in `serve`): a line
/// the CLI writes to stderr on its way (here `--skip-bad` naming a skipped
/// line) panicked when stderr could not take it (`2>/dev/full`, or a pipe
/// closed early as in `2>&1 | head`), and the load stopped with exit 101
/// halfway; it goes on now, and does what it was asked.
#[test]
fn an_unwritable_stderr_does_not_stop_a_load() {
    let (dir, st) = small_store("stderr.tags");
    let file = write_file(dir.path(), "in.tsv", "a\tr\tb\nbad line\nc\tr\td\n");
    let status = Command::new(BIN)
        .args(["insert", s(&st), "--file", s(&file), "--skip-bad"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(dev_full())
        .status()
        .expect("run tagstore");
    assert!(status.success(), "{status:?}");
    let lines = export_lines(&st);
    assert_eq!(lines.len(), 2, "{lines:?}");
}

#[test]
fn missing_positionals_are_usage_errors() {
    let (dir, st) = small_store("u.tags");
    let p = s(&st);
    for args in [
        vec!["insert", p, "a", "b"],
        vec!["insert", p, "a"],
        vec!["delete", p, "a", "b"],
        vec!["delete", p, "a"],
    ] {
        usage(&run(&args), &["SUBJECT"]);
    }
    // Even when the store does not exist: the arguments are checked first.
    let missing = dir.path().join("missing.tags");
    usage(&run(&["insert", s(&missing), "a", "b"]), &["SUBJECT"]);
    assert!(!missing.exists());
    assert!(export_lines(&st).is_empty());
}

/// Case: out-of-range geometry values (`--blocks-per-primary 0`, ...) for
/// `create` and `maintain` are usage errors (exit 2) that name the value.
#[test]
fn bad_geometry_values_are_usage_errors() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bad = dir.path().join("bad.tags");
    let b = s(&bad);
    for (flag, value, needle) in [
        ("--blocks-per-primary", "0", "blocks per primary bucket"),
        ("--blocks-per-secondary", "0", "blocks per secondary bucket"),
        ("--primary-buckets", "0", "primary buckets per half"),
        (
            "--blocks-per-primary",
            "4000000000",
            "blocks per primary bucket",
        ),
        (
            "--primary-buckets",
            "4294967295",
            "primary buckets per half",
        ),
    ] {
        usage(
            &run(&["create", b, flag, value]),
            &[needle, "invalid argument"],
        );
        assert!(!bad.exists(), "a refused create left {b} behind");
    }
    // A size past the largest a store may start at names the flag (exit 1,
    // as README.md has said since format 2).
    let too_big = |o: std::process::Output| {
        let e = String::from_utf8_lossy(&o.stderr).to_string();
        assert_eq!(o.status.code(), Some(1), "{e}");
        assert!(
            e.contains("--expected-tags 100000000000000: at most"),
            "{e}"
        );
    };
    too_big(run(&["create", b, "--expected-tags", "100000000000000"]));
    assert!(!bad.exists(), "a refused create left {b} behind");
    let st = create_small(dir.path(), "m.tags");
    let p = s(&st);
    ok(run(&["insert", p, "a", "b", "c"]));
    let before = std::fs::read(&st).expect("read");
    too_big(run(&["maintain", p, "--expected-tags", "100000000000000"]));
    usage(
        &run(&["maintain", p, "--blocks-per-secondary", "0"]),
        &["blocks per secondary bucket"],
    );
    usage(
        &run(&["maintain", p, "--primary-buckets", "0"]),
        &["primary buckets per half"],
    );
    assert_eq!(std::fs::read(&st).expect("read"), before);
}

// --- Item 11: TSV input edges ----------------------------------------------------

/// Case: a UTF-8 byte order mark at the start of a TSV file (or stdin) is
/// dropped, not stored as part of the first object.
#[test]
fn bom_at_start_of_file_is_dropped() {
    let (dir, st) = small_store("bom.tags");
    let p = s(&st);
    let f = write_file(
        dir.path(),
        "bom.tsv",
        "\u{feff}first\tisa\tone\r\nsecond\tisa\ttwo\r\n",
    );
    load_file(p, &f);
    assert_eq!(
        export_lines(&st),
        vec![
            "first\tisa\tone".to_string(),
            "second\tisa\ttwo".to_string()
        ]
    );
    ok(run_in(
        &["insert", p, "--file", "-"],
        "\u{feff}third\tisa\tthree\n".as_bytes(),
    ));
    assert!(export_lines(&st).contains(&"third\tisa\tthree".to_string()));
    // Only at the start: a U+FEFF later in the file is data.
    ok(run_in(
        &["insert", p, "--file", "-"],
        "a\tb\tc\n\u{feff}x\ty\tz\n".as_bytes(),
    ));
    assert!(export_lines(&st).contains(&"\u{feff}x\ty\tz".to_string()));
}

/// Case: `export` then `insert --file` still round-trips a first tag whose
/// object starts with U+FEFF (export writes a BOM ahead of it, which the
/// load drops).
#[test]
fn object_starting_with_feff_round_trips() {
    let (dir, st) = small_store("feff.tags");
    let p = s(&st);
    ok(run(&["insert", p, "\u{feff}lead", "isa", "odd"]));
    let dump = ok(run(&["export", p])).stdout;
    let copy = create_small(dir.path(), "copy.tags");
    assert!(dump.starts_with("\u{feff}\u{feff}lead".as_bytes()));
    ok(run_in(&["insert", s(&copy), "--file", "-"], &dump));
    let found = ok(run(&[
        "find",
        s(&copy),
        "--subject",
        "odd",
        "--relationship",
        "isa",
    ]));
    assert_eq!(stdout(&found), "\u{feff}lead\n");
    // Other exports are unchanged: no byte order mark.
    ok(run(&["insert", s(&copy), "plain", "isa", "odd"]));
    ok(run(&["delete", s(&copy), "\u{feff}lead", "isa", "odd"]));
    assert_eq!(stdout(&ok(run(&["export", s(&copy)]))), "plain\tisa\todd\n");
}

/// Case: a blank line stops the load (the documented rule), with an error
/// that says it is a blank line and counts the tags stored before it.
#[test]
fn blank_line_is_named_in_the_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    for (i, input) in ["a\tb\tc\n\nd\te\tf\n", "a\tb\tc\n\r\nd\te\tf\n"]
        .iter()
        .enumerate()
    {
        let st = create_small(dir.path(), &format!("blank{i}.tags"));
        let p = s(&st);
        let o = run_in(&["insert", p, "--file", "-"], input.as_bytes());
        fails(&o, &["line 2:", "blank line", "1 tags inserted before it"]);
        assert_eq!(export_lines(&st), vec!["a\tb\tc".to_string()]);
    }
}

/// Case: the longest line a tag can need (three strings of 65,536 bytes,
/// every byte escaped to 2 characters, 2 tabs, `\r\n`: 393,220 bytes) loads
/// and exports as it was; one byte more is refused as too long, naming the
/// line and the limit.
#[test]
fn longest_possible_line_loads_and_one_more_is_refused() {
    let (_dir, st) = small_store("long.tags");
    let p = s(&st);
    // 65,536 tabs, 65,536 newlines, 65,535 carriage returns and a
    // backslash: 3 × 65,536 bytes, each escaped to 2 characters.
    let fields = format!(
        "{}\t{}\t{}\\\\",
        "\\t".repeat(65_536),
        "\\n".repeat(65_536),
        "\\r".repeat(65_535)
    );
    let longest = format!("{fields}\r\n");
    assert_eq!(longest.len(), 393_220);
    let o = ok(run_in(&["insert", p, "--file", "-"], longest.as_bytes()));
    assert!(stdout(&o).starts_with("inserted 1 tags"), "{}", stdout(&o));
    assert_eq!(export_lines(&st), vec![fields.clone()]);
    let too_long = format!("ok\tisa\tfine\n{fields}x\r\n");
    let o = run_in(&["insert", p, "--file", "-"], too_long.as_bytes());
    fails(
        &o,
        &[
            "line 2:",
            "longer than 393220 bytes",
            "1 tags inserted before it",
        ],
    );
    assert_eq!(export_lines(&st).len(), 2);
}

/// Case: a line of hundreds of megabytes is refused once it passes the
/// longest possible tag line, without reading the rest of it: the load
/// stops while most of a 64 MB line is still unread.
#[test]
fn huge_line_is_refused_without_reading_it_whole() {
    const TOTAL: usize = 64 << 20;
    let (_dir, st) = small_store("huge.tags");
    let p = s(&st);
    let mut child = Command::new(BIN)
        .args(["insert", p, "--file", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut w = child.stdin.take().expect("stdin");
    let writer = std::thread::spawn(move || {
        let mut written = 0usize;
        if w.write_all(b"a\tb\tc\n").is_err() {
            return written;
        }
        let chunk = vec![b'x'; 64 << 10];
        while written < TOTAL {
            if w.write_all(&chunk).is_err() {
                break;
            }
            written += chunk.len();
        }
        written
    });
    let out = child.wait_with_output().expect("wait");
    let written = writer.join().expect("writer");
    check_no_panic(&["insert", p, "--file", "-"], &out);
    fails(
        &out,
        &[
            "line 2:",
            "longer than 393220 bytes",
            "1 tags inserted before it",
        ],
    );
    assert!(
        written < TOTAL / 4,
        "the CLI read {written} bytes of a line it should refuse after 393220"
    );
}

// --- Item 12: the progress bar ---------------------------------------------------

use std::time::Duration;

/// Case: no estimate while too little is known (the "24m left" of a 16 s
/// load); after a second and a few percent, an estimate from the mean rate.
#[test]
fn progress_estimate_waits_then_uses_the_mean_rate() {
    let sec = Duration::from_secs;
    let ms = Duration::from_millis;
    // Nothing yet, or a burst at the start: no estimate.
    assert_eq!(progress::eta(ms(0), 0, 1000), None);
    assert_eq!(progress::eta(ms(200), 500, 1000), None);
    assert_eq!(progress::eta(sec(2), 1, 1000), None);
    // A 16 s load, one second in at 1/16: 15 s left.
    assert_eq!(progress::eta(sec(1), 1 << 20, 16 << 20), Some(sec(15)));
    // A long load still gets an estimate once enough time has passed.
    assert_eq!(progress::eta(sec(20), 10, 10_000), Some(sec(19_980)));
    assert_eq!(progress::eta(sec(3), 1000, 1000), Some(sec(0)));
    assert_eq!(progress::eta(sec(3), 10, 0), None);
    assert_eq!(progress::format_eta(Some(sec(15))), "15s left");
    assert_eq!(progress::format_eta(Some(sec(125))), "2m 05s left");
    assert_eq!(
        progress::format_eta(Some(sec(3 * 3600 + 60))),
        "3h 01m left"
    );
    assert_eq!(progress::format_eta(None), "");
}

/// A terminal of a given width that records every line drawn on it.
#[derive(Debug)]
struct FakeTerm {
    width: u16,
    drawn: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl indicatif::TermLike for FakeTerm {
    fn width(&self) -> u16 {
        self.width
    }
    fn move_cursor_up(&self, _: usize) -> std::io::Result<()> {
        Ok(())
    }
    fn move_cursor_down(&self, _: usize) -> std::io::Result<()> {
        Ok(())
    }
    fn move_cursor_right(&self, _: usize) -> std::io::Result<()> {
        Ok(())
    }
    fn move_cursor_left(&self, _: usize) -> std::io::Result<()> {
        Ok(())
    }
    fn write_line(&self, s: &str) -> std::io::Result<()> {
        self.write_str(s)
    }
    fn write_str(&self, s: &str) -> std::io::Result<()> {
        if !s.is_empty() {
            if let Ok(mut d) = self.drawn.lock() {
                d.push(s.to_string());
            }
        }
        Ok(())
    }
    fn clear_line(&self) -> std::io::Result<()> {
        Ok(())
    }
    fn flush(&self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Makes a progress bar of a given length on a draw target.
type MakeBar = fn(indicatif::ProgressDrawTarget, u64) -> indicatif::ProgressBar;

/// Draws `bar` (made by `make` for a terminal) at a few positions on fake
/// terminals of several widths; returns every line drawn, by width.
fn draw_on_widths(make: MakeBar, len: u64) -> Vec<(u16, Vec<String>)> {
    let mut all = Vec::new();
    for width in [40u16, 60, 80, 120, 200] {
        let drawn = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let term = FakeTerm {
            width,
            drawn: drawn.clone(),
        };
        let bar = make(
            indicatif::ProgressDrawTarget::term_like(Box::new(term)),
            len,
        );
        for pos in [0, len / 100, len / 3, len - 1, len] {
            bar.set_position(pos);
            bar.set_message(format!("{pos} tags"));
            bar.force_draw();
        }
        let lines = drawn.lock().map(|d| d.clone()).unwrap_or_default();
        all.push((width, lines));
    }
    all
}

/// `maintain`'s bar as the CLI makes it: the reading spinner, turned into
/// the bar by the first tags copied.
fn maintain_bar(target: indicatif::ProgressDrawTarget, len: u64) -> indicatif::ProgressBar {
    let bar = progress::maintain_reading(target);
    progress::maintain_copying(&bar, len);
    bar
}

/// Case: `maintain` showed an empty bar while it read the whole store to
/// plan the rewrite (seconds at millions of tags); it now says what it is
/// doing, within the terminal's width, until the copy starts.
#[test]
fn maintain_says_it_is_reading_before_the_copy() {
    for width in [40u16, 60, 80, 200] {
        let drawn = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let term = FakeTerm {
            width,
            drawn: drawn.clone(),
        };
        let bar =
            progress::maintain_reading(indicatif::ProgressDrawTarget::term_like(Box::new(term)));
        bar.force_draw();
        let reading = drawn.lock().map(|d| d.clone()).unwrap_or_default();
        let last = reading.last().cloned().unwrap_or_default();
        assert!(
            last.contains("reading the store") || (width < 60 && last.contains("reading")),
            "width {width}: {last:?}"
        );
        progress::maintain_copying(&bar, 1000);
        bar.set_position(500);
        bar.force_draw();
        let lines = drawn.lock().map(|d| d.clone()).unwrap_or_default();
        let copying = lines.last().cloned().unwrap_or_default();
        assert!(
            copying.contains("50% of tags copied"),
            "width {width}: {copying:?}"
        );
        assert!(!copying.contains("reading"), "width {width}: {copying:?}");
        for l in &lines {
            assert!(
                l.chars().count() <= width as usize,
                "a {}-column line on a {width}-column terminal: {l:?}",
                l.chars().count()
            );
        }
    }
}

/// Case: the load and maintain bars fit the terminal's width (they used a
/// fixed 40-column bar plus text, drawn past the edge of a narrow
/// terminal) and show no estimate when they start.
#[test]
fn progress_bars_fit_the_terminal_width() {
    let makers: [(&str, MakeBar); 2] = [("load", progress::load_bar), ("maintain", maintain_bar)];
    for (name, make) in makers {
        for (width, lines) in draw_on_widths(make, 300 << 20) {
            assert!(!lines.is_empty(), "{name}: nothing drawn at width {width}");
            for l in &lines {
                let cols = l.chars().count();
                assert!(
                    cols <= width as usize,
                    "{name}: a {cols}-column line on a {width}-column terminal: {l:?}"
                );
                assert!(
                    !l.contains("left"),
                    "{name}: an estimate at the start: {l:?}"
                );
            }
        }
    }
}

/// A writable store maps address space to grow into (32 GiB past its end,
/// so growth rarely remaps); under a `ulimit -v` that cannot grant it, the
/// store maps less instead of failing. Regression for the larger headroom.
#[test]
fn a_writable_store_opens_under_an_address_space_limit() {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = dir.path().join("limited.tags");
    let script = format!(
        "ulimit -v 2000000 && {bin} create {p} && printf 'a\\tr\\tb\\n' | {bin} insert {p} --file - && {bin} find {p} --object a --relationship r",
        bin = common::cli::BIN,
        p = p.display()
    );
    let out = Command::new("sh")
        .arg("-c")
        .arg(&script)
        .output()
        .expect("run sh");
    assert!(
        out.status.success(),
        "under ulimit -v: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).lines().last(),
        Some("b")
    );
}

/// Case: a large `insert --file` (chunks big enough for the library's bulk
/// path) stopped by a file-size limit halfway still reports exactly what
/// it applied: a batch that could run out of room goes tag by tag, never
/// half by half.
#[test]
fn large_insert_file_stopped_by_a_full_disk_reports_an_exact_count() {
    let dir = tempfile::tempdir().expect("tempdir");
    let st = dir.path().join("bulkfull.tags");
    let p = s(&st);
    // Sized for the load: no growth, so the limit stops the secondary
    // buckets its seven peaks need, in the middle of the load.
    ok(run(&["create", p, "--expected-tags", "100000"]));
    let ins = write_file(dir.path(), "ins.tsv", tags_tsv("t", 40_000));
    let size = std::fs::metadata(&st).expect("stat").len();
    let o = run_size_limited(&["insert", p, "--file", s(&ins)], size + (2 << 20));
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    assert!(!o.status.success(), "the load should stop: {err}");
    let n = inserted_before(&err);
    assert!(n > 0 && n < 40_000, "{err}");
    assert_eq!(export_lines(&st).len(), n, "{err}");
    ok(run(&["check", p]));
}

/// Case: a tag with a string past `MAX_STRING_BYTES` (65,536 bytes) deep
/// inside a large `insert --file` (past the bulk path's threshold): the
/// error names its line and counts exactly the tags applied before it, as
/// in a small file.
#[test]
fn oversized_line_in_a_large_insert_file_is_named_and_counted() {
    let (dir, st) = small_store("bigline.tags");
    let p = s(&st);
    let big = format!("{}\tisa\tbig!\n", "o".repeat(65_537));
    let text = format!("{}{big}{}", tags_tsv("t", 30_000), tags_tsv("u", 10));
    let ins = write_file(dir.path(), "ins.tsv", text);
    let o = run(&["insert", p, "--file", s(&ins)]);
    fails(
        &o,
        &[
            "line 30001:",
            "a string of the tag has 65537 bytes",
            "at most 65536 bytes each",
            "30000 tags inserted before it",
        ],
    );
    assert_eq!(export_lines(&st).len(), 30_000);
    ok(run(&["check", p]));
}

/// Regression: `delete --file` of 16,384 lines or more (the bulk path)
/// holding an oversized line panicked (exit 101) and left the store with
/// an unfinished bulk round; the plan left the line out but read the
/// encoded tags by line position. Now every other line is deleted and the
/// oversized one counts as absent.
#[test]
fn a_large_delete_file_with_an_oversized_line_deletes_the_rest() {
    let (dir, st) = store_with_tags("bigdel", 20_000);
    let mut text = tags_tsv("t", 20_000);
    let at = text.len() / 2;
    let at = at + text[at..].find('\n').expect("a line break") + 1;
    text.insert_str(
        at,
        // A string past `MAX_STRING_BYTES`: a tag no store can hold.
        &format!("{}\tisa\t{}\n", "x".repeat(65_537), "y".repeat(100)),
    );
    let del = write_file(dir.path(), "del.tsv", text);
    let o = ok(run(&["delete", s(&st), "--file", s(&del)]));
    let out = stdout(&o);
    assert!(
        out.contains("deleted 20000 tags (1 already absent)"),
        "{out}"
    );
    assert!(export_lines(&st).is_empty());
    ok(run(&["check", s(&st)]));
}

/// Case: `cluster reshard`, `repair` and `cloud` printed nothing for
/// minutes on a large cluster (each reads every node's keys and members);
/// they now show the step under way and the node, within the terminal.
#[test]
fn cluster_tools_say_which_step_runs() {
    for width in [40u16, 80, 200] {
        let drawn = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let term = FakeTerm {
            width,
            drawn: drawn.clone(),
        };
        let bar = progress::cluster_step(indicatif::ProgressDrawTarget::term_like(Box::new(term)));
        bar.set_message("node n1 (2/3): reading the members of 1234 keys");
        bar.force_draw();
        let lines = drawn.lock().map(|d| d.clone()).unwrap_or_default();
        let last = lines.last().cloned().unwrap_or_default();
        assert!(last.contains("node n1 (2/3)"), "width {width}: {last:?}");
        if width >= 80 {
            assert!(last.contains("1234 keys"), "width {width}: {last:?}");
        }
        for l in &lines {
            assert!(l.chars().count() <= width as usize, "width {width}: {l:?}");
        }
    }
}

/// Regression (a review's): an input of nothing but a byte order mark (as
/// some tools export an empty table) was refused as a blank line, where an
/// empty file loads nothing.
#[test]
fn a_file_of_only_a_bom_loads_nothing() {
    let (dir, st) = small_store("bomonly.tags");
    let f = write_file(dir.path(), "bom.tsv", "\u{feff}");
    let out = stdout(&ok(run(&["insert", s(&st), "--file", s(&f)])));
    assert!(out.starts_with("inserted 0 tags"), "{out}");
    assert!(export_lines(&st).is_empty());
    // A BOM and a line end is still a blank line.
    let f = write_file(dir.path(), "bomnl.tsv", "\u{feff}\n");
    fails(&run(&["insert", s(&st), "--file", s(&f)]), &["blank line"]);
}

/// Regression (a review's): a create killed before it wrote its superblock
/// leaves a file of zeros that every command refused as not a store, and
/// `create` as existing, without a word on what it was.
#[test]
fn a_file_of_zeros_gets_the_killed_create_hint() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("z.tags");
    File::create(&p).unwrap().set_len(1 << 20).unwrap();
    let hint = "a `tagstore create` killed before it finished";
    fails(&run(&["stats", s(&p)]), &["not a tagstore file", hint]);
    fails(&run(&["create", s(&p)]), &[hint]);
    // A file of other bytes gets no such hint.
    let q = write_file(dir.path(), "x.tags", "x".repeat(8192));
    let e = fails(&run(&["stats", s(&q)]), &["not a tagstore file"]);
    assert!(!e.contains(hint), "{e}");
}

/// Regression (a review's): `create --expected-tags` near the 8 TiB bound
/// was accepted on a machine whose memory its bucket tables would nearly
/// fill at every open (18.6 GB, 48 s to create, 108 s for one FIND on 24
/// GB). Past half the machine's memory it is refused, nothing created.
#[test]
fn a_size_whose_tables_pass_half_the_memory_is_refused() {
    // SAFETY: sysconf reads a system value.
    let ram = unsafe {
        libc::sysconf(libc::_SC_PHYS_PAGES) as u64 * libc::sysconf(libc::_SC_PAGESIZE) as u64
    };
    // The largest size allowed: 257 M buckets a half, about 19 GB of tables.
    let (tags, tables) = (18_000_000_000u64, 257_142_858u64 * 2 * 37);
    if tables <= ram / 2 {
        eprintln!("skipped: this machine has {ram} bytes of memory");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("huge.tags");
    let e = fails(
        &run(&["create", s(&p), "--expected-tags", &tags.to_string()]),
        &["invalid argument", "bucket tables", "let the store grow"],
    );
    assert!(e.contains("more than half of this machine's"), "{e}");
    assert!(
        std::fs::read_dir(dir.path()).unwrap().next().is_none(),
        "a file was made"
    );
    // The refusal gives the largest size that fits (a review's: it said
    // only "fewer"); one tag more is refused, that size is not.
    let most: u64 = e
        .split("at most ")
        .nth(1)
        .and_then(|t| t.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no largest size in: {e}"));
    assert!(most < tags, "{e}");
    fails(
        &run(&["create", s(&p), "--expected-tags", &(most + 1).to_string()]),
        &["bucket tables"],
    );
    // (Not created: a store of that size would take half the memory to
    // open. A size within it passes the check and fails on nothing else
    // here but disk space, which a sparse file does not need.)
    let small = most / 1000;
    ok(run(&[
        "create",
        s(&p),
        "--expected-tags",
        &small.to_string(),
    ]));
}

/// Regression (a review's): a bare `--wait` before the command name, or
/// before the store, took the next word as its value (`tagstore --wait
/// insert S …`: `unrecognized subcommand 'S'`; `insert --wait S …`:
/// `invalid value 'S' for '--wait'`). A bare `--wait` now stands anywhere.
#[test]
fn a_bare_wait_stands_anywhere() {
    let (_dir, st) = small_store("wait.tags");
    let p = s(&st);
    ok(run(&["--wait", "insert", p, "a", "r", "b"]));
    ok(run(&["insert", "--wait", p, "a", "r", "c"]));
    ok(run(&["insert", p, "a", "r", "d", "--wait"]));
    ok(run(&["--wait", "0.5", "insert", p, "a", "r", "e"]));
    let found = stdout(&ok(run(&[
        "find",
        "--wait",
        p,
        "--object",
        "a",
        "--relationship",
        "r",
    ])));
    assert_eq!(found, "b\nc\nd\ne\n");
    // A value that is not one is still refused where it is one.
    usage(
        &run(&[
            "find",
            p,
            "--wait=soon",
            "--object",
            "a",
            "--relationship",
            "r",
        ]),
        &["not a number of seconds"],
    );
    // Regression (a review's): `--wait 1e20` (past what a duration holds)
    // was taken for a command name, and `--wait -1` for a stray option.
    // The first waits without limit; the second is refused as a wait.
    ok(run(&["--wait", "1e20", "insert", p, "a", "r", "f"]));
    // A word that parses as a number but is not written as one (`nan`,
    // `infinity`) is not taken for a wait: it may be a store's name.
    fails(
        &run(&["insert", "--wait", "nan", "a", "r", "f"]),
        &["nan: no such store file"],
    );
    usage(
        &run(&["--wait", "-1", "insert", p, "a", "r", "g"]),
        &["--wait", "a wait cannot be negative"],
    );
}

/// Regression (a review's): on a nearly full disk, `insert --file` of a
/// file larger than the room left inserted nothing: the store's growth
/// for the whole file, asked for up front, failed before the first tag.
/// That growth is only a head start now: the load goes on tag by tag and
/// stops, with an exact count, where the disk does (here a file-size
/// limit of 4 MB, as a full disk).
#[test]
fn a_load_larger_than_the_disk_inserts_what_fits() {
    let dir = tempfile::tempdir().unwrap();
    let st = dir.path().join("grow.tags");
    ok(run(&["create", s(&st)]));
    let ins = write_file(
        dir.path(),
        "many.tsv",
        tags_tsv("object-with-a-longer-name-", 60_000),
    );
    let o = run_size_limited(&["insert", s(&st), "--file", s(&ins)], 4 << 20);
    let e = fails(&o, &["tags inserted before it"]);
    let n = inserted_before(&e);
    assert!(n > 1000, "only {n} tags went in: {e}");
    assert_eq!(export_lines(&st).len(), n, "{e}");
    ok(run(&["check", s(&st)]));
}
