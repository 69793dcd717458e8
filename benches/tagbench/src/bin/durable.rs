//! Durable-insert rates: tagstore beside SQLite and redb in one run.
//!
//! Rows: N single inserts each durable on return (tagstore `Immediate`, SQLite
//! `synchronous=FULL` one transaction per tag, redb `Durability::Immediate`
//! one commit per tag), and B batches of M tags with one durable flush per
//! batch (tagstore `OnSync` + `sync()`, SQLite one FULL transaction, redb one
//! Immediate commit). Engines alternate in rounds so machine noise falls on all.
//!
//! `cargo run --release -p tagbench --bin durable -- [SINGLES] [BATCHES] [BATCH_SIZE] [DIR]`

use anyhow::Result;
use std::path::Path;
use std::time::Instant;
use tagstore::{CreateOptions, Durability, Store, Tag};

const BY_OBJ: redb::TableDefinition<&[u8], ()> = redb::TableDefinition::new("by_obj");
const BY_SUBJ: redb::TableDefinition<&[u8], ()> = redb::TableDefinition::new("by_subj");

fn tag(i: u64) -> Tag {
    Tag::new(
        format!("photo/{}/IMG_{i:07}.jpg", i / 1000),
        ["isa", "owns", "owned_by", "located_in"][(i % 4) as usize],
        format!("subject-{}", (i * 7919) % 5000),
    )
}

fn key(rel: &str, k: &str, other: &str) -> Vec<u8> {
    let mut v = Vec::with_capacity(2 + rel.len() + k.len() + other.len());
    v.push(rel.len() as u8);
    v.extend_from_slice(rel.as_bytes());
    v.push(k.len() as u8);
    v.extend_from_slice(k.as_bytes());
    v.extend_from_slice(other.as_bytes());
    v
}

struct Engines {
    ts: Store,
    sq: rusqlite::Connection,
    rb: redb::Database,
}

fn open(dir: &Path) -> Result<Engines> {
    let ts = Store::create(
        dir.join("t.tags"),
        &CreateOptions {
            expected_tags: 1_000_000,
            ..Default::default()
        },
    )?;
    let sq = rusqlite::Connection::open(dir.join("s.sqlite"))?;
    sq.execute_batch(
        "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;
         CREATE TABLE by_obj(rel TEXT, object TEXT, subject TEXT, PRIMARY KEY(rel, object, subject)) WITHOUT ROWID;
         CREATE TABLE by_subj(rel TEXT, subject TEXT, object TEXT, PRIMARY KEY(rel, subject, object)) WITHOUT ROWID;",
    )?;
    let rb = redb::Database::create(dir.join("r.redb"))?;
    let tx = rb.begin_write()?;
    tx.open_table(BY_OBJ)?;
    tx.open_table(BY_SUBJ)?;
    tx.commit()?;
    Ok(Engines { ts, sq, rb })
}

fn sqlite_batch(c: &mut rusqlite::Connection, tags: &[Tag]) -> Result<()> {
    let tx = c.transaction()?;
    for t in tags {
        tx.execute(
            "INSERT OR IGNORE INTO by_obj VALUES (?1, ?2, ?3)",
            (&t.relationship, &t.object, &t.subject),
        )?;
        tx.execute(
            "INSERT OR IGNORE INTO by_subj VALUES (?1, ?2, ?3)",
            (&t.relationship, &t.subject, &t.object),
        )?;
    }
    tx.commit()?;
    Ok(())
}

fn redb_batch(db: &redb::Database, tags: &[Tag]) -> Result<()> {
    let mut tx = db.begin_write()?;
    tx.set_durability(redb::Durability::Immediate)?;
    {
        let mut a = tx.open_table(BY_OBJ)?;
        let mut b = tx.open_table(BY_SUBJ)?;
        for t in tags {
            a.insert(&key(&t.relationship, &t.object, &t.subject)[..], ())?;
            b.insert(&key(&t.relationship, &t.subject, &t.object)[..], ())?;
        }
    }
    tx.commit()?;
    Ok(())
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let singles: u64 = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(1000);
    let batches: u64 = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(100);
    let size: u64 = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(1000);
    let base = args.get(4).map(String::as_str).unwrap_or("/tmp");
    let dir = tempfile::tempdir_in(base)?;
    let mut e = open(dir.path())?;
    let mut secs = [[0f64; 3]; 2];
    // Singles, in rounds of 50 per engine.
    e.ts.set_durability(Durability::Immediate)?;
    let mut i = 0u64;
    while i < singles {
        let n = 50.min(singles - i);
        let tags: Vec<Tag> = (i..i + n).map(tag).collect();
        let t0 = Instant::now();
        for t in &tags {
            e.ts.insert(t)?;
        }
        secs[0][0] += t0.elapsed().as_secs_f64();
        let t0 = Instant::now();
        for t in &tags {
            sqlite_batch(&mut e.sq, std::slice::from_ref(t))?;
        }
        secs[0][1] += t0.elapsed().as_secs_f64();
        let t0 = Instant::now();
        for t in &tags {
            redb_batch(&e.rb, std::slice::from_ref(t))?;
        }
        secs[0][2] += t0.elapsed().as_secs_f64();
        i += n;
    }
    // Group commit: one durable flush per batch.
    e.ts.set_durability(Durability::OnSync)?;
    for b in 0..batches {
        let first = 1_000_000 + b * size;
        let tags: Vec<Tag> = (first..first + size).map(tag).collect();
        let t0 = Instant::now();
        let (_, r) = e.ts.insert_batch(tags.iter());
        r?;
        e.ts.sync()?;
        secs[1][0] += t0.elapsed().as_secs_f64();
        let t0 = Instant::now();
        sqlite_batch(&mut e.sq, &tags)?;
        secs[1][1] += t0.elapsed().as_secs_f64();
        let t0 = Instant::now();
        redb_batch(&e.rb, &tags)?;
        secs[1][2] += t0.elapsed().as_secs_f64();
    }
    println!("| row | tagstore | SQLite | redb | SQLite ÷ tagstore | redb ÷ tagstore |");
    println!("| --- | --- | --- | --- | --- | --- |");
    for (row, (name, n)) in [
        (format!("{singles} single durable inserts"), singles),
        (
            format!("{batches} batches of {size}, one flush each"),
            batches * size,
        ),
    ]
    .iter()
    .enumerate()
    {
        let rate = |s: f64| *n as f64 / s.max(1e-9);
        let r = secs[row];
        println!(
            "| {name} (tags/s) | {:.0} | {:.0} | {:.0} | {:.2} | {:.2} |",
            rate(r[0]),
            rate(r[1]),
            rate(r[2]),
            rate(r[1]) / rate(r[0]),
            rate(r[2]) / rate(r[0])
        );
    }
    e.ts.close()?;
    Ok(())
}
