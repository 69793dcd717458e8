//! Growth run: inserts N tags one call at a time into a store created with
//! no size hint (it grows by bucket splits), timing every INSERT, then
//! deletes every other tag and runs `maintain`; reports the INSERT latency
//! distribution (worst, p99.9) while the store grows, bytes per tag after
//! the load, and after the delete and `maintain`.
//!
//! `cargo run --release -p tagbench --bin grow -- [--tags N] [--presized] [--dir DIR]`

#[allow(dead_code)]
#[path = "../data.rs"]
mod data;
#[allow(dead_code)]
#[path = "../report.rs"]
mod report;

use anyhow::{Context, Result};
use clap::Parser;
use data::{object_name, subject_name, Rng, Zipf, ZIPF_S};
use std::path::PathBuf;
use std::time::Instant;
use tagstore::{CreateOptions, MaintainOptions, Store, Tag};

/// Command-line options of the growth run.
#[derive(Parser, Debug)]
#[command(about = "Grows a tagstore from empty, timing every INSERT")]
struct Args {
    /// Tags to generate and insert one by one.
    #[arg(long, default_value_t = 20_000_000)]
    tags: u64,
    /// Pre-size the store for the load instead (the comparison run).
    #[arg(long)]
    presized: bool,
    /// Directory for the store (a fresh directory inside it, removed at the end).
    #[arg(long, default_value = ".")]
    dir: PathBuf,
    /// Seed of the generated data.
    #[arg(long, default_value_t = 20_240_601)]
    seed: u64,
    /// Skip the delete-half and maintain phase.
    #[arg(long)]
    no_maintain: bool,
}

const RELS: [&str; 4] = ["isa", "owns", "owned_by", "located_in"];

/// The `i`-th tag of the run's stream (objects uniform, subjects Zipf).
struct Gen {
    rng: Rng,
    zipf: Zipf,
    n_obj: usize,
}

impl Gen {
    fn new(seed: u64, tags: u64) -> Gen {
        let n = (tags / 10).max(10) as usize;
        Gen {
            rng: Rng::new(seed),
            zipf: Zipf::new(n, ZIPF_S),
            n_obj: n,
        }
    }

    fn next(&mut self) -> Tag {
        let o = self.rng.below(self.n_obj);
        let r = RELS[self.rng.rel()];
        let s = self.zipf.sample(&mut self.rng);
        Tag::new(object_name(o), r, subject_name(s))
    }
}

fn pct(sorted: &[u32], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize] as f64 / 1000.0
}

fn sizes(path: &std::path::Path) -> Result<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path)?;
    Ok((m.len(), m.blocks() * 512))
}

