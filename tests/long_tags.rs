//! Tags longer than a slot (format 3, DESIGN.md §3.7): a tag whose strings
//! pass 156 bytes holds its long strings by reference in `STORE.strings`.
//! Against a `BTreeSet<Tag>` model, with strings around every boundary of
//! the rule (48 and 156 bytes, U+FFFF at the start, multi-byte UTF-8):
//! INSERT, DELETE, batches, both FINDs (iterator and visitor), `contains`,
//! counts, export, reopens (clean, unclean, read-only), injected crashes
//! (writes failing mid-call, then an unclean reopen) and `check`; then
//! the bulk path, `maintain`, the format number, a lost strings file and
//! the limit on one string.

mod common;

use proptest::prelude::*;
use std::collections::BTreeSet;
use std::path::Path;
use tagstore::{CreateOptions, Error, MaintainOptions, OpenOptions, Store, Tag, MAX_STRING_BYTES};

/// Strings on both sides of each boundary of the rule.
fn pool() -> Vec<String> {
    vec![
        String::new(),
        "a".into(),
        "日本".into(),
        "x\ty\nz".into(),
        "p".repeat(48),
        "q".repeat(49),
        "é".repeat(30),
        "/usr/share/doc/".to_string() + &"long-package-name/".repeat(6) + "README.md",
        "r".repeat(156),
        "s".repeat(157),
        "夕日".repeat(100),
        "t".repeat(2000),
        "\u{FFFF}".into(),
        "\u{FFFF}x".into(),
        "\u{FFFF}".to_string() + &"y".repeat(200),
    ]
}

fn rels() -> Vec<String> {
    vec![
        "isa".into(),
        String::new(),
        "owned_by".into(),
        "relationship-".repeat(5),
        "\u{FFFF}rel".into(),
    ]
}

#[derive(Clone, Debug)]
enum Op {
    Insert(Tag),
    Delete(Tag),
    InsertBatch(Vec<Tag>),
    DeleteBatch(Vec<Tag>),
    Reopen {
        clean: bool,
    },
    ReadOnly,
    /// The store's writes fail after `n` more (a crash mid-call), then an
    /// unclean reopen: the tag is whole in both halves or absent.
    Crash {
        insert: bool,
        tag: Tag,
        n: u64,
    },
}

fn tag() -> impl Strategy<Value = Tag> {
    let (p, r) = (pool(), rels());
    (
        proptest::sample::select(p.clone()),
        prop_oneof![6 => Just("isa".to_string()), 2 => proptest::sample::select(r)],
        proptest::sample::select(p),
    )
        .prop_map(|(o, r, s)| Tag::new(o, r, s))
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        30 => tag().prop_map(Op::Insert),
        10 => tag().prop_map(Op::Delete),
        4 => proptest::collection::vec(tag(), 1..30).prop_map(Op::InsertBatch),
        2 => proptest::collection::vec(tag(), 1..20).prop_map(Op::DeleteBatch),
        2 => any::<bool>().prop_map(|clean| Op::Reopen { clean }),
        1 => Just(Op::ReadOnly),
        4 => (any::<bool>(), tag(), 0u64..6).prop_map(|(insert, tag, n)| Op::Crash { insert, tag, n }),
    ]
}

fn tiny(seed: u64) -> CreateOptions {
    CreateOptions {
        expected_tags: 10,
        primary_buckets_per_half: Some(2),
        blocks_per_primary: Some(1),
        blocks_per_secondary: Some(1),
        seed: Some(seed),
    }
}

fn sorted(it: impl Iterator<Item = tagstore::Result<String>>, what: &str) -> Vec<String> {
    let mut v: Vec<String> = it
        .collect::<Result<_, _>>()
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    v.sort();
    v
}

