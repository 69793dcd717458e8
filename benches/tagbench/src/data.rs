//! Seeded synthetic tag sets: uniform objects, Zipf subjects, four relationships;
//! and the [`Dataset`] every row runs on, synthetic or loaded from a TSV file
//! (see `tsvdata.rs`).
//!
//! Every engine is fed the same `Vec<Tag>` in the same order, so the numbers
//! differ only by engine.

use crate::report::num;
use std::collections::{HashMap, HashSet};
use tagstore::testing::{bucket_of, key_hash};
use tagstore::{Half, Tag};

/// Relationships and how often each is drawn.
pub const RELS: [&str; 4] = ["isa", "owns", "owned_by", "located_in"];
/// Draw weights of [`RELS`].
pub const REL_WEIGHTS: [f64; 4] = [0.4, 0.3, 0.2, 0.1];
/// Zipf exponent of the subject distribution.
pub const ZIPF_S: f64 = 0.99;
/// Tags each planted rare key gets.
pub const RARE_TAGS: usize = 3;

/// SplitMix64: small, fast and reproducible on every platform.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        mix64(self.0)
    }
    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: usize) -> usize {
        ((self.next_u64() as u128 * n as u128) >> 64) as usize
    }
    /// Uniform in [0, 1).
    pub fn f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
    pub fn rel(&mut self) -> usize {
        let mut u = self.f64();
        for (i, w) in REL_WEIGHTS.iter().enumerate() {
            if u < *w {
                return i;
            }
            u -= w;
        }
        RELS.len() - 1
    }
}

pub fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Zipf over ranks `0..n` with exponent `s`, sampled by inverse CDF.
#[derive(Clone, Debug)]
pub struct Zipf {
    cdf: Vec<f64>,
}

impl Zipf {
    pub fn new(n: usize, s: f64) -> Self {
        let mut cdf = Vec::with_capacity(n);
        let mut acc = 0.0;
        for k in 1..=n {
            acc += 1.0 / (k as f64).powf(s);
            cdf.push(acc);
        }
        for c in cdf.iter_mut() {
            *c /= acc;
        }
        Zipf { cdf }
    }
    pub fn sample(&self, rng: &mut Rng) -> usize {
        let u = rng.f64();
        self.cdf
            .partition_point(|&c| c <= u)
            .min(self.cdf.len() - 1)
    }
}

const ALBUMS: &[&str] = &[
    "holiday",
    "family",
    "wedding-anna-and-tom",
    "garden",
    "misc",
    "trip-to-lisbon",
    "birthday-party",
    "hiking-the-alps-summer",
    "cats",
    "screenshots",
    "beach-weekend",
    "christmas",
    "new-york-conference-day-2",
    "kids",
    "road-trip-route-66",
    "renovation",
];

/// Popular subjects, most popular first; a few are not ASCII.
const WORDS: &[&str] = &[
    "sunset",
    "beach",
    "dog",
    "cat",
    "family",
    "nature",
    "sky",
    "日本の夕日",
    "travel",
    "food",
    "portrait",
    "mountains",
    "city",
    "night",
    "flowers",
    "café",
    "snow",
    "street",
    "architecture",
    "birthday",
    "wedding",
    "Zürich",
    "river",
    "forest",
    "concert",
    "car",
    "bridge",
    "lake",
    "москва",
    "black-and-white",
    "garden",
    "autumn",
    "spring",
    "summer",
    "winter",
    "kids",
    "selfie",
    "museum",
    "train",
    "Ελλάδα",
];

const UNICODE: &[&str] = &[
    "日本の夕日",
    "café",
    "Zürich",
    "Ελλάδα",
    "москва",
    "smørrebrød",
    "São-Paulo",
    "北京",
    "🌅",
    "München",
    "Kraków",
    "façade",
];

/// Object name of object number `i`, like `photo/2019/07/trip-to-lisbon/IMG_012345.jpg`.
pub fn object_name(i: usize) -> String {
    let h = mix64(i as u64 ^ 0x000B_1EC7);
    let year = 2001 + h % 24;
    let month = 1 + (h >> 8) % 12;
    let album = ALBUMS[((h >> 16) % ALBUMS.len() as u64) as usize];
    match (h >> 24) % 10 {
        0 => format!("video/{year}/{month:02}/{album}/VID_{i:06}.mp4"),
        1 => format!("scan/{year}/{album}/SCAN_{i:06}.png"),
        _ => format!("photo/{year}/{month:02}/{album}/IMG_{i:06}.jpg"),
    }
}

