//! tagstore: an embedded, file-backed store for `<object, relationship, subject>` tags.
//!
//! Every tag is stored twice (double tagging): once in the object half, in the
//! primary bucket chosen by hashing (relationship, object), and once in the
//! subject half, by (relationship, subject). A bucket that fills links
//! secondary overflow buckets. Both FIND forms walk one primary bucket and
//! only those linked buckets whose key filter admits the key.
//!
//! ```
//! use tagstore::{CreateOptions, Store, Tag};
//! let dir = tempfile::tempdir()?;
//! let path = dir.path().join("photos.tags");
//! let store = Store::create(&path, &CreateOptions::default())?;
//! assert!(store.insert(&Tag::new("photo1", "isa", "sunset"))?);
//! assert!(!store.insert(&Tag::new("photo1", "isa", "sunset"))?); // already there
//! store.insert(&Tag::new("photo2", "isa", "sunset"))?;
//! let mut objects: Vec<String> = store.find_objects("sunset", "isa").collect::<Result<_, _>>()?;
//! objects.sort();
//! assert_eq!(objects, ["photo1", "photo2"]);
//! // The visitor form borrows each result instead of allocating it.
//! let mut total_len = 0;
//! let n = store.for_each_object("sunset", "isa", |o| total_len += o.len())?;
//! assert_eq!((n, total_len), (2, 12));
//! store.close()?;
//! let store = Store::open(&path)?;
//! assert_eq!(store.len(), 2);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Layers, each a folder, data flowing down (DESIGN.md §1): `engine` (the
//! [`Store`]) over `index` (bucket tables, chain walk) over `pager` (blocks,
//! durability) over `format` (bytes); `counts` beside the engine, `admin`
//! above it.
#![deny(clippy::unwrap_used)]
#![warn(missing_docs)]

mod admin;
mod counts;
mod engine;
mod error;
mod format;
mod index;
mod pager;
mod side;
mod strings;

pub mod tsv;

pub use admin::{maintain_temp_path, CheckReport, Growth, MaintainOptions, MaintainReport, Stats};
pub use counts::{counts_path, CloudEntry, Increment, IncrementId, MergeOutcome, AUTO_MERGE_KEYS};
pub use engine::{BatchOutcome, CreateOptions, Find, HotUsage, KeyPage, OpenOptions, Store, Tags};
pub use error::{Error, Result};
pub use format::long::MAX_STRING_BYTES;
pub use format::tag::{MAX_TAG_BYTES, SLOT_SIZE};
pub use format::{Geometry, Half, Tag};
pub use pager::{journal_path, Durability};
pub use strings::strings_path;

/// Whitebox hooks for tests and benchmarks: crash injection, durability
/// callbacks and the format's hashes and block layout. Enabled by the
/// `test-hooks` feature; not part of the stable API.
#[cfg(feature = "test-hooks")]
pub mod testing {
    pub use crate::admin::{planned_geometry, set_maintain_keep_max};
    pub use crate::counts::{hold_counts_folds, hold_counts_merges};
    pub use crate::format::hash::{bucket_of, key_fp, key_hash, place, tag_fp, Place};
    pub use crate::format::long::ref_of;
    pub use crate::format::tag::{decode, encode};
    pub use crate::format::{BlockMut, BlockRef, BLOCK_SIZE, KIND_PRIMARY, SLOTS_PER_BLOCK};
    pub use crate::pager::{set_memory_redo_max, SyncHook, SyncPoint};
}
