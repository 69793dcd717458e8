//! Real data for tagbench: a TSV file of tags (the root crate's format,
//! `src/tsv.rs`) turned into the same [`Dataset`] the synthetic generator
//! makes, so every row runs on it.
//!
//! `--data npm` is `npm.tsv` in the tagbench cache, written by
//! `benches/tagbench/fetch-npm.sh`.

use crate::data::{Dataset, Draw, Rng};
use anyhow::{bail, Context, Result};
use std::collections::HashMap;
use std::io::BufRead;
use std::path::{Path, PathBuf};
use tagstore::Tag;

/// Most bytes of strings a tag of a data file may have: a peer's index key
/// (two lengths of up to 2 bytes and the three strings) must fit LMDB's
/// 511-byte keys. (Tags longer than tagstore's 156-byte slot are kept:
/// tagstore stores them by reference since format 3.)
pub const MAX_TEXT: usize = 500;

/// Where fetch-npm.sh caches its download and outputs:
/// `$TAGBENCH_CACHE`, else `$HOME/.cache/tagbench`.
pub fn cache_dir() -> Result<PathBuf> {
    if let Some(d) = std::env::var_os("TAGBENCH_CACHE").filter(|d| !d.is_empty()) {
        return Ok(PathBuf::from(d));
    }
    match std::env::var_os("HOME").filter(|d| !d.is_empty()) {
        Some(h) => Ok(PathBuf::from(h).join(".cache").join("tagbench")),
        None => bail!("neither TAGBENCH_CACHE nor HOME is set: cannot find the tagbench cache"),
    }
}

/// A file written by fetch-npm.sh (`npm.tsv`, `npm-names.txt`), or an error
/// telling the user to run it.
pub fn npm_file(name: &str) -> Result<PathBuf> {
    let p = cache_dir()?.join(name);
    if !p.is_file() {
        bail!(
            "{} not found: run benches/tagbench/fetch-npm.sh first (it fetches the npm package \
             all-the-package-repos into the cache, $TAGBENCH_CACHE or ~/.cache/tagbench)",
            p.display()
        );
    }
    Ok(p)
}

/// The TSV file a `--data` value names: `None` for `synthetic`, the cached
/// `npm.tsv` for `npm`, otherwise the value as a path.
pub fn resolve(spec: &str) -> Result<Option<PathBuf>> {
    match spec {
        "synthetic" | "files" => Ok(None),
        "npm" => npm_file("npm.tsv").map(Some),
        path => {
            let p = PathBuf::from(path);
            if !p.is_file() {
                bail!(
                    "--data {path}: no such file (expected synthetic, npm or a TSV file of tags)"
                );
            }
            Ok(Some(p))
        }
    }
}

/// What loading a TSV file kept and dropped.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct LoadReport {
    /// Non-empty lines read.
    pub lines: usize,
    /// Tags longer than the peers take (more than [`MAX_TEXT`] bytes of
    /// strings: LMDB's 511-byte keys), skipped.
    pub too_long: usize,
    /// Repeated tags, dropped.
    pub duplicates: usize,
    /// Distinct tags left after shuffling that `--tags` cut off.
    pub cut: usize,
    /// Tags kept.
    pub kept: usize,
}

/// Loads `path`, drops tags longer than [`MAX_TEXT`] and repeats, shuffles
/// the rest with `seed`, keeps the first `limit` (all when `None`) and
/// builds the data set.
pub fn load(path: &Path, seed: u64, limit: Option<usize>) -> Result<(Dataset, LoadReport)> {
    let f = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let mut rep = LoadReport::default();
    let mut tags: Vec<Tag> = Vec::new();
    for (i, line) in std::io::BufReader::with_capacity(1 << 20, f)
        .lines()
        .enumerate()
    {
        let line = line.with_context(|| format!("{}: reading line {}", path.display(), i + 1))?;
        if line.trim().is_empty() {
            continue;
        }
        rep.lines += 1;
        let t = tagstore::tsv::parse_line(&line)
            .map_err(|e| anyhow::anyhow!("{}:{}: {e}", path.display(), i + 1))?;
        if t.encoded_len() - 4 > MAX_TEXT {
            rep.too_long += 1;
            continue;
        }
        tags.push(t);
    }
    tags.sort_unstable();
    let before = tags.len();
    tags.dedup();
    rep.duplicates = before - tags.len();
    if tags.is_empty() {
        bail!("{}: no tags short enough for the peers", path.display());
    }
    // Fisher-Yates with the benchmark's seeded generator.
    let mut rng = Rng::new(seed);
    for i in (1..tags.len()).rev() {
        tags.swap(i, rng.below(i + 1));
    }
    if let Some(n) = limit {
        rep.cut = tags.len().saturating_sub(n);
        tags.truncate(n);
    }
    rep.kept = tags.len();
    Ok((from_tags(tags, seed, path.display().to_string()), rep))
}

