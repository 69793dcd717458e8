//! Latency summaries, the machine description, and plain-text tables.

use serde::Serialize;
use std::time::Duration;

/// Summary of many timed operations.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Lat {
    pub ops: usize,
    pub total_s: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub mean_us: f64,
    /// The slowest operation.
    pub max_us: f64,
    /// Tags the operations returned in all.
    pub results: u64,
    /// Bytes of the returned subjects/objects in all (every engine must agree).
    pub bytes: u64,
}

impl Lat {
    pub fn new(mut ns: Vec<u64>, total: Duration, results: u64) -> Lat {
        ns.sort_unstable();
        let pct = |p: f64| {
            if ns.is_empty() {
                return 0.0;
            }
            let i = ((p * ns.len() as f64).ceil() as usize).clamp(1, ns.len()) - 1;
            ns[i] as f64 / 1e3
        };
        let ops = ns.len();
        Lat {
            ops,
            total_s: total.as_secs_f64(),
            p50_us: pct(0.50),
            p99_us: pct(0.99),
            mean_us: if ops == 0 {
                0.0
            } else {
                ns.iter().sum::<u64>() as f64 / ops as f64 / 1e3
            },
            max_us: ns.last().map_or(0.0, |&n| n as f64 / 1e3),
            results,
            bytes: 0,
        }
    }
    /// The same summary, recording `bytes` of results.
    pub fn with_bytes(self, bytes: u64) -> Lat {
        Lat { bytes, ..self }
    }
    pub fn ops_per_s(&self) -> f64 {
        self.ops as f64 / self.total_s.max(1e-12)
    }
    pub fn results_per_s(&self) -> f64 {
        self.results as f64 / self.total_s.max(1e-12)
    }
}

/// What the numbers were measured on.
#[derive(Clone, Debug, Serialize)]
pub struct Machine {
    pub nproc: usize,
    pub cpu_model: String,
    pub mem_total: String,
    pub kernel: String,
    pub rustc: String,
    pub git_commit: String,
    pub date_utc: String,
}

fn cmd(c: &str, args: &[&str]) -> Option<String> {
    let o = std::process::Command::new(c).args(args).output().ok()?;
    o.status
        .success()
        .then(|| String::from_utf8_lossy(&o.stdout).trim().to_string())
}

impl Machine {
    pub fn probe() -> Machine {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let field = |text: &str, key: &str| {
            text.lines()
                .find(|l| l.starts_with(key))
                .and_then(|l| l.split(':').nth(1))
                .map(|v| v.trim().to_string())
                .unwrap_or_else(|| "unknown".into())
        };
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let repo = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
        let commit = cmd("git", &["-C", repo, "rev-parse", "--short=12", "HEAD"])
            .unwrap_or_else(|| "unknown".into());
        let dirty = cmd(
            "git",
            &[
                "-C",
                repo,
                "status",
                "--porcelain",
                "--untracked-files=no",
                "--",
                "src",
            ],
        )
        .is_some_and(|s| !s.is_empty());
        Machine {
            nproc: std::thread::available_parallelism().map_or(0, |n| n.get()),
            cpu_model: field(&cpuinfo, "model name"),
            mem_total: field(&meminfo, "MemTotal"),
            kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .map(|s| s.trim().to_string())
                .unwrap_or_else(|_| "unknown".into()),
            rustc: cmd("rustc", &["-V"]).unwrap_or_else(|| "unknown".into()),
            git_commit: if dirty {
                format!("{commit} + uncommitted changes in src/")
            } else {
                commit
            },
            date_utc: cmd("date", &["-u", "+%Y-%m-%d %H:%M UTC"]).unwrap_or_default(),
        }
    }

    pub fn print(&self) {
        println!(
            "machine: {} cores, {}, {} RAM, Linux {}",
            self.nproc, self.cpu_model, self.mem_total, self.kernel
        );
        println!(
            "build:   {}, tagstore commit {}, {}",
            self.rustc, self.git_commit, self.date_utc
        );
    }
}

/// Formats a number for a table: thousands separators for large values.
pub fn num(v: f64) -> String {
    if !v.is_finite() {
        return "-".into();
    }
    let a = v.abs();
    if a >= 10_000.0 {
        let s = format!("{:.0}", v.abs());
        let mut out = String::new();
        for (i, c) in s.chars().enumerate() {
            if i > 0 && (s.len() - i) % 3 == 0 {
                out.push(',');
            }
            out.push(c);
        }
        if v < 0.0 {
            out.insert(0, '-');
        }
        out
    } else if a >= 100.0 {
        format!("{v:.0}")
    } else if a >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// Prints rows as an aligned table; the first column is left-aligned.
pub fn print_table(header: &[String], rows: &[Vec<String>]) {
    let cols = header.len();
    let mut w = vec![0usize; cols];
    for r in std::iter::once(header).chain(rows.iter().map(|r| r.as_slice())) {
        for (i, c) in r.iter().enumerate() {
            w[i] = w[i].max(c.chars().count());
        }
    }
    let line = |r: &[String]| {
        let mut s = String::new();
        for (i, c) in r.iter().enumerate() {
            let pad = w[i] - c.chars().count();
            if i == 0 {
                s.push_str(c);
                s.push_str(&" ".repeat(pad));
            } else {
                s.push_str("  ");
                s.push_str(&" ".repeat(pad));
                s.push_str(c);
            }
        }
        println!("{}", s.trim_end());
    };
    line(header);
    let rule: Vec<String> = w.iter().map(|&n| "-".repeat(n)).collect();
    line(&rule);
    for r in rows {
        line(r);
    }
}

/// Prints rows as a Markdown table (for benches/README.md).
pub fn print_markdown(header: &[String], rows: &[Vec<String>]) {
    println!("| {} |", header.join(" | "));
    let rule: Vec<&str> = header
        .iter()
        .enumerate()
        .map(|(i, _)| if i == 0 { "---" } else { "---:" })
        .collect();
    println!("| {} |", rule.join(" | "));
    for r in rows {
        println!("| {} |", r.join(" | "));
    }
}
