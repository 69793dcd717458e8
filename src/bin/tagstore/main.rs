//! The `tagstore` command-line tool: create, load, query and check a tag store.

/// Writes a line to stderr, as `eprintln!` does, but a stderr that cannot
/// take it (full, or a pipe nobody reads any more, as `2>&1 | head`) is
/// ignored instead of panicking mid-command: a review's `serve
/// 2>/dev/full` exited 101 on SIGTERM, before its close.
macro_rules! say_err {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

mod cluster;
mod load;
mod out;
mod progress;
mod serve;

use clap::error::ErrorKind;
use clap::{Args, CommandFactory, Parser, Subcommand};
use indicatif::ProgressDrawTarget;
use load::{Tally, Verb};
use out::{say, Out};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};
use tagstore::{tsv, CreateOptions, Durability, Error, Geometry, Store, Tag};

#[derive(Parser)]
#[command(
    name = "tagstore",
    version,
    about = "Embedded storage for <object, relationship, subject> tags"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
    /// Wait for a store another process holds instead of failing at once:
    /// up to SECONDS, or without limit when no value is given.
    #[arg(long, global = true, value_name = "SECONDS", num_args = 0..=1, default_missing_value = "inf")]
    wait: Option<WaitArg>,
}

/// A `--wait` value: seconds (fractions allowed), or `inf`.
#[derive(Clone, Copy, Debug)]
struct WaitArg(Duration);

impl std::str::FromStr for WaitArg {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        if s == "inf" {
            return Ok(WaitArg(Duration::MAX));
        }
        match s.parse::<f64>() {
            // Past what a Duration holds (`1e20`): without limit, as `inf`
            // (it was taken for a command name until 2026-11-30).
            Ok(x) if x >= 0.0 => Ok(WaitArg(
                Duration::try_from_secs_f64(x).unwrap_or(Duration::MAX),
            )),
            Ok(x) if x < 0.0 => Err(format!("a wait cannot be negative: {s:?}")),
            _ => Err(format!("not a number of seconds: {s:?}")),
        }
    }
}

#[derive(Subcommand)]
enum Cmd {
    /// Create a new, empty store file.
    Create {
        /// Store file to create (must not exist).
        store: PathBuf,
        /// Tags the store will hold, if known: pre-sizes the primary buckets
        /// (default: start small and grow as tags arrive).
        #[arg(long)]
        expected_tags: Option<u64>,
        #[command(flatten)]
        buckets: Buckets,
        /// Hash seed (default: random; fix it only for reproducible images).
        #[arg(long)]
        seed: Option<u64>,
        /// A half-only store, for a `serve` node behind a proxy: each write
        /// stores only the half its key names (as `serve --half-only`
        /// creates, but sized as asked here).
        #[arg(long)]
        half_only: bool,
    },
    /// Insert one tag, or many from a TSV file.
    Insert(Change),
    /// Delete one tag, or many from a TSV file.
    Delete(Change),
    /// FIND the subjects of an object, or the objects of a subject, one per line.
    #[command(group(clap::ArgGroup::new("key").required(true).args(["object", "subject"])))]
    Find {
        /// Store file.
        store: PathBuf,
        /// Object to look up (prints its subjects).
        #[arg(long)]
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
        /// A damaged store: read blocks that fail their checksum for their
        /// sound slots, take a tag from its subject half when its object
        /// half is unreadable, and say on stderr which blocks were damaged.
        #[arg(long)]
        salvage: bool,
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
        #[command(flatten)]
        opts: CloudOpts,
    },
    /// Print the node of a nutcracker pool that holds each key (KEY<TAB>NODE),
    /// placed exactly as nutcracker 0.5.0 places it (ketama).
    Ring(cluster::RingArgs),
    /// Tools over the nodes of a nutcracker pool of `tagstore serve` nodes:
    /// cloud, repair, reshard.
    #[command(subcommand)]
    Cluster(cluster::tools::ClusterCmd),
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
        /// Re-hash for this many tags at 70 % fill, keeping the bucket sizes
        /// unless given (default: the bucket count and sizes of the smallest
        /// file for the live tags; bucket sizes given alone are kept).
        #[arg(long)]
        expected_tags: Option<u64>,
        /// Keep the current primary bucket count instead of re-sizing for
        /// the live tags.
        #[arg(long, conflicts_with = "expected_tags")]
        keep_buckets: bool,
        #[command(flatten)]
        buckets: Buckets,
        /// Print the before/after summary as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Serve the store over the Redis protocol (RESP2, RESP3): each key a set of
    /// subjects (`o:<len>:<rel>:<object>`) or objects (`s:<len>:<rel>:<subject>`).
    Serve(serve::ServeArgs),
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
    #[arg(
        required_unless_present = "file",
        conflicts_with = "file",
        requires_all = ["relationship", "subject"]
    )]
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
    /// With --file: skip a line that is not a valid tag (malformed, not
    /// UTF-8, a string longer than 65,536 bytes) instead of stopping; the
    /// first 10 are named on stderr, and the summary counts them all.
    #[arg(long, requires = "file")]
    skip_bad: bool,
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

