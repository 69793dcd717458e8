//! Errors returned by the store.

use std::fmt;
use std::io;
use std::path::PathBuf;

/// Result type used throughout tagstore.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong when using a store.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// An operating-system I/O call failed.
    Io {
        /// What the store was doing.
        context: String,
        /// The underlying error.
        source: io::Error,
    },
    /// The path does not exist.
    NotFound(PathBuf),
    /// The path already exists and `create` refuses to overwrite it.
    AlreadyExists(PathBuf),
    /// The file is not a tagstore file (wrong magic).
    NotAStore(PathBuf),
    /// The path names a directory, FIFO, device or socket, not a regular file.
    NotARegularFile(PathBuf),
    /// The file was written by a newer, unknown format version.
    UnsupportedVersion {
        /// Format version found in the file.
        found: u32,
        /// Highest version this build reads.
        supported: u32,
    },
    /// Another process (or another handle) holds the store.
    Locked(PathBuf),
    /// The file is damaged; the message names the place.
    Corrupt(String),
    /// A tag's string is longer than a store takes ([`crate::MAX_STRING_BYTES`]).
    TagTooLarge {
        /// Bytes of the longest string.
        needed: usize,
        /// Most bytes a string may hold.
        limit: usize,
    },
    /// A geometry or option value is out of range.
    InvalidArgument(String),
    /// A write was attempted on a store opened read-only.
    ReadOnly,
    /// An earlier write failed halfway; this handle refuses writes until the store is reopened.
    Poisoned,
    /// A read-only open found a bucket split interrupted by a crash that it cannot finish in memory (more than 1 GiB of blocks to copy).
    SplitPending(PathBuf),
    /// A read-only open found a bulk insert or delete interrupted by a crash that it cannot finish in memory (more than 1 GiB of blocks to copy).
    BulkPending(PathBuf),
    /// The store's journal was written by a newer build (its commits would
    /// be lost if this build went on without them).
    UnsupportedJournal {
        /// The journal file.
        path: PathBuf,
        /// Journal version found in it.
        found: u32,
        /// Highest journal version this build replays.
        supported: u32,
    },
}

impl Error {
    pub(crate) fn io(context: impl Into<String>, source: io::Error) -> Self {
        Error::Io {
            context: context.into(),
            source,
        }
    }

    pub(crate) fn corrupt(msg: impl Into<String>) -> Self {
        Error::Corrupt(msg.into())
    }

    /// True when the error refuses the tag (or argument) given, not a fault of the store.
    pub fn refuses_the_input(&self) -> bool {
        matches!(self, Error::TagTooLarge { .. } | Error::InvalidArgument(_))
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Io { context, source } => write!(f, "{context}: {source}"),
            Error::NotFound(p) => write!(f, "{}: no such store file", p.display()),
            Error::AlreadyExists(p) => write!(f, "{}: file already exists", p.display()),
            Error::NotAStore(p) => write!(
                f,
                "{}: not a tagstore file (bad magic or too short)",
                p.display()
            ),
            Error::NotARegularFile(p) => write!(f, "not a regular file: {}", p.display()),
            Error::UnsupportedVersion { found, supported } => write!(
                f,
                "store format version {found} is newer than this build supports (up to {supported})"
            ),
            Error::Locked(p) => write!(
                f,
                "{}: store is locked by another process (or another open handle)",
                p.display()
            ),
            Error::Corrupt(m) => write!(f, "store is corrupt: {m}"),
            Error::TagTooLarge { needed, limit } => write!(
                f,
                "a string of the tag has {needed} bytes; a tag's strings may hold at most {limit} bytes each"
            ),
            Error::InvalidArgument(m) => write!(f, "invalid argument: {m}"),
            Error::ReadOnly => write!(f, "store is opened read-only"),
            Error::SplitPending(p) => write!(
                f,
                "{}: a bucket split was interrupted by a crash; open the store for writing once (any `tagstore insert`, `delete` or `maintain`) to finish it",
                p.display()
            ),
            Error::BulkPending(p) => write!(
                f,
                "{}: a bulk insert or delete was interrupted by a crash; open the store for writing once (any `tagstore insert`, `delete` or `maintain`) to finish it",
                p.display()
            ),
            Error::UnsupportedJournal {
                path,
                found,
                supported,
            } => write!(
                f,
                "{}: journal version {found} is newer than this build replays (up to {supported}); open the store with the build that wrote it (its commits are not lost: nothing was changed)",
                path.display()
            ),
            Error::Poisoned => write!(
                f,
                "store is unusable after a failed write: reopen the store to recover"
            ),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}
