//! `tagstore cluster cloud|repair|reshard`: tools that read (and mend) the
//! nodes of a nutcracker pool directly, each node a `tagstore serve`.
//!
//! A node keeps a whole tag for either of its writes, so besides the keys
//! the proxy routed to it, it shows "shadow" keys: `SADD o:…:photo1 sunset`
//! on node A also makes `s:…:sunset` readable on A, though that key's home
//! is usually another node. The tools therefore only believe a key on the
//! node `ring` places it on (its owner) and ignore its shadows.
//!
//! Memory: repair and reshard hold every owned key's members of the pool;
//! cloud the subjects of one relationship.

use super::client::{Client, Reply};
use super::config::Pool;
use super::ketama::Ring;
use super::load_pool;
use crate::out::{say, Out};
use clap::{Args, Subcommand};
use indicatif::{ProgressBar, ProgressDrawTarget};
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::Duration;
use tagstore::{tsv, CloudEntry};

/// `tagstore cluster` subcommands.
#[derive(Subcommand)]
pub enum ClusterCmd {
    /// The most used subjects of a relationship over the whole cluster,
    /// exact (each subject's set lives whole on its node).
    Cloud(CloudArgs),
    /// Make the `s:` halves agree with the `o:` halves (the truth): add
    /// missing `s:` members, remove those no `o:` key backs.
    Repair(RepairArgs),
    /// Copy the keys whose node changes from OLD_CONFIG to NEW_CONFIG to
    /// their new node; with --remove, delete them from their old node.
    Reshard(super::reshard::ReshardArgs),
}

/// Options every cluster tool takes.
#[derive(Args)]
pub struct Common {
    /// The pool to use when the file defines several.
    #[arg(long)]
    pub(super) pool: Option<String>,
    /// Seconds to wait for a node to accept a connection or answer.
    #[arg(long, default_value_t = 30)]
    pub(super) timeout: u64,
}

#[derive(Args)]
pub struct CloudArgs {
    /// nutcracker's configuration file (YAML).
    config: PathBuf,
    #[command(flatten)]
    opts: crate::CloudOpts,
    #[command(flatten)]
    common: Common,
}

#[derive(Args)]
pub struct RepairArgs {
    /// nutcracker's configuration file (YAML).
    config: PathBuf,
    /// Report what would be fixed, change nothing.
    #[arg(long)]
    dry_run: bool,
    #[command(flatten)]
    common: Common,
}

/// Runs a cluster subcommand.
pub fn run(cmd: &ClusterCmd, out: &mut Out) -> Result<(), String> {
    match cmd {
        ClusterCmd::Cloud(a) => cloud(a, out),
        ClusterCmd::Repair(a) => repair(a, out),
        ClusterCmd::Reshard(a) => super::reshard::reshard(a, out),
    }
}

/// A pool's nodes, connected, with the ring that places keys on them.
pub(super) struct Cluster {
    pub(super) ring: Ring,
    pub(super) labels: Vec<String>,
    pub(super) nodes: Vec<Client>,
    /// Says which step runs (a spinner on a terminal, else nothing).
    pub(super) bar: ProgressBar,
}