/// Subject name of Zipf rank `j` (0 is the most popular).
pub fn subject_name(j: usize) -> String {
    if j < WORDS.len() {
        return WORDS[j].to_string();
    }
    let h = mix64(j as u64 ^ 0x05AB_1EC7);
    let w = |k: u64| WORDS[(k % WORDS.len() as u64) as usize];
    if h.is_multiple_of(10) {
        format!(
            "{}-{j}",
            UNICODE[((h >> 8) % UNICODE.len() as u64) as usize]
        )
    } else {
        format!("{}-{}-{j}", w(h >> 8), w(h >> 24))
    }
}

/// How FIND keys and fresh tags pick their subject and relationship.
pub enum Draw {
    /// Synthetic: subject ranks Zipf, relationships by [`REL_WEIGHTS`].
    Zipf(Zipf),
    /// Loaded data: the (relationship index, subject index) of a uniformly
    /// drawn base tag, so keys come as often as they have tags.
    Tags(Vec<(u32, u32)>),
}

/// A data set: vocabularies, the load order, and the samplers.
pub struct Dataset {
    /// Seed of the load order and of the planted keys.
    pub seed: u64,
    /// Where the data came from, for the report (`synthetic` or a path).
    pub source: String,
    /// Relationships; index 0 is the one the planted rare keys use.
    pub rels: Vec<String>,
    /// Object vocabulary (FIND by object in the mix draws from it uniformly).
    pub objects: Vec<String>,
    /// Subject vocabulary.
    pub subjects: Vec<String>,
    /// How subjects and relationships are drawn.
    pub draw: Draw,
    /// Distinct tags in load order (random), without planted rare keys.
    pub base: Vec<Tag>,
    /// (rel index, subject index) -> tags, for picking rare and peak keys.
    pub subject_key_counts: HashMap<(u32, u32), u32>,
    /// Relationships of the mix's FIND by subject and FIND by object.
    pub mix_rels: (String, String),
}

impl Dataset {
    /// `n` distinct tags over `n/10` objects and `n/10` subjects.
    pub fn generate(n: usize, seed: u64) -> Dataset {
        let n_obj = (n / 10).max(1);
        let n_subj = (n / 10).max(WORDS.len());
        let objects: Vec<String> = (0..n_obj).map(object_name).collect();
        let subjects: Vec<String> = (0..n_subj).map(subject_name).collect();
        let zipf = Zipf::new(n_subj, ZIPF_S);
        let mut rng = Rng::new(seed);
        let want = n.saturating_sub(2 * RARE_TAGS);
        let mut seen: HashSet<(u32, u8, u32)> = HashSet::with_capacity(want);
        let mut base = Vec::with_capacity(want);
        let mut counts: HashMap<(u32, u32), u32> = HashMap::new();
        while base.len() < want {
            let o = rng.below(n_obj) as u32;
            let r = rng.rel() as u8;
            let s = zipf.sample(&mut rng) as u32;
            if seen.insert((o, r, s)) {
                *counts.entry((r as u32, s)).or_default() += 1;
                base.push(Tag::new(
                    objects[o as usize].as_str(),
                    RELS[r as usize],
                    subjects[s as usize].as_str(),
                ));
            }
        }
        Dataset {
            seed,
            source: "synthetic".into(),
            rels: RELS.iter().map(|r| r.to_string()).collect(),
            objects,
            subjects,
            draw: Draw::Zipf(zipf),
            base,
            subject_key_counts: counts,
            mix_rels: ("isa".into(), "owns".into()),
        }
    }