/// A CLI failure.
enum Fail {
    /// An error (exit 1): the message printed after "error: ".
    Error(String),
    /// A usage error (exit 2) of a subcommand, printed with its usage by clap.
    Usage(&'static str, String),
}

impl From<Error> for Fail {
    fn from(e: Error) -> Self {
        match e {
            Error::NotFound(p) => Fail::Error(format!(
                "{}: no such store file (create one with `tagstore create {}`)",
                p.display(),
                p.display()
            )),
            // A damaged block: most tags are in two blocks (double tagging).
            Error::Corrupt(m) if m.contains("fails its checksum") => Fail::Error(format!(
                "store is corrupt: {m}\nhint: `tagstore export STORE --salvage` prints every tag \
                 with a readable half (a read-only command: it changes nothing)"
            )),
            // A `--wait N` that ran out says so (a review, 2026-11-30: the
            // message was the one of an open that never waited).
            Error::Locked(p) if wait().is_some() => {
                let s = wait().map_or(0.0, |d| d.as_secs_f64());
                // A wait under the grace waits the grace (`pager/file.rs`).
                let grace = match s < 0.1 {
                    true => ", and the 0.1 s grace",
                    false => "",
                };
                Fail::Error(format!(
                    "{} (gave up after the --wait of {s} s{grace})",
                    Error::Locked(p)
                ))
            }
            // `create` over a directory, FIFO or device: named as such,
            // not as a file that exists.
            Error::AlreadyExists(p) if !is_regular_file(&p) => {
                Fail::Error(Error::NotARegularFile(p).to_string())
            }
            Error::NotAStore(p) | Error::AlreadyExists(p) if zero_head(&p) => Fail::Error(format!(
                "{}\nhint: its first block is all zeros, as a `tagstore create` killed before \
                 it finished leaves it: if that is what happened, delete the file and create \
                 the store again",
                Error::NotAStore(p)
            )),
            e => Fail::Error(e.to_string()),
        }
    }
}

/// True when `path` is (or links to) a regular file.
fn is_regular_file(path: &std::path::Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.is_file())
}

/// True when `path` is a regular file of at least one block whose first
/// block is all zeros (a create killed before its superblock was written).
fn zero_head(path: &std::path::Path) -> bool {
    use std::io::Read;
    let mut head = vec![0u8; 4096];
    // Only a regular file is read: opening a FIFO would block.
    if !is_regular_file(path) {
        return false;
    }
    std::fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut head))
        .is_ok_and(|()| head.iter().all(|&b| b == 0))
}

impl From<String> for Fail {
    fn from(m: String) -> Self {
        Fail::Error(m)
    }
}

/// How long commands wait for a lock (`--wait`), set once from the command line.
static WAIT: std::sync::OnceLock<Option<Duration>> = std::sync::OnceLock::new();

fn wait() -> Option<Duration> {
    WAIT.get().copied().flatten()
}

/// Opens a store for reading, waiting for its lock as `--wait` says.
/// A store left unclean is recovered in memory, again by every read-only
/// command until a writing one recovers it on disk: a note on stderr says
/// so (a review's FINDs after a crash took 3.7 s each, unexplained).
fn open_ro(path: &std::path::Path) -> tagstore::Result<Store> {
    let s = Store::open_with_options(
        path,
        &tagstore::OpenOptions {
            read_only: true,
            wait: wait(),
        },
    )
    .map_err(|e| naming(path, e))?;
    if s.recovered_on_open() {
        say_err!(
            "note: {} was not closed cleanly: this command recovered it in memory, as every \
             read-only command will until a writing one recovers it on disk (for instance \
             `tagstore insert {} --file /dev/null`)",
            path.display(),
            path.display()
        );
    }
    Ok(s)
}

