//! Scale run: loads one large tagstore (default 100,000,000 tags) in streamed
//! chunks, reporting the load rate, file size and resident memory as it goes,
//! then FIND latencies on the loaded store, close and reopen times.
//!
//! `cargo run --release -p tagbench --bin scale -- [--tags N] [--dir DIR]`
//! Check free disk space first: about 410 bytes per tag.

#[allow(dead_code)]
#[path = "../data.rs"]
mod data;
#[allow(dead_code)]
#[path = "../report.rs"]
mod report;

use anyhow::{bail, Context, Result};
use clap::Parser;
use data::{object_name, subject_name, Rng, Zipf, ZIPF_S};
use std::path::PathBuf;
use std::time::Instant;
use tagstore::{CreateOptions, Store, Tag};

/// Command-line options of the scale run.
#[derive(Parser, Debug)]
#[command(about = "Loads one large tagstore and measures it")]
struct Args {
    /// Tags to generate and insert (repeats among them are counted, not stored twice).
    #[arg(long, default_value_t = 100_000_000)]
    tags: u64,
    /// Directory for the store (a fresh file inside it, removed at the end).
    #[arg(long, default_value = ".")]
    dir: PathBuf,
    /// Tags generated and inserted per batch.
    #[arg(long, default_value_t = 1_000_000)]
    chunk: usize,
    /// FINDs by object, and by subject, after the load.
    #[arg(long, default_value_t = 100_000)]
    finds: usize,
    /// Seed of the generated data.
    #[arg(long, default_value_t = 20_240_601)]
    seed: u64,
    /// Keep the store file afterwards.
    #[arg(long)]
    keep: bool,
}

const RELS: [&str; 4] = ["isa", "owns", "owned_by", "located_in"];

