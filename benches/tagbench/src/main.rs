//! tagbench: tagstore against SQLite, redb, LMDB (heed) and fjall on one
//! seeded synthetic tag set or a real one (`--data npm|FILE`), and
//! (`--sweep`) a sweep of tagstore's bucket geometry.
//!
//! Usage: `cargo run --release -p tagbench -- [--tags N] [--data synthetic|npm|FILE] [--engines tagstore,sqlite,redb,lmdb,fjall] [--json FILE]`
//! and `cargo run --release -p tagbench -- --sweep`. See benches/README.md.

mod data;
mod engines;
mod report;
mod settle;
mod sweep;
mod tsvdata;

use anyhow::{bail, Context, Result};
use clap::Parser;
use data::{Dataset, Plants, Rng, RARE_TAGS, REL_WEIGHTS, ZIPF_S};
use engines::{Engine, Files, Finder};
use report::{num, Lat, Machine};
use serde::Serialize;
use std::ops::Range;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use tagstore::{CreateOptions, Tag};

/// Hash seed of every tagstore file the benchmark creates (fixed so the
/// peak-isolation keys can be placed ahead of time).
pub const STORE_SEED: u64 = 0x7A65_7374_6F72_6521;

#[derive(Parser, Debug, Clone)]
#[command(
    name = "tagbench",
    about = "Benchmarks tagstore against SQLite, redb, LMDB and fjall"
)]
pub struct Args {
    /// Tags to bulk load (synthetic: 1,000,000; --data npm|FILE: all of the
    /// file's distinct tags that fit a slot, or the first N after shuffling).
    #[arg(long)]
    tags: Option<usize>,
    /// The data: `synthetic` (seeded generator), `files` (seeded generator
    /// of file-ownership tags: one package per distinct file path), `npm`
    /// (npm.tsv written by benches/tagbench/fetch-npm.sh into the cache), or
    /// a TSV file of tags.
    #[arg(long, default_value = "synthetic")]
    data: String,
    /// Engines, comma separated (tagstore is always the reference column).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "tagstore,sqlite,redb,lmdb,fjall"
    )]
    engines: Vec<String>,
    /// Also write the results as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Write the data set (the tags the bulk load would insert, in load
    /// order) as TSV to this file and exit, for `tagstore insert --file`.
    #[arg(long)]
    write_tsv: Option<PathBuf>,
    /// Seed of the synthetic data (or of the file data's load order) and of the workloads.
    #[arg(long, default_value_t = 20_240_601)]
    seed: u64,
    /// Create the tagstore store with no size hint (it grows from one
    /// bucket per half), as a user who does not know the load would; by
    /// default it is pre-sized for the load (`--expected-tags`).
    #[arg(long)]
    no_size_hint: bool,
    /// Memory for tagstore's hot copies of FIND results
    /// (`Store::set_hot_bytes`; 0 turns them off); the store's default
    /// (32 MiB) when not given.
    #[arg(long)]
    hot_bytes: Option<usize>,
    /// Directory for the engines' files (a fresh temporary directory inside it).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// FINDs by object (few results each).
    #[arg(long, default_value_t = 1_000_000)]
    object_finds: usize,
    /// FINDs by subject, subjects drawn Zipf (run on 1 thread, then on 2).
    #[arg(long, default_value_t = 100_000)]
    subject_finds: usize,
    /// Operations of the Flickr++ mix.
    #[arg(long, default_value_t = 20_000)]
    mix_ops: usize,
    /// FINDs of each planted rare key (peak isolation).
    #[arg(long, default_value_t = 10_000)]
    peak_finds: usize,
    /// Individually durable inserts (fresh tags, fsynced one by one).
    #[arg(long, default_value_t = 1_000)]
    durable_singles: usize,
    /// Durable batches (one fsynced commit each).
    #[arg(long, default_value_t = 100)]
    durable_batches: usize,
    /// Tags per durable batch.
    #[arg(long, default_value_t = 1_000)]
    durable_batch_size: usize,
    /// Before each durable row, flushes of a scratch file (untimed, at most
    /// this many) until the disk's flushes are back to their usual time
    /// (0: none).
    #[arg(long, default_value_t = 400)]
    settle_flushes: usize,
    /// Print the tables as Markdown too.
    #[arg(long)]
    markdown: bool,
    /// Tags per write transaction of the peers' bulk load and bulk delete
    /// (default: one transaction per call, the whole set).
    #[arg(long)]
    peer_txn: Option<usize>,
    /// Bulk load and delete in interleaved rounds of this many tags per
    /// engine turn (default: each engine loads, and deletes, the whole set
    /// in one call, so a peer's bulk work is one transaction).
    #[arg(long)]
    bulk_round: Option<usize>,
    /// Run the tagstore geometry sweep instead of the engine comparison.
    #[arg(long)]
    sweep: bool,
    /// Sweep: blocks per primary bucket.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8")]
    sweep_bpp: Vec<u32>,
    /// Sweep: target mean primary fill at the loaded tag count.
    #[arg(long, value_delimiter = ',', default_value = "0.25,0.5,0.75")]
    sweep_fill: Vec<f64>,
    /// Sweep: passes over the grid (alternating direction; best pass per timing).
    #[arg(long, default_value_t = 2)]
    sweep_passes: usize,
    /// Sweep: blocks per secondary bucket.
    #[arg(long, value_delimiter = ',', default_value = "16")]
    sweep_bps: Vec<u32>,
}

/// One table row: an operation, its unit, and a value per engine.
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    pub operation: String,
    pub unit: &'static str,
    pub higher_is_better: Option<bool>,
    pub values: Vec<f64>,
}

#[derive(Serialize)]
struct CompareReport {
    machine: Machine,
    settings: serde_json::Value,
    engines: Vec<String>,
    plants: Plants,
    rows: Vec<Row>,
    detail: Vec<serde_json::Value>,
}

enum Op {
    FindSubject(usize),
    FindObject(usize),
    Delete(usize),
    Insert(Tag),
}

/// Synthetic tags when `--tags` is not given.
pub const DEFAULT_TAGS: usize = 1_000_000;