/// Builds a data set over distinct `tags` already in load order.
pub fn from_tags(base: Vec<Tag>, seed: u64, source: String) -> Dataset {
    let mut rel_tags: HashMap<&str, usize> = HashMap::new();
    for t in &base {
        *rel_tags.entry(t.relationship.as_str()).or_default() += 1;
    }
    // Most frequent relationship first: the planted keys and the mix use it.
    let mut rels: Vec<(&str, usize)> = rel_tags.into_iter().collect();
    rels.sort_unstable_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    let rel_ix: HashMap<&str, u32> = rels
        .iter()
        .enumerate()
        .map(|(i, (r, _))| (*r, i as u32))
        .collect();
    let mut obj_ix: HashMap<&str, u32> = HashMap::new();
    let mut subj_ix: HashMap<&str, u32> = HashMap::new();
    let (mut objects, mut subjects) = (Vec::new(), Vec::new());
    let mut keys = Vec::with_capacity(base.len());
    let mut counts: HashMap<(u32, u32), u32> = HashMap::new();
    for t in &base {
        let n = obj_ix.len() as u32;
        obj_ix.entry(t.object.as_str()).or_insert_with(|| {
            objects.push(t.object.clone());
            n
        });
        let n = subj_ix.len() as u32;
        let s = *subj_ix.entry(t.subject.as_str()).or_insert_with(|| {
            subjects.push(t.subject.clone());
            n
        });
        let r = rel_ix[t.relationship.as_str()];
        keys.push((r, s));
        *counts.entry((r, s)).or_default() += 1;
    }
    let rels: Vec<String> = rels.into_iter().map(|(r, _)| r.to_string()).collect();
    let first = rels[0].clone();
    drop((obj_ix, subj_ix, rel_ix));
    Dataset {
        seed,
        source,
        mix_rels: (first.clone(), first),
        rels,
        objects,
        subjects,
        draw: Draw::Tags(keys),
        base,
        subject_key_counts: counts,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loads_skips_and_shuffles() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("t.tsv");
        let long = "x".repeat(MAX_TEXT);
        let mut text = String::new();
        for i in 0..50 {
            text.push_str(&format!("pkg{i}\towned_by\towner{}\n", i % 7));
        }
        text.push_str("pkg1\towned_by\towner1\n\n");
        text.push_str(&format!("{long}\towned_by\tx\n"));
        text.push_str("a\\tb\towned_by\t@scope\n");
        std::fs::write(&p, text).expect("write");
        let (ds, rep) = load(&p, 7, None).expect("load");
        assert_eq!(
            (rep.lines, rep.too_long, rep.duplicates, rep.kept),
            (53, 1, 1, 51)
        );
        assert!(ds.base.iter().any(|t| t.object == "a\tb"));
        assert_eq!(ds.rels, vec!["owned_by".to_string()]);
        assert_eq!(ds.subjects.len(), 8);
        let (again, _) = load(&p, 7, None).expect("load");
        assert_eq!(ds.base, again.base);
        let (other, _) = load(&p, 8, None).expect("load");
        assert_ne!(ds.base, other.base);
        let (cut, rep) = load(&p, 7, Some(10)).expect("load");
        assert_eq!((cut.base.len(), rep.cut), (10, 41));
        let mut rng = Rng::new(1);
        let (s, r) = ds.subject_query(&mut rng);
        assert!(ds.subjects.iter().any(|x| x == s) && r == "owned_by");
    }

    #[test]
    fn bad_line_names_its_number() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("bad.tsv");
        std::fs::write(&p, "a\tb\tc\nonly\ttwo\n").expect("write");
        let e = load(&p, 1, None).err().expect("fails").to_string();
        assert!(e.contains(":2:"), "{e}");
    }
}
