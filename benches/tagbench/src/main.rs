//! tagbench: tagstore against SQLite and redb on one seeded synthetic tag
//! set, and (`--sweep`) a sweep of tagstore's bucket geometry.
//!
//! Usage: `cargo run --release -p tagbench -- [--tags N] [--engines tagstore,sqlite,redb] [--json FILE]`
//! and `cargo run --release -p tagbench -- --sweep`. See benches/README.md.

mod data;
mod engines;
mod report;
mod sweep;

use anyhow::{bail, Context, Result};
use clap::Parser;
use data::{Dataset, Plants, Rng, RARE_TAGS, RELS, REL_WEIGHTS, ZIPF_S};
use engines::Engine;
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
    about = "Benchmarks tagstore against SQLite and redb"
)]
pub struct Args {
    /// Tags to bulk load.
    #[arg(long, default_value_t = 1_000_000)]
    tags: usize,
    /// Engines, comma separated (tagstore is always the reference column).
    #[arg(long, value_delimiter = ',', default_value = "tagstore,sqlite,redb")]
    engines: Vec<String>,
    /// Also write the results as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Seed of the synthetic data and workloads.
    #[arg(long, default_value_t = 20_240_601)]
    seed: u64,
    /// Directory for the engines' files (a fresh temporary directory inside it).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// FINDs by object (few results each).
    #[arg(long, default_value_t = 100_000)]
    object_finds: usize,
    /// FINDs by subject, subjects drawn Zipf.
    #[arg(long, default_value_t = 10_000)]
    subject_finds: usize,
    /// Operations of the Flickr++ mix.
    #[arg(long, default_value_t = 20_000)]
    mix_ops: usize,
    /// FINDs of each planted rare key (peak isolation).
    #[arg(long, default_value_t = 10_000)]
    peak_finds: usize,
    /// Print the tables as Markdown too.
    #[arg(long)]
    markdown: bool,
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

fn main() -> Result<()> {
    let args = Args::parse();
    if args.tags < 100 {
        bail!("--tags must be at least 100");
    }
    if args.sweep {
        return sweep::run(&args);
    }
    compare(&args)
}

fn timed<T>(f: impl FnOnce() -> Result<T>) -> Result<(T, f64)> {
    let t = Instant::now();
    let v = f()?;
    Ok((v, t.elapsed().as_secs_f64()))
}

/// Runs `qs` FINDs (by object when `by_object`), each timed.
pub fn time_finds(
    e: &mut dyn Engine,
    qs: &[(&str, &str)],
    by_object: bool,
    out: &mut Vec<String>,
) -> Result<Lat> {
    let mut ns = Vec::with_capacity(qs.len());
    let (total, results) = time_finds_raw(e, qs, by_object, out, &mut ns)?;
    Ok(Lat::new(ns, total, results))
}

/// Runs FINDs, appending each one's nanoseconds to `ns`; returns the summed
/// time of the FINDs alone and the tags they returned.
pub fn time_finds_raw(
    e: &mut dyn Engine,
    qs: &[(&str, &str)],
    by_object: bool,
    out: &mut Vec<String>,
    ns: &mut Vec<u64>,
) -> Result<(Duration, u64)> {
    let mut results = 0u64;
    let mut total = Duration::ZERO;
    for (k, r) in qs {
        out.clear();
        let t = Instant::now();
        if by_object {
            e.find_subjects(k, r, out)?;
        } else {
            e.find_objects(k, r, out)?;
        }
        let d = t.elapsed();
        total += d;
        ns.push(d.as_nanos() as u64);
        results += out.len() as u64;
    }
    Ok((total, results))
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

fn compare(args: &Args) -> Result<()> {
    let mut names: Vec<String> = args.engines.iter().map(|s| s.trim().to_string()).collect();
    names.retain(|s| !s.is_empty());
    names.dedup();
    if names.first().map(String::as_str) != Some("tagstore") {
        names.retain(|n| n != "tagstore");
        names.insert(0, "tagstore".into());
    }
    let machine = Machine::probe();
    machine.print();
    let n = args.tags;
    let opts = CreateOptions {
        expected_tags: n as u64,
        seed: Some(STORE_SEED),
        ..Default::default()
    };
    let geo = opts.geometry();

    let t = Instant::now();
    let ds = Dataset::generate(n, args.seed);
    let (tags, plants) = ds.with_plants(
        STORE_SEED,
        geo.primary_buckets_per_half,
        geo.primary_capacity(),
    );
    let gen_s = t.elapsed().as_secs_f64();
    let mean_len =
        tags.iter().map(|t| t.encoded_len() - 4).sum::<usize>() as f64 / tags.len() as f64;
    let settings = serde_json::json!({
        "tags": n,
        "seed": args.seed,
        "objects": ds.objects.len(),
        "subjects": ds.subjects.len(),
        "zipf_exponent": ZIPF_S,
        "relationships": RELS,
        "relationship_weights": REL_WEIGHTS,
        "mean_tag_bytes": mean_len,
        "tagstore": format!(
            "default geometry for {n} expected tags: {} primary buckets per half x {} blocks, \
             {}-block secondary buckets; seed fixed; insert_batch for the load; sync() = msync+fsync",
            geo.primary_buckets_per_half, geo.blocks_per_primary, geo.blocks_per_secondary
        ),
        "sqlite": engines::SQLITE_SETTINGS,
        "redb": engines::REDB_SETTINGS,
        "object_finds": args.object_finds,
        "subject_finds": args.subject_finds,
        "mix_ops": args.mix_ops,
        "peak_finds": args.peak_finds,
    });
    println!(
        "data:    {} tags ({:.1} bytes of strings on average), {} objects uniform, {} subjects Zipf({ZIPF_S}), \
         relationships {:?} weighted {:?}; seed {}; generated in {gen_s:.1} s",
        num(tags.len() as f64),
        mean_len,
        num(ds.objects.len() as f64),
        num(ds.subjects.len() as f64),
        RELS,
        REL_WEIGHTS,
        args.seed
    );
    println!("tagstore: {}", settings["tagstore"].as_str().unwrap_or(""));
    println!("sqlite:  {}", engines::SQLITE_SETTINGS);
    println!("redb:    {}", engines::REDB_SETTINGS);
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
        .map(|_| {
            let s = ds.zipf.sample(&mut rng);
            (ds.subjects[s].as_str(), RELS[rng.rel()])
        })
        .collect();
    let mix: Vec<Op> = (0..args.mix_ops)
        .map(|_| match rng.below(100) {
            0..=74 => Op::FindSubject(ds.zipf.sample(&mut rng)),
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
            (k.as_str(), plants.rel)
        })
        .collect();

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
         that load from other processes falls on all of them alike"
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
    let mut out = Vec::with_capacity(1 << 16);

    // Bulk load in rounds of 50,000 tags, then one durable sync each.
    let mut engines: Vec<Box<dyn Engine>> = Vec::new();
    for name in &names {
        engines.push(engines::open(name, &base.path().join(name), &opts)?);
    }
    eprintln!("bulk load of {} tags", tags.len());
    let mut acc = accs(ne);
    rounds(&mut engines, tags.len(), 50_000, |i, e, r| {
        let t = Instant::now();
        e.load(&tags[r])
            .with_context(|| format!("{}: load", e.name()))?;
        acc[i].total += t.elapsed();
        Ok(())
    })?;
    let load_s: Vec<f64> = acc.iter().map(|a| a.total.as_secs_f64()).collect();
    let (mut sync_s, mut bytes) = (vec![], vec![]);
    for e in engines.iter_mut() {
        let ((), s) = timed(|| e.sync()).with_context(|| format!("{}: sync", e.name()))?;
        sync_s.push(s);
        bytes.push(e.allocated_bytes()? as f64);
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
        "allocated bytes per tag",
        "B",
        Some(false),
        bytes.iter().map(|b| b / nt).collect(),
    );

    // FIND by object: few results each.
    eprintln!("{} FINDs by object", obj_q.len());
    for e in engines.iter_mut() {
        time_finds(e.as_mut(), &obj_q[..obj_q.len().min(2_000)], true, &mut out)?;
    }
    let mut acc = accs(ne);
    rounds(&mut engines, obj_q.len(), 10_000, |i, e, r| {
        acc[i].finds(e, &obj_q[r], true, &mut out)
    })?;
    let lats: Vec<Lat> = acc.into_iter().map(Acc::lat).collect();
    check_same(
        "FIND-by-object results",
        &names,
        &lats.iter().map(|l| l.results).collect::<Vec<_>>(),
    );
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
    for e in engines.iter_mut() {
        time_finds(
            e.as_mut(),
            &subj_q[..subj_q.len().min(200)],
            false,
            &mut out,
        )?;
    }
    let mut acc = accs(ne);
    rounds(&mut engines, subj_q.len(), 1_000, |i, e, r| {
        acc[i].finds(e, &subj_q[r], false, &mut out)
    })?;
    let lats: Vec<Lat> = acc.into_iter().map(Acc::lat).collect();
    check_same(
        "FIND-by-subject results",
        &names,
        &lats.iter().map(|l| l.results).collect::<Vec<_>>(),
    );
    row(
        "FIND by subject (Zipf), delivered",
        "tags/s",
        Some(true),
        lats.iter().map(Lat::results_per_s).collect(),
    );
    row(
        "FIND by subject (Zipf) p50",
        "µs",
        Some(false),
        lats.iter().map(|l| l.p50_us).collect(),
    );
    detail.push(serde_json::json!({"phase": "find_by_subject_zipf", "lat": lats}));

    // Peak isolation: the same rare FIND with and without a peak in its bucket.
    eprintln!("peak isolation: {} FINDs of each rare key", args.peak_finds);
    for e in engines.iter_mut() {
        time_finds(
            e.as_mut(),
            &peak_q[..peak_q.len().min(200)],
            false,
            &mut out,
        )?;
    }
    let (mut peak, mut quiet) = (accs(ne), accs(ne));
    rounds(&mut engines, peak_q.len(), 2_000, |i, e, r| {
        for (j, q) in peak_q[r].iter().enumerate() {
            let a = if j % 2 == 0 {
                &mut peak[i]
            } else {
                &mut quiet[i]
            };
            a.finds(e, std::slice::from_ref(q), false, &mut out)?;
        }
        Ok(())
    })?;
    for (i, a) in peak.iter().chain(quiet.iter()).enumerate() {
        let want = (RARE_TAGS * a.ns.len()) as u64;
        if a.results != want {
            eprintln!(
                "WARNING: {}: rare key FIND returned {} tags, expected {want}",
                names[i % ne],
                a.results
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
    let big_q = vec![(plants.peak_subject.as_str(), plants.peak_rel); 50];
    let mut big = accs(ne);
    rounds(&mut engines, big_q.len(), 10, |i, e, r| {
        big[i].finds(e, &big_q[r], false, &mut out)
    })?;
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
    rounds(&mut engines, peak_tags.len(), 50, |i, e, r| {
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

    // Flickr++ mix (mutates the stores, so it runs last).
    eprintln!("Flickr++ mix of {} operations", mix.len());
    let mut acc = accs(ne);
    rounds(&mut engines, mix.len(), 1_000, |i, e, r| {
        let a = &mut acc[i];
        for op in &mix[r] {
            out.clear();
            let t = Instant::now();
            let kind = match op {
                Op::FindSubject(s) => {
                    e.find_objects(&ds.subjects[*s], "isa", &mut out)?;
                    0
                }
                Op::FindObject(o) => {
                    e.find_subjects(&ds.objects[*o], "owns", &mut out)?;
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
            a.results += out.len() as u64;
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
    check_same(
        "mix results",
        &names,
        &mix_lat.iter().map(|l| l.results).collect::<Vec<_>>(),
    );
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

    for e in engines {
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
    results: u64,
    changed: u64,
}

fn accs(n: usize) -> Vec<Acc> {
    (0..n).map(|_| Acc::default()).collect()
}

impl Acc {
    fn finds(
        &mut self,
        e: &mut dyn Engine,
        qs: &[(&str, &str)],
        by_object: bool,
        out: &mut Vec<String>,
    ) -> Result<()> {
        let l = time_finds_raw(e, qs, by_object, out, &mut self.ns)?;
        self.total += l.0;
        self.results += l.1;
        Ok(())
    }
    fn lat(self) -> Lat {
        Lat::new(self.ns, self.total, self.results)
    }
}

/// Runs `f(engine index, engine, range)` over `0..n` in rounds of `chunk`,
/// the engines taking turns; the first engine of a round rotates.
fn rounds(
    engines: &mut [Box<dyn Engine>],
    n: usize,
    chunk: usize,
    mut f: impl FnMut(usize, &mut dyn Engine, Range<usize>) -> Result<()>,
) -> Result<()> {
    turns(engines.len(), n, chunk, |i, r| f(i, engines[i].as_mut(), r))
}

/// Calls `f(participant, range)` over `0..n` in rounds of `chunk`, each of
/// `k` participants taking its turn per round; the first one rotates.
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