/// Every FIND of every key the model can name, both directions and both
/// forms, plus the counts, against the model.
fn agree(store: &Store, model: &BTreeSet<Tag>) {
    assert_eq!(store.len(), model.len() as u64, "len");
    let mut keys: BTreeSet<(String, String)> = BTreeSet::new();
    for t in model {
        keys.insert((t.object.clone(), t.relationship.clone()));
        keys.insert((t.subject.clone(), t.relationship.clone()));
    }
    for s in pool() {
        keys.insert((s, "isa".into()));
    }
    for (name, r) in &keys {
        let subjects: Vec<String> = model
            .iter()
            .filter(|t| &t.object == name && &t.relationship == r)
            .map(|t| t.subject.clone())
            .collect();
        let objects: Vec<String> = model
            .iter()
            .filter(|t| &t.subject == name && &t.relationship == r)
            .map(|t| t.object.clone())
            .collect();
        let what = format!("find_subjects({:.40?}, {r:.20?})", name);
        assert_eq!(
            sorted(store.find_subjects(name, r), &what),
            subjects,
            "{what}"
        );
        let what = format!("find_objects({:.40?}, {r:.20?})", name);
        assert_eq!(
            sorted(store.find_objects(name, r), &what),
            objects,
            "{what}"
        );
        let mut seen = Vec::new();
        let n = store
            .for_each_object(name, r, |o| seen.push(o.to_owned()))
            .expect("visitor");
        seen.sort();
        assert_eq!(
            (n as usize, seen),
            (objects.len(), objects.clone()),
            "{what} by visitor"
        );
        assert_eq!(
            store.count(name, r).expect("count"),
            objects.len() as u64,
            "count({:.40?}, {r:.20?})",
            name
        );
    }
    for t in model {
        assert!(store.contains(t).expect("contains"), "contains {t:.60?}");
    }
    let mut all: Vec<Tag> = store.tags().collect::<Result<_, _>>().expect("export");
    all.sort();
    assert_eq!(all, model.iter().cloned().collect::<Vec<_>>(), "export");
}

fn run(ops: Vec<Op>, seed: u64) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("long.tags");
    let mut store = Some(Store::create(&path, &tiny(seed)).expect("create"));
    let mut model = BTreeSet::new();
    for op in ops {
        let s = store.as_ref().expect("open");
        match op {
            Op::Insert(t) => {
                let fresh = model.insert(t.clone());
                assert_eq!(s.insert(&t).expect("insert"), fresh, "insert {t:.80?}");
            }
            Op::Delete(t) => {
                let had = model.remove(&t);
                assert_eq!(s.delete(&t).expect("delete"), had, "delete {t:.80?}");
            }
            Op::InsertBatch(ts) => {
                let (_, r) = s.insert_batch(&ts);
                r.expect("insert_batch");
                model.extend(ts);
            }
            Op::DeleteBatch(ts) => {
                let (_, r) = s.delete_batch(&ts);
                r.expect("delete_batch");
                for t in &ts {
                    model.remove(t);
                }
            }
            Op::Reopen { clean } => {
                let s = store.take().expect("open");
                if clean {
                    s.close().expect("close");
                } else {
                    s.abandon();
                }
                store = Some(Store::open(&path).expect("reopen"));
            }
            Op::Crash { insert, tag, n } => {
                s.fail_after_writes(Some(n));
                let r = if insert {
                    s.insert(&tag)
                } else {
                    s.delete(&tag)
                };
                let in_flight = match r {
                    Ok(changed) => {
                        let was = model.contains(&tag);
                        assert_eq!(changed, was != insert, "{tag:.60?}");
                        if insert {
                            model.insert(tag.clone());
                        } else {
                            model.remove(&tag);
                        }
                        false
                    }
                    Err(e) => {
                        assert!(matches!(e, Error::Io { .. }), "{e:?}");
                        true
                    }
                };
                store.take().expect("open").abandon();
                let s = Store::open(&path).expect("reopen after a crash");
                if in_flight {
                    // Either outcome, but whole: `agree` checks both FINDs.
                    if s.contains(&tag).expect("contains") {
                        model.insert(tag.clone());
                    } else {
                        model.remove(&tag);
                    }
                }
                agree(&s, &model);
                store = Some(s);
            }
            Op::ReadOnly => {
                store.take().expect("open").close().expect("close");
                let ro = Store::open_read_only(&path).expect("read-only open");
                agree(&ro, &model);
                drop(ro);
                store = Some(Store::open(&path).expect("reopen"));
            }
        }
    }
    let s = store.take().expect("open");
    agree(&s, &model);
    let report = s.check().expect("check");
    assert!(report.ok(), "{:?}", report.faults);
    s.close().expect("close");
}

