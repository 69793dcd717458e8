//! Offline maintenance: rewrite every chain densely, drop unneeded secondary
//! buckets and optionally re-hash into a new geometry.
//!
//! The store is rewritten into `STORE.maintain.tmp` beside it and renamed over
//! the original, so a crash at any moment leaves either the old store or the
//! new one, never a mixture. It needs free disk for one more copy of the live
//! tags; without it the rewrite fails with the filesystem's error and the old
//! store is left untouched.

use super::sizing::{self, Planner};
use super::stats::Stats;
use crate::counts::counts_path;
use crate::engine::{CreateOptions, OpenOptions, Store, BULK_ROUND_MAX};
use crate::error::{Error, Result};
use crate::format::{Geometry, Half, Tag};
use crate::side::{remove_if_present, resolve, side_path, sync_dir};
use crate::strings::strings_path;
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use std::time::Instant;

/// What [`Store::maintain`] should change besides compacting.
#[derive(Clone, Debug, Default)]
pub struct MaintainOptions {
    /// New geometry to re-hash into; `None` chooses the bucket count and
    /// sizes that make the smallest file for the live tags (or keeps the
    /// bucket count with `keep_geometry`).
    pub geometry: Option<Geometry>,
    /// With no `geometry`: keep primary buckets of this many blocks.
    pub blocks_per_primary: Option<u32>,
    /// With no `geometry`: use secondary buckets of this many blocks.
    pub blocks_per_secondary: Option<u32>,
    /// With no `geometry`: keep the current bucket count instead of
    /// re-sizing for the live tags.
    pub keep_geometry: bool,
    /// Wait up to this long for a lock another process holds (`None`: fail at once).
    pub wait: Option<Duration>,
}

/// Before/after summary of a maintenance run.
#[derive(Clone, Debug, Serialize)]
pub struct MaintainReport {
    /// Statistics before.
    pub before: Stats,
    /// Statistics after.
    pub after: Stats,
    /// Wall-clock seconds taken.
    pub seconds: f64,
}

/// Most tags the planner's pass keeps for the copy: [`BULK_ROUND_MAX`],
/// the most a copy's bulk round holds at once anyway (tests lower it, to
/// run the copy that reads the tags again).
static KEEP_MAX: AtomicUsize = AtomicUsize::new(BULK_ROUND_MAX);

/// Sets the most tags a maintenance run's planner keeps for its copy
/// (0: the copy always reads the tags again), for every run in the process.
#[cfg(feature = "test-hooks")]
pub fn set_maintain_keep_max(tags: usize) {
    KEEP_MAX.store(tags, Ordering::Relaxed);
}

/// Path of the temporary file a maintenance run writes.
pub fn maintain_temp_path(path: &Path) -> PathBuf {
    side_path(path, "maintain.tmp")
}

