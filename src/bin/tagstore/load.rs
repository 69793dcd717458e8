//! `insert --file` and `delete --file`: apply a TSV file in chunks, and
//! whatever stops the load (bad input, a full disk, an error closing the
//! store) report exactly how many tags were applied before it.

use crate::progress;
use indicatif::{ProgressBar, ProgressDrawTarget};
use std::fs::File;
use std::io::{self, BufReader, Read};
use std::path::Path;
use tagstore::tsv::{self, LineError, LineReader, MAX_LINE_BYTES};
use tagstore::{Durability, Store, Tag, MAX_STRING_BYTES};

/// Tags applied per library batch in the journaled modes (and per sync in
/// `on-sync` mode).
const CHUNK: usize = 4096;

/// Tags applied per library batch in mapped mode (`none`): a batch this
/// large takes the library's bulk path, written half by half in bucket order.
const BULK_CHUNK: usize = 2_097_152;

/// The largest batch an insert of a file of known length makes (the
/// library's largest bulk round): each batch rewrites nearly every block
/// of the store, so a file is cut into as few equal batches as fit.
const BULK_CHUNK_MAX: usize = 4_194_304;

/// A file's estimated line count is raised by 1/this before the store
/// grows for it (4 %).
const RESERVE_MARGIN: u64 = 25;

/// What a load has applied so far.
#[derive(Default)]
pub struct Tally {
    /// Tags that changed the store.
    pub changed: u64,
    /// Tags already present (insert) or absent (delete).
    pub unchanged: u64,
    /// Lines read.
    pub lines: u64,
    /// Bad lines skipped (`--skip-bad`).
    pub skipped: u64,
}

/// Bad lines named on stderr one by one (`--skip-bad`); the rest are counted.
const NAMED_SKIPS: u64 = 10;

/// The words of a message about an insert or a delete load.
#[derive(Clone, Copy)]
pub struct Verb {
    insert: bool,
}

impl Verb {
    /// For `insert` (true) or `delete` (false).
    pub fn new(insert: bool) -> Self {
        Verb { insert }
    }

    /// True for `insert`.
    pub fn is_insert(self) -> bool {
        self.insert
    }

    /// "inserted" or "deleted".
    pub fn done(self) -> &'static str {
        if self.insert {
            "inserted"
        } else {
            "deleted"
        }
    }

    /// What a load's error says of the changes made before it: "and kept"
    /// or "and they stay deleted" (a delete's "deleted … and kept" read as
    /// if the tags were kept).
    pub fn stands(self) -> &'static str {
        if self.insert {
            "and kept"
        } else {
            "and they stay deleted"
        }
    }

    /// "present" or "absent": the state of an unchanged tag.
    pub fn already(self) -> &'static str {
        if self.insert {
            "present"
        } else {
            "absent"
        }
    }
}

impl Tally {
    /// "N tags deleted before it (M already absent)": what an error interrupted.
    pub fn before_error(&self, verb: Verb) -> String {
        format!(
            "{} tags {} before it ({} already {})",
            self.changed,
            verb.done(),
            self.unchanged,
            verb.already()
        )
    }

    /// "deleted N tags (M already absent) from L lines": a finished load
    /// (then ", K bad lines skipped" if any were).
    pub fn summary(&self, verb: Verb) -> String {
        let skipped = match self.skipped {
            0 => String::new(),
            k => format!(", {k} bad lines skipped"),
        };
        format!(
            "{} {} tags ({} already {}) from {} lines{skipped}",
            verb.done(),
            self.changed,
            self.unchanged,
            verb.already(),
            self.lines
        )
    }
}

/// Opens the input; also its size when it is a regular file (for the bar).
fn open_input(file: &Path) -> Result<(Box<dyn Read>, Option<u64>), String> {
    if file.as_os_str() == "-" {
        return Ok((Box::new(io::stdin().lock()), None));
    }
    let f = File::open(file).map_err(|e| format!("{}: {e}", file.display()))?;
    let len = f.metadata().ok().filter(|m| m.is_file()).map(|m| m.len());
    Ok((Box::new(f), len))
}

