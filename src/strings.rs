//! The strings file `STORE.strings`: the long strings that tags too large
//! for a slot hold by reference (format 3, DESIGN.md §3.7). While the
//! store is open the file is mapped (read-only, with room to grow) and
//! only an index from reference to offset is kept in memory.
//!
//! Append-only: a 16-byte header, then records of a u32 length, the CRC32
//! of the string and its UTF-8 bytes. A string is appended before any slot
//! names its reference, and made durable before that slot's commit; a
//! torn last record (a crash while appending) is cut off at the next
//! writable open. Strings of deleted tags stay until `maintain` rewrites
//! the file with the strings its tags use.

use crate::error::{Error, Result};
use crate::format::long::{is_ref, ref_bytes, REF_LEN};
use crate::side::side_path;
use foldhash::{HashMap, HashMapExt};
use memmap2::{Mmap, MmapOptions};
use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// First 8 bytes of a strings file.
const MAGIC: &[u8; 8] = b"TAGSTRNG";
/// Format version of the strings file.
const VERSION: u32 = 1;
/// Bytes of the header: magic, version, 4 zero bytes.
const HEADER: usize = 16;
/// Address space mapped past a writable strings file's end, at least, so
/// that appends seldom remap (a page in unit tests, so that they remap).
const MAP_ROOM: u64 = if cfg!(test) { 4096 } else { 64 << 20 };

/// Path of the strings file of the store at `store`.
pub fn strings_path(store: &Path) -> PathBuf {
    side_path(store, "strings")
}

/// The long strings of a store, by reference (`Default`: none, no file).
#[derive(Default)]
pub struct Strings {
    /// Where each held string's bytes start in the file, and their length.
    index: HashMap<[u8; REF_LEN], (u64, u32)>,
    /// The file, mapped read-only: at least `len` bytes, with room for
    /// appends (written through `file`; the shared map sees them).
    map: Option<Mmap>,
    /// Bytes of address space `map` covers.
    mapped: u64,
    file: Option<File>,
    path: PathBuf,
    len: u64,
    writable: bool,
    /// Appended since the last fsync.
    dirty: bool,
    /// Where the first damaged record starts: no string is appended then.
    damaged: Option<u64>,
    /// The store says it held long strings but this file holds none (it
    /// is missing or was emptied): no string is appended then either.
    lost: bool,
}

/// The 16 bytes every strings file starts with.
fn header() -> [u8; HEADER] {
    let mut h = [0u8; HEADER];
    h[..8].copy_from_slice(MAGIC);
    h[8..12].copy_from_slice(&VERSION.to_le_bytes());
    h
}

fn key(r: &[u8]) -> Option<[u8; REF_LEN]> {
    r.try_into().ok()
}

impl Strings {
    /// No strings (a new store); the file is made on the first append.
    pub fn empty(store: &Path, writable: bool) -> Strings {
        Strings {
            index: HashMap::new(),
            map: None,
            mapped: 0,
            file: None,
            path: strings_path(store),
            len: 0,
            writable,
            dirty: false,
            damaged: None,
            lost: false,
        }
    }

    /// Loads the strings file of `store`, if there is one: maps it and
    /// indexes its records. A writable open cuts a torn last record off; a
    /// read-only one ignores it.
    pub fn load(store: &Path, writable: bool) -> Result<Strings> {
        let mut s = Strings::empty(store, writable);
        let file = match OpenOptions::new().read(true).write(writable).open(&s.path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(s),
            Err(e) => return Err(Error::io(format!("opening {}", s.path.display()), e)),
        };
        let flen = file.metadata().map_err(|e| s.io("reading", e))?.len();
        s.file = Some(file);
        let header = header();
        if flen < HEADER as u64 {
            // A create cut short (nothing was ever referenced from it).
            let mut data = vec![0u8; flen as usize];
            s.file_ref()
                .and_then(|f| f.read_exact_at(&mut data, 0))
                .map_err(|e| s.io("reading", e))?;
            if !(header.starts_with(&data) || data.iter().all(|&b| b == 0)) {
                return Err(s.foreign());
            }
            if writable {
                s.write_header()?;
                s.ensure_mapped()?;
            }
            return Ok(s);
        }
        s.len = flen;
        s.ensure_mapped()?;
        let map = s.map.take().ok_or_else(|| s.foreign())?;
        let data = map.get(..flen as usize).ok_or_else(|| s.foreign())?;
        if &data[..8] != MAGIC {
            return Err(s.foreign());
        }
        let version = u32::from_le_bytes([data[8], data[9], data[10], data[11]]);
        if version != VERSION {
            return Err(Error::UnsupportedVersion {
                found: version,
                supported: VERSION,
            });
        }
        let mut at = HEADER;
        loop {
            match record(data, at) {
                Record::Sound(text) => {
                    let place = ((at + 8) as u64, text.len() as u32);
                    s.index.insert(ref_bytes(text), place);
                    at += 8 + text.len();
                }
                Record::End => break,
                Record::Damaged(n) => {
                    // Kept as it is, sound records after it read: a cut
                    // here would lose them. No string is appended after
                    // damage (`intern` refuses), so nothing is read wrong.
                    s.damaged.get_or_insert(at as u64);
                    at += n;
                }
            }
        }
        s.map = Some(map);
        s.len = at as u64;
        // Strings a session that ended uncleanly appended may never have
        // been fsynced, and a tag naming one can be inserted again (the
        // string is then held, not appended): the first commit of this
        // session fsyncs the file once.
        s.dirty = writable;
        if writable && s.damaged.is_none() && s.len < flen {
            // A torn last record (a crash while appending): cut off.
            let f = s.file_ref().map_err(|e| s.io("cutting", e))?;
            f.set_len(s.len)
                .and_then(|()| f.sync_all())
                .map_err(|e| s.io("cutting the torn tail of", e))?;
        }
        Ok(s)
    }

