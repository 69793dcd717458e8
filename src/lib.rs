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
#![deny(clippy::unwrap_used)]
#![warn(missing_docs)]

pub mod block;
mod chains;
pub mod check;
pub mod counts;
pub mod error;
mod file;
pub mod find;
pub mod format;
mod journal;
pub mod maintain;
pub mod stats;
mod store;
pub mod tables;
pub mod tag;
pub mod tsv;

pub use check::CheckReport;
pub use counts::{CloudEntry, Increment, IncrementId, MergeOutcome};
pub use error::{Error, Result};
pub use find::{Find, Tags};
pub use format::Geometry;
pub use journal::journal_path;
pub use maintain::{MaintainOptions, MaintainReport};
pub use stats::Stats;
pub use store::{BatchOutcome, CreateOptions, Durability, Store, SyncPoint};
pub use tag::{Half, Tag, MAX_TAG_BYTES, SLOT_SIZE};
