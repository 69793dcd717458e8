//! Letting the disk settle before a timed durable row.
//!
//! On a virtual disk whose host caches writes, the first flushes after a
//! burst of writes (a bulk load, a checkpoint) wait for the host to write
//! its cache back: on this project's VM some 40–55 flushes in a row took
//! 0.5–1 ms where 0.13 ms is usual. The engines take turns in a fixed
//! rotation that starts with the first engine, so that engine's first turn
//! would pay for all of them. Each durable row is therefore preceded,
//! untimed, by at least 100 flushes of a scratch file (a slow spell is all
//! slow: ten slow flushes in a row look calm among themselves), then more
//! until ten in a row take no more than twice the fastest seen (or `max`
//! flushes in all).

use anyhow::{Context, Result};
use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::{Duration, Instant};

/// Flushes made at least.
const MIN: usize = 100;

/// What settling took: flushes made, their total time, the first one's.
pub struct Settled {
    pub flushes: usize,
    pub total: Duration,
    pub first: Duration,
}

/// Writes and flushes 4 KiB of a scratch file in `dir`, 100 times or more,
/// until ten flushes in a row take at most twice the fastest one, or `max`
/// flushes.
pub fn settle_disk(dir: &Path, max: usize) -> Result<Settled> {
    let path = dir.join("settle.scratch");
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path)
        .with_context(|| format!("creating {}", path.display()))?;
    let block = [0x5au8; 4096];
    f.write_all_at(&block, 0)?;
    f.sync_all()?;
    let (mut fastest, mut calm, mut first) = (Duration::MAX, 0, Duration::ZERO);
    let t0 = Instant::now();
    let mut n = 0;
    while n < max && (n < MIN || calm < 10) {
        let t = Instant::now();
        f.write_all_at(&block, 0)?;
        f.sync_data()?;
        let d = t.elapsed();
        if n == 0 {
            first = d;
        }
        fastest = fastest.min(d);
        calm = if d <= fastest * 2 { calm + 1 } else { 0 };
        n += 1;
    }
    drop(f);
    std::fs::remove_file(&path).ok();
    Ok(Settled {
        flushes: n,
        total: t0.elapsed(),
        first,
    })
}
