//! FIND speed of an existing store: FIND by object for keys drawn from a
//! TSV file of its tags, then FIND by subject of every distinct subject
//! key, in passes that alternate between the stores given (so that two
//! geometries of the same tags, say before and after `maintain`, are
//! compared under the same machine load).
//!
//! `cargo run --release -p tagbench --bin storefind -- --tsv FILE STORE…`

use anyhow::{Context, Result};
use clap::Parser;
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::Instant;
use tagstore::Store;

/// Command-line options of the FIND run.
#[derive(Parser, Debug)]
#[command(about = "FIND by object and by subject on existing stores")]
struct Args {
    /// TSV file of (some of) the stores' tags: the FIND keys come from it.
    #[arg(long)]
    tsv: PathBuf,
    /// FINDs by object per pass.
    #[arg(long, default_value_t = 500_000)]
    object_finds: usize,
    /// Passes over the stores.
    #[arg(long, default_value_t = 3)]
    passes: usize,
    /// FINDs by subject per pass for the subject keys of tags drawn
    /// uniformly (so keys weighted by their tag count, as tagbench draws
    /// its "Zipf" keys on loaded data); 0 skips the pass.
    #[arg(long, default_value_t = 0)]
    weighted_finds: usize,
    /// Stores (opened read-only).
    stores: Vec<PathBuf>,
}

/// Shuffles `v` (Fisher-Yates over a xorshift generator in state `x`).
fn shuffle<T>(v: &mut [T], x: &mut u64) {
    for i in (1..v.len()).rev() {
        *x ^= *x << 13;
        *x ^= *x >> 7;
        *x ^= *x << 17;
        v.swap(i, (*x % (i as u64 + 1)) as usize);
    }
}

fn main() -> Result<()> {
    let args = Args::parse();
    let text = std::fs::read_to_string(&args.tsv)
        .with_context(|| format!("reading {}", args.tsv.display()))?;
    let mut objects = Vec::new();
    let mut subjects = BTreeSet::new();
    let mut weighted = Vec::new();
    for line in text.lines() {
        let t = tagstore::tsv::parse_line(line).map_err(anyhow::Error::msg)?;
        objects.push((t.object.clone(), t.relationship.clone()));
        weighted.push((t.subject.clone(), t.relationship.clone()));
        subjects.insert((t.subject, t.relationship));
    }
    // A fixed shuffle of the object keys, the same for every store.
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    shuffle(&mut objects, &mut x);
    objects.truncate(args.object_finds);
    // Tag-weighted subject keys: the subject keys of a shuffle of the tags.
    shuffle(&mut weighted, &mut x);
    weighted.truncate(args.weighted_finds);
    let stores: Vec<Store> = args
        .stores
        .iter()
        .map(|p| Store::open_read_only(p).with_context(|| format!("opening {}", p.display())))
        .collect::<Result<_>>()?;
    println!("store\tpass\tobject FINDs/s\tresults\tsubject keys/s\tresults/s\tweighted results/s");
    for pass in 0..args.passes {
        for (i, s) in stores.iter().enumerate() {
            let t = Instant::now();
            let mut n = 0u64;
            for (o, r) in &objects {
                s.for_each_subject(o, r, |_| n += 1)?;
            }
            let obj_s = t.elapsed().as_secs_f64();
            let t = Instant::now();
            let mut m = 0u64;
            for (sub, r) in &subjects {
                s.for_each_object(sub, r, |_| m += 1)?;
            }
            let sub_s = t.elapsed().as_secs_f64();
            let t = Instant::now();
            let mut w = 0u64;
            for (sub, r) in &weighted {
                s.for_each_object(sub, r, |_| w += 1)?;
            }
            let w_s = t.elapsed().as_secs_f64();
            println!(
                "{}\t{pass}\t{:.0}\t{n}\t{:.0}\t{:.0}\t{:.0}",
                args.stores[i].display(),
                objects.len() as f64 / obj_s,
                subjects.len() as f64 / sub_s,
                m as f64 / sub_s,
                w as f64 / w_s.max(1e-9)
            );
        }
    }
    Ok(())
}
