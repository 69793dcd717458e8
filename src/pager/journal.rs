//! Write-ahead journal of block changes, kept in `STORE.journal`.
//!
//! In the journaled durability modes a change is made to a private copy of
//! each block it touches, and the copies stay in memory until a checkpoint.
//! A *commit* writes, for every block changed since the last one, the slot
//! puts and clears done to it, or the 64-byte lines written meanwhile (a
//! delta), and fsyncs. The store file is
//! not touched between checkpoints, so its copy of a block is the version
//! the last checkpoint made durable, and replay rebuilds each block's last
//! version from it. A checkpoint first commits a whole image of every block
//! in memory, then copies them into the store file and fsyncs it: a power
//! cut that tears blocks during that copy is repaired by those images. A
//! commit torn by the cut fails its CRC and is dropped: its changes were
//! never acknowledged.
//!
//! The file is written ahead with zeros (256 KB, then doubling up to 1 MB a
//! step) and reused after each checkpoint, so a commit overwrites allocated
//! bytes and its `fdatasync` has no file size or block map to update. A
//! checkpoint zeroes the first commit's header and starts a new *round* with
//! a fresh random salt at offset 0; what lies past the round's last commit
//! (zeros, or an older round's commits) fails the salt or sequence check.
//! Where the file system allows, commits are written with `O_DIRECT |
//! O_DSYNC` in whole pages (`direct.rs`) instead of a buffered write and
//! `fdatasync`.
//!
//! Commit layout, version 5 (little-endian):
//!
//! | off | len | field |
//! |-----|-----|-------|
//! | 0 | 4 | magic `TJNL` |
//! | 4 | 4 | journal format version (5) |
//! | 8 | 8 | store hash seed (a journal of another store is ignored) |
//! | 16 | 8 | commit sequence number, consecutive from the round's first commit |
//! | 24 | 4 | entry count `n` |
//! | 28 | 4 | round salt (every commit of a round the same, never zero) |
//! | 32 | 4 | body length `L` in bytes |
//! | 36 | 4 | reserved, zero |
//! | 40 | `L` | `n` entries: block number u64, then u32 `k` whose low 30 bits are the entry's length in bytes: bits 31 and 30 clear, the block's image zero-run encoded (`format::zero_runs`); bit 31 set, a delta (`format::delta`); bit 30 set, slot puts and clears (`format::slot_ops`); both set is invalid. A delta or slot operations apply to the block as the round's earlier entries leave it, or to the store file's copy when none names it |
//! | 40 + L | 4 | CRC32 of bytes 0 .. 40 + L |
//! | 44 + L | 4 | magic `TEND` |
//!
//! Version 4 (still replayed) has no slot operations (bit 30 is part of
//! the length). Version 3 is version 4, but a block's first entry in a
//! round is always an image (a delta with no image before it is an error).
//! Version 2 is version 3 without deltas; version 1: a 32-byte header
//! (bytes 28..32 zero, no body length), then `n` × (block number u64, the
//! 4096-byte image), CRC, `TEND`.

use super::direct::{self, Direct};
use crate::error::{Error, Result};
use crate::format::bytes::{rd32, rd64};
use crate::format::{delta, slot_ops, zero_runs, BLOCK_SIZE};
use crate::side::side_path;
use foldhash::HashMap;
use std::fs::{File, OpenOptions};
use std::io::Read;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

const MAGIC: &[u8; 4] = b"TJNL";
const END: &[u8; 4] = b"TEND";
const VERSION: u32 = 5;
/// Version 5 without slot operations; its journals are still replayed.
const VERSION_4: u32 = 4;
/// Version 4, but a block's first entry in a round is an image; still replayed.
const VERSION_3: u32 = 3;
/// Version 3 without deltas; its journals are still replayed.
const VERSION_2: u32 = 2;
/// The version before round salts; its journals are still replayed.
const VERSION_1: u32 = 1;
/// Bit 31 of an entry's length: the entry is a delta, not an image.
const DELTA_BIT: u32 = 1 << 31;
/// Bit 30 of an entry's length (version 5): the entry is slot operations.
const OPS_BIT: u32 = 1 << 30;
const HEADER: usize = 40;
const HEADER_1: usize = 32;
const ENTRY_1: usize = 8 + BLOCK_SIZE;
/// First and largest step of writing the file ahead.
const AHEAD_MIN: u64 = 256 << 10;
const AHEAD_MAX: u64 = 1 << 20;
/// File size past which a reset gives the room back: beyond the largest
/// round (256 MB) plus its checkpoint's images (at most 256 MiB of copies).
const SHRINK_PAST: u64 = 512 << 20;