#[test]
fn long_tags_against_a_model() {
    let mut runner = common::prop::runner(48);
    runner
        .run(
            &(proptest::collection::vec(op(), 1..60), any::<u64>()),
            |(ops, seed)| {
                run(ops, seed);
                Ok(())
            },
        )
        .expect("model");
}

/// The first tags of a batch of `n`, one in 7 with a long object.
fn batch(n: usize) -> Vec<Tag> {
    (0..n)
        .map(|i| {
            let object = if i % 7 == 0 {
                format!("/srv/{}/file-{i}", "deep/".repeat(40))
            } else {
                format!("file-{i}")
            };
            let subject = if i % 11 == 0 {
                format!("{}-{}", "pkg".repeat(60), i % 50)
            } else {
                format!("pkg-{}", i % 97)
            };
            Tag::new(object, "owned_by", subject)
        })
        .collect()
}

fn version_of(path: &Path) -> u32 {
    let b = std::fs::read(path).expect("read");
    u32::from_le_bytes([b[8], b[9], b[10], b[11]])
}

/// A copy in `dir` of the format-2 store `fixtures/NAME`.
fn format_2_fixture(dir: &Path, name: &str) -> std::path::PathBuf {
    let path = dir.join(name);
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures")
        .join(name);
    std::fs::copy(&fixture, &path).expect("copy fixture");
    assert_eq!(version_of(&path), 2);
    path
}

/// `maintain` of the closed store at `path`, then a reopen that agrees
/// with `model`, checks clean and is format 3 (strings by reference).
fn maintain_agrees_as_format_3(path: &Path, model: &BTreeSet<Tag>) {
    Store::maintain(path, &MaintainOptions::default(), |_, _| {}).expect("maintain");
    let store = Store::open(path).expect("open");
    agree(&store, model);
    assert!(store.check().expect("check").ok());
    store.close().expect("close");
    assert_eq!(version_of(path), 3, "rewritten with references");
}

fn strings_of(path: &Path) -> std::path::PathBuf {
    let mut p = path.as_os_str().to_owned();
    p.push(".strings");
    p.into()
}

/// The bulk path (a batch of 16,384 tags or more) holds long strings as
/// the single INSERT does, and counts them by their whole strings.
#[test]
fn a_bulk_load_and_delete_of_long_tags_agree_with_single_finds() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("bulk.tags");
    let store = Store::create(&path, &CreateOptions::default()).expect("create");
    let tags = batch(40_000);
    let (out, r) = store.insert_batch(&tags);
    r.expect("bulk insert");
    assert_eq!(out.changed, 40_000);
    let mut model: BTreeSet<Tag> = tags.iter().cloned().collect();
    let (_, r) = store.delete_batch(tags.iter().step_by(2));
    r.expect("bulk delete");
    for t in tags.iter().step_by(2) {
        model.remove(t);
    }
    assert_eq!(store.len(), model.len() as u64);
    for t in tags.iter().take(2000) {
        assert_eq!(
            store.contains(t).expect("contains"),
            model.contains(t),
            "{t:.60?}"
        );
        let want = model
            .iter()
            .filter(|m| m.subject == t.subject && m.relationship == t.relationship)
            .count() as u64;
        assert_eq!(store.count(&t.subject, "owned_by").expect("count"), want);
        let got = sorted(store.find_objects(&t.subject, "owned_by"), "find_objects").len();
        assert_eq!(got as u64, want);
    }
    let mut all: Vec<Tag> = store.tags().collect::<Result<_, _>>().expect("export");
    all.sort();
    assert_eq!(all, model.iter().cloned().collect::<Vec<_>>());
    assert!(store.check().expect("check").ok());
    store.close().expect("close");
    assert_eq!(
        version_of(&path),
        3,
        "a store with long strings is format 3"
    );
}