/// Resident and peak resident memory of this process, in MiB.
fn rss_mib() -> (f64, f64) {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |k: &str| {
        s.lines()
            .find(|l| l.starts_with(k))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<f64>().ok())
            .map_or(0.0, |kb| kb / 1024.0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

fn pct(v: &mut [f64], p: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    v[((v.len() - 1) as f64 * p).round() as usize]
}

fn main() -> Result<()> {
    let a = Args::parse();
    if a.tags < 1000 {
        bail!("--tags must be at least 1000");
    }
    let dir = tempfile::tempdir_in(&a.dir)
        .with_context(|| format!("creating a directory in {}", a.dir.display()))?;
    let path = dir.path().join("scale.tags");
    let n_obj = (a.tags / 10) as usize;
    let n_subj = (a.tags / 10) as usize;
    println!(
        "scale run: {} tags generated over {n_obj} objects (uniform) and {n_subj} subjects (Zipf {ZIPF_S}), 4 relationships; store {}",
        a.tags,
        path.display()
    );
    let zipf = Zipf::new(n_subj, ZIPF_S);
    let store = Store::create(
        &path,
        &CreateOptions {
            expected_tags: a.tags,
            seed: Some(a.seed),
            ..Default::default()
        },
    )?;
    let geo = store.geometry();
    println!(
        "geometry: {} primary buckets per half x {} blocks, {}-block secondary buckets",
        geo.primary_buckets_per_half, geo.blocks_per_primary, geo.blocks_per_secondary
    );
    println!("| tags generated | stored | segment rate (tags/s) | elapsed s | file GiB | allocated GiB | RSS MiB |");
    println!("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    let mut rng = Rng::new(a.seed);
    let mut stats_s = 0.0;
    let t0 = Instant::now();
    let (mut done, mut stored) = (0u64, 0u64);
    let (mut seg_t, mut seg_n) = (Instant::now(), 0u64);
    let step = (a.tags / 20).max(1);
    let mut next_report = step;
    while done < a.tags {
        let k = (a.chunk as u64).min(a.tags - done) as usize;
        let chunk: Vec<Tag> = (0..k)
            .map(|_| {
                let o = rng.below(n_obj);
                let r = RELS[rng.rel()];
                let s = zipf.sample(&mut rng);
                Tag::new(object_name(o), r, subject_name(s))
            })
            .collect();
        let (out, r) = store.insert_batch(&chunk);
        r?;
        stored += out.changed;
        done += k as u64;
        seg_n += k as u64;
        if done >= next_report || done == a.tags {
            // The rates stop before `stats()`, which reads the whole store.
            let (rate, elapsed) = (
                seg_n as f64 / seg_t.elapsed().as_secs_f64(),
                t0.elapsed().as_secs_f64() - stats_s,
            );
            let ts = Instant::now();
            let st = store.stats()?;
            stats_s += ts.elapsed().as_secs_f64();
            let (rss, _) = rss_mib();
            println!(
                "| {done} | {stored} | {rate:.0} | {elapsed:.0} | {:.2} | {:.2} | {rss:.0} |",
                st.file_bytes as f64 / (1u64 << 30) as f64,
                st.allocated_bytes as f64 / (1u64 << 30) as f64,
            );
            (seg_t, seg_n) = (Instant::now(), 0);
            next_report += step;
        }
    }
    let load_s = t0.elapsed().as_secs_f64() - stats_s;
    let t = Instant::now();
    store.sync()?;
    let sync_s = t.elapsed().as_secs_f64();
    let st = store.stats()?;
    println!(
        "\nload: {stored} tags stored ({} repeats) in {load_s:.0} s + final sync {sync_s:.1} s = {:.0} tags/s; \
         file {:.2} GiB, allocated {:.2} GiB ({:.0} B/tag); longest chain {} buckets",
        done - stored,
        stored as f64 / (load_s + sync_s),
        st.file_bytes as f64 / (1u64 << 30) as f64,
        st.allocated_bytes as f64 / (1u64 << 30) as f64,
        st.allocated_bytes as f64 / stored.max(1) as f64,
        st.longest_chain
    );
    let mut frng = Rng::new(a.seed ^ 0xF1D);
    let mut lat = Vec::with_capacity(a.finds);
    let mut got = 0u64;
    for _ in 0..a.finds {
        let o = object_name(frng.below(n_obj));
        let r = RELS[frng.rel()];
        let t = Instant::now();
        got += store.for_each_subject(&o, r, |_| {})?;
        lat.push(t.elapsed().as_secs_f64() * 1e6);
    }
    println!(
        "FIND by object ({} keys, uniform, {got} tags): p50 {:.2} us, p99 {:.2} us",
        a.finds,
        pct(&mut lat, 0.5),
        pct(&mut lat, 0.99)
    );
    lat.clear();
    let mut got = 0u64;
    let t = Instant::now();
    for _ in 0..a.finds {
        let s = subject_name(zipf.sample(&mut frng));
        let r = RELS[frng.rel()];
        let t = Instant::now();
        got += store.for_each_object(&s, r, |_| {})?;
        lat.push(t.elapsed().as_secs_f64() * 1e6);
    }
    let all = t.elapsed().as_secs_f64();
    println!(
        "FIND by subject ({} keys, Zipf): p50 {:.2} us, p99 {:.1} us; {got} tags delivered, {:.0} tags/s",
        a.finds,
        pct(&mut lat, 0.5),
        pct(&mut lat, 0.99),
        got as f64 / all
    );
    let (rss, hwm) = rss_mib();
    println!("memory: RSS {rss:.0} MiB, peak RSS {hwm:.0} MiB (page cache of the mapped file counts when resident)");
    let t = Instant::now();
    store.close()?;
    let close_s = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let store = Store::open(&path)?;
    let open_s = t.elapsed().as_secs_f64();
    println!(
        "close {close_s:.1} s; clean reopen {open_s:.2} s; {} tags",
        store.len()
    );
    store.close()?;
    if a.keep {
        let kept = dir.keep();
        println!("kept {}", kept.display());
    }
    Ok(())
}
