//! Journal replay at open: every complete commit is copied into the store
//! file, or (a read-only open) kept in memory over it.

use super::file::MappedFile;
use super::journal::{journal_path, starts_with_commit, Change, Journal, Round};
use crate::error::{Error, Result};
use crate::format::superblock::PRIMARY_BASE;
use crate::format::{BlockRef, Layout, Superblock, BLOCK_SIZE, SUPERBLOCK_BLOCK};
use foldhash::{HashMap, HashMapExt};
use std::path::Path;

/// Block images by block number, kept in memory.
pub type Images = HashMap<u64, Box<[u8]>>;

/// The store file's copy of block `n`, the base of a version-4 delta:
/// zeros past the file's end (a bucket linked since the last checkpoint,
/// never written to the file).
pub(super) fn file_base(file: &MappedFile, n: u64) -> Result<Vec<u8>> {
    if n.saturating_add(1).saturating_mul(BLOCK_SIZE as u64) > file.len() {
        return Ok(vec![0u8; BLOCK_SIZE]);
    }
    Ok(file.block(n)?.to_vec())
}

/// True when a journal with commits to replay may lie beside the store at `path`.
pub fn journal_pending(path: &Path) -> bool {
    starts_with_commit(&journal_path(path))
}

/// Checks a journaled image of block `n`: a superblock for block 0, a
/// block with a valid checksum for any data block; never the intent block.
fn check_image(n: u64, img: &[u8], path: &Path, from_file: bool) -> Result<()> {
    let ok = if n == SUPERBLOCK_BLOCK {
        matches!(Superblock::decode(img), Ok(Some(_)))
    } else {
        n >= PRIMARY_BASE && BlockRef(img).crc_ok()
    };
    if !ok && from_file {
        return Err(Error::corrupt(format!(
            "block {n} of {} is damaged: the changes {} journals for it do not give a valid block",
            path.display(),
            journal_path(path).display()
        )));
    }
    if !ok {
        return Err(Error::corrupt(format!(
            "journal {}: commit holds a bad image for block {n}",
            journal_path(path).display()
        )));
    }
    Ok(())
}

/// The layout once the journal is replayed (its superblock image's, else
/// `geo`) and the file length its images need: blocks past the end are
/// buckets or segments linked after the last checkpoint.
fn needed_len(round: &Round, geo: &Layout, path: &Path, file_len: u64) -> Result<u64> {
    let mut layout = *geo;
    let mut top = 0u64;
    for (n, img) in &round.images {
        check_image(*n, img, path, round.from_file.contains(n))?;
        if *n == SUPERBLOCK_BLOCK {
            if let Ok(Some(sb)) = Superblock::decode(img) {
                layout = sb.layout;
            }
        }
        top = top.max(n + 1);
    }
    if top > u64::MAX / BLOCK_SIZE as u64 / 4 {
        return Err(Error::corrupt(format!(
            "journal names impossible block {}",
            top - 1
        )));
    }
    Ok(file_len.max(layout.len_covering(top)))
}

/// The last superblock image the journal beside `path` holds, if any: a
/// power cut may garble the store file's superblock after a commit applied
/// it, and the journal then has the image to restore.
pub fn journal_superblock(path: &Path) -> Result<Option<Superblock>> {
    let Some(mut j) = Journal::open_read_only(path, 0)? else {
        return Ok(None);
    };
    let Some(seed) = j.first_seed()? else {
        return Ok(None);
    };
    let Some(mut j) = Journal::open_read_only(path, seed)? else {
        return Ok(None);
    };
    // Only the superblock is wanted, and it is always an image.
    let round = j.read_round(&|_| Ok(vec![0u8; BLOCK_SIZE]))?;
    let found = round
        .images
        .get(&SUPERBLOCK_BLOCK)
        .and_then(|img| Superblock::decode(img).ok().flatten());
    Ok(found.filter(|sb| sb.seed == seed))
}

/// Replays every complete commit of the journal into the store file, then
/// flushes the file and empties the journal. Returns the commits replayed.
pub fn replay_journal(
    file: &mut MappedFile,
    geo: &Layout,
    path: &Path,
    seed: u64,
) -> Result<usize> {
    let mut j = Journal::open(path, seed)?;
    let round = j.read_round(&|n| file_base(file, n))?;
    let len = needed_len(&round, geo, path, file.len())?;
    guard_write_back(&mut j, &round);
    if len > file.len() {
        file.set_len(len)?;
    }
    for (n, img) in &round.images {
        file.reserve(n * BLOCK_SIZE as u64, BLOCK_SIZE as u64)?;
        file.block_mut(*n)?.copy_from_slice(img);
    }
    file.flush()?;
    j.reset()?;
    j.remove()?;
    Ok(round.commits)
}

/// Before a replay writes the round's blocks into the store file: when
/// some were rebuilt from the file's own copies, appends one more commit
/// with the round's final image of every block, so a power cut that tears
/// blocks during the write-back leaves a journal whose next replay needs
/// no store-file copy of them (the checkpoint's argument, §6.1). Best
/// effort: with no room for it on the disk, the replay goes on without.
fn guard_write_back(j: &mut Journal, round: &Round) {
    if round.from_file.is_empty() {
        return;
    }
    let mut blocks: Vec<(&u64, &Vec<u8>)> = round.images.iter().collect();
    blocks.sort_unstable_by_key(|b| *b.0);
    let _ = j.append(blocks.into_iter().map(|(n, img)| Change::Image(*n, img)));
}

/// What replaying the journal would write, without writing (a read-only
/// open): the final image of every journaled block, and the blocks the
/// store then holds.
pub fn journal_images(
    file: &MappedFile,
    geo: &Layout,
    path: &Path,
    seed: u64,
) -> Result<(Images, u64)> {
    let mut images = HashMap::new();
    let mut len = file.len();
    let Some(mut j) = Journal::open_read_only(path, seed)? else {
        return Ok((images, len / BLOCK_SIZE as u64));
    };
    let round = j.read_round(&|n| file_base(file, n))?;
    len = needed_len(&round, geo, path, len)?;
    for (n, img) in round.images {
        images.insert(n, img.into_boxed_slice());
    }
    Ok((images, len / BLOCK_SIZE as u64))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::delta;

    /// A round whose deltas apply to the store file's copy gets the final
    /// images appended before the write-back: read again over a garbled
    /// file (a power cut tore the copies during the write-back), it
    /// rebuilds the same blocks.
    #[test]
    fn a_replay_journals_the_images_its_write_back_needs() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = dir.path().join("s.tags");
        let mut j = Journal::open(&store, 9).expect("open");
        let old = vec![3u8; BLOCK_SIZE];
        let mut new = old.clone();
        new[200..216].fill(7);
        let mut d = Vec::new();
        delta::encode_lines(&old, &new, u64::MAX, &mut d);
        j.append([Change::Delta(5, &d)].into_iter())
            .expect("append");
        drop(j);
        let intact = |_| Ok(vec![3u8; BLOCK_SIZE]);
        let garbled = |_| Ok(vec![0x5Au8; BLOCK_SIZE]);
        let mut j = Journal::open(&store, 9).expect("reopen");
        let round = j.read_round(&intact).expect("read");
        assert!(round.from_file.contains(&5));
        assert_eq!(round.images[&5], new);
        guard_write_back(&mut j, &round);
        drop(j);
        let mut j = Journal::open(&store, 9).expect("reopen");
        let again = j.read_round(&garbled).expect("read over a torn file");
        assert_eq!((again.commits, &again.images[&5]), (2, &new));
    }
}