/// A store that never held a long tag stays format 2 (older builds read
/// it); `maintain` keeps long tags and drops the strings no tag uses.
#[test]
fn maintain_keeps_long_tags_and_drops_unused_strings() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("m.tags");
    let store = Store::create(&path, &CreateOptions::default()).expect("create");
    store
        .insert(&Tag::new("short", "isa", "tag"))
        .expect("insert");
    store.close().expect("close");
    assert_eq!(version_of(&path), 2);
    assert!(!strings_of(&path).exists());

    let store = Store::open(&path).expect("open");
    let tags = batch(300);
    let (_, r) = store.insert_batch(&tags);
    r.expect("insert");
    let gone: Vec<&Tag> = tags
        .iter()
        .filter(|t| t.object.len() > 156)
        .take(20)
        .collect();
    for t in &gone {
        assert!(store.delete(t).expect("delete"));
    }
    store.close().expect("close");
    let before = std::fs::metadata(strings_of(&path)).expect("strings").len();
    Store::maintain(&path, &MaintainOptions::default(), |_, _| {}).expect("maintain");
    let after = std::fs::metadata(strings_of(&path)).expect("strings").len();
    assert!(
        after < before,
        "maintain keeps only used strings: {before} -> {after}"
    );
    let store = Store::open(&path).expect("open");
    for t in &tags {
        let want = !gone.contains(&t);
        assert_eq!(store.contains(t).expect("contains"), want, "{t:.60?}");
    }
    let long: Vec<Tag> = tags
        .iter()
        .filter(|t| !gone.contains(t) && t.encoded_len() > 160)
        .cloned()
        .collect();
    assert!(!long.is_empty());
    for t in &long {
        let subjects = sorted(store.find_subjects(&t.object, "owned_by"), "find_subjects");
        assert_eq!(subjects, std::slice::from_ref(&t.subject));
    }
    // Every long tag deleted: the next maintain removes the strings file
    // and the store is format 2 again.
    let (_, r) = store.delete_batch(&long);
    r.expect("delete");
    store.close().expect("close");
    Store::maintain(&path, &MaintainOptions::default(), |_, _| {}).expect("maintain");
    assert!(!strings_of(&path).exists(), "no tag uses a long string");
    assert_eq!(version_of(&path), 2);
    let store = Store::open(&path).expect("open");
    assert!(store.check().expect("check").ok());
}

/// A lost strings file is named by `check` and by the FIND that needs it,
/// never a panic or a reference passed off as a string.
#[test]
fn a_lost_strings_file_is_reported_not_guessed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("lost.tags");
    let store = Store::create(&path, &CreateOptions::default()).expect("create");
    let long = "L".repeat(400);
    store
        .insert(&Tag::new("o", "isa", long.as_str()))
        .expect("insert");
    store
        .insert(&Tag::new("o", "isa", "short"))
        .expect("insert");
    store.close().expect("close");
    std::fs::remove_file(strings_of(&path)).expect("remove");
    let store = Store::open_read_only(&path).expect("open");
    let r: Result<Vec<String>, _> = store.find_subjects("o", "isa").collect();
    // The error says the file is missing, not only that a string is
    // (regression: it read as one string lost from a sound file).
    assert!(
        matches!(&r, Err(Error::Corrupt(m)) if m.contains("missing, empty or damaged")),
        "{r:?}"
    );
    // The long key's tags are still found: their other strings are whole
    // (regression: with the map empty, no other form was searched and the
    // FIND answered nothing).
    assert_eq!(
        sorted(store.find_objects(&long, "isa"), "find_objects"),
        ["o".to_string()]
    );
    assert!(store
        .contains(&Tag::new("o", "isa", long.as_str()))
        .expect("contains"));
    let report = store.check().expect("check");
    assert!(
        report.faults.iter().any(|f| f.contains("strings file")),
        "{:?}",
        report.faults
    );
    // `check` names the missing file once, besides each slot that needs it.
    let missing = format!("{}: holds no string", strings_of(&path).display());
    assert_eq!(
        report
            .faults
            .iter()
            .filter(|f| f.starts_with(&missing))
            .count(),
        1,
        "{:?}",
        report.faults
    );
    let tags: Result<Vec<Tag>, _> = store.tags().collect();
    assert!(matches!(tags, Err(Error::Corrupt(_))));
    drop(store);
    // A salvage keeps what it can: the tag whose string is lost is left
    // out, and counted (regression: left out without a word).
    let store = Store::open_salvage(&path, &OpenOptions::default()).expect("salvage open");
    let mut it = store.salvaged_tags();
    let tags: Vec<Tag> = (&mut it).collect::<Result<_, _>>().expect("salvaged tags");
    assert_eq!(tags, [Tag::new("o", "isa", "short")]);
    assert_eq!(it.lost_to_strings(), 1);
}