/// Applies a TSV file to an open store, counting into `tally`; with
/// `skip_bad`, a line that is not a valid tag is named on stderr and
/// skipped instead of stopping the load.
///
/// On error returns the message up to the count: the caller adds
/// [`Tally::before_error`], which stays exact whatever failed.
pub fn load(
    store: &Store,
    file: &Path,
    verb: Verb,
    tally: &mut Tally,
    skip_bad: bool,
) -> Result<(), String> {
    let (input, total) = open_input(file)?;
    let mut reader = LineReader::new(BufReader::with_capacity(1 << 20, input));
    let bar = match total {
        Some(n) => progress::load_bar(ProgressDrawTarget::stderr(), n),
        None => progress::stream_bar(ProgressDrawTarget::stderr()),
    };
    let r = read_and_apply(store, file, verb, tally, &mut reader, &bar, skip_bad);
    bar.finish_and_clear();
    if tally.skipped > NAMED_SKIPS {
        say_err!(
            "{}: {} more bad lines skipped",
            file.display(),
            tally.skipped - NAMED_SKIPS
        );
    }
    r
}

fn read_and_apply<R: io::BufRead>(
    store: &Store,
    file: &Path,
    verb: Verb,
    tally: &mut Tally,
    reader: &mut LineReader<R>,
    bar: &ProgressBar,
    skip_bad: bool,
) -> Result<(), String> {
    let name = file.display();
    // A file of known length, inserted: once the first chunk tells the
    // mean line length, the store grows once for the whole file.
    let mut hint = match verb.insert {
        true => bar.length(),
        false => None,
    };
    let mut size = match store.durability() {
        Durability::None => BULK_CHUNK,
        _ => CHUNK,
    };
    let mut chunk: Vec<Tag> = Vec::with_capacity(CHUNK);
    let mut chunk_lines: Vec<u64> = Vec::with_capacity(CHUNK);
    let mut unreadable = false;
    loop {
        let step = match reader.next_line() {
            Ok(None) => None,
            Ok(Some(bytes)) => Some(
                std::str::from_utf8(bytes)
                    .map_err(|_| "line is not valid UTF-8".to_string())
                    .and_then(tsv::parse_line)
                    // Refused here, not in the batch: a large batch goes in
                    // whole or is refused whole (bulk path), and the error
                    // must name this line.
                    .and_then(|t| match verb.is_insert() {
                        true => t.check_size().map(|_| t).map_err(|e| e.to_string()),
                        false => Ok(t),
                    }),
            ),
            Err(LineError::TooLong) => {
                if skip_bad {
                    reader
                        .skip_rest()
                        .map_err(|e| format!("{name}: line {}: reading: {e}", reader.line_no()))?;
                }
                Some(Err(format!(
                    "line is longer than {MAX_LINE_BYTES} bytes, more than any tag can need \
                     (three strings of {MAX_STRING_BYTES} bytes of UTF-8 escaped to at most 2 characters each, 2 tabs, \\r\\n; \
                     write bytes as UTF-8, not as octal or hex escapes); the rest of it was not read"
                )))
            }
            Err(LineError::Io(e)) => {
                // Never skipped: the input itself failed.
                unreadable = true;
                Some(Err(format!("reading: {e}")))
            }
        };
        tally.lines = reader.line_no();
        let Some(parsed) = step else { break };
        match parsed {
            Ok(t) => {
                chunk.push(t);
                chunk_lines.push(reader.line_no());
            }
            Err(m) if skip_bad && !unreadable => {
                tally.skipped += 1;
                if tally.skipped <= NAMED_SKIPS {
                    let line = reader.line_no();
                    bar.suspend(|| say_err!("{name}: line {line}: {m}; skipped"));
                }
            }
            Err(m) => {
                // The tags before the bad line are applied first, so the count is exact.
                apply(store, file, verb, &mut chunk, &mut chunk_lines, tally)?;
                // A bad line of a file can be skipped (not an unreadable input).
                let hint = match unreadable {
                    false => "; with --skip-bad such lines are skipped",
                    true => "",
                };
                return Err(format!("{name}: line {}: {m}{hint}", reader.line_no()));
            }
        }
        bar.set_position(reader.bytes_read());
        if chunk.len() == CHUNK {
            if let Some(total) = hint.take() {
                // An estimate from the first lines' mean length, with a
                // margin: one that falls short by a few splits makes the
                // first split of the next level append a whole segment
                // (0.5 M npm lines estimated 1 % low: 504 MB of file for
                // 252 MB of buckets), while 4 % too many buckets costs 4 %.
                let lines = match sampled_line_bytes(file, reader.bytes_read(), total) {
                    // The lines read, and the rest at the mean length of
                    // lines sampled across the rest of the file.
                    Some(mean) => {
                        let rest = total.saturating_sub(reader.bytes_read()) as f64 / mean;
                        reader.line_no().saturating_add(rest as u64)
                    }
                    None => total.saturating_mul(reader.line_no()) / reader.bytes_read().max(1),
                };
                if size == BULK_CHUNK {
                    size = even_batches(lines.saturating_add(lines / RESERVE_MARGIN));
                }
                // Only the share of the lines the store does not hold yet:
                // a file inserted again must not grow it.
                let new = store
                    .estimate_new(&chunk, lines)
                    .map_err(|e| format!("{name}: {e}"))?;
                // Only a head start: where the disk cannot hold the room
                // (nearly full), the load goes on and stops, with an exact
                // count, where the disk does (a review's 20 MB disk took
                // nothing of a 300,000-line file, and all of it in pieces).
                match store.reserve(new.saturating_add(new / RESERVE_MARGIN)) {
                    Err(tagstore::Error::Io { .. }) => {}
                    r => r.map_err(|e| format!("{name}: {e}"))?,
                }
            }
        }
        if chunk.len() == size {
            apply(store, file, verb, &mut chunk, &mut chunk_lines, tally)?;
        }
    }
    apply(store, file, verb, &mut chunk, &mut chunk_lines, tally)
}