fn main() -> Result<()> {
    let args = Args::parse();
    if args.tags.is_some_and(|n| n < 100) {
        bail!("--tags must be at least 100");
    }
    if args.sweep {
        return sweep::run(&args);
    }
    if let Some(path) = &args.write_tsv {
        return write_tsv(&args, path);
    }
    compare(&args)
}

/// The tags the bulk load inserts (the synthetic generator plants its two
/// rare keys inside its N; a data set from a file gets them on top), and
/// store options pre-sized for them.
fn load_size(args: &Args, ds: &Dataset, from_file: bool) -> (usize, CreateOptions) {
    let n = match from_file {
        false => args.tags.unwrap_or(DEFAULT_TAGS),
        true => ds.base.len() + 2 * RARE_TAGS,
    };
    let opts = CreateOptions {
        expected_tags: n as u64,
        seed: Some(STORE_SEED),
        ..Default::default()
    };
    (n, opts)
}

/// Writes the tags `compare` would bulk load, one TSV line each.
fn write_tsv(args: &Args, path: &std::path::Path) -> Result<()> {
    use std::io::Write;
    let (ds, load_report, _) = dataset(args)?;
    let (_, opts) = load_size(args, &ds, load_report.is_some());
    let geo = opts.geometry();
    let (tags, _) = ds.with_plants(
        STORE_SEED,
        geo.primary_buckets_per_half,
        geo.primary_capacity(),
    );
    let mut out = std::io::BufWriter::new(
        std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?,
    );
    for t in &tags {
        writeln!(out, "{}", tagstore::tsv::format_tag(t))?;
    }
    out.flush()?;
    eprintln!("{} tags written to {}", tags.len(), path.display());
    Ok(())
}

fn timed<T>(f: impl FnOnce() -> Result<T>) -> Result<(T, f64)> {
    let t = Instant::now();
    let v = f()?;
    Ok((v, t.elapsed().as_secs_f64()))
}

/// What a run of FINDs returned.
#[derive(Clone, Copy, Debug, Default)]
pub struct Found {
    /// Tags delivered.
    pub results: u64,
    /// Bytes of the delivered subjects/objects.
    pub bytes: u64,
}

impl std::ops::AddAssign for Found {
    fn add_assign(&mut self, o: Found) {
        self.results += o.results;
        self.bytes += o.bytes;
    }
}

/// One FIND on an engine; counts the results and sums their bytes (which
/// also keeps the visitor from being optimised away).
fn find_one(e: &mut dyn Engine, key: &str, rel: &str, by_object: bool) -> Result<Found> {
    let mut n = Found::default();
    let mut f = |s: &[u8]| {
        n.results += 1;
        n.bytes += s.len() as u64;
    };
    if by_object {
        e.find_subjects(key, rel, &mut f)?;
    } else {
        e.find_objects(key, rel, &mut f)?;
    }
    Ok(n)
}

/// FINDs on a second read handle (a thread of the 2-thread row).
fn reader_finds(r: &mut dyn Finder, qs: &[(&str, &str)], by_object: bool) -> Result<Found> {
    let mut n = Found::default();
    let mut f = |s: &[u8]| {
        n.results += 1;
        n.bytes += s.len() as u64;
    };
    for (k, rel) in qs {
        if by_object {
            r.find_subjects(k, rel, &mut f)?;
        } else {
            r.find_objects(k, rel, &mut f)?;
        }
    }
    Ok(n)
}

/// Runs `qs` FINDs (by object when `by_object`), each timed.
pub fn time_finds(e: &mut dyn Engine, qs: &[(&str, &str)], by_object: bool) -> Result<Lat> {
    let mut ns = Vec::with_capacity(qs.len());
    let (total, found) = time_finds_raw(e, qs, by_object, &mut ns)?;
    Ok(Lat::new(ns, total, found.results).with_bytes(found.bytes))
}

/// Runs FINDs, appending each one's nanoseconds to `ns`; returns the summed
/// time of the FINDs alone and what they returned.
pub fn time_finds_raw(
    e: &mut dyn Engine,
    qs: &[(&str, &str)],
    by_object: bool,
    ns: &mut Vec<u64>,
) -> Result<(Duration, Found)> {
    let mut found = Found::default();
    let mut total = Duration::ZERO;
    for (k, r) in qs {
        let t = Instant::now();
        found += find_one(e, k, r, by_object)?;
        let d = t.elapsed();
        total += d;
        ns.push(d.as_nanos() as u64);
    }
    Ok((total, found))
}

fn check_same(what: &str, names: &[String], counts: &[u64]) {
    if counts.windows(2).any(|w| w[0] != w[1]) {
        let list: Vec<String> = names
            .iter()
            .zip(counts)
            .map(|(n, c)| format!("{n}={c}"))
            .collect();
        eprintln!("WARNING: engines disagree on {what}: {}", list.join(", "));
    }
}

/// Checks that every engine returned as many tags, and as many bytes.
fn check_found(what: &str, names: &[String], found: &[Found]) {
    check_same(
        &format!("{what} (tags)"),
        names,
        &found.iter().map(|f| f.results).collect::<Vec<_>>(),
    );
    check_same(
        &format!("{what} (bytes)"),
        names,
        &found.iter().map(|f| f.bytes).collect::<Vec<_>>(),
    );
}

fn lat_found(l: &[Lat]) -> Vec<Found> {
    l.iter()
        .map(|l| Found {
            results: l.results,
            bytes: l.bytes,
        })
        .collect()
}

/// An integer with thousands separators.
fn int(n: usize) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

const MIB: f64 = (1u64 << 20) as f64;

/// The engines under test, and the background work each was waited for.
struct Bench {
    engines: Vec<Box<dyn Engine>>,
    /// Untimed waits for background work after each engine's turns.
    settle: Vec<Duration>,
}

