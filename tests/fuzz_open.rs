//! Fuzzing the open-and-read path with proptest: random mutations of real store
//! images (the v1 format fixture and the corrupt-image corpus in
//! `fixtures/corrupt/`) must give an error or a store that reads consistently —
//! never a panic, a hang, or a FIND that silently disagrees with `tags()`.
//!
//! `TAGSTORE_FUZZ_CASES` raises the case count for long runs.

use proptest::prelude::*;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use tagstore::{Store, Tag};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures")
        .join(name)
}

/// Seed images: the format fixture plus every file in fixtures/corrupt/.
fn corpus() -> Vec<Vec<u8>> {
    let mut out = vec![std::fs::read(fixture("format-v1.tags")).expect("format fixture")];
    if let Ok(dir) = std::fs::read_dir(fixture("corrupt")) {
        let mut paths: Vec<PathBuf> = dir.filter_map(|e| e.ok().map(|e| e.path())).collect();
        paths.sort();
        for p in paths {
            out.push(std::fs::read(&p).expect("corpus file"));
        }
    }
    out
}

#[derive(Clone, Debug)]
enum Mutation {
    /// XOR one byte.
    Flip(usize, u8),
    /// Overwrite a run of bytes with one value.
    Fill(usize, usize, u8),
    /// Cut the file.
    Truncate(usize),
    /// Copy one 4 KB block over another.
    CopyBlock(usize, usize),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        6 => (any::<usize>(), 1u8..=255).prop_map(|(a, b)| Mutation::Flip(a, b)),
        2 => (any::<usize>(), 1usize..600, any::<u8>()).prop_map(|(a, n, v)| Mutation::Fill(a, n, v)),
        1 => any::<usize>().prop_map(Mutation::Truncate),
        1 => (any::<usize>(), any::<usize>()).prop_map(|(a, b)| Mutation::CopyBlock(a, b)),
    ]
}

fn apply(img: &mut Vec<u8>, m: &Mutation) {
    if img.is_empty() {
        return;
    }
    let n = img.len();
    match *m {
        Mutation::Flip(at, x) => img[at % n] ^= x,
        Mutation::Fill(at, len, v) => {
            let at = at % n;
            let end = (at + len).min(n);
            img[at..end].fill(v);
        }
        Mutation::Truncate(at) => img.truncate(at % n),
        Mutation::CopyBlock(a, b) => {
            let blocks = n / 4096;
            if blocks >= 2 {
                let (a, b) = (a % blocks, b % blocks);
                let src = img[a * 4096..(a + 1) * 4096].to_vec();
                img[b * 4096..(b + 1) * 4096].copy_from_slice(&src);
            }
        }
    }
}

/// Opens and reads everything; any inconsistency is returned as a message.
fn exercise(path: &Path, writable: bool) -> Result<(), String> {
    let opened = if writable {
        Store::open(path)
    } else {
        Store::open_read_only(path)
    };
    let Ok(store) = opened else {
        return Ok(()); // a clean error is an acceptable outcome
    };
    let mut tags = BTreeSet::new();
    for t in store.tags() {
        match t {
            Ok(t) => {
                tags.insert(t);
            }
            Err(_) => return Ok(()), // reported damage is acceptable
        }
    }
    // Every tag read must be found by both FIND forms, and each FIND must
    // return only tags that `tags()` saw (or an error).
    for t in tags.iter().take(64) {
        for (found, want, what) in [
            (
                store
                    .find_subjects(&t.object, &t.relationship)
                    .collect::<Result<Vec<_>, _>>(),
                &t.subject,
                "subject",
            ),
            (
                store
                    .find_objects(&t.subject, &t.relationship)
                    .collect::<Result<Vec<_>, _>>(),
                &t.object,
                "object",
            ),
        ] {
            let Ok(found) = found else { continue };
            if !found.contains(want) {
                // Only acceptable if check() reports the damage.
                let faults = store.check().map(|r| r.faults).unwrap_or_default();
                if faults.is_empty() {
                    return Err(format!(
                        "FIND lost the {what} of {t:?} and check() saw nothing"
                    ));
                }
            }
            for f in &found {
                let back = match what {
                    "subject" => Tag::new(&t.object, &t.relationship, f),
                    _ => Tag::new(f, &t.relationship, &t.subject),
                };
                if !tags.contains(&back) {
                    let faults = store.check().map(|r| r.faults).unwrap_or_default();
                    if faults.is_empty() {
                        return Err(format!(
                            "FIND returned {back:?}, unknown to tags(), and check() saw nothing"
                        ));
                    }
                }
            }
        }
    }
    let _ = store.stats();
    let _ = store.check();
    if writable {
        let _ = store.insert(&Tag::new("fuzz", "isa", "after"));
        let _ = store.close();
    }
    Ok(())
}

fn cases() -> u32 {
    std::env::var("TAGSTORE_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(64)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    #[test]
    fn mutated_images_never_panic(
        pick in any::<usize>(),
        muts in proptest::collection::vec(mutation(), 1..6),
        writable in any::<bool>(),
    ) {
        let corpus = corpus();
        let mut img = corpus[pick % corpus.len()].clone();
        for m in &muts {
            apply(&mut img, m);
        }
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("fuzz.tags");
        std::fs::write(&path, &img).expect("write");
        let r = std::panic::catch_unwind(|| exercise(&path, writable));
        match r {
            Err(_) => prop_assert!(false, "panic on mutations {:?}", muts),
            Ok(Err(m)) => prop_assert!(false, "{} (mutations {:?})", m, muts),
            Ok(Ok(())) => {}
        }
    }
}

/// Every file of the checked-in corrupt corpus opens to an error or a
/// consistent store, never a panic.
#[test]
fn corpus_files_never_panic() {
    let dir = fixture("corrupt");
    let entries = std::fs::read_dir(&dir).expect("fixtures/corrupt exists");
    let mut n = 0;
    for e in entries {
        let p = e.expect("entry").path();
        let tmp = tempfile::tempdir().expect("tempdir");
        let path = tmp.path().join("c.tags");
        std::fs::copy(&p, &path).expect("copy");
        for writable in [false, true] {
            let r = std::panic::catch_unwind(|| exercise(&path, writable));
            assert!(matches!(r, Ok(Ok(()))), "{}: {r:?}", p.display());
        }
        n += 1;
    }
    assert!(
        n >= 4,
        "the corrupt corpus should hold several images, found {n}"
    );
}