    /// Maps the file again once it outgrew the map: writable, with room
    /// for appends (twice its length, and at least [`MAP_ROOM`] more).
    fn ensure_mapped(&mut self) -> Result<()> {
        if self.len == 0 || (self.map.is_some() && self.len <= self.mapped) {
            return Ok(());
        }
        let want = match self.writable {
            true => self
                .len
                .saturating_mul(2)
                .max(self.len.saturating_add(MAP_ROOM)),
            false => self.len,
        };
        let n = usize::try_from(want).map_err(|_| {
            self.io(
                "mapping",
                std::io::Error::other("file larger than the address space"),
            )
        })?;
        let f = self.file_ref().map_err(|e| self.io("mapping", e))?;
        // SAFETY: the store's lock keeps other writers away (the strings
        // file is only written by the process holding it exclusively, and
        // only appended to, or cut below what a reader indexed); the map
        // never outlives `self.file`; bytes past `len` (past the file's
        // end) are never read: every string read lies in a record indexed
        // below `len`.
        let m = unsafe { MmapOptions::new().len(n).map(f) }.map_err(|e| self.io("mapping", e))?;
        self.map = Some(m);
        self.mapped = want;
        Ok(())
    }

    fn foreign(&self) -> Error {
        Error::corrupt(format!(
            "{} is not a tagstore strings file",
            self.path.display()
        ))
    }

    /// The offset of the first damaged record (one that fails its CRC
    /// with data after it), if any.
    pub fn damaged(&self) -> Option<u64> {
        self.damaged
    }

    /// Records that the store held long strings while this file holds
    /// none: every reference may name a lost string, and none is added.
    pub fn mark_lost(&mut self) {
        self.lost = true;
    }

    /// True when the store held long strings and this file holds none.
    pub fn lost(&self) -> bool {
        self.lost
    }

    /// True when the file is damaged or lost: any reference may be stored
    /// without this file holding its string.
    pub fn unsure(&self) -> bool {
        self.damaged.is_some() || self.lost
    }

    fn file_ref(&self) -> std::io::Result<&File> {
        self.file
            .as_ref()
            .ok_or_else(|| std::io::Error::other("strings file not open"))
    }

    fn write_header(&mut self) -> Result<()> {
        let f = self.file_ref().map_err(|e| self.io("writing", e))?;
        f.set_len(0)
            .and_then(|()| f.write_all_at(&header(), 0))
            .map_err(|e| self.io("writing", e))?;
        self.len = HEADER as u64;
        self.dirty = true;
        Ok(())
    }

    fn io(&self, what: &str, e: std::io::Error) -> Error {
        Error::io(format!("{what} {}", self.path.display()), e)
    }

    /// True when no string is held.
    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    /// Strings held.
    pub fn len(&self) -> usize {
        self.index.len()
    }

    /// The string a reference stands for (read from the map, and checked
    /// as UTF-8 rather than trusted).
    #[inline]
    pub fn get(&self, r: &[u8]) -> Option<&str> {
        let &(at, n) = key(r).and_then(|k| self.index.get(&k))?;
        let at = usize::try_from(at).ok()?;
        let bytes = self.map.as_ref()?.get(at..at.checked_add(n as usize)?)?;
        std::str::from_utf8(bytes).ok()
    }

