//! The store file: an exclusively or shared-locked file mapped with memmap2.

use super::ahead::Ahead;
use super::bits::BlockBits;
use super::writeback::Writeback;
use crate::error::{Error, Result};
use crate::format::BLOCK_SIZE;
use foldhash::HashMap;
use memmap2::{Mmap, MmapMut, MmapOptions};
use std::fs::{File, OpenOptions, TryLockError};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::ThreadId;
use std::time::{Duration, Instant};

enum Map {
    Ro(Mmap),
    Rw(MmapMut),
}

/// A locked, memory-mapped store file.
pub struct MappedFile {
    file: File,
    map: Map,
    path: PathBuf,
    len: u64,
    /// Bytes of address space mapped (at least `len`): growth within it
    /// needs no remap.
    mapped: u64,
    /// On tmpfs even *reading* a hole through a shared map needs a free page
    /// (SIGBUS when full), so there the whole file is backed up front.
    tmpfs: bool,
    /// On tmpfs, when the whole file could not be backed (the disk is full,
    /// or the file is open read-only): one bit per block lying in a hole.
    /// Such a block reads as zeros without touching the map and is backed
    /// before its first write, so a full tmpfs still serves reads and deletes.
    holes: Option<BlockBits>,
    /// Write-back of bulk runs started in the background.
    writeback: Writeback,
    /// Never-written blocks backed ahead of need (started on first use).
    ahead: Option<Ahead>,
    /// This handle counted among the ones its thread holds on the file.
    _held: Option<Held>,
}

/// The store files each thread of this process opened and holds, as
/// (thread, (device, inode), handles): a reader opening a file its thread
/// holds already does not wait for a writer's turn, since the writer may
/// be waiting for that very handle (a review: a second read handle in the
/// same thread failed, or with a wait hung until the writer gave up).
/// Other threads' readers wait for the turn, as other processes' do.
static HELD: Mutex<Vec<HeldEntry>> = Mutex::new(Vec::new());

/// A thread, a file's (device, inode), and how many handles of it the
/// thread holds.
type HeldEntry = (ThreadId, (u64, u64), usize);

/// One handle's count in [`HELD`], given back on drop (on whatever thread).
#[derive(Debug)]
struct Held(ThreadId, (u64, u64));

impl Held {
    fn new(id: (u64, u64)) -> Held {
        let me = std::thread::current().id();
        let mut h = HELD.lock().unwrap_or_else(PoisonError::into_inner);
        match h.iter_mut().find(|e| e.0 == me && e.1 == id) {
            Some(e) => e.2 += 1,
            None => h.push((me, id, 1)),
        }
        Held(me, id)
    }

    /// True when this thread opened, and holds, a handle on the file `id`.
    fn here(id: (u64, u64)) -> bool {
        let me = std::thread::current().id();
        let h = HELD.lock().unwrap_or_else(PoisonError::into_inner);
        h.iter().any(|e| e.0 == me && e.1 == id && e.2 > 0)
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        let mut h = HELD.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(i) = h.iter().position(|e| e.0 == self.0 && e.1 == self.1) {
            h[i].2 -= 1;
            if h[i].2 == 0 {
                h.swap_remove(i);
            }
        }
    }
}

/// A file's (device, inode).
fn file_id(meta: &std::fs::Metadata) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt;
    (meta.dev(), meta.ino())
}

/// Bytes of a memory page.
#[cfg(target_os = "linux")]
fn page_size() -> u64 {
    // SAFETY: sysconf reads nothing of ours.
    unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(1) as u64
}

/// True when `e` reports a full disk.
pub fn is_no_space(e: &Error) -> bool {
    matches!(e, Error::Io { source, .. } if source.raw_os_error() == Some(libc::ENOSPC))
}