/// Opens a damaged store for `export --salvage`, waiting as `--wait` says.
fn open_salvage(path: &std::path::Path) -> tagstore::Result<Store> {
    let opts = tagstore::OpenOptions {
        read_only: true,
        wait: wait(),
    };
    Store::open_salvage(path, &opts).map_err(|e| naming(path, e))
}

/// What `export --salvage` says on stderr once every tag is out.
fn salvage_summary(tags: u64, from_subject: u64, lost: u64, bad: &[u64]) -> String {
    let mut head = format!("salvaged {tags} tags ({from_subject} of them from the subject half)");
    if lost > 0 {
        head += &format!(
            "; {lost} tags left out: a long string they name is lost from the strings file"
        );
    }
    if bad.is_empty() {
        return format!("{head}; every block was readable");
    }
    let list: Vec<String> = bad.iter().take(20).map(u64::to_string).collect();
    let more = match bad.len() > 20 {
        true => format!(" and {} more", bad.len() - 20),
        false => String::new(),
    };
    let blocks = match bad.len() {
        1 => "1 damaged block".to_string(),
        n => format!("{n} damaged blocks"),
    };
    format!(
        "{head}; {blocks}, read for their sound slots only: {}{more} (a tag is lost only if both its halves were in damaged slots)",
        list.join(", ")
    )
}

/// Opens a store for writing, waiting for its lock as `--wait` says.
fn open_rw(path: &std::path::Path) -> tagstore::Result<Store> {
    Store::open_with_options(
        path,
        &tagstore::OpenOptions {
            read_only: false,
            wait: wait(),
        },
    )
    .map_err(|e| naming(path, e))
}

/// A corrupt store's error with the file it is about (the library's names
/// only the block: the caller knows the path).
fn naming(path: &std::path::Path, e: tagstore::Error) -> tagstore::Error {
    match e {
        tagstore::Error::Corrupt(m) => tagstore::Error::Corrupt(format!("{}: {m}", path.display())),
        e => e,
    }
}

/// The command line with each bare `--wait` (one not followed by a number
/// of seconds or `inf`) written `--wait=inf`, so that it may stand
/// anywhere: clap takes the word after a `--wait` as its value, and
/// `tagstore --wait insert S …` failed with `unrecognized subcommand 'S'`
/// (a review's finding).
fn bare_waits(args: impl Iterator<Item = std::ffi::OsString>) -> Vec<std::ffi::OsString> {
    let mut args: Vec<std::ffi::OsString> = args.collect();
    let mut i = 1;
    while i < args.len() {
        if args[i] == "--" {
            break;
        }
        if args[i] == "--wait" {
            // A word written as a number (digits, a point or a sign first;
            // not `nan` or `infinity`, which could be a store's name) is
            // the wait's value even when not a valid one: joined to it,
            // `--wait -1` is refused as a wait, not as a stray option.
            let numeric = |v: &str| {
                v == "inf"
                    || (v.parse::<f64>().is_ok()
                        && v.starts_with(|c: char| c.is_ascii_digit() || ".+-".contains(c)))
            };
            match args.get(i + 1).and_then(|v| v.to_str()) {
                Some(v) if numeric(v) => {
                    args[i] = format!("--wait={v}").into();
                    args.remove(i + 1);
                }
                _ => args[i] = "--wait=inf".into(),
            }
        }
        i += 1;
    }
    args
}

fn main() -> ExitCode {
    // A file-size limit (`ulimit -f`) makes a write past it fail with EFBIG,
    // reported like a full disk (what was done, what stays), instead of
    // killing the process with SIGXFSZ mid-write, silent and unclean.
    // SAFETY: setting a signal's disposition to "ignore" before any thread
    // starts; no handler runs.
    unsafe {
        libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
    }
    let cli = Cli::parse_from(bare_waits(std::env::args_os()));
    let _ = WAIT.set(cli.wait.map(|w| w.0));
    match run(cli) {
        Ok(code) => code,
        Err(Fail::Error(m)) => {
            let _ = writeln!(io::stderr(), "error: {m}");
            ExitCode::FAILURE
        }
        Err(Fail::Usage(sub, m)) => {
            let mut cmd = Cli::command();
            cmd.build();
            let e = match cmd.find_subcommand_mut(sub) {
                Some(sc) => sc.error(ErrorKind::ValueValidation, m),
                None => cmd.error(ErrorKind::ValueValidation, m),
            };
            let _ = e.print();
            ExitCode::from(2)
        }
    }
}

