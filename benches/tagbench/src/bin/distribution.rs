//! Distribution report: the table of `shared/seeds/000_…` (spreading a member
//! base over buckets, judged by the standard deviation) reproduced on real
//! account names, with tagstore's own placement beside the seed's schemes.
//!
//! `cargo run --release -p tagbench --bin distribution -- [--names FILE] [--json FILE]`
//!
//! The names default to `npm-names.txt` written by `fetch-npm.sh` (npm
//! owners, GitHub owners and npm scopes; about 965,000). For each scheme it
//! prints the mean bucket load, the standard deviation, the deviation over the
//! mean (the seed's figure) and over the ideal `sqrt(mean × (1 − 1/B))`, the
//! deviation a perfectly random placement of the same names would show.

use anyhow::{bail, Context, Result};
use clap::Parser;
use md5::{Digest, Md5};
use serde::Serialize;
use std::path::PathBuf;
use tagstore::testing::{bucket_of, key_hash};
use tagstore::Half;

/// Command-line options of the distribution report.
#[derive(Parser, Debug)]
#[command(about = "Reproduces the seed's bucket-distribution table on real account names")]
struct Args {
    /// Names, one per line (default: npm-names.txt in the tagbench cache).
    #[arg(long)]
    names: Option<PathBuf>,
    /// Seed of tagstore's keyed hash (a store draws one at random).
    #[arg(long, default_value_t = 0x7A65_7374_6F72_6521)]
    seed: u64,
    /// Relationship the names are hashed under, as a tag's subject.
    #[arg(long, default_value = "owned_by")]
    relationship: String,
    /// Also draw this many random hash seeds and report the spread of
    /// xxh3's std dev ÷ ideal at 64 and at 4,096 buckets (sampling noise).
    #[arg(long, default_value_t = 200)]
    seeds: u64,
    /// Also write the table as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
}

/// One scheme's figures.
#[derive(Serialize)]
struct Line {
    scheme: String,
    buckets: usize,
    mean: f64,
    stddev: f64,
    stddev_over_mean: f64,
    ideal: f64,
    stddev_over_ideal: f64,
    max: u64,
    min: u64,
}

fn line(scheme: &str, counts: &[u64]) -> Line {
    let b = counts.len() as f64;
    let total: u64 = counts.iter().sum();
    let mean = total as f64 / b;
    let var = counts
        .iter()
        .map(|&c| (c as f64 - mean).powi(2))
        .sum::<f64>()
        / b;
    let stddev = var.sqrt();
    let ideal = (mean * (1.0 - 1.0 / b)).sqrt();
    Line {
        scheme: scheme.to_string(),
        buckets: counts.len(),
        mean,
        stddev,
        stddev_over_mean: stddev / mean,
        ideal,
        stddev_over_ideal: stddev / ideal,
        max: counts.iter().copied().max().unwrap_or(0),
        min: counts.iter().copied().min().unwrap_or(0),
    }
}

/// The seed's letter alphabet `0-9, a-z, _` as indices 0…36; anything else is 37.
fn letter_index(c: u8) -> usize {
    match c.to_ascii_lowercase() {
        b'0'..=b'9' => (c - b'0') as usize,
        l @ b'a'..=b'z' => 10 + (l - b'a') as usize,
        b'_' => 36,
        _ => 37,
    }
}

fn hex_pair(d: &[u8], i: usize) -> usize {
    // Characters i and i+1 of the hex digest are byte i/2 when i is even.
    d[i / 2] as usize
}