/// Blocks of `file` (`len` bytes) that lie wholly in holes, as a bitmap.
fn scan_holes(file: &File, len: u64) -> BlockBits {
    use std::os::fd::AsRawFd;
    let bs = BLOCK_SIZE as u64;
    let mut bits = BlockBits::with_blocks(len / bs);
    let fd = file.as_raw_fd();
    let mut off = 0u64;
    while off < len {
        // SAFETY: lseek on an fd we own; offsets are within the file.
        let data = unsafe { libc::lseek(fd, off as libc::off_t, libc::SEEK_DATA) };
        // No data from `off` on (ENXIO): a hole to the end. Any other error:
        // stop, taking the rest for data (never read data as zeros).
        if data < 0 && std::io::Error::last_os_error().raw_os_error() != Some(libc::ENXIO) {
            break;
        }
        let end = if data < 0 {
            len
        } else {
            (data as u64).min(len)
        };
        for b in off.div_ceil(bs)..end / bs {
            bits.insert(b);
        }
        if data < 0 {
            break;
        }
        // SAFETY: as above.
        let hole = unsafe { libc::lseek(fd, data as libc::off_t, libc::SEEK_HOLE) };
        if hole <= data {
            break;
        }
        off = hole as u64;
    }
    bits
}

fn on_tmpfs(file: &File) -> bool {
    use std::os::fd::AsRawFd;
    // SAFETY: fstatfs fills a zeroed struct for an fd we own.
    unsafe {
        let mut st: libc::statfs = std::mem::zeroed();
        libc::fstatfs(file.as_raw_fd(), &mut st) == 0 && st.f_type as i64 == 0x0102_1994
    }
}

/// Address space to map for a writable file of `len` bytes: room to grow
/// fourfold, or by 32 GiB, before the next remap. A remap unmaps every page
/// and faults them all in again: a store growing by splits adds a whole
/// primary segment at a level change, and the INSERTs after a remap ran
/// 3× slower until the pages were mapped again. Address space is only
/// reserved, never touched past the file's end.
fn headroom(len: u64) -> u64 {
    len.saturating_mul(4).max(len.saturating_add(32 << 30))
}

/// How long an open with no wait still retries a held lock: a child
/// process forked by another thread of this process shares the file (and
/// its lock) until it execs, which takes a moment; a store closed and
/// reopened in that moment would otherwise be refused as locked.
const LOCK_GRACE: Duration = Duration::from_millis(100);

/// The byte whose lock marks a writer's turn: a writer that finds the
/// store held takes it (an OFD byte-range lock, apart from the `flock` of
/// the whole file), and readers that see it taken wait as if the store
/// were held, so a writer waiting behind readers that keep overlapping gets
/// in once those open now are done, as SQLite's PENDING lock does.
/// (Regression, a review's: `insert --wait` waited forever while three
/// readers took turns.) Far past any store's end; locks there write nothing.
const TURN_BYTE: libc::off_t = 1 << 62;

/// Takes (`F_WRLCK`), gives back (`F_UNLCK`) or asks about (`F_RDLCK` with
/// `F_OFD_GETLK`: true when a writer holds it) the writer's turn of `file`.
fn turn(file: &File, cmd: libc::c_int, kind: libc::c_int) -> bool {
    use std::os::fd::AsRawFd;
    // SAFETY: a zeroed `flock` is a valid lock description (`l_pid` must
    // be 0 for OFD locks), passed to fcntl on an open descriptor.
    unsafe {
        let mut l: libc::flock = std::mem::zeroed();
        l.l_type = kind as libc::c_short;
        l.l_whence = libc::SEEK_SET as libc::c_short;
        l.l_start = TURN_BYTE;
        l.l_len = 1;
        let r = libc::fcntl(file.as_raw_fd(), cmd, &mut l);
        match cmd {
            libc::F_OFD_GETLK => r == 0 && l.l_type != libc::F_UNLCK as libc::c_short,
            _ => r == 0,
        }
    }
}

