//! The `tagstore` command-line tool: create, load, query and check a tag store.

use clap::{Args, Parser, Subcommand};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::fs::File;
use std::io::{self, BufRead, BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;
use tagstore::{tsv, CreateOptions, Durability, Error, Store, Tag};

/// Prints a line to stdout; a closed stdout (e.g. `| head`) is not an error
/// worth a panic, so write failures are ignored here.
macro_rules! say {
    ($($arg:tt)*) => {{
        let _ = writeln!(io::stdout().lock(), $($arg)*);
    }};
}

#[derive(Parser)]
#[command(
    name = "tagstore",
    version,
    about = "Embedded storage for <object, relationship, subject> tags"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Create a new, empty store file.
    Create {
        /// Store file to create (must not exist).
        store: PathBuf,
        /// Tags the store should hold comfortably; sizes the primary buckets.
        #[arg(long, default_value_t = 1_000_000)]
        expected_tags: u64,
        /// Primary buckets per half (overrides --expected-tags).
        #[arg(long)]
        primary_buckets: Option<u32>,
        /// 4 KB blocks per primary bucket.
        #[arg(long)]
        blocks_per_primary: Option<u32>,
        /// 4 KB blocks per secondary (overflow) bucket.
        #[arg(long)]
        blocks_per_secondary: Option<u32>,
        /// Hash seed (default: random; fix it only for reproducible images).
        #[arg(long)]
        seed: Option<u64>,
    },
    /// Insert one tag, or many from a TSV file.
    Insert(Change),
    /// Delete one tag, or many from a TSV file.
    Delete(Change),
    /// FIND the subjects of an object, or the objects of a subject, one per line.
    Find {
        /// Store file.
        store: PathBuf,
        /// Object to look up (prints its subjects).
        #[arg(long, conflicts_with = "subject", required_unless_present = "subject")]
        object: Option<String>,
        /// Subject to look up (prints its objects).
        #[arg(long)]
        subject: Option<String>,
        /// Relationship.
        #[arg(long)]
        relationship: String,
        /// Print at most this many results.
        #[arg(long)]
        limit: Option<u64>,
    },
    /// Print every tag once as TSV.
    Export {
        /// Store file.
        store: PathBuf,
    },
    /// How many objects carry SUBJECT under RELATIONSHIP (from the merged counts).
    Count {
        /// Store file.
        store: PathBuf,
        /// Subject.
        #[arg(long)]
        subject: String,
        /// Relationship.
        #[arg(long)]
        relationship: String,
    },
    /// The most used subjects of a relationship, with weights for font sizes.
    Cloud {
        /// Store file.
        store: PathBuf,
        /// Relationship.
        #[arg(long)]
        relationship: String,
        /// How many subjects.
        #[arg(long, default_value_t = 50)]
        top: usize,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Print layout statistics.
    Stats {
        /// Store file.
        store: PathBuf,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Compact the store offline (fill holes, free unneeded secondary buckets,
    /// shrink the file) and optionally re-hash it into a new geometry.
    Maintain {
        /// Store file (must not be open elsewhere).
        store: PathBuf,
        /// Re-hash for this many tags (keeps the bucket sizes unless given).
        #[arg(long)]
        expected_tags: Option<u64>,
        /// New primary bucket count per half.
        #[arg(long)]
        primary_buckets: Option<u32>,
        /// New blocks per primary bucket.
        #[arg(long)]
        blocks_per_primary: Option<u32>,
        /// New blocks per secondary bucket.
        #[arg(long)]
        blocks_per_secondary: Option<u32>,
        /// Print the before/after summary as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Verify checksums and invariants; exits 1 on any fault.
    Check {
        /// Store file.
        store: PathBuf,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Args)]
struct Change {
    /// Store file.
    store: PathBuf,
    /// Object (with RELATIONSHIP and SUBJECT), unless --file is given.
    #[arg(required_unless_present = "file", conflicts_with = "file")]
    object: Option<String>,
    /// Relationship.
    #[arg(requires = "object")]
    relationship: Option<String>,
    /// Subject.
    #[arg(requires = "relationship")]
    subject: Option<String>,
    /// TSV file of object<TAB>relationship<TAB>subject lines; '-' reads stdin.
    #[arg(long)]
    file: Option<PathBuf>,
    /// When changes become durable: `immediate` (each tag), `on-sync` (every
    /// 4096 lines of --file), or `none` (at the end; survives kill -9 but not
    /// power loss before the end).
    #[arg(long, value_enum, default_value_t = DurabilityArg::None)]
    durability: DurabilityArg,
}

/// `--durability` values.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum DurabilityArg {
    Immediate,
    OnSync,
    None,
}

impl From<DurabilityArg> for Durability {
    fn from(d: DurabilityArg) -> Self {
        match d {
            DurabilityArg::Immediate => Durability::Immediate,
            DurabilityArg::OnSync => Durability::OnSync,
            DurabilityArg::None => Durability::None,
        }
    }
}

/// A CLI failure: the message printed after "error: ".
struct Fail(String);

impl From<Error> for Fail {
    fn from(e: Error) -> Self {
        match e {
            Error::NotFound(p) => Fail(format!(
                "{}: no such store file (create one with `tagstore create {}`)",
                p.display(),
                p.display()
            )),
            e => Fail(e.to_string()),
        }
    }
}

impl From<io::Error> for Fail {
    fn from(e: io::Error) -> Self {
        Fail(format!("output: {e}"))
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => code,
        Err(Fail(m)) => {
            let _ = writeln!(io::stderr(), "error: {m}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> Result<ExitCode, Fail> {
    match cli.cmd {
        Cmd::Create {
            store,
            expected_tags,
            primary_buckets,
            blocks_per_primary,
            blocks_per_secondary,
            seed,
        } => {
            let opts = CreateOptions {
                expected_tags,
                primary_buckets_per_half: primary_buckets,
                blocks_per_primary,
                blocks_per_secondary,
                seed,
            };
            let s = Store::create(&store, &opts)?;
            let g = s.geometry();
            s.close()?;
            say!(
                "created {}: {} primary buckets per half of {} blocks, secondary buckets of {} blocks",
                store.display(),
                g.primary_buckets_per_half,
                g.blocks_per_primary,
                g.blocks_per_secondary
            );
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Insert(c) => change(c, true),
        Cmd::Delete(c) => change(c, false),
        Cmd::Find {
            store,
            object,
            subject,
            relationship,
            limit,
        } => {
            let s = Store::open_read_only(&store)?;
            let it = match (&object, &subject) {
                (Some(o), _) => s.find_subjects(o, &relationship),
                (None, Some(sub)) => s.find_objects(sub, &relationship),
                (None, None) => return Err(Fail("give --object or --subject".into())),
            };
            let mut out = BufWriter::new(io::stdout().lock());
            for r in it.take(limit.map_or(usize::MAX, |l| l.min(usize::MAX as u64) as usize)) {
                let v = r?;
                if !emit(&mut out, &tsv::escape(&v))? {
                    return Ok(ExitCode::SUCCESS);
                }
            }
            finish(out)
        }
        Cmd::Export { store } => {
            let s = Store::open_read_only(&store)?;
            let mut out = BufWriter::new(io::stdout().lock());
            for t in s.tags() {
                if !emit(&mut out, &tsv::format_tag(&t?))? {
                    return Ok(ExitCode::SUCCESS);
                }
            }
            finish(out)
        }
        Cmd::Count {
            store,
            subject,
            relationship,
        } => {
            let s = Store::open_read_only(&store)?;
            say!("{}", s.count(&subject, &relationship)?);
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Cloud {
            store,
            relationship,
            top,
            json,
        } => {
            let s = Store::open_read_only(&store)?;
            let cloud = s.cloud(&relationship, top)?;
            if json {
                let j = serde_json::to_string_pretty(&cloud).map_err(|e| Fail(e.to_string()))?;
                say!("{j}");
            } else {
                for e in &cloud {
                    say!("{}\t{}\t{:.2}", tsv::escape(&e.subject), e.count, e.weight);
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Stats { store, json } => {
            let s = Store::open_read_only(&store)?;
            let st = s.stats()?;
            if json {
                let j = serde_json::to_string_pretty(&st).map_err(|e| Fail(e.to_string()))?;
                say!("{j}");
            } else {
                print_stats(&st);
            }
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Maintain {
            store,
            expected_tags,
            primary_buckets,
            blocks_per_primary,
            blocks_per_secondary,
            json,
        } => {
            let cur = Store::open_read_only(&store)?.geometry();
            let bp = blocks_per_primary.unwrap_or(cur.blocks_per_primary);
            let bs = blocks_per_secondary.unwrap_or(cur.blocks_per_secondary);
            let mut g = match expected_tags {
                Some(n) => tagstore::Geometry::sized(n, bp, bs),
                None => tagstore::Geometry {
                    blocks_per_primary: bp,
                    blocks_per_secondary: bs,
                    ..cur
                },
            };
            if let Some(p) = primary_buckets {
                g.primary_buckets_per_half = p;
            }
            let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
            bar.set_style(
                ProgressStyle::with_template("{bar:40} {pos}/{len} tags copied ({eta} left)")
                    .unwrap_or_else(|_| ProgressStyle::default_bar()),
            );
            let opts = tagstore::MaintainOptions {
                geometry: (g != cur).then_some(g),
            };
            let r = Store::maintain(&store, &opts, |done, total| {
                bar.set_length(total);
                bar.set_position(done);
            });
            bar.finish_and_clear();
            let r = r?;
            if json {
                let j = serde_json::to_string_pretty(&r).map_err(|e| Fail(e.to_string()))?;
                say!("{j}");
            } else {
                print_maintain(&r);
            }
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Check { store, json } => {
            let s = Store::open_read_only(&store)?;
            let r = s.check()?;
            if json {
                let j = serde_json::to_string_pretty(&r).map_err(|e| Fail(e.to_string()))?;
                say!("{j}");
            } else {
                for f in &r.faults {
                    say!("fault: {f}");
                }
                say!(
                    "{}: {} blocks checked, {} tags, {} faults",
                    store.display(),
                    r.blocks_checked,
                    r.object_tags,
                    r.faults.len()
                );
            }
            Ok(if r.ok() {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            })
        }
    }
}

/// Writes one line; false when the reader went away (e.g. `| head`).
fn emit(out: &mut impl Write, line: &str) -> Result<bool, Fail> {
    match writeln!(out, "{line}") {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(false),
        Err(e) => Err(e.into()),
    }
}

fn finish(mut out: impl Write) -> Result<ExitCode, Fail> {
    match out.flush() {
        Err(e) if e.kind() != io::ErrorKind::BrokenPipe => Err(e.into()),
        _ => Ok(ExitCode::SUCCESS),
    }
}

fn change(c: Change, insert: bool) -> Result<ExitCode, Fail> {
    let store = Store::open(&c.store)?;
    store.set_durability(c.durability.into())?;
    let Some(file) = c.file else {
        let (Some(o), Some(r), Some(s)) = (c.object, c.relationship, c.subject) else {
            return Err(Fail(
                "give OBJECT RELATIONSHIP SUBJECT, or --file FILE".into(),
            ));
        };
        let t = Tag::new(o, r, s);
        let changed = if insert {
            store.insert(&t)?
        } else {
            store.delete(&t)?
        };
        store.close()?;
        say!(
            "{}",
            match (insert, changed) {
                (true, true) => "inserted",
                (true, false) => "already present",
                (false, true) => "deleted",
                (false, false) => "not present",
            }
        );
        return Ok(ExitCode::SUCCESS);
    };
    let result = load(&store, &file, insert);
    // Whatever happened, everything applied so far is kept and the store closed cleanly.
    let closed = store.close();
    let summary = result?;
    closed?;
    let secs = summary.started.elapsed().as_secs_f64();
    say!(
        "{} in {secs:.2} s ({:.0} lines/s, including the final flush)",
        summary.text,
        summary.lines as f64 / secs.max(1e-9)
    );
    Ok(ExitCode::SUCCESS)
}

fn open_input(file: &Path) -> Result<(Box<dyn Read>, Option<u64>), Fail> {
    if file.as_os_str() == "-" {
        return Ok((Box::new(io::stdin().lock()), None));
    }
    let f = File::open(file).map_err(|e| Fail(format!("{}: {e}", file.display())))?;
    let len = f.metadata().ok().filter(|m| m.is_file()).map(|m| m.len());
    Ok((Box::new(f), len))
}

/// Applies a TSV file; returns the summary line or an error naming the line.
fn load(store: &Store, file: &Path, insert: bool) -> Result<Summary, Fail> {
    const CHUNK: usize = 4096;
    let (input, total) = open_input(file)?;
    let mut reader = BufReader::with_capacity(1 << 20, input);
    let bar = match total {
        Some(n) => ProgressBar::with_draw_target(Some(n), ProgressDrawTarget::stderr()).with_style(
            ProgressStyle::with_template("{bar:40} {bytes}/{total_bytes} {msg} ({eta} left)")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        ),
        None => ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr()),
    };
    let started = Instant::now();
    let (mut changed, mut unchanged) = (0u64, 0u64);
    let mut chunk: Vec<Tag> = Vec::with_capacity(CHUNK);
    let mut chunk_lines: Vec<u64> = Vec::with_capacity(CHUNK);
    let mut line_no = 0u64;
    let mut buf = Vec::new();
    let verb = if insert { "inserted" } else { "deleted" };
    let apply = |chunk: &mut Vec<Tag>,
                 lines: &mut Vec<u64>,
                 changed: &mut u64,
                 unchanged: &mut u64|
     -> Result<(), Fail> {
        let (out, r) = if insert {
            store.insert_batch(chunk.iter())
        } else {
            store.delete_batch(chunk.iter())
        };
        *changed += out.changed;
        *unchanged += out.unchanged;
        if let Err(e) = r {
            let at = (out.changed + out.unchanged) as usize;
            let line = lines.get(at).copied().unwrap_or(0);
            return Err(Fail(format!(
                "{}: line {line}: {e}; {} tags {verb} before it ({} already {}) and kept",
                file.display(),
                *changed,
                *unchanged,
                if insert { "present" } else { "absent" }
            )));
        }
        if store.durability() == Durability::OnSync {
            store.sync()?;
        }
        chunk.clear();
        lines.clear();
        Ok(())
    };
    loop {
        buf.clear();
        let n = reader.read_until(b'\n', &mut buf).map_err(|e| {
            Fail(format!(
                "{}: reading line {}: {e}",
                file.display(),
                line_no + 1
            ))
        })?;
        if n == 0 {
            break;
        }
        line_no += 1;
        bar.inc(n as u64);
        if buf.last() == Some(&b'\n') {
            buf.pop();
        }
        let parsed = std::str::from_utf8(&buf)
            .map_err(|_| "line is not valid UTF-8".to_string())
            .and_then(tsv::parse_line);
        match parsed {
            Ok(t) => {
                chunk.push(t);
                chunk_lines.push(line_no);
            }
            Err(m) => {
                apply(&mut chunk, &mut chunk_lines, &mut changed, &mut unchanged)?;
                bar.finish_and_clear();
                return Err(Fail(format!(
                    "{}: line {line_no}: {m}; {changed} tags {verb} before it ({unchanged} already {}) and kept",
                    file.display(),
                    if insert { "present" } else { "absent" }
                )));
            }
        }
        if chunk.len() == CHUNK {
            apply(&mut chunk, &mut chunk_lines, &mut changed, &mut unchanged)?;
            bar.set_message(format!("{} tags", changed + unchanged));
        }
    }
    apply(&mut chunk, &mut chunk_lines, &mut changed, &mut unchanged)?;
    bar.finish_and_clear();
    Ok(Summary {
        text: format!(
            "{verb} {changed} tags ({unchanged} already {}) from {line_no} lines",
            if insert { "present" } else { "absent" },
        ),
        lines: line_no,
        started,
    })
}

/// What a `--file` load did, printed once the store is closed (durable).
struct Summary {
    text: String,
    lines: u64,
    started: Instant,
}

fn print_maintain(r: &tagstore::MaintainReport) {
    let (b, a) = (&r.before, &r.after);
    say!("{:<26}{:>16}{:>16}", "", "before", "after");
    let rows: [(&str, u64, u64); 7] = [
        ("tags", b.tags, a.tags),
        ("primary buckets", b.primary_buckets, a.primary_buckets),
        (
            "linked secondary buckets",
            b.secondary_linked,
            a.secondary_linked,
        ),
        ("holes", b.holes, a.holes),
        ("longest chain", b.longest_chain, a.longest_chain),
        ("file bytes", b.file_bytes, a.file_bytes),
        ("allocated bytes", b.allocated_bytes, a.allocated_bytes),
    ];
    for (name, x, y) in rows {
        say!("{name:<26}{x:>16}{y:>16}");
    }
    say!("took {:.2} s", r.seconds);
}

fn print_stats(s: &tagstore::Stats) {
    let g = &s.geometry;
    say!("tags                     {}", s.tags);
    say!(
        "geometry                 {} primary buckets per half x {} blocks; secondary buckets of {} blocks",
        g.primary_buckets_per_half, g.blocks_per_primary, g.blocks_per_secondary
    );
    say!(
        "primary buckets          {} ({} used, {} full, fill {:.1}%)",
        s.primary_buckets,
        s.primary_buckets_used,
        s.primary_buckets_full,
        s.primary_fill * 100.0
    );
    say!(
        "tags per primary bucket  mean {:.2}, stddev {:.2} (uniform hash ideal {:.2}), max {}",
        s.load_mean,
        s.load_stddev,
        s.load_stddev_ideal,
        s.load_max
    );
    say!(
        "secondary buckets        {} ({} linked, {} free)",
        s.secondary_buckets,
        s.secondary_linked,
        s.secondary_free
    );
    say!(
        "chains                   {} primary buckets with overflow, longest {} secondary buckets",
        s.chains,
        s.longest_chain
    );
    say!("holes                    {}", s.holes);
    say!(
        "file                     {} bytes ({} allocated, {:.0} bytes per tag)",
        s.file_bytes,
        s.allocated_bytes,
        s.allocated_bytes_per_tag
    );
    for a in &s.advice {
        say!("advice                   {a}");
    }
}