fn main() -> Result<()> {
    let a = Args::parse();
    let path = match a.names {
        Some(p) => p,
        None => {
            let cache = std::env::var_os("TAGBENCH_CACHE")
                .map(PathBuf::from)
                .or_else(|| {
                    std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/tagbench"))
                })
                .context("neither TAGBENCH_CACHE nor HOME is set")?;
            cache.join("npm-names.txt")
        }
    };
    let text = std::fs::read_to_string(&path).with_context(|| {
        format!(
            "reading {} (run benches/tagbench/fetch-npm.sh first)",
            path.display()
        )
    })?;
    let names: Vec<&str> = text.lines().filter(|l| !l.is_empty()).collect();
    if names.len() < 1000 {
        bail!("{}: only {} names", path.display(), names.len());
    }
    let n = names.len();
    // The bucket count a store sized for these names (as subjects of one
    // relationship, 50 tags per primary bucket) would have.
    let store_buckets = tagstore::Geometry::for_expected_tags(n as u64).primary_buckets_per_half;

    let mut first = vec![0u64; 38];
    let mut sum61 = vec![0u64; 61];
    let mut sum61_rest = vec![0u64; 61];
    let mut sum4093 = vec![0u64; 4093];
    let mut sum_store = vec![0u64; store_buckets as usize];
    let mut md5_64 = vec![0u64; 64];
    let mut md5_64x64 = vec![0u64; 64 * 64];
    let mut md5_3 = vec![0u64; 64 * 64 * 64];
    let mut xx_64 = vec![0u64; 64];
    let mut xx_4096 = vec![0u64; 4096];
    let mut xx_store = vec![0u64; store_buckets as usize];
    for name in &names {
        let b = name.as_bytes();
        first[letter_index(b[0])] += 1;
        let s: u64 = b.iter().map(|&c| c as u64).sum();
        sum61[(s % 61) as usize] += 1;
        sum61_rest[((s - b[0] as u64) % 61) as usize] += 1;
        sum4093[(s % 4093) as usize] += 1;
        sum_store[(s % store_buckets as u64) as usize] += 1;
        let d = Md5::digest(b);
        let (l1, l2, l3) = (
            hex_pair(&d, 0) % 64,
            hex_pair(&d, 2) % 64,
            hex_pair(&d, 4) % 64,
        );
        md5_64[l1] += 1;
        md5_64x64[l1 * 64 + l2] += 1;
        md5_3[(l1 * 64 + l2) * 64 + l3] += 1;
        let h = key_hash(a.seed, Half::Subject, &a.relationship, name);
        xx_64[bucket_of(h, 64) as usize] += 1;
        xx_4096[bucket_of(h, 4096) as usize] += 1;
        xx_store[bucket_of(h, store_buckets) as usize] += 1;
    }
    let lines = vec![
        line("first letter (0-9, a-z, _, other)", &first),
        line("ASCII sum mod 61", &sum61),
        line("ASCII sum without the first letter mod 61", &sum61_rest),
        line("ASCII sum mod 4093", &sum4093),
        line(
            &format!("ASCII sum mod {store_buckets} (store geometry)"),
            &sum_store,
        ),
        line("MD5 hex chars 0-1 mod 64 (level 1)", &md5_64),
        line("MD5 levels 1-2 (64 x 64 directories)", &md5_64x64),
        line("MD5 levels 1-3 (64^3 directories)", &md5_3),
        line("tagstore xxh3, 64 buckets", &xx_64),
        line("tagstore xxh3, 4,096 buckets", &xx_4096),
        line(
            &format!("tagstore xxh3, {store_buckets} buckets (store geometry)"),
            &xx_store,
        ),
    ];
    println!(
        "{} distinct names from {}; tagstore hash: key_hash(seed {:#x}, subject half, {:?}, name), bucket by multiply-shift",
        n,
        path.display(),
        a.seed,
        a.relationship
    );
    println!();
    println!("| scheme | buckets | mean | std dev | std dev ÷ mean | ideal √(mean(1−1/B)) | std dev ÷ ideal | min | max |");
    println!("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    for l in &lines {
        println!(
            "| {} | {} | {:.1} | {:.1} | {:.4} | {:.1} | {:.3} | {} | {} |",
            l.scheme,
            l.buckets,
            l.mean,
            l.stddev,
            l.stddev_over_mean,
            l.ideal,
            l.stddev_over_ideal,
            l.min,
            l.max
        );
    }
    if a.seeds > 0 {
        // The std dev of B bucket counts is itself an estimate: at B = 64 it
        // wanders about ±1/sqrt(2(B−1)) ≈ ±9 % around the ideal even for a
        // perfect hash. Show that spread over many seeds.
        let mut r64 = Vec::new();
        let mut r4096 = Vec::new();
        let mut state = a.seed;
        for _ in 0..a.seeds {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let seed = state ^ (state >> 29);
            let mut c64 = vec![0u64; 64];
            let mut c4096 = vec![0u64; 4096];
            for name in &names {
                let h = key_hash(seed, Half::Subject, &a.relationship, name);
                c64[bucket_of(h, 64) as usize] += 1;
                c4096[bucket_of(h, 4096) as usize] += 1;
            }
            r64.push(line("", &c64).stddev_over_ideal);
            r4096.push(line("", &c4096).stddev_over_ideal);
        }
        for (b, r) in [(64, &mut r64), (4096, &mut r4096)] {
            r.sort_by(f64::total_cmp);
            let q = |p: f64| r[((r.len() - 1) as f64 * p).round() as usize];
            let mean = r.iter().sum::<f64>() / r.len() as f64;
            println!(
                "xxh3 over {} random seeds, {b} buckets: std dev ÷ ideal mean {mean:.3}, 5th percentile {:.3}, median {:.3}, 95th percentile {:.3}",
                r.len(),
                q(0.05),
                q(0.5),
                q(0.95)
            );
        }
    }
    if let Some(j) = a.json {
        std::fs::write(&j, serde_json::to_string_pretty(&lines)?)
            .with_context(|| format!("writing {}", j.display()))?;
    }
    Ok(())
}