/// Locks `file`; when another process holds it, retries for up to `wait`
/// and at least [`LOCK_GRACE`] (none: for the grace), then fails with
/// [`Error::Locked`]. (Until 2026-11-30 a wait shorter than the grace,
/// `--wait 0`, gave up sooner than no wait at all.) A writer that waits
/// past the grace holds the writer's turn ([`TURN_BYTE`]) meanwhile; a
/// reader does not lock while another handle holds it, unless this thread
/// holds the file `id` already ([`Held`]).
fn lock(
    file: &File,
    path: &Path,
    id: (u64, u64),
    exclusive: bool,
    wait: Option<Duration>,
) -> Result<()> {
    // `Some(None)`: no limit (a wait too long to add to the clock).
    let wait = wait.unwrap_or(LOCK_GRACE).max(LOCK_GRACE);
    let deadline = Some(Instant::now().checked_add(wait));
    let mut pause = Duration::from_millis(1);
    let mut my_turn = false;
    // A reader whose thread holds the file already ignores the turn.
    let heeds_turn = !exclusive && !Held::here(id);
    loop {
        let r = if exclusive {
            file.try_lock()
        } else if heeds_turn && turn(file, libc::F_OFD_GETLK, libc::F_RDLCK) {
            Err(TryLockError::WouldBlock)
        } else {
            file.try_lock_shared()
        };
        match r {
            Ok(()) => {
                if my_turn {
                    turn(file, libc::F_OFD_SETLK, libc::F_UNLCK);
                }
                return Ok(());
            }
            Err(TryLockError::WouldBlock) => {
                // Only a writer that waits past the grace takes the turn: one
                // that gives up after it would only hold readers off meanwhile.
                // Another waiting writer may hold it: then that one goes first.
                if exclusive && !my_turn && wait > LOCK_GRACE {
                    my_turn = turn(file, libc::F_OFD_SETLK, libc::F_WRLCK);
                }
                let now = Instant::now();
                match deadline {
                    Some(Some(d)) if now < d => std::thread::sleep(pause.min(d - now)),
                    Some(None) => std::thread::sleep(pause),
                    // The turn goes with the file, closed by the caller.
                    _ => return Err(Error::Locked(path.to_path_buf())),
                }
                pause = (pause * 2).min(Duration::from_millis(50));
            }
            Err(TryLockError::Error(e)) => {
                return Err(Error::io(format!("locking {}", path.display()), e))
            }
        }
    }
}