    /// File-ownership shape (like a distribution's file lists): `n` tags,
    /// each a distinct file path owned by one package, relationship
    /// `owned_by`; `n` × 63,000 / 5,000,000 packages (at least 1,000)
    /// drawn Zipf(0.75), so the largest owns about 1.6 % of the files at 5 M
    /// tags (79 k). FIND keys are drawn from the tags, as for loaded data.
    pub fn generate_files(n: usize, seed: u64) -> Dataset {
        const DIRS: [&str; 6] = [
            "usr/share/doc",
            "usr/lib/x86_64-linux-gnu",
            "usr/share/locale/de/LC_MESSAGES",
            "usr/include",
            "usr/share/man/man3",
            "etc",
        ];
        let n_subj = (n as u64 * 63_000 / 5_000_000).max(1_000) as usize;
        let subjects: Vec<String> = (0..n_subj).map(subject_name).collect();
        let zipf = Zipf::new(n_subj, 0.75);
        let mut rng = Rng::new(seed);
        let want = n.saturating_sub(2 * RARE_TAGS);
        let mut base = Vec::with_capacity(want);
        let mut objects = Vec::with_capacity(want);
        let mut keys = Vec::with_capacity(want);
        let mut counts: HashMap<(u32, u32), u32> = HashMap::new();
        for i in 0..want {
            let s = zipf.sample(&mut rng);
            let h = mix64(i as u64 ^ 0xF11E);
            let dir = DIRS[(h % DIRS.len() as u64) as usize];
            let ext = ["so", "h", "gz", "mo", "conf"][((h >> 16) % 5) as usize];
            let mut object = format!(
                "/{dir}/{}/{}/file-{i:07}.{ext}",
                subjects[s],
                ALBUMS[((h >> 8) % ALBUMS.len() as u64) as usize],
            );
            if 4 + object.len() + "owned_by".len() + subjects[s].len() > tagstore::SLOT_SIZE {
                // A long package name: a shorter path, so the tag fits a slot.
                object = format!("/{dir}/file-{i:07}.{ext}");
            }
            *counts.entry((0, s as u32)).or_default() += 1;
            keys.push((0u32, s as u32));
            base.push(Tag::new(object.as_str(), "owned_by", subjects[s].as_str()));
            objects.push(object);
        }
        Dataset {
            seed,
            source: "files (synthetic file ownership)".into(),
            rels: vec!["owned_by".into()],
            objects,
            subjects,
            draw: Draw::Tags(keys),
            base,
            subject_key_counts: counts,
            mix_rels: ("owned_by".into(), "owned_by".into()),
        }
    }

    /// Every distinct (subject, relationship) key of the base tags once, in
    /// an order shuffled by `seed` (FIND by subject of every key).
    pub fn every_subject_key(&self, seed: u64) -> Vec<(&str, &str)> {
        let mut keys: Vec<(&str, &str)> = self
            .subject_key_counts
            .keys()
            .map(|&(r, s)| {
                (
                    self.subjects[s as usize].as_str(),
                    self.rels[r as usize].as_str(),
                )
            })
            .collect();
        keys.sort_unstable();
        let mut rng = Rng::new(seed);
        for i in (1..keys.len()).rev() {
            keys.swap(i, rng.below(i + 1));
        }
        keys
    }

    /// A subject index: Zipf for synthetic data, tag-weighted for loaded data.
    pub fn sample_subject(&self, rng: &mut Rng) -> usize {
        match &self.draw {
            Draw::Zipf(z) => z.sample(rng),
            Draw::Tags(k) => k[rng.below(k.len())].1 as usize,
        }
    }

    /// A relationship, weighted as in the data.
    pub fn sample_rel(&self, rng: &mut Rng) -> &str {
        match &self.draw {
            Draw::Zipf(_) => RELS[rng.rel()],
            Draw::Tags(k) => &self.rels[k[rng.below(k.len())].0 as usize],
        }
    }

    /// A (subject, relationship) key for FIND by subject: Zipf subject and
    /// independent relationship for synthetic data; the key of a uniformly
    /// drawn tag for loaded data.
    pub fn subject_query(&self, rng: &mut Rng) -> (&str, &str) {
        match &self.draw {
            Draw::Zipf(z) => {
                let s = z.sample(rng);
                (self.subjects[s].as_str(), RELS[rng.rel()])
            }
            Draw::Tags(k) => {
                let (r, s) = k[rng.below(k.len())];
                (self.subjects[s as usize].as_str(), &self.rels[r as usize])
            }
        }
    }

    /// One line describing the data, for the report.
    pub fn describe(&self, n_tags: usize, mean_len: f64) -> String {
        match &self.draw {
            Draw::Zipf(_) => format!(
                "{} tags ({mean_len:.1} bytes of strings on average), {} objects uniform, {} subjects \
                 Zipf({ZIPF_S}), relationships {:?} weighted {:?}; seed {}",
                num(n_tags as f64),
                num(self.objects.len() as f64),
                num(self.subjects.len() as f64),
                RELS,
                REL_WEIGHTS,
                self.seed
            ),
            Draw::Tags(_) => format!(
                "{} tags from {} ({mean_len:.1} bytes of strings on average), {} objects, {} subjects, \
                 relationships {:?}; load order shuffled with seed {}; FIND keys drawn from the tags",
                num(n_tags as f64),
                self.source,
                num(self.objects.len() as f64),
                num(self.subjects.len() as f64),
                self.rels,
                self.seed
            ),
        }
    }

    /// A fresh tag drawn from the same distributions (may already exist).
    pub fn random_tag(&self, rng: &mut Rng) -> Tag {
        let o = self.objects[rng.below(self.objects.len())].as_str();
        let r = self.sample_rel(rng).to_string();
        Tag::new(o, r, self.subjects[self.sample_subject(rng)].as_str())
    }

