//! Tags longer than a slot through the CLI (README "Limits"): `insert
//! --file` of long paths and long Unicode, single `insert`, `find` both
//! ways, `export` round trip, `delete`, `check`, `maintain`, and a string
//! past 65,536 bytes named by its line.

mod common;

use common::cli::{
    export_lines, fails, ok, run, run_in, s, small_store, stdout, tsv_line, write_file,
};

/// Sorted lines of a `find`'s output.
fn found(args: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = stdout(&ok(run(args))).lines().map(str::to_owned).collect();
    v.sort();
    v
}

#[test]
fn long_tags_load_find_export_and_maintain() {
    let (dir, st) = small_store("long.tags");
    let p = s(&st);
    let deep = format!(
        "/usr/lib/python3/dist-packages/{}",
        "very_long_module_name/".repeat(10)
    );
    let mut lines = Vec::new();
    let mut want = Vec::new();
    for i in 0..200 {
        let object = format!("{deep}file_{i}.py");
        let subject = if i % 10 == 0 {
            format!("パッケージ{}", "名".repeat(40))
        } else {
            format!("python3-pkg{}", i % 13)
        };
        lines.push(tsv_line(&object, "owned_by", &subject));
        want.push((object, subject));
    }
    // A tab and a newline inside a long string survive the escapes.
    let odd = format!("{}\twith tab\nand newline", "x".repeat(200));
    lines.push(tsv_line(&odd, "isa", "odd"));
    let file = write_file(dir.path(), "long.tsv", lines.join("\n") + "\n");
    let o = ok(run(&["insert", p, "--file", s(&file)]));
    assert!(
        stdout(&o).starts_with("inserted 201 tags"),
        "{}",
        stdout(&o)
    );

    let (object, subject) = &want[10];
    assert_eq!(
        found(&["find", p, "--object", object, "--relationship", "owned_by"]),
        std::slice::from_ref(subject)
    );
    let mut objects: Vec<String> = want
        .iter()
        .filter(|(_, sub)| sub == subject)
        .map(|(o, _)| o.clone())
        .collect();
    objects.sort();
    assert_eq!(
        found(&[
            "find",
            p,
            "--subject",
            subject,
            "--relationship",
            "owned_by"
        ]),
        objects
    );
    let mut exported = lines.clone();
    exported.sort();
    assert_eq!(export_lines(&st), exported, "export round trip");

    // A single insert and delete of a long tag.
    let one = "y".repeat(500);
    assert_eq!(
        stdout(&ok(run(&["insert", p, &one, "isa", "z"]))),
        "inserted\n"
    );
    assert_eq!(
        found(&["find", p, "--subject", "z", "--relationship", "isa"]),
        std::slice::from_ref(&one)
    );
    assert_eq!(
        stdout(&ok(run(&["delete", p, &one, "isa", "z"]))),
        "deleted\n"
    );
    ok(run(&["check", p]));
    ok(run(&["maintain", p]));
    assert_eq!(export_lines(&st), exported, "after maintain");
    ok(run(&["check", p]));
}

#[test]
fn a_string_past_the_limit_is_named_by_its_line() {
    let (_dir, st) = small_store("big.tags");
    let p = s(&st);
    let big = "b".repeat(65_537);
    let input = format!("a\tb\tc\n{big}\tisa\tx\nd\te\tf\n");
    let o = run_in(&["insert", p, "--file", "-"], input.as_bytes());
    fails(
        &o,
        &[
            "line 2:",
            "65537 bytes",
            "65536",
            "1 tags inserted before it",
        ],
    );
    let o = run_in(
        &["insert", p, "--file", "-", "--skip-bad"],
        input.as_bytes(),
    );
    let o = ok(o);
    assert!(stdout(&o).contains("1 bad lines skipped"), "{}", stdout(&o));
    assert_eq!(export_lines(&st), ["a\tb\tc", "d\te\tf"]);
}