fn main() -> Result<()> {
    let a = Args::parse();
    let dir = tempfile::tempdir_in(&a.dir)
        .with_context(|| format!("creating a directory in {}", a.dir.display()))?;
    let path = dir.path().join("grow.tags");
    let store = Store::create(
        &path,
        &CreateOptions {
            expected_tags: if a.presized { a.tags } else { 0 },
            seed: Some(a.seed),
            ..Default::default()
        },
    )?;
    println!(
        "growth run: {} INSERT calls, {} store; objects uniform over {}, subjects Zipf {ZIPF_S}",
        a.tags,
        if a.presized {
            "pre-sized"
        } else {
            "no-hint (grows)"
        },
        (a.tags / 10).max(10)
    );
    let mut gen = Gen::new(a.seed, a.tags);
    let mut lat: Vec<u32> = Vec::with_capacity(a.tags as usize);
    let (mut stored, mut worst, mut worst_at) = (0u64, 0u64, 0u64);
    let t0 = Instant::now();
    // Calls that split a bucket, told apart by the bucket count.
    let (mut splits, mut worst_split, mut worst_plain) = (0u64, 0u64, 0u64);
    let mut buckets = store.geometry().primary_buckets_per_half;
    for i in 0..a.tags {
        let t = gen.next();
        let s = Instant::now();
        stored += u64::from(store.insert(&t)?);
        let ns64 = s.elapsed().as_nanos().min(u64::MAX as u128) as u64;
        let ns = ns64.min(u32::MAX as u64) as u32;
        if ns64 > worst {
            (worst, worst_at) = (ns64, i);
        }
        let now = store.geometry().primary_buckets_per_half;
        if now != buckets {
            splits += 1;
            worst_split = worst_split.max(ns64);
            buckets = now;
        } else {
            worst_plain = worst_plain.max(ns64);
        }
        lat.push(ns);
    }
    let load_s = t0.elapsed().as_secs_f64();
    store.sync()?;
    let st = store.stats()?;
    let slow = lat.iter().filter(|&&x| x > 1_000_000).count();
    lat.sort_unstable();
    println!(
        "load: {stored} tags stored in {load_s:.1} s ({:.0} INSERT calls/s); INSERT latency p50 {:.2} us, p99 {:.2} us, p99.9 {:.2} us, p99.99 {:.1} us, worst {:.1} ms (call {worst_at}); {slow} calls over 1 ms",
        a.tags as f64 / load_s,
        pct(&lat, 0.5),
        pct(&lat, 0.99),
        pct(&lat, 0.999),
        pct(&lat, 0.9999),
        worst as f64 / 1e6
    );
    println!(
        "calls that split buckets: {splits}, the slowest {:.1} ms; the slowest call that split none {:.1} ms",
        worst_split as f64 / 1e6,
        worst_plain as f64 / 1e6
    );
    println!(
        "after load: {} primary buckets per half (level {}, split pointer {}), primary fill {:.1} %, {} chains (longest {}), {} holes; file {:.0} B/tag apparent, {:.0} B/tag allocated",
        st.geometry.primary_buckets_per_half,
        st.growth.level,
        st.growth.split_pointer,
        st.primary_fill * 100.0,
        st.chains,
        st.longest_chain,
        st.holes,
        st.file_bytes as f64 / stored.max(1) as f64,
        st.allocated_bytes as f64 / stored.max(1) as f64
    );
    drop(lat);
    if a.no_maintain {
        return Ok(());
    }
    // Delete every other INSERT call's tag (a repeat may go twice: counted once).
    let mut gen = Gen::new(a.seed, a.tags);
    let t = Instant::now();
    let mut deleted = 0u64;
    let mut batch = Vec::with_capacity(65_536);
    for i in 0..a.tags {
        let tag = gen.next();
        if i % 2 == 0 {
            batch.push(tag);
        }
        if batch.len() == batch.capacity() || i + 1 == a.tags {
            let (out, r) = store.delete_batch(&batch);
            r?;
            deleted += out.changed;
            batch.clear();
        }
    }
    let live = store.len();
    store.close()?;
    let (fb, ab) = sizes(&path)?;
    println!(
        "delete every other call's tag: {deleted} deleted in {:.1} s, {live} live; before maintain {:.0} B/live tag apparent, {:.0} allocated",
        t.elapsed().as_secs_f64(),
        fb as f64 / live.max(1) as f64,
        ab as f64 / live.max(1) as f64
    );
    let t = Instant::now();
    let r = Store::maintain(&path, &MaintainOptions::default(), |_, _| {})?;
    let (fb, ab) = sizes(&path)?;
    println!(
        "maintain (default: re-size for the live tags) {:.1} s: {} primary buckets per half, fill {:.1} %; {:.0} B/live tag apparent, {:.0} allocated ({:.2}x and {:.2}x of 320)",
        t.elapsed().as_secs_f64(),
        r.after.geometry.primary_buckets_per_half,
        r.after.primary_fill * 100.0,
        fb as f64 / live.max(1) as f64,
        ab as f64 / live.max(1) as f64,
        fb as f64 / live.max(1) as f64 / 320.0,
        ab as f64 / live.max(1) as f64 / 320.0
    );
    Ok(())
}