/// Places across a file whose lines [`sampled_line_bytes`] reads (4 MiB
/// read in all: 32 windows of 32 KiB estimated a file whose long lines
/// hold a fifth of its bytes 7.5 % short, and a load that splits past its
/// estimate appends a whole segment).
const SAMPLES: u64 = 64;
/// Bytes read at each of them.
const SAMPLE_BYTES: usize = 64 * 1024;

/// The mean length in bytes of the whole lines found in [`SAMPLES`] windows,
/// one in each equal step of bytes `from..len` of `file` (the part not
/// read yet), `None` if it cannot be read again or they hold too few
/// lines. Taken from
/// the first lines alone, the estimate of a file whose first lines were
/// much shorter than the rest sized the store 9 times too large (a
/// review's: 5,000 short lines, then 300,000 of 90 bytes, made a 1.35 GB
/// store at 5 % fill); npm's first 4,096 lines ran 27 % short (688,382
/// lines estimated for 500,006; sampled: 499,497).
fn sampled_line_bytes(file: &Path, from: u64, len: u64) -> Option<f64> {
    use std::io::{Seek, SeekFrom};
    let mut f = File::open(file).ok()?;
    let mut buf = vec![0u8; SAMPLE_BYTES];
    let (mut bytes, mut lines) = (0u64, 0u64);
    let span = len.checked_sub(from)?;
    let stratum = span / SAMPLES;
    let room = stratum.saturating_sub(SAMPLE_BYTES as u64);
    for k in 0..SAMPLES {
        // One window somewhere in each step of the rest, not at its start:
        // windows evenly spaced fell in step with a file made of equal
        // parts (shards joined end to end, each starting with long lines),
        // and estimated a review's such file 5 times short.
        let jitter = match room {
            0 => 0,
            r => mix(len ^ k.wrapping_mul(0x9E37_79B9_7F4A_7C15)) % r,
        };
        let at = from + stratum * k + jitter;
        f.seek(SeekFrom::Start(at)).ok()?;
        let mut got = 0;
        while got < buf.len() {
            match f.read(&mut buf[got..]) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return None,
            }
        }
        let w = &buf[..got];
        // Whole lines only: from the start of the file or past the first
        // line end, up to the last line end.
        let first = match at {
            0 => 0,
            _ => match w.iter().position(|&b| b == b'\n') {
                Some(i) => i + 1,
                None => continue,
            },
        };
        let Some(last) = w.iter().rposition(|&b| b == b'\n') else {
            continue;
        };
        if last + 1 > first {
            bytes += (last + 1 - first) as u64;
            lines += w[first..=last].iter().filter(|&&b| b == b'\n').count() as u64;
        }
    }
    (lines >= 64).then(|| bytes as f64 / lines as f64)
}