impl MappedFile {
    /// Opens and locks an existing file (exclusive when writable), waiting
    /// up to `wait` for a lock another process holds.
    pub fn open(path: &Path, writable: bool, wait: Option<Duration>) -> Result<Self> {
        // Look before opening: opening a FIFO blocks until a writer comes.
        match std::fs::metadata(path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(Error::NotFound(path.to_path_buf()))
            }
            Err(e) => return Err(Error::io(format!("opening {}", path.display()), e)),
            Ok(m) if !m.is_file() => return Err(Error::NotARegularFile(path.to_path_buf())),
            Ok(_) => {}
        }
        let file = OpenOptions::new()
            .read(true)
            .write(writable)
            .open(path)
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::NotFound => Error::NotFound(path.to_path_buf()),
                _ => Error::io(format!("opening {}", path.display()), e),
            })?;
        let meta = file
            .metadata()
            .map_err(|e| Error::io(format!("reading metadata of {}", path.display()), e))?;
        if !meta.is_file() {
            return Err(Error::NotARegularFile(path.to_path_buf()));
        }
        let id = file_id(&meta);
        lock(&file, path, id, writable, wait)?;
        // A maintenance run may have renamed a new file over the path between
        // our open and our lock: then we locked the old, unlinked file.
        {
            use std::os::unix::fs::MetadataExt;
            let now = std::fs::metadata(path)
                .map_err(|e| Error::io(format!("reading metadata of {}", path.display()), e))?;
            if (now.dev(), now.ino()) != (meta.dev(), meta.ino()) {
                drop(file);
                return Self::open(path, writable, wait);
            }
        }
        let meta = file
            .metadata()
            .map_err(|e| Error::io(format!("reading metadata of {}", path.display()), e))?;
        let len = meta.len();
        if len < 2 * BLOCK_SIZE as u64 {
            return Err(Error::NotAStore(path.to_path_buf()));
        }
        let mapped = if writable { headroom(len) } else { len };
        let mut f = Self::with_map(file, path, writable, len, mapped)?;
        f._held = Some(Held::new(id));
        if f.tmpfs {
            let backed = match writable {
                true => match f.reserve(0, len) {
                    Ok(()) => true,
                    Err(e) if is_no_space(&e) => false,
                    Err(e) => return Err(e),
                },
                false => false,
            };
            if !backed {
                f.holes = Some(scan_holes(&f.file, len));
            }
        }
        Ok(f)
    }

    /// Creates a new file of `len` bytes (sparse), locked exclusively.
    pub fn create(path: &Path, len: u64) -> Result<Self> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(path)
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::AlreadyExists => Error::AlreadyExists(path.to_path_buf()),
                _ => Error::io(format!("creating {}", path.display()), e),
            })?;
        // The file is ours (create_new): on any failure from here, remove it.
        let made = (|| {
            let id = file
                .metadata()
                .map(|m| file_id(&m))
                .map_err(|e| Error::io(format!("reading metadata of {}", path.display()), e))?;
            lock(&file, path, id, true, None)?;
            file.set_len(len)
                .map_err(|e| Error::io(format!("sizing {}", path.display()), e))?;
            let mut f = Self::with_map(file, path, true, len, headroom(len))?;
            f._held = Some(Held::new(id));
            let backed = if f.tmpfs { len } else { 2 * BLOCK_SIZE as u64 };
            f.reserve(0, backed)?;
            Ok(f)
        })();
        if made.is_err() {
            let _ = std::fs::remove_file(path);
        }
        made
    }

    /// Maps a writable file of `len` bytes with [`headroom`], or with less
    /// address space where that much cannot be had (a `ulimit -v`): the
    /// map and the bytes mapped.
    fn map_with_room(file: &File, path: &Path, len: u64) -> Result<(Map, u64)> {
        let mut last = None;
        for mapped in [headroom(len), len.saturating_mul(2), len] {
            match Self::map(file, path, true, mapped) {
                Ok(m) => return Ok((m, mapped)),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| Error::corrupt("no mapping attempted")))
    }

    /// A handle on `file` (`len` bytes), mapping `mapped` bytes of address
    /// space (a writable one: at least `len`, with room to grow).
    fn with_map(file: File, path: &Path, writable: bool, len: u64, mapped: u64) -> Result<Self> {
        let (map, mapped) = if writable {
            Self::map_with_room(&file, path, len)?
        } else {
            (Self::map(&file, path, false, mapped)?, mapped)
        };
        let tmpfs = on_tmpfs(&file);
        Ok(MappedFile {
            file,
            map,
            path: path.to_path_buf(),
            len,
            mapped,
            tmpfs,
            holes: None,
            writeback: Writeback::default(),
            ahead: None,
            _held: None,
        })
    }

    /// Maps the first `mapped` bytes (the file may be shorter: pages past
    /// its end are never touched, see [`MappedFile::bytes`]).
    fn map(file: &File, path: &Path, writable: bool, mapped: u64) -> Result<Map> {
        let len = usize::try_from(mapped).map_err(|_| {
            Error::io(
                format!("mapping {}", path.display()),
                std::io::Error::other("file larger than the address space"),
            )
        })?;
        // SAFETY: the file is locked (exclusively for writers, shared for
        // readers), so no cooperating process changes it under the map; the
        // map never outlives `file`; bytes past the file's end are never
        // accessed (every accessor slices to `len`).
        let r = unsafe {
            if writable {
                MmapOptions::new().len(len).map_mut(file).map(Map::Rw)
            } else {
                MmapOptions::new().len(len).map(file).map(Map::Ro)
            }
        };
        let m = r.map_err(|e| Error::io(format!("mapping {}", path.display()), e))?;
        // Buckets are reached by hash: random access. Without readahead the
        // page cache keeps small folios, so writing one block dirties (and
        // makes the filesystem allocate) that block, not its zero neighbours.
        let advice = memmap2::Advice::Random;
        let _ = match &m {
            Map::Ro(x) => x.advise(advice),
            Map::Rw(x) => x.advise(advice),
        };
        Ok(m)
    }

    /// Current length in bytes.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// True if mapped writable.
    pub fn writable(&self) -> bool {
        matches!(self.map, Map::Rw(_))
    }

    /// The file's bytes (the map past the end of the file is never exposed).
    pub fn bytes(&self) -> &[u8] {
        let n = self.len as usize;
        match &self.map {
            Map::Ro(m) => &m[..n],
            Map::Rw(m) => &m[..n],
        }
    }

    /// The file's bytes, writable.
    pub fn bytes_mut(&mut self) -> Result<&mut [u8]> {
        let n = self.len as usize;
        match &mut self.map {
            Map::Ro(_) => Err(Error::ReadOnly),
            Map::Rw(m) => Ok(&mut m[..n]),
        }
    }

    /// Block `n`, or a corruption error naming it if it lies past the end.
    #[inline]
    pub fn block(&self, n: u64) -> Result<&[u8]> {
        let start = n
            .checked_mul(BLOCK_SIZE as u64)
            .filter(|s| s + BLOCK_SIZE as u64 <= self.len)
            .ok_or_else(|| Error::corrupt(format!("block {n} lies past the end of the file")))?;
        if self.in_hole(n) {
            return Ok(&ZERO_BLOCK);
        }
        let s = start as usize;
        Ok(&self.bytes()[s..s + BLOCK_SIZE])
    }

    /// True when block `n` is known to lie in a hole (see `holes`).
    #[inline]
    fn in_hole(&self, n: u64) -> bool {
        self.holes.as_ref().is_some_and(|h| h.contains(n))
    }

    /// Block `n`, writable.
    pub fn block_mut(&mut self, n: u64) -> Result<&mut [u8]> {
        let start = n
            .checked_mul(BLOCK_SIZE as u64)
            .filter(|s| s + BLOCK_SIZE as u64 <= self.len)
            .ok_or_else(|| Error::corrupt(format!("block {n} lies past the end of the file")))?;
        if self.in_hole(n) {
            self.reserve(start, BLOCK_SIZE as u64)?;
        }
        let s = start as usize;
        Ok(&mut self.bytes_mut()?[s..s + BLOCK_SIZE])
    }

    /// Writes `img` over block `n` with `pwrite`, not through the map: the
    /// page cache is shared, so the map sees it, and a clean page costs no
    /// write-protect fault.
    pub fn write_block(&mut self, n: u64, img: &[u8]) -> Result<()> {
        if img.len() != BLOCK_SIZE {
            return Err(Error::corrupt(format!(
                "block {n}: an image of {} bytes",
                img.len()
            )));
        }
        self.write_block_part(n, 0, img)
    }

    /// Writes `data` at byte `at` of block `n` with a positioned write.
    pub fn write_block_part(&mut self, n: u64, at: usize, data: &[u8]) -> Result<()> {
        use std::os::unix::fs::FileExt;
        let start = n
            .checked_mul(BLOCK_SIZE as u64)
            .filter(|s| s + BLOCK_SIZE as u64 <= self.len && at + data.len() <= BLOCK_SIZE)
            .ok_or_else(|| Error::corrupt(format!("block {n} lies past the end of the file")))?;
        if self.in_hole(n) {
            self.reserve(start, BLOCK_SIZE as u64)?;
        }
        if !self.writable() {
            return Err(Error::ReadOnly);
        }
        self.file
            .write_all_at(data, start + at as u64)
            .map_err(|e| Error::io(format!("writing {}", self.path.display()), e))
    }

    /// Records that `[off, off+len)` holds data now (backed, or written):
    /// its blocks no longer read as holes.
    fn filled(&mut self, off: u64, len: u64) {
        if let Some(h) = self.holes.as_mut() {
            let bs = BLOCK_SIZE as u64;
            for b in off / bs..(off + len).div_ceil(bs) {
                h.remove(b);
            }
        }
    }

    /// Writes whole blocks at `off` with `pwrite` (a bulk write-back): a
    /// block that lay in a hole (`holes`) holds data now and must read as
    /// written, not as zeros.
    pub fn write_blocks_at(&mut self, off: u64, data: &[u8]) -> Result<()> {
        self.write_at(off, data)?;
        self.filled(off, data.len() as u64);
        Ok(())
    }

    /// Makes sure disk space backs `[off, off+len)`, so a later write through
    /// the map cannot fault on a full disk; reports ENOSPC as an error.
    pub fn reserve(&mut self, off: u64, len: u64) -> Result<()> {
        use std::os::fd::AsRawFd;
        // SAFETY: plain syscall on an fd we own; arguments are in range.
        let rc = unsafe {
            libc::posix_fallocate(
                self.file.as_raw_fd(),
                off as libc::off_t,
                len as libc::off_t,
            )
        };
        match rc {
            0 => {
                self.filled(off, len);
                Ok(())
            }
            // Filesystems without fallocate: fall back to trusting the map.
            libc::EOPNOTSUPP | libc::EINVAL => Ok(()),
            e => Err(Error::io(
                format!("reserving disk space in {}", self.path.display()),
                std::io::Error::from_raw_os_error(e),
            )),
        }
    }

    /// Changes the file length; remaps only when it outgrows the mapping.
    pub fn set_len(&mut self, len: u64) -> Result<()> {
        if len == self.len {
            return Ok(());
        }
        let writable = self.writable();
        if !writable {
            return Err(Error::ReadOnly);
        }
        // Dirty pages of a shared mapping stay in the page cache when it is
        // unmapped, so remapping needs no flush.
        self.file
            .set_len(len)
            .map_err(|e| Error::io(format!("resizing {}", self.path.display()), e))?;
        if len > self.mapped {
            (self.map, self.mapped) = Self::map_with_room(&self.file, &self.path, len)?;
        }
        let old = self.len;
        self.len = len;
        if let Some(h) = self.holes.as_mut() {
            // New blocks are holes until backed (the reservation below clears them).
            let bs = BLOCK_SIZE as u64;
            h.truncate(len / bs);
            for b in old.div_ceil(bs)..len / bs {
                h.insert(b);
            }
        }
        if self.tmpfs && len > old {
            if let Err(e) = self.reserve(old, len - old) {
                // Put the file back: blocks neither backed nor known as
                // holes would SIGBUS when first touched on a full tmpfs.
                let _ = self.file.set_len(old);
                self.len = old;
                if let Some(h) = self.holes.as_mut() {
                    h.truncate(old.div_ceil(BLOCK_SIZE as u64));
                }
                return Err(e);
            }
        }
        Ok(())
    }

    /// Writes zeros over `[off, off+len)`, which must hold nothing yet: like
    /// [`MappedFile::reserve`] it backs the range with disk space (ENOSPC is
    /// an error here), and it also puts the zeroed pages in the page cache,
    /// so the map's first touch of them is a minor fault instead of a read
    /// that zero-fills a page from an unwritten extent.
    pub fn zero_fill(&mut self, off: u64, len: u64) -> Result<()> {
        use std::os::unix::fs::FileExt;
        static ZEROS: [u8; 64 * 1024] = [0; 64 * 1024];
        if self.tmpfs {
            // The whole file is backed, unless the disk was full at open.
            return match self.holes {
                Some(_) => self.reserve(off, len),
                None => Ok(()),
            };
        }
        let mut at = off;
        while at < off + len {
            let n = (off + len - at).min(ZEROS.len() as u64) as usize;
            self.file.write_all_at(&ZEROS[..n], at).map_err(|e| {
                Error::io(
                    format!("reserving disk space in {}", self.path.display()),
                    e,
                )
            })?;
            at += n as u64;
        }
        Ok(())
    }

    /// Writes bytes at an offset with a positioned write (not through the map).
    pub fn write_at(&self, off: u64, data: &[u8]) -> Result<()> {
        use std::os::unix::fs::FileExt;
        self.file
            .write_all_at(data, off)
            .map_err(|e| Error::io(format!("writing {}", self.path.display()), e))
    }

    /// Maps `[off, off+len)`, written by `pwrite` and in the page cache,
    /// into the address space now (one call instead of a fault per page
    /// on first read); a hint, so errors are ignored.
    pub fn populate(&self, off: u64, len: u64) {
        // MADV_POPULATE_READ (Linux 5.14; older kernels refuse it) only
        // faults pages in.
        #[cfg(target_os = "linux")]
        self.advise(off, len, libc::MADV_POPULATE_READ);
        #[cfg(not(target_os = "linux"))]
        let _ = (off, len);
    }

    /// Asks the kernel to read `[off, off+len)` into the page cache now, in
    /// large reads (a hint; errors are ignored).
    pub fn will_need(&self, off: u64, len: u64) {
        #[cfg(target_os = "linux")]
        self.advise(off, len, libc::MADV_WILLNEED);
        #[cfg(not(target_os = "linux"))]
        let _ = (off, len);
    }

    /// `madvise(advice)` over `[off, off+len)` of the map, if it lies
    /// inside; for advice that changes no byte (errors are ignored).
    #[cfg(target_os = "linux")]
    fn advise(&self, off: u64, len: u64, advice: libc::c_int) {
        let b = self.bytes();
        if off.saturating_add(len) > b.len() as u64 {
            return;
        }
        // madvise wants a page-aligned start (pages may be larger than a
        // block: 16 or 64 KB on some arm64 and ppc64 kernels).
        let page = page_size();
        let (off, len) = (off - off % page, len + off % page);
        // SAFETY: the range lies inside the live mapping, and the callers'
        // advice (POPULATE_READ, WILLNEED) only reads pages in.
        unsafe {
            libc::madvise(
                b.as_ptr().add(off as usize) as *mut libc::c_void,
                len as usize,
                advice,
            );
        }
    }

    /// True if the page holding byte `off` of the file is in the page
    /// cache (`mincore`); false when the system cannot say.
    pub fn resident(&self, off: u64) -> bool {
        let b = self.bytes();
        if off >= b.len() as u64 {
            return false;
        }
        #[cfg(target_os = "linux")]
        {
            let at = off - off % page_size();
            let mut v = 0u8;
            // SAFETY: one page inside the live mapping (page-aligned: the
            // map starts on a page); mincore writes one byte into `v`.
            let r = unsafe {
                libc::mincore(b.as_ptr().add(at as usize) as *mut libc::c_void, 1, &mut v)
            };
            r == 0 && v & 1 == 1
        }
        #[cfg(not(target_os = "linux"))]
        false
    }

    /// Starts writing `[off, off+len)` back to the disk in the background,
    /// so the next sync finds it written or on its way (a hint).
    pub fn start_writeback(&mut self, off: u64, len: u64) {
        self.writeback.start(&self.file, off, len);
    }

    /// Asks a helper thread to back block `b` (of generation `gen`) with
    /// disk space now, ahead of its first write (not on tmpfs, whose
    /// backing `reserve` tracks itself).
    pub fn back_ahead(&mut self, gen: u64, b: u64) {
        if self.tmpfs || b >= self.len / BLOCK_SIZE as u64 {
            return;
        }
        if self.ahead.is_none() {
            self.ahead = Ahead::start(&self.file);
        }
        if let Some(a) = &mut self.ahead {
            a.ask(gen, b);
        }
    }

    /// Sends the helper the blocks asked for and not sent yet.
    pub fn send_ahead(&mut self) {
        if let Some(a) = &mut self.ahead {
            a.send();
        }
    }

    /// The blocks backed ahead since the last call, with their generations.
    pub fn backed_ahead(&self) -> Vec<(u64, u64)> {
        self.ahead.as_ref().map_or_else(Vec::new, Ahead::take_done)
    }

    /// Reads bytes at an offset with a positioned read (not through the map).
    pub fn read_at(&self, off: u64, buf: &mut [u8]) -> Result<()> {
        use std::os::unix::fs::FileExt;
        self.file
            .read_exact_at(buf, off)
            .map_err(|e| Error::io(format!("reading {}", self.path.display()), e))
    }

    /// Flushes the map and the file to stable storage.
    pub fn flush(&self) -> Result<()> {
        // On Linux a shared mapping's dirty pages are the file's page cache,
        // which one fdatasync writes back and flushes: an msync first would
        // walk the whole mapping and flush the device a second time.
        #[cfg(not(target_os = "linux"))]
        if let Map::Rw(m) = &self.map {
            m.flush_range(0, self.len as usize)
                .map_err(|e| Error::io(format!("flushing {}", self.path.display()), e))?;
        }
        self.file
            .sync_data()
            .map_err(|e| Error::io(format!("syncing {}", self.path.display()), e))
    }

    /// Flushes one byte range of the map.
    pub fn flush_range(&self, off: usize, len: usize) -> Result<()> {
        if let Map::Rw(m) = &self.map {
            m.flush_range(off, len)
                .map_err(|e| Error::io(format!("flushing {}", self.path.display()), e))?;
        }
        Ok(())
    }

    /// Bytes free for unprivileged use on the file's filesystem.
    pub fn free_bytes(&self) -> Option<u64> {
        use std::os::fd::AsRawFd;
        // SAFETY: fstatvfs fills a zeroed struct for an fd we own.
        unsafe {
            let mut st: libc::statvfs = std::mem::zeroed();
            (libc::fstatvfs(self.file.as_raw_fd(), &mut st) == 0)
                .then(|| st.f_bavail as u64 * st.f_frsize as u64)
        }
    }

    /// Bytes the filesystem has allocated to the file.
    pub fn allocated_bytes(&self) -> u64 {
        use std::os::unix::fs::MetadataExt;
        self.file.metadata().map(|m| m.blocks() * 512).unwrap_or(0)
    }

    /// The first block at or after `b` that may hold data, and the block
    /// after the data run it starts (`SEEK_DATA`, `SEEK_HOLE`): the blocks
    /// between `b` and it lie in a hole and read as zeros. `None` past the
    /// last data. Where the filesystem cannot say, every block may hold data.
    pub fn next_data_run(&self, b: u64) -> Option<(u64, u64)> {
        use std::os::fd::AsRawFd;
        let bs = BLOCK_SIZE as u64;
        let (off, blocks) = (b.checked_mul(bs)?, self.len / bs);
        if b >= blocks {
            return None;
        }
        let fd = self.file.as_raw_fd();
        // SAFETY: lseek on an fd we own, at an offset inside the file.
        let data = unsafe { libc::lseek(fd, off as libc::off_t, libc::SEEK_DATA) };
        if data < 0 {
            return match std::io::Error::last_os_error().raw_os_error() {
                Some(libc::ENXIO) => None,
                _ => Some((b, blocks)),
            };
        }
        // SAFETY: as above.
        let hole = unsafe { libc::lseek(fd, data, libc::SEEK_HOLE) };
        let end = if hole <= data { self.len } else { hole as u64 };
        // A block partly in data counts as data.
        Some(((data as u64 / bs).max(b), end.div_ceil(bs).min(blocks)))
    }
}