    /// The whole string that stored bytes stand for: `None` when they are
    /// no reference (the string is the bytes themselves), an error when
    /// they name a string this file does not hold.
    ///
    /// While no string was ever stored (the store is format 2), nothing is
    /// a reference: a string of a reference's shape was written by a build
    /// before format 3 as it is.
    #[inline]
    pub fn whole(&self, b: &[u8]) -> Result<Option<&str>> {
        if !is_ref(b) || (self.index.is_empty() && !self.unsure()) {
            return Ok(None);
        }
        self.get(b).map(Some).ok_or_else(|| {
            let why = match self.lost {
                true => " (the file holds no string: it is missing, empty or damaged, while the store says it holds tags longer than a slot)",
                false => "",
            };
            Error::corrupt(format!(
                "a tag names long string {:?} that {} does not hold{why}",
                String::from_utf8_lossy(b),
                self.path.display()
            ))
        })
    }

    /// Makes sure `s` is held, appending it to the file when it is new
    /// (durable at the next [`Strings::sync`]: the engine calls it before
    /// any commit that could make a slot naming it durable). Refuses a
    /// string whose reference is another's (a hash collision, never seen):
    /// it cannot be stored.
    pub fn intern(&mut self, s: &str) -> Result<()> {
        let k = ref_bytes(s);
        if let Some(old) = self.get(&k) {
            if old == s {
                // Held (durable at the next `sync` if it is not yet).
                return Ok(());
            }
            return Err(Error::InvalidArgument(format!(
                "a string of {} bytes has the same 126-bit reference as another the store holds; it cannot be stored",
                s.len()
            )));
        }
        if !self.writable {
            return Err(Error::ReadOnly);
        }
        if let Some(at) = self.damaged {
            return Err(Error::corrupt(format!(
                "{} is damaged at byte {at}: no string is added to it (`tagstore export --salvage` writes out the readable tags, to load into a new store)",
                self.path.display()
            )));
        }
        if self.lost {
            return Err(Error::corrupt(format!(
                "{} is missing or empty while the store says it holds tags longer than a slot: no string is added to it (`tagstore export --salvage` writes out the readable tags, to load into a new store)",
                self.path.display()
            )));
        }
        if self.file.is_none() {
            let f = OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .open(&self.path)
                .map_err(|e| self.io("creating", e))?;
            self.file = Some(f);
            self.write_header()?;
            crate::side::sync_dir(&self.path)?;
        }
        let mut rec = Vec::with_capacity(8 + s.len());
        rec.extend_from_slice(&(s.len() as u32).to_le_bytes());
        rec.extend_from_slice(&crc32fast::hash(s.as_bytes()).to_le_bytes());
        rec.extend_from_slice(s.as_bytes());
        let f = self.file_ref().map_err(|e| self.io("writing", e))?;
        if let Err(e) = f.write_all_at(&rec, self.len) {
            let _ = f.set_len(self.len);
            return Err(self.io("writing", e));
        }
        let at = self.len + 8;
        self.len += rec.len() as u64;
        self.dirty = true;
        self.ensure_mapped()?;
        self.index.insert(k, (at, s.len() as u32));
        Ok(())
    }

    /// Makes every appended string durable; true if it had to fsync.
    pub fn sync(&mut self) -> Result<bool> {
        if !self.dirty {
            return Ok(false);
        }
        let f = self.file_ref().map_err(|e| self.io("syncing", e))?;
        f.sync_data().map_err(|e| self.io("syncing", e))?;
        self.dirty = false;
        Ok(true)
    }
}

/// What starts at byte `at` of a strings file.
enum Record<'a> {
    /// A whole record whose CRC matches: its string.
    Sound(&'a str),
    /// The end, or a torn last record: its header or its string runs past
    /// the end, or nothing but zeros follows (a file extended by a crash
    /// before its bytes were written).
    End,
    /// A record that fails its CRC (or is empty, or not UTF-8) with more
    /// after it: its length in bytes.
    Damaged(usize),
}