impl Cluster {
    /// Connects to every node of `pool`; `bar` shows the steps.
    pub(super) fn connect(pool: &Pool, timeout: u64, bar: &ProgressBar) -> Result<Cluster, String> {
        let t = Duration::from_secs(timeout.max(1));
        bar.set_message(format!("connecting to {} nodes", pool.servers.len()));
        let nodes = pool
            .servers
            .iter()
            .map(|s| {
                let mut c = Client::connect(&format!("{}:{}", s.host, s.port), t)
                    .map_err(|e| format!("node {}: {e}", s.label()))?;
                c.name(&s.label());
                Ok::<Client, String>(c)
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Cluster {
            ring: Ring::new(pool),
            labels: pool.servers.iter().map(|s| s.label()).collect(),
            nodes,
            bar: bar.clone(),
        })
    }

    /// Every owned key matching `pattern` on every node, with its members;
    /// the nodes read at once (a thread each).
    fn owned_sets(&mut self, pattern: &str) -> Result<Vec<BTreeMap<String, Vec<String>>>, String> {
        let n = self.nodes.len();
        self.bar.set_message(format!(
            "reading the {pattern} keys of {n} nodes and their members"
        ));
        self.each_node(|i, node, ring| {
            let keys = owned_keys(node, i, ring, pattern)?;
            let members = node.members(&keys)?;
            Ok(keys.into_iter().zip(members).collect())
        })
    }

    /// `work(i, node, ring)` for every node at once, a thread each (the
    /// nodes are other machines): the results in node order, or the first
    /// error once every thread has ended.
    pub(super) fn each_node<T: Send>(
        &mut self,
        work: impl Fn(usize, &mut Client, &Ring) -> Result<T, String> + Sync,
    ) -> Result<Vec<T>, String> {
        let (labels, ring, work) = (&self.labels, &self.ring, &work);
        std::thread::scope(|scope| {
            let running: Vec<_> = self
                .nodes
                .iter_mut()
                .enumerate()
                .map(|(i, node)| scope.spawn(move || work(i, node, ring)))
                .collect();
            let done: Vec<_> = running.into_iter().map(|t| t.join()).collect();
            done.into_iter()
                .enumerate()
                .map(|(i, r)| {
                    r.unwrap_or_else(|_| Err(format!("node {}: its reader failed", labels[i])))
                })
                .collect()
        })
    }

    /// Shows that node `i` is doing `what`.
    pub(super) fn step(&self, i: usize, what: &str) {
        let n = self.nodes.len();
        self.bar
            .set_message(format!("node {} ({}/{n}): {what}", self.labels[i], i + 1));
    }
}

/// The keys matching `pattern` that node `i` holds and owns (its shadows
/// left out: keys `ring` places on another node).
pub(super) fn owned_keys(
    node: &mut Client,
    i: usize,
    ring: &Ring,
    pattern: &str,
) -> Result<Vec<String>, String> {
    Ok(node
        .scan_all(pattern)?
        .into_iter()
        .filter(|k| ring.locate(k.as_bytes()) == i)
        .collect())
}

/// The spinner of a cluster tool (drawn only on a terminal).
pub(super) fn spinner() -> ProgressBar {
    crate::progress::cluster_step(ProgressDrawTarget::stderr())
}

/// A key taken apart: (`o` or `s`, relationship, name).
pub(super) fn parse_key(k: &str) -> Option<(char, &str, &str)> {
    let half = k.chars().next().filter(|c| *c == 'o' || *c == 's')?;
    let rest = k.get(1..)?.strip_prefix(':')?;
    let (len, rest) = rest.split_once(':')?;
    // As serve's `keys::MAX_LEN_DIGITS`: a relationship holds up to 65,536 bytes.
    if len.is_empty() || len.len() > 5 || !len.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let len: usize = len.parse().ok()?;
    let rel = rest.get(..len)?;
    let name = rest.get(len..)?.strip_prefix(':')?;
    Some((half, rel, name))
}

/// The key of a half.
pub(super) fn key(half: char, rel: &str, name: &str) -> String {
    format!("{half}:{}:{rel}:{name}", rel.len())
}

/// A pattern matching `text` literally (Redis glob escapes).
fn glob_escape(text: &str) -> String {
    let mut s = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            s.push('\\');
        }
        s.push(c);
    }
    s
}

/// `tagstore cluster cloud`.
fn cloud(a: &CloudArgs, out: &mut Out) -> Result<(), String> {
    let pool = load_pool(&a.config, a.common.pool.as_deref())?;
    let bar = spinner();
    let mut c = Cluster::connect(&pool, a.common.timeout, &bar)?;
    let prefix = key('s', &a.opts.relationship, "");
    let pattern = format!("{}*", glob_escape(&prefix));
    // (count, subject), sorted as a store's cloud: most used first, then
    // by subject.
    let n = c.nodes.len();
    bar.set_message(format!("counting the subjects' objects on {n} nodes"));
    let per_node = c.each_node(|i, node, ring| {
        let keys = owned_keys(node, i, ring, &pattern)?;
        let cmds: Vec<Vec<Vec<u8>>> = keys
            .iter()
            .map(|k| vec![b"SCARD".to_vec(), k.as_bytes().to_vec()])
            .collect();
        let mut counts = Vec::with_capacity(keys.len());
        for (k, r) in keys.iter().zip(node.pipeline(&cmds)?) {
            let Reply::Int(n) = r else {
                return Err(format!("{}: SCARD {k}: not an integer", node.label()));
            };
            let subject = k.get(prefix.len()..).unwrap_or_default();
            if n > 0 {
                counts.push((n as u64, subject.to_owned()));
            }
        }
        Ok(counts)
    })?;
    let mut all: Vec<(u64, String)> = per_node.into_iter().flatten().collect();
    bar.finish_and_clear();
    all.sort_by(|x, y| y.0.cmp(&x.0).then_with(|| x.1.cmp(&y.1)));
    all.truncate(a.opts.top);
    let (max, min) = (
        all.first().map_or(1, |x| x.0) as f64,
        all.last().map_or(1, |x| x.0) as f64,
    );
    // The weights as `tagstore cloud` computes them.
    let cloud: Vec<CloudEntry> = all
        .into_iter()
        .map(|(n, subject)| CloudEntry {
            subject,
            count: n,
            weight: if max > min {
                1.0 + 9.0 * ((n as f64).ln() - min.ln()) / (max.ln() - min.ln())
            } else {
                10.0
            },
        })
        .collect();
    crate::print_cloud(out, &cloud, a.opts.json)
}

/// A tag as (relationship, object, subject).
type Triple = (String, String, String);

