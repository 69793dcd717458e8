//! Write-ahead journal of full block images, kept in `STORE.journal`.
//!
//! In the journaled durability modes a change is made to a private copy of
//! each block it touches; a *commit* appends the final image of every touched
//! block to the journal and fsyncs it, and only then copies the images into
//! the mapped store file. So any block content that can reach the store file
//! before a checkpoint is in the durable journal, and recovery — replaying
//! every complete commit in order — restores each block whole, whatever mix of
//! old, new or garbled sectors a power cut left in it. A commit torn by the
//! cut fails its CRC and is dropped: its changes were never acknowledged and
//! never reached the store file.
//!
//! Commit layout (little-endian):
//!
//! | off | len | field |
//! |-----|-----|-------|
//! | 0 | 4 | magic `TJNL` |
//! | 4 | 4 | journal format version (1) |
//! | 8 | 8 | store hash seed (a journal of another store is ignored) |
//! | 16 | 8 | commit sequence number, consecutive from the first commit |
//! | 24 | 4 | block count `n` |
//! | 28 | 4 | reserved, zero |
//! | 32 | `n` × 4104 | `n` entries: block number u64, then its 4096-byte image |
//! | 32 + 4104n | 4 | CRC32 of bytes 0 .. 32 + 4104n |
//! | 36 + 4104n | 4 | magic `TEND` |

use crate::error::Result;
use crate::format::bytes::{rd32, rd64};
use crate::format::BLOCK_SIZE;
use crate::side::{side_path, AppendLog};
use std::path::{Path, PathBuf};

const MAGIC: &[u8; 4] = b"TJNL";
const END: &[u8; 4] = b"TEND";
const VERSION: u32 = 1;
const HEADER: usize = 32;
const ENTRY: usize = 8 + BLOCK_SIZE;

/// Path of the journal beside a store file.
pub fn journal_path(store: &Path) -> PathBuf {
    side_path(store, "journal")
}

/// One complete commit read back from the journal.
pub struct Commit {
    pub blocks: Vec<(u64, Vec<u8>)>,
}

/// The open journal file.
pub struct Journal {
    log: AppendLog,
    next_seq: u64,
    seed: u64,
}

impl Journal {
    /// Opens (creating if needed) the journal of the store at `store`.
    pub fn open(store: &Path, seed: u64) -> Result<Journal> {
        let log = AppendLog::open(journal_path(store), true, true)?
            .ok_or_else(|| crate::Error::corrupt("journal vanished while being created"))?;
        Ok(Journal {
            log,
            next_seq: 0,
            seed,
        })
    }

    /// Opens the journal of the store at `store` for reading only; `None` when absent.
    pub fn open_read_only(store: &Path, seed: u64) -> Result<Option<Journal>> {
        Ok(
            AppendLog::open(journal_path(store), false, false)?.map(|log| Journal {
                log,
                next_seq: 0,
                seed,
            }),
        )
    }

    /// Bytes in the journal.
    pub fn len(&self) -> u64 {
        self.log.len()
    }

    /// The hash seed the journal's first commit names, if it has one.
    pub fn first_seed(&mut self) -> Result<Option<u64>> {
        let data = self.log.read_all()?;
        Ok((data.len() >= HEADER && &data[0..4] == MAGIC).then(|| rd64(&data, 8)))
    }

    /// Reads every complete, valid commit from the start; stops at the first
    /// torn or foreign one.
    pub fn read_commits(&mut self) -> Result<Vec<Commit>> {
        let data = self.log.read_all()?;
        let mut out = Vec::new();
        let mut at = 0usize;
        let mut expect: Option<u64> = None;
        while data.len() >= at + HEADER {
            let h = &data[at..at + HEADER];
            if &h[0..4] != MAGIC || rd32(h, 4) != VERSION || rd64(h, 8) != self.seed {
                break;
            }
            let seq = rd64(h, 16);
            if expect.is_some_and(|e| e != seq) {
                break;
            }
            let n = rd32(h, 24) as usize;
            let body = HEADER + n * ENTRY;
            if data.len() < at + body + 8 {
                break;
            }
            let crc = crc32fast::hash(&data[at..at + body]);
            if rd32(&data, at + body) != crc || &data[at + body + 4..at + body + 8] != END {
                break;
            }
            let blocks = (0..n)
                .map(|i| {
                    let e = at + HEADER + i * ENTRY;
                    (rd64(&data, e), data[e + 8..e + ENTRY].to_vec())
                })
                .collect();
            out.push(Commit { blocks });
            expect = Some(seq + 1);
            at += body + 8;
        }
        self.next_seq = expect.unwrap_or(0);
        Ok(out)
    }

    /// Appends one commit and makes it durable; on failure the journal is cut
    /// back to its previous length.
    pub fn append<'a>(
        &mut self,
        blocks: impl ExactSizeIterator<Item = (u64, &'a [u8])>,
    ) -> Result<()> {
        let n = blocks.len();
        let mut buf = Vec::with_capacity(HEADER + n * ENTRY + 8);
        buf.extend_from_slice(MAGIC);
        buf.extend_from_slice(&VERSION.to_le_bytes());
        buf.extend_from_slice(&self.seed.to_le_bytes());
        buf.extend_from_slice(&self.next_seq.to_le_bytes());
        buf.extend_from_slice(&(n as u32).to_le_bytes());
        buf.extend_from_slice(&0u32.to_le_bytes());
        for (b, img) in blocks {
            buf.extend_from_slice(&b.to_le_bytes());
            buf.extend_from_slice(img);
        }
        let crc = crc32fast::hash(&buf);
        buf.extend_from_slice(&crc.to_le_bytes());
        buf.extend_from_slice(END);
        self.log.append(&buf)?;
        self.next_seq += 1;
        Ok(())
    }

    /// Empties the journal once its blocks are durable in the store file.
    pub fn reset(&mut self) -> Result<()> {
        self.log.truncate(0)
    }

    /// Removes the (empty) journal file.
    pub fn remove(self) -> Result<()> {
        self.log.remove()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::OpenOptions;

    #[test]
    fn append_read_and_torn_tail() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = dir.path().join("s.tags");
        let mut j = Journal::open(&store, 7).expect("open");
        let a = vec![1u8; BLOCK_SIZE];
        let b = vec![2u8; BLOCK_SIZE];
        j.append([(5u64, &a[..]), (9, &b[..])].into_iter())
            .expect("append");
        j.append([(5u64, &b[..])].into_iter()).expect("append");
        let full = j.len();
        drop(j);
        let mut j = Journal::open(&store, 7).expect("reopen");
        let c = j.read_commits().expect("read");
        assert_eq!(c.len(), 2);
        assert_eq!(c[0].blocks[1].0, 9);
        assert_eq!(c[1].blocks[0].1, b);
        // A torn last commit is dropped, the first survives.
        let f = OpenOptions::new()
            .write(true)
            .open(journal_path(&store))
            .expect("f");
        f.set_len(full - 10).expect("cut");
        let mut j = Journal::open(&store, 7).expect("reopen");
        assert_eq!(j.read_commits().expect("read").len(), 1);
        // Another store's journal is ignored.
        let mut j = Journal::open(&store, 8).expect("reopen");
        assert_eq!(j.read_commits().expect("read").len(), 0);
    }
}
