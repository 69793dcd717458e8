//! Journal replay at open: every complete commit is copied into the store
//! file, or (a read-only open) kept in memory over it.

use super::file::MappedFile;
use super::journal::{journal_path, Journal};
use crate::error::{Error, Result};
use crate::format::{BlockRef, Geometry, BLOCK_SIZE, NONE};
use std::collections::HashMap;
use std::path::Path;

/// Block images by block number, kept in memory.
pub type Images = HashMap<u64, Box<[u8]>>;

/// True when a non-empty journal lies beside the store at `path`.
pub fn journal_pending(path: &Path) -> bool {
    std::fs::metadata(journal_path(path)).is_ok_and(|m| m.len() > 0)
}

/// Checks a journaled image of block `n`; returns the file length it needs
/// when it lies past `file_len` (a secondary bucket linked after the last checkpoint).
fn check_image(
    n: u64,
    img: &[u8],
    geo: &Geometry,
    path: &Path,
    file_len: u64,
) -> Result<Option<u64>> {
    if n < geo.primary_start(0) || !BlockRef(img).crc_ok() {
        return Err(Error::corrupt(format!(
            "journal {}: commit holds a bad image for block {n}",
            journal_path(path).display()
        )));
    }
    if (n + 1) * BLOCK_SIZE as u64 <= file_len {
        return Ok(None);
    }
    let base = geo.secondary_base();
    if n < base {
        return Err(Error::corrupt(format!(
            "journal names primary block {n} beyond the end of the file"
        )));
    }
    let s = (n - base) / geo.blocks_per_secondary as u64;
    let s = u32::try_from(s + 1)
        .ok()
        .filter(|&s| s < NONE)
        .ok_or_else(|| Error::corrupt(format!("journal names impossible block {n}")))?;
    Ok(Some(geo.file_len(s)))
}

/// Replays every complete commit of the journal into the store file, then
/// flushes the file and empties the journal. Returns the commits replayed.
pub fn replay_journal(
    file: &mut MappedFile,
    geo: &Geometry,
    path: &Path,
    seed: u64,
) -> Result<usize> {
    let mut j = Journal::open(path, seed)?;
    let commits = j.read_commits()?;
    for c in &commits {
        for (n, img) in &c.blocks {
            if let Some(len) = check_image(*n, img, geo, path, file.len())? {
                file.set_len(len)?;
            }
            file.reserve(n * BLOCK_SIZE as u64, BLOCK_SIZE as u64)?;
            file.block_mut(*n)?.copy_from_slice(img);
        }
    }
    file.flush()?;
    j.reset()?;
    j.remove()?;
    Ok(commits.len())
}

/// What replaying the journal would write, without writing (a read-only
/// open): the final image of every journaled block, and the blocks the
/// store then holds.
pub fn journal_images(
    file: &MappedFile,
    geo: &Geometry,
    path: &Path,
    seed: u64,
) -> Result<(Images, u64)> {
    let mut images = HashMap::new();
    let mut len = file.len();
    let Some(mut j) = Journal::open_read_only(path, seed)? else {
        return Ok((images, len / BLOCK_SIZE as u64));
    };
    for c in j.read_commits()? {
        for (n, img) in c.blocks {
            if let Some(l) = check_image(n, &img, geo, path, len)? {
                len = len.max(l);
            }
            images.insert(n, img.into_boxed_slice());
        }
    }
    Ok((images, len / BLOCK_SIZE as u64))
}