/// `tagstore cluster repair`.
fn repair(a: &RepairArgs, out: &mut Out) -> Result<(), String> {
    let pool = load_pool(&a.config, a.common.pool.as_deref())?;
    let bar = spinner();
    let mut c = Cluster::connect(&pool, a.common.timeout, &bar)?;
    // The truth: every tag under an `o:` key on its owner.
    let mut truth: BTreeSet<Triple> = BTreeSet::new();
    let mut o_keys = 0usize;
    for sets in c.owned_sets("o:*")? {
        for (k, members) in sets {
            let Some(('o', rel, obj)) = parse_key(&k) else {
                continue;
            };
            o_keys += 1;
            for subj in members {
                truth.insert((rel.to_owned(), obj.to_owned(), subj));
            }
        }
    }
    // The `s:` halves, on their owners.
    let mut halves: BTreeSet<Triple> = BTreeSet::new();
    for sets in c.owned_sets("s:*")? {
        for (k, members) in sets {
            let Some(('s', rel, subj)) = parse_key(&k) else {
                continue;
            };
            for obj in members {
                halves.insert((rel.to_owned(), obj, subj.to_owned()));
            }
        }
    }
    let n = c.nodes.len();
    // Per node: s members to add, s members to remove.
    let mut add: Vec<Vec<Vec<Vec<u8>>>> = vec![Vec::new(); n];
    let mut remove: Vec<Vec<Vec<Vec<u8>>>> = vec![Vec::new(); n];
    let mut checks: Vec<Vec<Vec<Vec<u8>>>> = vec![Vec::new(); n];
    let mut orphans: Vec<Vec<(usize, Vec<Vec<u8>>)>> = vec![Vec::new(); n];
    for (rel, obj, subj) in truth.difference(&halves) {
        let k = key('s', rel, subj);
        let i = c.ring.locate(k.as_bytes());
        add[i].push(vec![
            b"SADD".to_vec(),
            k.into_bytes(),
            obj.as_bytes().to_vec(),
        ]);
    }
    for (rel, obj, subj) in halves.difference(&truth) {
        let k = key('s', rel, subj);
        let i = c.ring.locate(k.as_bytes());
        let ok = key('o', rel, obj);
        let oi = c.ring.locate(ok.as_bytes());
        // Checked again just before removing: a client may have written
        // the `o` half since it was read.
        checks[oi].push(vec![
            b"SISMEMBER".to_vec(),
            ok.into_bytes(),
            subj.as_bytes().to_vec(),
        ]);
        orphans[oi].push((
            i,
            vec![b"SREM".to_vec(), k.into_bytes(), obj.as_bytes().to_vec()],
        ));
    }
    if !a.dry_run {
        for (oi, cmds) in checks.iter().enumerate() {
            c.step(oi, &format!("checking {} orphans' o halves", cmds.len()));
            let replies = c.nodes[oi].pipeline(cmds)?;
            for (r, (i, srem)) in replies.into_iter().zip(orphans[oi].drain(..)) {
                if r == Reply::Int(0) {
                    remove[i].push(srem);
                }
            }
        }
    } else {
        for list in &mut orphans {
            for (i, srem) in list.drain(..) {
                remove[i].push(srem);
            }
        }
    }
    if !a.dry_run {
        for i in 0..n {
            c.step(
                i,
                &format!(
                    "adding {} s members, removing {}",
                    add[i].len(),
                    remove[i].len()
                ),
            );
            c.nodes[i].pipeline(&add[i])?;
            c.nodes[i].pipeline(&remove[i])?;
        }
    }
    bar.finish_and_clear();
    say!(
        out,
        "o halves: {} tags under {o_keys} keys; s halves: {} tags",
        truth.len(),
        halves.len()
    );
    say!(out, "node\ts_added\ts_removed");
    let (mut added, mut removed) = (0usize, 0usize);
    for i in 0..n {
        added += add[i].len();
        removed += remove[i].len();
        say!(
            out,
            "{}\t{}\t{}",
            tsv::escape(&c.labels[i]),
            add[i].len(),
            remove[i].len()
        );
    }
    let verb = if a.dry_run { "would add" } else { "added" };
    let verb2 = if a.dry_run { "would remove" } else { "removed" };
    say!(
        out,
        "{verb} {added} missing s members, {verb2} {removed} orphan s members"
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_parse() {
        assert_eq!(parse_key("o:3:isa:photo1"), Some(('o', "isa", "photo1")));
        assert_eq!(parse_key("s:3:a:b:x:y"), Some(('s', "a:b", "x:y")));
        // A relationship of a thousand bytes or more (up to 65,536).
        let rel = "r".repeat(1000);
        let k = format!("o:1000:{rel}:p");
        assert_eq!(parse_key(&k), Some(('o', rel.as_str(), "p")));
        assert_eq!(parse_key("s:0::"), Some(('s', "", "")));
        for bad in ["x:3:isa:p", "o:3isa:p", "o:9:isa:p", "o::isa:p", "o:3:isa"] {
            assert_eq!(parse_key(bad), None, "{bad}");
        }
        assert_eq!(glob_escape("a*b?[c]\\"), "a\\*b\\?\\[c\\]\\\\");
    }
}