/// Regression: with the strings file gone, a writable open made a new
/// empty one on the next long INSERT, after which the store no longer
/// knew strings were lost and a FIND by a long key answered nothing. Now
/// the open remembers the loss: a new long string is refused by name,
/// short tags still go in, and a long key's tags are still found.
#[test]
fn a_lost_strings_file_is_not_replaced_by_a_new_one() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("gone.tags");
    let store = Store::create(&path, &CreateOptions::default()).expect("create");
    let (mid, rel, long) = ("M".repeat(100), "R".repeat(100), "L".repeat(400));
    // Keys of 49..=156 bytes (stored as references here, as they are in
    // a tag that fits) and longer than a slot (references only).
    store
        .insert(&Tag::new("o5", rel.as_str(), mid.as_str()))
        .expect("insert");
    store
        .insert(&Tag::new(long.as_str(), "isa", "short"))
        .expect("insert");
    assert_eq!(store.stats().expect("stats").growth.format_version, 3);
    store.close().expect("close");
    std::fs::remove_file(strings_of(&path)).expect("remove");
    for round in 0..2 {
        let store = Store::open(&path).expect("open");
        match store.insert(&Tag::new("x", "isa", "N".repeat(300))) {
            Err(Error::Corrupt(m)) => assert!(m.contains("missing"), "{m}"),
            other => panic!("round {round}: expected Corrupt, got {other:?}"),
        }
        assert!(!strings_of(&path).exists(), "no new strings file");
        assert!(store
            .insert(&Tag::new("x", "isa", format!("y{round}")))
            .expect("short"));
        assert_eq!(
            sorted(store.find_subjects(&long, "isa"), "find_subjects"),
            ["short".to_string()]
        );
        assert_eq!(
            sorted(store.find_objects(&mid, &rel), "find_objects"),
            ["o5".to_string()]
        );
        let r: Result<Vec<String>, _> = store.find_objects("short", "isa").collect();
        assert!(matches!(r, Err(Error::Corrupt(_))), "{r:?}");
        store.close().expect("close");
    }
}

/// Regression: a strings file that lost its last strings whole (cut at a
/// record's end, as a file system may leave it after a power cut in mode
/// `none`) hid the tags of a key longer than a slot whose string was
/// among them: FIND searched a reference only when the file held it.
#[test]
fn a_key_longer_than_a_slot_is_found_when_its_string_is_lost() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("cut.tags");
    let store = Store::create(&path, &CreateOptions::default()).expect("create");
    let (a, b) = ("A".repeat(200), "B".repeat(200));
    store
        .insert(&Tag::new(a.as_str(), "rel", "s1"))
        .expect("insert");
    let kept = std::fs::metadata(strings_of(&path)).expect("strings").len();
    store
        .insert(&Tag::new(b.as_str(), "rel", "s2"))
        .expect("insert");
    store.close().expect("close");
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(strings_of(&path))
        .expect("open strings");
    f.set_len(kept).expect("cut");
    drop(f);
    let store = Store::open_read_only(&path).expect("open");
    assert_eq!(
        sorted(store.find_subjects(&b, "rel"), "find_subjects"),
        ["s2".to_string()]
    );
    assert_eq!(
        sorted(store.find_subjects(&a, "rel"), "find_subjects"),
        ["s1".to_string()]
    );
    let r: Result<Vec<String>, _> = store.find_objects("s2", "rel").collect();
    assert!(matches!(r, Err(Error::Corrupt(_))), "{r:?}");
}