/// A 64-bit mix (SplitMix64's finaliser): where in its stratum a window of
/// [`sampled_line_bytes`] falls, the same for the same file length.
fn mix(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// Tags per batch for a file of about `lines` lines: as few equal batches
/// of at most [`BULK_CHUNK_MAX`] as hold them (5 M lines: two of 2.5 M,
/// where batches of [`BULK_CHUNK`] made three, each rewriting the store);
/// never fewer than [`BULK_CHUNK`] (an estimate from the first lines that
/// runs low must not make more batches than before).
fn even_batches(lines: u64) -> usize {
    let lines = usize::try_from(lines).unwrap_or(usize::MAX).max(1);
    let batches = lines.div_ceil(BULK_CHUNK_MAX);
    lines.div_ceil(batches).clamp(BULK_CHUNK, BULK_CHUNK_MAX)
}

/// Applies a chunk and clears it; an error names the line it stopped at.
fn apply(
    store: &Store,
    file: &Path,
    verb: Verb,
    chunk: &mut Vec<Tag>,
    lines: &mut Vec<u64>,
    tally: &mut Tally,
) -> Result<(), String> {
    if chunk.is_empty() {
        return Ok(());
    }
    let (out, r) = if verb.is_insert() {
        store.insert_batch(chunk.iter())
    } else {
        store.delete_batch(chunk.iter())
    };
    tally.changed += out.changed;
    tally.unchanged += out.unchanged;
    if let Err(e) = r {
        // A tag refused names its line; a fault of the store (a corrupt
        // block, an I/O error) is no line's: it names the lines in flight.
        if !e.refuses_the_input() {
            let first = lines.first().copied().unwrap_or(0);
            let last = lines.last().copied().unwrap_or(0);
            return Err(format!(
                "{}: applying lines {first}-{last}: {e}",
                file.display()
            ));
        }
        let at = (out.changed + out.unchanged) as usize;
        let line = lines.get(at).or(lines.last()).copied().unwrap_or(0);
        return Err(format!("{}: line {line}: {e}", file.display()));
    }
    if store.durability() == Durability::OnSync {
        if let Err(e) = store.sync() {
            let line = lines.last().copied().unwrap_or(0);
            return Err(format!(
                "{}: syncing after line {line}: {e}",
                file.display()
            ));
        }
    }
    chunk.clear();
    lines.clear();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{even_batches, BULK_CHUNK, BULK_CHUNK_MAX};

    #[test]
    fn a_file_is_cut_into_as_few_equal_batches_as_fit() {
        assert_eq!(even_batches(5_200_000), 2_600_000, "two batches, not three");
        assert_eq!(even_batches(BULK_CHUNK_MAX as u64), BULK_CHUNK_MAX, "one");
        assert_eq!(
            even_batches(BULK_CHUNK_MAX as u64 + 1),
            BULK_CHUNK_MAX / 2 + 1
        );
        assert_eq!(even_batches(12_000_000), 4_000_000);
        let low = "a low estimate never makes batches smaller than before";
        assert_eq!(even_batches(800_000), BULK_CHUNK, "{low}");
        assert_eq!(even_batches(0), BULK_CHUNK, "{low}");
    }
}
