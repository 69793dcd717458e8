//! Files kept beside a store (`STORE.journal`, `STORE.counts`, temporaries)
//! and the append-only log both logs are built on.

use crate::error::{Error, Result};
use std::fs::{File, OpenOptions};
use std::io::Read;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// Path of the side file `STORE.<ext>` beside a store.
pub fn side_path(store: &Path, ext: &str) -> PathBuf {
    let mut s = store.as_os_str().to_owned();
    s.push(".");
    s.push(ext);
    PathBuf::from(s)
}

/// Fsyncs the directory holding `path`, so a create, rename or remove in it is durable.
pub fn sync_dir(path: &Path) -> Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| Error::io(format!("syncing directory {}", dir.display()), e))
}

/// Removes `path` if it exists; `what` names it in the error.
pub fn remove_if_present(path: &Path, what: &str) -> Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(Error::io(format!("removing {what} {}", path.display()), e))
        }
        _ => Ok(()),
    }
}

/// An append-only file: each append is written at the end and fsynced; a
/// failed append is cut back, so the file only ever grows by whole records.
pub struct AppendLog {
    file: File,
    path: PathBuf,
    len: u64,
}

impl AppendLog {
    /// Opens `path` (creating it when `create`), positioned at its end.
    pub fn open(path: PathBuf, writable: bool, create: bool) -> Result<Option<AppendLog>> {
        let file = match OpenOptions::new()
            .read(true)
            .write(writable)
            .create(create)
            .truncate(false)
            .open(&path)
        {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && !create => return Ok(None),
            Err(e) => return Err(Error::io(format!("opening {}", path.display()), e)),
        };
        let len = file
            .metadata()
            .map_err(|e| Error::io(format!("reading {}", path.display()), e))?
            .len();
        Ok(Some(AppendLog { file, path, len }))
    }

    /// Creates (or empties) `path` for writing.
    pub fn create(path: PathBuf) -> Result<AppendLog> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .map_err(|e| Error::io(format!("creating {}", path.display()), e))?;
        Ok(AppendLog { file, path, len: 0 })
    }

    /// Bytes in the log.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Reads the whole log.
    pub fn read_all(&self) -> Result<Vec<u8>> {
        let mut data = Vec::new();
        (&self.file)
            .read_to_end(&mut data)
            .map_err(|e| Error::io(format!("reading {}", self.path.display()), e))?;
        Ok(data)
    }

    /// Appends `buf` and makes it durable; on failure the log is cut back.
    pub fn append(&mut self, buf: &[u8]) -> Result<()> {
        let r = self
            .file
            .write_all_at(buf, self.len)
            .and_then(|()| self.file.sync_data());
        if let Err(e) = r {
            let _ = self.file.set_len(self.len);
            return Err(Error::io(format!("writing {}", self.path.display()), e));
        }
        self.len += buf.len() as u64;
        Ok(())
    }

    /// Reads the log from byte `from` to its end.
    pub fn read_from(&self, from: u64) -> Result<Vec<u8>> {
        let n = usize::try_from(self.len.saturating_sub(from))
            .map_err(|_| Error::corrupt(format!("{} is too large", self.path.display())))?;
        let mut data = vec![0u8; n];
        self.file
            .read_exact_at(&mut data, from)
            .map_err(|e| Error::io(format!("reading {}", self.path.display()), e))?;
        Ok(data)
    }

    /// A second handle on the log's file (the same inode, even once renamed over).
    pub fn handle(&self) -> Result<File> {
        self.file
            .try_clone()
            .map_err(|e| Error::io(format!("opening {}", self.path.display()), e))
    }

    /// Cuts the log to `len` bytes, durably.
    pub fn truncate(&mut self, len: u64) -> Result<()> {
        self.file
            .set_len(len)
            .and_then(|()| self.file.sync_all())
            .map_err(|e| Error::io(format!("truncating {}", self.path.display()), e))?;
        self.len = len;
        Ok(())
    }

    /// Renames the log to `to` and fsyncs the directory.
    pub fn rename(&mut self, to: PathBuf) -> Result<()> {
        std::fs::rename(&self.path, &to).map_err(|e| {
            Error::io(
                format!("renaming {} to {}", self.path.display(), to.display()),
                e,
            )
        })?;
        self.path = to;
        // Best effort, as before: the rename is durable at the next fsync of the directory.
        let _ = sync_dir(&self.path);
        Ok(())
    }
}

/// The store file `path` names: a symlink is followed to its target, so the
/// store and its side files are used (and replaced by `maintain`) where the
/// data lives, never beside the link.
pub fn resolve(path: &Path) -> Result<PathBuf> {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_symlink() => std::fs::canonicalize(path).map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                Error::NotFound(path.to_path_buf())
            } else {
                Error::io(format!("resolving symlink {}", path.display()), e)
            }
        }),
        _ => Ok(path.to_path_buf()),
    }
}

/// Where a new store named `path` goes: a symlink is followed (through a
/// chain of them) to the path it names, even when nothing is there yet, so
/// a store created through a dangling link lies where the link points and
/// later opens through the link find it.
pub fn resolve_new(path: &Path) -> Result<PathBuf> {
    let mut p = path.to_path_buf();
    for _ in 0..40 {
        match std::fs::symlink_metadata(&p) {
            Ok(m) if m.file_type().is_symlink() => {
                let to = std::fs::read_link(&p)
                    .map_err(|e| Error::io(format!("reading symlink {}", p.display()), e))?;
                p = match p.parent() {
                    Some(dir) if to.is_relative() => dir.join(to),
                    _ => to,
                };
            }
            _ => return Ok(p),
        }
    }
    Err(Error::io(
        format!("resolving symlink {}", path.display()),
        std::io::Error::from_raw_os_error(libc::ELOOP),
    ))
}

/// Temporaries an interrupted run can leave beside a store: a counts
/// rewrite or fold, a maintenance rewrite and that rewrite's own side files.
pub fn temporaries(store: &Path) -> Vec<PathBuf> {
    let mut t = vec![
        side_path(store, "counts.tmp"),
        side_path(store, "counts.fold"),
    ];
    t.extend(rewrite_files(&side_path(store, "maintain.tmp")));
    t
}

/// The files of a maintenance rewrite at `tmp`: its side files, then itself.
pub fn rewrite_files(tmp: &Path) -> [PathBuf; 5] {
    [
        side_path(tmp, "counts"),
        side_path(tmp, "counts.tmp"),
        side_path(tmp, "journal"),
        side_path(tmp, "strings"),
        tmp.to_path_buf(),
    ]
}
