//! Cold and warm FIND by subject: loads the file-ownership data set, then
//! runs one FIND by subject per distinct key (shuffled), first on a freshly
//! opened store (cold: no per-chain structures built yet) and then again
//! (warm), `--passes` times, reopening the store before each cold pass.
//!
//! `cargo run --release -p tagbench --bin coldfind -- [--tags N] [--passes N] [--dir DIR]`

#[allow(dead_code)]
#[path = "../data.rs"]
mod data;
#[allow(dead_code)]
#[path = "../report.rs"]
mod report;

use anyhow::{Context, Result};
use clap::Parser;
use data::Dataset;
use std::path::PathBuf;
use std::time::Instant;
use tagstore::{CreateOptions, Store};

/// Command-line options of the cold/warm FIND run.
#[derive(Parser, Debug)]
#[command(about = "FIND by subject of every distinct key, cold then warm")]
struct Args {
    /// Tags of the file-ownership data set.
    #[arg(long, default_value_t = 2_000_000)]
    tags: usize,
    /// Cold + warm passes (the store is reopened before each).
    #[arg(long, default_value_t = 2)]
    passes: usize,
    /// Directory for the store (a fresh directory inside it, removed at the end).
    #[arg(long, default_value = ".")]
    dir: PathBuf,
    /// Keep the store at this path instead, and reuse it if it exists
    /// (then only the FINDs run: for profiling them).
    #[arg(long)]
    store: Option<PathBuf>,
    /// Run the first pass on the handle that loaded the store (no reopen:
    /// its pages are mapped and checksums verified; only per-chain
    /// structures are cold).
    #[arg(long)]
    same_handle: bool,
}

fn main() -> Result<()> {
    let args = Args::parse();
    let ds = Dataset::generate_files(args.tags, 20_240_601);
    let dir = tempfile::Builder::new()
        .prefix("coldfind")
        .tempdir_in(&args.dir)
        .context("temporary directory")?;
    let path = args
        .store
        .clone()
        .unwrap_or_else(|| dir.path().join("c.tags"));
    let mut loaded = None;
    if !path.exists() {
        let store = Store::create(&path, &CreateOptions::default())?;
        store.insert_batch(&ds.base).1?;
        store.sync()?;
        if args.same_handle {
            loaded = Some(store);
        } else {
            store.close()?;
        }
    }
    let keys = ds.every_subject_key(7);
    for pass in 0..args.passes {
        let store = match loaded.take() {
            Some(s) => s,
            None => Store::open(&path)?,
        };
        for label in ["cold", "warm"] {
            let t = Instant::now();
            let mut n = 0u64;
            for (s, r) in &keys {
                store.for_each_object(s, r, |_| n += 1)?;
            }
            let secs = t.elapsed().as_secs_f64();
            println!(
                "pass {pass} {label}: {} keys, {n} results in {secs:.3} s ({:.2} M results/s)",
                keys.len(),
                n as f64 / secs / 1e6
            );
        }
        store.close()?;
    }
    Ok(())
}
