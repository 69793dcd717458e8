//! Half-only stores (a node behind a proxy, which receives each half of a
//! tag on its own): random one-half writes against a model of (half, tag)
//! pairs, across growth, clean and unclean reopens, `check` and `maintain`;
//! the counters count subject halves; one-half writes are refused on a
//! store that keeps whole tags.

use std::collections::BTreeSet;
use tagstore::{CreateOptions, Error, Half, MaintainOptions, Store, Tag};

type Model = BTreeSet<(u8, Tag)>;

fn half_byte(h: Half) -> u8 {
    match h {
        Half::Object => 0,
        Half::Subject => 1,
    }
}

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn tag(r: &mut Rng) -> Tag {
    let o = format!("obj{}", r.below(300));
    let s = ["sunset", "夕日", "t\tab", "dawn", "x"][r.below(5) as usize].to_string()
        + &r.below(20).to_string();
    Tag::new(o, ["isa", "has"][r.below(2) as usize], s)
}

/// Every key's FIND in each half, the length, `check`, and the counts of
/// subject halves agree with the model.
fn agree(s: &Store, m: &Model, when: &str) {
    assert_eq!(s.len(), m.len() as u64, "{when}: len (halves)");
    let r = s.check().expect("check");
    assert!(r.ok(), "{when}: check {:?}", r.faults);
    for (h, t) in m.iter().take(200) {
        let (half, name, want): (Half, &str, Vec<String>) = if *h == 0 {
            let mut w: Vec<String> = m
                .iter()
                .filter(|(x, u)| {
                    *x == 0 && u.object == t.object && u.relationship == t.relationship
                })
                .map(|(_, u)| u.subject.clone())
                .collect();
            w.sort();
            (Half::Object, &t.object, w)
        } else {
            let mut w: Vec<String> = m
                .iter()
                .filter(|(x, u)| {
                    *x == 1 && u.subject == t.subject && u.relationship == t.relationship
                })
                .map(|(_, u)| u.object.clone())
                .collect();
            w.sort();
            (Half::Subject, &t.subject, w)
        };
        let mut got: Vec<String> = match half {
            Half::Object => s.find_subjects(name, &t.relationship),
            Half::Subject => s.find_objects(name, &t.relationship),
        }
        .collect::<Result<_, _>>()
        .expect("find");
        got.sort();
        assert_eq!(
            got, want,
            "{when}: FIND in {half:?} of {name:?}/{}",
            t.relationship
        );
        assert!(s.contains_half(half, t).expect("contains_half"), "{when}");
    }
    for (_, t) in m.iter().filter(|(h, _)| *h == 1).take(50) {
        let n = m
            .iter()
            .filter(|(h, u)| *h == 1 && u.subject == t.subject && u.relationship == t.relationship)
            .count() as u64;
        assert_eq!(
            s.count(&t.subject, &t.relationship).expect("count"),
            n,
            "{when}: count"
        );
    }
    // Each tag once, whether one half or both are stored (a tag with both
    // halves came twice before: `export` printed it twice).
    let listed: Vec<Tag> = s.tags().collect::<Result<_, _>>().expect("tags");
    let want: BTreeSet<Tag> = m.iter().map(|(_, t)| t.clone()).collect();
    assert_eq!(
        listed.len(),
        want.len(),
        "{when}: tags() listed a tag twice"
    );
    assert_eq!(
        listed.into_iter().collect::<BTreeSet<_>>(),
        want,
        "{when}: tags()"
    );
    assert_eq!(r.tags, want.len() as u64, "{when}: check's distinct tags");
    assert_eq!(
        r.object_tags + r.subject_tags,
        m.len() as u64,
        "{when}: halves"
    );
}

