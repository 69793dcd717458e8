//! Journal replay at open: every complete commit is copied into the store file.

use super::file::MappedFile;
use super::journal::{journal_path, Journal};
use crate::error::{Error, Result};
use crate::format::{BlockRef, Geometry, BLOCK_SIZE};
use std::path::Path;

/// True when a non-empty journal lies beside the store at `path`.
pub fn journal_pending(path: &Path) -> bool {
    std::fs::metadata(journal_path(path)).is_ok_and(|m| m.len() > 0)
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
    let base = geo.secondary_base();
    for c in &commits {
        for (n, img) in &c.blocks {
            let n = *n;
            if n < geo.primary_start(0) || !BlockRef(img).crc_ok() {
                return Err(Error::corrupt(format!(
                    "journal {}: commit holds a bad image for block {n}",
                    journal_path(path).display()
                )));
            }
            if (n + 1) * BLOCK_SIZE as u64 > file.len() {
                if n < base {
                    return Err(Error::corrupt(format!(
                        "journal names primary block {n} beyond the end of the file"
                    )));
                }
                let s = (n - base) / geo.blocks_per_secondary as u64;
                let s = u32::try_from(s + 1)
                    .ok()
                    .filter(|&s| s < crate::format::NONE)
                    .ok_or_else(|| Error::corrupt(format!("journal names impossible block {n}")))?;
                file.set_len(geo.file_len(s))?;
            }
            file.reserve(n * BLOCK_SIZE as u64, BLOCK_SIZE as u64)?;
            file.block_mut(n)?.copy_from_slice(img);
        }
    }
    file.flush()?;
    j.reset()?;
    j.remove()?;
    Ok(commits.len())
}