/// Prints the results through `out`, then flushes it: a write error fails the command.
fn finish(out: Out, code: ExitCode) -> Result<ExitCode, Fail> {
    out.finish()?;
    Ok(code)
}

/// The bucket options `create` and `maintain` share.
#[derive(Args)]
struct Buckets {
    /// Primary buckets per half (overrides --expected-tags).
    #[arg(long)]
    primary_buckets: Option<u32>,
    /// 4 KB blocks per primary bucket.
    #[arg(long)]
    blocks_per_primary: Option<u32>,
    /// 4 KB blocks per secondary (overflow) bucket.
    #[arg(long)]
    blocks_per_secondary: Option<u32>,
}

impl Buckets {
    /// Checks the values given against the store's limits, before any file
    /// is touched: a bad value is a usage error of `sub`.
    fn check(&self, sub: &'static str) -> Result<(), Fail> {
        let g = Geometry {
            primary_buckets_per_half: self.primary_buckets.unwrap_or(1),
            blocks_per_primary: self.blocks_per_primary.unwrap_or(1),
            blocks_per_secondary: self.blocks_per_secondary.unwrap_or(1),
        };
        g.validate().map_err(|e| Fail::Usage(sub, e.to_string()))
    }
}

/// `--expected-tags N` with primary buckets of `bp` blocks: refused (exit
/// 1, as README.md says), naming the flag and the limit, past the largest
/// store a size may start.
fn check_expected_tags(n: u64, bp: u32) -> Result<(), Fail> {
    let max = Geometry::max_expected_tags(bp);
    match n > max {
        true => Err(Fail::Error(format!(
            "invalid argument: --expected-tags {n}: at most {max} with {bp}-block primary buckets (a store sized for more would need over 8 TiB before its first tag)"
        ))),
        false => Ok(()),
    }
}

/// Bytes of memory an open store keeps per primary bucket (its table
/// entries and accelerators, both halves; measured: 1.47 GB for 2·10⁷
/// buckets per half).
const TABLE_BYTES_PER_BUCKET: u64 = 37;

/// Refuses (exit 1, before any file is touched) a geometry whose bucket
/// tables, kept in memory whenever the store is open, would take more
/// than half this machine's memory: the create or maintain could run it
/// out of memory, and so could every later open (a review's
/// `--expected-tags` near the 8 TiB bound wanted some 20 GB for a plain
/// `find`).
/// `by_tags`: the geometry was sized from a tag count, so the refusal also
/// gives the largest count that fits.
fn check_table_memory(g: &Geometry, by_tags: bool) -> Result<(), Fail> {
    let needed = u64::from(g.primary_buckets_per_half) * 2 * TABLE_BYTES_PER_BUCKET;
    // SAFETY: sysconf reads a system value.
    let (pages, page) = unsafe {
        (
            libc::sysconf(libc::_SC_PHYS_PAGES),
            libc::sysconf(libc::_SC_PAGESIZE),
        )
    };
    let ram = u64::try_from(pages).unwrap_or(0) * u64::try_from(page).unwrap_or(0);
    // Half the machine: more leaves too little for the page cache that
    // serves the store's blocks (a store sized so that its tables needed
    // 18.6 GB of a 24 GB machine took 48 s to create and 108 s to open
    // for one FIND).
    if ram == 0 || needed <= ram / 2 {
        return Ok(());
    }
    let gb = |b: u64| b as f64 / 1e9;
    let max_buckets = ram / 2 / (2 * TABLE_BYTES_PER_BUCKET);
    let most = match by_tags {
        true => format!(
            "for at most {} tags here ({max_buckets} primary buckets per half)",
            most_tags_within(max_buckets, g)
        ),
        false => format!("with at most {max_buckets} primary buckets per half here"),
    };
    Err(Fail::Error(format!(
        "invalid argument: {} primary buckets per half would keep about {:.1} GB of bucket tables \
         in memory whenever the store is open, more than half of this machine's {:.1} GB: size it \
         {most}, or give no size and let the store grow as tags arrive",
        g.primary_buckets_per_half,
        gb(needed),
        gb(ram)
    )))
}