impl Store {
    /// Compacts (and optionally re-hashes) the store at `path`, which must not
    /// be open anywhere else; `progress(done, total)` is called as tags are copied.
    ///
    /// Returns once the rewrite is in place; the replaced file is closed,
    /// and its space given back, on a thread of its own.
    pub fn maintain(
        path: impl AsRef<Path>,
        options: &MaintainOptions,
        mut progress: impl FnMut(u64, u64),
    ) -> Result<MaintainReport> {
        // Out of range, refused up front as `create` refuses them (the
        // planner read 0 blocks per primary bucket as 1).
        crate::format::geometry::check_bucket_blocks(
            options.blocks_per_primary,
            options.blocks_per_secondary,
        )?;
        // Through a symlink, rewrite the target, never replace the link.
        let path = &resolve(path.as_ref())?;
        let started = Instant::now();
        // Sizes as the file stood before this run (opening drops the table image).
        let meta_before = std::fs::metadata(path).ok();
        let old = Store::open_with_options(
            path,
            &OpenOptions {
                read_only: false,
                wait: options.wait,
            },
        )?;
        let cur = old.geometry();
        let half_only = old.is_half_only();
        // The statistics and the planner's pass each read every tag: on two
        // threads (2.5 M tags: 0.9 s and 1.1 s one after the other), or
        // one after the other when no thread can be started. The planner's
        // pass keeps the tags it read when the copy would hold them all at
        // once anyway (one bulk round): the copy then reads none again.
        let (before, geometry) = std::thread::scope(|s| {
            let stats = std::thread::Builder::new()
                .name("tagstore-stats".into())
                .spawn_scoped(s, || old.stats());
            let geometry = match options.geometry {
                Some(g) => Ok((g, None)),
                None if options.keep_geometry => Ok((cur, None)),
                None => plan(&old, half_only, options, true),
            };
            let before = match stats {
                Ok(h) => h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)),
                Err(_) => old.stats(),
            };
            (before, geometry)
        });
        let (mut before, (geometry, mut kept)) = (before?, geometry?);
        if let Some(m) = &meta_before {
            use std::os::unix::fs::MetadataExt;
            before.file_bytes = m.len();
            before.allocated_bytes = m.blocks() * 512;
        }
        geometry.validate_new()?;
        let allowance = sizing::allowance(&geometry, old.len());
        // Say up front when the rewrite cannot fit (blocks are still
        // reserved one by one as they are written): two slots a tag and a
        // quarter more for free room (400,000 file-ownership tags took 390
        // bytes a tag; half again more, as before, refused rewrites that
        // fit). Measured before the rewrite takes any (measured after its
        // create, the space it took was counted twice).
        let need = before
            .allocated_bytes
            .min(old.len().saturating_mul(2 * 4096 / 25).saturating_mul(5) / 4)
            // The rewrite's strings file holds at most the strings held now.
            .saturating_add(std::fs::metadata(strings_path(path)).map_or(0, |m| m.len()));
        if let Some(free) = old.free_bytes() {
            if free < need {
                return Err(Error::io(
                    format!(
                        "maintenance needs about {need} free bytes beside {} for the rewrite; {free} are free",
                        path.display()
                    ),
                    std::io::Error::from_raw_os_error(libc::ENOSPC),
                ));
            }
        }
        let tmp = maintain_temp_path(path);
        remove_if_present(&tmp, "stale")?;
        let mut copy = || -> Result<()> {
            let create = |p: &Path, o: &CreateOptions| {
                if half_only {
                    Store::create_half_only(p, o)
                } else {
                    Store::create(p, o)
                }
            };
            let new = create(
                &tmp,
                &CreateOptions {
                    expected_tags: 0,
                    primary_buckets_per_half: Some(geometry.primary_buckets_per_half),
                    blocks_per_primary: Some(geometry.blocks_per_primary),
                    blocks_per_secondary: Some(geometry.blocks_per_secondary),
                    seed: Some(old.seed()),
                },
            )?;
            // Packed fuller than the split fill, the store must not split
            // while the copy fills it, nor on the next few inserts.
            new.set_split_allowance(allowance)?;
            if let Some(m) = &meta_before {
                std::fs::set_permissions(&tmp, m.permissions()).map_err(|e| {
                    Error::io(format!("copying permissions to {}", tmp.display()), e)
                })?;
            }
            let total = old.len();
            let mut done = 0u64;
            // Chunks large enough for the bulk path (`engine/bulk.rs`).
            let per = if half_only {
                4096
            } else {
                new.bulk_round(total as usize)
            };
            let kept = kept.take();
            for c in kept.iter().flat_map(|tags| tags.chunks(per)) {
                new.insert_unique(c, None)?;
                done += c.len() as u64;
                progress(done, total);
            }
            let mut chunk: Vec<Tag> = Vec::with_capacity(per);
            // A half-only store is copied half by half; any other, tag by tag
            // (each tag read once, from its object half), unless the
            // planner's tags were copied.
            let passes: &[Option<Half>] = if half_only {
                &[Some(Half::Object), Some(Half::Subject)]
            } else if kept.is_some() {
                &[]
            } else {
                &[None]
            };
            for &half in passes {
                let mut it = match half {
                    Some(h) => old.half_tags(h),
                    None => old.tags(),
                };
                loop {
                    chunk.clear();
                    for t in it.by_ref().take(per) {
                        chunk.push(t?);
                    }
                    if chunk.is_empty() {
                        break;
                    }
                    new.insert_unique(&chunk, half)?;
                    done += chunk.len() as u64;
                    progress(done, total);
                }
            }
            if new.len() != total {
                return Err(Error::corrupt(format!(
                    "maintenance copied {} tags but the store counts {total}; the store was left unchanged",
                    new.len()
                )));
            }
            new.close()?;
            // The counts of the old store stay valid (same tags, same seed):
            // the rewrite's own empty counts file is not needed.
            remove_if_present(&counts_path(&tmp), "the rewrite's counts file")
        };
        // The statistics of the rewrite, taken before the rename: after it
        // another process may take the store's lock at once.
        let after = copy().and_then(|()| Store::open_read_only(&tmp)?.stats());
        let after = match after {
            Ok(a) => a,
            Err(e) => {
                remove_temporaries(&tmp);
                return Err(e);
            }
        };
        // A second handle on the old file, so that its last close (which
        // gives its blocks back to the file system) is not the old store's.
        let last = std::fs::File::open(path).ok();
        // The rewrite's strings file holds exactly the long strings of the
        // same tags: either file serves either store, so a crash between
        // the two renames loses nothing.
        let strings = (strings_path(&tmp), strings_path(path));
        let new_has_strings = strings.0.exists();
        let moved = if new_has_strings {
            std::fs::rename(&strings.0, &strings.1).map_err(|e| {
                Error::io(
                    format!(
                        "renaming {} over {}",
                        strings.0.display(),
                        strings.1.display()
                    ),
                    e,
                )
            })
        } else {
            Ok(())
        };
        if let Err(e) = moved.and_then(|()| sync_dir(path)) {
            remove_temporaries(&tmp);
            return Err(e);
        }
        if let Err(e) = std::fs::rename(&tmp, path) {
            remove_temporaries(&tmp);
            return Err(Error::io(
                format!("renaming {} over {}", tmp.display(), path.display()),
                e,
            ));
        }
        sync_dir(path)?;
        if !new_has_strings {
            // No tag is long any more: the old strings are garbage.
            remove_if_present(&strings.1, "the strings file no tag uses")?;
        }
        // The old handle now refers to the unlinked old file: drop it unwritten.
        old.abandon_now();
        release_in_background(last);

        Ok(MaintainReport {
            before,
            after,
            seconds: started.elapsed().as_secs_f64(),
        })
    }
}