#[test]
fn random_one_half_writes_match_the_model() {
    for seed in [1u64, 7, 99] {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("h.tags");
        let mut s = Store::create_half_only(
            &p,
            &CreateOptions {
                seed: Some(seed),
                ..Default::default()
            },
        )
        .expect("create");
        assert!(s.is_half_only());
        let mut r = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        let mut m = Model::new();
        for round in 0..4 {
            for _ in 0..1500 {
                let t = tag(&mut r);
                let h = if r.below(2) == 0 {
                    Half::Object
                } else {
                    Half::Subject
                };
                let key = (half_byte(h), t.clone());
                if r.below(4) == 0 {
                    assert_eq!(s.delete_half(h, &t).expect("delete_half"), m.remove(&key));
                } else {
                    assert_eq!(s.insert_half(h, &t).expect("insert_half"), m.insert(key));
                }
            }
            agree(&s, &m, &format!("seed {seed} round {round}"));
            s = match round % 3 {
                0 => {
                    s.close().expect("close");
                    Store::open(&p).expect("open")
                }
                1 => {
                    s.abandon();
                    let s = Store::open(&p).expect("open after a crash");
                    assert!(s.recovered_on_open());
                    s
                }
                _ => {
                    s.close().expect("close");
                    Store::maintain(&p, &MaintainOptions::default(), |_, _| {}).expect("maintain");
                    Store::open(&p).expect("open after maintain")
                }
            };
            assert!(s.is_half_only(), "the mode survives reopening and maintain");
            agree(&s, &m, &format!("seed {seed} round {round}, reopened"));
        }
        assert!(s.geometry().primary_buckets_per_half > 1, "it grew");
    }
}

#[test]
fn whole_tag_calls_on_a_half_only_store_write_both_halves() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = Store::create_half_only(dir.path().join("h.tags"), &CreateOptions::default())
        .expect("create");
    let t = Tag::new("photo1", "isa", "sunset");
    assert!(s.insert_half(Half::Object, &t).expect("insert_half"));
    assert!(!s.contains_half(Half::Subject, &t).expect("contains"));
    assert!(s.find_objects("sunset", "isa").next().is_none());
    assert!(
        s.insert(&t).expect("insert"),
        "the subject half was missing"
    );
    assert!(s.contains_half(Half::Subject, &t).expect("contains"));
    assert_eq!(s.len(), 2);
    assert!(s.delete(&t).expect("delete"));
    assert_eq!(s.len(), 0);
    assert!(s.check().expect("check").ok());
}

#[test]
fn one_half_writes_are_refused_on_a_whole_tag_store() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = Store::create(dir.path().join("w.tags"), &CreateOptions::default()).expect("create");
    let t = Tag::new("a", "isa", "b");
    assert!(!s.is_half_only());
    assert!(matches!(
        s.insert_half(Half::Object, &t),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        s.delete_half(Half::Subject, &t),
        Err(Error::InvalidArgument(_))
    ));
    assert_eq!(s.len(), 0, "a refused call changes nothing");
}

/// `tagstore create --half-only` makes a half-only store sized as asked
/// (a node pre-sized for its share of a cluster); without the flag the
/// store keeps whole tags.
#[test]
fn the_cli_creates_a_half_only_store_of_the_size_asked() {
    let dir = tempfile::tempdir().expect("tempdir");
    let create = |name: &str, extra: &[&str]| {
        let path = dir.path().join(name);
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_tagstore"))
            .arg("create")
            .arg(&path)
            .args(["--expected-tags", "200000"])
            .args(extra)
            .output()
            .expect("run tagstore create");
        assert!(o.status.success(), "{o:?}");
        (path, String::from_utf8(o.stdout).expect("UTF-8"))
    };
    let (half, said) = create("h.tags", &["--half-only"]);
    assert!(said.trim_end().ends_with(", half-only"), "{said:?}");
    let s = Store::open(&half).expect("open");
    assert!(s.is_half_only());
    assert!(
        s.geometry().primary_buckets_per_half > 1,
        "sized, not grown"
    );
    let t = Tag::new("a", "isa", "b");
    assert!(s.insert_half(Half::Subject, &t).expect("insert a half"));
    let (whole, said) = create("w.tags", &[]);
    assert!(!said.contains("half-only"), "{said:?}");
    assert!(!Store::open(&whole).expect("open").is_half_only());
}