/// The largest tag count whose geometry (with `g`'s block counts) has at
/// most `max_buckets` primary buckets per half.
fn most_tags_within(max_buckets: u64, g: &Geometry) -> u64 {
    let fits = |n: u64| {
        let s = Geometry::sized(n, g.blocks_per_primary, g.blocks_per_secondary);
        u64::from(s.primary_buckets_per_half) <= max_buckets
    };
    let (mut lo, mut hi) = (
        0u64,
        Geometry::max_expected_tags(g.blocks_per_primary.max(1)),
    );
    if fits(hi) {
        return hi;
    }
    // fits(lo) and not fits(hi): the bucket count grows with the tags.
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        match fits(mid) {
            true => lo = mid,
            false => hi = mid,
        }
    }
    lo
}

fn run(cli: Cli) -> Result<ExitCode, Fail> {
    let mut out = Out::new();
    match cli.cmd {
        Cmd::Create {
            store,
            expected_tags,
            buckets,
            seed,
            half_only,
        } => {
            buckets.check("create")?;
            let opts = CreateOptions {
                expected_tags: expected_tags.unwrap_or(0),
                primary_buckets_per_half: buckets.primary_buckets,
                blocks_per_primary: buckets.blocks_per_primary,
                blocks_per_secondary: buckets.blocks_per_secondary,
                seed,
            };
            if let Some(n) = expected_tags.filter(|_| buckets.primary_buckets.is_none()) {
                check_expected_tags(n, opts.geometry().blocks_per_primary)?;
            }
            check_table_memory(
                &opts.geometry(),
                opts.primary_buckets_per_half.is_none() && opts.expected_tags > 0,
            )?;
            let s = match half_only {
                true => Store::create_half_only(&store, &opts)?,
                false => Store::create(&store, &opts)?,
            };
            let g = s.geometry();
            s.close()?;
            say!(
                out,
                "created {}: {} primary buckets per half of {} blocks, secondary buckets of {} blocks{}",
                store.display(),
                g.primary_buckets_per_half,
                g.blocks_per_primary,
                g.blocks_per_secondary,
                if half_only { ", half-only" } else { "" }
            );
            out.finish()
                .map_err(|e| format!("{e} (the store {} was created)", store.display()))?;
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Insert(c) => change(c, Verb::new(true), out),
        Cmd::Delete(c) => change(c, Verb::new(false), out),
        Cmd::Find {
            store,
            object,
            subject,
            relationship,
            limit,
        } => {
            let s = open_ro(&store)?;
            let it = match (&object, &subject) {
                (Some(o), _) => s.find_subjects(o, &relationship),
                (None, Some(sub)) => s.find_objects(sub, &relationship),
                (None, None) => {
                    return Err(Fail::Usage("find", "give --object or --subject".into()))
                }
            };
            for r in it.take(limit.map_or(usize::MAX, |l| l.min(usize::MAX as u64) as usize)) {
                let v = r?;
                if !out.text(&tsv::escaped(&v)) {
                    break;
                }
            }
            finish(out, ExitCode::SUCCESS)
        }
        Cmd::Export { store, salvage } => {
            let s = match salvage {
                true => open_salvage(&store)?,
                false => open_ro(&store)?,
            };
            let mut tags = match salvage {
                true => s.salvaged_tags(),
                false => s.tags(),
            };
            let mut n = 0u64;
            for (i, t) in (&mut tags).enumerate() {
                n += 1;
                let line = tsv::format_tag(&t?);
                // A load drops a byte order mark at the start of its input:
                // write one ahead of a first tag that starts with U+FEFF, so
                // export then `insert --file` still round-trips it.
                let bom = if i == 0 && line.starts_with(tsv::BOM) {
                    tsv::BOM
                } else {
                    ""
                };
                if !say!(out, "{bom}{line}") {
                    break;
                }
            }
            if salvage {
                say_err!(
                    "{}",
                    salvage_summary(
                        n,
                        tags.from_subject_half(),
                        tags.lost_to_strings(),
                        &s.unreadable_blocks()
                    )
                );
            }
            finish(out, ExitCode::SUCCESS)
        }
        Cmd::Count {
            store,
            subject,
            relationship,
        } => {
            let s = open_ro(&store)?;
            say!(out, "{}", s.count(&subject, &relationship)?);
            finish(out, ExitCode::SUCCESS)
        }
        Cmd::Cloud { store, opts } => {
            let s = open_ro(&store)?;
            print_cloud(&mut out, &s.cloud(&opts.relationship, opts.top)?, opts.json)?;
            finish(out, ExitCode::SUCCESS)
        }
        Cmd::Ring(a) => {
            cluster::ring(&a, &mut out)?;
            finish(out, ExitCode::SUCCESS)
        }
        Cmd::Cluster(c) => {
            cluster::tools::run(&c, &mut out)?;
            finish(out, ExitCode::SUCCESS)
        }
        Cmd::Stats { store, json } => {
            let s = open_ro(&store)?;
            let st = s.stats()?;
            if json {
                let j = serde_json::to_string_pretty(&st).map_err(|e| e.to_string())?;
                say!(out, "{j}");
            } else {
                print_stats(&mut out, &st);
            }
            finish(out, ExitCode::SUCCESS)
        }
        Cmd::Maintain {
            store,
            expected_tags,
            keep_buckets,
            buckets,
            json,
        } => {
            buckets.check("maintain")?;
            // With no size given, the library chooses the bucket count (and
            // the bucket sizes not given) that make the smallest file.
            let planned =
                expected_tags.is_none() && !keep_buckets && buckets.primary_buckets.is_none();
            // Otherwise the geometry asked for, from the store's sizes.
            let geometry = if planned {
                None
            } else {
                let (cur, live) = {
                    let s = open_ro(&store)?;
                    (s.geometry(), s.len())
                };
                let bp = buckets.blocks_per_primary.unwrap_or(cur.blocks_per_primary);
                let bs = buckets
                    .blocks_per_secondary
                    .unwrap_or(cur.blocks_per_secondary);
                if let Some(n) = expected_tags.filter(|_| buckets.primary_buckets.is_none()) {
                    check_expected_tags(n, bp)?;
                }
                let mut g = match expected_tags {
                    Some(n) => Geometry::sized(n, bp, bs),
                    None if keep_buckets => Geometry {
                        blocks_per_primary: bp,
                        blocks_per_secondary: bs,
                        ..cur
                    },
                    None => Geometry::sized(live, bp, bs),
                };
                if let Some(p) = buckets.primary_buckets {
                    g.primary_buckets_per_half = p;
                }
                let by_tags = expected_tags.is_some() && buckets.primary_buckets.is_none();
                check_table_memory(&g, by_tags)?;
                Some(g)
            };
            let bar = progress::maintain_reading(ProgressDrawTarget::stderr());
            let opts = tagstore::MaintainOptions {
                geometry,
                blocks_per_primary: buckets.blocks_per_primary,
                blocks_per_secondary: buckets.blocks_per_secondary,
                keep_geometry: keep_buckets,
                wait: wait(),
            };
            let r = Store::maintain(&store, &opts, |done, total| {
                progress::maintain_copying(&bar, total);
                bar.set_position(done);
            });
            bar.finish_and_clear();
            let r = r?;
            if json {
                let j = serde_json::to_string_pretty(&r).map_err(|e| e.to_string())?;
                say!(out, "{j}");
            } else {
                print_maintain(&mut out, &r);
            }
            out.finish()
                .map_err(|e| format!("{e} (the store {} was compacted)", store.display()))?;
            Ok(ExitCode::SUCCESS)
        }
        // Prints only its `listening on ADDR` line, itself, at once.
        Cmd::Serve(a) => serve::run(a),
        Cmd::Check { store, json } => {
            // A store no plain open takes (a damaged block met by the table
            // rebuild after an unclean close) is checked as a salvage reads it.
            let (s, open_fault) = match open_ro(&store) {
                Ok(s) => (s, None),
                Err(Error::Corrupt(m)) => (open_salvage(&store)?, Some(m)),
                Err(e) => return Err(e.into()),
            };
            let mut r = s.check()?;
            if let Some(m) = open_fault {
                let f = format!("open: {m} (the rest is checked as `export --salvage` reads it)");
                r.faults.insert(0, f);
            }
            if json {
                let j = serde_json::to_string_pretty(&r).map_err(|e| e.to_string())?;
                say!(out, "{j}");
            } else {
                for f in &r.faults {
                    say!(out, "fault: {f}");
                }
                for n in &r.notes {
                    say!(out, "note: {n}");
                }
                say!(
                    out,
                    "{}: {} blocks checked, {} tags, {} faults",
                    store.display(),
                    r.blocks_checked,
                    r.tags,
                    r.faults.len()
                );
            }
            if !r.ok() {
                // README's exit-code rule: exit 1 comes with an `error:`
                // line on stderr (the faults themselves are on stdout).
                say_err!(
                    "error: {}: check found {} fault{} (listed on stdout)",
                    store.display(),
                    r.faults.len(),
                    if r.faults.len() == 1 { "" } else { "s" }
                );
            }
            finish(
                out,
                if r.ok() {
                    ExitCode::SUCCESS
                } else {
                    ExitCode::FAILURE
                },
            )
        }
    }
}

/// `insert`/`delete` of one tag or of a `--file`.
fn change(c: Change, verb: Verb, out: Out) -> Result<ExitCode, Fail> {
    let sub = if verb.is_insert() { "insert" } else { "delete" };
    // Checked before the store is opened (clap checks the same; this is the backstop).
    if c.skip_bad && c.file.is_none() {
        return Err(Fail::Usage(sub, "--skip-bad applies to --file only".into()));
    }
    let input = match (c.file, c.object, c.relationship, c.subject) {
        (Some(file), None, None, None) => Ok(file),
        (None, Some(o), Some(r), Some(s)) => Err(Tag::new(o, r, s)),
        _ => {
            return Err(Fail::Usage(
                sub,
                "give OBJECT RELATIONSHIP SUBJECT, or --file FILE".into(),
            ))
        }
    };
    let store = open_rw(&c.store)?;
    if let Err(e) = store.set_durability(c.durability.into()) {
        let _ = store.close();
        return Err(e.into());
    }
    match input {
        Err(tag) => change_one(store, &c.store, &tag, verb, out),
        Ok(file) => change_file(store, &c.store, &file, verb, c.skip_bad, out),
    }
}

/// Inserts or deletes one tag and says which.
fn change_one(
    store: Store,
    path: &Path,
    tag: &Tag,
    verb: Verb,
    mut out: Out,
) -> Result<ExitCode, Fail> {
    let changed = if verb.is_insert() {
        store.insert(tag)
    } else {
        store.delete(tag)
    };
    let word = match (verb.is_insert(), changed) {
        (_, Err(e)) => {
            // Close cleanly anyway; the tag's own error is the one to report.
            let _ = store.close();
            return Err(e.into());
        }
        (true, Ok(true)) => "inserted",
        (true, Ok(false)) => "already present",
        (false, Ok(true)) => "deleted",
        (false, Ok(false)) => "not present",
    };
    if let Err(e) = store.close() {
        return Err(Fail::Error(format!(
            "{}: closing the store: {e}; the tag was {word} before it",
            path.display()
        )));
    }
    say!(out, "{word}");
    out.finish()
        .map_err(|e| format!("{e} (the tag was {word})"))?;
    Ok(ExitCode::SUCCESS)
}

/// Applies a TSV file; on any failure says exactly what was applied before it.
fn change_file(
    store: Store,
    path: &Path,
    file: &Path,
    verb: Verb,
    skip_bad: bool,
    mut out: Out,
) -> Result<ExitCode, Fail> {
    let started = Instant::now();
    let mut tally = Tally::default();
    let loaded = load::load(&store, file, verb, &mut tally, skip_bad);
    // Whatever happened, close: what was applied is kept if it can be.
    let closed = store.close();
    let applied = tally.before_error(verb);
    let lines = tally.lines;
    match (loaded, closed) {
        (Err(m), Ok(())) => Err(Fail::Error(format!("{m}; {applied} {}", verb.stands()))),
        (Err(m), Err(e)) => Err(Fail::Error(format!(
            "{m}; {applied}, {lines} lines read, were applied, but closing the store \
             then failed too: {e} (the next open recovers it)"
        ))),
        (Ok(()), Err(e)) => Err(Fail::Error(format!(
            "{}: closing the store: {e}; {applied}, {lines} lines read, were applied, \
             but the store was not closed cleanly (the next open recovers it)",
            path.display()
        ))),
        (Ok(()), Ok(())) => {
            let secs = started.elapsed().as_secs_f64();
            let summary = format!(
                "{} in {secs:.2} s ({:.0} lines/s, including the final flush)",
                tally.summary(verb),
                lines as f64 / secs.max(1e-9)
            );
            say!(out, "{summary}");
            out.finish()
                .map_err(|e| format!("{e}; the load itself succeeded: {summary}"))?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// The before/after table of `maintain`.
/// What a tag cloud shows and how: the options of `cloud` and `cluster cloud`.
#[derive(Args)]
struct CloudOpts {
    /// Relationship.
    #[arg(long)]
    relationship: String,
    /// How many subjects.
    #[arg(long, default_value_t = 50)]
    top: usize,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

/// A tag cloud as `cloud` and `cluster cloud` print it: pretty JSON, or
/// one `SUBJECT<TAB>COUNT<TAB>WEIGHT` line per entry.
fn print_cloud(out: &mut Out, cloud: &[tagstore::CloudEntry], json: bool) -> Result<(), String> {
    if json {
        let j = serde_json::to_string_pretty(cloud).map_err(|e| e.to_string())?;
        say!(out, "{j}");
    } else {
        for e in cloud {
            if !say!(
                out,
                "{}\t{}\t{:.2}",
                tsv::escape(&e.subject),
                e.count,
                e.weight
            ) {
                break;
            }
        }
    }
    Ok(())
}

fn print_maintain(out: &mut Out, r: &tagstore::MaintainReport) {
    let (b, a) = (&r.before, &r.after);
    say!(out, "{:<26}{:>16}{:>16}", "", "before", "after");
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
        say!(out, "{name:<26}{x:>16}{y:>16}");
    }
    say!(out, "took {:.2} s", r.seconds);
}

/// The text form of `stats`.
fn print_stats(out: &mut Out, s: &tagstore::Stats) {
    let g = &s.geometry;
    if s.half_only {
        say!(
            out,
            "tags                     {} halves (a half-only store counts each half it holds)",
            s.tags
        );
    } else {
        say!(out, "tags                     {}", s.tags);
    }
    say!(
        out,
        "geometry                 {} primary buckets per half x {} blocks; secondary buckets of {} blocks",
        g.primary_buckets_per_half, g.blocks_per_primary, g.blocks_per_secondary
    );
    let gr = &s.growth;
    if gr.grows {
        say!(
            out,
            "growth                   format {}, level {} from {} buckets per half, split pointer {}, splits past {:.0}% fill{}",
            gr.format_version,
            gr.level,
            gr.base_buckets_per_half,
            gr.split_pointer,
            gr.split_fill * 100.0,
            if gr.split_allowance > 0 {
                format!(" + {} tags (packed by maintain)", gr.split_allowance)
            } else {
                String::new()
            }
        );
    } else {
        say!(
            out,
            "growth                   format {}: fixed geometry (`tagstore maintain` upgrades to format 2, which grows)",
            gr.format_version
        );
    }
    say!(
        out,
        "primary buckets          {} ({} used, {} full, fill {:.1}%)",
        s.primary_buckets,
        s.primary_buckets_used,
        s.primary_buckets_full,
        s.primary_fill * 100.0
    );
    say!(
        out,
        "tags per primary bucket  mean {:.2}, stddev {:.2} (uniform hash ideal {:.2}), max {}",
        s.load_mean,
        s.load_stddev,
        s.load_stddev_ideal,
        s.load_max
    );
    say!(
        out,
        "secondary buckets        {} ({} linked, {} free)",
        s.secondary_buckets,
        s.secondary_linked,
        s.secondary_free
    );
    say!(
        out,
        "chains                   {} primary buckets with overflow, longest {} secondary buckets",
        s.chains,
        s.longest_chain
    );
    say!(out, "holes                    {}", s.holes);
    say!(
        out,
        "file                     {} bytes ({} allocated, {:.0} bytes per tag)",
        s.file_bytes,
        s.allocated_bytes,
        s.allocated_bytes_per_tag
    );
    for a in &s.advice {
        say!(out, "advice                   {a}");
    }
}