/// fixtures/format-v2-refshaped.tags: written by the last format-2 build
/// (`55411ae`: create --primary-buckets 2 --blocks-per-primary 1
/// --blocks-per-secondary 1 --seed 29, then insert --file) with strings
/// of a reference's exact shape (U+FFFF and 21 characters of its
/// alphabet). Regression: such a string was taken for a lost reference,
/// so export, FIND, `check` and `maintain` failed; in a store that never
/// held a long string nothing is a reference.
#[test]
fn reference_shaped_strings_of_a_format_2_store_are_read_as_written() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = format_2_fixture(dir.path(), "format-v2-refshaped.tags");
    let (a, b) = (
        format!("\u{FFFF}{}", "A".repeat(21)),
        "\u{FFFF}B-_0123456789abcdefgh".to_string(),
    );
    let model: BTreeSet<Tag> = [
        Tag::new("obj", "rel", a.as_str()),
        Tag::new(b.as_str(), "isa", "plain"),
        Tag::new("other", "rel", "plain"),
    ]
    .into_iter()
    .collect();
    let store = Store::open_read_only(&path).expect("open");
    agree(&store, &model);
    assert!(store.check().expect("check").ok());
    drop(store);
    maintain_agrees_as_format_3(&path, &model);
}

/// A string past the limit is refused by name and changes nothing.
#[test]
fn a_string_past_the_limit_is_refused_and_changes_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("big.tags");
    let store = Store::create(&path, &CreateOptions::default()).expect("create");
    let big = Tag::new("o".repeat(MAX_STRING_BYTES + 1), "isa", "s");
    match store.insert(&big) {
        Err(Error::TagTooLarge { needed, limit }) => {
            assert_eq!((needed, limit), (MAX_STRING_BYTES + 1, MAX_STRING_BYTES))
        }
        other => panic!("expected TagTooLarge, got {other:?}"),
    }
    assert_eq!(store.len(), 0);
    assert!(!strings_of(&path).exists());
    assert!(!store.delete(&big).expect("delete"));
    let most = Tag::new("o".repeat(MAX_STRING_BYTES), "isa", "s");
    assert!(store.insert(&most).expect("insert"));
    assert_eq!(
        sorted(store.find_objects("s", "isa"), "find_objects"),
        std::slice::from_ref(&most.object)
    );
}

/// fixtures/format-v2-marked.tags: written by the last format-2 build
/// (`55411ae`: create --primary-buckets 2 --blocks-per-primary 1
/// --blocks-per-secondary 1 --seed 29, then insert --file) with strings
/// that start with U+FFFF, which that build stored as they are and this
/// one stores by reference. Both FINDs, `contains`, DELETE and counts find
/// them as written, new tags of such strings sit beside them, and
/// `maintain` rewrites them as references.
#[test]
fn strings_starting_with_uffff_from_a_format_2_store_are_found_and_rewritten() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = format_2_fixture(dir.path(), "format-v2-marked.tags");
    let m = |s: &str| format!("\u{FFFF}{s}");
    let old = [
        Tag::new(m("marked"), "isa", "plain"),
        Tag::new("plain", "isa", m("subject")),
        Tag::new("other", m("rel"), "x"),
        Tag::new("ordinary", "isa", "plain"),
    ];
    let store = Store::open(&path).expect("open");
    let mut model: BTreeSet<Tag> = old.iter().cloned().collect();
    agree(&store, &model);
    // Inserting a tag stored the old way changes nothing, by every path
    // (regression: the reference form was inserted beside it, twice).
    assert!(!store.insert(&old[0]).expect("insert again"));
    let (out, r) = store.insert_batch(std::slice::from_ref(&old[1]));
    r.expect("batch");
    assert_eq!((out.changed, out.unchanged), (0, 1));
    let many: Vec<Tag> = (0..20_000)
        .map(|i| Tag::new(format!("bulk{i}"), "bulk", "b"))
        .chain([old[0].clone(), old[2].clone()])
        .collect();
    let (out, r) = store.insert_batch(&many);
    r.expect("bulk batch");
    assert_eq!((out.changed, out.unchanged), (20_000, 2));
    model.extend(many);
    assert_eq!(store.len(), model.len() as u64);
    // A bulk DELETE removes a tag stored the old way too (regression: the
    // bulk path looked for the reference form only).
    let gone: Vec<Tag> = model
        .iter()
        .filter(|t| t.relationship == "bulk" || **t == old[1])
        .cloned()
        .collect();
    let (out, r) = store.delete_batch(&gone);
    r.expect("delete bulk");
    assert_eq!((out.changed, out.unchanged), (20_001, 0));
    for t in &gone {
        model.remove(t);
    }
    let new = Tag::new(m("new"), "isa", "plain");
    assert!(store.insert(&new).expect("insert"));
    model.insert(new.clone());
    agree(&store, &model);
    assert!(store.delete(&old[2]).expect("delete an old marked tag"));
    model.remove(&old[2]);
    agree(&store, &model);
    store.close().expect("close");
    maintain_agrees_as_format_3(&path, &model);
    let strings = std::fs::read(strings_of(&path)).expect("strings");
    let holds = |s: &str| strings.windows(s.len()).any(|w| w == s.as_bytes());
    assert!(holds(&m("marked")) && holds(&m("new")));
    assert!(!holds(&m("subject")), "its tag was deleted");
}