/// Closes the last handle on the replaced, unlinked store file on a thread
/// of its own (inline if none can be started): the file system frees its
/// blocks then, which with `discard` took 5.3 s for 1.8 GB (DESIGN.md §7).
fn release_in_background(last: Option<std::fs::File>) {
    let Some(file) = last else { return };
    let spawned = std::thread::Builder::new()
        .name("tagstore-release".into())
        .spawn(move || drop(file));
    // On failure the closure, and the file in it, were dropped here.
    drop(spawned);
}

/// The geometry a default [`Store::maintain`] rewrites `old` into.
///
/// The smallest file for its tags (one pass over them; see `sizing.rs`),
/// with primary buckets of the store's size (at most the default) or
/// twice it, unless the options fix the bucket sizes.
#[cfg(feature = "test-hooks")]
pub fn planned_geometry(old: &Store, o: &MaintainOptions) -> Result<Geometry> {
    Ok(plan(old, old.is_half_only(), o, false)?.0)
}

/// [`planned_geometry`] of a store known to be half-only or not; with
/// `keep`, also the tags its pass read when they are few enough to copy in
/// one bulk round (at most [`KEEP_MAX`], which a copy would hold at once
/// anyway).
fn plan(
    old: &Store,
    half_only: bool,
    o: &MaintainOptions,
    keep: bool,
) -> Result<(Geometry, Option<Vec<Tag>>)> {
    let bp = o.blocks_per_primary.unwrap_or(
        old.geometry()
            .blocks_per_primary
            .min(crate::format::geometry::DEFAULT_BLOCKS_PER_PRIMARY),
    );
    let mut p = Planner::new(old.len(), bp);
    let mut kept = None;
    if half_only {
        for h in Half::BOTH {
            p.add_all(old.seed(), Some(h), old.half_tags(h))?;
        }
    } else if keep && old.len() <= KEEP_MAX.load(Ordering::Relaxed) as u64 {
        let mut tags = Vec::with_capacity(old.len() as usize);
        for t in old.tags() {
            let t = t?;
            for h in Half::BOTH {
                p.add(old.seed(), h, &t);
            }
            tags.push(t);
        }
        kept = Some(tags);
    } else {
        p.add_all(old.seed(), None, old.tags())?;
    }
    let g = p.choose(o.blocks_per_primary.is_some(), o.blocks_per_secondary);
    Ok((g, kept))
}

/// Removes a failed rewrite's files: the temporary store and its side files
/// (best effort: the next writer removes what is left).
fn remove_temporaries(tmp: &Path) {
    for f in crate::side::rewrite_files(tmp) {
        let _ = std::fs::remove_file(f);
    }
}
