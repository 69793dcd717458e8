//! Durable-insert run: loads a store, then times INSERTs that are each
//! durable on return, on one thread and on several at once (group commit).
//!
//! `cargo run --release -p tagbench --bin durable -- [--load N] [--inserts N] [--threads 1,4,16] [--dir DIR]`

#[allow(dead_code)]
#[path = "../data.rs"]
mod data;
#[allow(dead_code)]
#[path = "../report.rs"]
mod report;

use anyhow::{Context, Result};
use clap::Parser;
use data::{object_name, subject_name};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;
use tagstore::{CreateOptions, Durability, Store, Tag};

/// Command-line options of the durable-insert run.
#[derive(Parser, Debug)]
#[command(about = "Times individually durable INSERTs on 1 and on many threads")]
struct Args {
    /// Tags bulk loaded first.
    #[arg(long, default_value_t = 100_000)]
    load: usize,
    /// Durable INSERTs per thread count.
    #[arg(long, default_value_t = 5_000)]
    inserts: usize,
    /// Thread counts to run (each thread inserts its share).
    #[arg(long, value_delimiter = ',', default_value = "1,4,16")]
    threads: Vec<usize>,
    /// The store's durability mode during the run: `none` (each INSERT asks
    /// for `Durability::Immediate` itself), `on-sync` or `immediate`; or
    /// `plain` (`None` mode, INSERTs not durable: the cost of the insert alone).
    #[arg(long, default_value = "immediate")]
    mode: String,
    /// Skip the sync after the load (its pages stay dirty: no write-protect
    /// fault at their next write).
    #[arg(long)]
    no_sync_after_load: bool,
    /// Directory for the store (a fresh directory inside it, removed at the end).
    #[arg(long, default_value = ".")]
    dir: PathBuf,
}

fn tag(i: usize) -> Tag {
    Tag::new(object_name(i), "tagged", subject_name(i % 5_000))
}

fn main() -> Result<()> {
    let args = Args::parse();
    let dir = tempfile::Builder::new()
        .prefix("durable")
        .tempdir_in(&args.dir)
        .context("temporary directory")?;
    let store = Arc::new(Store::create(
        dir.path().join("d.tags"),
        &CreateOptions::default(),
    )?);
    let load: Vec<Tag> = (0..args.load).map(tag).collect();
    store.insert_batch(&load).1?;
    if !args.no_sync_after_load {
        store.sync()?;
    }
    store.set_durability(match args.mode.as_str() {
        "none" | "plain" => Durability::None,
        "on-sync" => Durability::OnSync,
        "immediate" => Durability::Immediate,
        m => anyhow::bail!("--mode {m}: expected none, on-sync or immediate"),
    })?;
    let mut next = args.load;
    for &threads in &args.threads {
        let per = args.inserts / threads.max(1);
        let t0 = Instant::now();
        let handles: Vec<_> = (0..threads)
            .map(|k| {
                let store = Arc::clone(&store);
                let mode = args.mode.clone();
                let first = next + k * per;
                let durable = (mode != "plain").then_some(Durability::Immediate);
                std::thread::spawn(move || -> Result<Vec<f64>> {
                    let mut lat = Vec::with_capacity(per);
                    for i in first..first + per {
                        let t = Instant::now();
                        store.insert_with(&tag(i), durable)?;
                        lat.push(t.elapsed().as_secs_f64() * 1e6);
                    }
                    Ok(lat)
                })
            })
            .collect();
        let mut lat = Vec::new();
        for h in handles {
            let part = h
                .join()
                .map_err(|_| anyhow::anyhow!("insert thread panicked"))??;
            lat.extend(part);
        }
        let secs = t0.elapsed().as_secs_f64();
        next += threads * per;
        lat.sort_by(f64::total_cmp);
        let q = |p: f64| lat[((lat.len() as f64 * p) as usize).min(lat.len() - 1)];
        // The mean is what a throughput row compares; the tail is where it
        // differs from the p50 (a split, a fresh block, a two-page commit).
        let mean = lat.iter().sum::<f64>() / lat.len().max(1) as f64;
        println!(
            "{threads:>3} threads: {:>9.0} durable inserts/s, mean {mean:>7.1} us, p50 {:>7.1} us, \
             p90 {:>7.1} us, p99 {:>7.1} us, p99.9 {:>7.1} us, max {:>7.1} us",
            lat.len() as f64 / secs,
            q(0.5),
            q(0.9),
            q(0.99),
            q(0.999),
            q(1.0)
        );
    }
    Ok(())
}