impl Bench {
    /// Runs `f(engine index, engine, range)` over `0..n` in rounds of
    /// `chunk`, the engines taking turns (the first one rotating); after each
    /// turn the engine's background work is waited for, untimed.
    fn rounds(
        &mut self,
        n: usize,
        chunk: usize,
        mut f: impl FnMut(usize, &mut dyn Engine, Range<usize>) -> Result<()>,
    ) -> Result<()> {
        let Bench { engines, settle } = self;
        turns(engines.len(), n, chunk, |i, r| {
            f(i, engines[i].as_mut(), r)?;
            let t = Instant::now();
            engines[i]
                .settle()
                .with_context(|| format!("{}: settle", engines[i].name()))?;
            settle[i] += t.elapsed();
            Ok(())
        })
    }

    fn settle_s(&self) -> Vec<f64> {
        self.settle.iter().map(Duration::as_secs_f64).collect()
    }

    fn files(&mut self) -> Result<Vec<Files>> {
        self.engines.iter_mut().map(|e| e.files()).collect()
    }
}

/// The data set `--data` and `--tags` ask for, what loading a file kept,
/// and the seconds it took.
pub fn dataset(args: &Args) -> Result<(Dataset, Option<tsvdata::LoadReport>, f64)> {
    let t = Instant::now();
    let (ds, rep) = match tsvdata::resolve(&args.data)? {
        None if args.data == "files" => (
            Dataset::generate_files(args.tags.unwrap_or(DEFAULT_TAGS), args.seed),
            None,
        ),
        None => (
            Dataset::generate(args.tags.unwrap_or(DEFAULT_TAGS), args.seed),
            None,
        ),
        Some(path) => {
            eprintln!("loading {}", path.display());
            let (ds, rep) = tsvdata::load(&path, args.seed, args.tags)?;
            println!(
                "data file: {} ({} lines; {} tags of more than {} bytes skipped (LMDB's keys), {} repeats \
                 dropped, {} cut by --tags; {} kept)",
                path.display(),
                num(rep.lines as f64),
                num(rep.too_long as f64),
                tsvdata::MAX_TEXT,
                num(rep.duplicates as f64),
                num(rep.cut as f64),
                num(rep.kept as f64)
            );
            (ds, Some(rep))
        }
    };
    Ok((ds, rep, t.elapsed().as_secs_f64()))
}

