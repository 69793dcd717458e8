//! Geometry sweep: blocks per primary bucket x target primary fill, each
//! loaded with the same synthetic tags, to choose the default geometry.

use crate::data::{Dataset, Rng, RARE_TAGS};
use crate::engines::{Engine, Tagstore};
use crate::report::{num, Lat, Machine};
use crate::{time_finds, time_finds_raw, turns, Args, STORE_SEED};
use anyhow::{Context, Result};
use serde::Serialize;
use std::time::{Duration, Instant};
use tagstore::block::SLOTS_PER_BLOCK;
use tagstore::CreateOptions;

#[derive(Debug, Serialize)]
struct Point {
    blocks_per_primary: u32,
    target_fill: f64,
    primary_buckets_per_half: u32,
    blocks_per_secondary: u32,
    load_tags_per_s: f64,
    sync_s: f64,
    find_object: Lat,
    find_rare: Lat,
    find_rare_in_peak_bucket: Lat,
    /// Share of all stored slots (both halves) that sit in secondary buckets.
    secondary_share: f64,
    stats: tagstore::Stats,
}

#[derive(Serialize)]
struct SweepReport {
    machine: Machine,
    tags: usize,
    seed: u64,
    points: Vec<Point>,
}

pub fn run(args: &Args) -> Result<()> {
    let machine = Machine::probe();
    machine.print();
    let n = args.tags;
    let ds = Dataset::generate(n, args.seed);
    let mut rng = Rng::new(args.seed ^ 0x5EE9);
    let n_obj = args.object_finds.min(50_000);
    let obj_q: Vec<(&str, &str)> = (0..n_obj)
        .map(|_| {
            let t = &ds.base[rng.below(ds.base.len())];
            (t.object.as_str(), t.relationship.as_str())
        })
        .collect();
    let rare = ds.rare_subject_keys(&mut rng, 20_000);
    let rare_q: Vec<(&str, &str)> = rare.iter().map(|(r, s)| (s.as_str(), *r)).collect();
    println!(
        "sweep:   {} tags per point, seed {}; {} FINDs by object, {} FINDs of rare subject keys \
         (1-3 tags), 2,000 FINDs of a rare key planted in the biggest peak's bucket; load \
         excludes the final sync; stores load one at a time, then the FINDs run in rounds over all \
         of them",
        num(n as f64),
        args.seed,
        num(obj_q.len() as f64),
        num(rare_q.len() as f64)
    );
    let base = match &args.dir {
        Some(d) => {
            std::fs::create_dir_all(d)?;
            tempfile::Builder::new().prefix("tagsweep").tempdir_in(d)?
        }
        None => tempfile::Builder::new().prefix("tagsweep").tempdir()?,
    };
    let mut out = Vec::with_capacity(1 << 16);
    struct Cfg {
        bpp: u32,
        fill: f64,
        buckets: u32,
        bps: u32,
        tags: Vec<tagstore::Tag>,
        plants: crate::data::Plants,
        store: Tagstore,
        load: Duration,
    }
    let mut cfgs = Vec::new();
    for &bpp in &args.sweep_bpp {
        for &fill in &args.sweep_fill {
            for &bps in &args.sweep_bps {
                let cap = bpp * SLOTS_PER_BLOCK as u32;
                let buckets = (n as f64 / (cap as f64 * fill)).ceil() as u32;
                let opts = CreateOptions {
                    expected_tags: n as u64,
                    primary_buckets_per_half: Some(buckets),
                    blocks_per_primary: Some(bpp),
                    blocks_per_secondary: Some(bps),
                    seed: Some(STORE_SEED),
                };
                let (tags, plants) = ds.with_plants(STORE_SEED, buckets, cap);
                let dir = base.path().join(format!("bpp{bpp}-fill{fill}-bps{bps}"));
                std::fs::create_dir_all(&dir)?;
                cfgs.push(Cfg {
                    bpp,
                    fill,
                    buckets,
                    bps: opts.geometry().blocks_per_secondary,
                    tags,
                    plants,
                    store: Tagstore::create(&dir, &opts)?,
                    load: Duration::ZERO,
                });
            }
        }
    }
    // Loads run one store at a time, each followed by its sync: a dozen
    // stores dirtying pages at once would measure the kernel's writeback
    // throttling, not the geometry. The FINDs then run in rounds over all
    // the (clean, cached) stores, so noise falls on every point alike.
    let k = cfgs.len();
    let mut sync_s = Vec::new();
    let mut stats = Vec::new();
    for c in cfgs.iter_mut() {
        eprintln!(
            "[sweep] load: {} blocks per primary, fill {}: {} buckets per half",
            c.bpp, c.fill, c.buckets
        );
        let t = Instant::now();
        c.store.load(&c.tags).context("sweep load")?;
        c.load = t.elapsed();
        let t = Instant::now();
        c.store.sync()?;
        sync_s.push(t.elapsed().as_secs_f64());
        stats.push(c.store.store.stats()?);
        time_finds(
            &mut c.store,
            &obj_q[..2_000.min(obj_q.len())],
            true,
            &mut out,
        )?;
    }
    eprintln!("[sweep] FINDs");
    let mut obj_ns: Vec<Vec<u64>> = vec![Vec::new(); k];
    let mut obj_t = vec![(Duration::ZERO, 0u64); k];
    turns(k, obj_q.len(), 5_000, |i, r| {
        let (d, res) = time_finds_raw(
            &mut cfgs[i].store,
            &obj_q[r],
            true,
            &mut out,
            &mut obj_ns[i],
        )?;
        obj_t[i].0 += d;
        obj_t[i].1 += res;
        Ok(())
    })?;
    let mut rare_ns: Vec<Vec<u64>> = vec![Vec::new(); k];
    let mut rare_t = vec![(Duration::ZERO, 0u64); k];
    turns(k, rare_q.len(), 2_000, |i, r| {
        let (d, res) = time_finds_raw(
            &mut cfgs[i].store,
            &rare_q[r],
            false,
            &mut out,
            &mut rare_ns[i],
        )?;
        rare_t[i].0 += d;
        rare_t[i].1 += res;
        Ok(())
    })?;
    let mut peak_ns: Vec<Vec<u64>> = vec![Vec::new(); k];
    let mut peak_t = vec![(Duration::ZERO, 0u64); k];
    turns(k, 2_000, 200, |i, r| {
        let c = &mut cfgs[i];
        let pq = vec![(c.plants.rare_peak.as_str(), c.plants.rel); r.len()];
        let (d, res) = time_finds_raw(&mut c.store, &pq, false, &mut out, &mut peak_ns[i])?;
        peak_t[i].0 += d;
        peak_t[i].1 += res;
        Ok(())
    })?;
    let mut points = Vec::new();
    for (i, (c, stats)) in cfgs.into_iter().zip(stats).enumerate() {
        if peak_t[i].1 != (RARE_TAGS * peak_ns[i].len()) as u64 {
            eprintln!("WARNING: planted rare key returned the wrong number of tags");
        }
        let cap = c.bpp * SLOTS_PER_BLOCK as u32;
        let primary_slots = stats.primary_fill * stats.primary_buckets as f64 * (cap as f64);
        let secondary_share = 1.0 - primary_slots / (2.0 * c.tags.len() as f64);
        let dir = c.store.store.path().parent().map(|p| p.to_path_buf());
        Box::new(c.store).close()?;
        if let Some(d) = dir {
            std::fs::remove_dir_all(d)?;
        }
        points.push(Point {
            blocks_per_primary: c.bpp,
            target_fill: c.fill,
            primary_buckets_per_half: c.buckets,
            blocks_per_secondary: c.bps,
            load_tags_per_s: c.tags.len() as f64 / c.load.as_secs_f64(),
            sync_s: sync_s[i],
            find_object: Lat::new(std::mem::take(&mut obj_ns[i]), obj_t[i].0, obj_t[i].1),
            find_rare: Lat::new(std::mem::take(&mut rare_ns[i]), rare_t[i].0, rare_t[i].1),
            find_rare_in_peak_bucket: Lat::new(
                std::mem::take(&mut peak_ns[i]),
                peak_t[i].0,
                peak_t[i].1,
            ),
            secondary_share,
            stats,
        });
    }

    // Reference for the ratio columns: the default geometry when swept.
    let reference = points
        .iter()
        .position(|p| {
            p.blocks_per_primary == 4
                && (p.target_fill - 0.5).abs() < 1e-9
                && p.blocks_per_secondary == 16
        })
        .unwrap_or(0);
    let r = &points[reference];
    let (r_load, r_find, r_rare, r_bytes) = (
        r.load_tags_per_s,
        r.find_object.p50_us,
        r.find_rare.p50_us,
        r.stats.allocated_bytes_per_tag,
    );
    let header: Vec<String> = [
        "blocks/primary",
        "fill target",
        "blocks/secondary",
        "buckets/half",
        "fill actual",
        "in secondaries",
        "load tags/s",
        "load ×ref",
        "FIND obj p50 µs",
        "p99 µs",
        "×ref",
        "rare p50 µs",
        "p99 µs",
        "×ref",
        "rare-in-peak p50 µs",
        "bytes/tag",
        "×ref",
        "linked secondaries",
        "longest chain",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let body: Vec<Vec<String>> = points
        .iter()
        .map(|p| {
            vec![
                p.blocks_per_primary.to_string(),
                format!("{:.0}%", p.target_fill * 100.0),
                p.blocks_per_secondary.to_string(),
                num(p.primary_buckets_per_half as f64),
                format!("{:.1}%", p.stats.primary_fill * 100.0),
                format!("{:.1}%", p.secondary_share * 100.0),
                num(p.load_tags_per_s),
                format!("{:.2}", p.load_tags_per_s / r_load),
                num(p.find_object.p50_us),
                num(p.find_object.p99_us),
                format!("{:.2}", p.find_object.p50_us / r_find),
                num(p.find_rare.p50_us),
                num(p.find_rare.p99_us),
                format!("{:.2}", p.find_rare.p50_us / r_rare),
                num(p.find_rare_in_peak_bucket.p50_us),
                num(p.stats.allocated_bytes_per_tag),
                format!("{:.2}", p.stats.allocated_bytes_per_tag / r_bytes),
                num(p.stats.secondary_linked as f64),
                num(p.stats.longest_chain as f64),
            ]
        })
        .collect();
    println!();
    crate::report::print_table(&header, &body);
    if args.markdown {
        println!();
        crate::report::print_markdown(&header, &body);
    }
    println!();
    println!(
        "×ref: ratio to blocks/primary {} at fill {:.0}% with {}-block secondary buckets, in this run",
        r.blocks_per_primary,
        r.target_fill * 100.0,
        r.blocks_per_secondary
    );
    if let Some(path) = &args.json {
        let rep = SweepReport {
            machine,
            tags: n,
            seed: args.seed,
            points,
        };
        std::fs::write(path, serde_json::to_string_pretty(&rep)?)
            .with_context(|| format!("writing {}", path.display()))?;
        println!("JSON written to {}", path.display());
    }
    Ok(())
}
