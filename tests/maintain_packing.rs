//! Plain `maintain` packs a store into the geometry of the smallest file
//! for its tags (bucket count, primary and secondary bucket sizes) and
//! records a split allowance so that the packed store does not split on
//! the next inserts; it grows again as usual once it has grown past it.
//!
//! Regression: maintain sized every store at 70 % primary fill with 64 KB
//! secondary buckets, so a store of skewed keys (most tags in a few large
//! keys) was rewritten to about 540 B per live tag apparent on real data
//! (npm) and 645 on file-ownership data; and a store packed fuller than the
//! split fill would have split on its very next insert, appending a whole
//! primary segment.

mod common;

use common::store::{assert_check_ok, assert_finds, serial, Rng};
use std::collections::BTreeSet;
use std::path::Path;
use tagstore::testing::planned_geometry;
use tagstore::{CreateOptions, Geometry, MaintainOptions, Stats, Store, Tag};

/// Skewed tags: objects unique-ish, subjects Zipf (a few huge keys).
fn skewed(n: usize, seed: u64, prefix: &str) -> Vec<Tag> {
    let mut rng = Rng::new(seed);
    (0..n)
        .map(|i| {
            let s = rng.zipf(2_000);
            Tag::new(
                format!("{prefix}/pkg-{}/file-{i:07}", rng.below(50_000)),
                "owned_by",
                format!("package-{s}"),
            )
        })
        .collect()
}

fn stats(path: &Path) -> Stats {
    Store::open_read_only(path)
        .and_then(|s| s.stats())
        .expect("stats")
}

fn maintain(path: &Path, o: &MaintainOptions) {
    Store::maintain(path, o, |_, _| {}).expect("maintain");
}

/// A grown store of 40,000 skewed tags with every other one deleted.
fn half_deleted(dir: &Path, name: &str) -> (std::path::PathBuf, BTreeSet<Tag>) {
    let path = dir.join(name);
    let s = Store::create(&path, &CreateOptions::default()).expect("create");
    let tags = skewed(40_000, 7, "usr");
    for c in tags.chunks(1000) {
        s.insert_batch(c).1.expect("insert");
    }
    let gone: Vec<Tag> = tags.iter().step_by(2).cloned().collect();
    s.delete_batch(&gone).1.expect("delete");
    s.close().expect("close");
    let model = tags.iter().skip(1).step_by(2).cloned().collect();
    (path, model)
}

#[test]
fn plain_maintain_writes_a_smaller_file_than_the_fixed_fill() {
    let _serial = serial();
    let dir = tempfile::tempdir().expect("tempdir");
    let (a, model) = half_deleted(dir.path(), "packed.tags");
    let b = dir.path().join("fixed.tags");
    std::fs::copy(&a, &b).expect("copy");
    let live = model.len() as u64;

    maintain(&a, &MaintainOptions::default());
    // The geometry of every earlier build: 70 % fill, default bucket sizes.
    let fixed = Geometry::for_expected_tags(live);
    maintain(
        &b,
        &MaintainOptions {
            geometry: Some(fixed),
            ..Default::default()
        },
    );
    let (pa, pb) = (stats(&a), stats(&b));
    assert_eq!(pb.geometry, fixed);
    assert!(
        (pa.file_bytes as f64) < 0.9 * pb.file_bytes as f64,
        "packed {} bytes ({:?}), fixed fill {} bytes",
        pa.file_bytes,
        pa.geometry,
        pb.file_bytes
    );
    assert!(pa.allocated_bytes <= pb.allocated_bytes + 64 * 1024);
    // Denser than the split fill, so the store carries an allowance.
    assert!(pa.growth.split_allowance > 0, "{:?}", pa.growth);
    let s = Store::open(&a).expect("open");
    assert_finds(&s, &model, "after packing");
    assert_check_ok(&s, "after packing");
}

#[test]
fn a_packed_store_takes_new_tags_before_it_splits_then_grows() {
    let _serial = serial();
    let dir = tempfile::tempdir().expect("tempdir");
    let (path, mut model) = half_deleted(dir.path(), "grow.tags");
    let plan = {
        let s = Store::open_read_only(&path).expect("open");
        planned_geometry(&s, &MaintainOptions::default()).expect("plan")
    };
    maintain(&path, &MaintainOptions::default());
    let packed = stats(&path);
    assert_eq!(packed.geometry, plan, "the copy split");
    assert!(packed.growth.split_allowance > 0);
    let len0 = packed.file_bytes;

    // 2 % more tags, one call each, across a reopen: no split, no segment.
    let more = skewed(400, 99, "opt");
    {
        let s = Store::open(&path).expect("open");
        for t in &more[..200] {
            s.insert(t).expect("insert");
            model.insert(t.clone());
        }
    }
    let s = Store::open(&path).expect("reopen");
    for t in &more[200..] {
        s.insert(t).expect("insert");
        model.insert(t.clone());
    }
    let st = s.stats().expect("stats");
    assert_eq!(st.geometry, plan, "split within the headroom");
    assert_eq!(
        (
            st.growth.level,
            st.growth.split_pointer,
            st.growth.primary_segments
        ),
        (0, 0, 1)
    );
    assert!(
        st.file_bytes < len0 + len0 / 4,
        "{} -> {}",
        len0,
        st.file_bytes
    );

    // Well past it the store grows by splits again, losing nothing.
    for c in skewed(30_000, 5, "var").chunks(997) {
        for t in c {
            s.insert(t).expect("insert");
            model.insert(t.clone());
        }
    }
    let st = s.stats().expect("stats");
    assert!(
        st.growth.split_pointer > 0 || st.growth.level > 0,
        "never split: {:?}",
        st.growth
    );
    assert_eq!(st.growth.split_allowance, packed.growth.split_allowance);
    assert_finds(&s, &model, "after growing from a packed store");
    assert_check_ok(&s, "after growing from a packed store");
}