fn compare(args: &Args) -> Result<()> {
    let mut names: Vec<String> = args.engines.iter().map(|s| s.trim().to_string()).collect();
    names.retain(|s| !s.is_empty());
    names.dedup();
    if names.first().map(String::as_str) != Some("tagstore") {
        names.retain(|n| n != "tagstore");
        names.insert(0, "tagstore".into());
    }
    for n in &names {
        if !engines::ENGINES.contains(&n.as_str()) {
            bail!(
                "unknown engine {n:?} (known: {})",
                engines::ENGINES.join(", ")
            );
        }
    }
    let machine = Machine::probe();
    machine.print();
    let (ds, load_report, gen_s) = dataset(args)?;
    let (n, opts) = load_size(args, &ds, load_report.is_some());
    let geo = opts.geometry();
    let store_opts = if args.no_size_hint {
        CreateOptions {
            expected_tags: 0,
            ..opts.clone()
        }
    } else {
        opts.clone()
    };
    let (tags, plants) = ds.with_plants(
        STORE_SEED,
        geo.primary_buckets_per_half,
        geo.primary_capacity(),
    );
    let mean_len =
        tags.iter().map(|t| t.encoded_len() - 4).sum::<usize>() as f64 / tags.len() as f64;
    let peers: Vec<(&str, &str)> = vec![
        ("sqlite", engines::SQLITE_SETTINGS),
        ("redb", engines::REDB_SETTINGS),
        ("lmdb", engines::LMDB_SETTINGS),
        ("fjall", engines::FJALL_SETTINGS),
    ];
    let mut settings = serde_json::json!({
        "tags": n,
        "seed": args.seed,
        "peer_txn": args.peer_txn,
        "bulk_round": args.bulk_round,
        "data": ds.source,
        "data_file": load_report,
        "objects": ds.objects.len(),
        "subjects": ds.subjects.len(),
        "zipf_exponent": ZIPF_S,
        "relationships": ds.rels,
        "relationship_weights": REL_WEIGHTS,
        "mix_relationships": ds.mix_rels,
        "mean_tag_bytes": mean_len,
        "tagstore": format!(
            "{}; seed fixed; insert_batch for the load, delete_batch for \
             the bulk delete; Durability::None, sync() = msync+fsync; hot copies of FIND \
             results: {}; {}",
            if args.no_size_hint {
                format!(
                    "no size hint (grows from one bucket per half; {}-block buckets)",
                    geo.blocks_per_primary
                )
            } else {
                format!(
                    "default geometry for {n} expected tags: {} primary buckets per half x {} \
                     blocks, {}-block secondary buckets",
                    geo.primary_buckets_per_half, geo.blocks_per_primary, geo.blocks_per_secondary
                )
            },
            match args.hot_bytes {
                None => "the default 32 MiB".to_string(),
                Some(0) => "off".to_string(),
                Some(b) => format!("{b} bytes"),
            },
            engines::TAGSTORE_DURABLE
        ),
        "object_finds": args.object_finds,
        "subject_finds": args.subject_finds,
        "mix_ops": args.mix_ops,
        "peak_finds": args.peak_finds,
        "durable_singles": args.durable_singles,
        "durable_batches": args.durable_batches,
        "durable_batch_size": args.durable_batch_size,
    });
    for (name, s) in &peers {
        settings[*name] = serde_json::json!(s);
    }
    println!(
        "data:    {}; ready in {gen_s:.1} s",
        ds.describe(tags.len(), mean_len)
    );
    println!("tagstore: {}", settings["tagstore"].as_str().unwrap_or(""));
    for (name, s) in &peers {
        if names.iter().any(|n| n == name) {
            println!("{:<8} {s}", format!("{name}:"));
        }
    }
    println!(
        "peak isolation: peak key <*, {}, {:?}> has {} tags; its subject-half bucket {} holds {} tags \
         (capacity {}); rare key {:?} ({} tags) shares it; rare key {:?} sits in bucket {} holding {} tags",
        plants.peak_rel,
        plants.peak_subject,
        plants.peak_tags,
        plants.peak_bucket,
        plants.peak_bucket_load,
        geo.primary_capacity(),
        plants.rare_peak,
        RARE_TAGS,
        plants.rare_quiet,
        plants.quiet_bucket,
        plants.quiet_bucket_load
    );

    // Workloads, drawn once and replayed on every engine.
    let mut rng = Rng::new(args.seed ^ 0xF1_4D);
    let obj_q: Vec<(&str, &str)> = (0..args.object_finds)
        .map(|_| {
            let t = &tags[rng.below(tags.len())];
            (t.object.as_str(), t.relationship.as_str())
        })
        .collect();
    let subj_q: Vec<(&str, &str)> = (0..args.subject_finds)
        .map(|_| ds.subject_query(&mut rng))
        .collect();
    let mix: Vec<Op> = (0..args.mix_ops)
        .map(|_| match rng.below(100) {
            0..=74 => Op::FindSubject(ds.sample_subject(&mut rng)),
            75..=89 => Op::FindObject(rng.below(ds.objects.len())),
            90..=94 => Op::Delete(rng.below(tags.len())),
            _ => Op::Insert(ds.random_tag(&mut rng)),
        })
        .collect();
    let peak_q: Vec<(&str, &str)> = (0..2 * args.peak_finds)
        .map(|i| {
            let k = if i % 2 == 0 {
                &plants.rare_peak
            } else {
                &plants.rare_quiet
            };
            (k.as_str(), plants.rel.as_str())
        })
        .collect();
    // Fresh tags for the durable rows (objects no other phase uses).
    let n_durable = args.durable_singles + args.durable_batches * args.durable_batch_size;
    let durable_tags: Vec<Tag> = (0..n_durable)
        .map(|i| {
            let rel = ds.sample_rel(&mut rng).to_string();
            Tag::new(
                format!("durable/{:04}/IMG_{i:07}.jpg", i / 1000),
                rel,
                ds.subjects[ds.sample_subject(&mut rng)].as_str(),
            )
        })
        .collect();
    // Every other tag of the load order, for "delete half the tags".
    let half: Vec<Tag> = tags.iter().step_by(2).cloned().collect();
    // FINDs by object that check the engines agree after the bulk delete
    // and again after compaction.
    let check_q = &obj_q[..obj_q.len().min(5_000)];

    let base = match &args.dir {
        Some(d) => {
            std::fs::create_dir_all(d)?;
            tempfile::Builder::new().prefix("tagbench").tempdir_in(d)?
        }
        None => tempfile::Builder::new().prefix("tagbench").tempdir()?,
    };
    println!("files:   {}", base.path().display());
    println!(
        "method:  every phase runs in rounds, the engines taking turns (order rotating), so \
         that load from other processes falls on all of them alike (bulk load and delete: one \
         turn each with the whole set, a peer in one write transaction, unless --bulk-round / \
         --peer-txn say otherwise); after each turn an engine's background work (fjall's \
         flushes and compactions) is waited for, untimed"
    );
    println!();

    let ne = names.len();
    let mut rows: Vec<Row> = Vec::new();
    let mut row = |op: &str, unit: &'static str, hib: Option<bool>, values: Vec<f64>| {
        rows.push(Row {
            operation: op.to_string(),
            unit,
            higher_is_better: hib,
            values,
        })
    };
    let mut detail = Vec::new();

    // Bulk load: by default each engine loads the whole set in one call (a
    // peer in one write transaction), engines in turn; then one durable
    // sync each.
    if let Some(n) = args.peer_txn {
        engines::LOAD_TXN.store(n.max(1), std::sync::atomic::Ordering::Relaxed);
    }
    if let Some(b) = args.hot_bytes {
        engines::HOT_BYTES.store(b, std::sync::atomic::Ordering::Relaxed);
    }
    let bulk_round = args.bulk_round.unwrap_or(usize::MAX).max(1);
    let mut b = Bench {
        engines: Vec::new(),
        settle: vec![Duration::ZERO; ne],
    };
    for name in &names {
        b.engines
            .push(engines::open(name, &base.path().join(name), &store_opts)?);
    }
    eprintln!("bulk load of {} tags", tags.len());
    let mut acc = accs(ne);
    b.rounds(tags.len(), bulk_round.min(tags.len().max(1)), |i, e, r| {
        let t = Instant::now();
        e.load(&tags[r])
            .with_context(|| format!("{}: load", e.name()))?;
        acc[i].total += t.elapsed();
        Ok(())
    })?;
    let load_s: Vec<f64> = acc.iter().map(|a| a.total.as_secs_f64()).collect();
    let load_settle = b.settle_s();
    let (mut sync_s, mut files) = (vec![], vec![]);
    for e in b.engines.iter_mut() {
        let ((), s) = timed(|| e.sync()).with_context(|| format!("{}: sync", e.name()))?;
        sync_s.push(s);
        files.push(e.files()?);
    }
    let nt = tags.len() as f64;
    row(
        "bulk load incl. final sync",
        "tags/s",
        Some(true),
        load_s
            .iter()
            .zip(&sync_s)
            .map(|(l, s)| nt / (l + s))
            .collect(),
    );
    row(
        "bulk load, inserts only",
        "tags/s",
        Some(true),
        load_s.iter().map(|l| nt / l).collect(),
    );
    row("final sync", "s", Some(false), sync_s.clone());
    row(
        "background work after load turns (waited, not in the rows above)",
        "s",
        None,
        load_settle.clone(),
    );
    row(
        "allocated bytes per tag",
        "B",
        Some(false),
        files.iter().map(|f| f.allocated as f64 / nt).collect(),
    );
    detail.push(serde_json::json!({
        "phase": "bulk_load",
        "load_s": load_s,
        "sync_s": sync_s,
        "background_s": load_settle,
        "files": files,
    }));

    // FIND by object: few results each.
    eprintln!("{} FINDs by object", obj_q.len());
    for e in b.engines.iter_mut() {
        time_finds(e.as_mut(), &obj_q[..obj_q.len().min(2_000)], true)?;
    }
    let mut acc = accs(ne);
    b.rounds(obj_q.len(), 10_000, |i, e, r| {
        acc[i].finds(e, &obj_q[r], true)
    })?;
    let lats: Vec<Lat> = acc.into_iter().map(Acc::lat).collect();
    check_found("FIND-by-object results", &names, &lat_found(&lats));
    row(
        "FIND by object p50",
        "µs",
        Some(false),
        lats.iter().map(|l| l.p50_us).collect(),
    );
    row(
        "FIND by object p99",
        "µs",
        Some(false),
        lats.iter().map(|l| l.p99_us).collect(),
    );
    row(
        "FIND by object",
        "FINDs/s",
        Some(true),
        lats.iter().map(Lat::ops_per_s).collect(),
    );
    detail.push(serde_json::json!({"phase": "find_by_object", "lat": lats}));

    // FIND by subject, Zipf: throughput in tags delivered.
    eprintln!("{} FINDs by subject (Zipf)", subj_q.len());
    for e in b.engines.iter_mut() {
        time_finds(e.as_mut(), &subj_q[..subj_q.len().min(200)], false)?;
    }
    let mut acc = accs(ne);
    b.rounds(subj_q.len(), 1_000, |i, e, r| {
        acc[i].finds(e, &subj_q[r], false)
    })?;
    let subj_lats: Vec<Lat> = acc.into_iter().map(Acc::lat).collect();
    check_found("FIND-by-subject results", &names, &lat_found(&subj_lats));
    row(
        "FIND by subject (Zipf), delivered",
        "tags/s",
        Some(true),
        subj_lats.iter().map(Lat::results_per_s).collect(),
    );
    row(
        "FIND by subject (Zipf) p50",
        "µs",
        Some(false),
        subj_lats.iter().map(|l| l.p50_us).collect(),
    );
    detail.push(serde_json::json!({"phase": "find_by_subject_zipf", "lat": subj_lats}));

    // The same Zipf FINDs, and FINDs by object, with every result kept as
    // an owned `String` (tagstore: its iterator API; the peers: the visitor,
    // each result copied), as a caller that collects the results would run.
    for (what, qs, by_object) in [
        ("FIND by object, results as owned Strings", &obj_q, true),
        (
            "FIND by subject (Zipf), results as owned Strings",
            &subj_q,
            false,
        ),
    ] {
        let mut took = vec![Duration::ZERO; ne];
        let mut got = vec![0u64; ne];
        let mut out: Vec<String> = Vec::new();
        b.rounds(qs.len(), 1_000, |i, e, r| {
            let t = Instant::now();
            for (k, rel) in &qs[r] {
                out.clear();
                e.find_owned(k, rel, by_object, &mut out)?;
                got[i] += out.len() as u64;
            }
            took[i] += t.elapsed();
            Ok(())
        })?;
        check_same(what, &names, &got);
        let unit = if by_object { "FINDs/s" } else { "tags/s" };
        row(
            &format!("{what}{}", if by_object { "" } else { ", delivered" }),
            unit,
            Some(true),
            took.iter()
                .zip(&got)
                .map(|(d, n)| {
                    let count = if by_object {
                        qs.len() as f64
                    } else {
                        *n as f64
                    };
                    count / d.as_secs_f64().max(1e-9)
                })
                .collect(),
        );
    }

    // FIND by subject of every distinct (relationship, subject) key once,
    // in a shuffled order: the small keys weigh as much as the peaks.
    let every = ds.every_subject_key(args.seed ^ 0xE7E7);
    eprintln!("{} FINDs by subject, every distinct key once", every.len());
    let mut acc = accs(ne);
    b.rounds(every.len(), 5_000, |i, e, r| {
        acc[i].finds(e, &every[r], false)
    })?;
    let every_lats: Vec<Lat> = acc.into_iter().map(Acc::lat).collect();
    check_found(
        "FIND-by-subject (every key) results",
        &names,
        &lat_found(&every_lats),
    );
    row(
        &format!(
            "FIND by subject, every distinct key once ({}), delivered",
            int(every.len())
        ),
        "tags/s",
        Some(true),
        every_lats.iter().map(Lat::results_per_s).collect(),
    );
    row(
        "FIND by subject, every distinct key once",
        "keys/s",
        Some(true),
        every_lats.iter().map(Lat::ops_per_s).collect(),
    );
    detail.push(serde_json::json!({"phase": "find_by_subject_every_key", "lat": every_lats}));

    // The same FINDs on 2 threads, each with its own read handle; wall time.
    eprintln!("{} FINDs by subject (Zipf) on 2 threads", subj_q.len());
    let mut readers: Vec<[Box<dyn Finder>; 2]> = Vec::with_capacity(ne);
    for e in b.engines.iter_mut() {
        let mut pair = [e.reader()?, e.reader()?];
        for r in pair.iter_mut() {
            reader_finds(r.as_mut(), &subj_q[..subj_q.len().min(200)], false)?;
        }
        readers.push(pair);
    }
    let mut wall = vec![Duration::ZERO; ne];
    let mut found2 = vec![Found::default(); ne];
    turns(ne, subj_q.len(), 1_000, |i, r| {
        let qs = &subj_q[r];
        let (q0, q1) = qs.split_at(qs.len().div_ceil(2));
        let [r0, r1] = &mut readers[i];
        let t = Instant::now();
        let (a, c) = std::thread::scope(|s| {
            let h0 = s.spawn(|| reader_finds(r0.as_mut(), q0, false));
            let h1 = s.spawn(|| reader_finds(r1.as_mut(), q1, false));
            (h0.join(), h1.join())
        });
        wall[i] += t.elapsed();
        for h in [a, c] {
            found2[i] += h.map_err(|_| anyhow::anyhow!("{}: FIND thread panicked", names[i]))??;
        }
        Ok(())
    })?;
    drop(readers);
    check_found("FIND-by-subject results on 2 threads", &names, &found2);
    let tps2: Vec<f64> = found2
        .iter()
        .zip(&wall)
        .map(|(f, w)| f.results as f64 / w.as_secs_f64().max(1e-12))
        .collect();
    row(
        "FIND by subject (Zipf) on 2 threads, delivered",
        "tags/s",
        Some(true),
        tps2.clone(),
    );
    row(
        "2 threads ÷ 1 thread (same engine)",
        "×",
        None,
        tps2.iter()
            .zip(&subj_lats)
            .map(|(t, l)| t / l.results_per_s())
            .collect(),
    );
    detail.push(serde_json::json!({
        "phase": "find_by_subject_zipf_2_threads",
        "wall_s": wall.iter().map(Duration::as_secs_f64).collect::<Vec<_>>(),
        "results": found2.iter().map(|f| f.results).collect::<Vec<_>>(),
        "tags_per_s": tps2,
    }));

    // Peak isolation: the same rare FIND with and without a peak in its bucket.
    eprintln!("peak isolation: {} FINDs of each rare key", args.peak_finds);
    for e in b.engines.iter_mut() {
        time_finds(e.as_mut(), &peak_q[..peak_q.len().min(200)], false)?;
    }
    let (mut peak, mut quiet) = (accs(ne), accs(ne));
    b.rounds(peak_q.len(), 2_000, |i, e, r| {
        for (j, q) in peak_q[r].iter().enumerate() {
            let a = if j % 2 == 0 {
                &mut peak[i]
            } else {
                &mut quiet[i]
            };
            a.finds(e, std::slice::from_ref(q), false)?;
        }
        Ok(())
    })?;
    for (i, a) in peak.iter().chain(quiet.iter()).enumerate() {
        let want = (RARE_TAGS * a.ns.len()) as u64;
        if a.found.results != want {
            eprintln!(
                "WARNING: {}: rare key FIND returned {} tags, expected {want}",
                names[i % ne],
                a.found.results
            );
        }
    }
    let peak: Vec<Lat> = peak.into_iter().map(Acc::lat).collect();
    let quiet: Vec<Lat> = quiet.into_iter().map(Acc::lat).collect();
    row(
        "rare FIND, bucket with a peak, p50",
        "µs",
        Some(false),
        peak.iter().map(|l| l.p50_us).collect(),
    );
    row(
        "rare FIND, bucket with a peak, p99",
        "µs",
        Some(false),
        peak.iter().map(|l| l.p99_us).collect(),
    );
    row(
        "rare FIND, quiet bucket, p50",
        "µs",
        Some(false),
        quiet.iter().map(|l| l.p50_us).collect(),
    );
    row(
        "rare FIND, quiet bucket, p99",
        "µs",
        Some(false),
        quiet.iter().map(|l| l.p99_us).collect(),
    );
    row(
        "peak ÷ quiet (p50, same engine)",
        "×",
        None,
        peak.iter()
            .zip(&quiet)
            .map(|(p, q)| p.p50_us / q.p50_us)
            .collect(),
    );
    // For scale: FIND of the peak key itself.
    let big_q = vec![(plants.peak_subject.as_str(), plants.peak_rel.as_str()); 50];
    let mut big = accs(ne);
    b.rounds(big_q.len(), 10, |i, e, r| big[i].finds(e, &big_q[r], false))?;
    let big: Vec<Lat> = big.into_iter().map(Acc::lat).collect();
    row(
        &format!(
            "FIND of the peak key itself ({} tags), p50",
            plants.peak_tags
        ),
        "µs",
        Some(false),
        big.iter().map(|l| l.p50_us).collect(),
    );
    // Writes next to a peak: DELETE then re-INSERT the same tag (the store
    // ends as it began), for tags of the peak key and of the quiet rare key.
    // Spread over the load order, so over the whole chain of the peak.
    let all_peak: Vec<&Tag> = tags
        .iter()
        .filter(|t| t.subject == plants.peak_subject && t.relationship == plants.peak_rel)
        .collect();
    let peak_tags: Vec<&Tag> = all_peak
        .iter()
        .step_by((all_peak.len() / 300).max(1))
        .take(300)
        .copied()
        .collect();
    let quiet_tags: Vec<&Tag> = tags
        .iter()
        .filter(|t| t.subject == plants.rare_quiet)
        .collect();
    let mut wr = [accs(ne), accs(ne), accs(ne), accs(ne)];
    b.rounds(peak_tags.len(), 50, |i, e, r| {
        for j in r {
            for (c, t) in [(0, peak_tags[j]), (2, quiet_tags[j % quiet_tags.len()])] {
                let t0 = Instant::now();
                let gone = e.delete(t)?;
                let t1 = Instant::now();
                let back = e.insert(t)?;
                let d1 = t1.elapsed();
                if !gone || !back {
                    bail!("{}: DELETE/re-INSERT of {t:?} changed nothing", e.name());
                }
                wr[c][i].ns.push((t1 - t0).as_nanos() as u64);
                wr[c + 1][i].ns.push(d1.as_nanos() as u64);
            }
        }
        Ok(())
    })?;
    let [pd, pi, qd, qi] = wr.map(|a| a.into_iter().map(Acc::lat).collect::<Vec<Lat>>());
    for (what, lats) in [
        ("DELETE, tag of the peak key, p50", &pd),
        ("DELETE, tag of a quiet rare key, p50", &qd),
        ("re-INSERT, tag of the peak key, p50", &pi),
        ("re-INSERT, tag of a quiet rare key, p50", &qi),
    ] {
        row(
            what,
            "µs",
            Some(false),
            lats.iter().map(|l| l.p50_us).collect(),
        );
    }
    detail.push(serde_json::json!({
        "phase": "writes_next_to_a_peak",
        "peak_delete": pd,
        "peak_insert": pi,
        "quiet_delete": qd,
        "quiet_insert": qi,
    }));
    detail.push(serde_json::json!({
        "phase": "peak_isolation",
        "peak": peak,
        "quiet": quiet,
        "peak_key": big,
    }));

    // Flickr++ mix (mutates the stores, so it runs after the read rows).
    eprintln!("Flickr++ mix of {} operations", mix.len());
    let mut acc = accs(ne);
    b.rounds(mix.len(), 1_000, |i, e, r| {
        let a = &mut acc[i];
        for op in &mix[r] {
            let t = Instant::now();
            let kind = match op {
                Op::FindSubject(s) => {
                    a.found += find_one(e, &ds.subjects[*s], &ds.mix_rels.0, false)?;
                    0
                }
                Op::FindObject(o) => {
                    a.found += find_one(e, &ds.objects[*o], &ds.mix_rels.1, true)?;
                    0
                }
                Op::Delete(k) => {
                    a.changed += e.delete(&tags[*k])? as u64;
                    1
                }
                Op::Insert(t) => {
                    a.changed += e.insert(t)? as u64;
                    2
                }
            };
            let d = t.elapsed();
            a.total += d;
            a.ns.push(d.as_nanos() as u64);
            match kind {
                1 => a.deletes_ns.push(d.as_nanos() as u64),
                2 => a.inserts_ns.push(d.as_nanos() as u64),
                _ => {}
            }
        }
        Ok(())
    })?;
    check_same(
        "mix writes that changed the store",
        &names,
        &acc.iter().map(|a| a.changed).collect::<Vec<_>>(),
    );
    let insert_lat: Vec<Lat> = acc
        .iter_mut()
        .map(|a| Lat::new(std::mem::take(&mut a.inserts_ns), a.total, 0))
        .collect();
    let delete_lat: Vec<Lat> = acc
        .iter_mut()
        .map(|a| Lat::new(std::mem::take(&mut a.deletes_ns), a.total, 0))
        .collect();
    let mix_lat: Vec<Lat> = acc.into_iter().map(Acc::lat).collect();
    check_found("mix results", &names, &lat_found(&mix_lat));
    row(
        "Flickr++ mix",
        "ops/s",
        Some(true),
        mix_lat.iter().map(Lat::ops_per_s).collect(),
    );
    row(
        "Flickr++ mix, delivered",
        "tags/s",
        Some(true),
        mix_lat.iter().map(Lat::results_per_s).collect(),
    );
    row(
        "Flickr++ mix, op p99",
        "µs",
        Some(false),
        mix_lat.iter().map(|l| l.p99_us).collect(),
    );
    for (what, lats) in [("INSERT", &insert_lat), ("DELETE", &delete_lat)] {
        for (p, pick) in [("p50", 0), ("p99", 1)] {
            row(
                &format!("Flickr++ mix, {what} {p}"),
                "µs",
                Some(false),
                lats.iter()
                    .map(|l| if pick == 0 { l.p50_us } else { l.p99_us })
                    .collect(),
            );
        }
    }
    detail.push(serde_json::json!({
        "phase": "flickr_mix",
        "lat": mix_lat,
        "inserts": insert_lat,
        "deletes": delete_lat,
    }));

    // Durable writes: fresh tags, each commit fsynced before it returns.
    let (singles, batch) = (args.durable_singles, args.durable_batch_size.max(1));
    eprintln!(
        "{singles} durable inserts, {} durable batches of {batch}",
        args.durable_batches
    );
    for e in b.engines.iter_mut() {
        e.set_durable(true)
            .with_context(|| format!("{}: durable mode", e.name()))?;
    }
    settle_before("durable inserts", base.path(), args.settle_flushes)?;
    let mut acc = accs(ne);
    b.rounds(singles, 50, |i, e, r| {
        for t in &durable_tags[r] {
            let t0 = Instant::now();
            let new = e.insert_durable(t)?;
            let d = t0.elapsed();
            if !new {
                bail!(
                    "{}: durable insert of a fresh tag changed nothing",
                    e.name()
                );
            }
            acc[i].total += d;
            acc[i].ns.push(d.as_nanos() as u64);
        }
        Ok(())
    })?;
    let single_lat: Vec<Lat> = acc.into_iter().map(Acc::lat).collect();
    let mut acc = accs(ne);
    settle_before("durable batches", base.path(), args.settle_flushes)?;
    b.rounds(args.durable_batches, 1, |i, e, r| {
        for k in r {
            let s = singles + k * batch;
            let t0 = Instant::now();
            e.insert_batch_durable(&durable_tags[s..s + batch])?;
            let d = t0.elapsed();
            acc[i].total += d;
            acc[i].ns.push(d.as_nanos() as u64);
        }
        Ok(())
    })?;
    let batch_lat: Vec<Lat> = acc.into_iter().map(Acc::lat).collect();
    for e in b.engines.iter_mut() {
        e.set_durable(false)
            .with_context(|| format!("{}: leaving durable mode", e.name()))?;
    }
    row(
        &format!("{} individually durable inserts", int(singles)),
        "tags/s",
        Some(true),
        single_lat.iter().map(Lat::ops_per_s).collect(),
    );
    row(
        "individually durable insert p50",
        "µs",
        Some(false),
        single_lat.iter().map(|l| l.p50_us).collect(),
    );
    row(
        "individually durable insert p99",
        "µs",
        Some(false),
        single_lat.iter().map(|l| l.p99_us).collect(),
    );
    row(
        "individually durable insert, slowest",
        "µs",
        Some(false),
        single_lat.iter().map(|l| l.max_us).collect(),
    );
    row(
        &format!(
            "{} batches of {} durable",
            int(args.durable_batches),
            int(batch)
        ),
        "tags/s",
        Some(true),
        batch_lat
            .iter()
            .map(|l| l.ops_per_s() * batch as f64)
            .collect(),
    );
    detail.push(serde_json::json!({
        "phase": "durable_inserts",
        "singles": single_lat,
        "batches": batch_lat,
        "batch_size": batch,
    }));

    // Delete half the tags (every other one of the load order), then one
    // durable sync.
    eprintln!("deleting {} tags (half)", half.len());
    let mut acc = accs(ne);
    b.rounds(half.len(), bulk_round.min(half.len().max(1)), |i, e, r| {
        let t = Instant::now();
        e.delete_many(&half[r])
            .with_context(|| format!("{}: delete", e.name()))?;
        acc[i].total += t.elapsed();
        Ok(())
    })?;
    let mut del_s: Vec<f64> = acc.iter().map(|a| a.total.as_secs_f64()).collect();
    for (i, e) in b.engines.iter_mut().enumerate() {
        let ((), s) = timed(|| e.sync()).with_context(|| format!("{}: sync", e.name()))?;
        del_s[i] += s;
    }
    row(
        &format!(
            "delete half the tags ({}), incl. final sync",
            int(half.len())
        ),
        "tags/s",
        Some(true),
        del_s.iter().map(|s| half.len() as f64 / s).collect(),
    );
    let mut after_delete = vec![Found::default(); ne];
    for (i, e) in b.engines.iter_mut().enumerate() {
        for (k, r) in check_q {
            after_delete[i] += find_one(e.as_mut(), k, r, true)?;
        }
    }
    check_found(
        "FIND-by-object results after deleting half",
        &names,
        &after_delete,
    );

    // Compaction: sizes before and after.
    eprintln!("compaction");
    let before = b.files()?;
    let mut compact_s = Vec::with_capacity(ne);
    let mut compacted: Vec<Box<dyn Engine>> = Vec::with_capacity(ne);
    for e in std::mem::take(&mut b.engines) {
        let name = e.name();
        let (e, s) = timed(|| e.compact()).with_context(|| format!("{name}: compaction"))?;
        compact_s.push(s);
        compacted.push(e);
    }
    b.engines = compacted;
    let after = b.files()?;
    let mut after_compact = vec![Found::default(); ne];
    for (i, e) in b.engines.iter_mut().enumerate() {
        for (k, r) in check_q {
            after_compact[i] += find_one(e.as_mut(), k, r, true)?;
        }
        if after_compact[i].results != after_delete[i].results {
            eprintln!(
                "WARNING: {}: {} FIND results after compaction, {} before",
                names[i], after_compact[i].results, after_delete[i].results
            );
        }
    }
    let mib = |f: &[Files], alloc: bool| -> Vec<f64> {
        f.iter()
            .map(|f| (if alloc { f.allocated } else { f.bytes }) as f64 / MIB)
            .collect()
    };
    row(
        "after deleting half: file size",
        "MiB",
        Some(false),
        mib(&before, false),
    );
    row(
        "after deleting half: allocated",
        "MiB",
        Some(false),
        mib(&before, true),
    );
    row("compaction", "s", Some(false), compact_s.clone());
    row(
        "after compaction: file size",
        "MiB",
        Some(false),
        mib(&after, false),
    );
    row(
        "after compaction: allocated",
        "MiB",
        Some(false),
        mib(&after, true),
    );
    detail.push(serde_json::json!({
        "phase": "delete_half_and_compaction",
        "deleted": half.len(),
        "delete_s": del_s,
        "files_before": before,
        "compaction_s": compact_s,
        "files_after": after,
    }));

    let settle_total = b.settle_s();
    row(
        "background work after all other turns (waited, untimed)",
        "s",
        None,
        settle_total
            .iter()
            .zip(&load_settle)
            .map(|(t, l)| t - l)
            .collect(),
    );

    for e in b.engines {
        e.close()?;
    }

    println!();
    let (header, body) = table(&names, &rows);
    report::print_table(&header, &body);
    if args.markdown {
        println!();
        report::print_markdown(&header, &body);
    }
    println!();
    println!(
        "ratio columns: peer ÷ tagstore, from this run; ↑ higher is better, ↓ lower is better"
    );

    if let Some(path) = &args.json {
        let rep = CompareReport {
            machine,
            settings,
            engines: names.clone(),
            plants,
            rows,
            detail,
        };
        std::fs::write(path, serde_json::to_string_pretty(&rep)?)
            .with_context(|| format!("writing {}", path.display()))?;
        println!("JSON written to {}", path.display());
    }
    Ok(())
}