/// Reads blocks in ascending order with large positioned reads: a whole-file
/// scan (table rebuild) runs at disk speed instead of one page fault per block.
pub struct SeqReader<'a> {
    file: &'a MappedFile,
    buf: Vec<u8>,
    start: u64,
    n: u64,
    /// Blocks recovered in memory (a read-only open), served first.
    overlay: Option<&'a HashMap<u64, Arc<[u8]>>>,
    /// Blocks from `zeros_from` (the file's end, or the store's when the
    /// file runs past it) up to `blocks` read as zeros.
    zeros_from: u64,
    blocks: u64,
    /// Blocks known to lie in a hole of the sparse file: served as zeros
    /// without a read (a pre-sized store is mostly holes).
    hole: std::ops::Range<u64>,
}

/// A never-written block.
pub static ZERO_BLOCK: [u8; BLOCK_SIZE] = [0; BLOCK_SIZE];

impl<'a> SeqReader<'a> {
    /// Blocks read per positioned read.
    const CHUNK: u64 = 2048;

    /// A reader over `file`.
    pub fn new(file: &'a MappedFile) -> Self {
        SeqReader {
            file,
            buf: Vec::new(),
            start: 0,
            n: 0,
            overlay: None,
            zeros_from: u64::MAX,
            blocks: 0,
            hole: 0..0,
        }
    }