fn record(data: &[u8], at: usize) -> Record<'_> {
    let Some(head) = data.get(at..at + 8) else {
        return Record::End;
    };
    if data[at..].iter().all(|&b| b == 0) {
        return Record::End;
    }
    let len = u32::from_le_bytes([head[0], head[1], head[2], head[3]]) as usize;
    let crc = u32::from_le_bytes([head[4], head[5], head[6], head[7]]);
    let Some(bytes) = data.get(at + 8..(at + 8).saturating_add(len)) else {
        return Record::End;
    };
    match std::str::from_utf8(bytes) {
        Ok(text) if len > 0 && crc32fast::hash(bytes) == crc => Record::Sound(text),
        _ => Record::Damaged(8 + len),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_survive_a_reopen_and_a_torn_tail_is_cut() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = dir.path().join("s.tags");
        let mut s = Strings::empty(&store, true);
        let long = "é".repeat(200);
        s.intern(&long).expect("intern");
        s.intern("second").expect("intern");
        s.intern(&long).expect("again");
        s.sync().expect("sync");
        let good = std::fs::metadata(strings_path(&store)).expect("meta").len();
        // A torn record: its length says more than the file holds.
        let f = OpenOptions::new()
            .append(true)
            .open(strings_path(&store))
            .expect("open");
        f.write_all_at(&[50, 0, 0, 0, 1, 2], good).expect("write");
        let ro = Strings::load(&store, false).expect("read-only load");
        assert_eq!(ro.len(), 2);
        let s = Strings::load(&store, true).expect("load");
        assert_eq!(s.get(&ref_bytes(&long)), Some(long.as_str()));
        assert_eq!(s.get(&ref_bytes("second")), Some("second"));
        assert_eq!(s.get(&ref_bytes("third")), None);
        let len = std::fs::metadata(strings_path(&store)).expect("meta").len();
        assert_eq!(len, good, "the torn record is cut off");
    }

    /// One damaged record in the middle does not cost the records after
    /// it, and nothing is appended after it; a zero-filled tail is cut.
    #[test]
    fn a_damaged_record_keeps_the_rest_and_zeros_are_a_torn_tail() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = dir.path().join("s.tags");
        let mut s = Strings::empty(&store, true);
        let (a, b, c) = ("a".repeat(100), "b".repeat(100), "c".repeat(100));
        for x in [&a, &b, &c] {
            s.intern(x).expect("intern");
        }
        s.sync().expect("sync");
        let path = strings_path(&store);
        let mut data = std::fs::read(&path).expect("read");
        let len = data.len();
        data.extend_from_slice(&[0u8; 300]);
        std::fs::write(&path, &data).expect("write");
        let s = Strings::load(&store, true).expect("load");
        assert_eq!(s.len(), 3);
        assert_eq!(std::fs::metadata(&path).expect("meta").len() as usize, len);
        // A byte of the first string flipped.
        data.truncate(len);
        data[HEADER + 8 + 5] ^= 1;
        std::fs::write(&path, &data).expect("write");
        let mut s = Strings::load(&store, true).expect("load");
        assert_eq!(s.damaged(), Some(HEADER as u64));
        assert_eq!(s.get(&ref_bytes(&b)), Some(b.as_str()));
        assert_eq!(s.get(&ref_bytes(&c)), Some(c.as_str()));
        assert_eq!(s.get(&ref_bytes(&a)), None);
        assert_eq!(
            std::fs::metadata(&path).expect("meta").len() as usize,
            len,
            "kept"
        );
        assert!(matches!(s.intern(&"d".repeat(60)), Err(Error::Corrupt(_))));
    }

    /// Appends past the map's room remap it; every string stays readable
    /// through each remap and after a reopen.
    #[test]
    fn appends_remap_and_every_string_stays_readable() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = dir.path().join("s.tags");
        let mut s = Strings::empty(&store, true);
        let text = |i: usize| format!("{i:05}-{}", "ü".repeat(20 + i * 37 % 3000));
        let mut maps = 0;
        for i in 0..300 {
            let before = s.mapped;
            s.intern(&text(i)).expect("intern");
            maps += usize::from(s.mapped != before);
            for j in (0..=i).step_by(17).chain([i]) {
                assert_eq!(
                    s.get(&ref_bytes(&text(j))),
                    Some(text(j).as_str()),
                    "{j} after {i}"
                );
            }
        }
        assert!(maps > 5, "the map grew {maps} times");
        s.sync().expect("sync");
        drop(s);
        for writable in [false, true] {
            let s = Strings::load(&store, writable).expect("load");
            assert_eq!(s.len(), 300);
            for i in 0..300 {
                assert_eq!(s.get(&ref_bytes(&text(i))), Some(text(i).as_str()));
            }
        }
    }

    #[test]
    fn a_foreign_file_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = dir.path().join("s.tags");
        std::fs::write(strings_path(&store), b"not a strings file at all").expect("write");
        assert!(matches!(
            Strings::load(&store, true),
            Err(Error::Corrupt(_))
        ));
    }
}