/// Per-engine accumulator of timed operations.
#[derive(Default)]
struct Acc {
    ns: Vec<u64>,
    inserts_ns: Vec<u64>,
    deletes_ns: Vec<u64>,
    total: Duration,
    found: Found,
    changed: u64,
}

fn accs(n: usize) -> Vec<Acc> {
    (0..n).map(|_| Acc::default()).collect()
}

impl Acc {
    fn finds(&mut self, e: &mut dyn Engine, qs: &[(&str, &str)], by_object: bool) -> Result<()> {
        let (d, f) = time_finds_raw(e, qs, by_object, &mut self.ns)?;
        self.total += d;
        self.found += f;
        Ok(())
    }
    fn lat(self) -> Lat {
        Lat::new(self.ns, self.total, self.found.results).with_bytes(self.found.bytes)
    }
}

/// Calls `f(participant, range)` over `0..n` in rounds of `chunk`, each of
/// `k` participants taking its turn per round; the first one rotates.
/// Lets the disk settle before the timed row `what` (see `settle.rs`) and
/// says how long that took.
fn settle_before(what: &str, dir: &std::path::Path, max: usize) -> Result<()> {
    if max == 0 {
        return Ok(());
    }
    let s = settle::settle_disk(dir, max)?;
    eprintln!(
        "before {what}: the disk settled after {} flushes in {:.1} ms (the first took {:.0} µs)",
        s.flushes,
        s.total.as_secs_f64() * 1e3,
        s.first.as_secs_f64() * 1e6
    );
    Ok(())
}