    /// Subject keys with 1..=3 tags, for "rare key" FINDs.
    pub fn rare_subject_keys(&self, rng: &mut Rng, k: usize) -> Vec<(String, String)> {
        let mut rare: Vec<(u32, u32)> = self
            .subject_key_counts
            .iter()
            .filter(|(_, &c)| (1..=3).contains(&c))
            .map(|(&k, _)| k)
            .collect();
        rare.sort_unstable();
        (0..k)
            .map(|_| {
                let (r, s) = rare[rng.below(rare.len())];
                (
                    self.rels[r as usize].clone(),
                    self.subjects[s as usize].clone(),
                )
            })
            .collect()
    }

    /// The base tags with two planted rare subject keys, for a store of
    /// `buckets` primary buckets per half and hash seed `store_seed`:
    /// one whose subject-half primary bucket is the bucket of the biggest
    /// peak key, one in a bucket that stays below `capacity` slots.
    pub fn with_plants(&self, store_seed: u64, buckets: u32, capacity: u32) -> (Vec<Tag>, Plants) {
        let bucket = |rel: &str, name: &str| {
            bucket_of(key_hash(store_seed, Half::Subject, rel, name), buckets)
        };
        let mut loads = vec![0u32; buckets as usize];
        for t in &self.base {
            loads[bucket(&t.relationship, &t.subject) as usize] += 1;
        }
        // The biggest peak: the most frequent (rel, subject) key.
        let (&(pr, ps), &peak_tags) = self
            .subject_key_counts
            .iter()
            .max_by_key(|(k, &c)| (c, std::cmp::Reverse(**k)))
            .expect("data set is not empty");
        let peak_rel = self.rels[pr as usize].clone();
        let peak_subject = self.subjects[ps as usize].clone();
        let peak_bucket = bucket(&peak_rel, &peak_subject);
        let rel = self.rels[0].as_str();
        let pick = |tag: &str, ok: &dyn Fn(u32) -> bool| -> (String, u32) {
            (0u64..)
                .map(|k| format!("rare-{tag}-{k}"))
                .map(|n| {
                    let b = bucket(rel, &n);
                    (n, b)
                })
                .find(|(_, b)| ok(*b))
                .expect("some name hashes there")
        };
        let (rare_peak, _) = pick("peak", &|b| b == peak_bucket);
        let (rare_quiet, quiet_bucket) = pick("quiet", &|b| {
            b != peak_bucket && loads[b as usize] + RARE_TAGS as u32 <= capacity / 2
        });
        let mut rng = Rng::new(self.seed ^ 0x91A7);
        let mut tags = self.base.clone();
        for name in [&rare_peak, &rare_quiet] {
            for _ in 0..RARE_TAGS {
                let o = &self.objects[rng.below(self.objects.len())];
                let at = rng.below(tags.len() + 1);
                tags.insert(at, Tag::new(o.as_str(), rel, name.as_str()));
            }
        }
        let plants = Plants {
            rel: rel.to_string(),
            peak_rel,
            peak_subject,
            peak_tags,
            peak_bucket,
            peak_bucket_load: loads[peak_bucket as usize] + RARE_TAGS as u32,
            rare_peak,
            quiet_bucket,
            quiet_bucket_load: loads[quiet_bucket as usize] + RARE_TAGS as u32,
            rare_quiet,
        };
        (tags, plants)
    }
}

/// The two planted rare keys of a load order.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Plants {
    pub rel: String,
    pub peak_rel: String,
    pub peak_subject: String,
    pub peak_tags: u32,
    pub peak_bucket: u32,
    pub peak_bucket_load: u32,
    pub rare_peak: String,
    pub quiet_bucket: u32,
    pub quiet_bucket_load: u32,
    pub rare_quiet: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_fit_and_are_distinct() {
        let objs: HashSet<String> = (0..20_000).map(object_name).collect();
        assert_eq!(objs.len(), 20_000);
        let subs: HashSet<String> = (0..20_000).map(subject_name).collect();
        assert_eq!(subs.len(), 20_000);
        let longest = objs.iter().map(|s| s.len()).max().unwrap_or(0);
        assert!(longest <= 60, "{longest}");
        assert!(subs.iter().any(|s| !s.is_ascii()));
    }

    #[test]
    fn dataset_is_reproducible_and_planted() {
        let a = Dataset::generate(5_000, 7);
        let b = Dataset::generate(5_000, 7);
        assert_eq!(a.base, b.base);
        let (tags, p) = a.with_plants(42, 50, 100);
        assert_eq!(tags.len(), 5_000);
        assert_eq!(tags.iter().filter(|t| t.subject == p.rare_peak).count(), 3);
        assert!(tags.iter().all(|t| t.encoded_len() <= tagstore::SLOT_SIZE));
    }
}
