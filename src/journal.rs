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

use crate::block::BLOCK_SIZE;
use crate::error::{Error, Result};
use std::fs::{File, OpenOptions};
use std::io::Read;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

const MAGIC: &[u8; 4] = b"TJNL";
const END: &[u8; 4] = b"TEND";
const VERSION: u32 = 1;
const HEADER: usize = 32;
const ENTRY: usize = 8 + BLOCK_SIZE;

/// Path of the journal beside a store file.
pub fn journal_path(store: &Path) -> PathBuf {
    let mut s = store.as_os_str().to_owned();
    s.push(".journal");
    PathBuf::from(s)
}

/// One complete commit read back from the journal.
pub(crate) struct Commit {
    pub blocks: Vec<(u64, Vec<u8>)>,
}

/// The open journal file.
pub(crate) struct Journal {
    file: File,
    path: PathBuf,
    len: u64,
    next_seq: u64,
    seed: u64,
}

impl Journal {
    /// Opens (creating if needed) the journal of the store at `store`.
    pub fn open(store: &Path, seed: u64) -> Result<Journal> {
        let path = journal_path(store);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| Error::io(format!("opening journal {}", path.display()), e))?;
        let len = file
            .metadata()
            .map_err(|e| Error::io(format!("reading journal {}", path.display()), e))?
            .len();
        Ok(Journal {
            file,
            path,
            len,
            next_seq: 0,
            seed,
        })
    }

    /// Bytes in the journal.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Reads every complete, valid commit from the start; stops at the first
    /// torn or foreign one.
    pub fn read_commits(&mut self) -> Result<Vec<Commit>> {
        let mut data = Vec::new();
        let mut f = &self.file;
        f.read_to_end(&mut data)
            .map_err(|e| Error::io(format!("reading journal {}", self.path.display()), e))?;
        let mut out = Vec::new();
        let mut at = 0usize;
        let mut expect: Option<u64> = None;
        while data.len() >= at + HEADER {
            let h = &data[at..at + HEADER];
            if &h[0..4] != MAGIC
                || crate::format::rd32(h, 4) != VERSION
                || crate::format::rd64(h, 8) != self.seed
            {
                break;
            }
            let seq = crate::format::rd64(h, 16);
            if expect.is_some_and(|e| e != seq) {
                break;
            }
            let n = crate::format::rd32(h, 24) as usize;
            let body = HEADER + n * ENTRY;
            if data.len() < at + body + 8 {
                break;
            }
            let crc = crc32fast::hash(&data[at..at + body]);
            if crate::format::rd32(&data, at + body) != crc
                || &data[at + body + 4..at + body + 8] != END
            {
                break;
            }
            let blocks = (0..n)
                .map(|i| {
                    let e = at + HEADER + i * ENTRY;
                    (
                        crate::format::rd64(&data, e),
                        data[e + 8..e + ENTRY].to_vec(),
                    )
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
        let r = self
            .file
            .write_all_at(&buf, self.len)
            .and_then(|()| self.file.sync_data());
        if let Err(e) = r {
            let _ = self.file.set_len(self.len);
            return Err(Error::io(
                format!("writing journal {}", self.path.display()),
                e,
            ));
        }
        self.len += buf.len() as u64;
        self.next_seq += 1;
        Ok(())
    }

    /// Empties the journal once its blocks are durable in the store file.
    pub fn reset(&mut self) -> Result<()> {
        self.file
            .set_len(0)
            .and_then(|()| self.file.sync_all())
            .map_err(|e| Error::io(format!("truncating journal {}", self.path.display()), e))?;
        self.len = 0;
        Ok(())
    }

    /// Removes the (empty) journal file.
    pub fn remove(self) -> Result<()> {
        std::fs::remove_file(&self.path)
            .map_err(|e| Error::io(format!("removing journal {}", self.path.display()), e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