    /// A reader that serves `overlay`'s blocks first and zeros from
    /// `zeros_from` up to `blocks`.
    pub fn with_overlay(
        file: &'a MappedFile,
        overlay: &'a HashMap<u64, Arc<[u8]>>,
        zeros_from: u64,
        blocks: u64,
    ) -> Self {
        SeqReader {
            overlay: Some(overlay),
            zeros_from,
            blocks,
            ..SeqReader::new(file)
        }
    }

    /// Block `b`; reads ahead when `b` is outside the buffered run.
    pub fn block(&mut self, b: u64) -> Result<&[u8]> {
        if let Some(img) = self.overlay.and_then(|o| o.get(&b)) {
            return Ok(img);
        }
        if b >= self.zeros_from && b < self.blocks {
            return Ok(&ZERO_BLOCK);
        }
        if self.hole.contains(&b) {
            return Ok(&ZERO_BLOCK);
        }
        if b < self.start || b >= self.start + self.n {
            let total = self.file.len() / BLOCK_SIZE as u64;
            if b >= total {
                return Err(Error::corrupt(format!(
                    "block {b} lies past the end of the file"
                )));
            }
            let (data, data_end) = self.file.next_data_run(b).unwrap_or((total, total));
            if data > b {
                self.hole = b..data;
                return Ok(&ZERO_BLOCK);
            }
            let n = Self::CHUNK.min(data_end.max(b + 1) - b).min(total - b);
            self.buf.resize((n as usize) * BLOCK_SIZE, 0);
            self.file.read_at(b * BLOCK_SIZE as u64, &mut self.buf)?;
            self.start = b;
            self.n = n;
        }
        let o = ((b - self.start) as usize) * BLOCK_SIZE;
        Ok(&self.buf[o..o + BLOCK_SIZE])
    }
}