/// Path of the journal beside a store file.
pub fn journal_path(store: &Path) -> PathBuf {
    side_path(store, "journal")
}

/// True when the journal at `path` starts with a commit header (it may
/// hold commits to replay); false when absent, empty or reset.
pub fn starts_with_commit(path: &Path) -> bool {
    let mut head = [0u8; 4];
    File::open(path)
        .and_then(|mut f| f.read_exact(&mut head))
        .is_ok_and(|()| &head == MAGIC)
}

/// What the round's complete commits leave: the final image of every block
/// they name, and how many commits there were.
#[derive(Default)]
pub struct Round {
    pub images: HashMap<u64, Vec<u8>>,
    pub commits: usize,
    /// Blocks rebuilt from the store file's copy (a version-4 delta with
    /// no image before it): writing the round back could tear that copy,
    /// the only base their entries have.
    pub from_file: foldhash::HashSet<u64>,
}

/// One entry of a commit, as written.
enum Entry<'a> {
    Image(Vec<u8>),
    Delta(&'a [u8]),
    Ops(&'a [u8]),
}

/// One entry of a commit to append.
pub enum Change<'a> {
    /// The block's whole image.
    Image(u64, &'a [u8]),
    /// The block's delta (`format::delta`) from its previous version.
    Delta(u64, &'a [u8]),
    /// Slot puts and clears (`format::slot_ops`) to redo on its previous version.
    Ops(u64, &'a [u8]),
}

/// The open journal file.
pub struct Journal {
    file: File,
    path: PathBuf,
    /// End of the round's last commit: where the next one goes.
    pos: u64,
    /// Bytes of the file written (commits or zeros ahead).
    written: u64,
    next_seq: u64,
    salt: u32,
    seed: u64,
    /// Direct, synchronous writes (`direct.rs`); `None` where refused.
    direct: Option<Direct>,
}

/// A salt for a new round: random, never zero (version 1's value).
fn new_salt(old: u32) -> u32 {
    let mut b = [0u8; 4];
    let drawn = getrandom::fill(&mut b).is_ok();
    let mut s = u32::from_le_bytes(b);
    if !drawn {
        // No random source: the clock, mixed so it differs from the old salt.
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos() ^ d.as_secs() as u32);
        s = nanos ^ std::process::id().rotate_left(16);
    }
    if s == old {
        s = s.wrapping_add(0x9E37_79B9);
    }
    s.max(1)
}

/// The header and body lengths the commit starting at `data` (at least
/// its header) claims in journal `version`; `None` if they cannot be read.
fn commit_lengths(data: &[u8], version: u32) -> Option<(usize, usize)> {
    if version == VERSION_1 {
        Some((HEADER_1, (rd32(data, 24) as usize).checked_mul(ENTRY_1)?))
    } else {
        (data.len() >= HEADER).then(|| (HEADER, rd32(data, 32) as usize))
    }
}

/// One whole commit at the start of `data` in journal `version`: its
/// entries and its length in bytes; `None` if torn, garbled or short.
fn parse_commit(data: &[u8], version: u32) -> Option<(Vec<(u64, Entry<'_>)>, usize)> {
    let n = rd32(data, 24) as usize;
    let (head, body) = commit_lengths(data, version)?;
    let end = head.checked_add(body)?;
    let tail = data.get(end..end.checked_add(8)?)?;
    if rd32(tail, 0) != crc32fast::hash(&data[..end]) || &tail[4..8] != END {
        return None;
    }
    let mut blocks = Vec::with_capacity(n);
    let mut at = head;
    for _ in 0..n {
        let b = rd64(data.get(at..at + 8)?, 0);
        if version == VERSION_1 {
            blocks.push((b, Entry::Image(data[at + 8..at + ENTRY_1].to_vec())));
            at += ENTRY_1;
        } else {
            let k = rd32(data.get(at + 8..at + 12)?, 0);
            let is_delta = k & DELTA_BIT != 0 && version >= VERSION_3;
            let is_ops = k & OPS_BIT != 0 && version >= VERSION;
            let len = if version >= VERSION {
                (k & !(DELTA_BIT | OPS_BIT)) as usize
            } else {
                (k & !DELTA_BIT) as usize
            };
            let enc = data.get(at + 12..(at + 12).checked_add(len)?)?;
            blocks.push(match (is_delta, is_ops) {
                (true, true) => return None,
                (true, false) => (b, Entry::Delta(enc)),
                (false, true) => (b, Entry::Ops(enc)),
                (false, false) => (b, Entry::Image(zero_runs::decode(enc)?)),
            });
            at += 12 + len;
        }
    }
    (at == end).then_some((blocks, end + 8))
}

impl Journal {
    /// Opens (creating if needed) the journal of the store at `store`.
    pub fn open(store: &Path, seed: u64) -> Result<Journal> {
        Self::open_file(store, seed, true)?
            .ok_or_else(|| Error::corrupt("journal vanished while being created"))
    }

    /// Opens the journal of the store at `store` for reading only; `None` when absent.
    pub fn open_read_only(store: &Path, seed: u64) -> Result<Option<Journal>> {
        Self::open_file(store, seed, false)
    }

    fn open_file(store: &Path, seed: u64, writable: bool) -> Result<Option<Journal>> {
        let path = journal_path(store);
        let created = writable && !path.exists();
        let file = match OpenOptions::new()
            .read(true)
            .write(writable)
            .create(writable)
            .truncate(false)
            .open(&path)
        {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && !writable => return Ok(None),
            Err(e) => return Err(Error::io(format!("opening {}", path.display()), e)),
        };
        let written = file
            .metadata()
            .map_err(|e| Error::io(format!("reading {}", path.display()), e))?
            .len();
        if created {
            // The new name must survive a power cut with the commits in it;
            // if it cannot be made to, the file goes, so a retry creates
            // (and syncs) it again.
            if let Err(e) = crate::side::sync_dir(&path) {
                let _ = std::fs::remove_file(&path);
                return Err(e);
            }
        }
        let direct = if writable { Direct::open(&path) } else { None };
        Ok(Some(Journal {
            file,
            path,
            pos: 0,
            written,
            next_seq: 0,
            salt: new_salt(0),
            seed,
            direct,
        }))
    }

    /// Bytes of commits in the current round.
    pub fn len(&self) -> u64 {
        self.pos
    }

    /// Reads up to `buf.len()` bytes at `at`; how many there were (fewer
    /// only at the file's end).
    fn read_at(&self, buf: &mut [u8], at: u64) -> Result<usize> {
        let mut got = 0;
        while got < buf.len() {
            match self.file.read_at(&mut buf[got..], at + got as u64) {
                Ok(0) => break,
                Ok(k) => got += k,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(Error::io(format!("reading {}", self.path.display()), e)),
            }
        }
        Ok(got)
    }

    /// The hash seed the journal's first commit names, if it has one.
    pub fn first_seed(&mut self) -> Result<Option<u64>> {
        let mut h = [0u8; HEADER];
        let got = self.read_at(&mut h, 0)?;
        Ok((got == HEADER && &h[0..4] == MAGIC).then(|| rd64(&h, 8)))
    }

    /// Reads every complete, valid commit of the round from the start, in
    /// order; stops at the first torn, foreign or older-round one. A delta
    /// whose block no earlier entry names applies to `base(block)`, the
    /// store file's copy (versions 4 and 5), or is an error (version 3).
    /// One commit at a time is in memory, not the file.
    pub fn read_round(&mut self, base: &dyn Fn(u64) -> Result<Vec<u8>>) -> Result<Round> {
        let file_len = self
            .file
            .metadata()
            .map_err(|e| Error::io(format!("reading {}", self.path.display()), e))?
            .len();
        let mut out = Round::default();
        let mut at = 0u64;
        let mut data = Vec::new();
        // (version, salt, next sequence number) of the round, from its first commit.
        let mut round: Option<(u32, u32, u64)> = None;
        loop {
            let mut h = [0u8; HEADER];
            let got = self.read_at(&mut h, at)?;
            if got < HEADER_1 {
                break;
            }
            let (version, salt, seq) = (rd32(&h, 4), rd32(&h, 28), rd64(&h, 16));
            if round.is_none() && &h[0..4] == MAGIC && version > VERSION && rd64(&h, 8) == self.seed
            {
                // A newer build's round: replaying none of it, and then
                // resetting the journal, would drop its durable commits.
                return Err(Error::UnsupportedJournal {
                    path: self.path.clone(),
                    found: version,
                    supported: VERSION,
                });
            }
            if &h[0..4] != MAGIC
                || ![VERSION, VERSION_4, VERSION_3, VERSION_2, VERSION_1].contains(&version)
                || rd64(&h, 8) != self.seed
                || round.is_some_and(|r| {
                    // A version-4 round may go on in version 5: the guard
                    // commit a replay by this build appends to it.
                    let same = r.0 == version || (r.0 == VERSION_4 && version == VERSION);
                    !same || (r.1, r.2) != (salt, seq)
                })
            {
                break;
            }
            // The whole commit, as long as its header says and the file holds.
            let len = commit_lengths(&h[..got], version)
                .and_then(|(head, body)| (head + 8).checked_add(body))
                .map(|l| l as u64);
            let Some(len) = len.filter(|&l| l <= file_len.saturating_sub(at)) else {
                break;
            };
            data.resize(len as usize, 0);
            if self.read_at(&mut data, at)? < data.len() {
                break;
            }
            let Some((entries, len)) = parse_commit(&data, version) else {
                break;
            };
            for (b, e) in entries {
                // A delta's runs are written over the block, slot operations redone on it.
                type Redo = fn(&mut [u8], &[u8]) -> Option<()>;
                let (redo, bytes): (Redo, &[u8]) = match e {
                    Entry::Image(img) => {
                        out.images.insert(b, img);
                        continue;
                    }
                    Entry::Delta(d) => (delta::apply, d),
                    Entry::Ops(o) => (slot_ops::apply, o),
                };
                if version >= VERSION_4 && !out.images.contains_key(&b) {
                    out.images.insert(b, base(b)?);
                    out.from_file.insert(b);
                }
                let img = out.images.get_mut(&b).ok_or_else(|| {
                    Error::corrupt(format!(
                        "journal {}: commit {seq} changes block {b} without an image of it earlier in the round",
                        self.path.display()
                    ))
                })?;
                redo(img, bytes).ok_or_else(|| {
                    Error::corrupt(format!(
                        "journal {}: commit {seq} holds a bad change to block {b}",
                        self.path.display()
                    ))
                })?;
            }
            out.commits += 1;
            round = Some((version, salt, seq + 1));
            at += len as u64;
        }
        // Commits appended now continue the round (a version-4 one too:
        // replay's guard commit must be read back after it).
        if let Some((VERSION | VERSION_4, salt, next)) = round {
            (self.salt, self.next_seq) = (salt, next);
        }
        self.pos = at;
        Ok(out)
    }

    /// Appends one commit and makes it durable. On failure the position
    /// stays: what was written there fails its CRC and is overwritten next.
    pub fn append<'a>(&mut self, blocks: impl ExactSizeIterator<Item = Change<'a>>) -> Result<()> {
        let n = blocks.len();
        let mut buf = Vec::with_capacity(HEADER + n * 1024);
        buf.extend_from_slice(MAGIC);
        buf.extend_from_slice(&VERSION.to_le_bytes());
        buf.extend_from_slice(&self.seed.to_le_bytes());
        buf.extend_from_slice(&self.next_seq.to_le_bytes());
        buf.extend_from_slice(&(n as u32).to_le_bytes());
        buf.extend_from_slice(&self.salt.to_le_bytes());
        buf.extend_from_slice(&[0u8; 8]);
        for c in blocks {
            let (block, flag) = match c {
                Change::Image(n, _) => (n, 0),
                Change::Delta(n, _) => (n, DELTA_BIT),
                Change::Ops(n, _) => (n, OPS_BIT),
            };
            buf.extend_from_slice(&block.to_le_bytes());
            let at = buf.len();
            buf.extend_from_slice(&[0u8; 4]);
            match c {
                Change::Image(_, img) => zero_runs::encode(img, &mut buf),
                Change::Delta(_, d) | Change::Ops(_, d) => buf.extend_from_slice(d),
            }
            let len = (buf.len() - at - 4) as u32 | flag;
            buf[at..at + 4].copy_from_slice(&len.to_le_bytes());
        }
        let body = u32::try_from(buf.len() - HEADER).map_err(|_| {
            Error::corrupt(format!(
                "journal commit of {} bytes is too large for its header",
                buf.len()
            ))
        })?;
        buf[32..36].copy_from_slice(&body.to_le_bytes());
        let crc = crc32fast::hash(&buf);
        buf.extend_from_slice(&crc.to_le_bytes());
        buf.extend_from_slice(END);
        let end = self.pos + buf.len() as u64;
        self.write_ahead(end)
            .and_then(|()| self.write_durably(&buf, self.pos))
            .map_err(|e| Error::io(format!("writing {}", self.path.display()), e))?;
        self.pos = end;
        self.next_seq += 1;
        Ok(())
    }

    /// Writes the zeros the next commit will need ahead, if not yet there.
    pub fn prepare(&mut self) -> Result<()> {
        let before = self.written;
        self.write_ahead(self.pos + 1)
            .and_then(|()| match self.direct.is_none() && self.written > before {
                // Buffered zeros: flushed now, not by the first commit's fdatasync.
                true => self.file.sync_data(),
                false => Ok(()),
            })
            .map_err(|e| Error::io(format!("writing {}", self.path.display()), e))
    }

    /// Writes `bytes` at `at` and makes them durable: directly where the
    /// file system allows, else through the page cache and `fdatasync`.
    fn write_durably(&mut self, bytes: &[u8], at: u64) -> std::io::Result<()> {
        if let Some(d) = self.direct.as_mut() {
            match d.write(&self.file, at, bytes) {
                Err(e) if direct::refused(&e) => self.direct = None,
                r => return r,
            }
        }
        self.file.write_all_at(bytes, at)?;
        self.file.sync_data()
    }

    /// Writes zeros past the file's end until it covers `end` and a step
    /// more, so commits up to there change no file metadata.
    fn write_ahead(&mut self, end: u64) -> std::io::Result<()> {
        if end <= self.written {
            return Ok(());
        }
        let step = self.written.clamp(AHEAD_MIN, AHEAD_MAX);
        let target = (end + step).div_ceil(BLOCK_SIZE as u64) * BLOCK_SIZE as u64;
        if let Some(d) = self.direct.as_mut() {
            // Direct writes of the zeros too: no dirty pages under a commit.
            if self.written.is_multiple_of(BLOCK_SIZE as u64) {
                match d.zeros(self.written, target - self.written) {
                    Ok(()) => {
                        self.written = target;
                        return Ok(());
                    }
                    Err(e) if direct::refused(&e) => self.direct = None,
                    Err(e) => return Err(e),
                }
            }
        }
        let zeros = vec![0u8; (target - self.written).min(1 << 20) as usize];
        while self.written < target {
            let k = (target - self.written).min(zeros.len() as u64) as usize;
            self.file.write_all_at(&zeros[..k], self.written)?;
            self.written += k as u64;
        }
        Ok(())
    }

    /// Starts a new round once the journal's blocks are durable in the store
    /// file: the first header is zeroed (durably), so nothing replays.
    pub fn reset(&mut self) -> Result<()> {
        let head = (self.written as usize).min(HEADER);
        if head > 0 {
            self.write_durably(&[0u8; HEADER][..head], 0)
                .map_err(|e| Error::io(format!("resetting {}", self.path.display()), e))?;
        }
        self.pos = 0;
        self.next_seq = 0;
        self.salt = new_salt(self.salt);
        // A checkpoint's images may have grown the file far past a round's
        // usual size: give the room back (a later round writes it ahead again).
        if self.written > SHRINK_PAST && self.file.set_len(AHEAD_MAX).is_ok() {
            self.written = AHEAD_MAX;
            if let Some(d) = self.direct.as_mut() {
                d.forget();
            }
        }
        Ok(())
    }

    /// Removes the journal file.
    pub fn remove(self) -> Result<()> {
        std::fs::remove_file(&self.path)
            .map_err(|e| Error::io(format!("removing {}", self.path.display()), e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::OpenOptions;

    fn no_base(n: u64) -> Result<Vec<u8>> {
        Err(Error::corrupt(format!("block {n}: no base expected")))
    }

    /// A journal beside `store` holding one commit: block 6 as a delta
    /// (its second line set to 9s) over a base of 4s. The block it
    /// rebuilds, and the commit's length.
    fn one_delta_journal(store: &Path) -> (Vec<u8>, usize) {
        let mut j = Journal::open(store, 7).expect("open");
        let mut img = vec![4u8; BLOCK_SIZE];
        img[64..128].fill(9);
        let mut d = Vec::new();
        delta::encode_written(&img, 0b10, &mut d);
        j.append([Change::Delta(6, &d)].into_iter())
            .expect("append");
        (img, j.len() as usize)
    }

    /// Writes `data` as the journal beside `store`, its first commit
    /// (`len` bytes) resealed after `edit` changed its bytes.
    fn rewrite_first(store: &Path, mut data: Vec<u8>, len: usize, edit: impl FnOnce(&mut [u8])) {
        edit(&mut data);
        let crc = crc32fast::hash(&data[..len - 8]);
        data[len - 8..len - 4].copy_from_slice(&crc.to_le_bytes());
        std::fs::write(journal_path(store), &data).expect("write");
    }

    /// Version 4: a block's first entry may be a delta, applied to the
    /// store file's copy; the same commit as version 3 is refused.
    #[test]
    fn a_first_delta_applies_to_the_store_files_copy() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = dir.path().join("s.tags");
        let (img, len) = one_delta_journal(&store);
        let base = |n: u64| -> Result<Vec<u8>> {
            assert_eq!(n, 6);
            Ok(vec![4u8; BLOCK_SIZE])
        };
        let mut j = Journal::open(&store, 7).expect("reopen");
        let r = j.read_round(&base).expect("read");
        assert_eq!((r.commits, &r.images[&6]), (1, &img));
        let data = std::fs::read(journal_path(&store)).expect("read");
        rewrite_first(&store, data, len, |c| {
            c[4..8].copy_from_slice(&VERSION_3.to_le_bytes())
        });
        let mut j = Journal::open(&store, 7).expect("reopen");
        assert!(j.read_round(&base).is_err());
    }

    /// Version 5: slot operations redo puts and clears on the store file's
    /// copy, in order with the block's deltas; a version-4 journal never
    /// reads bit 30 as a flag, and a commit with both flags is torn.
    #[test]
    fn slot_operations_redo_puts_and_clears_in_order_with_deltas() {
        use crate::format::{tag, BlockMut, KIND_PRIMARY};
        let dir = tempfile::tempdir().expect("tempdir");
        let store = dir.path().join("s.tags");
        let mut base_img = vec![0u8; BLOCK_SIZE];
        BlockMut(&mut base_img).set_identity(KIND_PRIMARY, 1, 0);
        BlockMut(&mut base_img).seal();
        let slot = |s: &str| tag::encode(&tag::Tag::new("ö", "r", s)).expect("fits");
        let mut live = base_img.clone();
        let mut ops = Vec::new();
        let crc = |b: &[u8]| crate::format::BlockRef(b).stored_crc();
        BlockMut(&mut live).put_resealed(3, &slot("a\tb"), 11, 5);
        slot_ops::encode_put(&mut ops, 3, crc(&live), &slot("a\tb"), 11, 5);
        BlockMut(&mut live).put_resealed(4, &slot("c"), 12, 6);
        slot_ops::encode_put(&mut ops, 4, crc(&live), &slot("c"), 12, 6);
        BlockMut(&mut live).clear_resealed(3);
        slot_ops::encode_clear(&mut ops, 3, crc(&live));
        let after_ops = live.clone();
        // Then a write tracked by lines (the last line), as a delta.
        live[BLOCK_SIZE - 8..].fill(1);
        let mut d = Vec::new();
        delta::encode(&after_ops, &live, &mut d);
        let mut j = Journal::open(&store, 7).expect("open");
        j.append([Change::Ops(2, &ops), Change::Delta(2, &d)].into_iter())
            .expect("append");
        let len = j.len() as usize;
        drop(j);
        let base = |n: u64| -> Result<Vec<u8>> {
            assert_eq!(n, 2);
            Ok(base_img.clone())
        };
        let mut j = Journal::open(&store, 7).expect("reopen");
        let r = j.read_round(&base).expect("read");
        assert_eq!(r.commits, 1);
        assert!(r.images[&2] == live, "ops then delta rebuild the block");
        // The same bytes as version 4: bit 30 is length, the entry runs past the body.
        let data = std::fs::read(journal_path(&store)).expect("read");
        rewrite_first(&store, data.clone(), len, |c| {
            c[4..8].copy_from_slice(&VERSION_4.to_le_bytes())
        });
        let mut j = Journal::open(&store, 7).expect("reopen");
        assert_eq!(j.read_round(&base).expect("read").commits, 0);
        // Both flags on the first entry: the commit does not parse.
        rewrite_first(&store, data, len, |c| c[HEADER + 8 + 3] |= 0x80);
        let mut j = Journal::open(&store, 7).expect("reopen");
        assert_eq!(j.read_round(&base).expect("read").commits, 0);
    }

    /// Version 1 (no salt, no body length, whole images): two commits are
    /// read back, commit by commit, and a torn third is dropped.
    #[test]
    fn a_version_1_journal_is_read() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = dir.path().join("s.tags");
        let commit = |seq: u64, blocks: &[(u64, u8)]| {
            let mut c = Vec::new();
            c.extend_from_slice(MAGIC);
            c.extend_from_slice(&VERSION_1.to_le_bytes());
            c.extend_from_slice(&7u64.to_le_bytes());
            c.extend_from_slice(&seq.to_le_bytes());
            c.extend_from_slice(&(blocks.len() as u32).to_le_bytes());
            c.extend_from_slice(&[0u8; 4]);
            for &(b, fill) in blocks {
                c.extend_from_slice(&b.to_le_bytes());
                c.extend_from_slice(&[fill; BLOCK_SIZE]);
            }
            let crc = crc32fast::hash(&c);
            c.extend_from_slice(&crc.to_le_bytes());
            c.extend_from_slice(END);
            c
        };
        let mut data = commit(0, &[(3, 1), (4, 2)]);
        data.extend(commit(1, &[(3, 5)]));
        let whole = data.len();
        let third = commit(2, &[(9, 9)]);
        // The file ending with the second commit, then with a torn third.
        for tail in [&[][..], &third[..third.len() - 3]] {
            let mut file = data.clone();
            file.extend_from_slice(tail);
            std::fs::write(journal_path(&store), &file).expect("write");
            let mut j = Journal::open(&store, 7).expect("open");
            let r = j.read_round(&no_base).expect("read");
            assert_eq!(r.commits, 2);
            assert_eq!(r.images[&3], vec![5u8; BLOCK_SIZE]);
            assert_eq!(r.images[&4], vec![2u8; BLOCK_SIZE]);
            assert!(!r.images.contains_key(&9));
            assert_eq!(j.len(), whole as u64);
        }
    }

    /// A version-4 round read by this build is continued by the commits
    /// appended after it (replay's guard commit of final images): the next
    /// read applies them after the version-4 deltas, whatever the store
    /// file's copies have become meanwhile.
    #[test]
    fn a_commit_appended_to_a_version_4_round_is_read_back() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = dir.path().join("s.tags");
        let (img, len) = one_delta_journal(&store);
        // Make it a version-4 commit, the file ending with it.
        let mut data = std::fs::read(journal_path(&store)).expect("read");
        data.truncate(len);
        rewrite_first(&store, data, len, |c| {
            c[4..8].copy_from_slice(&VERSION_4.to_le_bytes())
        });
        let base = |_: u64| -> Result<Vec<u8>> { Ok(vec![4u8; BLOCK_SIZE]) };
        let mut j = Journal::open(&store, 7).expect("reopen");
        let r = j.read_round(&base).expect("read");
        assert_eq!(r.commits, 1);
        j.append([Change::Image(6, &r.images[&6][..])].into_iter())
            .expect("guard");
        drop(j);
        // The store file's copy torn meanwhile: the guard's image wins.
        let torn = |_: u64| -> Result<Vec<u8>> { Ok(vec![0xEE; BLOCK_SIZE]) };
        let mut j = Journal::open(&store, 7).expect("reopen");
        let r = j.read_round(&torn).expect("read");
        assert_eq!(r.commits, 2);
        assert!(r.images[&6] == img, "the guard commit was not read back");
    }

    /// A header claiming a body longer than the file ends the round there
    /// (read_round checks the length against the file before reading it).
    #[test]
    fn a_body_length_past_the_files_end_ends_the_round() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = dir.path().join("s.tags");
        let mut j = Journal::open(&store, 7).expect("open");
        let a = vec![1u8; BLOCK_SIZE];
        j.append([Change::Image(5, &a[..])].into_iter())
            .expect("append");
        j.append([Change::Image(6, &a[..])].into_iter())
            .expect("append");
        let first = commit_len(&store);
        drop(j);
        let path = journal_path(&store);
        let mut data = std::fs::read(&path).expect("read");
        data[first + 32..first + 36].copy_from_slice(&0xFFFF_FFF0u32.to_le_bytes());
        std::fs::write(&path, &data).expect("write");
        let mut j = Journal::open(&store, 7).expect("reopen");
        let r = j.read_round(&no_base).expect("read");
        assert_eq!(r.commits, 1);
        assert_eq!(j.len(), first as u64);
    }

    /// The length of the first commit of the journal beside `store`.
    fn commit_len(store: &Path) -> usize {
        let data = std::fs::read(journal_path(store)).expect("read");
        HEADER + rd32(&data, 32) as usize + 8
    }

    #[test]
    fn append_read_and_torn_tail() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = dir.path().join("s.tags");
        let mut j = Journal::open(&store, 7).expect("open");
        let a = vec![1u8; BLOCK_SIZE];
        let b = vec![2u8; BLOCK_SIZE];
        let img = Change::Image;
        j.append([img(5u64, &a[..]), img(9, &b[..])].into_iter())
            .expect("append");
        // Block 9 again, as a delta from its image in the first commit.
        let mut c = b.clone();
        c[100..108].fill(3);
        let mut d = Vec::new();
        delta::encode(&b, &c, &mut d);
        let change = Change::Delta(9, &d);
        j.append([img(5u64, &b[..]), change].into_iter())
            .expect("append");
        let full = j.len();
        drop(j);
        let mut j = Journal::open(&store, 7).expect("reopen");
        let r = j.read_round(&no_base).expect("read");
        assert_eq!(r.commits, 2);
        assert_eq!(r.images[&5], b);
        assert_eq!(r.images[&9], c);
        // A torn last commit is dropped, the first survives.
        let f = OpenOptions::new()
            .write(true)
            .open(journal_path(&store))
            .expect("f");
        f.set_len(full - 10).expect("cut");
        let mut j = Journal::open(&store, 7).expect("reopen");
        let r = j.read_round(&no_base).expect("read");
        assert_eq!(r.commits, 1);
        assert_eq!(r.images[&9], b);
        // Another store's journal is ignored.
        let mut j = Journal::open(&store, 8).expect("reopen");
        assert_eq!(j.read_round(&no_base).expect("read").commits, 0);
    }

    /// Commits written directly (`direct.rs`) and through the page cache
    /// read back the same, across a reopen in mid-page (the direct tail
    /// then comes from the file) and a checkpoint's reset.
    #[test]
    fn direct_and_buffered_commits_replay_alike() {
        let mut rounds = Vec::new();
        for direct in [true, false] {
            let dir = tempfile::tempdir().expect("tempdir");
            let store = dir.path().join("s.tags");
            let open = |store: &Path| {
                let mut j = Journal::open(store, 7).expect("open");
                if !direct {
                    j.direct = None;
                }
                j
            };
            let mut j = open(&store);
            let blocks: Vec<Vec<u8>> = (0..6u8)
                .map(|k| {
                    (0..BLOCK_SIZE)
                        .map(|i| (i as u8) ^ k.wrapping_mul(41))
                        .collect()
                })
                .collect();
            j.append([Change::Image(3, &blocks[0][..])].into_iter())
                .expect("append");
            // A round ends: what follows starts again at offset 0.
            j.reset().expect("reset");
            for (k, img) in blocks.iter().enumerate() {
                j.append([Change::Image(10 + k as u64 % 3, &img[..])].into_iter())
                    .expect("append");
                if k == 2 {
                    drop(j);
                    j = open(&store);
                    assert_eq!(j.read_round(&no_base).expect("read").commits, 5);
                }
                let mut next = img.clone();
                next[64..72].fill(k as u8 + 1);
                let mut d = Vec::new();
                delta::encode(img, &next, &mut d);
                j.append([Change::Delta(10 + k as u64 % 3, &d)].into_iter())
                    .expect("append");
            }
            drop(j);
            let mut j = open(&store);
            let r = j.read_round(&no_base).expect("read");
            assert_eq!(r.commits, 12, "direct {direct}");
            assert!(!r.images.contains_key(&3), "the reset round is gone");
            let mut images: Vec<(u64, Vec<u8>)> = r.images.into_iter().collect();
            images.sort();
            rounds.push(images);
        }
        assert_eq!(rounds[0], rounds[1]);
        assert_eq!(rounds[0].len(), 3);
    }

    /// A version-2 journal (left by a crash of an older build: images only,
    /// no deltas) is still replayed.
    #[test]
    fn version_2_commits_replay() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = dir.path().join("s.tags");
        let mut j = Journal::open(&store, 7).expect("open");
        let a = vec![5u8; BLOCK_SIZE];
        let change = Change::Image(3, &a);
        j.append([change].into_iter()).expect("append");
        let len = j.len() as usize;
        drop(j);
        // Rewrite the commit as version 2 (same framing), CRC recomputed.
        let path = journal_path(&store);
        let mut data = std::fs::read(&path).expect("read");
        data[4..8].copy_from_slice(&VERSION_2.to_le_bytes());
        let crc = crc32fast::hash(&data[..len - 8]);
        data[len - 8..len - 4].copy_from_slice(&crc.to_le_bytes());
        std::fs::write(&path, &data).expect("write");
        let mut j = Journal::open(&store, 7).expect("reopen");
        let r = j.read_round(&no_base).expect("read");
        assert_eq!(r.commits, 1);
        assert_eq!(r.images[&3], a);
    }
}
