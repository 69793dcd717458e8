//! `maintain`'s copy, from the tags its planner kept and from a second read.
//!
//! The planner's pass keeps the tags it reads when they fit one bulk
//! round, and the copy then inserts those instead of reading the store
//! again (`src/admin/maintain.rs`). Both ways must give the same store:
//! here a store with a peak, many small keys and deletes is maintained
//! once each way (the second with the keeping turned off by the test
//! hook), and each time its tags equal the model, FIND agrees with the
//! model in both directions, `check` is clean, and the two rewrites are
//! the same file, byte for byte.
//!
//! One test in its own binary: the hook is process-wide.

use std::collections::BTreeSet;
use std::path::Path;
use tagstore::testing::set_maintain_keep_max;
use tagstore::{CreateOptions, MaintainOptions, Store, Tag};

type Model = BTreeSet<(String, String, String)>;

/// A store of `n` tags, every third deleted: a peak subject, keys of a few
/// tags, and some Unicode.
fn build(path: &Path, n: u32) -> Model {
    let s = Store::create(
        path,
        &CreateOptions {
            seed: Some(7),
            ..Default::default()
        },
    )
    .expect("create");
    let mut model = Model::new();
    let mut all = Vec::new();
    for i in 0..n {
        let t = match i % 4 {
            0 => Tag::new(format!("photo-{i}"), "tagged", "sunset"),
            1 => Tag::new(
                format!("photo-{}", i / 8),
                "tagged",
                format!("thème-{}", i % 97),
            ),
            2 => Tag::new(format!("pkg/{i}"), "depends_on", format!("lib{}", i % 13)),
            _ => Tag::new(format!("f\t{i}"), "owned_by", format!("user{}", i % 500)),
        };
        all.push(t);
    }
    let (_, r) = s.insert_batch(&all);
    r.expect("insert");
    for (i, t) in all.iter().enumerate() {
        if i % 3 == 0 {
            assert!(s.delete(t).expect("delete"), "tag {i} was stored");
        } else {
            model.insert((t.object.clone(), t.relationship.clone(), t.subject.clone()));
        }
    }
    s.close().expect("close");
    model
}

/// The store's tags, FINDs and checks against `model`.
fn assert_matches(path: &Path, model: &Model, what: &str) {
    let s = Store::open_read_only(path).expect("open");
    let got: Model = s
        .tags()
        .map(|t| {
            let t = t.expect("export");
            (t.object, t.relationship, t.subject)
        })
        .collect();
    assert_eq!(&got, model, "{what}: the tags");
    for (o, r, sub) in model.iter().step_by(37) {
        let mut objects: Vec<String> = s.find_objects(sub, r).map(|x| x.expect("find")).collect();
        objects.sort();
        let want: Vec<String> = model
            .iter()
            .filter(|(_, r2, s2)| r2 == r && s2 == sub)
            .map(|(o2, _, _)| o2.clone())
            .collect();
        assert_eq!(objects, want, "{what}: FIND <*, {r}, {sub}>");
        let subjects: BTreeSet<String> = s.find_subjects(o, r).map(|x| x.expect("find")).collect();
        let want: BTreeSet<String> = model
            .iter()
            .filter(|(o2, r2, _)| o2 == o && r2 == r)
            .map(|(_, _, s2)| s2.clone())
            .collect();
        assert_eq!(subjects, want, "{what}: FIND <{o}, {r}, *>");
    }
    assert!(s.check().expect("check").ok(), "{what}: check");
}

#[test]
fn the_copy_from_kept_tags_equals_the_copy_that_reads_them_again() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (kept, reread) = (dir.path().join("kept.tags"), dir.path().join("reread.tags"));
    let model = build(&kept, 12_000);
    assert_eq!(build(&reread, 12_000), model);
    assert!(model.len() > 7_000, "the store holds {} tags", model.len());

    set_maintain_keep_max(usize::MAX);
    Store::maintain(&kept, &MaintainOptions::default(), |_, _| {}).expect("maintain, kept");
    assert_matches(&kept, &model, "tags kept by the planner");

    set_maintain_keep_max(0);
    let mut seen = Vec::new();
    Store::maintain(&reread, &MaintainOptions::default(), |d, t| {
        seen.push((d, t))
    })
    .expect("maintain, read again");
    assert_matches(&reread, &model, "tags read again");
    let total = model.len() as u64;
    assert_eq!(
        seen.last(),
        Some(&(total, total)),
        "progress reached the end"
    );

    let (a, b) = (
        std::fs::read(&kept).expect("read"),
        std::fs::read(&reread).expect("read"),
    );
    assert!(
        a == b,
        "the two rewrites differ ({} and {} bytes)",
        a.len(),
        b.len()
    );
}
