//! `insert --file --skip-bad` and `delete --file --skip-bad`: a line that
//! is not a valid tag (malformed, not UTF-8, with a string longer than a
//! store takes, far longer than any tag's line) is named on stderr and
//! skipped, every other line is applied, and the summary counts the
//! skipped ones. Without the flag the first such line stops the load, as
//! before.
//!
//! Like tests/cli.rs, these tests never open a store through the library.

mod common;

use common::cli::{
    export_lines, fails, ok, run, s, small_store, stderr, stdout, usage, write_file,
};

/// Bytes of the longest string a tag may hold (`tagstore::MAX_STRING_BYTES`).
const MAX_STRING: usize = 65_536;
/// Bytes of the longest line a tag may need (`tagstore::tsv::MAX_LINE_BYTES`).
const MAX_LINE: usize = 393_220;

/// A tag line (no line break) whose object is one byte longer than a
/// string may hold.
fn long_tag() -> String {
    format!("{}\tisa\tthing", "o".repeat(MAX_STRING + 1))
}

/// Good lines `g0..g{n}` with bad lines of every kind among them (at
/// least 8, the kinds in turn), and the good lines alone (sorted, as
/// `export` prints them).
fn mixed(n: usize) -> (Vec<u8>, Vec<String>) {
    let long_tag = long_tag() + "\n";
    let far_too_long = format!("{}\n", "y".repeat(MAX_LINE + 1));
    let bad: [&[u8]; 6] = [
        long_tag.as_bytes(),
        b"only\ttwo\n",
        b"\xff\xfe\tisa\tthing\n",
        b"\n",
        b"esc\\q\tisa\tthing\n",
        far_too_long.as_bytes(),
    ];
    let mut text = Vec::new();
    let mut good = Vec::new();
    let mut kind = 0;
    for i in 0..n {
        let line = format!("g{i}\tisa\tthing{}", i % 5);
        text.extend_from_slice(line.as_bytes());
        text.push(b'\n');
        good.push(line);
        if i % (n / 12).max(4) == 3 {
            text.extend_from_slice(bad[kind % bad.len()]);
            kind += 1;
        }
    }
    good.sort();
    (text, good)
}

/// Bad lines the text of [`mixed`] holds.
fn bad_count(text: &[u8], good: usize) -> usize {
    text.split(|&b| b == b'\n').count() - 1 - good
}

#[test]
fn bad_lines_are_named_skipped_and_counted() {
    for n in [40, 30_000] {
        let (dir, st) = small_store("skip.tags");
        let (text, good) = mixed(n);
        let bad = bad_count(&text, n);
        assert!(bad >= 8, "the input holds bad lines: {bad}");
        let f = write_file(dir.path(), "in.tsv", &text);
        let o = ok(run(&["insert", s(&st), "--file", s(&f), "--skip-bad"]));
        let out = stdout(&o);
        assert!(
            out.contains(&format!(
                "inserted {n} tags (0 already present) from {} lines, {bad} bad lines skipped",
                n + bad
            )),
            "{out}"
        );
        let err = stderr(&o);
        let named = err.lines().filter(|l| l.ends_with("; skipped")).count();
        assert_eq!(named, bad.min(10), "{err}");
        if bad > 10 {
            assert!(
                err.contains(&format!("{} more bad lines skipped", bad - 10)),
                "{err}"
            );
        }
        assert_eq!(export_lines(&st), good, "n = {n}");
        ok(run(&["check", s(&st)]));
    }
}

/// Each kind of bad line is named with its line number and what is wrong
/// with it; a tag longer than a slot (refused before long strings) is not
/// bad and is stored.
#[test]
fn each_kind_of_bad_line_is_named_with_its_line_number() {
    let (dir, st) = small_store("kinds.tags");
    let mut text = b"a\tisa\tb\n".to_vec();
    text.extend_from_slice(format!("b\tisa\t{}\n", "x".repeat(MAX_STRING + 1)).as_bytes());
    text.extend_from_slice(b"only\ttwo\n\xff\tisa\tb\n");
    text.extend_from_slice(&vec![b'z'; 2 * MAX_LINE + 1]);
    text.extend_from_slice(b"\nc\tisa\td\n");
    let wide = format!("{}\tisa\tb", "x".repeat(200));
    text.extend_from_slice(format!("{wide}\n").as_bytes());
    let f = write_file(dir.path(), "in.tsv", &text);
    let o = ok(run(&["insert", s(&st), "--file", s(&f), "--skip-bad"]));
    let err = stderr(&o);
    for needle in [
        "line 2: a string of the tag has 65537 bytes; a tag's strings may hold at most 65536 bytes each; skipped",
        "line 3: expected 3 tab-separated fields",
        "line 4: line is not valid UTF-8",
        "line 5: line is longer than 393220 bytes",
    ] {
        assert!(err.contains(needle), "{needle}: {err}");
    }
    // The line after the far too long one is read whole, not its tail.
    assert_eq!(export_lines(&st), vec!["a\tisa\tb", "c\tisa\td", &wide]);
    assert!(stdout(&o).contains("from 7 lines, 4 bad lines skipped"));
}

#[test]
fn without_the_flag_the_first_bad_line_stops_the_load() {
    let (dir, st) = small_store("stop.tags");
    let (text, _) = mixed(40);
    let f = write_file(dir.path(), "in.tsv", &text);
    let o = run(&["insert", s(&st), "--file", s(&f)]);
    fails(
        &o,
        &[
            "line 5: a string of the tag has 65537 bytes",
            "; with --skip-bad such lines are skipped;",
            "4 tags inserted before it",
        ],
    );
    assert_eq!(export_lines(&st).len(), 4);
}

#[test]
fn delete_skips_malformed_lines_and_deletes_the_rest() {
    let (dir, st) = small_store("del.tags");
    let (text, good) = mixed(40);
    let f = write_file(dir.path(), "in.tsv", &text);
    ok(run(&["insert", s(&st), "--file", s(&f), "--skip-bad"]));
    assert_eq!(export_lines(&st), good);
    let o = ok(run(&["delete", s(&st), "--file", s(&f), "--skip-bad"]));
    let out = stdout(&o);
    // A tag with an oversized string is not bad input to a delete: it is
    // absent.
    let long_tag = long_tag();
    let long = text
        .split(|&b| b == b'\n')
        .filter(|l| *l == long_tag.as_bytes())
        .count();
    assert!(long > 0);
    let bad = bad_count(&text, 40) - long;
    assert!(
        out.contains(&format!("deleted 40 tags ({long} already absent)")),
        "{out}"
    );
    assert!(out.contains(&format!("{bad} bad lines skipped")), "{out}");
    assert!(export_lines(&st).is_empty());
}

#[test]
fn skip_bad_needs_a_file() {
    let (_dir, st) = small_store("usage.tags");
    usage(
        &run(&["insert", s(&st), "--skip-bad", "a", "isa", "b"]),
        &["--skip-bad"],
    );
    assert!(export_lines(&st).is_empty());
}