pub fn turns(
    k: usize,
    n: usize,
    chunk: usize,
    mut f: impl FnMut(usize, Range<usize>) -> Result<()>,
) -> Result<()> {
    for (round, start) in (0..n).step_by(chunk.max(1)).enumerate() {
        let r = start..(start + chunk).min(n);
        for j in 0..k {
            f((round + j) % k, r.clone())?;
        }
    }
    Ok(())
}

fn table(names: &[String], rows: &[Row]) -> (Vec<String>, Vec<Vec<String>>) {
    let mut header = vec!["operation".to_string(), "unit".to_string()];
    for (i, n) in names.iter().enumerate() {
        header.push(n.clone());
        if i > 0 {
            header.push(format!("{n}/tagstore"));
        }
    }
    let body = rows
        .iter()
        .map(|r| {
            let arrow = match r.higher_is_better {
                Some(true) => " ↑",
                Some(false) => " ↓",
                None => "",
            };
            let mut v = vec![r.operation.clone(), format!("{}{arrow}", r.unit)];
            for (i, x) in r.values.iter().enumerate() {
                v.push(num(*x));
                if i > 0 {
                    v.push(if r.higher_is_better.is_some() {
                        format!("{:.2}×", x / r.values[0])
                    } else {
                        String::new()
                    });
                }
            }
            v
        })
        .collect();
    (header, body)
}