/// A format-1 store has no room for the strings flag: a long tag is
/// refused by name (maintain upgrades the store) and nothing changes.
#[test]
fn a_format_1_store_refuses_long_tags_and_stays_readable() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("v1.tags");
    let store = Store::create_format1(&path, &CreateOptions::default()).expect("create");
    store
        .insert(&Tag::new("short", "isa", "tag"))
        .expect("insert");
    let long = Tag::new("o".repeat(200), "isa", "tag");
    assert!(matches!(
        store.insert(&long),
        Err(Error::InvalidArgument(_))
    ));
    let many: Vec<Tag> = (0..20_000)
        .map(|i| Tag::new(format!("{i}{}", "p".repeat(200)), "isa", "tag"))
        .collect();
    let (_, r) = store.insert_batch(&many);
    assert!(matches!(r, Err(Error::InvalidArgument(_))), "{r:?}");
    assert_eq!(store.len(), 1);
    store.close().expect("close");
    assert_eq!(version_of(&path), 1);
    let store = Store::open(&path).expect("reopen");
    assert_eq!(store.len(), 1);
    assert!(store.check().expect("check").ok());
    store.close().expect("close");
    Store::maintain(&path, &MaintainOptions::default(), |_, _| {}).expect("maintain");
    let store = Store::open(&path).expect("open");
    assert!(store.insert(&long).expect("insert after maintain"));
    store.close().expect("close");
    assert_eq!(version_of(&path), 3);
}

/// Regression (a review, 2026-11-29): strings shaped as references (U+FFFF
/// and 21 digits) were searched as they are, and those bytes in a slot
/// are another string's reference: a FIND by the reference of a stored
/// long string returned that string's tags, and a DELETE of the tag made
/// of another tag's references deleted that other tag.
#[test]
fn strings_shaped_as_references_name_only_themselves() {
    use tagstore::testing::ref_of;
    let dir = tempfile::tempdir().expect("tempdir");
    let store =
        Store::create(dir.path().join("refs.tags"), &CreateOptions::default()).expect("create");
    let (o, s) = ("O".repeat(100), "S".repeat(100));
    let real = Tag::new(o.clone(), "r", s.clone());
    assert!(store.insert(&real).expect("insert"));
    let (ro, rs) = (ref_of(&o), ref_of(&s));
    assert_eq!(rs.len(), 24);
    let literal = Tag::new(ro.clone(), "r", rs.clone());
    // Nothing is stored under the references as strings.
    assert_eq!(store.for_each_object(&rs, "r", |_| {}).expect("find"), 0);
    assert_eq!(store.for_each_subject(&ro, "r", |_| {}).expect("find"), 0);
    assert_eq!(store.find_objects(&rs, "r").count(), 0);
    assert!(!store.contains(&literal).expect("contains"));
    assert!(
        !store.delete(&literal).expect("delete"),
        "deleted another tag"
    );
    assert!(store.contains(&real).expect("contains"));
    // Stored, the literal tag is a tag of its own, and each FINDs as itself.
    assert!(store.insert(&literal).expect("insert"));
    let objects = |name: &str| {
        let mut v = Vec::new();
        store
            .for_each_object(name, "r", |x| v.push(x.to_owned()))
            .expect("find");
        v
    };
    assert_eq!(objects(&rs), vec![ro.clone()]);
    assert_eq!(objects(&s), vec![o.clone()]);
    assert!(store.delete(&literal).expect("delete"));
    assert_eq!(objects(&s), vec![o]);
    assert_eq!(objects(&rs), Vec::<String>::new());
    assert!(store.contains(&real).expect("contains"));
}
